//! The Kubernetes backend: one thread with a current-thread tokio runtime
//! beside the supervisor's synchronous `poll(2)` loop.
//!
//! kube's client is async; the supervisor is not, and should not become
//! so for one backend. The supervisor sends commands over an unbounded
//! channel (sending never blocks); the thread sends reports back over a
//! [`Outbox`](crate::reconciler::outbox::Outbox) whose pipe's read end is the
//! [`Backend::wake_fd`] the supervisor polls. Each group is one task on
//! the thread: it connects, checks and applies, then watches its JobSet,
//! Jobs and pods, and on every change observes ([`observe`]) and
//! reconciles ([`reconcile`]) from the engine's latest state. Requests of
//! one group go out one at a time, so their order is the order the
//! reconciler chose.

use super::apply::{self, Found, Refusal};
use super::client::{self, Cluster};
use super::jobset::JobSet;
use super::kueue::Workload;
use super::log_readers::{self, Readers, Started};
use super::logs::NodeLog;
use super::objects::{self, Kind};
use super::observe::observe;
use super::plan::Plan;
use super::pool_job::{Placed, PoolJob};
use super::reconcile::{self, Op};
use super::request::{self, Apis, Outcome};
use super::retry;
use super::watch::{self, Shared, SharedRef, lock};
use crate::backend::{Adoption, Backend, Report, Role};
use crate::policy::{Action, Attempt, Engine, Event};
use crate::pool::Placement;
use crate::reconciler::backoff::Backoff;
use crate::reconciler::goal::Goal;
use crate::reconciler::outbox::{Out, Outbox, Post};
use crate::reconciler::{self, Applied, Reconciler, Settled, Sight, Told};
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

/// How long after the group's end its JobSet may take to end too (the
/// gate's pod to run, JobSet to fail it) before the group is closed
/// anyway.
const SETTLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// How long a group whose cluster objects have settled waits for the
/// rest of its pods' logs before it is settled all the same (more when
/// many are still to be read in turns: `Readers::tail_time`).
const LOG_TAIL_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How often, meanwhile, the log followers are looked at.
const LOG_TAIL_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// How long past its grace a deleted pod may stay before it is deleted
/// at once (grace 0): a pod whose node no longer answers stays
/// `Terminating` until then, and holds its hostname and its task's
/// restart.
const FORCE_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// How many pod deletions of one pass go out at once.
const DELETE_CONCURRENCY: usize = 16;

/// The exit code of a node whose pod the API server refused to create,
/// as for a node the AWS runtime could never reach.
const UNLAUNCHABLE: i32 = 255;

/// How often a finished JobSet of an earlier run is looked for while it
/// goes away.
const REPLACE_POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// How often a pool job's nodes are read (`pods/exec`): each read is one
/// short exec per node.
const JOB_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// Makes the client of a plan's cluster.
pub type Connect = Arc<dyn Fn(&Plan) -> BoxFuture<'static, Result<Cluster, String>> + Send + Sync>;

/// The kubeconfig's cluster, as kubectl finds it, for the plan's context.
pub fn kubeconfig() -> Connect {
    Arc::new(|plan: &Plan| {
        let (kubeconfig, context) = (plan.kubeconfig.clone(), plan.context.clone());
        Box::pin(async move { client::connect(kubeconfig.as_deref(), context.as_deref()).await })
    })
}

/// Knobs, so tests can run fast.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    pub backoff: Backoff,
    /// Follow pod logs into the state directory.
    pub logs: bool,
    /// Pod logs followed at once by the supervisor; the others are read
    /// in turns ([`log_readers`]), each at most every `log_turn`.
    pub log_streams: usize,
    pub log_turn: std::time::Duration,
    /// How long past its grace a deleted pod may stay before it is
    /// deleted at once (its node does not answer).
    pub force_after: std::time::Duration,
    /// How often a pool job's nodes are read in their worker's pods.
    pub job_poll: std::time::Duration,
    /// How long after the group's end its JobSet may take to end (or a
    /// worker's to go) before the group is closed anyway.
    pub settle_limit: std::time::Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            backoff: Backoff::default(),
            logs: true,
            log_streams: log_readers::STREAMS,
            log_turn: log_readers::TURN,
            force_after: FORCE_AFTER,
            job_poll: JOB_POLL,
            settle_limit: SETTLE_LIMIT,
        }
    }
}

enum Command {
    Adopt {
        gid: i64,
        role: Role,
        plan: Box<Plan>,
        goal: Goal,
        job: Option<String>,
    },
    To(i64, Msg),
    /// A pool job's attempt placed on a worker.
    Place {
        job: i64,
        attempt: u32,
        worker: i64,
        placement: Placement,
    },
}

