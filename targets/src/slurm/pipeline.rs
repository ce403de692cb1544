//! A pipeline as Slurm jobs: one batch job per step, chained.
//!
//! SkyPilot gives each task of a pipeline a cluster of its own, one after
//! another; here each step gets an allocation of its own. A step's job is
//! the batch script a one-task group gets (the same lifecycle, status
//! lines, restart budget and step wrapper), with the pipeline's task ids
//! and no group hostnames. Step `i` is submitted with
//! `--dependency=afterok:<job of step i-1>`, and every step's script
//! carries `--kill-on-invalid-dep=yes`: a step whose job does not end
//! COMPLETED (its script exits non-zero when the step did not succeed)
//! makes Slurm cancel the job of the next step, and that one the next.

use super::script::{Common, Job, Options, batch_script};
use skyc_compiler::ir::{Execution, Group};
use skyc_compiler::{Diagnostic, Rule, Span};

/// The environment variable that carries the pipeline's job id (its first
/// step's) to the jobs of the later steps: their task ids and default
/// output directory name it. Unset, a step's job uses its own id.
pub const PIPELINE_JOB: &str = "SKYC_PIPELINE_JOB";

/// The sbatch option that makes a step wait for the one before it.
pub const AFTER_OK: &str = "--dependency=afterok:";

/// A pipeline lowered to Slurm: what to submit, and in which order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pipeline {
    /// The pipeline's name (its header's, or its first step's).
    pub name: String,
    /// In order.
    pub steps: Vec<StepJob>,
}

/// One step's batch job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepJob {
    /// The step's (task's) name, unique in the pipeline.
    pub name: String,
    /// The complete batch script, for `sbatch` (a file or standard input).
    pub script: String,
    /// The step whose job must end COMPLETED before this one starts
    /// (submit with [`StepJob::dependency`] of that job's id); `None` for
    /// the first. A chain today: step `i` waits for step `i - 1`.
    pub after: Option<usize>,
}

impl StepJob {
    /// The sbatch option that chains this job after `job_id`, the job of
    /// step [`StepJob::after`].
    pub fn dependency(job_id: &str) -> String {
        format!("{AFTER_OK}{job_id}")
    }
}

/// The pipeline, or why there is none; warnings either way.
#[derive(Debug)]
pub struct PipelineBuild {
    /// Present when no diagnostic is an error.
    pub pipeline: Option<Pipeline>,
    pub diagnostics: Vec<Diagnostic>,
}

/// Lowers a pipeline (`Execution::Serial`) to one batch job per step.
pub fn pipeline(group: &Group, options: &Options) -> PipelineBuild {
    let mut diagnostics = Vec::new();
    let common = Common::new(group, options, &mut diagnostics);
    if group.execution != Execution::Serial {
        diagnostics.push(
            Diagnostic::new(
                Rule::SlurmUnrepresentable,
                common.span,
                "a Job Group runs on Slurm as one heterogeneous job, not as a pipeline",
            )
            .label("a Job Group"),
        );
    }
    for o in &common.options().sbatch_options {
        if is_chain_option(o.name()) {
            diagnostics.push(chain_option_error(
                o.name(),
                common.span,
                "from the command line",
            ));
        }
    }
    let steps: Vec<StepJob> = (0..group.tasks.len())
        .map(|i| StepJob {
            name: group.tasks[i].name.clone(),
            script: batch_script(group, Job::Step(i), &common, &mut diagnostics),
            after: i.checked_sub(1),
        })
        .collect();
    let pipeline = (!diagnostics.iter().any(Diagnostic::is_error)).then(|| Pipeline {
        name: group.name.clone(),
        steps,
    });
    PipelineBuild {
        pipeline,
        diagnostics,
    }
}

/// Options that would change how the steps are chained.
pub(crate) fn is_chain_option(name: &str) -> bool {
    matches!(name, "dependency" | "kill-on-invalid-dep")
}

pub(crate) fn chain_option_error(name: &str, span: Span, label: &str) -> Diagnostic {
    Diagnostic::new(
        Rule::SlurmSbatchOption,
        span,
        format!("`--{name}` would change how a pipeline's steps are chained, which skyc sets"),
    )
    .label(label.to_owned())
    .help(
        "each step's job waits for the one before (`--dependency=afterok`) and is \
         cancelled when that one fails (`--kill-on-invalid-dep=yes`)",
    )
}
