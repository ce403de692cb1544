//! The boot script of one node: EC2 user data, or GCP's `startup-script`.
//!
//! It writes the node's files to [`NODE_DIR`] (its settings, the task's
//! setup and run with the task's `envs`, and the node agent, `agent.sh`)
//! and starts the agent as a transient systemd unit, so that booting
//! completes while the task runs. Every user value is quoted with the
//! project's shell quoting ([`crate::shell`]); a value is written out with
//! `printf '%s'`, never expanded. The agent is the same on every node.

use super::request::number;
use crate::files::{Files, Mount, WORKDIR, under_home};
use crate::shell::{is_variable_name, quote};
use crate::storage::{self, MOUNT_SCRIPT, ToMount};
use skyc_compiler::ir::{Execution, Group, InterConnection, Task, Workdir};
use std::fmt::Write as _;

/// Where the node's files live on the VM; the runtime reads and writes
/// there (docs/targets/cloud.md, "The node's directory").
pub const NODE_DIR: &str = "/var/lib/skyc";

/// The node agent (`agent.sh` on the node), the same for every node: its
/// source without its comment lines ([`without_comments`]).
pub fn agent() -> &'static str {
    static AGENT: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| without_comments(include_str!("agent.sh")));
    &AGENT
}

/// The functions of a node's `mounts.sh` (its task's buckets mounted and
/// ended), before its own lines.
pub fn mounts_functions() -> &'static str {
    static MOUNTS: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| without_comments(include_str!("mounts.sh")));
    &MOUNTS
}

/// The functions of a node's `files.sh` (its task's files fetched,
/// checked and placed), before its `skyc_place` lines.
pub fn files_functions() -> &'static str {
    static FILES: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| without_comments(include_str!("files.sh")));
    &FILES
}

/// A script as the boot script carries it: EC2 takes 16 KiB of user data,
/// so the source's comment lines (which explain it to its readers, in
/// skyc's source) are left out, but for shellcheck's directives. The
/// scripts' every line starting with `#` is a comment: none is inside a
/// string or here-document.
fn without_comments(script: &str) -> String {
    script
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            !l.starts_with('#') || l.starts_with("# shellcheck")
        })
        .flat_map(|l| [l, "\n"])
        .collect()
}

/// Where a boot script's own part ends and the launcher (the same for
/// every node) begins.
pub const LAUNCHER_MARKER: &str = "# ---- skyc launcher: the same on every node ----";

/// Seconds the agent waits for the hosts file and secrets, as SkyPilot's
/// run prelude waits for the group's network (600 s).
pub(super) const WAIT_SECS: u64 = 600;

/// What one node's boot script says about the node.
pub(super) struct Node<'a> {
    pub group: &'a Group,
    pub task: &'a Task,
    /// The task's index in the group.
    pub index: usize,
    pub rank: u32,
    pub cloud: &'a str,
    pub region: &'a str,
    pub zone: Option<&'a str>,
    pub gpus: u64,
    /// `SKYPILOT_TASK_IDS` (the same for every node of the group).
    pub task_ids: &'a str,
    /// The group's files, when taken.
    pub files: Option<&'a Files>,
}

/// A value the script cannot carry: what and where.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Unrepresentable(pub String);

