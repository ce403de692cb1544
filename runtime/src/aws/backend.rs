//! The AWS backend: the supervisor's [`Backend`] for groups run on EC2.
//!
//! Each group is one thread: every [`poll_interval`] (sooner after a pass
//! EC2 took an operation of, at once when the engine decides
//! something) it reads the run's world once, runs the cloud runtime's
//! data plane over the running nodes ([`DataPlane::step`]: hosts, exits,
//! logs over SSH, blocking), then its control plane with EC2 as the
//! provider ([`Control`], through the [`reconciler`] runner the
//! Kubernetes backend runs too) from the engine's latest state, and sends
//! what they found to the supervisor through a channel and a byte in the
//! wake pipe. The thread holds nothing EC2, the store and the group's
//! directory do not also hold: a new supervisor adopts with the committed
//! engine, finds the run's instances by their `skyc-run` tag and goes on
//! (logs are read again from their start).
//!
//! Pools: a worker is a group like any other whose nodes hold (its row is
//! a worker's: `Adoption::role`), under a run name of its own; a job of a
//! pool has no thread: its attempt is handed to its worker's thread
//! ([`Backend::place`]), which
//! follows it on the worker's nodes ([`jobs`]) and reports for it.

use super::plan::{Plan, RunPlan};
use super::pool::JobPlan;
use super::pool_job::JobRun;
use crate::aws::control::files::{self, RunFiles};
use crate::aws::control::provider::Ec2Run;
use crate::aws::credentials::{Keeper, NodeCredentials, Step};
use crate::aws::ec2::client::{Ec2, Tuning};
use crate::aws::ec2::retry;
use crate::aws::ec2::sigv4::Credentials;
use crate::aws::s3::S3;
use crate::backend::{Adoption, Backend, Report, Role};
use crate::cloud::Provider as _;
use crate::cloud::control::pass::Control;
use crate::cloud::data::jobs::{self, Placed};
use crate::cloud::data::plane::DataPlane;
use crate::cloud::data::remote::Ssh;
use crate::cloud::world::World;
use crate::policy::{Action, Attempt, Engine, Event};
use crate::pool::Placement;
use crate::reconciler::goal::{Goal, Want};
use crate::reconciler::outbox::{Out, Outbox};
use crate::reconciler::{self, Told};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// Between two passes over a group, when nothing happens.
pub const POLL: Duration = Duration::from_secs(3);

/// Between a pass EC2 took an operation of and the next.
const SOON: Duration = Duration::from_millis(500);

