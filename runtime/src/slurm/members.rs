//! A pool's members on Slurm, whose policy the supervisor runs (their
//! engines decide; this reports what the cluster does as node events).
//!
//! - A worker is one batch job per attempt (its plan's script: setup on
//!   every node, then a hold). Submitted once: `submitting.A` is written
//!   before sbatch and `jobid.A` after it, and a worker found with the
//!   first and not the second is looked up by its `--comment` before it
//!   would be submitted again. Each attempt's job writes in its own
//!   directory (`aA/`, its `SKYC_OUT`): ready once every node wrote its
//!   `ready.RANK` there, so an earlier attempt's job, still ending,
//!   cannot make it look ready. A job that ends while not being retired
//!   (scancel from outside, time limit, node failure) is the loss of its
//!   nodes, and of the jobs running on it.
//! - A job's attempt is one step of its worker's allocation
//!   (`pool_job.rs`).

use super::pool::WorkerPlan;
use super::pool_job::JobRun;
use super::submit::{self, AdoptError};
use super::{Slurm, Submission};
use crate::backend::{NodeInfo, Report};
use crate::paths;
use crate::policy::{Action, Attempt, Engine, Event, Phase};
use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::Child;

/// How often the cluster and the members' files are read.
const POLL_MS: i64 = 1_000;

/// How long a submission waits after Slurm could not be asked.
const RETRY_MS: i64 = 5_000;

#[derive(Default)]
pub(super) struct Members {
    pub(super) state_dir: PathBuf,
    pub(super) workers: BTreeMap<i64, WorkerRun>,
    pub(super) jobs: BTreeMap<i64, JobRun>,
    /// Launchers started by this supervisor, reaped as they end.
    pub(super) children: Vec<Child>,
    pub(super) reports: Vec<(i64, Report)>,
    next_poll: i64,
}

pub(super) struct WorkerRun {
    /// Why its job is pending, as last reported.
    waiting: Option<String>,
    pub(super) plan: WorkerPlan,
    pub(super) dir: PathBuf,
    attempt: Attempt,
    /// The attempt is wanted: started by the engine, not answered.
    pub(super) live: bool,
    finished: bool,
    settled: bool,
    /// sbatch is due; `lookup`: one may have run (a crash around it, an
    /// error after which the job may exist); neither before `retry_at`.
    submit: bool,
    lookup: bool,
    retry_at: i64,
    pub(super) job: Option<String>,
    /// The job was last seen ended or forgotten.
    pub(super) gone: bool,
    /// Its state at the last poll.
    pub(super) state: Option<super::JobState>,
    /// squeue has listed the job: one it does not list is ended (or
    /// forgotten), unless just submitted.
    seen: bool,
    started: bool,
    pub(super) ready: bool,
    stopping: bool,
    pub(super) ips: Vec<String>,
}

impl WorkerRun {
    fn nodes(&self) -> u32 {
        self.plan.plan.num_nodes.first().copied().unwrap_or(1)
    }

    /// This attempt's output directory (its job's `SKYC_OUT`: `status`,
    /// `.skyc/r0/`), so that an earlier attempt's job, still ending,
    /// writes only in its own, and what it wrote stays readable.
    ///
    /// An attempt submitted by a build that wrote in the group directory
    /// itself (its `submitting.A` or `jobid.A` there, no `aA/`: that
    /// directory is made before either) is read where its job writes.
    fn out_dir(&self) -> PathBuf {
        let own = self.dir.join(format!("a{}", self.attempt));
        let submitted = ["submitting", "jobid"]
            .iter()
            .any(|f| self.dir.join(format!("{f}.{}", self.attempt)).exists());
        if submitted && !own.exists() {
            return self.dir.clone();
        }
        own
    }

    /// The batch script's directory for this (first) start of the job.
    fn run_dir(&self) -> PathBuf {
        self.out_dir().join(".skyc").join("r0")
    }

    fn comment(&self, gid: i64) -> String {
        format!("{}-w{gid}-a{}", self.plan.plan.token, self.attempt)
    }

    pub(super) fn slurm(&self) -> Slurm {
        self.plan.plan.cluster()
    }

    fn submission(&self, gid: i64) -> Submission {
        Submission {
            file: self.dir.join("job.sh"),
            script: self.plan.plan.script.clone(),
            out: self.out_dir(),
            token: self.comment(gid),
            after: None,
        }
    }
}

