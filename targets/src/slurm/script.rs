//! The batch script: `#SBATCH` components from the IR, the group's data as
//! quoted shell, then the lifecycle.

use super::lifecycle::fixed_part;
use super::quote::{has_nul, quote};
use super::sbatch::{SbatchError, SbatchOption};
use skyc_compiler::ir::{Group, InterConnection, Role, Task, Workdir};
use skyc_compiler::{Diagnostic, Rule, Span};
use std::fmt::Write;

/// What the command line adds to every component.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub partition: Option<String>,
    pub account: Option<String>,
    /// Slurm's `--time` (`MM`, `HH:MM:SS`, `D-HH`...), for the whole job.
    pub time: Option<String>,
    /// Extra options, already validated (`SbatchOption::parse`).
    pub sbatch_options: Vec<SbatchOption>,
    /// Seconds between SIGTERM and SIGKILL when an auxiliary is terminated.
    pub grace_secs: u64,
}

/// The script, or why there is none; warnings either way.
#[derive(Debug)]
pub struct Build {
    /// Present when no diagnostic is an error.
    pub script: Option<String>,
    pub diagnostics: Vec<Diagnostic>,
}

/// Lowers `group` to one hetjob batch script.
pub fn build(group: &Group, options: &Options) -> Build {
    let mut diagnostics = Vec::new();
    let group_span = group
        .name_span
        .or_else(|| group.tasks.first().map(|t| t.name_span))
        .unwrap_or_default();
    let own = |name: &'static str, value: &Option<String>, out: &mut Vec<Diagnostic>| {
        value
            .as_deref()
            .and_then(|v| match SbatchOption::own(name, v) {
                Ok(o) => Some(o),
                Err(e) => {
                    out.push(sbatch_error(e, group_span, "from the command line"));
                    None
                }
            })
    };
    let partition = own("partition", &options.partition, &mut diagnostics);
    let account = own("account", &options.account, &mut diagnostics);
    let time = own("time", &options.time, &mut diagnostics);

    if group.execution == skyc_compiler::ir::Execution::Serial {
        diagnostics.push(
            Diagnostic::new(
                Rule::SlurmUnrepresentable,
                group_span,
                "a pipeline (steps one after another) is not lowered to Slurm yet",
            )
            .label("a pipeline")
            .help("run it on this machine (`skyc run FILE`)"),
        );
        return Build {
            script: None,
            diagnostics,
        };
    }
    check_name(&group.name, "group", group_span, &mut diagnostics);
    let mut header = String::new();
    header.push_str(
        "#!/bin/bash\n\
         # Built by skyc: a SkyPilot Job Group as one Slurm heterogeneous job, one\n\
         # component per task. Submit with `sbatch FILE`; export SKYC_OUT=DIR first to\n\
         # choose the output directory (default: skyc-GROUP-JOBID in the submit dir).\n",
    );
    for (g, task) in group.tasks.iter().enumerate() {
        check_name(&task.name, "task", task.name_span, &mut diagnostics);
        if g > 0 {
            header.push_str("#SBATCH hetjob\n");
        }
        let mut lines = Vec::new();
        if g == 0 {
            lines.extend(own_line(
                "job-name",
                &group.name,
                group_span,
                &mut diagnostics,
            ));
            lines.push("#SBATCH --output=skyc-%x-%j.out".to_owned());
            // A requeue (node failure, preemption) must not truncate it.
            lines.push("#SBATCH --open-mode=append".to_owned());
            // A lost node requeues the whole hetjob: the group restarts.
            lines.push("#SBATCH --requeue".to_owned());
            lines.extend(time.as_ref().map(SbatchOption::line));
        }
        lines.extend(resources(task, &mut diagnostics));
        lines.extend(partition.as_ref().map(SbatchOption::line));
        lines.extend(account.as_ref().map(SbatchOption::line));
        lines.extend(
            task_options(task, &mut diagnostics)
                .iter()
                .map(SbatchOption::line),
        );
        lines.extend(options.sbatch_options.iter().map(SbatchOption::line));
        for line in lines {
            header.push_str(&line);
            header.push('\n');
        }
    }
    let body = data(group, options, &mut diagnostics);
    let script = (!diagnostics.iter().any(Diagnostic::is_error))
        .then(|| format!("{header}set -u\n\n{body}\n{}", fixed_part()));
    Build {
        script,
        diagnostics,
    }
}

/// Names become paths, step names and hostnames: the compiler allows only
/// letters, digits, `.`, `-`, `_` in them; hold the line here too.
fn check_name(name: &str, what: &str, span: Span, out: &mut Vec<Diagnostic>) {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !ok {
        out.push(
            Diagnostic::new(
                Rule::SlurmUnrepresentable,
                span,
                format!(
                    "the {what} name `{}` cannot name Slurm steps, files and hosts",
                    name.escape_debug()
                ),
            )
            .label("not a plain name")
            .help("use letters, digits, `-`, `_` and `.`"),
        );
    }
}