/// The boot script of `node`.
pub(super) fn script(node: &Node) -> Result<String, Unrepresentable> {
    let Node {
        group, task, rank, ..
    } = *node;
    let mut s = String::new();
    let _ = write!(
        s,
        "#!/bin/bash\n\
         # Built by skyc: the boot script of node {}-{rank}.{} (task {}, rank {rank} of {})\n\
         # of the {} {}. It writes the node's files to {NODE_DIR} and starts\n\
         # the skyc node agent there; see docs/targets/cloud.md.\n\
         set -u\n\
         skyc_dir={NODE_DIR}\n",
        task.name,
        group.name,
        task.name,
        task.num_nodes,
        match group.execution {
            Execution::Parallel => "Job Group",
            Execution::Serial => "pipeline",
        },
        group.name,
    );
    s.push_str(
        "# The node's settings, scripts and agent, written out unexpanded. Every\n\
         # line of node.env starts with `skyc_`, and the agent is skyc's own\n\
         # text, so neither holds its here-document's end line.\n\
         # shellcheck disable=SC2016,SC1003\n\
         skyc_write_files() {\n\
         \x20   cat >\"$1/node.env\" <<'SKYC_NODE_ENV'\n",
    );
    s.push_str(&settings(node)?);
    s.push_str("SKYC_NODE_ENV\n");
    let prelude = prelude(task)?;
    // A pool's worker runs no `run` of its own (SkyPilot ignores it): it
    // holds after setup, and each job it is handed starts from the task's
    // `envs` (`envs.sh`).
    let run = if group.pool.is_some() {
        let _ = writeln!(s, "    printf '%s' {} >\"$1/envs.sh\"", quote(&prelude));
        &None
    } else {
        &task.run
    };
    for (phase, text) in [("setup", &task.setup), ("run", run)] {
        if let Some(text) = text {
            check(text, &format!("`{phase}`"))?;
            let _ = writeln!(
                s,
                "    printf '%s' {} >\"$1/{phase}.sh\"",
                quote(&format!("{prelude}{text}"))
            );
        }
    }
    if let Some(places) = places(node)? {
        // Every destination is quoted onto one line (`quote`), so no line
        // is the here-document's end.
        s.push_str("    cat >\"$1/files.sh\" <<'SKYC_FILES'\n");
        s.push_str(files_functions());
        s.push_str(&places);
        s.push_str("SKYC_FILES\n");
    }
    // Written last: its presence says the files are complete.
    s.push_str("    cat >\"$1/agent.sh\" <<'SKYC_AGENT'\n");
    s.push_str(agent());
    s.push_str("SKYC_AGENT\n}\n");
    s.push_str(LAUNCHER);
    Ok(s)
}

