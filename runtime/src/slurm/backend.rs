//! The Slurm backend: groups submitted as one batch job each, and
//! followed.
//!
//! The group's policy runs in the batch script, inside the allocation, so
//! the group outlives the supervisor and the login node it runs on
//! ([`Policy::Followed`]). The backend submits the job once, then reports
//! what each [`Watch`] reads (the status file, squeue) as statuses, node
//! rows and history; cancel is scancel.
//!
//! Submission is two steps across the store: [`Report::Marker`] with
//! [`SUBMITTING`] is committed before sbatch runs, so a supervisor that
//! dies around sbatch is followed by one that looks the job up (its
//! `--comment`) before it would submit again.

use super::Plan;
use super::watch::{self, AdoptError, SUBMITTING, Watch};
use crate::backend::{Adoption, Backend, Policy, Report};
use crate::policy::{Action, Engine, Status};
use crate::store::now_ms;
use serde_json::json;
use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

/// How long before a group that could not be submitted or found
/// (slurmctld unreachable) is tried again.
const RETRY_MS: i64 = 5_000;

pub struct SlurmBackend {
    state_dir: PathBuf,
    watches: BTreeMap<i64, Box<Watch>>,
    unsubmitted: BTreeMap<i64, Unsubmitted>,
    /// The last problem logged per group, so a cluster that stays down is
    /// logged once, not every poll.
    problems: BTreeMap<i64, String>,
}

/// A group whose job is not known yet.
struct Unsubmitted {
    plan: Plan,
    /// [`SUBMITTING`] is committed: sbatch may run.
    marked: bool,
    /// An sbatch of the group may have run (a marker found at adoption,
    /// an sbatch that did not tell): the job is looked up before any
    /// other.
    lookup: bool,
    /// The marker was reported and awaits its commit.
    marking: bool,
    cancel: bool,
    at_ms: i64,
}

impl SlurmBackend {
    pub fn new(state_dir: &Path) -> Self {
        Self {
            state_dir: state_dir.to_owned(),
            watches: BTreeMap::new(),
            unsubmitted: BTreeMap::new(),
            problems: BTreeMap::new(),
        }
    }

    /// A problem, logged when it differs from the group's last one.
    fn problem(&mut self, gid: i64, problem: Option<String>) {
        match problem {
            Some(p) => {
                if self.problems.get(&gid) != Some(&p) {
                    eprintln!("[{}] group {gid}: Slurm: {p}", now_ms());
                    self.problems.insert(gid, p);
                }
            }
            None => {
                self.problems.remove(&gid);
            }
        }
    }

    /// One step towards the group's job: the marker, then sbatch (or the
    /// lookup of a job an earlier sbatch submitted).
    fn advance(&mut self, gid: i64, now: i64, out: &mut Vec<(i64, Report)>) {
        let Some(mut u) = self.unsubmitted.remove(&gid) else {
            return;
        };
        if u.marking {
            // Reported last drain, committed since.
            u.marking = false;
            u.marked = true;
        }
        let dir = u.plan.out_dir(&self.state_dir, gid);
        let slurm = u.plan.cluster();
        let mut found = None;
        if u.lookup {
            // A supervisor died around sbatch, or this one's sbatch could
            // not tell: the job may exist.
            if watch::sbatch_running(&u.plan.token) {
                self.problem(
                    gid,
                    Some("an earlier sbatch of this group is still running".into()),
                );
                return self.later(gid, u, now);
            }
            match watch::find(&slurm, &u.plan, &dir) {
                Ok(job) => {
                    found = job;
                    u.lookup = false;
                }
                Err(e) => {
                    self.problem(gid, Some(format!("{e}; trying again")));
                    return self.later(gid, u, now);
                }
            }
        }
        if found.is_none() && u.cancel {
            if u.marked {
                out.push((gid, Report::Marker(None)));
            }
            out.push((gid, Report::Unstarted(Status::Cancelled)));
            eprintln!("[{now}] group {gid}: cancelled before submission");
            return;
        }
        let job = match found {
            Some(job) => job,
            None if !u.marked => {
                if let Err(e) = watch::prepare(&u.plan, &dir) {
                    out.push((gid, Report::Refused(e)));
                    return;
                }
                out.push((gid, Report::Marker(Some(SUBMITTING.into()))));
                u.marking = true;
                u.at_ms = now;
                self.unsubmitted.insert(gid, u);
                return;
            }
            None => match watch::submit(&slurm, &u.plan, &dir, &dir.join("job.sh")) {
                Ok(job) => job,
                Err(AdoptError::Retry(e)) => {
                    self.problem(gid, Some(format!("{e}; trying again")));
                    u.lookup = true;
                    return self.later(gid, u, now);
                }
                Err(AdoptError::Fatal(e)) => {
                    out.push((gid, Report::Marker(None)));
                    out.push((gid, Report::Refused(e)));
                    return;
                }
            },
        };
        self.problem(gid, None);
        eprintln!("[{now}] group {gid}: Slurm job {job}");
        out.push((gid, Report::Job(job.clone())));
        out.push((gid, Report::Marker(None)));
        out.push((
            gid,
            Report::Record {
                at_ms: now,
                entry: json!({ "slurm_submitted": job }).to_string(),
            },
        ));
        let mut w = Watch::new(&self.state_dir, gid, u.plan, job, now);
        if u.cancel {
            w.cancel(now);
        }
        self.watches.insert(gid, Box::new(w));
    }

