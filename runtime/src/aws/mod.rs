//! `skyc run --target aws`: a group's instances launched from the EC2
//! requests `skyc build --target aws` emits, found again by their tags,
//! and terminated when the engine says so.
//!
//! AWS is the first provider of the [`cloud`](crate::cloud) runtime,
//! which holds the control plane (the run's instances to engine events,
//! the engine's state to operations), the data plane over SSH and the
//! world between them. What is AWS's own:
//!
//! - [`ec2`]: a small EC2 client (the Query API, SigV4 signing, XML
//!   answers, which errors are retried), with [`credentials`] (the
//!   configuration and credential chain the AWS CLI follows, refreshed
//!   while a run lasts, and narrowed for the nodes) and [`s3`];
//! - [`control`]: the cloud's operations carried out on EC2 and S3, as
//!   the runtime's [`Provider`](crate::cloud::Provider);
//!
//! and at the top, as in every backend,
//! `plan.rs` ([`Plan`]: the build's spec with the run's own names, tags
//! and `ClientToken`s; [`RunPlan::for_run`], which plans a run once EC2
//! has answered with the run's credentials), `pool.rs` (a pool's worker
//! and job plans), `pool_job.rs` (a job's actions and placement) and
//! [`backend`] (the supervisor's [`crate::backend::Backend`] for AWS
//! groups, a thread per group running both planes).

pub mod backend;
pub mod control;
pub mod credentials;
pub mod ec2;
pub(crate) mod plan;
mod pool;
mod pool_job;
pub mod s3;

pub use crate::cloud::run::{ATTEMPT_TAG, GROUP_TAG, POOL_TAG, RANK_TAG, RUN_TAG, TASK_TAG};
pub use backend::Aws;
pub use credentials::{Access, ConfigError};
pub use ec2::client::{Ec2, Error, SetupError, Tuning};
pub use ec2::config::Settings;
pub use plan::{Plan, PlanError, RunOptions, RunPlan, SshAccess, client_token, valid_run};
pub use pool::{JobPlan, PoolPlan};

#[cfg(test)]
mod tests;
