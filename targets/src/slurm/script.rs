//! The batch script: `#SBATCH` components from the IR, the group's data as
//! quoted shell, then the lifecycle.

use super::lifecycle::fixed_part;
use super::sbatch::{SbatchError, SbatchOption};
use crate::shell::{has_nul, quote};
use skyc_compiler::ir::{Accelerator, Execution, Group, InterConnection, Role, Task, Workdir};
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
    /// The cluster's GPU nodes, when it was asked (`skyc run`): a task's
    /// GPU type is requested as the cluster names it ([`super::gres`]).
    /// `None` (`skyc build`): as the task names it.
    pub gpus: Option<super::gres::ClusterGpus>,
    /// The tasks' files, taken by `skyc run`: each node sees them through
    /// skyc's files helper. `None` (`skyc build`): a `workdir` runs in
    /// place (the submit directory is shared) and file mounts are not
    /// applied.
    pub files: Option<crate::files::Delivery>,
}

/// The script, or why there is none; warnings either way.
#[derive(Debug)]
pub struct Build {
    /// Present when no diagnostic is an error.
    pub script: Option<String>,
    pub diagnostics: Vec<Diagnostic>,
}

/// What one batch job runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Job {
    /// A whole Job Group: one hetjob component per task.
    Group,
    /// Step `i` of a pipeline: its one task, as a job of its own.
    Step(usize),
    /// A pool's worker: the pool's one task, whose `run` holds the
    /// allocation once setup ended well (`super::worker`).
    Worker,
}

/// What every job of one build shares: the command line's options,
/// checked once.
pub(crate) struct Common<'a> {
    options: &'a Options,
    partition: Option<SbatchOption>,
    account: Option<SbatchOption>,
    time: Option<SbatchOption>,
    /// Where a finding about the whole group points.
    pub(crate) span: Span,
}

impl<'a> Common<'a> {
    pub(crate) fn new(group: &Group, options: &'a Options, out: &mut Vec<Diagnostic>) -> Self {
        let span = group
            .name_span
            .or_else(|| group.tasks.first().map(|t| t.name_span))
            .unwrap_or_default();
        let mut own = |name: &'static str, value: &Option<String>| {
            value
                .as_deref()
                .and_then(|v| match SbatchOption::own(name, v) {
                    Ok(o) => Some(o),
                    Err(e) => {
                        out.push(sbatch_error(e, span, "from the command line"));
                        None
                    }
                })
        };
        let partition = own("partition", &options.partition);
        let account = own("account", &options.account);
        let time = own("time", &options.time);
        check_name(&group.name, "group", span, out);
        Self {
            options,
            partition,
            account,
            time,
            span,
        }
    }

    pub(crate) fn options(&self) -> &Options {
        self.options
    }
}

/// Lowers a Job Group to one hetjob batch script. A pipeline is not one
/// script but one job per step: [`super::pipeline`] lowers it.
pub fn build(group: &Group, options: &Options) -> Build {
    let mut diagnostics = Vec::new();
    if let Some(refusal) = crate::pool_refusal(group, "Slurm", Rule::SlurmUnrepresentable) {
        return Build {
            script: None,
            diagnostics: vec![refusal],
        };
    }
    let common = Common::new(group, options, &mut diagnostics);
    if group.execution == Execution::Serial {
        diagnostics.push(
            Diagnostic::new(
                Rule::SlurmUnrepresentable,
                common.span,
                "a pipeline runs on Slurm as one batch job per step, not as one script",
            )
            .label("a pipeline")
            .help("its jobs are `slurm::pipeline`'s, which `skyc build` and `skyc run` use"),
        );
        return Build {
            script: None,
            diagnostics,
        };
    }
    let script = batch_script(group, Job::Group, &common, &mut diagnostics);
    Build {
        script: (!diagnostics.iter().any(Diagnostic::is_error)).then_some(script),
        diagnostics,
    }
}

