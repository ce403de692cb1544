//! A pool job on AWS: its engine's actions and its placement, here; its
//! thread is its worker's, which hands each node to the worker's node of
//! its rank over SSH and follows it (`data/jobs.rs`).

use super::backend::{Aws, Msg};
use super::pool::JobPlan;
use crate::backend::Report;
use crate::cloud::data::jobs::Placed;
use crate::policy::{Action, Attempt, Engine, Event};
use crate::pool::Placement;
use std::collections::BTreeSet;

/// A pool job, as the backend follows it (its thread is its worker's).
pub(super) struct JobRun {
    pub(super) plan: JobPlan,
    /// Its engine's attempt.
    pub(super) attempt: u32,
    /// Where its latest attempt was placed, and that attempt.
    pub(super) placed: Option<(i64, u32)>,
    /// The nodes of the placed attempt that ended (exited or lost).
    pub(super) ended: BTreeSet<u32>,
    /// The attempt a stop was sent for.
    pub(super) stopped: Option<u32>,
    pub(super) finished: bool,
    pub(super) settled: bool,
}

impl Aws {
    /// A pool job's engine decided: it waits for a place (`TaskQueued`,
    /// as every backend says it), or its attempt stops: on its worker, or
    /// here when it has none (its nodes answered lost, as nothing runs).
    pub(super) fn execute_job(&mut self, gid: i64, engine: &Engine, actions: &[Action]) {
        let Some(job) = self.jobs.get_mut(&gid) else {
            return;
        };
        job.attempt = engine.attempt(0);
        job.finished = engine.is_finished();
        for action in actions {
            match *action {
                Action::Start { task, attempt } => {
                    self.reports.push((
                        gid,
                        Report::Event {
                            event: Event::TaskQueued { task, attempt },
                            at_ms: None,
                        },
                    ));
                }
                Action::Terminate { attempt, .. } | Action::Kill { attempt, .. } => {
                    let Some(job) = self.jobs.get_mut(&gid) else {
                        return;
                    };
                    if job.stopped == Some(attempt) {
                        continue;
                    }
                    job.stopped = Some(attempt);
                    match job.placed {
                        Some((worker, placed)) if placed == attempt => {
                            let sent = self
                                .groups
                                .get(&worker)
                                .is_some_and(|tx| tx.send(Msg::Stop(gid)).is_ok());
                            if !sent {
                                self.lose_unplaced(gid, attempt, "its worker is gone");
                            }
                        }
                        _ => self.lose_unplaced(gid, attempt, "stopped before it had a worker"),
                    }
                }
                _ => {}
            }
        }
    }

    /// Answers every node of a job's attempt that runs nowhere as lost.
    fn lose_unplaced(&mut self, gid: i64, attempt: u32, why: &str) {
        let Some(job) = self.jobs.get_mut(&gid) else {
            return;
        };
        let nodes = job.plan.spec.tasks[0].num_nodes;
        if job.placed.is_some_and(|(_, a)| a == attempt) {
            for node in 0..nodes {
                job.ended.insert(node);
            }
        }
        let logs = crate::paths::group_dir(&self.state_dir, gid).join("logs");
        let task = &job.plan.spec.tasks[0].name;
        for node in 0..nodes {
            let log = logs.join(crate::paths::log_name(task, node));
            let _ = crate::cloud::data::plane::append(&log, format!("skyc: {why}\n").as_bytes());
        }
        for node in 0..nodes {
            self.reports.push((
                gid,
                Report::Event {
                    event: Event::NodeLost {
                        task: 0,
                        attempt,
                        node,
                    },
                    at_ms: None,
                },
            ));
        }
    }

    /// Hands job `job`'s attempt to `worker`'s thread (the pool chose
    /// it), with each node's `job.sh`; lost when the worker is gone.
    pub(super) fn place_job(
        &mut self,
        job: i64,
        attempt: Attempt,
        worker: i64,
        placement: &Placement,
    ) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        if attempt != j.attempt || j.finished {
            return;
        }
        let nodes = j.plan.spec.tasks[0].num_nodes;
        if j.placed != Some((worker, attempt)) {
            j.placed = Some((worker, attempt));
            j.ended.clear();
        }
        let Some(tx) = self.groups.get(&worker) else {
            // Its worker is gone: lost with it, so its engine runs it again
            // elsewhere without using its budget.
            self.lose_unplaced(job, attempt, "its worker is gone");
            return;
        };
        let logs = crate::paths::group_dir(&self.state_dir, job).join("logs");
        let scripts = (0..nodes as usize)
            .map(|rank| {
                let gpus = placement.gpus.get(rank).map_or(&[][..], Vec::as_slice);
                j.plan.job_sh(skyc_targets::cloud::NODE_DIR, job, gpus)
            })
            .collect();
        let mut placed = Placed::new(
            attempt,
            scripts,
            j.plan.grace_secs,
            j.plan.spec.tasks[0].name.clone(),
            logs,
            self.outbox.post().out(job),
            0,
        );
        placed.stop = j.stopped == Some(attempt);
        if tx.send(Msg::Place(job, Box::new(placed))).is_err() {
            self.lose_unplaced(job, attempt, "its worker is gone");
        }
    }
}