/// Appends a line of skyc's own to a node's log in a group's directory.
pub(super) fn append_log(dir: &Path, task: &str, rank: u32, line: &str) {
    use std::io::Write;
    let log = paths::log(dir, task, rank);
    if let Ok(mut f) = OpenOptions::new().create(true).append(true).open(log) {
        let _ = f.write_all(line.as_bytes());
    }
}

impl Members {
    pub(super) fn new(state_dir: &Path) -> Self {
        Self {
            state_dir: state_dir.to_owned(),
            ..Self::default()
        }
    }

    pub(super) fn has(&self, gid: i64) -> bool {
        self.workers.contains_key(&gid) || self.jobs.contains_key(&gid)
    }

    pub(super) fn event(&mut self, gid: i64, event: Event) {
        self.reports
            .push((gid, Report::Event { event, at_ms: None }));
    }

    /// Node `node` of the member's (one task's) attempt is lost.
    pub(super) fn lost(&mut self, gid: i64, attempt: u32, node: u32) {
        self.event(
            gid,
            Event::NodeLost {
                task: 0,
                attempt,
                node,
            },
        );
    }

    /// What adopting a worker or a job begins with: its plan read, its
    /// group directory (absolute: its batch scripts run elsewhere) with
    /// its logs folder, and whether a node of its attempt still runs (a
    /// `fresh` member's none does).
    pub(super) fn adopting<P: serde::de::DeserializeOwned>(
        &self,
        gid: i64,
        plan: &str,
        engine: &Engine,
        fresh: bool,
    ) -> Result<(P, PathBuf, bool), String> {
        let plan: P = serde_json::from_str(plan).map_err(|e| e.to_string())?;
        let dir = std::path::absolute(paths::group_dir(&self.state_dir, gid))
            .map_err(|e| e.to_string())?;
        fs::create_dir_all(dir.join("logs")).map_err(|e| format!("{}: {e}", dir.display()))?;
        let nodes = engine.spec().tasks.first().map_or(1, |t| t.num_nodes);
        let live = !fresh && (0..nodes).any(|r| engine.node_live(0, r));
        Ok((plan, dir, live))
    }

    pub(super) fn adopt_worker(
        &mut self,
        gid: i64,
        plan: &str,
        engine: &Engine,
        fresh: bool,
    ) -> Result<(), String> {
        let (plan, dir, live): (WorkerPlan, _, _) = self.adopting(gid, plan, engine, fresh)?;
        let attempt = engine.attempt(0);
        let nodes = plan.plan.num_nodes.first().copied().unwrap_or(1);
        let job = read_line(&dir.join(format!("jobid.{attempt}")));
        let submitting = dir.join(format!("submitting.{attempt}")).exists();
        // Being retired, never submitted (no job, no sbatch that may have
        // run): nothing of it runs, and it never will; its nodes are
        // answered now.
        let retired = live && engine.stopping(0) && job.is_none() && !submitting;
        if retired {
            for node in (0..nodes).filter(|&r| engine.node_live(0, r)) {
                self.lost(gid, attempt, node);
            }
        }
        let live = live && !retired;
        let mut w = WorkerRun {
            waiting: None,
            plan,
            dir,
            attempt,
            live,
            finished: engine.is_finished(),
            settled: false,
            submit: live && job.is_none(),
            lookup: submitting,
            retry_at: 0,
            job,
            gone: false,
            state: None,
            // Recorded before a crash: squeue lists it, or it has ended.
            seen: true,
            started: false,
            ready: false,
            // Being retired when the supervisor died: scancel (again).
            stopping: live && engine.stopping(0),
            ips: Vec::new(),
        };
        // Ready before the crash: ready again (the polls find out if its
        // job ended meanwhile), so its jobs are placed at once.
        let run = w.run_dir();
        if w.live && w.job.is_some() && (0..nodes).all(|r| run.join(format!("ready.{r}")).exists())
        {
            w.ready = true;
            w.started = true;
            w.ips = read_ips(&run.join("hosts"));
            self.reports.push((gid, Report::Ready { task: 0, attempt }));
        }
        self.workers.insert(gid, w);
        Ok(())
    }

    pub(super) fn execute(&mut self, gid: i64, engine: &Engine, actions: &[Action]) {
        if let Some(w) = self.workers.get_mut(&gid) {
            w.finished = engine.is_finished();
        }
        if let Some(j) = self.jobs.get_mut(&gid) {
            j.finished = engine.is_finished();
        }
        for action in actions {
            match *action {
                Action::Start { attempt, .. } => self.start(gid, attempt),
                Action::Terminate { attempt, .. } => self.stop(gid, attempt, Some("TERM")),
                Action::Kill { attempt, .. } => self.stop(gid, attempt, None),
                Action::SetTimer { .. } | Action::TaskStatus { .. } | Action::GroupStatus(_) => {
                    continue;
                }
            }
            // Carried out at once, not at the next poll (a timer or a
            // status asks nothing of Slurm).
            self.next_poll = 0;
        }
    }