fn own_line(
    name: &'static str,
    value: &str,
    span: Span,
    out: &mut Vec<Diagnostic>,
) -> Option<String> {
    match SbatchOption::own(name, value) {
        Ok(o) => Some(o.line()),
        Err(e) => {
            out.push(sbatch_error(e, span, "the group name"));
            None
        }
    }
}

fn sbatch_error(e: SbatchError, span: Span, label: &str) -> Diagnostic {
    Diagnostic::new(Rule::SlurmSbatchOption, span, e.to_string())
        .label(label.to_owned())
        .help("sbatch reads #SBATCH lines without a shell, so skyc cannot quote them")
}

/// nodes, cpus, memory and GPUs of the task's (first) candidate.
fn resources(task: &Task, out: &mut Vec<Diagnostic>) -> Vec<String> {
    let mut lines = vec![
        format!("#SBATCH --nodes={}", task.num_nodes),
        "#SBATCH --ntasks-per-node=1".to_owned(),
    ];
    let candidates = &task.resources.candidates;
    if candidates.len() > 1 {
        out.push(
            Diagnostic::new(
                Rule::SlurmIgnored,
                task.name_span,
                format!(
                    "task `{}` has {} resource candidates; the Slurm target requests the first",
                    task.name,
                    candidates.len()
                ),
            )
            .label("in this task"),
        );
    }
    let Some(c) = candidates.first() else {
        return lines;
    };
    if let Some(cpus) = c.cpus {
        lines.push(format!(
            "#SBATCH --cpus-per-task={}",
            ceil(cpus.value).max(1)
        ));
    }
    if let Some(mem) = c.memory_gb {
        lines.push(format!("#SBATCH --mem={}M", ceil(mem.value * 1024.0)));
    }
    if let Some(acc) = &c.accelerator {
        lines.push(format!("#SBATCH --gres=gpu:{}", ceil(acc.count).max(1)));
        // GPU type names are the cluster's own (gres.conf `Type=`).
        out.push(ignored_because(
            task,
            &format!("the accelerator type `{}` is not requested", acc.name),
            "`--gres=gpu:N` takes any GPU; pick a model by node feature with \
             `config.slurm.sbatch_options: {constraint: ...}`",
        ));
    }
    let cluster = "the job runs on the cluster's nodes as they are";
    if c.infra.as_ref().is_some_and(|i| i.cloud.is_some()) {
        out.push(ignored_because(task, "`infra` is not applied", cluster));
    }
    if c.use_spot {
        out.push(ignored_because(task, "`use_spot` is not applied", cluster));
    }
    if c.image.is_some() {
        out.push(ignored_because(task, "`image_id` is not applied", cluster));
    }
    if c.instance_type.is_some() || c.disk_tier.is_some() || c.network_tier.is_some() {
        out.push(ignored_because(
            task,
            "instance types and disk or network tiers are not applied",
            cluster,
        ));
    }
    lines
}

/// A non-negative quantity rounded up to a whole number.
fn ceil(x: f64) -> u64 {
    // Quantities are positive and small; the cast saturates otherwise.
    x.max(0.0).ceil() as u64
}

/// `config.slurm.sbatch_options` of the task: `key: value` is
/// `--key=value`, `key: true` or `key:` (null) is `--key`, `false` omits it.
fn task_options(task: &Task, out: &mut Vec<Diagnostic>) -> Vec<SbatchOption> {
    let Some(map) = task
        .config
        .as_ref()
        .and_then(|c| c.pointer("/slurm/sbatch_options"))
        .and_then(|v| v.as_object())
    else {
        return Vec::new();
    };
    let mut options = Vec::new();
    for (key, value) in map {
        let value = match value {
            serde_json::Value::Bool(false) => continue,
            serde_json::Value::Bool(true) | serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        };
        match SbatchOption::new(key, value.as_deref()) {
            Ok(o) => options.push(o),
            Err(e) => out.push(sbatch_error(
                e,
                task.name_span,
                "in `config.slurm.sbatch_options` of this task",
            )),
        }
    }
    options
}

