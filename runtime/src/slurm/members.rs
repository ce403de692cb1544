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
//! - A job's attempt is one step of its worker's allocation (`srun
//!   --jobid=W --overlap`) started by a detached launcher that holds the
//!   attempt's lock while srun runs; each node's exit status comes from
//!   its exit file (the step wrapper's). An attempt directory with a
//!   `started` file was started: after a crash it is watched, never
//!   started again; its lock free with a node's status missing is that
//!   node's loss.

use super::pool::{JobPlan, TaskRun, WorkerPlan};
use super::submit::{self, AdoptError};
use super::{Slurm, Submission};
use crate::backend::{NodeInfo, Report};
use crate::paths;
use crate::policy::{Action, Attempt, Engine, Event, Phase};
use crate::pool::Placement;
use rustix::fs::{FlockOperation, flock};
use skyc_targets::files::{Layers, View};
use skyc_targets::shell::{is_variable_name, quote};
use skyc_targets::slurm::{LAUNCH, STEP};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// How often the cluster and the members' files are read.
const POLL_MS: i64 = 1_000;

/// How long a submission waits after Slurm could not be asked.
const RETRY_MS: i64 = 5_000;

#[derive(Default)]
pub(super) struct Members {
    state_dir: PathBuf,
    workers: BTreeMap<i64, WorkerRun>,
    jobs: BTreeMap<i64, JobRun>,
    /// Launchers started by this supervisor, reaped as they end.
    children: Vec<Child>,
    reports: Vec<(i64, Report)>,
    next_poll: i64,
}

struct WorkerRun {
    /// Why its job is pending, as last reported.
    waiting: Option<String>,
    plan: WorkerPlan,
    dir: PathBuf,
    attempt: Attempt,
    /// The attempt is wanted: started by the engine, not answered.
    live: bool,
    finished: bool,
    settled: bool,
    /// sbatch is due; `lookup`: one may have run (a crash around it, an
    /// error after which the job may exist); neither before `retry_at`.
    submit: bool,
    lookup: bool,
    retry_at: i64,
    job: Option<String>,
    /// The job was last seen ended or forgotten.
    gone: bool,
    /// Its state at the last poll.
    state: Option<super::JobState>,
    /// squeue has listed the job: one it does not list is ended (or
    /// forgotten), unless just submitted.
    seen: bool,
    started: bool,
    ready: bool,
    stopping: bool,
    ips: Vec<String>,
}

struct JobRun {
    plan: JobPlan,
    dir: PathBuf,
    attempt: Attempt,
    live: bool,
    finished: bool,
    settled: bool,
    worker: Option<i64>,
    /// The worker's Slurm job, once placed.
    worker_job: Option<String>,
    launched: bool,
    /// Per node: its end was reported.
    answered: Vec<bool>,
    /// Per node: a failure read at the last poll, reported at this one if
    /// its worker still runs (a worker's end fails its steps first).
    failed: Vec<bool>,
    /// A signal for the step, not sent yet: `Some("TERM")`, or `None` to
    /// cancel it.
    signal: Option<Option<&'static str>>,
    stopping: bool,
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

