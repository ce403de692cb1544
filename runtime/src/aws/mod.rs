//! `skyc run --target aws`: a group's instances launched from the EC2
//! requests `skyc build --target aws` emits, found again by their tags,
//! and terminated when the engine says so.
//!
//! - [`Plan`]: the build's spec, with the run's own names, tags and
//!   `ClientToken`s;
//! - [`config`]: credentials, region and endpoint as the AWS SDKs find
//!   them;
//! - [`sigv4`], [`query`], [`response`], [`client`], [`retry`]: a small
//!   EC2 client (the Query API, signed requests, XML answers) rather than
//!   the AWS SDK, which costs minutes of build (DESIGN.md, "AWS");
//! - [`world`], [`observe`] and [`reconcile`]: pure, where the engine
//!   meets EC2: the run's instances to engine events, and the engine's
//!   state ([`crate::goal`]) to EC2 operations;
//! - [`ops`]: those operations, each safe to repeat; [`pass`]: one pass
//!   of the loop (world, reports, operations), what the backend runs;
//! - [`node`] and [`remote`]: the data plane's pure half (a node's files
//!   to its outcome, the hosts file, the commands run on a node over SSH
//!   and how their answers are read, through OpenSSH's client), and
//!   [`data`], their loop step;
//! - [`backend`]: the supervisor's [`crate::backend::Backend`] for AWS
//!   groups, a thread per group running both planes.

pub mod backend;
pub mod client;
pub mod config;
pub mod data;
pub mod node;
pub mod observe;
pub mod ops;
pub mod pass;
mod plan;
pub mod query;
pub mod reconcile;
pub mod remote;
pub mod response;
pub mod retry;
pub mod sigv4;
pub mod world;

pub use backend::{Aws, RunPlan};
pub use client::{Ec2, Error, SetupError, Tuning};
pub use config::{ConfigError, Settings};
pub use plan::{
    ATTEMPT_TAG, GROUP_TAG, Plan, PlanError, RANK_TAG, RUN_TAG, SshAccess, TASK_TAG, client_token,
    valid_run,
};

#[cfg(test)]
mod tests;