    fn start(&mut self, gid: i64, attempt: Attempt) {
        if let Some(w) = self.workers.get_mut(&gid) {
            // An earlier attempt's job, if it still runs, goes.
            if let Some(job) = w.job.as_ref().filter(|_| !w.gone) {
                let _ = w.slurm().cancel(job);
            }
            w.attempt = attempt;
            w.seen = false;
            w.live = true;
            w.submit = true;
            w.lookup = false;
            w.retry_at = 0;
            w.job = None;
            w.gone = false;
            w.state = None;
            w.started = false;
            w.ready = false;
            w.stopping = false;
            if attempt > 0 {
                // Its setup's output follows the earlier attempts' in
                // the same logs, as a group's restart's does.
                for rank in 0..w.nodes() {
                    append_log(
                        &w.dir,
                        &w.plan.task.name,
                        rank,
                        &format!(
                            "skyc: restarting {} (attempt {attempt})\n",
                            w.plan.task.name
                        ),
                    );
                }
            }
        }
        if let Some(j) = self.jobs.get_mut(&gid) {
            j.restart(attempt);
            // Its worker's resources are the pool's to count.
            self.event(gid, Event::TaskQueued { task: 0, attempt });
        }
    }

    fn stop(&mut self, gid: i64, attempt: Attempt, signal: Option<&'static str>) {
        let mut lost = Vec::new();
        if let Some(w) = self.workers.get_mut(&gid).filter(|w| w.attempt == attempt) {
            w.stopping = true;
            if w.job.is_none() && !w.lookup && w.live {
                // Never submitted: nothing of it runs.
                w.submit = false;
                w.live = false;
                lost = (0..w.nodes()).collect();
            }
        }
        if let Some(j) = self.jobs.get_mut(&gid).filter(|j| j.attempt == attempt) {
            lost.extend(j.stop(signal));
        }
        for node in lost {
            self.lost(gid, attempt, node);
        }
    }

    pub(super) fn release(&mut self, gid: i64) {
        self.workers.remove(&gid);
        self.jobs.remove(&gid);
    }

    pub(super) fn next_wake_ms(&self) -> Option<i64> {
        (!self.workers.is_empty() || !self.jobs.is_empty() || !self.children.is_empty())
            .then_some(self.next_poll)
    }

    pub(super) fn drain(&mut self, now: i64) -> Vec<(i64, Report)> {
        self.children
            .retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        if now >= self.next_poll {
            self.next_poll = now + POLL_MS;
            let states = self.worker_states();
            let gids: Vec<i64> = self.workers.keys().copied().collect();
            for gid in gids {
                self.poll_worker(gid, &states, now);
            }
            let gids: Vec<i64> = self.jobs.keys().copied().collect();
            for gid in gids {
                self.poll_job(gid);
            }
        }
        std::mem::take(&mut self.reports)
    }

    /// The state of every worker's job, one squeue per cluster (the
    /// workers of one pool share their client's environment): `None` for
    /// a job squeue does not list; a job whose squeue failed is absent.
    /// Each worker job's state, and squeue's reason while it is pending.
    fn worker_states(&self) -> BTreeMap<String, Option<(super::JobState, String)>> {
        let mut by_pool: BTreeMap<&str, (Slurm, Vec<&str>)> = BTreeMap::new();
        for w in self.workers.values() {
            if let Some(job) = w.job.as_deref().filter(|_| !w.gone) {
                by_pool
                    .entry(&w.plan.plan.token)
                    .or_insert_with(|| (w.slurm(), Vec::new()))
                    .1
                    .push(job);
            }
        }
        let mut states = BTreeMap::new();
        for (slurm, jobs) in by_pool.into_values() {
            match slurm.components(&jobs.join(",")) {
                Ok(components) => {
                    for job in jobs {
                        let state = components
                            .iter()
                            .find(|c| c.job_id == job)
                            .map(|c| (c.state.clone(), c.reason.clone()));
                        states.insert(job.to_owned(), state);
                    }
                }
                Err(e) => eprintln!("[{}] pool workers: Slurm: {e}", crate::store::now_ms()),
            }
        }
        states
    }

