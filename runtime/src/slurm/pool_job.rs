//! A pool job on Slurm: each attempt one step of its worker's allocation
//! (`srun --jobid=W --overlap`), started by a detached launcher that
//! holds the attempt's lock while srun runs; each node's exit status comes
//! from its exit file (the step wrapper's). An attempt directory with a
//! `started` file was started: after a crash it is watched, never started
//! again; its lock free with a node's status missing is that node's loss.
//! The workers it runs on are `members.rs`'s.

use super::members::{Members, WorkerRun, append_log, read_exit, read_line};
use super::pool::{JobPlan, TaskRun};
use crate::backend::{NodeInfo, Report};
use crate::paths;
use crate::policy::{Attempt, Engine, Event, Phase};
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
use std::process::{Command, Stdio};

/// A pool job's attempt, as the supervisor follows it.
pub(super) struct JobRun {
    plan: JobPlan,
    dir: PathBuf,
    pub(super) attempt: Attempt,
    live: bool,
    pub(super) finished: bool,
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

impl JobRun {
    /// Its engine started attempt `attempt`: it waits for the pool to
    /// place it.
    pub(super) fn restart(&mut self, attempt: Attempt) {
        self.attempt = attempt;
        self.live = true;
        self.launched = false;
        self.worker = None;
        self.worker_job = None;
        self.answered = vec![false; self.nodes() as usize];
        self.failed = vec![false; self.nodes() as usize];
        self.signal = None;
        self.stopping = false;
        if attempt > 0 {
            for rank in 0..self.nodes() {
                self.log(
                    rank,
                    &format!(
                        "skyc: restarting {} (attempt {attempt})\n",
                        self.plan.task.name
                    ),
                );
            }
        }
    }

    /// Its engine stops its attempt: a launched step is signalled at the
    /// next poll (`None`: cancelled); the nodes of one never launched,
    /// which nothing runs, are lost now (returned).
    pub(super) fn stop(&mut self, signal: Option<&'static str>) -> Vec<u32> {
        self.stopping = true;
        if self.launched {
            self.signal = Some(signal);
            return Vec::new();
        }
        if !self.live {
            return Vec::new();
        }
        self.live = false;
        let lost = (0..self.nodes())
            .filter(|&r| !self.answered[r as usize])
            .collect();
        self.answered.iter_mut().for_each(|a| *a = true);
        lost
    }

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

impl Members {
    pub(super) fn adopt_job(
        &mut self,
        gid: i64,
        plan: &str,
        engine: &Engine,
        fresh: bool,
    ) -> Result<(), String> {
        let (plan, dir, live): (JobPlan, _, _) = self.adopting(gid, plan, engine, fresh)?;
        let nodes = plan.plan.num_nodes.first().copied().unwrap_or(1);
        let mut j = JobRun {
            plan,
            dir,
            attempt: engine.attempt(0),
            live,
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
                        self.lost(gid, attempt, node);
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
            let attempt = j.attempt;
            self.lost(gid, attempt, rank);
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

    /// A worker ended: the jobs on it are lost with it.
    pub(super) fn lose_jobs_on(&mut self, worker: i64) {
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

    pub(super) fn poll_job(&mut self, gid: i64) {
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

/// Whether a launcher (or its srun) holds the lock.
fn lock_held(lock: &Path) -> bool {
    let Ok(file) = OpenOptions::new().read(true).open(lock) else {
        return false;
    };
    flock(&file, FlockOperation::NonBlockingLockExclusive).is_err()
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
        // A child another test forks meanwhile shares the descriptor until
        // it execs (or exits): the lock is free once it has.
        let free = (0..200).any(|_| {
            let free = !lock_held(&path);
            if !free {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            free
        });
        assert!(free, "the lock is still held 2 s after it was dropped");
        let _ = fs::remove_dir_all(&dir);
    }
}
