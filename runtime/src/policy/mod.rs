//! The policy engine: SkyPilot's Job Group semantics as a pure state
//! machine.
//!
//! - A failing task does not stop the others.
//! - When the last primary finishes, each auxiliary is terminated after its
//!   own delay if every primary succeeded, at once if any failed.
//! - A lost or preempted node restarts its task (all of its nodes) without
//!   touching the others and without using the restart budget; a user-code
//!   failure restarts while the budget lasts; an exit code listed in
//!   `recover_on_exit_codes` restarts without using it.
//! - The group's status is the first non-SUCCEEDED status among its primary
//!   tasks.
//! - In a pipeline ([`Execution::Serial`]) every task is primary and starts
//!   only when the one before it SUCCEEDED; a task that fails (after its
//!   restarts) or is cancelled leaves the tasks after it CANCELLED, as
//!   SkyPilot's managed-job controller does.
//!
//! The contract with a backend: every node of every [`Action::Start`] is
//! answered by exactly one [`Event::NodeExited`] or [`Event::NodeLost`]
//! (also when the backend had not launched it yet and drops it on
//! [`Action::Terminate`]); [`Event::TaskStarted`] says all nodes of an
//! attempt run. Events about an older attempt are ignored.

mod engine;
mod spec;
mod status;
#[cfg(test)]
mod tests;

pub use engine::{Action, Engine, Event, Phase, Reason, Timer};
pub use spec::{Execution, GroupSpec, TaskSpec};
pub use status::Status;

/// Index of a task in [`GroupSpec::tasks`].
pub type TaskId = usize;
/// The number of a task's attempt: 0 for the first launch, one more for
/// each restart.
pub type Attempt = u32;
