//! A pipeline run on Slurm, as the supervisor follows it: one [`Watch`]
//! per step's job, and the pipeline's statuses from the shared policy
//! engine.
//!
//! A step's job is a one-task group's (the same lifecycle, status lines
//! and restarts inside the allocation), so each step is followed as a
//! group is: a Watch of its own, whose [`Tracker`](super::Tracker) counts
//! the step's restarts and sees its requeues. What each step's job says
//! is then given to one more engine, the pipeline's
//! ([`Execution::Serial`]), as the events a local backend would report
//! for that step. Its statuses are the pipeline's, with the meaning they
//! have on every target: steps not started PENDING, the steps after one
//! that did not succeed CANCELLED, the group's status the failed step's.
//! Slurm keeps the order itself (every step's job is submitted at once,
//! chained with `afterok`); the engine only says it.
//!
//! The pipeline's engine counts no restarts (its steps have no budget):
//! they happen inside the steps' jobs, and their counts are the Watches'.
//! Its events are derived from where each step stands now, not from its
//! history, so a new supervisor that re-reads the steps rebuilds the same
//! state; the type holds nothing the store, the job directories or Slurm
//! do not.

use super::watch::{Followed, POLL, Polled};
use super::{Plan, Watch};
use crate::backend::{Report, Statuses};
use crate::policy::{Attempt, Engine, Event, GroupSpec, Phase, Status, TaskId, TaskSpec};
use crate::store::Store;
use std::path::Path;

pub struct PipelineWatch {
    names: Vec<String>,
    steps: Vec<Step>,
    /// The pipeline's engine: its steps in order, with no restart budget.
    engine: Engine,
    cancel: bool,
    next_poll_ms: i64,
    /// The statuses last reported.
    written: Option<Statuses>,
    /// A step the engine started that has no job was reported.
    unsubmitted_reported: bool,
}

struct Step {
    /// `None`: never submitted (the pipeline was cancelled, or the step
    /// before it had ended without success, before its turn came).
    watch: Option<Watch>,
    /// Its Watch has reported [`Report::Settled`].
    settled: bool,
}

impl PipelineWatch {
    /// A pipeline whose steps' jobs (`jobs`, in order; fewer than the
    /// steps when submission stopped early) were just submitted.
    pub fn new(
        state_dir: &Path,
        gid: i64,
        plan: &Plan,
        jobs: &[String],
        cancel: bool,
        now_ms: i64,
    ) -> Self {
        let watches = (0..plan.spec.tasks.len())
            .map(|i| {
                let followed = Followed::step(plan, state_dir, gid, i);
                let job = jobs.get(i)?.clone();
                Some(Watch::new(plan.cluster(), followed, job, now_ms))
            })
            .collect();
        let mut watch = Self::with(plan, watches);
        if cancel {
            watch.cancel(now_ms);
        }
        watch
    }

    /// A pipeline a previous supervisor submitted: each step's Watch
    /// resumes after what was recorded of it.
    pub fn resume(
        store: &Store,
        state_dir: &Path,
        gid: i64,
        plan: &Plan,
        jobs: &[String],
        cancel_requested: bool,
        now_ms: i64,
    ) -> Result<Self, String> {
        let mut watches = Vec::new();
        for i in 0..plan.spec.tasks.len() {
            let followed = Followed::step(plan, state_dir, gid, i);
            watches.push(
                jobs.get(i)
                    .map(|job| {
                        let (slurm, job) = (plan.cluster(), job.clone());
                        Watch::resume(store, gid, slurm, followed, job, cancel_requested, now_ms)
                    })
                    .transpose()?,
            );
        }
        let mut watch = Self::with(plan, watches);
        watch.cancel = cancel_requested;
        Ok(watch)
    }

    fn with(plan: &Plan, watches: Vec<Option<Watch>>) -> Self {
        let mut engine = Engine::new(ordering(&plan.spec));
        engine.start();
        Self {
            names: plan.spec.tasks.iter().map(|t| t.name.clone()).collect(),
            steps: watches
                .into_iter()
                .map(|watch| Step {
                    watch,
                    settled: false,
                })
                .collect(),
            engine,
            cancel: false,
            next_poll_ms: 0,
            written: None,
            unsubmitted_reported: false,
        }
    }

    /// Every step's job, comma-separated (as the group's job is recorded).
    pub fn jobs(&self) -> String {
        let jobs: Vec<&str> = self
            .steps
            .iter()
            .filter_map(|s| s.watch.as_ref().map(Watch::job))
            .collect();
        jobs.join(",")
    }

    pub fn next_poll_ms(&self) -> i64 {
        self.next_poll_ms
    }