    fn later(&mut self, gid: i64, mut u: Unsubmitted, now: i64) {
        u.at_ms = now + RETRY_MS;
        self.unsubmitted.insert(gid, u);
    }
}

impl Backend for SlurmBackend {
    fn policy(&self) -> Policy {
        Policy::Followed
    }

    fn adopt(&mut self, gid: i64, adoption: &Adoption<'_>) -> Result<(), String> {
        let plan: Plan = serde_json::from_str(adoption.plan)
            .map_err(|e| format!("the group's Slurm plan: {e}"))?;
        let now = now_ms();
        match adoption.job {
            Some(job) => {
                let w = Watch::resume(
                    adoption.store,
                    &self.state_dir,
                    gid,
                    plan,
                    job.to_owned(),
                    adoption.cancel_requested,
                    now,
                )?;
                eprintln!("[{now}] group {gid}: Slurm job {job}");
                self.watches.insert(gid, Box::new(w));
            }
            None => {
                self.unsubmitted.insert(
                    gid,
                    Unsubmitted {
                        plan,
                        marked: adoption.marker == Some(SUBMITTING),
                        lookup: adoption.marker == Some(SUBMITTING),
                        marking: false,
                        cancel: adoption.cancel_requested,
                        at_ms: now,
                    },
                );
            }
        }
        Ok(())
    }

    /// The batch script carries out the policy; nothing to do here.
    fn execute(&mut self, _gid: i64, _engine: &Engine, _actions: &[Action]) {}

    /// scancel now, and again until the job has ended; the end arrives
    /// through the polls.
    fn cancel(&mut self, gid: i64) {
        let now = now_ms();
        if let Some(w) = self.watches.get_mut(&gid) {
            w.cancel(now);
        }
        if let Some(u) = self.unsubmitted.get_mut(&gid) {
            u.cancel = true;
            u.at_ms = u.at_ms.min(now);
        }
    }

    fn release(&mut self, gid: i64) {
        self.watches.remove(&gid);
        self.unsubmitted.remove(&gid);
        self.problems.remove(&gid);
    }

