//! The Slurm backend: a group submitted as one batch job, a pipeline as
//! one batch job per step, and followed.
//!
//! The group's policy runs in the batch script, inside the allocation, so
//! the group outlives the supervisor and the login node it runs on
//! ([`Policy::Followed`]); a pipeline's order is kept by Slurm (each
//! step's job waits for the one before it: `afterok`). The backend
//! submits each job once, then reports what its [`Watch`] (a pipeline:
//! [`PipelineWatch`]) reads (status files, squeue) as statuses, node rows
//! and history; cancel is scancel.
//!
//! Submission is two steps across the store: [`Report::Marker`] with
//! [`SUBMITTING`] is committed before the first sbatch, and each job's
//! id is recorded as soon as sbatch gives it ([`Report::Job`]: the ids so
//! far, comma-separated); the marker goes once every job is submitted. A
//! supervisor that dies around an sbatch is followed by one that looks
//! that job up (its `--comment`) before it would submit it again, then
//! submits only the jobs left.

use super::members::Members;
use super::submit::{self, AdoptError, Before, SUBMITTING};
use super::{Followed, PipelineWatch, Plan, Polled, Watch};
use crate::backend::{Adoption, Backend, Policy, Report, Role};
use crate::policy::{Action, Attempt, Engine, Status};
use crate::pool::Placement;
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
    watches: BTreeMap<i64, Follow>,
    unsubmitted: BTreeMap<i64, Unsubmitted>,
    /// The last problem logged per group, so a cluster that stays down is
    /// logged once, not every poll.
    problems: BTreeMap<i64, String>,
    /// A pool's workers and jobs, whose policy the supervisor runs.
    members: Members,
}

/// A submitted group, followed.
enum Follow {
    Group(Box<Watch>),
    Pipeline(Box<PipelineWatch>),
}

impl Follow {
    fn next_poll_ms(&self) -> i64 {
        match self {
            Self::Group(w) => w.next_poll_ms(),
            Self::Pipeline(p) => p.next_poll_ms(),
        }
    }

    fn poll(&mut self, now: i64) -> Polled {
        match self {
            Self::Group(w) => w.poll(now),
            Self::Pipeline(p) => p.poll(now),
        }
    }

    fn cancel(&mut self, now: i64) {
        match self {
            Self::Group(w) => w.cancel(now),
            Self::Pipeline(p) => p.cancel(now),
        }
    }

    /// The job ids, as recorded.
    fn jobs(&self) -> String {
        match self {
            Self::Group(w) => w.job().to_owned(),
            Self::Pipeline(p) => p.jobs(),
        }
    }

    fn group_status(&self) -> Status {
        match self {
            Self::Group(w) => w.group_status(),
            Self::Pipeline(p) => p.group_status(),
        }
    }
}

/// A group whose jobs are not all submitted yet.
struct Unsubmitted {
    plan: Plan,
    /// The ids of the jobs submitted so far, in order.
    jobs: Vec<String>,
    /// [`SUBMITTING`] is committed: sbatch may run.
    marked: bool,
    /// An sbatch of the next job may have run (a marker found at
    /// adoption, an sbatch that did not tell): that job is looked up
    /// before it is submitted, and the job before it checked.
    lookup: bool,
    /// The marker was reported and awaits its commit.
    marking: bool,
    cancel: bool,
    /// sbatch refused a job after others were submitted: they are
    /// cancelled before the group ends with this.
    refused: Option<String>,
    at_ms: i64,
}

