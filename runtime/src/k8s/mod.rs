//! `skyc run --target k8s`: a group put on a Kubernetes cluster in the
//! runtime's layout (`skyc_targets::k8s::pods`: an anchor JobSet, and one
//! pod per node attempt that the runtime creates when the engine decides)
//! and supervised with the shared policy engine.
//!
//! - [`Plan`]: what the submitting client stores (the anchor's objects,
//!   each task's pod template, the namespace and context, the engine's
//!   spec);
//! - [`client`]: the cluster as kubectl finds it (kubeconfig, `--context`,
//!   in-cluster), and whether it answers;
//! - [`apply`]: the checks that refuse a group before anything is
//!   created (JobSet not installed, RBAC, names taken), and the
//!   server-side apply;
//! - [`observe`] and [`reconcile`]: pure, where the engine meets the
//!   cluster: the JobSet, Jobs and pods to engine events, and the engine's
//!   state to API requests (launches, pod deletions, the gate; [`goal`](crate::reconciler::goal)
//!   reads that state);
//! - [`watch`], [`request`], [`logs`], [`retry`]: the I/O, on one thread
//!   of its own;
//! - `backend`: [`Kubernetes`], the supervisor's [`Backend`], that thread
//!   and a task per group; `plan`: [`Plan`], the run as stored;
//! - pools: `pool` ([`PoolPlan`], each worker a group whose nodes hold
//!   after setup), `pool_job` (a job's task: its nodes in its worker's
//!   pods), [`exec`] and [`job_scripts`] (`pods/exec` and what it runs).
//!
//! [`Backend`]: crate::backend::Backend

pub mod apply;
mod backend;
pub mod client;
pub mod exec;
pub mod files;
pub mod job_scripts;
pub mod jobset;
pub mod kueue;
pub mod lease;
pub mod log_readers;
pub mod logs;
pub mod objects;
pub mod observe;
mod plan;
mod pool;
mod pool_job;
pub mod reconcile;
pub mod request;
pub mod retry;
pub mod volume;
pub mod watch;

pub use backend::{Connect, Kubernetes, Tuning, kubeconfig};
pub use jobset::JobSet;
pub use plan::{FIELD_MANAGER, GROUP_LABEL, LAUNCHED_ANNOTATION, Lowering, Plan, RUN_ANNOTATION};
pub use pool::{PoolInput, PoolPlan};

#[cfg(any(test, feature = "fake-cluster"))]
mod tests;
#[cfg(any(test, feature = "fake-cluster"))]
pub use tests::front::FakeCluster;
