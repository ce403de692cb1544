//! Slurm job states, as squeue and scontrol print them.

/// One component's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    Pending,
    Configuring,
    Running,
    Completing,
    Suspended,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    NodeFail,
    Preempted,
    OutOfMemory,
    BootFail,
    Deadline,
    /// REQUEUED, REQUEUE_FED, REQUEUE_HOLD: on its way back to PENDING.
    Requeued,
    Other(String),
}

impl JobState {
    /// The state as Slurm names it.
    pub fn name(&self) -> &str {
        match self {
            Self::Pending => "PENDING",
            Self::Configuring => "CONFIGURING",
            Self::Running => "RUNNING",
            Self::Completing => "COMPLETING",
            Self::Suspended => "SUSPENDED",
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
            Self::Cancelled => "CANCELLED",
            Self::Timeout => "TIMEOUT",
            Self::NodeFail => "NODE_FAIL",
            Self::Preempted => "PREEMPTED",
            Self::OutOfMemory => "OUT_OF_MEMORY",
            Self::BootFail => "BOOT_FAIL",
            Self::Deadline => "DEADLINE",
            Self::Requeued => "REQUEUED",
            Self::Other(s) => s,
        }
    }

    pub fn parse(s: &str) -> Self {
        // scontrol may print "CANCELLED by 0"; squeue prints the bare name.
        match s.split_whitespace().next().unwrap_or("") {
            "PENDING" => Self::Pending,
            "CONFIGURING" => Self::Configuring,
            "RUNNING" => Self::Running,
            "COMPLETING" => Self::Completing,
            "SUSPENDED" => Self::Suspended,
            "COMPLETED" => Self::Completed,
            "FAILED" => Self::Failed,
            "CANCELLED" => Self::Cancelled,
            "TIMEOUT" => Self::Timeout,
            "NODE_FAIL" => Self::NodeFail,
            "PREEMPTED" => Self::Preempted,
            "OUT_OF_MEMORY" => Self::OutOfMemory,
            "BOOT_FAIL" => Self::BootFail,
            "DEADLINE" => Self::Deadline,
            "REQUEUED" | "REQUEUE_FED" | "REQUEUE_HOLD" => Self::Requeued,
            other => Self::Other(other.to_owned()),
        }
    }

    /// The job will not run again (unless Slurm requeues it, which shows
    /// as PENDING again).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::Completed
                | Self::Failed
                | Self::Cancelled
                | Self::Timeout
                | Self::NodeFail
                | Self::Preempted
                | Self::OutOfMemory
                | Self::BootFail
                | Self::Deadline
        )
    }

    /// A node failure or preemption: with `--requeue` the whole hetjob
    /// restarts, which the group reports as RECOVERING.
    pub fn is_lost(&self) -> bool {
        matches!(
            self,
            Self::NodeFail | Self::Preempted | Self::Requeued | Self::BootFail
        )
    }
}
