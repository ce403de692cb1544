//! The engine: state per task, one `handle` per event.

use super::{Attempt, Execution, GroupSpec, Status, TaskId};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Which part of a node's script ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    Setup,
    Run,
}

/// What a backend reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// Resources are not available yet; the attempt waits.
    TaskQueued {
        task: TaskId,
        attempt: Attempt,
    },
    /// Every node of the attempt has started.
    TaskStarted {
        task: TaskId,
        attempt: Attempt,
    },
    /// A node's process tree ended, by itself or after a signal; `code` is
    /// the exit status (128 + signal for a signal, as a shell reports it).
    NodeExited {
        task: TaskId,
        attempt: Attempt,
        node: u32,
        phase: Phase,
        code: i32,
    },
    /// A node vanished: preempted, its machine lost, killed from outside.
    NodeLost {
        task: TaskId,
        attempt: Attempt,
        node: u32,
    },
    TimerFired(Timer),
    CancelRequested,
}

/// Timers the engine asks for; the backend fires them back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Timer {
    /// An auxiliary's termination delay after the primaries succeeded.
    AuxiliaryDelay(TaskId),
    /// SIGKILL whatever of this attempt still runs after the grace period.
    Kill { task: TaskId, attempt: Attempt },
}

/// Why a task is being terminated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reason {
    /// A node failed or was lost; the others of the attempt stop before it
    /// restarts or fails as a whole.
    AttemptEnded,
    /// The primaries finished; this auxiliary is done.
    PrimariesFinished,
    /// The user cancelled the group.
    Cancel,
}

/// What the engine asks a backend to do, or records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Start every node of the task (setup, then run).
    Start {
        task: TaskId,
        attempt: Attempt,
    },
    /// SIGTERM every live node of the attempt.
    Terminate {
        task: TaskId,
        attempt: Attempt,
        reason: Reason,
    },
    /// SIGKILL every live node of the attempt.
    Kill {
        task: TaskId,
        attempt: Attempt,
    },
    SetTimer {
        timer: Timer,
        after: Duration,
    },
    /// A task's status changed.
    TaskStatus {
        task: TaskId,
        status: Status,
    },
    /// The group's status changed.
    GroupStatus(Status),
}

/// What to do once the attempt's last node is down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Then {
    /// Nothing decided: nodes are running normally.
    Continue,
    Restart {
        uses_budget: bool,
    },
    Finish(Status),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct TaskState {
    status: Status,
    attempt: Attempt,
    /// Per node of the current attempt: still running (or not yet
    /// answered for).
    live: Vec<bool>,
    /// Per node: ended with 0 after `run`.
    succeeded: Vec<bool>,
    then: Then,
    /// Restarts charged to `max_restarts_on_errors`.
    restarts_used: u32,
    /// Every restart, charged or not.
    restarts: u32,
}

/// The group's state machine. Serialisable, so a supervisor can persist it
/// and resume after a crash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Engine {
    spec: GroupSpec,
    tasks: Vec<TaskState>,
    group_status: Status,
    primaries_done: bool,
    cancelled: bool,
}

impl Engine {
    pub fn new(spec: GroupSpec) -> Self {
        let tasks = spec
            .tasks
            .iter()
            .map(|t| TaskState {
                status: Status::Pending,
                attempt: 0,
                live: vec![false; t.num_nodes as usize],
                succeeded: vec![false; t.num_nodes as usize],
                then: Then::Continue,
                restarts_used: 0,
                restarts: 0,
            })
            .collect();
        Self {
            spec,
            tasks,
            group_status: Status::Pending,
            primaries_done: false,
            cancelled: false,
        }
    }

    pub fn spec(&self) -> &GroupSpec {
        &self.spec
    }

    pub fn task_status(&self, task: TaskId) -> Status {
        self.tasks[task].status
    }

    pub fn group_status(&self) -> Status {
        self.group_status
    }

    /// The task's current attempt.
    pub fn attempt(&self, task: TaskId) -> Attempt {
        self.tasks[task].attempt
    }

    /// Restarts so far, and how many of them used the error budget.
    pub fn restarts(&self, task: TaskId) -> (u32, u32) {
        (self.tasks[task].restarts, self.tasks[task].restarts_used)
    }

    /// Whether the backend still owes an answer for this node of the
    /// task's current attempt.
    pub fn node_live(&self, task: TaskId, node: u32) -> bool {
        self.tasks[task]
            .live
            .get(node as usize)
            .copied()
            .unwrap_or(false)
    }

    /// Whether the task's current attempt is ending: a node failed or was
    /// lost, or the task is being terminated. Its live nodes are to stop
    /// and be answered for; what follows (a restart or the end) is
    /// decided already.
    pub fn stopping(&self, task: TaskId) -> bool {
        self.tasks
            .get(task)
            .is_some_and(|t| !t.status.is_terminal() && t.then != Then::Continue)
    }