/// [`POLL`], or `SKYC_AWS_POLL_MS` milliseconds (at least 100): each pass
/// reads the run's instances from EC2, which limits how often an account
/// may be asked.
pub fn poll_interval() -> Duration {
    std::env::var("SKYC_AWS_POLL_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(POLL, |ms| Duration::from_millis(ms.max(100)))
}

/// How long one command on a node may take.
const SSH_TIMEOUT: Duration = Duration::from_secs(30);

/// What a group's thread hears.
pub(super) enum Msg {
    Goal(Goal),
    Release,
    /// A pool job's attempt placed on this worker.
    Place(i64, Box<Placed>),
    /// A pool job's engine stops it.
    Stop(i64),
    /// A pool job closed.
    Forget(i64),
}

pub struct Aws {
    pub(super) state_dir: PathBuf,
    pub(super) groups: BTreeMap<i64, mpsc::Sender<Msg>>,
    pub(super) jobs: BTreeMap<i64, JobRun>,
    /// Reports made here rather than by a thread.
    pub(super) reports: Vec<(i64, Report)>,
    pub(super) outbox: Outbox,
    /// The tuning of every group's client (tests make it short).
    tuning: Tuning,
    /// [`poll_interval`], read once.
    poll: Duration,
}

impl Aws {
    /// The backend; group logs go under `state_dir`'s group directories.
    pub fn start(state_dir: PathBuf) -> io::Result<Aws> {
        Ok(Aws {
            state_dir,
            groups: BTreeMap::new(),
            jobs: BTreeMap::new(),
            reports: Vec::new(),
            outbox: Outbox::new()?,
            tuning: Tuning::default(),
            poll: poll_interval(),
        })
    }

    fn to(&self, gid: i64, msg: Msg) {
        if let Some(tx) = self.groups.get(&gid) {
            let _ = tx.send(msg);
        }
    }
}

impl Drop for Aws {
    fn drop(&mut self) {
        // A dropped sender ends each group's thread at its next wait.
        self.groups.clear();
    }
}

impl Backend for Aws {
    fn adopt(&mut self, gid: i64, adoption: &Adoption<'_>) -> Result<(), String> {
        if adoption.role == Role::Job {
            let plan: JobPlan = serde_json::from_str(adoption.plan)
                .map_err(|e| format!("the job's AWS plan: {e}"))?;
            if plan.spec.tasks.len() != 1 {
                return Err("a pool job's plan has one task".into());
            }
            let engine = adoption.engine;
            let attempt = engine.attempt(0);
            self.jobs.insert(
                gid,
                JobRun {
                    plan,
                    attempt,
                    placed: None,
                    ended: BTreeSet::new(),
                    stopped: (engine.stopping(0) || engine.is_cancelled()).then_some(attempt),
                    finished: engine.is_finished(),
                    settled: false,
                },
            );
            return Ok(());
        }
        let mut run: RunPlan = serde_json::from_str(adoption.plan)
            .map_err(|e| format!("the group's AWS plan: {e}"))?;
        run.hold = adoption.role == Role::Worker;
        if run.hold {
            let dir = crate::paths::group_dir(&self.state_dir, gid).join("key");
            run = run.for_worker(gid, &dir)?;
        }
        // No credentials yet: the group's thread gets them from the run's
        // source before its first call.
        let unsigned = Credentials {
            access_key_id: String::new(),
            secret_access_key: String::new(),
            session_token: None,
        };
        let settings = crate::aws::ec2::config::Settings {
            profile: run.access.profile.clone(),
            credentials: unsigned,
            credentials_source: String::new(),
            region: run.access.region.clone(),
            endpoint: run.access.endpoint.clone(),
        };
        let ec2 =
            Ec2::new(&settings, Some(&run.plan.region), self.tuning).map_err(|e| e.to_string())?;
        let group_dir = crate::paths::group_dir(&self.state_dir, gid);
        let dir = crate::cloud::data::remote::ssh_dir(&group_dir)
            .map_err(|e| format!("the run's SSH directory: {e}"))?;
        let mut data = DataPlane::new(
            Ssh {
                key: run.key.display().to_string(),
                dir: dir.display().to_string(),
                user: run.user.clone(),
                port: run.port,
            },
            skyc_targets::cloud::NODE_DIR.to_owned(),
            group_dir.join("logs"),
            SSH_TIMEOUT,
        );
        data.secrets = run.secrets.clone();
        data.private = run.private;
        data.mounts = (0..run.plan.spec.tasks.len())
            .map(|t| run.plan.mounts(t).map(str::to_owned))
            .collect();
        // The run's files go through S3 when a task has some.
        let files = match &run.plan.bucket {
            None => None,
            Some(_) => Some(RunFiles {
                s3: S3::new(
                    run.access.s3_endpoint.as_deref(),
                    &run.plan.region,
                    settings.credentials.clone(),
                    self.tuning,
                )
                .map_err(|e| e.to_string())?,
                snapshots: crate::files::Snapshots::of(&self.state_dir),
            }),
        };
        let (tx, rx) = mpsc::channel();
        let out = self.outbox.post().out(gid);
        let region = run.plan.region.clone();
        // A task that mounts buckets but whose plan names no session
        // policy (made by an older skyc) is `""`.
        let policies = (0..run.plan.spec.tasks.len())
            .map(|t| {
                run.plan
                    .mounts(t)
                    .map(|_| run.plan.policy(t).unwrap_or_default().to_owned())
            })
            .collect();
        let nodes = NodeCredentials::new(&run.plan.group, policies);
        let group = Group {
            hold: run.hold,
            jobs: BTreeMap::new(),
            plan: run.plan,
            goal: Goal::from_engine(adoption.engine),
            ec2,
            files,
            keeper: Keeper::new(run.access, region),
            nodes,
            data,
            out,
            told: Told::default(),
            poll: self.poll,
        };
        std::thread::Builder::new()
            .name(format!("skyc-aws-{gid}"))
            .spawn(move || group.run(rx))
            .map_err(|e| format!("the group's thread: {e}"))?;
        self.groups.insert(gid, tx);
        Ok(())
    }

    fn execute(&mut self, gid: i64, engine: &Engine, actions: &[Action]) {
        if self.jobs.contains_key(&gid) {
            self.execute_job(gid, engine, actions);
            return;
        }
        // Level triggered: the reconciler works from the engine's state,
        // so a stop or a launch decided is carried out from it.
        self.to(gid, Msg::Goal(Goal::from_engine(engine)));
    }

    fn cancel(&mut self, _gid: i64) {
        // The engine hears `CancelRequested`; its next state (a goal
        // with `cancel`) terminates every instance of the run.
    }

    fn release(&mut self, gid: i64) {
        if let Some(job) = self.jobs.remove(&gid) {
            if let Some((worker, _)) = job.placed {
                self.to(worker, Msg::Forget(gid));
            }
            return;
        }
        self.to(gid, Msg::Release);
        self.groups.remove(&gid);
    }

    fn drain(&mut self, _now_ms: i64) -> Vec<(i64, Report)> {
        let mut reports = std::mem::take(&mut self.reports);
        reports.extend(self.outbox.drain());
        for (gid, report) in &reports {
            let (Some(job), Report::Event { event, .. }) = (self.jobs.get_mut(gid), report) else {
                continue;
            };
            if let Event::NodeExited { attempt, node, .. } | Event::NodeLost { attempt, node, .. } =
                *event
                && job.placed.is_some_and(|(_, a)| a == attempt)
            {
                job.ended.insert(node);
            }
        }
        // A job whose engine has finished is settled once no node of its
        // attempt runs on its worker.
        for (&gid, job) in &mut self.jobs {
            let nodes = job.plan.spec.tasks[0].num_nodes as usize;
            let idle = job.placed.is_none() || job.ended.len() >= nodes;
            if job.finished && idle && !job.settled {
                job.settled = true;
                reports.push((gid, Report::Settled));
            }
        }
        reports
    }

    fn runs_pools(&self) -> bool {
        true
    }

    fn place(&mut self, job: i64, attempt: Attempt, worker: i64, placement: &Placement) {
        self.place_job(job, attempt, worker, placement);
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.outbox.wake_fd())
    }
}