/// The batch script of one job: its `#SBATCH` header, the data of its
/// tasks, then the lifecycle. Findings go to `out`; the caller drops the
/// script when one is an error.
pub(crate) fn batch_script(
    group: &Group,
    job: Job,
    common: &Common,
    out: &mut Vec<Diagnostic>,
) -> String {
    let tasks = match job {
        Job::Group | Job::Worker => &group.tasks[..],
        Job::Step(i) => std::slice::from_ref(&group.tasks[i]),
    };
    let mut header = match job {
        Job::Group => "#!/bin/bash\n\
             # Built by skyc: a SkyPilot Job Group as one Slurm heterogeneous job, one\n\
             # component per task. Submit with `sbatch FILE`; export SKYC_OUT=DIR first to\n\
             # choose the output directory (default: skyc-GROUP-JOBID in the submit dir).\n"
            .to_owned(),
        Job::Step(i) => step_comment(group, i),
        Job::Worker => super::worker::comment(group),
    };
    for (g, task) in tasks.iter().enumerate() {
        check_name(&task.name, "task", task.name_span, out);
        if g > 0 {
            header.push_str("#SBATCH hetjob\n");
        }
        let mut lines = Vec::new();
        if g == 0 {
            // A group's job is named after the group, a step's after the step.
            let (name, span, what) = match job {
                Job::Group | Job::Worker => (&group.name, common.span, "the group name"),
                Job::Step(_) => (&task.name, task.name_span, "the step name"),
            };
            lines.extend(own_line("job-name", name, span, what, out));
            lines.push("#SBATCH --output=skyc-%x-%j.out".to_owned());
            // A requeue (node failure, preemption) must not truncate it.
            lines.push("#SBATCH --open-mode=append".to_owned());
            // A lost node requeues the whole job: the group (step) restarts.
            // A worker is not requeued: the pool replaces it.
            lines.push(match job {
                Job::Worker => "#SBATCH --no-requeue".to_owned(),
                _ => "#SBATCH --requeue".to_owned(),
            });
            if let Job::Step(_) = job {
                // When the step before failed, Slurm cancels this job
                // rather than leave it pending forever.
                lines.push("#SBATCH --kill-on-invalid-dep=yes".to_owned());
            }
            lines.extend(common.time.as_ref().map(SbatchOption::line));
        }
        let mut options = task_options(task, out);
        // The partition the component goes to, as sbatch reads its lines:
        // the last `--partition` wins.
        let partition = common
            .options
            .sbatch_options
            .iter()
            .rev()
            .chain(options.iter().rev())
            .chain(common.partition.as_ref())
            .find(|o| o.name() == "partition")
            .and_then(SbatchOption::value);
        let cluster = common
            .options
            .gpus
            .as_deref()
            .map(|nodes| super::gres::in_partition(nodes, partition));
        lines.extend(resources(task, cluster.as_deref(), out));
        lines.extend(common.partition.as_ref().map(SbatchOption::line));
        lines.extend(common.account.as_ref().map(SbatchOption::line));
        if let Job::Step(_) = job {
            options.retain(|o| {
                let chained = super::pipeline::is_chain_option(o.name());
                if chained {
                    out.push(super::pipeline::chain_option_error(
                        o.name(),
                        task.name_span,
                        "in `config.slurm.sbatch_options` of this step",
                    ));
                }
                !chained
            });
        }
        lines.extend(options.iter().map(SbatchOption::line));
        lines.extend(common.options.sbatch_options.iter().map(SbatchOption::line));
        for line in lines {
            header.push_str(&line);
            header.push('\n');
        }
    }
    let body = data(group, job, tasks, common.options, out);
    format!("{header}set -u\n\n{body}\n{}", fixed_part())
}

