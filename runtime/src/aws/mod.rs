//! `skyc run --target aws`: a group's instances launched from the EC2
//! requests `skyc build --target aws` emits, found again by their tags,
//! and terminated when the engine says so.
//!
//! The backend in three layers, each a folder:
//!
//! - [`ec2`]: a small EC2 client (the Query API, SigV4 signing, XML
//!   answers, which errors are retried), with [`credentials`] (the
//!   configuration and credential chain the AWS CLI follows, refreshed
//!   while a run lasts);
//! - [`control`]: the control plane, where the engine meets EC2: the
//!   run's instances to engine events, the engine's state to EC2
//!   operations, and one pass of that loop;
//! - [`data`]: the data plane over SSH: hosts and secrets delivered to
//!   each node, its logs followed and its outcome read;
//!
//! with [`world`] between the two planes (the run as EC2 shows it: each
//! instance a node's attempt), and at the top, as in every backend,
//! `plan.rs` ([`Plan`]: the build's spec with the run's own names, tags
//! and `ClientToken`s; [`RunPlan::for_run`], which plans a run once EC2
//! has answered with the run's credentials), `pool.rs` (a pool's worker
//! and job plans), `pool_job.rs` (a job's actions and placement) and
//! [`backend`] (the supervisor's [`crate::backend::Backend`] for AWS
//! groups, a thread per group running both planes).

pub mod backend;
pub mod control;
pub mod credentials;
pub mod data;
pub mod ec2;
mod plan;
mod pool;
mod pool_job;
pub mod s3;
pub mod world;

pub use backend::Aws;
pub use credentials::{Access, ConfigError};
pub use ec2::client::{Ec2, Error, SetupError, Tuning};
pub use ec2::config::Settings;
pub use plan::{
    ATTEMPT_TAG, GROUP_TAG, POOL_TAG, Plan, PlanError, RANK_TAG, RUN_TAG, RunOptions, RunPlan,
    SshAccess, TASK_TAG, client_token, valid_run,
};
pub use pool::{JobPlan, PoolPlan};

#[cfg(test)]
mod tests;
