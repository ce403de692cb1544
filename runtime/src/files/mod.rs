//! Code and data for the nodes: each task's local `workdir` and
//! `file_mounts` sources, read once when the group is submitted into
//! snapshots of the state directory, and given to every node of the task
//! before its setup starts, as they were when submitted (a restart, a
//! recovery, a supervisor that restarted: the submitted bytes).
//!
//! - [`take`]: which sources a group names, resolved and read once, with
//!   a located diagnostic for each that cannot be;
//! - [`source`]: reading one source (its ignore files, its links) into a
//!   digest and, for a run, a snapshot;
//! - [`store`]: the snapshots, kept while a live group refers to them;
//! - [`node`]: a node's view of them on this machine;
//! - [`pack`]: their tar streams as the cluster and cloud targets carry
//!   them.

pub mod helper;
pub mod node;
pub mod pack;
pub mod source;
pub mod store;
pub mod take;
pub mod tar;

pub use source::Taken;
pub use store::Snapshots;
pub use take::{Files, Mount, Volume};
