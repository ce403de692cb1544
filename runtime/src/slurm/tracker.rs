//! Feeds the batch script's status lines and Slurm's job states to the
//! shared policy engine.
//!
//! The script already acts (starts, terminates, restarts) inside the
//! allocation; the engine here only follows, so per-task and group statuses
//! mean the same on Slurm as on every backend. Its `Start`, `Terminate`,
//! `Kill` and `SetTimer` actions are therefore not carried out; the
//! script's own CANCELLING and SIGKILL lines stand for the timers firing.
//!
//! A node failure or preemption requeues the whole hetjob: the script starts
//! again from the first attempt of every task (`r<N+1>` lines). The tracker
//! then reports RECOVERING and follows a fresh engine: recovery on Slurm is
//! per group, coarser than SkyPilot's per task.

use super::JobState;
use super::status::{StatusLine, What};
use crate::policy::{Action, Engine, Event, GroupSpec, Phase, Status, TaskId, Timer};

#[derive(Clone, Debug)]
pub struct Tracker {
    spec: GroupSpec,
    engine: Engine,
    restart: u32,
    /// Set between a requeue and the script's next start.
    recovering: bool,
    /// The script's own final word (its `group` line), when it wrote it.
    script_end: Option<Status>,
    /// What the job's states say of its end, as last observed: provisional
    /// (a requeue passes through ended-looking states) until [`conclude`].
    ///
    /// [`conclude`]: Tracker::conclude
    job_end: Option<Status>,
    /// The watcher decided the job has ended.
    concluded: bool,
    /// The engine was told of the cancel.
    cancel_seen: bool,
    /// When the user's cancel was asked (seconds since the epoch, as the
    /// status file's times): what a node recorded from then on is part of
    /// the cancel (a task that exits 0 on scancel's SIGTERM is cancelled,
    /// not done).
    cancel_asked: Option<f64>,
    /// Lines applied so far (a poller passes the whole file each time).
    seen: usize,
}

impl Tracker {
    pub fn new(spec: GroupSpec) -> Self {
        let mut engine = Engine::new(spec.clone());
        engine.start();
        Self {
            spec,
            engine,
            restart: 0,
            recovering: false,
            script_end: None,
            job_end: None,
            concluded: false,
            cancel_seen: false,
            cancel_asked: None,
            seen: 0,
        }
    }

    /// The batch script wrote the group's end itself: no requeue or
    /// inference is pending.
    pub fn ended_by_script(&self) -> bool {
        self.script_end.is_some()
    }

    /// The end, once there is one: the script's word, else what the job's
    /// states say once concluded.
    fn end(&self) -> Option<Status> {
        self.script_end.or(if self.concluded {
            Some(self.job_end.unwrap_or(Status::Failed))
        } else {
            None
        })
    }

    fn is_recovering(&self) -> bool {
        self.recovering && self.end().is_none()
    }

    /// How many times Slurm restarted the whole job.
    pub fn restarts(&self) -> u32 {
        self.restart
    }

    pub fn task_status(&self, task: TaskId) -> Status {
        if self.is_recovering() {
            return Status::Recovering;
        }
        let status = self.engine.task_status(task);
        match self.end() {
            // The job ended under the task (cancelled, killed, timed out):
            // it ends with the group.
            Some(end) if !status.is_terminal() => {
                if end == Status::Cancelled {
                    Status::Cancelled
                } else {
                    Status::Failed
                }
            }
            _ => status,
        }
    }