impl SlurmBackend {
    pub fn new(state_dir: &Path) -> Self {
        Self {
            state_dir: state_dir.to_owned(),
            watches: BTreeMap::new(),
            unsubmitted: BTreeMap::new(),
            problems: BTreeMap::new(),
            members: Members::new(state_dir),
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

    /// One step towards the group's jobs: the marker, then one sbatch (or
    /// the lookup of a job an earlier sbatch submitted), until every job
    /// is submitted; then the group is followed.
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
        let jobs = u.plan.submissions(&dir);
        let slurm = u.plan.cluster();
        if let Some(reason) = u.refused.take() {
            // A pipeline is submitted whole or not at all.
            let ids: Vec<&str> = u.jobs.iter().map(String::as_str).collect();
            if let Err(e) = slurm.cancel_all(&ids) {
                self.problem(gid, Some(format!("cancelling: {e}; trying again")));
                u.refused = Some(reason);
                return self.later(gid, u, now);
            }
            out.push((gid, Report::Marker(None)));
            out.push((gid, Report::Refused(reason)));
            return;
        }
        let i = u.jobs.len();
        if i >= jobs.len() {
            return self.follow(gid, u, now);
        }
        let job = &jobs[i];
        let mut found = None;
        let looked_up = u.lookup;
        if u.lookup {
            // A supervisor died around sbatch, or this one's sbatch could
            // not tell: the job may exist.
            if submit::sbatch_running(&job.token) {
                self.problem(
                    gid,
                    Some("an earlier sbatch of this group is still running".into()),
                );
                return self.later(gid, u, now);
            }
            match submit::find(&slurm, job) {
                // Jobs are submitted in order: once one is not found, the
                // later ones were never submitted either.
                Ok(id) => {
                    u.lookup = id.is_some();
                    found = id;
                }
                Err(e) => {
                    self.problem(gid, Some(format!("{e}; trying again")));
                    return self.later(gid, u, now);
                }
            }
        }
        if found.is_none() && u.cancel {
            if u.jobs.is_empty() {
                if u.marked {
                    out.push((gid, Report::Marker(None)));
                }
                out.push((gid, Report::Unstarted(Status::Cancelled)));
                eprintln!("[{now}] group {gid}: cancelled before submission");
                return;
            }
            // The steps submitted are followed (and cancelled); the rest
            // never will be.
            out.push((gid, Report::Marker(None)));
            return self.follow(gid, u, now);
        }
        let id = match found {
            Some(id) => id,
            None if !u.marked => {
                if let Err(e) = submit::prepare(&u.plan, &dir, &jobs) {
                    out.push((gid, Report::Refused(e)));
                    return;
                }
                out.push((gid, Report::Marker(Some(SUBMITTING.into()))));
                u.marking = true;
                u.at_ms = now;
                self.unsubmitted.insert(gid, u);
                return;
            }
            None => {
                let mut after = job.after.map(|a| u.jobs[a].as_str());
                if looked_up && let Some(a) = job.after {
                    // Submitted late: Slurm may have forgotten the job
                    // before, and would then take `afterok` as satisfied.
                    match submit::before(&slurm, &u.jobs[a], &jobs[a]) {
                        Ok(Before::Waiting) => {}
                        Ok(Before::Succeeded) => after = None,
                        Ok(Before::Ended) => {
                            out.push((gid, Report::Marker(None)));
                            return self.follow(gid, u, now);
                        }
                        Err(e) => {
                            self.problem(gid, Some(format!("{e}; trying again")));
                            u.lookup = true;
                            return self.later(gid, u, now);
                        }
                    }
                }
                let step = u
                    .plan
                    .is_pipeline()
                    .then(|| (u.jobs.first().map_or("", String::as_str), after));
                match submit::submit(&slurm, job, step) {
                    Ok(id) => id,
                    Err(AdoptError::Retry(e)) => {
                        self.problem(gid, Some(format!("{e}; trying again")));
                        u.lookup = true;
                        return self.later(gid, u, now);
                    }
                    Err(AdoptError::Fatal(e)) if u.jobs.is_empty() => {
                        out.push((gid, Report::Marker(None)));
                        out.push((gid, Report::Refused(e)));
                        return;
                    }
                    Err(AdoptError::Fatal(e)) => {
                        u.refused = Some(format!("step {}: {e}", u.plan.steps[i].name));
                        u.at_ms = now;
                        self.unsubmitted.insert(gid, u);
                        return;
                    }
                }
            }
        };
        self.problem(gid, None);
        eprintln!("[{now}] group {gid}: Slurm job {id}");
        u.jobs.push(id.clone());
        out.push((gid, Report::Job(u.jobs.join(","))));
        let mut entry = json!({ "slurm_submitted": id });
        if u.plan.is_pipeline() {
            entry["step"] = json!(i);
        }
        out.push((
            gid,
            Report::Record {
                at_ms: now,
                entry: entry.to_string(),
            },
        ));
        if u.jobs.len() < jobs.len() {
            // The next job at once (the supervisor drains again while
            // there are reports); each id is committed before the next
            // sbatch.
            u.at_ms = now;
            self.unsubmitted.insert(gid, u);
            return;
        }
        out.push((gid, Report::Marker(None)));
        self.follow(gid, u, now);
    }

    fn later(&mut self, gid: i64, mut u: Unsubmitted, now: i64) {
        u.at_ms = now + RETRY_MS;
        self.unsubmitted.insert(gid, u);
    }

    /// Follows the jobs submitted.
    fn follow(&mut self, gid: i64, u: Unsubmitted, now: i64) {
        let follow = if u.plan.is_pipeline() {
            Follow::Pipeline(Box::new(PipelineWatch::new(
                &self.state_dir,
                gid,
                &u.plan,
                &u.jobs,
                u.cancel,
                now,
            )))
        } else {
            let followed = Followed::group(&u.plan, &self.state_dir, gid);
            let job = u.jobs.first().cloned().unwrap_or_default();
            let mut w = Watch::new(u.plan.cluster(), followed, job, now);
            if u.cancel {
                w.cancel(now);
            }
            Follow::Group(Box::new(w))
        };
        self.watches.insert(gid, follow);
    }
}

impl Backend for SlurmBackend {
    fn policy(&self) -> Policy {
        Policy::Followed
    }