    fn slurm(&self) -> Slurm {
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

impl JobRun {
    fn nodes(&self) -> u32 {
        self.plan.plan.num_nodes.first().copied().unwrap_or(1)
    }

    fn attempt_dir(&self) -> PathBuf {
        self.dir.join(".skyc").join(format!("a{}", self.attempt))
    }

    fn step_name(&self, gid: i64) -> String {
        format!("skyc-j{gid}-a{}", self.attempt)
    }

    fn log(&self, rank: u32, line: &str) {
        append_log(&self.dir, &self.plan.task.name, rank, line);
    }
}

/// Appends a line of skyc's own to a node's log in a group's directory.
fn append_log(dir: &Path, task: &str, rank: u32, line: &str) {
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

    fn event(&mut self, gid: i64, event: Event) {
        self.reports
            .push((gid, Report::Event { event, at_ms: None }));
    }

    pub(super) fn adopt_worker(
        &mut self,
        gid: i64,
        plan: &str,
        engine: &Engine,
        fresh: bool,
    ) -> Result<(), String> {
        let plan: WorkerPlan = serde_json::from_str(plan).map_err(|e| e.to_string())?;
        let dir = std::path::absolute(paths::group_dir(&self.state_dir, gid))
            .map_err(|e| e.to_string())?;
        fs::create_dir_all(dir.join("logs")).map_err(|e| format!("{}: {e}", dir.display()))?;
        let attempt = engine.attempt(0);
        let nodes = plan.plan.num_nodes.first().copied().unwrap_or(1);
        let live = !fresh && (0..nodes).any(|r| engine.node_live(0, r));
        let job = read_line(&dir.join(format!("jobid.{attempt}")));
        let submitting = dir.join(format!("submitting.{attempt}")).exists();
        // Being retired, never submitted (no job, no sbatch that may have
        // run): nothing of it runs, and it never will; its nodes are
        // answered now.
        let retired = live && engine.stopping(0) && job.is_none() && !submitting;
        if retired {
            for node in (0..nodes).filter(|&r| engine.node_live(0, r)) {
                self.event(
                    gid,
                    Event::NodeLost {
                        task: 0,
                        attempt,
                        node,
                    },
                );
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

    pub(super) fn adopt_job(
        &mut self,
        gid: i64,
        plan: &str,
        engine: &Engine,
        fresh: bool,
    ) -> Result<(), String> {
        let plan: JobPlan = serde_json::from_str(plan).map_err(|e| e.to_string())?;
        let dir = std::path::absolute(paths::group_dir(&self.state_dir, gid))
            .map_err(|e| e.to_string())?;
        fs::create_dir_all(dir.join("logs")).map_err(|e| format!("{}: {e}", dir.display()))?;
        let nodes = plan.plan.num_nodes.first().copied().unwrap_or(1);
        let mut j = JobRun {
            plan,
            dir,
            attempt: engine.attempt(0),
            live: !fresh && (0..nodes).any(|r| engine.node_live(0, r)),
            finished: engine.is_finished(),
            settled: false,
            worker: None,
            worker_job: None,
            launched: false,
            answered: (0..nodes).map(|r| !engine.node_live(0, r)).collect(),
            failed: vec![false; nodes as usize],
            signal: None,
            stopping: false,
        };
        j.launched = j.attempt_dir().join("started").exists();
        if j.live && engine.stopping(0) {
            // Being stopped when the supervisor died: signalled again (the
            // engine's kill timer follows as committed).
            j.stopping = true;
            j.signal = j.launched.then_some(Some("TERM"));
            if !j.launched {
                // Nothing of it runs: its nodes are answered now.
                j.live = false;
                for node in 0..nodes {
                    if !std::mem::replace(&mut j.answered[node as usize], true) {
                        let attempt = j.attempt;
                        self.event(
                            gid,
                            Event::NodeLost {
                                task: 0,
                                attempt,
                                node,
                            },
                        );
                    }
                }
            }
        }
        if let Some(job) = read_line(&j.attempt_dir().join("worker")) {
            j.worker_job = Some(job);
        }
        j.worker = read_line(&j.attempt_dir().join("worker_group")).and_then(|g| g.parse().ok());
        self.jobs.insert(gid, j);
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
            j.attempt = attempt;
            j.live = true;
            j.launched = false;
            j.worker = None;
            j.worker_job = None;
            j.answered = vec![false; j.nodes() as usize];
            j.failed = vec![false; j.nodes() as usize];
            j.signal = None;
            j.stopping = false;
            if attempt > 0 {
                for rank in 0..j.nodes() {
                    j.log(
                        rank,
                        &format!(
                            "skyc: restarting {} (attempt {attempt})\n",
                            j.plan.task.name
                        ),
                    );
                }
            }
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
            j.stopping = true;
            if j.launched {
                j.signal = Some(signal);
            } else if j.live {
                j.live = false;
                lost = (0..j.nodes())
                    .filter(|&r| !j.answered[r as usize])
                    .collect();
                j.answered.iter_mut().for_each(|a| *a = true);
            }
        }
        for node in lost {
            self.event(
                gid,
                Event::NodeLost {
                    task: 0,
                    attempt,
                    node,
                },
            );
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

    /// Starts a job's attempt on its worker, as the pool placed it; an
    /// attempt already started is watched, never started twice.
    pub(super) fn place(&mut self, gid: i64, attempt: Attempt, worker: i64, placement: &Placement) {
        let Some(mut j) = self.jobs.remove(&gid) else {
            return;
        };
        if j.attempt == attempt && j.live {
            j.worker = Some(worker);
            let w = self.workers.remove(&worker);
            let holding = w
                .as_ref()
                // Not polled yet after an adoption: as its files say.
                .is_some_and(|w| {
                    w.ready && w.live && matches!(w.state, None | Some(super::JobState::Running))
                });
            let lost = w.as_ref().is_none_or(|w| w.gone || !w.live);
            if j.launched {
                if lost {
                    // Found running after a crash on a worker lost meanwhile.
                    self.lose_job(gid, &mut j, "its worker is gone");
                }
            } else if let (true, Some(w)) = (holding, w.as_ref()) {
                if let Err(e) = self.launch(gid, &mut j, worker, w, placement) {
                    self.lose_job(gid, &mut j, &format!("cannot start the step: {e}"));
                }
            } else {
                self.lose_job(gid, &mut j, "its worker is not ready");
            }
            if let Some(w) = w {
                self.workers.insert(worker, w);
            }
        }
        self.jobs.insert(gid, j);
    }

    /// A job's nodes not answered yet are lost (the engine starts the
    /// attempt again, without using its budget); a step still running is
    /// cancelled.
    fn lose_job(&mut self, gid: i64, j: &mut JobRun, why: &str) {
        if j.launched {
            j.signal = Some(None);
        }
        for rank in 0..j.nodes() {
            if std::mem::replace(&mut j.answered[rank as usize], true) {
                continue;
            }
            j.log(rank, &format!("skyc: {why}\n"));
            self.event(
                gid,
                Event::NodeLost {
                    task: 0,
                    attempt: j.attempt,
                    node: rank,
                },
            );
        }
    }

    fn launch(
        &mut self,
        gid: i64,
        j: &mut JobRun,
        wgid: i64,
        w: &WorkerRun,
        placement: &Placement,
    ) -> Result<(), String> {
        let adir = j.attempt_dir();
        let io = |e: std::io::Error| format!("{}: {e}", adir.display());
        fs::create_dir_all(&adir).map_err(io)?;
        let wjob = w.job.clone().unwrap_or_default();
        let script = run_script(&w.plan.task, &j.plan.task, &placement.gpus);
        fs::write(adir.join("0.run"), script).map_err(io)?;
        // The pool's files, seen by the job as by its worker (step.sh).
        let helper = match &w.plan.files_at {
            Some((snapshots, helper))
                if !w.plan.files.is_empty()
                    || !w.plan.volumes.is_empty()
                    || !w.plan.buckets.is_empty() =>
            {
                let view = View::of(
                    &w.plan.files,
                    &w.plan.volumes,
                    snapshots,
                    Layers::Memory(None),
                )
                .with_buckets(&w.plan.buckets);
                fs::write(adir.join("0.files"), view.to_json()).map_err(io)?;
                fs::create_dir_all(adir.join("layers")).map_err(io)?;
                helper.display().to_string()
            }
            _ => String::new(),
        };
        fs::write(adir.join("step.sh"), STEP).map_err(io)?;
        fs::write(adir.join("launch.sh"), LAUNCH).map_err(io)?;
        fs::write(adir.join("worker"), format!("{wjob}\n")).map_err(io)?;
        // Its worker's group, known again after a crash before the pool
        // places the job again (its step's failure meanwhile is a failure).
        fs::write(adir.join("worker_group"), format!("{wgid}\n")).map_err(io)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(adir.join("lock"))
            .map_err(io)?;
        flock(&lock, FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| format!("{}: {e}", adir.join("lock").display()))?;
        // From here on the attempt counts as started: a crash before the
        // launcher holds the lock leaves it free, and its nodes lost.
        fs::write(adir.join("started"), "").map_err(io)?;
        j.launched = true;
        j.worker_job = Some(wjob.clone());
        let nodes = j.nodes();
        let ips: Vec<&str> = w
            .ips
            .iter()
            .take(nodes as usize)
            .map(String::as_str)
            .collect();
        let spec = j.plan.pool_job.clone().unwrap_or(crate::pool::JobSpec {
            room: None,
            rank: 0,
            num_jobs: 1,
        });
        let gpus = placement
            .gpus
            .first()
            .map_or(0, |g| g.len())
            .max(j.plan.task.gpus.ceil() as usize);
        let mut env = srun_env(&w.plan.plan.env, &j.plan.plan.env);
        let task = &j.plan.task.name;
        env.extend([
            ("SKYC_RUN_DIR".into(), adir.display().to_string()),
            ("SKYC_HOSTNAMES".into(), "off".into()),
            ("SKYPILOT_NODE_IPS".into(), ips.join("\n")),
            ("SKYPILOT_NUM_NODES".into(), nodes.to_string()),
            ("SKYPILOT_NUM_GPUS_PER_NODE".into(), gpus.to_string()),
            (
                "SKYPILOT_TASK_ID".into(),
                format!("skyc-slurm-{gid}_{}_{task}-0", j.plan.plan.group),
            ),
            ("SKYC_TASK".into(), task.clone()),
            ("SKYC_ATTEMPT".into(), j.attempt.to_string()),
            ("SKYC_FILES_HELPER".into(), helper),
        ]);
        env.extend(spec.env().map(|(k, v)| (k.to_owned(), v)));
        let log = j
            .dir
            .join("logs")
            .join(format!("{}-%t.log", log_stem(task)));
        let mut args = vec![
            format!("--jobid={wjob}"),
            "--overlap".into(),
            format!("--job-name={}", j.step_name(gid)),
            format!("--nodes={nodes}"),
            format!("--ntasks={nodes}"),
            "--ntasks-per-node=1".into(),
            "--relative=0".into(),
            "--kill-on-bad-exit=1".into(),
            "--open-mode=append".into(),
            format!("--chdir={}", w.dir.display()),
            format!("--output={}", log.display()),
        ];
        // A step that uses GPUs gets all the worker's (shared with the
        // other steps: --overlap), and uses those the pool placed it on.
        let gres = if gpus > 0 {
            w.plan.task.gpus.ceil() as usize
        } else {
            0
        };
        args.extend(step_resources(&j.plan.task, gres));
        args.extend([
            "bash".into(),
            adir.join("step.sh").display().to_string(),
            "0".into(),
            j.attempt.to_string(),
        ]);
        let out = File::create(adir.join("launch.out")).map_err(io)?;
        let err = out.try_clone().map_err(io)?;
        let child = Command::new("bash")
            .arg("--noprofile")
            .arg("--norc")
            .arg(adir.join("launch.sh"))
            .arg(&adir)
            .args(&args)
            .env_clear()
            .envs(env)
            .current_dir(&w.dir)
            .stdin(Stdio::from(lock))
            .stdout(out)
            .stderr(err)
            // Its own process group: a terminal's ^C to the supervisor
            // does not reach it.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("bash: {e}"))?;
        self.children.push(child);
        self.event(
            gid,
            Event::TaskStarted {
                task: 0,
                attempt: j.attempt,
            },
        );
        for rank in 0..nodes {
            let info = NodeInfo {
                task: 0,
                rank,
                attempt: j.attempt,
                hostname: format!("{task}-{rank}.{}", j.plan.plan.group),
                machine: format!("worker {wgid} (Slurm job {wjob})"),
                ip: ips
                    .get(rank as usize)
                    .copied()
                    .unwrap_or_default()
                    .to_owned(),
                phase: Some("run".into()),
                ..NodeInfo::default()
            };
            self.reports.push((gid, Report::Node(info)));
        }
        Ok(())
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
                        self.event(
                            gid,
                            Event::NodeLost {
                                task: 0,
                                attempt,
                                node,
                            },
                        );
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

    /// A worker ended: the jobs on it are lost with it.
    fn lose_jobs_on(&mut self, worker: i64) {
        let gids: Vec<i64> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.worker == Some(worker) && j.live)
            .map(|(&gid, _)| gid)
            .collect();
        for gid in gids {
            if let Some(mut j) = self.jobs.remove(&gid) {
                self.lose_job(gid, &mut j, "its worker was lost");
                self.jobs.insert(gid, j);
            }
        }
    }

    fn poll_job(&mut self, gid: i64) {
        let Some(mut j) = self.jobs.remove(&gid) else {
            return;
        };
        let adir = j.attempt_dir();
        let running = j.launched && lock_held(&adir.join("lock"));
        if let Some(signal) = j.signal {
            if running {
                // No step yet: srun is still making it; signalled at the
                // next poll.
                if self.signal_step(gid, &j, signal) == Ok(true) {
                    j.signal = None;
                }
            } else {
                // The launcher is gone: a step left of it is cancelled.
                if signal.is_none() {
                    let _ = self.signal_step(gid, &j, None);
                }
                j.signal = None;
            }
        }
        let worker_runs = j
            .worker
            .and_then(|w| self.workers.get(&w))
            .is_some_and(|w| w.live && w.state == Some(super::JobState::Running));
        if j.launched && j.live {
            // srun failed and no node ran the step (a --chdir not there,
            // srun not found) while the worker holds: the job's failure,
            // which would repeat, not a loss; its reason is in the log.
            let no_exit =
                (0..j.nodes()).all(|r| !adir.join(format!("exit.0.{}.{r}", j.attempt)).exists());
            let launch_failed = read_line(&adir.join("srun.exit"))
                .and_then(|c| c.parse::<i32>().ok())
                .filter(|&c| c != 0 && !running && no_exit && worker_runs && !j.stopping);
            if let Some(code) = launch_failed {
                let out = fs::read_to_string(adir.join("launch.out")).unwrap_or_default();
                for rank in (0..j.nodes()).filter(|&r| !j.answered[r as usize]) {
                    j.log(
                        rank,
                        &format!("skyc: the job's step did not start (srun exited {code}):\n{out}"),
                    );
                }
            }
            let mut cancelled = false;
            let mut open = false;
            for rank in 0..j.nodes() {
                if j.answered[rank as usize] {
                    continue;
                }
                let exit = read_exit(&adir.join(format!("exit.0.{}.{rank}", j.attempt)));
                let event = match exit {
                    Some((_, code)) if code != 0 && !j.stopping && !worker_runs => {
                        j.log(rank, "skyc: its worker was lost\n");
                        Event::NodeLost {
                            task: 0,
                            attempt: j.attempt,
                            node: rank,
                        }
                    }
                    Some((_, code)) if code != 0 && !j.failed[rank as usize] => {
                        j.failed[rank as usize] = true;
                        open = true;
                        continue;
                    }
                    Some((_, code)) => Event::NodeExited {
                        task: 0,
                        attempt: j.attempt,
                        node: rank,
                        phase: Phase::Run,
                        code,
                    },
                    None if running => {
                        open = true;
                        continue;
                    }
                    None if j.stopping => Event::NodeExited {
                        task: 0,
                        attempt: j.attempt,
                        node: rank,
                        phase: Phase::Run,
                        code: 143,
                    },
                    None => match launch_failed {
                        Some(code) => Event::NodeExited {
                            task: 0,
                            attempt: j.attempt,
                            node: rank,
                            phase: Phase::Run,
                            code,
                        },
                        None => {
                            // No step of this attempt may run beside the
                            // next one.
                            if !std::mem::replace(&mut cancelled, true) {
                                let _ = self.signal_step(gid, &j, None);
                            }
                            j.log(rank, "skyc: node lost\n");
                            Event::NodeLost {
                                task: 0,
                                attempt: j.attempt,
                                node: rank,
                            }
                        }
                    },
                };
                j.answered[rank as usize] = true;
                self.event(gid, event);
            }
            if !open {
                j.live = false;
            }
        }
        if j.finished && !j.settled && !running {
            j.settled = true;
            self.reports.push((gid, Report::Settled));
        }
        self.jobs.insert(gid, j);
    }
}

impl Members {
    /// Signals the attempt's step (by its name) in its worker's job, or
    /// cancels it (`None`): whether there was one, Err when Slurm could
    /// not be asked.
    fn signal_step(&self, gid: i64, j: &JobRun, signal: Option<&str>) -> Result<bool, ()> {
        let Some(wjob) = j.worker_job.as_deref() else {
            return Ok(false);
        };
        let slurm = self
            .workers
            .get(&j.worker.unwrap_or(-1))
            .map_or_else(|| j.plan.plan.cluster(), WorkerRun::slurm);
        let name = j.step_name(gid);
        let steps = slurm.steps(wjob).map_err(drop)?;
        let ids: Vec<&str> = steps
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.id.as_str())
            .collect();
        if ids.is_empty() {
            return Ok(false);
        }
        slurm.signal(&ids, signal).map(|()| true).map_err(drop)
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

/// Whether a launcher (or its srun) holds the lock.
fn lock_held(lock: &Path) -> bool {
    let Ok(file) = OpenOptions::new().read(true).open(lock) else {
        return false;
    };
    flock(&file, FlockOperation::NonBlockingLockExclusive).is_err()
}

/// A file's first line, trimmed, when it has one.
fn read_line(path: &Path) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_owned())
}

/// A step wrapper's exit file: `PHASE CODE`.
fn read_exit(path: &Path) -> Option<(String, i32)> {
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

fn log_stem(task: &str) -> String {
    let name = paths::log_name(task, 0);
    name.trim_end_matches("-0.log").to_owned()
}

/// The job's `run` as its nodes run it: the worker's envs (its setup's),
/// then the job's, in the job's workdir (else the worker's, else the
/// worker's directory, where srun starts it).
fn run_script(worker: &TaskRun, job: &TaskRun, gpus: &[Vec<u32>]) -> String {
    let mut s = String::new();
    // The GPUs the pool placed each node on, among its worker's (which
    // the step holds, in order).
    if gpus.iter().any(|g| !g.is_empty()) {
        s.push_str("case ${SKYPILOT_NODE_RANK:-0} in\n");
        for (rank, ids) in gpus.iter().enumerate() {
            let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
            let _ = writeln!(
                s,
                "{rank}) export CUDA_VISIBLE_DEVICES={} ;;",
                ids.join(",")
            );
        }
        s.push_str("esac\n");
    }
    for (name, value) in worker.envs.iter().chain(&job.envs) {
        if is_variable_name(name) {
            let _ = writeln!(s, "export {name}={}", quote(value));
        }
    }
    if let Some(dir) = job.workdir.as_ref().or(worker.workdir.as_ref()) {
        let _ = writeln!(s, "cd -- {} || exit 1", quote(dir));
    }
    s.push_str(job.run.as_deref().unwrap_or(""));
    s.push('\n');
    s
}

/// srun's environment: the worker's submitting client's, then the job's,
/// without the Slurm variables of wherever they ran (a client inside an
/// allocation), which would steer srun elsewhere.
fn srun_env(worker: &[(String, String)], job: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in worker.iter().chain(job) {
        env.insert(k.clone(), v.clone());
    }
    env.into_iter()
        .filter(|(k, _)| !k.starts_with("SLURM_") || k == "SLURM_CONF")
        .filter(|(k, _)| !k.starts_with("SKYC_IN_NS"))
        .collect()
}

/// What the step asks of each node, where the job names it: Slurm
/// accounts it per step (within the worker's allocation); `gpus`: the
/// GPUs it holds.
fn step_resources(task: &TaskRun, gpus: usize) -> Vec<String> {
    let mut args = Vec::new();
    if task.cpus > 0.0 {
        args.push(format!(
            "--cpus-per-task={}",
            task.cpus.ceil().max(1.0) as u64
        ));
    }
    if task.memory_gb > 0.0 {
        args.push(format!(
            "--mem={}M",
            (task.memory_gb * 1024.0).ceil() as u64
        ));
    }
    if gpus > 0 {
        args.push(format!("--gres=gpu:{gpus}"));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_runs_with_the_workers_envs_then_its_own_quoted() {
        let worker = TaskRun {
            envs: vec![("A".into(), "it's $HOME".into())],
            workdir: Some("/w d".into()),
            ..TaskRun::default()
        };
        let job = TaskRun {
            run: Some("echo $A".into()),
            envs: vec![("B".into(), "2".into()), ("not a name".into(), "x".into())],
            ..TaskRun::default()
        };
        assert_eq!(
            run_script(&worker, &job, &[]),
            "export A='it'\\''s $HOME'\nexport B=2\ncd -- '/w d' || exit 1\necho $A\n"
        );
    }

    #[test]
    fn a_job_uses_the_gpus_the_pool_placed_each_node_on() {
        let job = TaskRun {
            run: Some("nvidia-smi".into()),
            ..TaskRun::default()
        };
        assert_eq!(
            run_script(&TaskRun::default(), &job, &[vec![1], vec![0, 1]]),
            "case ${SKYPILOT_NODE_RANK:-0} in\n0) export CUDA_VISIBLE_DEVICES=1 ;;\n\
             1) export CUDA_VISIBLE_DEVICES=0,1 ;;\nesac\nnvidia-smi\n"
        );
        assert_eq!(
            run_script(&TaskRun::default(), &job, &[vec![]]),
            "nvidia-smi\n"
        );
    }

    #[test]
    fn srun_gets_no_slurm_variables_of_the_client_but_its_conf() {
        let env = srun_env(
            &[
                ("SLURM_JOB_ID".into(), "7".into()),
                ("SLURM_CONF".into(), "/c".into()),
                ("X".into(), "w".into()),
            ],
            &[("X".into(), "j".into())],
        );
        assert_eq!(
            env,
            vec![
                ("SLURM_CONF".to_owned(), "/c".to_owned()),
                ("X".to_owned(), "j".to_owned())
            ]
        );
    }

    #[test]
    fn a_free_lock_is_a_launcher_gone() {
        let dir = std::env::temp_dir().join(format!("skyc-lock-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lock");
        assert!(!lock_held(&path), "no lock file: nothing runs");
        let held = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap();
        flock(&held, FlockOperation::NonBlockingLockExclusive).unwrap();
        assert!(lock_held(&path));
        drop(held);
        assert!(!lock_held(&path));
        let _ = fs::remove_dir_all(&dir);
    }
}