/// One group's loop.
struct Group {
    /// A pool's worker: its nodes hold after setup.
    hold: bool,
    /// A worker's jobs, by job.
    jobs: BTreeMap<i64, Placed>,
    plan: Plan,
    goal: Goal,
    /// Signs with the keeper's latest credentials.
    ec2: Ec2,
    /// The run's files' bucket, when a task has files; signs as `ec2`.
    files: Option<RunFiles>,
    keeper: Keeper,
    /// What the nodes that mount buckets are given, narrowed from the
    /// keeper's.
    nodes: NodeCredentials,
    data: DataPlane,
    out: Out,
    /// What the supervisor has been told: each fact once.
    told: Told,
    poll: Duration,
}

impl Group {
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                self.out
                    .send(Report::Error(format!("the AWS backend's runtime: {e}")));
                return;
            }
        };
        loop {
            let next = self.step(&rt);
            // Wait for the next decision, or the next pass; take every
            // decision queued meanwhile, the latest goal winning.
            match rx.recv_timeout(next) {
                Ok(msg) => {
                    if !self.hear(msg) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            while let Ok(msg) = rx.try_recv() {
                if !self.hear(msg) {
                    return;
                }
            }
        }
    }

    /// Takes a message; false to end the loop.
    fn hear(&mut self, msg: Msg) -> bool {
        match msg {
            Msg::Goal(goal) => {
                self.goal = goal;
                true
            }
            Msg::Place(job, mut placed) => {
                let current = self
                    .jobs
                    .get(&job)
                    .is_some_and(|p| p.attempt == placed.attempt);
                if !current {
                    placed.worker_attempt = self.goal.tasks.first().map_or(0, |t| t.attempt);
                    self.jobs.insert(job, *placed);
                }
                true
            }
            Msg::Stop(job) => {
                if let Some(p) = self.jobs.get_mut(&job) {
                    p.stop = true;
                }
                true
            }
            Msg::Forget(job) => {
                if let Some(p) = self.jobs.remove(&job) {
                    for (id, address, name) in p.handed() {
                        let command =
                            crate::cloud::data::remote::remove_job(&self.data.node_dir, &name);
                        let _ = self.data.ssh.run(id, address, &command, self.data.timeout);
                    }
                }
                true
            }
            Msg::Release => {
                for p in self.jobs.values_mut() {
                    p.lose_all("its worker was released");
                }
                // The group is closed, its instances gone: its SSH state
                // and key have nothing left to reach.
                let _ = std::fs::remove_dir_all(&self.data.ssh.dir);
                let key = PathBuf::from(&self.data.ssh.key);
                let _ = std::fs::remove_file(key.with_extension("pub"));
                let _ = std::fs::remove_file(&key);
                // The run's own directory, made for the key alone.
                if let Some(dir) = key.parent() {
                    let _ = std::fs::remove_dir(dir);
                }
                false
            }
        }
    }

    /// Tells the supervisor what it has not been told.
    fn tell(&mut self, report: Report) {
        if let Some(news) = self.told.news(report) {
            self.out.send(news);
        }
    }

    /// Tells an error the first time it is met.
    fn tell_once(&mut self, error: String) {
        if let Some(news) = self.told.once(error) {
            self.out.send(news);
        }
    }

    /// One pass: the run's world read, the data plane over its nodes,
    /// then the control plane through the [`reconciler`]; how long until
    /// the next one.
    fn step(&mut self, rt: &tokio::runtime::Runtime) -> Duration {
        match rt.block_on(self.keeper.step(std::time::SystemTime::now())) {
            Step::Keep => {}
            Step::Use(credentials) => {
                if let Some(f) = &mut self.files {
                    f.s3 = f.s3.with_credentials(credentials.clone());
                }
                self.ec2 = self.ec2.with_credentials(credentials);
            }
            Step::Warn(e) => self.tell_once(e),
            Step::Outage(why) => {
                self.tell(Report::Outage(Some(why)));
                return self.poll;
            }
        }
        let provider = Ec2Run {
            ec2: &self.ec2,
            files: self.files.as_ref(),
            plan: &self.plan,
        };
        let seen = rt.block_on(provider.world());
        match &seen {
            Err(e) if e.code().is_some_and(retry::is_expired_credentials) => {
                // The run's source is asked again on the next pass; the
                // same credentials again are an outage.
                self.keeper.refused(e.to_string());
                self.tell_once(format!("{e}; asking the run's credential source again"));
                return self.poll;
            }
            Ok(world) => self.data_step(rt, world),
            // Told by the pass.
            Err(_) => {}
        }
        let provider = Ec2Run {
            ec2: &self.ec2,
            files: self.files.as_ref(),
            plan: &self.plan,
        };
        let passed = rt.block_on(reconciler::pass(&mut Control {
            provider: &provider,
            goal: &self.goal,
            outcomes: self.data.outcomes(),
            told: &mut self.told,
            seen: Some(seen),
        }));
        for report in passed.reports {
            self.out.send(report);
        }
        if passed.acted {
            SOON.min(self.poll)
        } else {
            self.poll
        }
    }

    /// The data plane's part of a pass, over the world as read: the
    /// nodes' credentials and files handed over, each node read over SSH,
    /// and a worker's jobs.
    fn data_step(&mut self, rt: &tokio::runtime::Runtime, world: &World) {
        // Nodes that mount buckets read credentials narrowed to them,
        // delivered again whenever they are renewed.
        if self.data.mounts.iter().any(Option::is_some) {
            self.deliver_credentials(rt);
        }
        // Each node is given URLs presigned now, with the credentials of
        // now: valid for a while after it gets them, whenever that is.
        if let Some(f) = &self.files {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            self.data.files = (0..self.plan.spec.tasks.len())
                .map(|task| files::urls(f, &self.plan, task, now))
                .collect();
        }
        let (_, mut errors) = self.data.step(&self.plan.as_run(), world, &self.goal);
        if self.hold {
            self.pool_step(world, &mut errors);
        }
        for e in errors {
            self.tell_once(e);
        }
    }

    /// Each task's node credentials of now, and what `status` says of
    /// them when that changes.
    fn deliver_credentials(&mut self, rt: &tokio::runtime::Runtime) {
        let (deliveries, errors) =
            rt.block_on(self.nodes.step(&self.keeper, std::time::SystemTime::now()));
        for e in errors {
            self.tell_once(e);
        }
        self.data.node_credentials = Vec::with_capacity(deliveries.len());
        for (task, d) in deliveries.into_iter().enumerate() {
            if let Some(d) = &d {
                self.tell(Report::Credentials {
                    task,
                    says: d.says.clone(),
                });
            }
            self.data.node_credentials.push(d.and_then(|d| d.document));
        }
    }

    /// A worker's part of a pass: ready once every node holds (its setup
    /// ended well), its jobs followed, and lost with it once it is
    /// retired.
    fn pool_step(&mut self, world: &World, errors: &mut Vec<String>) {
        let Some(task) = self.goal.tasks.first() else {
            return;
        };
        let attempt = task.attempt;
        let holds = (0..task.live.len() as u32).all(|rank| {
            let key = crate::cloud::world::NodeKey {
                task: 0,
                rank,
                attempt,
            };
            matches!(
                self.data.outcome(key),
                Some(crate::cloud::data::node::Outcome::Running(
                    crate::policy::Phase::Run
                ))
            )
        });
        let (want, cancel) = (task.want, self.goal.cancel);
        if holds && want == Want::Run {
            self.tell(Report::Ready { task: 0, attempt });
        }
        if cancel || want == Want::Done {
            for p in self.jobs.values_mut() {
                p.lose_all("its worker was retired");
            }
        }
        // Ended jobs stay until they are closed (`Forget`), which removes
        // their directories from the worker.
        jobs::step(
            &mut self.jobs,
            &self.data,
            &self.plan.as_run(),
            world,
            errors,
        );
    }
}
