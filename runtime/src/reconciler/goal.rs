//! What the engine wants of the cluster, read from its state: the
//! level the reconciler drives the group's objects to.
//!
//! The runtime reconciles from the engine's state rather than replaying
//! its actions one by one, so a supervisor that died between committing a
//! decision and carrying it out carries it out from the committed state,
//! and a decision carried out already is not carried out again.

use crate::policy::{Engine, Status};

#[derive(Clone, Debug, PartialEq)]
pub struct Goal {
    pub tasks: Vec<TaskGoal>,
    /// The group's status once every task has ended.
    pub end: Option<Status>,
    /// The user cancelled the group.
    pub cancel: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct TaskGoal {
    /// The attempt whose node Jobs should exist.
    pub attempt: u32,
    pub want: Want,
    pub status: Status,
    /// Per node: the engine still waits to hear how it ended.
    pub live: Vec<bool>,
}

/// What a task's current attempt should do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// Run its nodes.
    Run,
    /// Stop its nodes: the attempt is ending (a node failed or was lost,
    /// or the task is terminated).
    Stop,
    /// The task has ended; nothing of it may run again.
    Done,
}

impl TaskGoal {
    /// Whether the engine has launched the current attempt and still
    /// waits for some node of it. A pipeline's step not started yet (the
    /// one before it has not SUCCEEDED) should run but has no node
    /// awaited: nothing of it exists, and nothing should until it starts.
    pub fn awaits_nodes(&self) -> bool {
        self.live.iter().any(|&l| l)
    }
}

impl Goal {
    pub fn from_engine(engine: &Engine) -> Self {
        let spec = engine.spec();
        let tasks = (0..spec.tasks.len())
            .map(|t| {
                let status = engine.task_status(t);
                TaskGoal {
                    attempt: engine.attempt(t),
                    want: if status.is_terminal() {
                        Want::Done
                    } else if engine.stopping(t) {
                        Want::Stop
                    } else {
                        Want::Run
                    },
                    status,
                    live: (0..spec.tasks[t].num_nodes)
                        .map(|r| engine.node_live(t, r))
                        .collect(),
                }
            })
            .collect();
        Self {
            tasks,
            end: engine.is_finished().then(|| engine.group_status()),
            cancel: engine.is_cancelled(),
        }
    }
}
