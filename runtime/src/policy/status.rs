//! SkyPilot's managed-job statuses, for tasks and the group.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// Waiting for resources.
    Pending,
    /// Being launched.
    Starting,
    /// Every node runs (setup or run).
    Running,
    /// Restarting after a lost node or a recoverable failure.
    Recovering,
    /// Being terminated (cancel, or an auxiliary after the primaries).
    Cancelling,
    Succeeded,
    /// User code failed, and no restart is left.
    Failed,
    /// Setup failed, and no restart is left.
    FailedSetup,
    Cancelled,
}

impl Status {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Status::Succeeded | Status::Failed | Status::FailedSetup | Status::Cancelled
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "PENDING",
            Status::Starting => "STARTING",
            Status::Running => "RUNNING",
            Status::Recovering => "RECOVERING",
            Status::Cancelling => "CANCELLING",
            Status::Succeeded => "SUCCEEDED",
            Status::Failed => "FAILED",
            Status::FailedSetup => "FAILED_SETUP",
            Status::Cancelled => "CANCELLED",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