    fn drain(&mut self, now: i64) -> Vec<(i64, Report)> {
        let mut out = Vec::new();
        let due: Vec<i64> = self
            .unsubmitted
            .iter()
            .filter(|(_, u)| u.at_ms <= now)
            .map(|(&gid, _)| gid)
            .collect();
        for gid in due {
            self.advance(gid, now, &mut out);
        }
        let due: Vec<i64> = self
            .watches
            .iter()
            .filter(|(_, w)| w.next_poll_ms() <= now)
            .map(|(&gid, _)| gid)
            .collect();
        for gid in due {
            let Some(w) = self.watches.get_mut(&gid) else {
                continue;
            };
            let polled = w.poll(now);
            if polled.finished {
                eprintln!(
                    "[{now}] group {gid} (Slurm job {}): {}",
                    w.job(),
                    w.group_status()
                );
                self.watches.remove(&gid);
            }
            out.extend(polled.reports.into_iter().map(|r| (gid, r)));
            self.problem(gid, polled.problem);
        }
        out
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    fn next_wake_ms(&self) -> Option<i64> {
        self.watches
            .values()
            .map(|w| w.next_poll_ms())
            .chain(self.unsubmitted.values().map(|u| u.at_ms))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{GroupSpec, TaskSpec};
    use crate::store::Store;
    use std::time::Duration;

    fn plan() -> Plan {
        Plan {
            group: "g".into(),
            num_nodes: vec![1],
            spec: GroupSpec {
                execution: crate::policy::Execution::Parallel,
                tasks: vec![TaskSpec {
                    name: "a".into(),
                    primary: true,
                    num_nodes: 1,
                    termination_delay: Duration::ZERO,
                    max_restarts_on_errors: 0,
                    recover_on_exit_codes: Vec::new(),
                }],
                grace: Duration::ZERO,
            },
            script: String::new(),
            out_dir: None,
            // No Slurm command can run: no PATH.
            env: Vec::new(),
            token: "t".into(),
        }
    }

    fn adopt(marker: Option<&str>) -> (SlurmBackend, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "skyc-unsubmitted-{}-{}",
            std::process::id(),
            marker.is_some()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&dir).unwrap();
        let plan = plan();
        let json = serde_json::to_string(&plan).unwrap();
        let engine = Engine::new(plan.spec.clone());
        let mut backend = SlurmBackend::new(&dir);
        backend
            .adopt(
                1,
                &Adoption {
                    plan: &json,
                    engine: &engine,
                    fresh: true,
                    job: None,
                    kept: None,
                    marker,
                    cancel_requested: true,
                    store: &store,
                },
            )
            .unwrap();
        (backend, dir)
    }

    #[test]
    fn a_group_cancelled_before_submission_is_never_submitted() {
        let (mut backend, dir) = adopt(None);
        assert_eq!(
            backend.drain(now_ms()),
            vec![(1, Report::Unstarted(Status::Cancelled))]
        );
        assert_eq!(backend.next_wake_ms(), None, "nothing left to do");
        assert!(!dir.join("groups/1/job.sh").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_group_marked_submitting_is_looked_up_before_anything_else() {
        // The lookup needs Slurm, which cannot be asked: tried again later,
        // never submitted and never ended on a guess.
        let (mut backend, dir) = adopt(Some(SUBMITTING));
        let now = now_ms();
        assert_eq!(backend.drain(now), vec![]);
        assert!(
            backend
                .next_wake_ms()
                .is_some_and(|at| at >= now + RETRY_MS)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_marker_is_committed_before_sbatch_runs() {
        let dir = std::env::temp_dir().join(format!("skyc-marker-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&dir).unwrap();
        let plan = plan();
        let json = serde_json::to_string(&plan).unwrap();
        let engine = Engine::new(plan.spec.clone());
        let mut backend = SlurmBackend::new(&dir);
        let adoption = Adoption {
            plan: &json,
            engine: &engine,
            fresh: true,
            job: None,
            kept: None,
            marker: None,
            cancel_requested: false,
            store: &store,
        };
        backend.adopt(1, &adoption).unwrap();
        // First the script and the marker, nothing submitted yet.
        assert_eq!(
            backend.drain(now_ms()),
            vec![(1, Report::Marker(Some(SUBMITTING.into())))]
        );
        assert!(plan.out_dir(&dir, 1).join("job.sh").exists());
        // Then sbatch, which cannot run here (no PATH): a lookup follows
        // it, which cannot run either, so it is tried again later.
        assert_eq!(backend.drain(now_ms()), vec![]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