/// What a group's task hears.
#[derive(Debug)]
enum Msg {
    Goal(Goal),
    Kill {
        task: usize,
        attempt: u32,
    },
    Cancel,
    Release,
    /// A pool job's attempt, where it runs.
    Place(Placed),
}

pub struct Kubernetes {
    tx: mpsc::UnboundedSender<Command>,
    outbox: Outbox,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Kubernetes {
    /// Starts the backend's thread. Logs go under `state_dir`'s group
    /// directories.
    pub fn start(state_dir: PathBuf, connect: Connect, tuning: Tuning) -> io::Result<Self> {
        let outbox = Outbox::new()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let ctx = Ctx {
            state_dir,
            connect,
            log_streams: log_readers::Budget::new(tuning.log_streams),
            tuning,
            post: outbox.post(),
        };
        // Built here, so that a runtime that cannot start is the caller's
        // error, not a thread that drops every command.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("skyc-k8s".into())
            .spawn(move || {
                let local = tokio::task::LocalSet::new();
                local.block_on(&rt, main_loop(rx, ctx));
            })?;
        Ok(Self {
            tx,
            outbox,
            thread: Some(thread),
        })
    }

    fn to(&self, gid: i64, msg: Msg) {
        let _ = self.tx.send(Command::To(gid, msg));
    }
}

impl Drop for Kubernetes {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop.
        let (tx, _) = mpsc::unbounded_channel();
        drop(std::mem::replace(&mut self.tx, tx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Kubernetes {
    /// Takes charge of a group of `plan` ([`Backend::adopt`], parsed), in
    /// its store row's role.
    pub fn adopt_plan(
        &mut self,
        gid: i64,
        role: Role,
        mut plan: Plan,
        engine: &Engine,
        job: Option<String>,
    ) {
        plan.hold = role == Role::Worker;
        let _ = self.tx.send(Command::Adopt {
            gid,
            role,
            plan: Box::new(plan),
            goal: Goal::from_engine(engine),
            job,
        });
    }
}

impl Backend for Kubernetes {
    fn adopt(&mut self, gid: i64, adoption: &Adoption<'_>) -> Result<(), String> {
        let mut plan: Plan = serde_json::from_str(adoption.plan)
            .map_err(|e| format!("the group's Kubernetes plan: {e}"))?;
        if adoption.role == Role::Worker {
            // Every worker of a pool is made from the pool's one plan: on
            // the cluster, each is named after its row.
            plan = plan.named(adoption.name);
        }
        self.adopt_plan(
            gid,
            adoption.role,
            plan,
            adoption.engine,
            adoption.job.map(str::to_owned),
        );
        Ok(())
    }

    fn execute(&mut self, gid: i64, engine: &Engine, actions: &[Action]) {
        for action in actions {
            if let Action::Kill { task, attempt } = action {
                self.to(
                    gid,
                    Msg::Kill {
                        task: *task,
                        attempt: *attempt,
                    },
                );
            }
        }
        self.to(gid, Msg::Goal(Goal::from_engine(engine)));
    }

    fn cancel(&mut self, gid: i64) {
        self.to(gid, Msg::Cancel);
    }

    fn release(&mut self, gid: i64) {
        self.to(gid, Msg::Release);
    }

    fn drain(&mut self, _now_ms: i64) -> Vec<(i64, Report)> {
        self.outbox.drain()
    }

    fn runs_pools(&self) -> bool {
        true
    }

    fn place(&mut self, job: i64, attempt: Attempt, worker: i64, placement: &Placement) {
        let _ = self.tx.send(Command::Place {
            job,
            attempt,
            worker,
            placement: placement.clone(),
        });
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.outbox.wake_fd())
    }
}

struct Ctx {
    state_dir: PathBuf,
    connect: Connect,
    tuning: Tuning,
    post: Post,
    /// The streams its groups' log followers share.
    log_streams: log_readers::Budget,
}

async fn main_loop(mut rx: mpsc::UnboundedReceiver<Command>, ctx: Ctx) {
    let ctx = Arc::new(ctx);
    let mut groups: BTreeMap<i64, mpsc::UnboundedSender<Msg>> = BTreeMap::new();
    // The pools' workers: their plan and current attempt, for placing
    // their jobs in their pods.
    let mut workers: BTreeMap<i64, (Plan, u32)> = BTreeMap::new();
    while let Some(command) = rx.recv().await {
        match command {
            Command::Adopt {
                gid,
                role,
                plan,
                goal,
                job,
            } => {
                if groups.get(&gid).is_some_and(|g| !g.is_closed()) {
                    continue;
                }
                let (tx, rx) = mpsc::unbounded_channel();
                groups.insert(gid, tx);
                let out = ctx.post.out(gid);
                if role == Role::Worker {
                    let attempt = goal.tasks.first().map_or(0, |t| t.attempt);
                    workers.insert(gid, ((*plan).clone(), attempt));
                }
                if role == Role::Job {
                    let job = PoolJob::new(
                        (*plan).clone(),
                        goal,
                        out,
                        crate::paths::group_dir(&ctx.state_dir, gid),
                        ctx.tuning.backoff,
                        ctx.tuning.job_poll,
                    );
                    tokio::task::spawn_local(run_job(job, *plan, rx, ctx.clone()));
                } else {
                    let group = Group::new(*plan, goal, job, out, ctx.clone());
                    tokio::task::spawn_local(group.run(rx));
                }
            }
            Command::To(gid, msg) => {
                let release = matches!(msg, Msg::Release);
                if let (Msg::Goal(goal), Some(w)) = (&msg, workers.get_mut(&gid)) {
                    w.1 = goal.tasks.first().map_or(w.1, |t| t.attempt);
                }
                if let Some(tx) = groups.get(&gid) {
                    let _ = tx.send(msg);
                }
                if release {
                    groups.remove(&gid);
                    workers.remove(&gid);
                }
            }
            Command::Place {
                job,
                attempt,
                worker,
                placement,
            } => {
                let placed = match workers.get(&worker) {
                    Some((plan, at)) => Placed {
                        attempt,
                        namespace: plan.namespace.clone(),
                        pods: (0..plan.spec.tasks[0].num_nodes)
                            .map(|rank| plan.pod_of(0, rank, *at))
                            .collect(),
                        placement,
                    },
                    // Not a worker of this supervisor (closed): its job's
                    // nodes are lost with it.
                    None => Placed {
                        attempt,
                        namespace: String::new(),
                        pods: Vec::new(),
                        placement,
                    },
                };
                if let Some(tx) = groups.get(&job) {
                    let _ = tx.send(Msg::Place(placed));
                }
            }
        }
    }
}

/// A pool job's task: connects, then reads its nodes every
/// [`Tuning::job_poll`] and whenever it hears something.
async fn run_job(
    mut job: PoolJob,
    plan: Plan,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    ctx: Arc<Ctx>,
) {
    let hear = |job: &mut PoolJob, msg: Msg| -> bool {
        match msg {
            Msg::Goal(goal) => job.set_goal(goal),
            Msg::Kill { attempt, .. } => job.kill(attempt),
            Msg::Cancel => job.cancel(),
            Msg::Place(placed) => job.place(placed),
            Msg::Release => return false,
        }
        true
    };
    let mut failures = 0;
    let cluster = loop {
        match (ctx.connect)(&plan).await {
            Ok(c) => break c,
            Err(e) => {
                job.set_outage(Some(e));
                let until = Instant::now() + job.backoff().delay(failures);
                failures += 1;
                loop {
                    tokio::select! {
                        msg = rx.recv() => match msg {
                            Some(msg) => if !hear(&mut job, msg) { return },
                            None => return,
                        },
                        () = tokio::time::sleep_until(until) => break,
                    }
                }
            }
        }
    };
    job.set_outage(None);
    // What was said meanwhile (a placement given again, a cancel) is heard
    // before the first pass.
    while let Ok(msg) = rx.try_recv() {
        if !hear(&mut job, msg) {
            return;
        }
    }
    loop {
        job.pass(&cluster).await;
        let until = Instant::now() + job.interval();
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(msg) => if !hear(&mut job, msg) { return },
                None => return,
            },
            () = tokio::time::sleep_until(until) => {}
        }
        while let Ok(msg) = rx.try_recv() {
            if !hear(&mut job, msg) {
                return;
            }
        }
    }
}

/// One group's task.
struct Group {
    plan: Plan,
    goal: Goal,
    job: Option<String>,
    out: Out,
    ctx: Arc<Ctx>,
    kills: Vec<(usize, u32)>,
    /// What the supervisor has been told: each fact once.
    told: Told,
    /// What answers to requests found, for the pass to tell.
    answers: Vec<Report>,
    /// The last refusal shown for a group this run has applied.
    refusal: Option<String>,
    /// The last request shown as failing for a while.
    retrying: Option<String>,
    /// Ops not to send again before the instant: done (their effect may
    /// not be visible yet) or failing (backing off).
    held: BTreeMap<Op, Instant>,
    /// When the engine was first seen finished.
    finished_at: Option<Instant>,
    /// The API server, for messages.
    server: String,
    /// Its pods' logs' readers.
    logs: Readers,
    /// The files pod's filling, on a task of its own (it may take
    /// minutes; the group's loop goes on meanwhile), and its op.
    filling: Option<(Op, tokio::task::JoinHandle<Outcome>)>,
    /// Wakes the group's loop (a fill that ended).
    wake: Option<Arc<Notify>>,
    /// When the cluster's objects were first seen settled.
    cluster_settled_at: Option<Instant>,
    /// Pods being deleted, by uid: when this runtime first saw it (its
    /// own clock, so the cluster's clock does not matter).
    deleting_since: BTreeMap<String, Instant>,
}

/// How a wait for the cluster ended.
enum Waited {
    Again,
    Released,
}

impl Group {
    fn new(plan: Plan, goal: Goal, job: Option<String>, out: Out, ctx: Arc<Ctx>) -> Self {
        let logs = Readers::new(
            ctx.log_streams.clone(),
            ctx.tuning.backoff,
            ctx.tuning.log_turn,
        );
        Self {
            plan,
            goal,
            job,
            out,
            ctx,
            kills: Vec::new(),
            told: Told::default(),
            answers: Vec::new(),
            refusal: None,
            retrying: None,
            held: BTreeMap::new(),
            finished_at: None,
            server: String::new(),
            logs,
            filling: None,
            wake: None,
            cluster_settled_at: None,
            deleting_since: BTreeMap::new(),
        }
    }