    /// Whether the user cancelled the group.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }

    /// Every task is terminal.
    pub fn is_finished(&self) -> bool {
        self.tasks.iter().all(|t| t.status.is_terminal())
    }

    /// Launches every task (a pipeline: its first).
    pub fn start(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        let first = match self.spec.execution {
            Execution::Parallel => self.tasks.len(),
            Execution::Serial => self.tasks.len().min(1),
        };
        for task in 0..first {
            self.launch(task, &mut out);
        }
        self.update_group_status(&mut out);
        out
    }

    pub fn handle(&mut self, event: Event) -> Vec<Action> {
        let mut out = Vec::new();
        match event {
            Event::TaskQueued { task, attempt } => {
                if self.is_current(task, attempt) && self.tasks[task].status == Status::Starting {
                    self.set_status(task, Status::Pending, &mut out);
                }
            }
            Event::TaskStarted { task, attempt } => {
                let t = self.tasks.get(task);
                if self.is_current(task, attempt)
                    && t.is_some_and(|t| {
                        t.then == Then::Continue
                            && t.live.iter().any(|&l| l)
                            && matches!(
                                t.status,
                                Status::Pending | Status::Starting | Status::Recovering
                            )
                    })
                {
                    self.set_status(task, Status::Running, &mut out);
                }
            }
            Event::NodeExited {
                task,
                attempt,
                node,
                phase,
                code,
            } => self.node_ended(task, attempt, node, Some((phase, code)), &mut out),
            Event::NodeLost {
                task,
                attempt,
                node,
            } => {
                self.node_ended(task, attempt, node, None, &mut out);
            }
            Event::TimerFired(Timer::AuxiliaryDelay(task)) => {
                // Only the timer `on_task_finished` set means anything.
                if self.primaries_done
                    && task < self.tasks.len()
                    && !self.spec.tasks[task].primary
                    && !self.tasks[task].status.is_terminal()
                {
                    self.terminate(task, Reason::PrimariesFinished, &mut out);
                }
            }
            Event::TimerFired(Timer::Kill { task, attempt }) => {
                if self.is_current(task, attempt) && self.tasks[task].live.iter().any(|&l| l) {
                    out.push(Action::Kill { task, attempt });
                }
            }
            Event::CancelRequested => {
                if !self.cancelled {
                    self.cancelled = true;
                    for task in 0..self.tasks.len() {
                        if !self.tasks[task].status.is_terminal() {
                            self.terminate(task, Reason::Cancel, &mut out);
                        }
                    }
                }
            }
        }
        self.update_group_status(&mut out);
        out
    }

    fn is_current(&self, task: TaskId, attempt: Attempt) -> bool {
        self.tasks.get(task).is_some_and(|t| t.attempt == attempt)
    }

    fn launch(&mut self, task: TaskId, out: &mut Vec<Action>) {
        let t = &mut self.tasks[task];
        t.live.iter_mut().for_each(|l| *l = true);
        t.succeeded.iter_mut().for_each(|s| *s = false);
        t.then = Then::Continue;
        let attempt = t.attempt;
        if t.status != Status::Recovering {
            self.set_status(task, Status::Starting, out);
        }
        out.push(Action::Start { task, attempt });
    }

    /// A node of `task` ended: `outcome` is its phase and exit code, or
    /// `None` when it was lost.
    fn node_ended(
        &mut self,
        task: TaskId,
        attempt: Attempt,
        node: u32,
        outcome: Option<(Phase, i32)>,
        out: &mut Vec<Action>,
    ) {
        if !self.is_current(task, attempt) {
            return;
        }
        let spec = &self.spec.tasks[task];
        let t = &mut self.tasks[task];
        let node = node as usize;
        if t.status.is_terminal() || !t.live.get(node).copied().unwrap_or(false) {
            return;
        }
        t.live[node] = false;
        if t.then == Then::Continue {
            match outcome {
                Some((Phase::Run, 0)) => t.succeeded[node] = true,
                Some((phase, code)) => {
                    let listed =
                        u8::try_from(code).is_ok_and(|c| spec.recover_on_exit_codes.contains(&c));
                    t.then = if listed {
                        Then::Restart { uses_budget: false }
                    } else if t.restarts_used < spec.max_restarts_on_errors {
                        Then::Restart { uses_budget: true }
                    } else if phase == Phase::Setup {
                        Then::Finish(Status::FailedSetup)
                    } else {
                        Then::Finish(Status::Failed)
                    };
                }
                None => t.then = Then::Restart { uses_budget: false },
            }
            // A failure or a loss ends the attempt: its other nodes stop.
            let (then, any_live) = (t.then, t.live.iter().any(|&l| l));
            if matches!(then, Then::Restart { .. }) {
                self.set_status(task, Status::Recovering, out);
            }
            if then != Then::Continue && any_live {
                self.stop_attempt(task, Reason::AttemptEnded, out);
            }
        }
        let t = &self.tasks[task];
        if t.live.iter().any(|&l| l) {
            return;
        }
        // The attempt's last node is down.
        match t.then {
            Then::Continue => {
                let status = if t.succeeded.iter().all(|&s| s) {
                    Status::Succeeded
                } else {
                    Status::Failed
                };
                self.finish(task, status, out);
            }
            Then::Finish(status) => self.finish(task, status, out),
            Then::Restart { uses_budget } => {
                let t = &mut self.tasks[task];
                t.attempt += 1;
                t.restarts += 1;
                if uses_budget {
                    t.restarts_used += 1;
                }
                self.launch(task, out);
            }
        }
    }

