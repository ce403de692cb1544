//! The data plane, over SSH (OpenSSH's client): [`node`] is its pure half
//! (a node's files to its outcome, the hosts file), [`remote`] the
//! commands run on a node and how their answers are read, [`plane`]
//! its loop step ([`plane::DataPlane`]), and [`jobs`] a pool worker's
//! jobs, followed on its nodes.

pub mod jobs;
pub mod node;
pub mod plane;
pub mod remote;