    fn backoff(&self) -> Backoff {
        self.ctx.tuning.backoff
    }

    fn hear(&mut self, msg: Msg) -> bool {
        match msg {
            Msg::Goal(goal) => {
                let cancel = self.goal.cancel;
                self.goal = goal;
                self.goal.cancel |= cancel;
            }
            Msg::Kill { task, attempt } => self.kills.push((task, attempt)),
            Msg::Cancel => self.goal.cancel = true,
            Msg::Release => return false,
            Msg::Place(_) => {}
        }
        true
    }

    /// Waits `delay` while still hearing commands.
    async fn pause(
        &mut self,
        rx: &mut mpsc::UnboundedReceiver<Msg>,
        delay: std::time::Duration,
    ) -> Waited {
        let until = Instant::now() + delay;
        loop {
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(msg) => if !self.hear(msg) { return Waited::Released },
                    None => return Waited::Released,
                },
                () = tokio::time::sleep_until(until) => return Waited::Again,
            }
        }
    }

    /// Tells the supervisor what it has not been told.
    fn tell(&mut self, report: Report) {
        if let Some(news) = self.told.news(report) {
            self.out.send(news);
        }
    }

    fn set_outage(&mut self, outage: Option<String>) {
        self.tell(Report::Outage(outage));
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let mut failures = 0;
        let cluster = loop {
            match (self.ctx.connect)(&self.plan).await {
                Ok(c) => break c,
                Err(e) => {
                    self.set_outage(Some(e));
                    if let Waited::Released =
                        self.pause(&mut rx, self.backoff().delay(failures)).await
                    {
                        return;
                    }
                    failures += 1;
                }
            }
        };
        self.server.clone_from(&cluster.server);
        let Some(()) = self.put_on(&cluster, &mut rx).await else {
            return;
        };
        self.set_outage(None);
        self.supervise(&cluster, rx).await;
    }

    /// Checks, and applies unless this run's JobSet is there; `None` when
    /// released meanwhile or refused. Once this run has applied its
    /// JobSet (`job`), nothing refuses the group any more: an answer that
    /// would have (an expired token, an edited Role, the CRD being
    /// upgraded) is shown and asked again, since the group runs on.
    async fn put_on(
        &mut self,
        cluster: &Cluster,
        rx: &mut mpsc::UnboundedReceiver<Msg>,
    ) -> Option<()> {
        let mut failures = 0;
        loop {
            let result = match apply::check(&cluster.client, &self.plan).await {
                Ok(Found::Ours(js)) => apply::apply_owned(&cluster.client, &self.plan, &js)
                    .await
                    .map(|()| Some(*js)),
                Ok(Found::Absent | Found::Finished(_)) if self.job.is_some() => {
                    // Applied by this run before, gone now: deleted by
                    // this run once it ended (a worker's), or from outside.
                    if !self.goal.cancel && self.goal.end.is_none() {
                        self.out.send(Report::Error(format!(
                            "the JobSet {} was deleted outside skyc",
                            self.plan.group
                        )));
                        self.send_event(Event::CancelRequested, None);
                    }
                    Ok(None)
                }
                Ok(Found::Absent | Found::Finished(_)) if self.goal.cancel => Ok(None),
                Ok(Found::Finished(old)) => {
                    match apply::remove_finished(&cluster.client, &self.plan, &old).await {
                        // Applied once the old one is gone (checked again).
                        Ok(()) => {
                            if let Waited::Released = self.pause(rx, REPLACE_POLL).await {
                                return None;
                            }
                            continue;
                        }
                        Err(e) => Err(e),
                    }
                }
                Ok(Found::Absent) => apply::apply(&cluster.client, &self.plan).await.map(Some),
                Err(e) => Err(e),
            };
            let refused = match result {
                Ok(js) => {
                    if let Some(js) = js {
                        let id = request::job_id(&js);
                        if self.job.as_ref() != Some(&id) {
                            self.job = Some(id.clone());
                            self.out.send(Report::Job(id));
                        }
                    }
                    return Some(());
                }
                Err(Refusal::Refused(message)) => message,
                Err(Refusal::Retry(e)) if retry::is_outage(&e) => {
                    self.set_outage(Some(format!(
                        "the Kubernetes API server {} is not answering: {}",
                        cluster.server,
                        retry::describe(&e)
                    )));
                    String::new()
                }
                Err(Refusal::Retry(e)) if retry::is_transient(&e) => String::new(),
                Err(Refusal::Retry(e)) => format!(
                    "the Kubernetes API server {} refused: {}",
                    cluster.server,
                    retry::describe(&e)
                ),
            };
            if !refused.is_empty() {
                if self.job.is_none() {
                    self.out.send(Report::Refused(refused));
                    while let Some(msg) = rx.recv().await {
                        if matches!(msg, Msg::Release) {
                            break;
                        }
                    }
                    return None;
                }
                if self.refusal.as_ref() != Some(&refused) {
                    self.out.send(Report::Error(refused.clone()));
                    self.refusal = Some(refused);
                }
            }
            if let Waited::Released = self.pause(rx, self.backoff().delay(failures)).await {
                return None;
            }
            failures += 1;
        }
    }

    fn send_event(&mut self, event: Event, at_ms: Option<i64>) {
        self.tell(Report::Event { event, at_ms });
    }

    async fn supervise(mut self, cluster: &Cluster, mut rx: mpsc::UnboundedReceiver<Msg>) {
        let shared: SharedRef = Arc::new(Mutex::new(Shared::default()));
        let notify = Arc::new(Notify::new());
        let mut apis = Apis::new(&cluster.client, &self.plan.namespace, &self.plan.group);
        apis.files = Some((
            cluster.exec.clone(),
            crate::files::Snapshots::of(&self.ctx.state_dir)
                .dir()
                .to_owned(),
        ));
        let backoff = self.backoff();
        let sink = watch::Sink {
            shared: shared.clone(),
            notify: notify.clone(),
            server: cluster.server.clone(),
            backoff,
        };
        self.wake = Some(notify.clone());
        let by_name = format!("metadata.name={}", self.plan.group);
        let tasks = vec![
            tokio::task::spawn_local(watch::run::<JobSet>(
                apis.jobsets.clone(),
                by_name,
                true,
                sink.clone(),
            )),
            tokio::task::spawn_local(watch::run::<Job>(
                apis.jobs.clone(),
                self.plan.selector(),
                false,
                sink.clone(),
            )),
            tokio::task::spawn_local(watch::run::<Pod>(
                apis.pods.clone(),
                self.plan.selector(),
                false,
                sink.clone(),
            )),
        ];
        // The Workloads of the JobSet (by its uid) once it is seen
        // suspended.
        let mut workloads: Option<(String, tokio::task::JoinHandle<()>)> = None;
        loop {
            let next_hold = self
                .held
                .values()
                .copied()
                .chain(
                    self.finished_at
                        .filter(|_| !self.told.settled())
                        .map(|at| at + self.ctx.tuning.settle_limit),
                )
                .chain(
                    self.cluster_settled_at
                        .filter(|_| !self.told.settled())
                        .map(|_| Instant::now() + LOG_TAIL_POLL),
                )
                .chain(
                    self.deleting_since
                        .values()
                        .map(|at| *at + self.plan.spec.grace + self.ctx.tuning.force_after),
                )
                .min();
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(msg) => if !self.hear(msg) { break },
                    None => break,
                },
                () = notify.notified() => {}
                () = async {
                    match next_hold {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => {}
            }
            // Everything already waiting, in one pass.
            let mut released = false;
            while let Ok(msg) = rx.try_recv() {
                released |= !self.hear(msg);
            }
            if released {
                break;
            }
            let now = Instant::now();
            self.held.retain(|_, until| *until > now);
            let passed = reconciler::pass(&mut Pass {
                group: &mut self,
                apis: &apis,
                shared: &shared,
            })
            .await;
            for report in passed.reports {
                self.out.send(report);
            }
            if passed.asked {
                // Something was written: look again at once.
                notify.notify_one();
            }
            // A suspended JobSet waits for Kueue (a namespace whose Kueue
            // queues every JobSet): its Workload, labelled with the
            // JobSet's uid, says why.
            let suspended = lock(&shared)
                .objs
                .jobset
                .as_ref()
                .filter(|j| j.is_suspended())
                .and_then(|j| j.metadata.uid.clone());
            if let Some(uid) = suspended
                && workloads
                    .as_ref()
                    .is_none_or(|(watched, _)| *watched != uid)
            {
                if let Some((_, old)) = workloads.take() {
                    old.abort();
                }
                let task = tokio::task::spawn_local(watch::run::<Workload>(
                    apis.workloads.clone(),
                    format!("{}={uid}", super::kueue::JOB_UID_LABEL),
                    false,
                    sink.clone(),
                ));
                workloads = Some((uid, task));
            }
        }
        let workloads = workloads.map(|(_, t)| t);
        for t in tasks.into_iter().chain(workloads) {
            t.abort();
        }
        self.logs.abort();
        if let Some((_, fill)) = self.filling.take() {
            fill.abort();
        }
    }

    /// Starts filling the files pod on a task of its own, unless a fill
    /// runs.
    fn fill(&mut self, apis: &Apis, shared: &SharedRef, op: Op, pod: String, uid: String) {
        if self.filling.is_some() {
            return;
        }
        let (plan, apis, shared) = (self.plan.clone(), apis.clone(), shared.clone());
        let wake = self.wake.clone();
        let backoff = self.backoff();
        let task = tokio::task::spawn_local(async move {
            let outcome = request::fill_files(&plan, &apis, &shared, &pod, &uid, backoff).await;
            if let Some(wake) = wake {
                wake.notify_one();
            }
            outcome
        });
        self.filling = Some((op, task));
    }

    /// The last lines of the ended pods are read (or have had their time).
    fn logs_read(&self) -> bool {
        self.cluster_settled_at.is_some_and(|since| {
            self.logs.done() || since.elapsed() >= self.logs.tail_time(LOG_TAIL_LIMIT)
        })
    }

    /// What an op's answer leaves to do: say a refusal, fail a refused
    /// launch's nodes, and hold the op back for a while either way.
    fn answered(&mut self, shared: &SharedRef, op: Op, outcome: Outcome) {
        let backoff = self.backoff();
        match outcome {
            Outcome::Done | Outcome::Moot => {
                // What failed for a while works again: a new failure is said.
                self.retrying = None;
            }
            Outcome::Refused(why) => {
                self.answers
                    .push(Report::Error(format!("{}: {why}", request::describe(&op))));
                if let Op::Launch { task, attempt, .. } = op {
                    self.unlaunchable(shared, task, attempt);
                }
                // No node of the group can get its files: each task's
                // attempt fails its setup, as a refused launch does.
                if let Op::FillFiles { .. } | Op::MakeFilesPod { .. } = op {
                    let running: Vec<(usize, u32)> = (self.goal.tasks.iter().enumerate())
                        .filter(|(_, t)| t.want == crate::reconciler::goal::Want::Run)
                        .map(|(task, t)| (task, t.attempt))
                        .collect();
                    for (task, attempt) in running {
                        self.unlaunchable(shared, task, attempt);
                    }
                }
            }
            Outcome::Failing(e) => watch::failed(shared, &self.server, &e),
            Outcome::Retry(why) => {
                let said = format!("{}: {why}", request::describe(&op));
                if self.retrying.as_ref() != Some(&said) {
                    self.answers.push(Report::Error(said.clone()));
                    self.retrying = Some(said);
                }
            }
        }
        self.held.insert(op, Instant::now() + backoff.max);
    }

    /// A launch the API server refused for good (a quota, an admission
    /// policy, an invalid pod): each node it could not create failed its
    /// setup, so the task ends FAILED_SETUP instead of being launched
    /// again and again.
    fn unlaunchable(&mut self, shared: &SharedRef, task: usize, attempt: u32) {
        let nodes = self.plan.spec.tasks.get(task).map_or(0, |t| t.num_nodes);
        for rank in 0..nodes {
            let name = self.plan.pod_of(task, rank, attempt);
            if !lock(shared).objs.pods.contains_key(&name) {
                self.answers.push(Report::Event {
                    event: Event::NodeExited {
                        task,
                        attempt,
                        node: rank,
                        phase: crate::policy::Phase::Setup,
                        code: UNLAUNCHABLE,
                    },
                    at_ms: None,
                });
            }
        }
    }

    /// Pods deleted longer ago than their grace and `force_after` and
    /// still there (their node does not answer, or the cache missed
    /// their going): deleted at once.
    fn overdue(&mut self, objs: &objects::Objects) -> Vec<Op> {
        let now = Instant::now();
        let limit = self.plan.spec.grace + self.ctx.tuning.force_after;
        let mut seen = BTreeSet::new();
        let mut ops = Vec::new();
        for pod in objs.pods.values() {
            let Some(uid) = pod.metadata.uid.clone() else {
                continue;
            };
            // An ended pod whose deletion is not seen done is asked again
            // (a 404 then drops it from the cache).
            if !objects::deleting(&pod.metadata) {
                continue;
            }
            let since = *self.deleting_since.entry(uid.clone()).or_insert(now);
            if now.duration_since(since) >= limit {
                ops.push(Op::KillPod {
                    pod: pod.metadata.name.clone().unwrap_or_default(),
                    uid: uid.clone(),
                });
            }
            seen.insert(uid);
        }
        self.deleting_since.retain(|uid, _| seen.contains(uid));
        ops
    }

    /// Reads the log of every pod that has started ([`Readers`]).
    fn follow_logs(&mut self, apis: &Apis, shared: &SharedRef, objs: &objects::Objects) {
        let group_dir = crate::paths::group_dir(&self.ctx.state_dir, self.out.gid);
        let started = objs
            .pods
            .values()
            .filter(|pod| objects::started(pod))
            .filter_map(|pod| {
                let uid = pod.metadata.uid.clone()?;
                let (task, rank) = objects::node_of(&pod.metadata)?;
                Some(Started {
                    node: NodeLog {
                        group_dir: group_dir.clone(),
                        task: task.to_owned(),
                        rank,
                        attempt: objects::pod_attempt(pod).unwrap_or(0),
                        pod: pod.metadata.name.clone().unwrap_or_default(),
                        uid,
                    },
                    ended: objects::pod_terminal(pod),
                    deleting: objects::deleting(&pod.metadata),
                })
            })
            .collect();
        self.logs.see(&apis.pods, shared, started);
    }
}