/// The opening comment of a step's script. Steps are numbered from 0, as
/// in task ids and the names of unnamed steps.
fn step_comment(group: &Group, i: usize) -> String {
    let n = group.tasks.len();
    let steps = if n == 1 { "step" } else { "steps" };
    let step = &group.tasks[i].name;
    let pipeline = &group.name;
    let when = match i {
        0 => "Submitted first; its job id (JOBID0) names the pipeline.".to_owned(),
        _ => format!(
            "Submitted after the job of step {} ended COMPLETED\n\
             # (--dependency=afterok:JOBID), with SKYC_PIPELINE_JOB=JOBID0 (step 0's job).",
            i - 1
        ),
    };
    format!(
        "#!/bin/bash\n\
         # Built by skyc: step {i} ({step}) of the SkyPilot pipeline {pipeline} ({n} {steps}),\n\
         # one Slurm batch job. {when}\n\
         # Output: $SKYC_OUT, default skyc-{pipeline}-JOBID0/{step} in the submit dir.\n"
    )
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
    label: &str,
    out: &mut Vec<Diagnostic>,
) -> Option<String> {
    match SbatchOption::own(name, value) {
        Ok(o) => Some(o.line()),
        Err(e) => {
            out.push(sbatch_error(e, span, label));
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
fn resources(
    task: &Task,
    cluster: Option<&[super::gres::GpuNodes]>,
    out: &mut Vec<Diagnostic>,
) -> Vec<String> {
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
        lines.extend(gpus(task, acc, cluster, out));
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

/// `--gres=gpu:<type>:<count>`, the type as the cluster names it.
fn gpus(
    task: &Task,
    acc: &Accelerator,
    cluster: Option<&[super::gres::GpuNodes]>,
    out: &mut Vec<Diagnostic>,
) -> Option<String> {
    let count = ceil(acc.count).max(1);
    let per_node = u32::try_from(count).unwrap_or(u32::MAX);
    let gpu_type = match cluster {
        None => acc.name.clone(),
        // A cluster whose GPUs have no type (no gres.conf `Type=`): any.
        Some(nodes) if !nodes.is_empty() && super::gres::types(nodes).is_empty() => {
            out.push(ignored_because(
                task,
                &format!("the GPU type `{}` is not requested", acc.name),
                "the cluster's GPUs have no type (gres.conf `Type=`), so `--gres=gpu:N` takes any",
            ));
            return Some(format!("#SBATCH --gres=gpu:{count}"));
        }
        Some(nodes) => match super::gres::resolve(&acc.name, per_node, nodes) {
            Ok(t) => t,
            Err(missing) => {
                let asks = format!(
                    "task `{}` asks for `{}` GPUs, {count} per node",
                    task.name, acc.name
                );
                let list = missing
                    .offered
                    .iter()
                    .map(|t| format!("`{t}`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                let (message, help) = match (&missing.too_few, missing.offered.first()) {
                    (Some((ty, most)), _) => (
                        format!("{asks}; the Slurm cluster's `{ty}` nodes have at most {most}"),
                        format!(
                            "ask for at most {most} per node (`accelerators: {ty}:{most}`), or use more nodes"
                        ),
                    ),
                    (None, Some(first)) => (
                        format!("{asks}; the Slurm cluster offers {list}"),
                        format!(
                            "name one of the cluster's GPU types, as in `accelerators: {first}:{count}`"
                        ),
                    ),
                    (None, None) => (
                        format!("{asks}; the Slurm cluster has no GPU nodes of a type"),
                        "run it on a cluster with GPUs, or leave out `accelerators`".to_owned(),
                    ),
                };
                out.push(
                    Diagnostic::new(Rule::SlurmGpuType, acc.span, message)
                        .label("not on this cluster")
                        .help(help),
                );
                return None;
            }
        },
    };
    let gres_type = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
    };
    if !gres_type(&gpu_type) {
        out.push(
            Diagnostic::new(
                Rule::SlurmUnrepresentable,
                acc.span,
                format!("the GPU type `{gpu_type}` cannot be written in `--gres`"),
            )
            .label("not a GRES type")
            .help("name the GPU with letters, digits, `-`, `_` and `.`"),
        );
        return None;
    }
    Some(format!("#SBATCH --gres=gpu:{gpu_type}:{count}"))
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
fn data(
    group: &Group,
    job: Job,
    tasks: &[Task],
    options: &Options,
    out: &mut Vec<Diagnostic>,
) -> String {
    let array = |f: &dyn Fn(&Task) -> String| -> String {
        let items: Vec<String> = tasks.iter().map(f).collect();
        format!("({})", items.join(" "))
    };
    // A pipeline's steps have no group hostnames, as in SkyPilot.
    let hostnames = match (job, group.inter_connection) {
        (Job::Step(_), _) | (_, InterConnection::Disabled) => "off",
        (Job::Group | Job::Worker, InterConnection::Auto) => "auto",
        (Job::Group | Job::Worker, InterConnection::Required) => "required",
    };
    let mut s = String::from(match job {
        Job::Group => "# ---- the group (generated from the IR) ----\n",
        Job::Step(_) => "# ---- the pipeline step (generated from the IR) ----\n",
        Job::Worker => "# ---- the pool's worker (generated from the IR) ----\n",
    });
    let _ = writeln!(s, "skyc_group={}", quote(&group.name));
    if let Job::Step(i) = job {
        // The pipeline's steps, for task ids; this job runs step `i`.
        let steps: Vec<String> = group.tasks.iter().map(|t| quote(&t.name)).collect();
        let _ = writeln!(s, "skyc_steps=({})", steps.join(" "));
        let _ = writeln!(s, "skyc_step={i}");
    }
    let _ = writeln!(s, "skyc_hostnames={hostnames}");
    // The files helper, when a task has files.
    let index = |g: usize| match job {
        Job::Group => g,
        Job::Step(i) => i,
        Job::Worker => 0,
    };
    let delivered = |g: usize| options.files.as_ref().map_or(&[][..], |f| f.of(index(g)));
    let volumes = |g: usize| {
        options
            .files
            .as_ref()
            .map_or(&[][..], |f| f.volumes_of(index(g)))
    };
    let buckets = |g: usize| {
        options
            .files
            .as_ref()
            .map_or(&[][..], |f| f.buckets_of(index(g)))
    };
    let helper = match &options.files {
        Some(f) if (0..tasks.len()).any(|g| f.gives(index(g))) => {
            let helper = f.helper.display().to_string();
            if has_nul(&helper) {
                out.push(nul_error(&tasks[0], "the files helper's path"));
            }
            quote(&helper)
        }
        _ => "''".to_owned(),
    };
    if helper.contains(['$', '`']) {
        s.push_str("# shellcheck disable=SC2016 # a path, not an expression\n");
    }
    let _ = writeln!(s, "skyc_files_helper={helper}");
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
        let mounts = delivered(g);
        if let Some(files) = &options.files
            && files.gives(index(g))
        {
            // Where the node's writes over its files go: memory of its
            // own, over `$SKYC_RUN_DIR/layers` (a cluster's disks are not
            // skyc's to tend).
            let view = files.view(index(g), crate::files::Layers::Memory(None));
            let _ = writeln!(
                s,
                "    printf '%s' {} >\"$1/{g}.files\"",
                quote(&view.to_json())
            );
        }
        let prelude = prelude(task, mounts, buckets(g), !volumes(g).is_empty(), out);
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

/// `export` lines for the task's envs and the `cd` into its workdir
/// (unless its files are delivered: the files helper starts it there).
fn prelude(
    task: &Task,
    mounts: &[crate::files::Mount],
    buckets: &[crate::storage::Mounted],
    volumes: bool,
    out: &mut Vec<Diagnostic>,
) -> String {
    let mut p = String::new();
    for env in &task.envs {
        check_env_name(&env.name, task, out);
        if has_nul(&env.value) {
            out.push(nul_error(task, &format!("envs.{}", env.name)));
        }
        let _ = writeln!(p, "export {}={}", env.name, quote(&env.value));
    }
    let delivered = |workdir: bool| mounts.iter().any(|m| m.workdir == workdir);
    match &task.workdir {
        Some(Workdir::Local { .. }) if delivered(true) => {}
        Some(Workdir::Local { path, .. }) => {
            if has_nul(path) {
                out.push(nul_error(task, "workdir"));
            }
            // On a cluster the submit directory is shared: run in place.
            let _ = writeln!(p, "cd -- {} || exit 1", quote(path));
        }
        Some(Workdir::Git { .. }) => out.push(ignored(task, "a git `workdir` is not cloned")),
        None => {}
    }
    // Those not delivered: buckets and storage, or all of them for
    // `build` (which reads no files).
    let mounted =
        |m: &skyc_compiler::ir::FileMount| buckets.iter().any(|b| b.destination == m.destination);
    if mounts.is_empty() && buckets.is_empty() && !task.file_mounts.is_empty() {
        out.push(ignored(task, "`file_mounts` are not applied"));
    } else if task
        .file_mounts
        .iter()
        .any(|m| !crate::files::carries(mounts, m) && !mounted(m))
    {
        out.push(ignored(
            task,
            "file mounts from buckets and SkyPilot Storage are not applied",
        ));
    }
    if !task.volumes.is_empty() && !volumes {
        out.push(ignored(task, "`volumes` are not mounted"));
    }
    p
}

fn check_env_name(name: &str, task: &Task, out: &mut Vec<Diagnostic>) {
    if !crate::shell::is_variable_name(name) {
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