    fn poll_worker(
        &mut self,
        gid: i64,
        states: &BTreeMap<String, Option<(super::JobState, String)>>,
        now: i64,
    ) {
        let Some(mut w) = self.workers.remove(&gid) else {
            return;
        };
        if w.submit {
            self.submit_worker(gid, &mut w, now);
        }
        if let Some(job) = w.job.clone().filter(|_| !w.gone)
            && let Some(state) = states.get(&job)
        {
            let waiting = state
                .as_ref()
                .and_then(|(s, r)| super::watch::waiting_reason(s, r));
            if waiting != w.waiting {
                w.waiting.clone_from(&waiting);
                self.reports.push((
                    gid,
                    Report::Waiting {
                        task: 0,
                        why: waiting,
                    },
                ));
            }
            self.watch_worker(gid, &mut w, &job, state.as_ref().map(|s| s.0.clone()));
        }
        if w.finished && !w.settled && (w.job.is_none() || w.gone) && !w.submit {
            w.settled = true;
            self.reports.push((gid, Report::Settled));
        }
        self.workers.insert(gid, w);
    }

    /// Submits the worker's job as a group's is submitted (submit.rs):
    /// once, across crashes and sbatch errors after which it may exist.
    fn submit_worker(&mut self, gid: i64, w: &mut WorkerRun, now: i64) {
        if now < w.retry_at {
            return;
        }
        let slurm = w.slurm();
        let job = w.submission(gid);
        if w.lookup {
            // A supervisor died around sbatch, or sbatch could not tell:
            // the job may exist.
            if submit::sbatch_running(&job.token) {
                eprintln!("[{now}] worker {gid}: an earlier sbatch of it is still running");
                w.retry_at = now + RETRY_MS;
                return;
            }
            match submit::find(&slurm, &job) {
                Ok(Some(id)) => return self.submitted(gid, w, id),
                Ok(None) if w.stopping => {
                    // Retired before its sbatch went through: nothing runs.
                    w.lookup = false;
                    w.submit = false;
                    w.live = false;
                    for node in 0..w.nodes() {
                        let attempt = w.attempt;
                        self.lost(gid, attempt, node);
                    }
                    return;
                }
                Ok(None) => w.lookup = false,
                Err(e) => {
                    eprintln!("[{now}] worker {gid}: Slurm: {e}; trying again");
                    w.retry_at = now + RETRY_MS;
                    return;
                }
            }
        }
        let marker = w.dir.join(format!("submitting.{}", w.attempt));
        // Files of this attempt left by a job that was not found (never
        // started, or forgotten by Slurm) are not this submission's.
        let _ = fs::remove_dir_all(w.run_dir());
        let _ = fs::remove_file(job.out.join("status"));
        let made = if job.out == w.dir {
            Ok(())
        } else {
            attempt_dir(&job.out)
        };
        if let Err(e) = made
            .and_then(|()| fs::write(&job.file, &job.script))
            .and_then(|()| fs::write(&marker, ""))
        {
            return self.refused(gid, w, format!("{}: {e}", w.dir.display()));
        }
        match submit::submit(&slurm, &job, None) {
            Ok(id) => self.submitted(gid, w, id),
            Err(AdoptError::Retry(e)) => {
                eprintln!("[{now}] worker {gid}: {e}; trying again");
                w.lookup = true;
                w.retry_at = now + RETRY_MS;
            }
            Err(AdoptError::Fatal(e)) => self.refused(gid, w, e),
        }
    }

    fn submitted(&mut self, gid: i64, w: &mut WorkerRun, job: String) {
        let _ = fs::write(w.dir.join(format!("jobid.{}", w.attempt)), &job);
        eprintln!("[{}] worker {gid}: Slurm job {job}", crate::store::now_ms());
        // For `skyc status` and the batch output in `skyc logs`.
        self.reports.push((gid, Report::Job(job.clone())));
        w.job = Some(job);
        w.submit = false;
        w.lookup = false;
        self.event(
            gid,
            Event::TaskQueued {
                task: 0,
                attempt: w.attempt,
            },
        );
    }

    /// Refused (a bad partition, an option, its directory): the worker's
    /// setup fails, and the pool hears it.
    fn refused(&mut self, gid: i64, w: &mut WorkerRun, error: String) {
        w.submit = false;
        w.lookup = false;
        w.live = false;
        self.reports.push((gid, Report::Error(error)));
        for node in 0..w.nodes() {
            self.event(
                gid,
                Event::NodeExited {
                    task: 0,
                    attempt: w.attempt,
                    node,
                    phase: Phase::Setup,
                    code: 1,
                },
            );
        }
    }

