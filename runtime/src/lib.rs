//! skyc's runtime.
//!
//! [`policy`] is the one policy engine every backend shares: the group's
//! state machine, fed events (a node started, exited, was lost; a timer
//! fired; cancel) and answering with actions (start, terminate, kill, set a
//! timer, record a status). It does no I/O and reads no clock; backends turn
//! actions into processes, API calls or commands, and report back.
//!
//! [`store`] keeps every group's state in SQLite. The [`supervisor`] of a
//! state directory runs its groups: on this machine through [`local`], on
//! a cluster through [`slurm`] or [`k8s`], each behind the one
//! [`backend::Backend`] interface. [`secrets`] gives tasks their secrets on
//! every target.

pub mod aws;
pub mod backend;
pub mod backoff;
pub mod goal;
pub mod k8s;
pub mod local;
pub mod outbox;
pub mod paths;
pub mod policy;
pub mod secrets;
pub mod slurm;
pub mod store;
pub mod supervisor;
