//! skyc's runtime.
//!
//! [`policy`] is the one policy engine every backend shares: the group's
//! state machine, fed events (a node started, exited, was lost; a timer
//! fired; cancel) and answering with actions (start, terminate, kill, set a
//! timer, record a status). It does no I/O and reads no clock; backends turn
//! actions into processes, API calls or commands, and report back.
//!
//! [`pool`] is the pool engine, pure too: which workers a pool of warm
//! workers should have and which of its jobs runs on which worker.
//!
//! [`store`] keeps every group's state in SQLite. The [`supervisor`] of a
//! state directory runs its groups through four backends, each behind the
//! one [`backend::Backend`] interface: on this machine through [`local`],
//! on a cluster through [`slurm`] or [`k8s`], on EC2 instances through
//! [`aws`], the first provider of the [`cloud`] runtime. Every backend
//! module has the same files for the same roles:
//! `plan.rs` plans its runs (what the client stores), `backend.rs` holds
//! its `Backend` impl; no backend module imports another.
//!
//! What the backends share lives beside them: [`reconciler`] (the one
//! reconcile runner under Kubernetes and EC2, with what the engine wants
//! of a cluster, backoff, and the outbox that hands a backend's reports to
//! the supervisor's loop), [`paths`] (a group's files in the state
//! directory, and atomic writes). [`secrets`] gives tasks their secrets on every
//! target; [`files`] their code and data, and [`storage`] the buckets
//! they copy or mount, through the S3 client ([`aws::s3`]) and the GCS
//! client ([`gcp`]), which share [`objects`]' transfers.

pub mod aws;
pub mod backend;
pub mod cloud;
pub mod controller;
pub mod files;
pub mod gcp;
pub mod k8s;
pub mod local;
pub mod objects;
pub mod paths;
pub mod policy;
pub mod pool;
pub mod reconciler;
pub mod registry;
pub mod secrets;
pub mod slurm;
pub mod storage;
pub mod store;
pub mod supervisor;
pub mod volumes;
