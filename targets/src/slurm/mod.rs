//! The Slurm target: a Job Group as one heterogeneous batch job, a
//! pipeline as one batch job per step.
//!
//! A group: one hetjob component per task (nodes, cpus, memory, typed
//! `gpu:<type>:N` gres from the IR: [`gres`]), and a batch script that runs the whole lifecycle
//! inside the allocation: one `srun --het-group` step per task, group
//! hostnames through a private `/etc/hosts` per step, SIGTERM/SIGKILL of
//! auxiliaries after the primaries, restarts within the budget
//! ([`build`]).
//!
//! A pipeline ([`pipeline`]): a [`Pipeline`] of [`StepJob`]s, each the
//! batch script a one-task group gets (the same lifecycle, status lines and
//! restart budget), plus the chain: step `i`'s job is submitted with
//! [`StepJob::dependency`] of step `i - 1`'s job id and [`PIPELINE_JOB`]
//! set to step 0's in its environment; its script carries
//! `--kill-on-invalid-dep=yes`, so a failed step cancels the rest. A
//! submitter (the runtime, or [`Pipeline::submit_script`] run by hand)
//! submits the steps in order; [`Pipeline::files`] is the same as files.
//!
//! Pure: the same IR and options give the same bytes.
//!
//! - [`gres`]: a task's GPUs as the cluster names them;
//! - `sbatch`: validated `#SBATCH` options (sbatch reads them without a
//!   shell, so values are checked, never escaped);
//! - [`crate::shell`]: quoting for every user value in the script body;
//! - `script`: assembles a job's script from the IR;
//! - `pipeline`: a pipeline's step jobs and how they chain;
//! - `submit`: the script that submits a pipeline's jobs;
//! - `lifecycle`: the in-allocation supervisor and step wrapper (shell);
//! - `worker`: a pool's worker, a batch job holding its allocation, and
//!   the launcher of the pool's jobs as its steps.

pub mod gres;
mod lifecycle;
mod pipeline;
mod sbatch;
mod script;
mod submit;
mod worker;

pub use lifecycle::{STEP, SUPERVISOR_MARKER};
pub use pipeline::{AFTER_OK, PIPELINE_JOB, Pipeline, PipelineBuild, StepJob, pipeline};
pub use sbatch::{SbatchError, SbatchOption, is_safe_value};
pub use script::{Build, Options, build};
pub use worker::{HOLD, LAUNCH, worker};