    /// Terminates a task for good (cancel, or an auxiliary after the
    /// primaries).
    fn terminate(&mut self, task: TaskId, reason: Reason, out: &mut Vec<Action>) {
        let t = &mut self.tasks[task];
        if t.status.is_terminal() {
            return;
        }
        t.then = Then::Finish(Status::Cancelled);
        if t.live.iter().any(|&l| l) {
            self.set_status(task, Status::Cancelling, out);
            self.stop_attempt(task, reason, out);
        } else {
            self.finish(task, Status::Cancelled, out);
        }
    }

    fn stop_attempt(&mut self, task: TaskId, reason: Reason, out: &mut Vec<Action>) {
        let attempt = self.tasks[task].attempt;
        out.push(Action::Terminate {
            task,
            attempt,
            reason,
        });
        out.push(Action::SetTimer {
            timer: Timer::Kill { task, attempt },
            after: self.spec.grace,
        });
    }

    fn finish(&mut self, task: TaskId, status: Status, out: &mut Vec<Action>) {
        self.set_status(task, status, out);
        self.on_task_finished(out);
    }

    /// When the last primary is done, auxiliaries end: after their delays
    /// if every primary succeeded, at once otherwise. In a pipeline, the
    /// next step starts or the rest is cancelled.
    fn on_task_finished(&mut self, out: &mut Vec<Action>) {
        if self.spec.execution == Execution::Serial {
            return self.next_step(out);
        }
        if self.primaries_done || self.cancelled {
            return;
        }
        let primaries = || (0..self.tasks.len()).filter(|&i| self.spec.tasks[i].primary);
        if !primaries().all(|i| self.tasks[i].status.is_terminal()) {
            return;
        }
        self.primaries_done = true;
        let all_succeeded = primaries().all(|i| self.tasks[i].status == Status::Succeeded);
        for task in 0..self.tasks.len() {
            if self.spec.tasks[task].primary || self.tasks[task].status.is_terminal() {
                continue;
            }
            let delay = self.spec.tasks[task].termination_delay;
            if all_succeeded && !delay.is_zero() {
                out.push(Action::SetTimer {
                    timer: Timer::AuxiliaryDelay(task),
                    after: delay,
                });
            } else {
                self.terminate(task, Reason::PrimariesFinished, out);
            }
        }
    }

    /// A pipeline after a step ended: the first step not yet ended starts
    /// if every step before it SUCCEEDED; otherwise the steps left are
    /// CANCELLED (SkyPilot has no SKIPPED status).
    fn next_step(&mut self, out: &mut Vec<Action>) {
        let Some(next) = self.tasks.iter().position(|t| !t.status.is_terminal()) else {
            return;
        };
        let launched =
            self.tasks[next].live.iter().any(|&l| l) || self.tasks[next].then != Then::Continue;
        if launched {
            return;
        }
        if !self.cancelled
            && self.tasks[..next]
                .iter()
                .all(|t| t.status == Status::Succeeded)
        {
            self.launch(next, out);
        } else {
            for task in next..self.tasks.len() {
                self.terminate(task, Reason::Cancel, out);
            }
        }
    }

    fn set_status(&mut self, task: TaskId, status: Status, out: &mut Vec<Action>) {
        let t = &mut self.tasks[task];
        if t.status != status && !t.status.is_terminal() {
            t.status = status;
            out.push(Action::TaskStatus { task, status });
        }
    }

    /// The first non-SUCCEEDED status among the primaries, in task order.
    fn update_group_status(&mut self, out: &mut Vec<Action>) {
        let status = (0..self.tasks.len())
            .filter(|&i| self.spec.tasks[i].primary)
            .map(|i| self.tasks[i].status)
            .find(|&s| s != Status::Succeeded)
            .unwrap_or(Status::Succeeded);
        if status != self.group_status {
            self.group_status = status;
            out.push(Action::GroupStatus(status));
        }
    }
}
