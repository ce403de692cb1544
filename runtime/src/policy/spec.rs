//! What the engine needs to know of a group: taken from the IR.

use serde::{Deserialize, Serialize};
use skyc_compiler::ir::{self, Group, Role};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupSpec {
    pub tasks: Vec<TaskSpec>,
    /// Time between SIGTERM and SIGKILL when terminating a task.
    pub grace: Duration,
    /// Whether the tasks run together (a Job Group) or one after another
    /// (a pipeline). Groups recorded before pipelines existed are parallel.
    #[serde(default)]
    pub execution: Execution,
}

/// How a group's tasks are ordered in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Execution {
    /// Every task starts at once (a Job Group).
    #[default]
    Parallel,
    /// Each task starts when the one before it SUCCEEDED; a task that does
    /// not succeed cancels the ones after it (a managed-job pipeline).
    Serial,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskSpec {
    pub name: String,
    pub primary: bool,
    pub num_nodes: u32,
    /// How long an auxiliary keeps running after every primary succeeded.
    pub termination_delay: Duration,
    pub max_restarts_on_errors: u32,
    pub recover_on_exit_codes: Vec<u8>,
}

impl GroupSpec {
    /// The policy view of a compiled group.
    pub fn from_ir(group: &Group, grace: Duration) -> Self {
        Self {
            grace,
            execution: match group.execution {
                ir::Execution::Parallel => Execution::Parallel,
                ir::Execution::Serial => Execution::Serial,
            },
            tasks: group
                .tasks
                .iter()
                .map(|t| TaskSpec {
                    name: t.name.clone(),
                    primary: t.role == Role::Primary,
                    num_nodes: t.num_nodes,
                    termination_delay: Duration::from_secs(t.termination_delay_secs.unwrap_or(0)),
                    max_restarts_on_errors: t.recovery.max_restarts_on_errors,
                    recover_on_exit_codes: t.recovery.recover_on_exit_codes.clone(),
                })
                .collect(),
        }
    }
}