    pub fn group_status(&self) -> Status {
        if self.is_recovering() {
            return Status::Recovering;
        }
        self.end().unwrap_or_else(|| self.engine.group_status())
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Applies the lines not seen yet (pass the whole file every poll).
    pub fn update(&mut self, lines: &[StatusLine]) -> Vec<Action> {
        let new = lines.get(self.seen..).unwrap_or_default().to_vec();
        self.seen = lines.len().max(self.seen);
        new.iter().flat_map(|l| self.apply(l)).collect()
    }

    fn task(&self, name: &str) -> Option<TaskId> {
        self.spec.tasks.iter().position(|t| t.name == name)
    }

    /// The user asked to cancel the job at `at_ms` (the earliest ask is
    /// kept).
    pub fn cancel_asked(&mut self, at_ms: i64) {
        let at = at_ms as f64 / 1000.0;
        self.cancel_asked = Some(self.cancel_asked.map_or(at, |t| t.min(at)));
    }

    /// One status line.
    pub fn apply(&mut self, line: &StatusLine) -> Vec<Action> {
        if line.restart > self.restart
            || (self.recovering && matches!(line.what, What::JobStart { .. }))
        {
            // The job was requeued: everything starts over.
            self.restart = line.restart;
            self.recovering = false;
            self.script_end = None;
            self.job_end = None;
            self.cancel_seen = false;
            self.engine = Engine::new(self.spec.clone());
            self.engine.start();
        }
        if line.restart < self.restart {
            return Vec::new();
        }
        let mut actions = Vec::new();
        if self.cancel_asked.is_some_and(|at| line.time >= at) && !self.cancel_seen {
            // Recorded after the cancel was asked: the engine hears the
            // cancel first.
            self.cancel_seen = true;
            actions.extend(self.engine.handle(Event::CancelRequested));
        }
        let event = match &line.what {
            What::Task {
                name,
                attempt,
                status,
                ..
            } => {
                let Some(task) = self.task(name) else {
                    return actions;
                };
                match status.as_str() {
                    "RUNNING" => Event::TaskStarted {
                        task,
                        attempt: *attempt,
                    },
                    "CANCELLING" if !self.spec.tasks[task].primary => {
                        Event::TimerFired(Timer::AuxiliaryDelay(task))
                    }
                    "SIGKILL" => Event::TimerFired(Timer::Kill {
                        task,
                        attempt: *attempt,
                    }),
                    _ => return Vec::new(),
                }
            }
            What::Node {
                name,
                attempt,
                rank,
                phase,
                code,
            } => {
                let Some(task) = self.task(name) else {
                    return actions;
                };
                match phase.as_str() {
                    "setup" | "run" => Event::NodeExited {
                        task,
                        attempt: *attempt,
                        node: *rank,
                        phase: if phase == "setup" {
                            Phase::Setup
                        } else {
                            Phase::Run
                        },
                        code: *code,
                    },
                    _ => Event::NodeLost {
                        task,
                        attempt: *attempt,
                        node: *rank,
                    },
                }
            }
            What::Group(status) => {
                self.script_end = parse_status(status);
                return actions;
            }
            What::JobStart { .. } | What::JobSigterm | What::Error(_) => return actions,
        };
        actions.extend(self.engine.handle(event));
        actions
    }

    /// The watcher's decision that the job has ended, for good: what the
    /// job's states last said becomes the end (FAILED when they said
    /// nothing: a job Slurm forgot without accounting), unless the script
    /// wrote its own.
    pub fn conclude(&mut self) {
        self.concluded = true;
    }

    /// What squeue (or sacct) says of the job's components now.
    pub fn observe(&mut self, states: &[JobState]) -> Vec<Action> {
        let mut actions = Vec::new();
        if !states.is_empty() && states.iter().all(|s| *s == JobState::Pending) && self.seen == 0 {
            // Waiting in Slurm's queue for the first time: every task waits
            // for resources, as PENDING means on every backend.
            for task in 0..self.spec.tasks.len() {
                let attempt = self.engine.attempt(task);
                actions.extend(self.engine.handle(Event::TaskQueued { task, attempt }));
            }
            return actions;
        }
        if self.seen > 0
            && self.script_end.is_none()
            && states
                .iter()
                .any(|s| s.is_lost() || *s == JobState::Pending)
        {
            // Started before (the status file is read before squeue), now
            // pending or failed on a node: requeued, or about to be.
            self.recovering = true;
        }
        if states.contains(&JobState::Cancelled) && !self.cancel_seen {
            self.cancel_seen = true;
            actions.extend(self.engine.handle(Event::CancelRequested));
        }
        self.job_end =
            (!states.is_empty() && states.iter().all(JobState::is_terminal)).then(|| {
                if states.contains(&JobState::Cancelled) {
                    Status::Cancelled
                } else {
                    // The script never wrote its end: the job was killed under it.
                    Status::Failed
                }
            });
        actions
    }
}

fn parse_status(s: &str) -> Option<Status> {
    Some(match s {
        "SUCCEEDED" => Status::Succeeded,
        "FAILED" => Status::Failed,
        "FAILED_SETUP" => Status::FailedSetup,
        "CANCELLED" => Status::Cancelled,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::TaskSpec;
    use std::time::Duration;

    fn spec() -> GroupSpec {
        let task = |name: &str, primary| TaskSpec {
            name: name.into(),
            primary,
            num_nodes: 1,
            termination_delay: Duration::ZERO,
            max_restarts_on_errors: 0,
            recover_on_exit_codes: Vec::new(),
        };
        GroupSpec {
            execution: crate::policy::Execution::Parallel,
            tasks: vec![task("main", true), task("side", false)],
            grace: Duration::from_secs(5),
        }
    }

    fn lines(text: &str) -> Vec<StatusLine> {
        text.lines().filter_map(StatusLine::parse).collect()
    }

    const STARTED: &str = "1 r0 job START 7 components=7,8
1 r0 task main 0 RUNNING
1 r0 task side 0 RUNNING
";

    #[test]
    fn a_job_waiting_in_the_queue_is_pending_until_its_script_starts() {
        let mut t = Tracker::new(spec());
        t.observe(&[JobState::Pending, JobState::Pending]);
        assert_eq!(t.group_status(), Status::Pending);
        assert_eq!(t.task_status(1), Status::Pending);
        t.update(&lines(STARTED));
        t.observe(&[JobState::Running, JobState::Running]);
        assert_eq!(t.group_status(), Status::Running);
        assert_eq!(t.task_status(0), Status::Running);
    }

    #[test]
    fn a_requeue_is_recovering_until_the_next_run_starts_over() {
        let mut t = Tracker::new(spec());
        let mut all = lines(STARTED);
        t.update(&all);
        t.observe(&[JobState::Running, JobState::Running]);
        // Requeued: the job is pending again after its script ran.
        t.observe(&[JobState::Pending, JobState::Pending]);
        assert_eq!(t.group_status(), Status::Recovering);
        assert_eq!(t.task_status(0), Status::Recovering);
        all.extend(lines(
            "2 r1 job START 7 components=7,8\n2 r1 task main 0 RUNNING\n",
        ));
        t.update(&all);
        assert_eq!(t.restarts(), 1);
        assert_eq!(t.task_status(0), Status::Running);
        assert_ne!(t.group_status(), Status::Recovering);
    }

    #[test]
    fn a_job_that_ends_under_its_tasks_ends_them() {
        // Cancelled: every task that was running is CANCELLED.
        let mut t = Tracker::new(spec());
        t.update(&lines(STARTED));
        t.observe(&[JobState::Cancelled, JobState::Cancelled]);
        t.conclude();
        assert_eq!(t.group_status(), Status::Cancelled);
        assert_eq!(t.task_status(0), Status::Cancelled);
        assert_eq!(t.task_status(1), Status::Cancelled);
        // Killed without the script's last line (a time limit): FAILED.
        let mut t = Tracker::new(spec());
        t.update(&lines(STARTED));
        t.observe(&[JobState::Timeout, JobState::Timeout]);
        t.conclude();
        assert_eq!(t.group_status(), Status::Failed);
        assert_eq!(t.task_status(1), Status::Failed);
        assert!(!t.ended_by_script());
        // Forgotten by Slurm, with no accounting: FAILED.
        let mut t = Tracker::new(spec());
        t.update(&lines(STARTED));
        t.observe(&[]);
        assert_eq!(
            t.group_status(),
            Status::Running,
            "not ended before concluded"
        );
        t.conclude();
        assert_eq!(t.group_status(), Status::Failed);
        assert_eq!(t.task_status(0), Status::Failed);
    }

    #[test]
    fn a_task_ending_after_the_cancel_was_asked_is_cancelled_not_done() {
        // scancel's SIGTERM reaches `side`, which exits 0 on it, before the
        // batch script hears it: cancelled, as every task of the job.
        let mut t = Tracker::new(spec());
        t.update(&lines(STARTED));
        t.cancel_asked(2_000);
        t.update(&lines(&format!(
            "{STARTED}3 r0 node side 0 0 run 0\n3 r0 task side 0 SUCCEEDED\n3 r0 job SIGTERM\n"
        )));
        t.observe(&[JobState::Cancelled, JobState::Cancelled]);
        t.conclude();
        assert_eq!(t.group_status(), Status::Cancelled);
        assert_eq!(t.task_status(0), Status::Cancelled);
        assert_eq!(t.task_status(1), Status::Cancelled);
        // Ended before the cancel was asked, though read after it: done.
        let mut t = Tracker::new(spec());
        t.update(&lines(STARTED));
        t.cancel_asked(2_000);
        t.update(&lines(&format!(
            "{STARTED}1.5 r0 node side 0 0 run 0\n1.5 r0 task side 0 SUCCEEDED\n3 r0 job SIGTERM\n"
        )));
        t.observe(&[JobState::Cancelled, JobState::Cancelled]);
        t.conclude();
        assert_eq!(t.task_status(1), Status::Succeeded);
        assert_eq!(t.task_status(0), Status::Cancelled);
    }

    #[test]
    fn the_scripts_last_line_is_the_groups_status() {
        let mut t = Tracker::new(spec());
        let text = format!(
            "{STARTED}1 r0 node main 0 0 run 0\n1 r0 task main 0 SUCCEEDED\n\
             1 r0 task side 0 CANCELLING\n1 r0 node side 0 0 run 143\n\
             1 r0 task side 0 CANCELLED\n1 r0 group SUCCEEDED\n"
        );
        t.update(&lines(&text));
        assert!(t.ended_by_script());
        t.observe(&[JobState::Completed, JobState::Completed]);
        assert_eq!(t.group_status(), Status::Succeeded);
        assert_eq!(t.task_status(0), Status::Succeeded);
        assert_eq!(t.task_status(1), Status::Cancelled);
    }

    #[test]
    fn an_ended_looking_state_during_a_requeue_is_not_the_end() {
        // NODE_FAIL, then PENDING: RECOVERING throughout, never FAILED.
        let mut t = Tracker::new(spec());
        t.update(&lines(STARTED));
        t.observe(&[JobState::NodeFail, JobState::NodeFail]);
        assert_eq!(t.group_status(), Status::Recovering);
        t.observe(&[JobState::Pending, JobState::Pending]);
        assert_eq!(t.group_status(), Status::Recovering);
        // Cancelled while requeued: CANCELLED, not FAILED.
        t.observe(&[JobState::Cancelled, JobState::Cancelled]);
        t.conclude();
        assert_eq!(t.group_status(), Status::Cancelled);
        assert_eq!(t.task_status(0), Status::Cancelled);
    }

    #[test]
    fn the_scripts_end_is_never_recovering() {
        // A component seen failed on a node, then the script's last word
        // without a requeue: the group ends with the script's status.
        let mut t = Tracker::new(spec());
        t.update(&lines(STARTED));
        t.observe(&[JobState::NodeFail, JobState::Running]);
        assert_eq!(t.group_status(), Status::Recovering);
        let text = format!(
            "{STARTED}1 r0 node main 0 0 lost 255\n1 r0 task main 0 FAILED\n1 r0 group FAILED\n"
        );
        t.update(&lines(&text));
        assert_eq!(t.group_status(), Status::Failed);
        assert_eq!(t.task_status(0), Status::Failed);
    }
}