    pub fn group_status(&self) -> Status {
        self.engine.group_status()
    }

    /// scancel of every step's job that has not ended, now and again
    /// until it has (each Watch's own); the steps' ends arrive through the
    /// polls.
    pub fn cancel(&mut self, now_ms: i64) {
        self.cancel = true;
        for step in &mut self.steps {
            if let Some(w) = step.watch.as_mut().filter(|_| !step.settled) {
                w.cancel(now_ms);
            }
        }
        self.next_poll_ms = now_ms;
    }

    /// The first step the engine has not ended: the one running, or next.
    fn current(&self) -> usize {
        (0..self.steps.len())
            .find(|&i| !self.engine.task_status(i).is_terminal())
            .unwrap_or(self.steps.len())
    }

    /// Whether step `i`'s job is worth asking about now: up to the
    /// current step (the later ones wait for their dependency, which
    /// Slurm resolves), or every job left once the pipeline is ending.
    fn followed(&self, i: usize) -> bool {
        let step = &self.steps[i];
        step.watch.is_some()
            && !step.settled
            && (i <= self.current() || self.cancel || self.engine.is_finished())
    }

    /// Polls the steps' jobs due, in order, and brings the pipeline's
    /// engine in line with them: what changed, for the store.
    pub fn poll(&mut self, now_ms: i64) -> Polled {
        let mut reports = Vec::new();
        let mut problem = None;
        for i in 0..self.steps.len() {
            if self.followed(i)
                && let Some(w) = self.steps[i].watch.as_mut()
                && w.next_poll_ms() <= now_ms
            {
                let polled = w.poll(now_ms);
                let name = &self.names[i];
                for report in polled.reports {
                    match report {
                        // The pipeline's statuses are the engine's, below.
                        Report::Statuses(_) => {}
                        Report::Settled => self.steps[i].settled = true,
                        Report::Node(mut node) => {
                            node.task = i;
                            reports.push(Report::Node(node));
                        }
                        Report::Waiting { why, .. } => {
                            reports.push(Report::Waiting { task: i, why });
                        }
                        Report::Error(e) => {
                            reports.push(Report::Error(format!("step {name}: {e}")))
                        }
                        other => reports.push(other),
                    }
                }
                if let Some(p) = polled.problem {
                    problem = Some(format!("step {name}: {p}"));
                }
            }
            self.follow(i, &mut reports);
        }
        let statuses = self.statuses();
        if self.written.as_ref() != Some(&statuses) {
            reports.push(Report::Statuses(statuses.clone()));
            self.written = Some(statuses);
        }
        let finished =
            self.engine.is_finished() && self.steps.iter().all(|s| s.settled || s.watch.is_none());
        if finished {
            reports.push(Report::Settled);
        }
        self.next_poll_ms = (0..self.steps.len())
            .filter(|&i| self.followed(i))
            .filter_map(|i| self.steps[i].watch.as_ref().map(Watch::next_poll_ms))
            .min()
            .unwrap_or(now_ms + POLL.as_millis() as i64);
        Polled {
            reports,
            finished,
            problem: problem.filter(|_| !finished),
        }
    }

    /// Step `i` of the engine brought in line with its job.
    fn follow(&mut self, i: usize, reports: &mut Vec<Report>) {
        let step = match &self.steps[i].watch {
            Some(w) => w.task(0).0,
            None if self.cancel => Status::Cancelled,
            // Its turn came, and it was never submitted: submission
            // stopped when the step before had ended without success, by
            // Slurm's word, while its status file said otherwise.
            None => Status::FailedSetup,
        };
        let events = step_events(&self.engine, i, step);
        if step == Status::FailedSetup
            && self.steps[i].watch.is_none()
            && !events.is_empty()
            && !self.unsubmitted_reported
        {
            self.unsubmitted_reported = true;
            reports.push(Report::Error(format!(
                "step {} was not submitted: the job of the step before it did not complete",
                self.names[i]
            )));
        }
        for event in events {
            self.engine.handle(event);
        }
    }

    /// The pipeline's statuses: the engine's, with each step's attempt
    /// and restarts as its job counted them.
    fn statuses(&self) -> Statuses {
        Statuses {
            group: self.engine.group_status(),
            tasks: self
                .steps
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let (attempt, restarts) = s
                        .watch
                        .as_ref()
                        .map_or((0, (0, 0)), |w| (w.task(0).1, w.task(0).2));
                    (self.engine.task_status(i), attempt, restarts)
                })
                .collect(),
        }
    }
}

