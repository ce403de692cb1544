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
    /// The script's own final word, when it got to write it.
    final_status: Option<Status>,
    /// `final_status` is the script's `group` line, not an inference.
    final_from_script: bool,
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
            final_status: None,
            final_from_script: false,
            seen: 0,
        }
    }

    /// The batch script wrote the group's end itself: no requeue or
    /// inference is pending.
    pub fn ended_by_script(&self) -> bool {
        self.final_from_script
    }

    /// How many times Slurm restarted the whole job.
    pub fn restarts(&self) -> u32 {
        self.restart
    }

    pub fn task_status(&self, task: TaskId) -> Status {
        if self.recovering {
            return Status::Recovering;
        }
        let status = self.engine.task_status(task);
        match self.final_status {
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
        if self.recovering {
            Status::Recovering
        } else {
            self.final_status
                .unwrap_or_else(|| self.engine.group_status())
        }
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

    /// One status line.
    pub fn apply(&mut self, line: &StatusLine) -> Vec<Action> {
        if line.restart > self.restart
            || (self.recovering && matches!(line.what, What::JobStart { .. }))
        {
            // The job was requeued: everything starts over.
            self.restart = line.restart;
            self.recovering = false;
            self.final_status = None;
            self.final_from_script = false;
            self.engine = Engine::new(self.spec.clone());
            self.engine.start();
        }
        if line.restart < self.restart {
            return Vec::new();
        }
        let event = match &line.what {
            What::Task {
                name,
                attempt,
                status,
                ..
            } => {
                let Some(task) = self.task(name) else {
                    return Vec::new();
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
                    return Vec::new();
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
                self.final_status = parse_status(status);
                self.final_from_script = self.final_status.is_some();
                return Vec::new();
            }
            What::JobStart { .. } | What::JobSigterm | What::Error(_) => return Vec::new(),
        };
        self.engine.handle(event)
    }

    /// Slurm no longer knows the job and keeps no accounting: whatever the
    /// script did not record is lost, and the group failed.
    pub fn forgotten(&mut self) {
        if self.final_status.is_none() {
            self.recovering = false;
            self.final_status = Some(Status::Failed);
        }
    }

    /// What squeue says of the job's components.
    pub fn observe(&mut self, states: &[JobState]) -> Vec<Action> {
        if !states.is_empty() && states.iter().all(|s| *s == JobState::Pending) && self.seen == 0 {
            // Waiting in Slurm's queue for the first time: every task waits
            // for resources, as PENDING means on every backend.
            return (0..self.spec.tasks.len())
                .flat_map(|task| {
                    let attempt = self.engine.attempt(task);
                    self.engine.handle(Event::TaskQueued { task, attempt })
                })
                .collect();
        }
        if states
            .iter()
            .any(|s| s.is_lost() || *s == JobState::Pending)
            && self.seen > 0
            && self.final_status.is_none()
        {
            // Started before, now pending or failed on a node: requeued.
            self.recovering = true;
        }
        if states.contains(&JobState::Cancelled) && self.final_status.is_none() {
            self.recovering = false;
            let actions = self.engine.handle(Event::CancelRequested);
            self.final_status = Some(Status::Cancelled);
            return actions;
        }
        if !states.is_empty()
            && states.iter().all(JobState::is_terminal)
            && self.final_status.is_none()
        {
            // The script never wrote its end: killed with the job.
            self.recovering = false;
            self.final_status = Some(Status::Failed);
        }
        Vec::new()
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
        assert_eq!(t.group_status(), Status::Cancelled);
        assert_eq!(t.task_status(0), Status::Cancelled);
        assert_eq!(t.task_status(1), Status::Cancelled);
        // Killed without the script's last line (a time limit): FAILED.
        let mut t = Tracker::new(spec());
        t.update(&lines(STARTED));
        t.observe(&[JobState::Timeout, JobState::Timeout]);
        assert_eq!(t.group_status(), Status::Failed);
        assert_eq!(t.task_status(1), Status::Failed);
        assert!(!t.ended_by_script());
        // Forgotten by Slurm, with no accounting: FAILED.
        let mut t = Tracker::new(spec());
        t.update(&lines(STARTED));
        t.forgotten();
        assert_eq!(t.group_status(), Status::Failed);
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
}