    fn watch_worker(
        &mut self,
        gid: i64,
        w: &mut WorkerRun,
        job: &str,
        state: Option<super::JobState>,
    ) {
        let slurm = w.slurm();
        if state.is_none() && !w.seen {
            // Just submitted: squeue lists it soon.
            return;
        }
        w.seen = true;
        w.state.clone_from(&state);
        use super::JobState::{Completing, Configuring, Pending, Requeued, Running, Suspended};
        let running = state == Some(Running);
        // A state that may come back to RUNNING later (suspended, stopped,
        // requeued after it ran) is a worker lost all the same: it is
        // cancelled before it is forgotten, so no allocation outlives it.
        let lost = match &state {
            Some(Suspended) => true,
            Some(super::JobState::Other(s)) => s == "STOPPED",
            Some(Pending | Configuring | Requeued) => w.started,
            _ => false,
        };
        if lost {
            let _ = slurm.cancel(job);
        }
        // Ending (COMPLETING) is ended: its steps are being killed. Any
        // other state (SIGNALING, RESIZING, one this does not know) is
        // watched on, as not holding.
        let ended = match &state {
            None | Some(Completing) => true,
            Some(s) => s.is_terminal() || lost,
        };
        if running && !w.started {
            w.started = true;
            self.event(
                gid,
                Event::TaskStarted {
                    task: 0,
                    attempt: w.attempt,
                },
            );
        }
        let run = w.run_dir();
        let exits: Vec<Option<(String, i32)>> = (0..w.nodes())
            .map(|r| read_exit(&run.join(format!("exit.0.0.{r}"))))
            .collect();
        let hold_ended = exits.iter().flatten().any(|(phase, _)| phase == "run");
        if w.live
            && running
            && !w.ready
            && (0..w.nodes()).all(|r| run.join(format!("ready.{r}")).exists())
        {
            w.ready = true;
            w.ips = read_ips(&run.join("hosts"));
            self.reports.push((
                gid,
                Report::Ready {
                    task: 0,
                    attempt: w.attempt,
                },
            ));
            for rank in 0..w.nodes() {
                let info = NodeInfo {
                    task: 0,
                    rank,
                    attempt: w.attempt,
                    hostname: format!("{}-{rank}.{}", w.plan.task.name, w.plan.plan.group),
                    handle: format!("Slurm job {job}"),
                    ip: w.ips.get(rank as usize).cloned().unwrap_or_default(),
                    phase: Some("run".into()),
                    ..NodeInfo::default()
                };
                self.reports.push((gid, Report::Node(info)));
            }
        }
        if (w.stopping || hold_ended) && !ended {
            let _ = slurm.cancel(job);
        }
        if !ended {
            return;
        }
        w.gone = true;
        if !w.live {
            return;
        }
        w.live = false;
        self.lose_jobs_on(gid);
        for (node, exit) in (0..w.nodes()).zip(exits) {
            let event = match exit {
                Some((phase, code)) if phase == "setup" && code != 0 => Event::NodeExited {
                    task: 0,
                    attempt: w.attempt,
                    node,
                    phase: Phase::Setup,
                    code,
                },
                _ if w.stopping && w.started => Event::NodeExited {
                    task: 0,
                    attempt: w.attempt,
                    node,
                    phase: Phase::Run,
                    code: 143,
                },
                _ => Event::NodeLost {
                    task: 0,
                    attempt: w.attempt,
                    node,
                },
            };
            self.event(gid, event);
        }
    }
}

/// Makes a worker's attempt directory, its `logs` the worker's own
/// (`../logs`): the batch script writes its nodes' logs under its
/// `SKYC_OUT`, and a worker's logs are one per node across its attempts,
/// where `skyc logs` reads them.
fn attempt_dir(out: &Path) -> std::io::Result<()> {
    fs::create_dir_all(out)?;
    match std::os::unix::fs::symlink(Path::new("..").join("logs"), out.join("logs")) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// A file's first line, trimmed, when it has one.
pub(super) fn read_line(path: &Path) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_owned())
}

/// A step wrapper's exit file: `PHASE CODE`.
pub(super) fn read_exit(path: &Path) -> Option<(String, i32)> {
    let line = read_line(path)?;
    let (phase, code) = line.split_once(' ')?;
    Some((phase.to_owned(), code.trim().parse().ok()?))
}

/// The worker's node addresses in rank order, from its hosts file.
fn read_ips(hosts: &Path) -> Vec<String> {
    fs::read_to_string(hosts)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}
