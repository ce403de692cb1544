//! A small Slurm client for the Slurm target's batch scripts.
//!
//! The batch script (`skyc build --target slurm`) runs the group's
//! lifecycle inside the allocation and appends every decision to
//! `$SKYC_OUT/status` (see docs/targets/slurm.md). This module is what a
//! supervisor outside the allocation needs:
//!
//! - [`Slurm`]: typed wrappers over `sbatch --parsable`, `squeue`,
//!   `scontrol show job -o`, `sacct` and `scancel`, using the cluster of
//!   the usual environment (`SLURM_CONF`) or an explicit one;
//! - [`JobState`]: Slurm's job states, and what each means for the group;
//! - [`StatusLine`]: the status file, parsed;
//! - [`Tracker`]: status lines and job states fed to the shared policy
//!   [`Engine`](crate::policy::Engine), so per-task and group statuses come
//!   from the same state machine as every other backend;
//! - [`Plan`], [`Watch`], [`PipelineWatch`] and [`SlurmBackend`]: `skyc
//!   run --target slurm`, a group (one job) or a pipeline (one job per
//!   step) submitted (`submit`) and followed by the supervisor of the
//!   state directory, its statuses recorded like a local group's;
//! - [`PoolPlan`], [`JobPlan`]: a pool's workers (a batch job each,
//!   holding its allocation) and jobs (steps of a worker's allocation),
//!   whose policy the supervisor runs (`members` for the workers,
//!   `pool_job` for a job on one).

mod backend;
mod client;
mod members;
mod pipeline;
mod plan;
mod pool;
mod pool_job;
mod state;
mod status;
mod submit;
#[cfg(test)]
mod tests;
mod tracker;
mod watch;

pub use backend::SlurmBackend;
pub use client::{Component, Slurm, SlurmError, Step, is_job_id};
pub use pipeline::PipelineWatch;
pub use plan::{Plan, PlannedStep, Submission, log_places};
pub use pool::{JobPlan, PoolPlan, TaskRun, WorkerPlan, plan_pool};
pub use state::JobState;
pub use status::{StatusFile, StatusLine, What, read_status};
pub use submit::{AdoptError, SUBMITTING};
pub use tracker::Tracker;
pub use watch::{Followed, POLL, Polled, Watch};