/// The pipeline's engine spec: its steps in order, with no restart budget
/// of their own (restarts happen inside each step's job).
fn ordering(spec: &GroupSpec) -> GroupSpec {
    GroupSpec {
        tasks: spec
            .tasks
            .iter()
            .map(|t| TaskSpec {
                max_restarts_on_errors: 0,
                recover_on_exit_codes: Vec::new(),
                ..t.clone()
            })
            .collect(),
        ..spec.clone()
    }
}

/// The events that bring step `task` of the pipeline's engine to where
/// its job's own engine says it is (`step`): what a backend running the
/// step would have reported. None while the engine has not started the
/// step (a step before it has not succeeded yet) or has ended it.
fn step_events(engine: &Engine, task: TaskId, step: Status) -> Vec<Event> {
    let now = engine.task_status(task);
    let live: Vec<u32> = (0..engine.spec().tasks[task].num_nodes)
        .filter(|&n| engine.node_live(task, n))
        .collect();
    if now.is_terminal() || live.is_empty() {
        return Vec::new();
    }
    let attempt: Attempt = engine.attempt(task);
    let exited = |phase, code| -> Vec<Event> {
        live.iter()
            .map(|&node| Event::NodeExited {
                task,
                attempt,
                node,
                phase,
                code,
            })
            .collect()
    };
    let lost = || -> Vec<Event> {
        live.iter()
            .map(|&node| Event::NodeLost {
                task,
                attempt,
                node,
            })
            .collect()
    };
    let cancel = (!engine.is_cancelled()).then_some(Event::CancelRequested);
    match step {
        Status::Pending if now == Status::Starting => vec![Event::TaskQueued { task, attempt }],
        Status::Running if now != Status::Running => vec![Event::TaskStarted { task, attempt }],
        // A restart inside the job, or its requeue: the attempt ends
        // without using a budget, as a lost node's does.
        Status::Recovering if now != Status::Recovering => lost(),
        Status::Succeeded => exited(Phase::Run, 0),
        Status::Failed => exited(Phase::Run, 1),
        Status::FailedSetup => exited(Phase::Setup, 1),
        // The step's job was cancelled while it was the pipeline's current
        // step: the pipeline is (`skyc cancel`, or scancel by hand).
        Status::Cancelling => cancel.into_iter().collect(),
        Status::Cancelled => cancel.into_iter().chain(lost()).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Execution;
    use std::time::Duration;

    fn engine(steps: &[(&str, u32)]) -> Engine {
        let spec = GroupSpec {
            tasks: steps
                .iter()
                .map(|&(name, num_nodes)| TaskSpec {
                    name: name.into(),
                    primary: true,
                    num_nodes,
                    termination_delay: Duration::ZERO,
                    max_restarts_on_errors: 3,
                    recover_on_exit_codes: vec![7],
                })
                .collect(),
            grace: Duration::from_secs(1),
            execution: Execution::Serial,
        };
        let mut engine = Engine::new(ordering(&spec));
        engine.start();
        engine
    }

    /// Each step's status as its job says, given in order, as a poll does.
    fn follow(engine: &mut Engine, steps: &[Status]) {
        for (i, &step) in steps.iter().enumerate() {
            for event in step_events(engine, i, step) {
                engine.handle(event);
            }
        }
    }

    fn statuses(engine: &Engine) -> (Status, Vec<Status>) {
        let n = engine.spec().tasks.len();
        (
            engine.group_status(),
            (0..n).map(|i| engine.task_status(i)).collect(),
        )
    }

    use Status::*;

    #[test]
    fn steps_not_started_are_pending_behind_the_running_one() {
        let mut e = engine(&[("prep", 1), ("train", 2), ("eval", 1)]);
        // Every job is queued at once; only step 0 may run.
        follow(&mut e, &[Pending, Pending, Pending]);
        assert_eq!(statuses(&e), (Pending, vec![Pending, Pending, Pending]));
        follow(&mut e, &[Running, Pending, Pending]);
        assert_eq!(statuses(&e), (Running, vec![Running, Pending, Pending]));
        // Step 0 done: step 1 starts (its job waits for resources), then
        // runs on both its nodes.
        follow(&mut e, &[Succeeded, Pending, Pending]);
        assert_eq!(statuses(&e), (Pending, vec![Succeeded, Pending, Pending]));
        assert!(e.node_live(1, 1), "step 1 started, both nodes");
        follow(&mut e, &[Succeeded, Running, Pending]);
        assert_eq!(statuses(&e).1, vec![Succeeded, Running, Pending]);
        follow(&mut e, &[Succeeded, Succeeded, Running]);
        follow(&mut e, &[Succeeded, Succeeded, Succeeded]);
        assert_eq!(statuses(&e), (Succeeded, vec![Succeeded; 3]));
        assert!(e.is_finished());
    }

    #[test]
    fn a_failed_step_fails_the_pipeline_and_cancels_the_rest() {
        let mut e = engine(&[("a", 1), ("b", 1), ("c", 1)]);
        follow(&mut e, &[Succeeded, Running, Pending]);
        // Restarts inside the step's job are RECOVERING, and the budget is
        // the job's: the pipeline's engine never fails the step for them.
        for _ in 0..5 {
            follow(&mut e, &[Succeeded, Recovering, Pending]);
            assert_eq!(statuses(&e).1, vec![Succeeded, Recovering, Pending]);
            follow(&mut e, &[Succeeded, Running, Pending]);
            assert_eq!(statuses(&e).1, vec![Succeeded, Running, Pending]);
        }
        // The job gave up (its budget spent), even on a listed exit code;
        // Slurm then cancels the next job (its dependency failed).
        follow(&mut e, &[Succeeded, Failed, Cancelled]);
        assert_eq!(statuses(&e), (Failed, vec![Succeeded, Failed, Cancelled]));
        assert!(e.is_finished());
        assert!(!e.is_cancelled(), "a failure, not a cancel");
    }

    #[test]
    fn a_later_jobs_cancel_for_its_dependency_is_not_the_pipelines() {
        // Slurm cancels step 2's job as soon as step 1's job failed; its
        // Watch may say so before step 1's says FAILED (a job that timed
        // out is confirmed later). Step 2 is not started: nothing follows.
        let mut e = engine(&[("a", 1), ("b", 1), ("c", 1)]);
        follow(&mut e, &[Succeeded, Running, Cancelled]);
        assert_eq!(statuses(&e), (Running, vec![Succeeded, Running, Pending]));
        follow(&mut e, &[Succeeded, Failed, Cancelled]);
        assert_eq!(statuses(&e), (Failed, vec![Succeeded, Failed, Cancelled]));
    }

    #[test]
    fn a_step_failing_in_setup_is_failed_setup() {
        let mut e = engine(&[("a", 2), ("b", 1)]);
        follow(&mut e, &[FailedSetup, Pending]);
        assert_eq!(statuses(&e), (FailedSetup, vec![FailedSetup, Cancelled]));
    }

    #[test]
    fn cancel_in_the_middle_cancels_the_running_step_and_the_rest() {
        let mut e = engine(&[("a", 1), ("b", 2), ("c", 1)]);
        follow(&mut e, &[Succeeded, Running, Pending]);
        // scancel of every job: the running step's job is seen cancelling,
        // then cancelled; the later jobs, cancelled before they ran.
        follow(&mut e, &[Succeeded, Cancelling, Cancelled]);
        assert_eq!(
            statuses(&e),
            (Cancelling, vec![Succeeded, Cancelling, Cancelled])
        );
        follow(&mut e, &[Succeeded, Cancelled, Cancelled]);
        assert_eq!(
            statuses(&e),
            (Cancelled, vec![Succeeded, Cancelled, Cancelled])
        );
        assert!(e.is_finished() && e.is_cancelled());
    }

    #[test]
    fn cancel_before_a_step_ran_cancels_it() {
        // The user cancelled between two steps: step 1's job, queued
        // behind its dependency, is cancelled before it started.
        let mut e = engine(&[("a", 1), ("b", 1)]);
        follow(&mut e, &[Succeeded, Pending]);
        follow(&mut e, &[Succeeded, Cancelled]);
        assert_eq!(statuses(&e), (Cancelled, vec![Succeeded, Cancelled]));
    }

    #[test]
    fn a_requeued_step_is_recovering_then_runs_again() {
        let mut e = engine(&[("long", 1), ("after", 1)]);
        follow(&mut e, &[Running, Pending]);
        // A node failure: the step's Watch says RECOVERING while Slurm
        // requeues its job, then RUNNING in the job's next run.
        follow(&mut e, &[Recovering, Pending]);
        assert_eq!(statuses(&e), (Recovering, vec![Recovering, Pending]));
        follow(&mut e, &[Running, Pending]);
        follow(&mut e, &[Succeeded, Running]);
        assert_eq!(statuses(&e), (Running, vec![Succeeded, Running]));
    }

    #[test]
    fn the_same_state_again_changes_nothing() {
        // Level-triggered: a new supervisor re-derives, and a poll that
        // sees nothing new adds no event.
        let mut e = engine(&[("a", 1), ("b", 1)]);
        follow(&mut e, &[Succeeded, Running]);
        let before = e.clone();
        for _ in 0..3 {
            follow(&mut e, &[Succeeded, Running]);
        }
        assert_eq!(e, before);
        assert_eq!(step_events(&e, 0, Succeeded), vec![]);
        assert_eq!(step_events(&e, 1, Running), vec![]);
    }
}
