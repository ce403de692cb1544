//! The cloud runtime: a group run on a provider's instances, one per
//! node's attempt, whichever provider launches them.
//!
//! What is the same on every cloud lives here, typed over a
//! [`Provider`]:
//!
//! - [`instance`] and [`world`]: the run as the provider shows it (its
//!   instances, each a node's attempt found by its tags, its network, its
//!   files' bucket), and [`run`]: what the runtime reads of a run's plan;
//! - [`control`]: the control plane, where the engine meets the
//!   provider: instances to engine events ([`control::observe`]), the
//!   engine's state to operations ([`control::reconcile`]), one pass of
//!   that loop through the [`reconciler`](crate::reconciler) runner
//!   ([`control::pass`]);
//! - [`data`]: the data plane over SSH: hosts, secrets and files
//!   delivered to each node, its logs followed, its outcome read, and a
//!   pool worker's jobs.
//!
//! A provider is what differs: its API client and credentials, how it
//! reads the world and carries out each operation, and which of its
//! errors are an outage or a lack of capacity. AWS is the first
//! ([`crate::aws`]: EC2 and S3); a provider is a module that implements
//! [`Provider`] and a backend that runs both planes on its thread.

pub mod control;
pub mod data;
pub mod instance;
pub mod run;
pub mod world;

use control::reconcile::Op;
use run::Run;
use world::World;

/// A cloud as the control plane drives it, for one run.
#[allow(async_fn_in_trait)]
pub trait Provider {
    type Error: std::fmt::Display;
    /// Its compute service, as messages name it (`EC2`).
    const COMPUTE: &'static str;
    /// Its object store, as messages name it (`S3`).
    const STORE: &'static str;

    /// The run the provider drives.
    fn run(&self) -> Run<'_>;

    /// The run's instances (every state), network and files' bucket.
    async fn world(&self) -> Result<World, Self::Error>;

    /// Carries out one operation on `world` (as read before it): whether
    /// the provider took it, so that the world changes. Each is safe to
    /// repeat.
    async fn apply(&self, world: &World, op: &Op) -> Result<bool, Self::Error>;

    /// The provider is out of reach (no answer, a 5xx), rather than
    /// refusing one call.
    fn is_outage(e: &Self::Error) -> bool;

    /// A launch refused for want of capacity or quota: the task waits.
    fn is_capacity(e: &Self::Error) -> bool;
}
