//! The boot script and the node agent, run under bash on this machine:
//! shellcheck on every script skyc emits, the hostile corpus through the
//! script's own writers byte for byte, the agent's contract (files,
//! environment, hostnames, exit codes), and the user-data size limit.

use super::api::feature_groups;
use super::{CLOUDS, boot_script, build, example_specs, spec, tmp_dir};
use crate::slurm::{check_hostile_outputs, have, hostile_yaml, run_hostile_script};
use crate::support::{render_human, skyc};
use serde_json::Value;
use skyc_compiler::{Options, compile};
use skyc_targets::cloud::{Cloud, LAUNCHER_MARKER};
use std::path::Path;
use std::process::Command;

fn shellcheck(path: &Path) {
    let out = Command::new("shellcheck")
        .args(["-s", "bash"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "shellcheck {}:\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout)
    );
}

/// The first and last node of every task of a spec.
fn some_nodes(doc: &Value) -> Vec<&Value> {
    let nodes = doc["nodes"].as_array().unwrap();
    nodes
        .iter()
        .enumerate()
        .filter(|(i, n)| {
            *i + 1 == nodes.len() || n["rank"] == 0 || nodes[i + 1]["task"] != n["task"]
        })
        .map(|(_, n)| n)
        .collect()
}

#[test]
fn shellcheck_passes_on_every_boot_script() {
    if !have("shellcheck") {
        return;
    }
    let dir = tmp_dir("shellcheck");
    let agent = dir.join("agent.sh");
    std::fs::write(&agent, skyc_targets::cloud::agent()).unwrap();
    shellcheck(&agent);
    let files = dir.join("files.sh");
    std::fs::write(&files, skyc_targets::cloud::files_functions()).unwrap();
    shellcheck(&files);
    let mounts = dir.join("mounts.sh");
    std::fs::write(&mounts, skyc_targets::cloud::mounts_functions()).unwrap();
    shellcheck(&mounts);
    let mut docs: Vec<(String, Value)> = example_specs()
        .into_iter()
        .filter_map(|(file, cloud, _, doc, _)| Some((format!("{file}.{}", cloud.name()), doc?)))
        .collect();
    for cloud in CLOUDS {
        for (name, text) in feature_groups() {
            docs.push((format!("{name}.{}", cloud.name()), spec(&text, cloud)));
        }
        docs.push((
            format!("hostile.{}", cloud.name()),
            spec(&hostile_yaml(), cloud),
        ));
    }
    let mut checked = 0;
    for (name, doc) in &docs {
        for node in some_nodes(doc) {
            let path = dir.join(format!("{name}.{}.sh", node["hostname"].as_str().unwrap()));
            std::fs::write(&path, boot_script(node)).unwrap();
            shellcheck(&path);
            checked += 1;
        }
    }
    assert!(checked > 60, "{checked} scripts");
}

/// Runs a boot script's own part (its data and writers, before the
/// launcher) under bash, writing the node's files to `dir`.
pub(super) fn write_node_files(script: &str, dir: &Path, canary: &Path) {
    let own = &script[..script.find(LAUNCHER_MARKER).unwrap()];
    std::fs::create_dir_all(dir).unwrap();
    let writer = dir.with_extension("writer.sh");
    std::fs::write(&writer, own).unwrap();
    let status = Command::new("bash")
        .arg("-c")
        .arg(r#". "$1" && skyc_write_files "$2""#)
        .arg("bash")
        .arg(&writer)
        .arg(dir)
        .env("SKYC_CANARY", canary)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn hostile_values_survive_the_boot_script_byte_for_byte() {
    let c = compile(
        "hostile.yaml",
        hostile_yaml().as_bytes(),
        &Options::default(),
    );
    let group = c.group.unwrap_or_else(|| panic!("{:?}", c.diagnostics));
    for cloud in CLOUDS {
        let doc = spec(&hostile_yaml(), cloud);
        let dir = tmp_dir(&format!("hostile-{}", cloud.name()));
        let canary = dir.join("CANARY");
        for (g, task) in group.tasks.iter().enumerate() {
            let node = doc["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|n| n["task"] == task.name.as_str())
                .unwrap();
            let files = dir.join(format!("node{g}"));
            write_node_files(boot_script(node), &files, &canary);
            assert_eq!(
                std::fs::read_to_string(files.join("agent.sh")).unwrap(),
                skyc_targets::cloud::agent()
            );
            let run = std::fs::read_to_string(files.join("run.sh")).unwrap();
            assert!(
                run.ends_with(task.run.as_deref().unwrap()),
                "task {g}: run text changed"
            );
            // The settings read back exactly.
            let out = Command::new("bash")
                .arg("-c")
                .arg(r#". "$1/node.env" && printf '%s\0' "$skyc_group" "$skyc_task" "$skyc_task_ids""#)
                .arg("bash")
                .arg(&files)
                .output()
                .unwrap();
            let want = format!(
                "hostile\0{}\0skyc-{c}_hostile_dump-0\nskyc-{c}_hostile_weird-1\0",
                task.name,
                c = cloud.name()
            );
            assert_eq!(String::from_utf8_lossy(&out.stdout), want);
            // Running the written script: the envs arrive exactly, and
            // nothing runs that the user did not write.
            run_hostile_script(&files.join("run.sh"), &dir, &canary);
        }
        check_hostile_outputs(&dir, &canary);
    }
}

/// A node's directory, written by its boot script, with the agent's wait
/// shortened.
fn node_dir(doc: &Value, hostname: &str, name: &str, wait_secs: u32) -> std::path::PathBuf {
    let node = doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["hostname"] == hostname)
        .unwrap();
    let dir = tmp_dir(name).join("node");
    write_node_files(boot_script(node), &dir, &dir.join("CANARY"));
    let env = std::fs::read_to_string(dir.join("node.env")).unwrap();
    std::fs::write(
        dir.join("node.env"),
        env.replace("skyc_wait_secs=600", &format!("skyc_wait_secs={wait_secs}")),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("secrets")).unwrap();
    std::fs::create_dir_all(dir.join("workdir")).unwrap();
    dir
}

fn agent(dir: &Path, etc_hosts: &Path) -> std::process::Child {
    Command::new("bash")
        .arg(dir.join("agent.sh"))
        .arg(dir)
        .env("SKYC_ETC_HOSTS", etc_hosts)
        .spawn()
        .unwrap()
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_default()
}

/// The words of the status file after each line's time.
fn status(dir: &Path) -> Vec<String> {
    read(dir, "status")
        .lines()
        .map(|l| l.split_once(' ').unwrap().1.to_owned())
        .collect()
}

const AGENT_GROUP: &str = "name: agent\nexecution: parallel\n---\nname: work\nnum_nodes: 2\n\
    secrets:\n  TOKEN: null\nenvs:\n  GREETING: hello world\n\
    setup: |\n  echo \"setup $SKYPILOT_SETUP_NODE_RANK of $SKYPILOT_NUM_NODES ips=$(echo $SKYPILOT_SETUP_NODE_IPS)\"\n  pwd\n\
    run: |\n  echo \"run $SKYPILOT_NODE_RANK $GREETING token=$TOKEN\"\n  echo \"ips=$(echo $SKYPILOT_NODE_IPS) group=$SKYPILOT_JOBGROUP_NAME id=$SKYPILOT_TASK_ID\"\n  echo \"info=$SKYPILOT_CLUSTER_INFO\"\n  for _ in $(seq 200); do grep -q 10.0.0.7 \"$SKYC_ETC_HOSTS\" && break; sleep 0.05; done\n  exit 3\n\
    ---\nname: peer\nrun: echo peer\n";

#[test]
fn the_agent_runs_setup_then_run_and_records_both() {
    let doc = spec(AGENT_GROUP, Cloud::Aws);
    let dir = node_dir(&doc, "work-1.agent", "agent-run", 30);
    let etc_hosts = dir.parent().unwrap().join("etc-hosts");
    std::fs::write(
        &etc_hosts,
        "127.0.0.1 localhost\n10.9.9.9 work-0.agent # skyc-group other\n",
    )
    .unwrap();
    std::fs::write(dir.join("secrets/TOKEN"), "s3cr3t\nline two").unwrap();
    std::fs::write(
        dir.join("hosts"),
        "10.0.0.1 work-0.agent\n10.0.0.2 work-1.agent\n10.0.0.3 peer-0.agent\nnot a line at all\n",
    )
    .unwrap();
    let mut child = agent(&dir, &etc_hosts);
    // A node recreated meanwhile: the runtime rewrites the hosts file,
    // and /etc/hosts follows.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    std::fs::write(
        dir.join("hosts"),
        "10.0.0.7 work-0.agent\n10.0.0.2 work-1.agent\n10.0.0.3 peer-0.agent\n",
    )
    .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(3));
    assert_eq!(
        status(&dir),
        vec![
            "agent start",
            "hosts ready",
            "setup start",
            "setup exit 0",
            "run start",
            "run exit 3",
            "agent end 3"
        ]
    );
    assert_eq!(read(&dir, "setup.exit"), "0\n");
    assert_eq!(read(&dir, "run.exit"), "3\n");
    let setup = read(&dir, "setup.log");
    assert!(
        setup.contains("setup 1 of 2 ips=10.0.0.1 10.0.0.2\n"),
        "{setup}"
    );
    assert!(
        setup.contains(&format!("{}\n", dir.join("workdir").display())),
        "{setup}"
    );
    let run = read(&dir, "run.log");
    assert!(
        run.contains("run 1 hello world token=s3cr3t\nline two\n"),
        "{run}"
    );
    assert!(
        run.contains("ips=10.0.0.1 10.0.0.2 group=agent id=skyc-aws_agent_work-0\n"),
        "{run}"
    );
    assert!(
        run.contains("info={\"cluster_name\":\"agent-work\",\"cloud\":\"AWS\""),
        "{run}"
    );
    let hosts = std::fs::read_to_string(&etc_hosts).unwrap();
    assert_eq!(
        hosts,
        "127.0.0.1 localhost\n10.9.9.9 work-0.agent # skyc-group other\n\
         10.0.0.7 work-0.agent # skyc-group agent\n10.0.0.2 work-1.agent # skyc-group agent\n\
         10.0.0.3 peer-0.agent # skyc-group agent\n"
    );
}

#[test]
fn a_failed_setup_ends_the_node_without_run() {
    let text = "name: fails\nexecution: parallel\n---\nname: t\nsetup: exit 7\nrun: echo never\n";
    let doc = spec(text, Cloud::Gcp);
    let dir = node_dir(&doc, "t-0.fails", "agent-setup-fails", 30);
    let etc_hosts = dir.parent().unwrap().join("etc-hosts");
    std::fs::write(&etc_hosts, "").unwrap();
    assert_eq!(agent(&dir, &etc_hosts).wait().unwrap().code(), Some(7));
    assert_eq!(read(&dir, "setup.exit"), "7\n");
    assert!(!dir.join("run.exit").exists());
    assert_eq!(status(&dir).last().unwrap(), "agent end 7");
    // A single node needs no hosts file and never touches /etc/hosts.
    assert_eq!(std::fs::read_to_string(&etc_hosts).unwrap(), "");
}

/// A pipeline's step: a plain managed-job task. Its nodes read their own
/// step's addresses from `hosts`; no group name, no group hostnames in
/// `/etc/hosts`, and a single-node step waits for nothing.
#[test]
fn a_pipeline_step_has_its_nodes_and_no_group() {
    let text = "name: pipe\n---\nname: train\nnum_nodes: 2\n\
        run: echo \"rank=$SKYPILOT_NODE_RANK ips=$(echo $SKYPILOT_NODE_IPS) group=${SKYPILOT_JOBGROUP_NAME-unset} id=$SKYPILOT_TASK_ID\"\n\
        ---\nname: eval\nrun: echo \"group=${SKYPILOT_JOBGROUP_NAME-unset} n=$SKYPILOT_NUM_NODES\"\n";
    for cloud in CLOUDS {
        let doc = spec(text, cloud);
        assert_eq!(doc["execution"], "serial");
        let dir = node_dir(
            &doc,
            "train-1.pipe",
            &format!("agent-step-{}", cloud.name()),
            30,
        );
        assert!(read(&dir, "node.env").contains("skyc_execution=serial\n"));
        let etc_hosts = dir.parent().unwrap().join("etc-hosts");
        std::fs::write(&etc_hosts, "127.0.0.1 localhost\n").unwrap();
        std::fs::write(
            dir.join("hosts"),
            "10.0.0.1 train-0.pipe\n10.0.0.2 train-1.pipe\n",
        )
        .unwrap();
        assert_eq!(agent(&dir, &etc_hosts).wait().unwrap().code(), Some(0));
        assert_eq!(
            read(&dir, "run.log"),
            format!(
                "rank=1 ips=10.0.0.1 10.0.0.2 group=unset id=skyc-{}_pipe_train-0\n",
                cloud.name()
            )
        );
        assert_eq!(status(&dir)[1], "hosts ready");
        assert_eq!(
            std::fs::read_to_string(&etc_hosts).unwrap(),
            "127.0.0.1 localhost\n"
        );
        // The next step, of one node, starts without any hosts file.
        let dir = node_dir(
            &doc,
            "eval-0.pipe",
            &format!("agent-step2-{}", cloud.name()),
            2,
        );
        assert_eq!(agent(&dir, &etc_hosts).wait().unwrap().code(), Some(0));
        assert_eq!(read(&dir, "run.log"), "group=unset n=1\n");
        assert!(
            !status(&dir).iter().any(|l| l.starts_with("hosts")),
            "{:?}",
            status(&dir)
        );
    }
}

/// Secrets named like the agent's own words (or `IFS`) reach the task and
/// change nothing the agent does.
#[test]
fn secrets_named_like_the_agents_variables_change_nothing() {
    let text = "name: names\nexecution: parallel\n---\nname: t\n\
        secrets:\n  failure: null\n  IFS: null\n  code: null\n\
        run: echo \"failure=$failure code=$code\"\n";
    let doc = spec(text, Cloud::Aws);
    let dir = node_dir(&doc, "t-0.names", "agent-secret-names", 30);
    let etc_hosts = dir.parent().unwrap().join("etc-hosts");
    std::fs::write(&etc_hosts, "").unwrap();
    for (name, value) in [("failure", "hunter2"), ("IFS", "x"), ("code", "42")] {
        std::fs::write(dir.join("secrets").join(name), value).unwrap();
    }
    assert_eq!(agent(&dir, &etc_hosts).wait().unwrap().code(), Some(0));
    assert_eq!(read(&dir, "run.log"), "failure=hunter2 code=42\n");
    assert_eq!(read(&dir, "setup.log"), "", "no secret in the setup log");
    assert_eq!(status(&dir).last().unwrap(), "agent end 0");
}

#[test]
fn hosts_or_secrets_never_delivered_fail_setup() {
    let doc = spec(AGENT_GROUP, Cloud::Aws);
    let dir = node_dir(&doc, "work-0.agent", "agent-undelivered", 1);
    let etc_hosts = dir.parent().unwrap().join("etc-hosts");
    std::fs::write(&etc_hosts, "").unwrap();
    assert_eq!(agent(&dir, &etc_hosts).wait().unwrap().code(), Some(1));
    assert!(status(&dir).contains(&"hosts missing after 1 s".to_owned()));
    assert_eq!(read(&dir, "setup.exit"), "1\n");
    let log = read(&dir, "setup.log");
    assert!(log.contains("secret TOKEN was not delivered"), "{log}");
}

#[test]
fn the_launcher_starts_the_agent_once() {
    let text = "name: once\nexecution: parallel\n---\nname: t\nrun: echo ran\n";
    let doc = spec(text, Cloud::Aws);
    let dir = tmp_dir("launcher");
    let node_dir = dir.join("node");
    let script = boot_script(&doc["nodes"][0]).replace(
        "skyc_dir=/var/lib/skyc",
        &format!("skyc_dir={}", node_dir.display()),
    );
    let boot = dir.join("boot.sh");
    std::fs::write(&boot, script).unwrap();
    // No systemd here: the launcher falls back to a detached agent.
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("systemd-run");
    std::fs::write(&fake, "#!/bin/sh\nexit 1\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let boot_once = || {
        let status = Command::new("bash")
            .arg(&boot)
            .env("PATH", &path)
            .status()
            .unwrap();
        assert!(status.success());
    };
    boot_once();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !read(&node_dir, "status").contains("agent end") {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent did not end"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(read(&node_dir, "run.log"), "ran\n");
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!(std::fs::metadata(&node_dir).unwrap().mode() & 0o777, 0o700);
    // A second boot records itself and starts nothing.
    boot_once();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let lines = status(&node_dir);
    assert_eq!(
        lines.last().unwrap(),
        "boot again: the node's task is not restarted"
    );
    assert_eq!(lines.iter().filter(|l| *l == "agent start").count(), 1);
}

#[test]
fn user_data_over_16_kb_is_a_located_error_on_aws() {
    let dir = tmp_dir("too-large");
    let file = dir.join("big.yaml");
    let long =
        "echo 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n".repeat(250);
    std::fs::write(
        &file,
        format!(
            "name: big\nexecution: parallel\n---\nname: small\nrun: echo\n---\nname: large\nrun: {}\n",
            serde_json::to_string(&long).unwrap()
        ),
    )
    .unwrap();
    let out = skyc()
        .args(["build", "--target", "aws", "--color", "never"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("error[cloud-user-data-too-large]"), "{err}");
    assert!(err.contains("big.yaml:7:7"), "at the task: {err}");
    assert!(
        err.contains("EC2 takes at most 16384 bytes of user data"),
        "{err}"
    );
    // A GCP startup script holds 256 KB.
    let out = skyc()
        .args(["build", "--target", "gcp"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn values_no_shell_string_carries_are_located_errors() {
    let text = "name: nul\nexecution: parallel\n---\nname: t\nenvs:\n  A: \"x\\0y\"\nrun: echo\n";
    for cloud in CLOUDS {
        let (c, doc) = build("nul.yaml", text, cloud);
        assert!(doc.is_none());
        let out = render_human(&c);
        assert!(out.contains("error[cloud-unrepresentable]"), "{out}");
        assert!(out.contains("`envs.A` holds a NUL byte"), "{out}");
    }
}

/// An S3 bucket a task mounts is mounted by the AWS node itself: the
/// node's spec holds the `mounts.sh` the runtime delivers (shellcheck
/// clean), whose `skyc_mount` lines carry the bucket, the destination and
/// rclone's settings word for word, whatever they hold; the boot script
/// says only how many (`skyc_mounts`); the program that serves each
/// mount is the shared one. A GCS mount on AWS and any mount on GCP are
/// refused at the mount.
#[test]
fn an_aws_node_mounts_its_s3_buckets_word_for_word() {
    let odd = "/var/lib/it's $(touch \"$SKYC_CANARY\") `touch \"$SKYC_CANARY\"`";
    let yaml = format!(
        "name: m\nresources:\n  infra: aws/us-east-1\n  cpus: 2\nfile_mounts:\n  \
         {odd:?}:\n    source: s3://bkt/we ird/$(p)\n    mode: MOUNT_CACHED\n  \
         ~/data:\n    name: made-by-skyc\nrun: x\n"
    );
    let doc = spec(&yaml, Cloud::Aws);
    let node = &doc["nodes"][0];
    let dir = tmp_dir("aws-mounts");
    let canary = dir.join("CANARY");
    let files = dir.join("node");
    write_node_files(boot_script(node), &files, &canary);
    let mounts = node["mounts"].as_str().expect("the node's mounts.sh");
    std::fs::write(files.join("mounts.sh"), mounts).unwrap();
    if have("shellcheck") {
        shellcheck(&files.join("mounts.sh"));
    }
    // Its functions, then what it does: the latter is run, with the
    // functions it calls stood in for by ones that print their words.
    let calls = &mounts[mounts.find("skyc_mount_ready || return 1").unwrap()..];
    std::fs::write(files.join("calls.sh"), calls).unwrap();
    let out = Command::new("bash")
        .arg("-c")
        .arg(
            r#". "$1/node.env" && printf '%s\0\n' "$skyc_mounts" && skyc_dir=$1 HOME=/home/u &&
               skyc_mount_ready() { :; } &&
               skyc_mount() { printf '%s\0' "$@"; printf '\n'; } && . "$1/calls.sh""#,
        )
        .arg("bash")
        .arg(&files)
        .env("SKYC_CANARY", &canary)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!canary.exists(), "a value ran as shell");
    assert_eq!(
        std::fs::read_to_string(files.join("bucket-mount.sh")).unwrap(),
        skyc_targets::storage::MOUNT_SCRIPT
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.split('\n');
    assert_eq!(lines.next(), Some("2\0"));
    let first: Vec<&str> = lines.next().unwrap().split('\0').collect();
    assert_eq!(
        &first[..4],
        ["0", "1", ":s3:bkt/we ird/$(p)", odd],
        "{first:?}"
    );
    assert!(first.contains(&"RCLONE_S3_REGION=us-east-1"), "{first:?}");
    assert!(first.contains(&"RCLONE_VFS_CACHE_MODE=full"), "{first:?}");
    let second: Vec<&str> = lines.next().unwrap().split('\0').collect();
    assert_eq!(
        &second[..4],
        ["1", "0", ":s3:made-by-skyc", "/home/u/data"],
        "{second:?}"
    );
    // No credential is in the boot script: the runtime delivers them.
    assert!(!boot_script(node).contains("AWS_SECRET_ACCESS_KEY"));
    // What the delivered credentials are narrowed to: both buckets (whole:
    // rclone looks at a mounted path's parent) and what rclone does in
    // them; nothing for a node that mounts none.
    crate::support::snapshots("cloud").bind(|| {
        insta::assert_json_snapshot!("aws_node_session_policy", node["session_policy"]);
    });
    let plain = spec(
        "name: m\nresources:\n  infra: aws/us-east-1\n  cpus: 2\nrun: x\n",
        Cloud::Aws,
    );
    assert!(plain["nodes"][0].get("session_policy").is_none());

    for (text, cloud) in [
        (
            "name: m\nresources:\n  infra: aws/us-east-1\nfile_mounts:\n  /d:\n    name: b\n    store: gcs\nrun: x\n",
            Cloud::Aws,
        ),
        (
            "name: m\nresources:\n  infra: gcp/us-central1\nfile_mounts:\n  /d:\n    name: b\nrun: x\n",
            Cloud::Gcp,
        ),
    ] {
        let (c, doc) = build("m.yaml", text, cloud);
        assert!(doc.is_none(), "{}", render_human(&c));
        assert!(
            c.diagnostics
                .iter()
                .any(|d| d.rule == skyc_compiler::Rule::CloudBucketMount),
            "{}",
            render_human(&c)
        );
    }
}