/// The group's data as shell: arrays indexed by component, and the
/// function that writes each task's scripts.
fn data(group: &Group, options: &Options, out: &mut Vec<Diagnostic>) -> String {
    let tasks = &group.tasks;
    let array = |f: &dyn Fn(&Task) -> String| -> String {
        let items: Vec<String> = tasks.iter().map(f).collect();
        format!("({})", items.join(" "))
    };
    let hostnames = match group.inter_connection {
        InterConnection::Auto => "auto",
        InterConnection::Required => "required",
        InterConnection::Disabled => "off",
    };
    let mut s = String::from("# ---- the group (generated from the IR) ----\n");
    let _ = writeln!(s, "skyc_group={}", quote(&group.name));
    let _ = writeln!(s, "skyc_hostnames={hostnames}");
    let _ = writeln!(s, "skyc_grace={}", options.grace_secs);
    let _ = writeln!(s, "skyc_tasks={}", array(&|t| quote(&t.name)));
    let _ = writeln!(
        s,
        "skyc_primary={}",
        array(&|t| u8::from(t.role == Role::Primary).to_string())
    );
    let _ = writeln!(s, "skyc_want_nodes={}", array(&|t| t.num_nodes.to_string()));
    let _ = writeln!(
        s,
        "skyc_delay={}",
        array(&|t| t.termination_delay_secs.unwrap_or(0).to_string())
    );
    let _ = writeln!(
        s,
        "skyc_max_restarts={}",
        array(&|t| t.recovery.max_restarts_on_errors.to_string())
    );
    let _ = writeln!(
        s,
        "skyc_recover_codes={}",
        array(&|t| {
            let codes: Vec<String> = t
                .recovery
                .recover_on_exit_codes
                .iter()
                .map(u8::to_string)
                .collect();
            quote(&codes.join(" "))
        })
    );
    let _ = writeln!(
        s,
        "skyc_gpus={}",
        array(&|t| {
            t.resources
                .candidates
                .first()
                .and_then(|c| c.accelerator.as_ref())
                .map_or(0, |a| ceil(a.count))
                .to_string()
        })
    );
    for t in tasks {
        for name in &t.secrets {
            check_env_name(name, t, out);
        }
    }
    let _ = writeln!(
        s,
        "skyc_secrets={}",
        array(&|t| quote(&t.secrets.join(" ")))
    );
    // The literals are user scripts, to be written out, not expanded.
    s.push_str(
        "# Each task's setup and run, as written, after its envs.\n\
         # shellcheck disable=SC2016,SC1003 # literal scripts, written out unexpanded\n\
         skyc_write_task_files() {\n",
    );
    for (g, task) in tasks.iter().enumerate() {
        let prelude = prelude(task, out);
        for (phase, text) in [("setup", &task.setup), ("run", &task.run)] {
            if let Some(text) = text {
                if has_nul(text) {
                    out.push(nul_error(task, phase));
                }
                let _ = writeln!(
                    s,
                    "    printf '%s' {} >\"$1/{g}.{phase}\"",
                    quote(&format!("{prelude}{text}"))
                );
            }
        }
    }
    s.push_str("}\n");
    s
}

/// `export` lines for the task's envs and the `cd` into its workdir.
fn prelude(task: &Task, out: &mut Vec<Diagnostic>) -> String {
    let mut p = String::new();
    for env in &task.envs {
        check_env_name(&env.name, task, out);
        if has_nul(&env.value) {
            out.push(nul_error(task, &format!("envs.{}", env.name)));
        }
        let _ = writeln!(p, "export {}={}", env.name, quote(&env.value));
    }
    match &task.workdir {
        Some(Workdir::Local { path }) => {
            if has_nul(path) {
                out.push(nul_error(task, "workdir"));
            }
            // On a cluster the submit directory is shared: run in place.
            let _ = writeln!(p, "cd -- {} || exit 1", quote(path));
        }
        Some(Workdir::Git { .. }) => out.push(ignored(task, "a git `workdir` is not cloned")),
        None => {}
    }
    if !task.file_mounts.is_empty() {
        out.push(ignored(task, "`file_mounts` are not applied"));
    }
    if !task.volumes.is_empty() {
        out.push(ignored(task, "`volumes` are not mounted"));
    }
    p
}

fn check_env_name(name: &str, task: &Task, out: &mut Vec<Diagnostic>) {
    if !super::is_variable_name(name) {
        out.push(
            Diagnostic::new(
                Rule::SlurmUnrepresentable,
                task.name_span,
                format!("`{}` cannot be a shell variable name", name.escape_debug()),
            )
            .label("in this task"),
        );
    }
}

fn nul_error(task: &Task, what: &str) -> Diagnostic {
    Diagnostic::new(
        Rule::SlurmUnrepresentable,
        task.name_span,
        format!(
            "`{what}` of task `{}` holds a NUL byte, which no shell string can carry",
            task.name
        ),
    )
    .label("in this task")
}

fn ignored(task: &Task, what: &str) -> Diagnostic {
    ignored_because(
        task,
        what,
        "the batch script runs in the submit directory, which the cluster shares",
    )
}

fn ignored_because(task: &Task, what: &str, help: &str) -> Diagnostic {
    Diagnostic::new(
        Rule::SlurmIgnored,
        task.name_span,
        format!("task `{}`: {what} by the Slurm target", task.name),
    )
    .label("in this task")
    .help(help.to_owned())
}
