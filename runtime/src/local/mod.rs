//! The local target: a group's nodes as process trees on this machine.
//!
//! - [`plan`]: what to run, made from the IR by the client; `pool`: a
//!   pool's workers planned, `pool_job`: a job run on a worker;
//! - [`capacity`]: the machine as a one-node cluster (cpus, memory, GPUs);
//! - [`network`]: a network identity per node and the group's hostnames;
//! - [`env`](mod@env): the environment contract of a node;
//! - [`agent`]: the per-node process that outlives the supervisor;
//! - [`logindex`]: the index beside each node log;
//! - [`backend`]: the backend that runs the nodes ([`backend::Local`]).
//!
//! The [`supervisor`](crate::supervisor) drives the backend through the one
//! [`Backend`](crate::backend::Backend) interface.

pub mod agent;
pub mod backend;
pub mod capacity;
pub mod env;
pub mod files;
pub mod logindex;
pub mod network;
pub mod plan;
mod pool;
mod pool_job;
pub mod spawner;

/// Set in every node process to its attempt directory: how the processes
/// of a lost node are found.
pub const NODE_MARKER_VAR: &str = "SKYC_NODE_DIR";