/// A pass over one group, as the [`reconciler`] runs it: the watchers'
/// cache is the world, and requests go out one at a time in the
/// reconciler's order (pod deletions some at once).
struct Pass<'a> {
    group: &'a mut Group,
    apis: &'a Apis,
    shared: &'a SharedRef,
}

impl Reconciler for Pass<'_> {
    type World = objects::Objects;
    type Op = Op;

    fn told(&mut self) -> &mut Told {
        &mut self.group.told
    }

    async fn see(&mut self) -> Sight<objects::Objects> {
        let g = &mut *self.group;
        // A fill that ended is answered as any request is.
        if g.filling.as_ref().is_some_and(|(_, t)| t.is_finished())
            && let Some((op, task)) = g.filling.take()
        {
            let outcome = task
                .await
                .unwrap_or_else(|e| Outcome::Retry(format!("the fill stopped: {e}")));
            g.answered(self.shared, op, outcome);
        }
        let (mut objs, outage, listed) = {
            let s = lock(self.shared);
            let listed = [Kind::JobSet, Kind::Job, Kind::Pod]
                .iter()
                .all(|k| s.listed.contains(k));
            (s.objs.clone(), s.outage.clone(), listed)
        };
        let mut reports = std::mem::take(&mut g.answers);
        // Workloads are not waited for: they only say why.
        if !listed {
            return Sight {
                world: None,
                outage,
                reports,
            };
        }
        // Only this run's pods: an earlier run's of the same names may
        // still be going away.
        objs.pods
            .retain(|_, p| objects::run_of(&p.metadata) == Some(g.plan.token.as_str()));
        // The JobSet gone, or failed, while the group runs: nothing will
        // run its tasks again, so the group ends as cancelled, before its
        // nodes are read as lost (which would restart them).
        if g.goal.end.is_none() && !g.goal.cancel && !g.told.has_told(&Event::CancelRequested) {
            let outside = match &objs.jobset {
                None => Some("was deleted"),
                Some(js) if js.terminal_state() == Some("Failed") => Some("failed"),
                Some(_) => None,
            };
            if let Some(what) = outside {
                reports.push(Report::Error(format!(
                    "the JobSet {} {what} outside skyc",
                    g.plan.group
                )));
                reports.push(Report::Event {
                    event: Event::CancelRequested,
                    at_ms: None,
                });
            }
        }
        Sight {
            world: Some(objs),
            outage,
            reports,
        }
    }

    fn observe(&mut self, objs: &objects::Objects) -> Vec<Report> {
        observe(&self.group.plan, objs, &self.group.goal)
    }

    fn reconcile(&mut self, objs: &objects::Objects) -> Vec<Op> {
        let g = &mut *self.group;
        let mut ops = reconcile::reconcile(&g.plan, objs, &g.goal);
        ops.extend(g.overdue(objs));
        ops.extend(reconcile::remove_worker(
            &g.plan,
            objs,
            &g.goal,
            g.logs_read(),
        ));
        for (task, attempt) in std::mem::take(&mut g.kills) {
            ops.extend(reconcile::kill(&g.plan, objs, task, attempt));
        }
        ops.into_iter()
            .filter(|op| !g.held.contains_key(op))
            // A fill runs: not asked again meanwhile.
            .filter(|op| !(g.filling.is_some() && matches!(op, Op::FillFiles { .. })))
            .collect()
    }

    async fn apply(&mut self, objs: &objects::Objects, ops: Vec<Op>) -> Applied {
        let (g, apis, shared) = (&mut *self.group, self.apis, self.shared);
        let acted = !ops.is_empty();
        // Pod deletions go out some at once (a large task's restart
        // deletes every node's pod); the rest in the reconciler's order.
        let (deletes, rest): (Vec<Op>, Vec<Op>) = ops
            .into_iter()
            .partition(|op| matches!(op, Op::DeletePod { .. } | Op::KillPod { .. }));
        let backoff = g.backoff();
        let plan = &g.plan;
        let done: Vec<(Op, Outcome)> = futures::stream::iter(deletes)
            .map(|op| async move {
                let outcome = request::execute(plan, apis, shared, &op, backoff).await;
                (op, outcome)
            })
            .buffer_unordered(DELETE_CONCURRENCY)
            .collect()
            .await;
        for (op, outcome) in done {
            g.answered(shared, op, outcome);
        }
        for op in rest {
            if let Op::FillFiles { pod, uid } = &op {
                g.fill(apis, shared, op.clone(), pod.clone(), uid.clone());
                continue;
            }
            let outcome = request::execute(&g.plan, apis, shared, &op, backoff).await;
            g.answered(shared, op, outcome);
        }
        if g.ctx.tuning.logs {
            g.follow_logs(apis, shared, objs);
        }
        if g.goal.end.is_some() {
            g.finished_at.get_or_insert_with(Instant::now);
        }
        if reconcile::ended(&g.plan, objs, &g.goal) {
            // The last lines of pods that just ended are read first, so
            // `skyc logs` has all of a finished group's output.
            g.cluster_settled_at.get_or_insert_with(Instant::now);
        }
        Applied {
            reports: std::mem::take(&mut g.answers),
            outage: None,
            acted,
        }
    }

    /// Settled once nothing more will happen on the cluster and its logs
    /// are read, or once the limit has passed.
    fn settled(&mut self, objs: &objects::Objects, _asked: bool) -> Settled {
        let g = &*self.group;
        let settled = reconcile::settled(&g.plan, objs, &g.goal);
        if settled && g.logs_read() {
            Settled::Yes
        } else if !settled
            && g.finished_at
                .is_some_and(|at| at.elapsed() >= g.ctx.tuning.settle_limit)
        {
            // The JobSet controller did not finish it, or a worker's
            // JobSet is not deleted (the controller or the garbage
            // collector down, someone else's finalizer): the group's end
            // is the engine's all the same.
            let what = if g.plan.hold {
                "was not deleted"
            } else {
                "did not reach its end"
            };
            Settled::GaveUp(format!(
                "the JobSet {} {what} within {} s of the group's end; it is left as it is",
                g.plan.group,
                g.ctx.tuning.settle_limit.as_secs()
            ))
        } else {
            Settled::No
        }
    }
}