    fn adopt(&mut self, gid: i64, adoption: &Adoption<'_>) -> Result<(), String> {
        let (engine, fresh) = (adoption.engine, adoption.fresh);
        match adoption.role {
            Role::Worker => return self.members.adopt_worker(gid, adoption.plan, engine, fresh),
            Role::Job => return self.members.adopt_job(gid, adoption.plan, engine, fresh),
            Role::Group => {}
        }
        let plan: Plan = serde_json::from_str(adoption.plan)
            .map_err(|e| format!("the group's Slurm plan: {e}"))?;
        let chained = plan
            .steps
            .iter()
            .enumerate()
            .all(|(i, s)| s.after.is_none_or(|a| a < i));
        if plan.is_pipeline() && (plan.steps.len() != plan.spec.tasks.len() || !chained) {
            return Err("the group's Slurm plan: a pipeline without its steps in order".into());
        }
        let now = now_ms();
        let marked = adoption.marker == Some(SUBMITTING);
        let jobs: Vec<String> = adoption
            .job
            .filter(|j| !j.is_empty())
            .map(|j| j.split(',').map(str::to_owned).collect())
            .unwrap_or_default();
        if jobs.is_empty() || marked {
            self.unsubmitted.insert(
                gid,
                Unsubmitted {
                    plan,
                    jobs,
                    marked,
                    lookup: marked,
                    marking: false,
                    cancel: adoption.cancel_requested,
                    refused: None,
                    at_ms: now,
                },
            );
            return Ok(());
        }
        let cancel = adoption.cancel_requested;
        let follow = if plan.is_pipeline() {
            let p = PipelineWatch::resume(
                adoption.store,
                &self.state_dir,
                gid,
                &plan,
                &jobs,
                cancel,
                now,
            )?;
            Follow::Pipeline(Box::new(p))
        } else {
            let followed = Followed::group(&plan, &self.state_dir, gid);
            let (slurm, job) = (plan.cluster(), jobs[0].clone());
            let w = Watch::resume(adoption.store, gid, slurm, followed, job, cancel, now)?;
            Follow::Group(Box::new(w))
        };
        eprintln!("[{now}] group {gid}: Slurm job {}", jobs.join(","));
        self.watches.insert(gid, follow);
        Ok(())
    }

    /// The batch script carries out a group's policy; a pool member's is
    /// the supervisor's.
    fn execute(&mut self, gid: i64, engine: &Engine, actions: &[Action]) {
        if self.members.has(gid) {
            self.members.execute(gid, engine, actions);
        }
    }

    /// scancel now, and again until the jobs have ended; the end arrives
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
        self.members.release(gid);
        self.watches.remove(&gid);
        self.unsubmitted.remove(&gid);
        self.problems.remove(&gid);
    }

    fn drain(&mut self, now: i64) -> Vec<(i64, Report)> {
        let mut out = self.members.drain(now);
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
                    w.jobs(),
                    w.group_status()
                );
                self.watches.remove(&gid);
            }
            out.extend(polled.reports.into_iter().map(|r| (gid, r)));
            self.problem(gid, polled.problem);
        }
        out
    }

    fn runs_pools(&self) -> bool {
        true
    }

    fn place(&mut self, job: i64, attempt: Attempt, worker: i64, placement: &Placement) {
        self.members.place(job, attempt, worker, placement);
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    fn next_wake_ms(&self) -> Option<i64> {
        self.watches
            .values()
            .map(Follow::next_poll_ms)
            .chain(self.unsubmitted.values().map(|u| u.at_ms))
            .chain(self.members.next_wake_ms())
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
            steps: Vec::new(),
            out_dir: None,
            // No Slurm command can run: no PATH.
            env: Vec::new(),
            token: "t".into(),
        }
    }

    /// A backend that adopted group 1 of [`plan`], fresh, in a new
    /// directory named after `test`.
    fn adopt(
        test: &str,
        marker: Option<&str>,
        cancel_requested: bool,
    ) -> (SlurmBackend, PathBuf, Plan) {
        let dir = std::env::temp_dir().join(format!("skyc-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open(&dir).unwrap();
        let plan = plan();
        let json = serde_json::to_string(&plan).unwrap();
        let engine = Engine::new(plan.spec.clone());
        let mut backend = SlurmBackend::new(&dir);
        let adoption = Adoption {
            plan: &json,
            role: Role::Group,
            name: "g",
            engine: &engine,
            fresh: true,
            job: None,
            kept: None,
            marker,
            cancel_requested,
            store: &store,
        };
        backend.adopt(1, &adoption).unwrap();
        (backend, dir, plan)
    }

    #[test]
    fn a_group_cancelled_before_submission_is_never_submitted() {
        let (mut backend, dir, _) = adopt("unsubmitted", None, true);
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
        let (mut backend, dir, _) = adopt("submitting", Some(SUBMITTING), true);
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
        let (mut backend, dir, plan) = adopt("marker", None, false);
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