/// Starts the agent once per VM. A second boot (a GCP startup script runs
/// at every boot) does not restart the task: the runtime sees the node as
/// lost and replaces it.
const LAUNCHER: &str = "# ---- skyc launcher: the same on every node ----
if [ -e \"$skyc_dir/agent.sh\" ]; then
    echo \"$EPOCHREALTIME boot again: the node's task is not restarted\" >>\"$skyc_dir/status\"
    exit 0
fi
umask 077
mkdir -p \"$skyc_dir/secrets\" \"$skyc_dir/files\" \"$skyc_dir/workdir\" && skyc_write_files \"$skyc_dir\" || exit 1
systemd-run --unit=skyc-agent --collect --quiet bash \"$skyc_dir/agent.sh\" \"$skyc_dir\" 2>/dev/null ||
    { setsid bash \"$skyc_dir/agent.sh\" \"$skyc_dir\" </dev/null >/dev/null 2>&1 & }
";

/// `node.env`: the settings the agent reads, as shell assignments.
fn settings(node: &Node) -> Result<String, Unrepresentable> {
    let Node {
        group,
        task,
        index,
        rank,
        cloud,
        region,
        zone,
        gpus,
        task_ids,
        files,
    } = *node;
    let hostnames = match group.inter_connection {
        InterConnection::Auto => "auto",
        InterConnection::Required => "required",
        InterConnection::Disabled => "off",
    };
    let group_nodes: u64 = group.tasks.iter().map(|t| u64::from(t.num_nodes)).sum();
    let cluster_info = serde_json::json!({
        "cluster_name": format!("{}-{}", group.name, task.name),
        "cloud": cloud_display(cloud),
        "region": region,
        "zone": zone,
    })
    .to_string();
    let (git_url, git_ref) = match &task.workdir {
        Some(Workdir::Git { url, r#ref }) => (url.as_str(), r#ref.as_deref().unwrap_or("")),
        _ => ("", ""),
    };
    check(git_url, "the git `workdir`")?;
    check(git_ref, "the git `workdir` ref")?;
    for name in &task.secrets {
        if !is_variable_name(name) {
            return Err(Unrepresentable(format!(
                "the secret `{}` cannot be a shell variable name",
                name.escape_debug()
            )));
        }
        // The node agent's own variables are `skyc_*`.
        if name.starts_with("skyc_") {
            return Err(Unrepresentable(format!(
                "the secret `{name}`: names starting with `skyc_` are the node agent's own"
            )));
        }
    }
    let mut s = String::new();
    let mut set = |k: &str, v: &str| {
        let _ = writeln!(s, "skyc_{k}={}", quote(v));
    };
    set("cloud", cloud);
    set("group", &group.name);
    set("task", &task.name);
    set("rank", &rank.to_string());
    set("num_nodes", &task.num_nodes.to_string());
    set("group_nodes", &group_nodes.to_string());
    set("gpus", &gpus.to_string());
    set("hostnames", hostnames);
    set("task_id", &task_id(cloud, &group.name, &task.name, index));
    set("task_ids", task_ids);
    set("cluster_info", &cluster_info);
    set("secrets", &task.secrets.join(" "));
    set("git_url", git_url);
    set("git_ref", git_ref);
    set("wait_secs", &number(WAIT_SECS as f64));
    // The snapshots the node fetches (hex digests), each once.
    let digests = files.map(|f| f.digests_of(index)).unwrap_or_default();
    if !digests.is_empty() {
        set("files", &digests.join(" "));
    }
    // The buckets the node mounts (`mounts.sh`), once the runtime has
    // delivered the credentials they are read with.
    let mounted = mounted(node).len();
    if mounted > 0 {
        set("mounts", &mounted.to_string());
    }
    // A pipeline's steps are plain managed-job tasks (no group name, no
    // group hostnames); only their nodes carry the setting, so a group's
    // node.env is as it was.
    if group.execution == Execution::Serial {
        set("execution", "serial");
    }
    // A pool's worker: after setup it holds, running the jobs the
    // runtime hands it.
    if group.pool.is_some() {
        set("hold", "1");
    }
    Ok(s)
}

/// `files.sh`: the agent's `skyc_place` of each of the task's snapshots,
/// once its URL has come (`files/DIGEST.url`): the workdir in the node's
/// work directory (named `~/sky_workdir` too), a destination under `~`
/// in the agent's `$HOME`, an absolute one where it says. `None` when the
/// task has no files.
fn places(node: &Node) -> Result<Option<String>, Unrepresentable> {
    let Some(files) = node.files else {
        return Ok(None);
    };
    let mounts = files.of(node.index);
    if mounts.is_empty() {
        return Ok(None);
    }
    let mut s = String::new();
    for m in mounts {
        let Some(pack) = files.packs.get(&m.taken.digest) else {
            return Err(Unrepresentable(format!(
                "the snapshot of `{}` was not packed",
                m.source.escape_debug()
            )));
        };
        check(&m.destination, "a file mount's destination")?;
        let kind = if m.taken.dir { "dir" } else { "file" };
        let _ = writeln!(
            s,
            "skyc_place {} {} {kind} {} || exit 1",
            m.taken.digest,
            pack.sha256,
            destination(m)
        );
        // Right after the workdir, so that a mount under `~/sky_workdir`
        // lands in it.
        if m.workdir {
            let home = under_home(WORKDIR).unwrap_or_default();
            let _ = writeln!(s, "skyc_link_workdir \"$HOME\"/{} || exit 1", quote(home));
        }
    }
    Ok(Some(s))
}

/// Where a mount lands, as a word of `files.sh`.
fn destination(m: &Mount) -> String {
    if m.workdir {
        return "\"$skyc_dir/workdir\"".to_owned();
    }
    place(&m.destination)
}

/// A destination as a word of the node's scripts: under `~` in the
/// agent's `$HOME`, else where it says.
fn place(destination: &str) -> String {
    match under_home(destination) {
        Some("") => "\"$HOME\"".to_owned(),
        Some(rel) => format!("\"$HOME\"/{}", quote(rel)),
        None => quote(destination),
    }
}

/// The buckets the node mounts itself ([`super::mounts_on_instances`];
/// any other is refused before a script is made).
pub(super) fn mounted<'n>(node: &Node<'n>) -> Vec<(&'n skyc_compiler::ir::FileMount, ToMount)> {
    let Some(cloud) = super::Cloud::named(node.cloud) else {
        return Vec::new();
    };
    node.task
        .file_mounts
        .iter()
        .filter_map(|m| Some((m, storage::to_mount(m)?)))
        .filter(|(_, to)| super::mounts_on_instances(cloud, to))
        .collect()
}

/// `mounts.sh`, which the runtime delivers to a node that mounts buckets
/// (EC2's 16 KiB of user data cannot hold it beside the agent and the
/// task): its functions, then rclone checked for, the program that
/// serves a mount written, and a `skyc_mount` of each bucket with
/// rclone's settings as every target gives them (the region and endpoint
/// the submission found the bucket at; a build's, the node's region and
/// S3's own endpoint). `None` when the node mounts none.
pub(super) fn mounts(node: &Node) -> Result<Option<String>, Unrepresentable> {
    let resolved = node.files.map_or(&[][..], |f| f.buckets_of(node.index));
    let mounted = mounted(node);
    if mounted.is_empty() {
        return Ok(None);
    }
    let mut s = mounts_functions().to_owned();
    // The program is skyc's own: no line of it ends its here-document.
    s.push_str("skyc_mount_ready || return 1\n");
    s.push_str("cat >\"$skyc_dir/bucket-mount.sh\" <<'SKYC_MOUNT_SCRIPT' || return 1\n");
    s.push_str(MOUNT_SCRIPT);
    s.push_str("SKYC_MOUNT_SCRIPT\n");
    for (n, (m, to)) in mounted.into_iter().enumerate() {
        check(&m.destination, "a bucket's destination")?;
        let found = resolved.iter().find(|r| r.destination == m.destination);
        let region = found.map_or(node.region, |f| f.region.as_str());
        let endpoint = found.and_then(|f| f.endpoint.as_deref());
        let mut settings = storage::rclone_settings(to.store, to.cached, Some(region), endpoint);
        settings.push(("SKYC_FLUSHED", storage::RCLONE_FLUSHED.to_owned()));
        let settings: Vec<String> = settings
            .iter()
            .map(|(k, v)| {
                check(v, "a bucket's setting")?;
                Ok(quote(&format!("{k}={v}")))
            })
            .collect::<Result<_, Unrepresentable>>()?;
        let remote = storage::rclone_remote(to.store, &to.bucket, &to.path);
        check(&remote, "a bucket's name")?;
        let _ = writeln!(
            s,
            "skyc_mount {n} {} {} {} {} || return 1",
            u8::from(to.cached),
            quote(&remote),
            place(&m.destination),
            settings.join(" ")
        );
    }
    Ok(Some(s))
}

/// `SKYPILOT_TASK_ID` of a task: `skyc-<cloud>_<group>_<task>-<index>`
/// (no run id: the spec is built before any run).
pub(super) fn task_id(cloud: &str, group: &str, task: &str, index: usize) -> String {
    format!("skyc-{cloud}_{group}_{task}-{index}")
}

fn cloud_display(cloud: &str) -> &'static str {
    match cloud {
        "aws" => "AWS",
        _ => "GCP",
    }
}

/// `export` lines for the task's envs, before its setup and run.
fn prelude(task: &Task) -> Result<String, Unrepresentable> {
    let mut p = String::new();
    for env in &task.envs {
        if !is_variable_name(&env.name) {
            return Err(Unrepresentable(format!(
                "`{}` cannot be a shell variable name",
                env.name.escape_debug()
            )));
        }
        check(&env.value, &format!("`envs.{}`", env.name))?;
        let _ = writeln!(p, "export {}={}", env.name, quote(&env.value));
    }
    Ok(p)
}

/// NUL cannot be carried by any shell string.
fn check(value: &str, what: &str) -> Result<(), Unrepresentable> {
    if value.contains('\0') {
        return Err(Unrepresentable(format!(
            "{what} holds a NUL byte, which no shell string can carry"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn here_documents_cannot_end_early() {
        assert!(agent().ends_with('\n'));
        assert!(!agent().lines().any(|l| l == "SKYC_AGENT"));
        assert!(files_functions().ends_with('\n'));
        assert!(!files_functions().lines().any(|l| l == "SKYC_FILES"));
        assert!(LAUNCHER.starts_with(LAUNCHER_MARKER));
    }
}
