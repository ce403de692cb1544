//! The supervisor: one process per state directory. It runs the
//! directory's groups on their backends (each listed once in
//! [`registry::BACKENDS`]); clients (`skyc run`, `status`, `cancel`) only
//! write to the store and wake it.
//!
//! It owns the store, one policy [`Engine`] per group and the engines'
//! timers, and talks to every backend through the one [`Backend`]
//! interface: backends report what happened ([`Report`]), the engine
//! decides, and the decision is committed (engine state, statuses, timers
//! and the actions still to carry out) before the backend is asked to
//! carry it out. A supervisor killed at any point is therefore replaced by
//! one that adopts every live group again from the store, lets each
//! backend re-read its world (live agents, the Slurm job, the cluster's
//! objects) and carries out what was decided but maybe not done.
//!
//! One `poll(2)` loop: client wake-ups on a Unix socket, each backend's
//! [`Backend::wake_fd`], and the nearest timer or backend poll.
//!
//! Pools (`pools`): each live pool's engine decides its workers and where
//! its jobs run; workers and jobs are groups like any other, a job's
//! start held until the pool places it ([`Backend::place`]) on a backend
//! that runs pools ([`Backend::runs_pools`]).

mod pools;

use crate::backend::{Adoption, Backend, NodeInfo, Policy, Report, Role};
use crate::k8s::{Connect, Tuning, kubeconfig};
use crate::paths;
use crate::policy::{Action, Engine, Event, GroupSpec, Status, Timer};
use crate::registry::{self, Setup};
use crate::store::{self, Kind, NodeRow, Store, now_ms};
pub use pools::Request as PoolRequest;
use pools::{Membership, PoolRun};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a supervisor with nothing to run waits before it exits.
const IDLE_EXIT: Duration = Duration::from_secs(2);

/// Between two tries at taking charge of a started group that failed
/// (clients' requests try at once too).
const ADOPT_RETRY: Duration = Duration::from_secs(30);

/// How many rounds of reports and decisions one turn carries on for while
/// backends have more to say (each round's actions may cause reports).
const ROUNDS: usize = 1_000;

pub struct Supervisor {
    store: Store,
    /// The state directory's snapshots of code and data.
    snapshots: crate::files::Snapshots,
    listener: UnixListener,
    backends: Backends,
    groups: BTreeMap<i64, GroupRun>,
    pools: BTreeMap<i64, PoolRun>,
    /// Groups already started on their backend that this supervisor could
    /// not take charge of, and when it tries again ([`ADOPT_RETRY`]).
    unadopted: BTreeMap<i64, i64>,
    /// The deletion of buckets not kept ([`crate::storage::owned`]),
    /// which runs beside the loop (a store may be slow), and whether another
    /// is due since it started.
    bucket_deletion: Option<std::thread::JoinHandle<bool>>,
    buckets_due: bool,
    /// When a deletion that failed is tried again, while this supervisor
    /// runs for other reasons (the next one tries at its start).
    buckets_retry_at: Option<i64>,
    /// A controller's replica ([`crate::controller`]): it supervises while
    /// this says it leads, idle or not. `None`: the supervisor a client
    /// started, which ends once it has had nothing to do for a while.
    lead: Option<Lead>,
}

/// Whether a controller's replica leads now.
pub type Lead = Box<dyn Fn() -> bool + Send>;

/// Between two tries at deleting a bucket its store would not delete.
const BUCKET_RETRY: Duration = Duration::from_secs(60);

/// The backends of [`registry::BACKENDS`], each started with its first
/// group.
struct Backends {
    dir: PathBuf,
    setup: Setup,
    /// At each backend's place in the registry.
    started: Vec<Option<Box<dyn Backend>>>,
}

impl Backends {
    fn new(dir: &Path, setup: Setup) -> Self {
        Self {
            dir: dir.to_owned(),
            setup,
            started: registry::BACKENDS.iter().map(|_| None).collect(),
        }
    }

    /// The backend of a kind, started if it is the first of its groups.
    fn get(&mut self, kind: store::Backend) -> io::Result<&mut dyn Backend> {
        let slot = &mut self.started[kind.index()];
        if slot.is_none() {
            let d = kind.descriptor();
            let backend = (d.start)(&self.dir, &self.setup)
                .map_err(|e| io::Error::other(format!("the {} backend: {e}", d.title)))?;
            *slot = Some(backend);
        }
        Ok(slot.as_deref_mut().expect("started above"))
    }

    /// Every backend started so far.
    fn all(&mut self) -> Vec<&mut dyn Backend> {
        self.started
            .iter_mut()
            .filter_map(|b| Some(b.as_deref_mut()? as &mut dyn Backend))
            .collect()
    }
}

struct GroupRun {
    kind: store::Backend,
    name: String,
    /// `None` for a group whose policy runs where it runs
    /// ([`Policy::Followed`]).
    engine: Option<Engine>,
    timers: Vec<(Timer, i64)>,
    /// Events for the engine, with when they happened, if known.
    inbox: VecDeque<(Event, Option<i64>)>,
    /// The backend has nothing of the group left running.
    settled: bool,
    /// The last status recorded.
    status: String,
    /// A pool's job or worker.
    member: Option<Membership>,
}

/// Starts a supervisor for `dir` unless one runs; returns when it is
/// answered or failed.
pub fn main(dir: &Path) -> io::Result<()> {
    // Out of the caller's session: a Ctrl-C at the terminal of `skyc run`
    // is for the client, which turns it into a cancel.
    let _ = rustix::process::setsid();
    serve(dir, (kubeconfig(), Tuning::default()))
}

/// The supervisor of `dir`, whose Kubernetes groups reach their cluster
/// through `k8s` (the kubeconfig's, or a test's); returns once it has had
/// nothing to do for a while, or when another supervisor holds `dir`.
pub fn serve(dir: &Path, k8s: (Connect, Tuning)) -> io::Result<()> {
    serve_with(dir, k8s, None)
}

/// The supervisor of `dir` in a controller's replica: it runs while
/// `lead` holds, and returns as soon as it does not.
pub fn serve_leading(dir: &Path, k8s: (Connect, Tuning), lead: Lead) -> io::Result<()> {
    serve_with(dir, k8s, Some(lead))
}

fn serve_with(dir: &Path, k8s: (Connect, Tuning), lead: Option<Lead>) -> io::Result<()> {
    // Node agents run in other directories and are found again by the
    // paths they were given.
    let dir = &std::path::absolute(dir)?;
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("supervisor.lock"))?;
    // A supervisor that is exiting still holds the lock for a moment.
    let mut tries = 0;
    while rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        tries += 1;
        if tries > 100 {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    raise_fd_limit();
    paths::write_atomic(dir, "supervisor.pid", &std::process::id().to_string())?;
    let socket = dir.join("supervisor.sock");
    let _ = fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket)?;
    listener.set_nonblocking(true)?;
    let mut supervisor = Supervisor {
        store: Store::open(dir).map_err(io::Error::other)?,
        snapshots: crate::files::Snapshots::of(dir),
        listener,
        backends: Backends::new(
            dir,
            Setup {
                exe: std::env::current_exe()?,
                k8s,
            },
        ),
        groups: BTreeMap::new(),
        pools: BTreeMap::new(),
        unadopted: BTreeMap::new(),
        bucket_deletion: None,
        buckets_due: false,
        buckets_retry_at: None,
        lead,
    };
    let result = supervisor.run();
    // Clients that find no socket start a new supervisor; remove it before
    // the lock goes, so none is left waiting on a dead one.
    let _ = fs::remove_file(&socket);
    let _ = fs::remove_file(dir.join("supervisor.pid"));
    drop(lock);
    result
}

fn raise_fd_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

pub(crate) fn log(message: impl std::fmt::Display) {
    eprintln!("[{}] {message}", now_ms());
}

fn db(e: store::Error) -> io::Error {
    io::Error::other(e)
}

/// The engine's spec, which every backend's plan carries, and what a pool
/// job's plan says of it.
#[derive(serde::Deserialize)]
struct PlanSpec {
    spec: GroupSpec,
    #[serde(default)]
    pool_job: Option<crate::pool::JobSpec>,
}

impl Supervisor {
    fn run(&mut self) -> io::Result<()> {
        self.sweep();
        self.scan()?;
        let mut idle_since = None;
        let mut scanned = now_ms();
        loop {
            // A replica that no longer leads stops before its next action:
            // another may lead by now.
            if self.lead.as_ref().is_some_and(|lead| !lead()) {
                return Ok(());
            }
            self.turn()?;
            self.delete_buckets();
            if self.lead.is_some() {
                // What a command run in another replica's pod wrote to the
                // shared state (a group accepted, a cancel) reached no
                // socket of this one: the store is read again.
                if now_ms() - scanned >= LEADER_SCAN.as_millis() as i64 {
                    self.scan()?;
                    scanned = now_ms();
                }
                continue;
            }
            if self.idle() {
                let since = *idle_since.get_or_insert_with(now_ms);
                if now_ms() - since >= IDLE_EXIT.as_millis() as i64 {
                    // A group may have arrived since the last scan.
                    self.scan()?;
                    if self.idle() {
                        return Ok(());
                    }
                }
            } else {
                idle_since = None;
            }
        }
    }

    fn idle(&self) -> bool {
        self.groups.is_empty()
            && self.pools.is_empty()
            && self.unadopted.is_empty()
            && !self.buckets_due
            && self
                .bucket_deletion
                .as_ref()
                .is_none_or(|d| d.is_finished())
    }

    /// Starts deleting the buckets no live group keeps, when due and not
    /// under way: one deletion at a time, its record in the store, so a
    /// supervisor that dies meanwhile leaves it to the next.
    fn delete_buckets(&mut self) {
        if self
            .bucket_deletion
            .as_ref()
            .is_some_and(|d| !d.is_finished())
        {
            return;
        }
        if let Some(d) = self.bucket_deletion.take()
            && d.join().unwrap_or(true)
        {
            self.buckets_retry_at = Some(now_ms() + BUCKET_RETRY.as_millis() as i64);
        }
        if self.buckets_retry_at.is_some_and(|at| now_ms() >= at) {
            self.buckets_retry_at = None;
            self.buckets_due = true;
        }
        if !self.buckets_due {
            return;
        }
        self.buckets_due = false;
        let dir = self.backends.dir.clone();
        // Says whether one could not be deleted.
        self.bucket_deletion = Some(std::thread::spawn(
            move || match crate::storage::owned::collect(&dir) {
                Ok(tried) => {
                    let mut failed_any = false;
                    for (bucket, failed) in tried {
                        match failed {
                            None => {
                                log(format_args!("bucket {bucket}: deleted, no group keeps it"))
                            }
                            Some(why) => {
                                failed_any = true;
                                log(format_args!("bucket {bucket}: cannot delete: {why}"));
                            }
                        }
                    }
                    failed_any
                }
                Err(e) => {
                    log(format_args!(
                        "cannot delete the buckets no group keeps: {e}"
                    ));
                    true
                }
            },
        ));
    }

    fn backend(&mut self, kind: store::Backend) -> io::Result<&mut dyn Backend> {
        self.backends.get(kind)
    }

    fn backends(&mut self) -> Vec<&mut dyn Backend> {
        self.backends.all()
    }

    /// One wait for something to happen, and its handling.
    fn turn(&mut self) -> io::Result<()> {
        let polls: Vec<i64> = self
            .backends()
            .iter()
            .filter_map(|b| b.next_wake_ms())
            .collect();
        let next = self
            .groups
            .values()
            .flat_map(|g| g.timers.iter().map(|t| t.1))
            .chain(
                self.pools
                    .values()
                    .flat_map(|p| p.timers.iter().map(|t| t.1)),
            )
            .chain(polls)
            .chain(self.unadopted.values().copied())
            .min();
        let wait_ms = match next {
            Some(deadline) => (deadline - now_ms()).clamp(0, IDLE_EXIT.as_millis() as i64),
            None => IDLE_EXIT.as_millis() as i64,
        };
        let timeout = Timespec {
            tv_sec: wait_ms / 1000,
            tv_nsec: (wait_ms % 1000) * 1_000_000,
        };
        let wake = {
            let mut fds = vec![PollFd::new(&self.listener, PollFlags::IN)];
            let sources = self.backends.all();
            for fd in sources.iter().filter_map(|b| b.wake_fd()) {
                fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
            }
            match poll(&mut fds, Some(&timeout)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            !fds[0].revents().is_empty()
        };
        let now = now_ms();
        for g in self.groups.values_mut() {
            let due: Vec<Timer> = g
                .timers
                .iter()
                .filter(|t| t.1 <= now)
                .map(|t| t.0)
                .collect();
            g.timers.retain(|t| t.1 > now);
            g.inbox
                .extend(due.into_iter().map(|t| (Event::TimerFired(t), None)));
        }
        for p in self.pools.values_mut() {
            let due: Vec<crate::pool::Timer> = p
                .timers
                .iter()
                .filter(|t| t.1 <= now)
                .map(|t| t.0)
                .collect();
            p.timers.retain(|t| t.1 > now);
            p.inbox
                .extend(due.into_iter().map(crate::pool::Event::TimerFired));
        }
        self.settle_all()?;
        if wake {
            self.answer_clients()?;
        } else if self.unadopted.values().any(|&at| at <= now) {
            self.scan()?;
        }
        Ok(())
    }

    /// Hands the backends' reports and the engines' decisions back and
    /// forth until neither has more.
    fn settle_all(&mut self) -> io::Result<()> {
        for _ in 0..ROUNDS {
            if self.settle_round()? {
                break;
            }
        }
        Ok(())
    }

    /// One round of reports and decisions; whether it was the last (no
    /// backend had anything to say, no engine anything to hear).
    fn settle_round(&mut self) -> io::Result<bool> {
        let now = now_ms();
        let mut reports = Vec::new();
        for backend in self.backends() {
            reports.extend(backend.drain(now));
        }
        let idle = reports.is_empty()
            && self.groups.values().all(|g| g.inbox.is_empty())
            && self.pools.values().all(|p| p.inbox.is_empty());
        self.apply(reports)?;
        let gids: Vec<i64> = self.groups.keys().copied().collect();
        for gid in gids {
            self.pump(gid)?;
        }
        let pools_busy = self.pump_pools()?;
        Ok(idle && !pools_busy)
    }

    /// Reads the wake-ups of clients, picks up what they wrote to the
    /// store, and answers each once it has taken it on: adopted, and one
    /// round of what that caused handled (a submission refused at once,
    /// Slurm's sbatch, is then recorded). What follows (a thousand jobs
    /// started and ended) is not waited for.
    fn answer_clients(&mut self) -> io::Result<()> {
        let mut clients = Vec::new();
        while let Ok((stream, _)) = self.listener.accept() {
            clients.push(stream);
        }
        self.take_on()?;
        self.settle_round()?;
        // A client may be waiting on a deletion (`storage ls` wakes this
        // supervisor for one that failed).
        if !clients.is_empty() {
            self.buckets_due = true;
        }
        for mut client in clients {
            let _ = client.set_nonblocking(false);
            let _ = client.set_read_timeout(Some(Duration::from_millis(200)));
            let mut line = String::new();
            let _ = BufReader::new(&client).read_line(&mut line);
            let _ = client.write_all(b"ok\n");
        }
        self.settle_all()
    }

    /// Takes charge of new groups and passes on cancel requests, and
    /// handles what that caused.
    fn scan(&mut self) -> io::Result<()> {
        self.take_on()?;
        self.settle_all()
    }

    /// Takes charge of new groups and passes on cancel requests. What it
    /// reads of the store does not grow with the groups it already has:
    /// their ids, and the cancels not yet seen.
    fn take_on(&mut self) -> io::Result<()> {
        let live = self.store.live_groups().map_err(db)?;
        let cancels: std::collections::BTreeSet<i64> = self
            .store
            .cancels_pending()
            .map_err(db)?
            .into_iter()
            .collect();
        self.unadopted
            .retain(|gid, _| live.binary_search(gid).is_ok());
        let mut adopted = false;
        for gid in live {
            if !self.groups.contains_key(&gid) && !self.pools.contains_key(&gid) {
                adopted = true;
                match self.adopt(gid) {
                    Ok(()) => {
                        if self.unadopted.remove(&gid).is_some() {
                            self.store
                                .transaction(|tx| tx.set_outage(gid, None))
                                .map_err(db)?;
                        }
                    }
                    Err(e) => {
                        log(format_args!("group {gid}: {e}"));
                        self.not_adopted(gid, &e)?;
                        continue;
                    }
                }
            }
            if self.pools.contains_key(&gid) {
                self.pool_requests(gid)?;
            } else if cancels.contains(&gid) {
                self.pass_cancel(gid)?;
            }
        }
        if adopted {
            self.place_again()?;
            self.orphans()?;
        }
        Ok(())
    }

    /// Passes a user's cancel request on to the group's engine, once.
    fn pass_cancel(&mut self, gid: i64) -> io::Result<()> {
        let state = self.store.runtime_state(gid).map_err(db)?;
        if !state.cancel_requested || state.cancel_seen {
            return Ok(());
        }
        let Some(g) = self.groups.get_mut(&gid) else {
            return Ok(());
        };
        let kind = g.kind;
        match g.engine.as_mut() {
            // The engine hears of it now, and that it was seen is
            // recorded with the engine's answer: a supervisor that
            // dies in between leaves the cancel to its successor.
            Some(engine) => {
                let actions = engine.handle(Event::CancelRequested);
                self.commit(gid, Some(&Event::CancelRequested), None, &actions, true)?;
                self.execute(gid, &actions)?;
            }
            None => self
                .store
                .transaction(|tx| tx.mark_cancel_seen(gid))
                .map_err(db)?,
        }
        self.backend(kind)?.cancel(gid);
        Ok(())
    }

    /// Takes charge of a group: a new one is started, one a previous
    /// supervisor ran is handed to its backend as last committed.
    fn adopt(&mut self, gid: i64) -> Result<(), String> {
        let row = self
            .store
            .group(gid)
            .map_err(|e| e.to_string())?
            .ok_or("the group vanished from the store")?;
        if row.kind == Kind::Pool {
            return self.adopt_pool(gid, &row);
        }
        let plan = self.store.plan(gid).map_err(|e| e.to_string())?;
        let state = self.store.runtime_state(gid).map_err(|e| e.to_string())?;
        let PlanSpec { spec, pool_job } = serde_json::from_str::<PlanSpec>(&plan)
            .map_err(|e| format!("the group's plan: {e}"))?;
        let role = Role::of(&row);
        let member = match (role, row.pool) {
            (Role::Worker, Some(pool)) => Some(Membership::Worker {
                pool,
                id: row.rank.and_then(|r| u32::try_from(r).ok()).unwrap_or(0),
                told: None,
            }),
            (Role::Job, Some(pool)) => Some(Membership::Job {
                pool,
                // What it takes of a worker is its plan's.
                spec: pool_job.ok_or("a pool job's plan without what it takes of a worker")?,
            }),
            _ => None,
        };
        let fresh = state.engine.is_none();
        let engine = match state.engine.as_deref().map(serde_json::from_str) {
            Some(Ok(engine)) => engine,
            Some(Err(e)) => return Err(format!("the group's engine: {e}")),
            None => Engine::new(spec),
        };
        let timers = self.stored_timers(gid)?;
        // An outage a previous supervisor saw is the backend's to report
        // again.
        if row.outage.is_some() && !self.unadopted.contains_key(&gid) {
            self.store
                .transaction(|tx| tx.set_outage(gid, None))
                .map_err(|e| e.to_string())?;
        }
        let store = &self.store;
        let backend = self.backends.get(row.backend).map_err(|e| e.to_string())?;
        // A pool's workers and jobs are the pool engine's to place and
        // replace: their policy runs here, whatever the backend's groups do.
        let policy = if member.is_some() {
            Policy::Supervised
        } else {
            backend.policy()
        };
        backend.adopt(
            gid,
            &Adoption {
                plan: &plan,
                role,
                name: &row.name,
                engine: &engine,
                fresh,
                job: row.job.as_deref(),
                kept: state.network.as_deref(),
                marker: state.pending.as_deref(),
                cancel_requested: state.cancel_requested,
                store,
            },
        )?;
        // What the adoption recorded (a new network) is kept before the
        // backend is asked anything else.
        let reports = backend.drain(now_ms());
        if !fresh {
            log(format_args!("group {gid}: re-adopting"));
        }
        self.groups.insert(
            gid,
            GroupRun {
                kind: row.backend,
                name: row.name,
                engine: (policy == Policy::Supervised).then_some(engine),
                timers,
                inbox: VecDeque::new(),
                settled: false,
                status: row.status,
                member,
            },
        );
        self.apply(reports).map_err(|e| e.to_string())?;
        if policy == Policy::Followed || !self.groups.contains_key(&gid) {
            return Ok(());
        }
        if fresh {
            let actions = self.engine_mut(gid).map(Engine::start).unwrap_or_default();
            self.commit(gid, None, None, &actions, false)
                .map_err(|e| e.to_string())?;
            self.execute(gid, &actions).map_err(|e| e.to_string())?;
        } else {
            // What was decided before the crash and may not have been
            // done; starts the backend finds out for itself.
            let redo: Vec<Action> = state
                .pending
                .as_deref()
                .and_then(|p| serde_json::from_str::<Vec<Action>>(p).ok())
                .unwrap_or_default()
                .into_iter()
                .filter(|a| matches!(a, Action::Terminate { .. } | Action::Kill { .. }))
                .collect();
            self.execute(gid, &redo).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// A group's or pool's timers as committed, each with its deadline; one
    /// this skyc cannot read is dropped.
    fn stored_timers<T: serde::de::DeserializeOwned>(
        &self,
        gid: i64,
    ) -> Result<Vec<(T, i64)>, String> {
        Ok(self
            .store
            .timers(gid)
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter_map(|(t, deadline)| Some((serde_json::from_str(&t).ok()?, deadline)))
            .collect())
    }

    fn engine_mut(&mut self, gid: i64) -> Option<&mut Engine> {
        self.groups.get_mut(&gid)?.engine.as_mut()
    }

    /// Records what backends reported, in one transaction; events go to
    /// the engines' inboxes.
    fn apply(&mut self, reports: Vec<(i64, Report)>) -> io::Result<()> {
        if reports.is_empty() {
            return Ok(());
        }
        let now = now_ms();
        let mut ended = Vec::new();
        let mut refused = Vec::new();
        let mut ready = Vec::new();
        let groups = &mut self.groups;
        self.store
            .transaction(|tx| {
                for (gid, report) in &reports {
                    let gid = *gid;
                    let Some(g) = groups.get_mut(&gid) else {
                        continue;
                    };
                    match report {
                        Report::Event { event, at_ms } => {
                            g.inbox.push_back((event.clone(), *at_ms));
                        }
                        Report::Node(info) => tx.upsert_node(gid, &node_row(info))?,
                        Report::Job(job) => tx.set_job(gid, job)?,
                        Report::Keep(kept) => tx.save_network(gid, kept)?,
                        Report::Marker(marker) => tx.set_pending(gid, marker.as_deref())?,
                        Report::Record { at_ms, entry } => tx.append_event(gid, *at_ms, entry)?,
                        Report::Statuses(s) => {
                            tx.set_group_status(gid, s.group.as_str())?;
                            for (task, (status, attempt, restarts)) in s.tasks.iter().enumerate() {
                                tx.set_task(gid, task, status.as_str(), *attempt, *restarts)?;
                            }
                            g.status = s.group.as_str().to_owned();
                        }
                        Report::Outage(outage) => tx.set_outage(gid, outage.as_deref())?,
                        Report::Error(e) => tx.set_error(gid, e)?,
                        Report::Waiting { task, why } => {
                            if tx.set_waiting(gid, *task, why.as_deref(), now)? {
                                // In the group's history, as it changes.
                                let entry = serde_json::json!({
                                    "waiting": {"task": task, "why": why},
                                });
                                tx.append_event(gid, now, &entry.to_string())?;
                            }
                        }
                        Report::Credentials { task, says } => {
                            if tx.set_credentials(gid, *task, says)? {
                                let entry = serde_json::json!({
                                    "credentials": {"task": task, "says": says},
                                });
                                tx.append_event(gid, now, &entry.to_string())?;
                            }
                        }
                        Report::Refused(e) => refused.push((gid, e.clone())),
                        Report::Unstarted(status) => {
                            tx.end_unstarted(gid, status.as_str(), now)?;
                            g.status = status.as_str().to_owned();
                            ended.push(gid);
                        }
                        Report::Settled => g.settled = true,
                        Report::Ready { task, attempt } => {
                            let current = g
                                .engine
                                .as_ref()
                                .is_some_and(|e| e.attempt(*task) == *attempt);
                            if current {
                                ready.push(gid);
                            }
                        }
                    }
                }
                Ok(())
            })
            .map_err(db)?;
        for gid in ready {
            self.tell_pool(gid, crate::pool::WorkerEvent::Ready);
        }
        for gid in ended {
            self.close(gid)?;
        }
        for (gid, reason) in refused {
            log(format_args!("group {gid}: {reason}"));
            self.fail_group(gid, &reason)?;
            self.close(gid)?;
        }
        Ok(())
    }

    /// Hands a group's waiting events to its engine, one at a time; closes
    /// the group once it has ended and its backend has settled.
    fn pump(&mut self, gid: i64) -> io::Result<()> {
        loop {
            let Some(g) = self.groups.get_mut(&gid) else {
                return Ok(());
            };
            let Some((event, at_ms)) = g.inbox.pop_front() else {
                break;
            };
            let Some(engine) = g.engine.as_mut() else {
                continue;
            };
            let actions = engine.handle(event.clone());
            self.commit(gid, Some(&event), at_ms, &actions, false)?;
            self.execute(gid, &actions)?;
            self.worker_engine_changed(gid);
        }
        let done = self.groups.get(&gid).is_some_and(|g| {
            g.settled && g.inbox.is_empty() && g.engine.as_ref().is_none_or(Engine::is_finished)
        });
        if done {
            self.finish(gid)?;
        }
        Ok(())
    }

    /// Records an event and the engine's answer, before any of it is
    /// carried out. Timers the answer sets count from when the event
    /// happened (`at_ms`), when the backend knows it.
    fn commit(
        &mut self,
        gid: i64,
        event: Option<&Event>,
        at_ms: Option<i64>,
        actions: &[Action],
        cancel_seen: bool,
    ) -> io::Result<()> {
        let Some(g) = self.groups.get_mut(&gid) else {
            return Ok(());
        };
        let now = now_ms();
        for action in actions {
            if let Action::SetTimer { timer, after } = action {
                // A delay counts from the end that caused it; the grace
                // before SIGKILL from the SIGTERM, sent now.
                let from = match timer {
                    Timer::AuxiliaryDelay(_) => at_ms.map_or(now, |at| at.min(now)),
                    Timer::Kill { .. } => now,
                };
                g.timers.retain(|t| t.0 != *timer);
                g.timers.push((*timer, from + after.as_millis() as i64));
            }
        }
        let g = &*g;
        let Some(engine) = &g.engine else {
            return Ok(());
        };
        self.store
            .transaction(|tx| {
                if cancel_seen {
                    tx.mark_cancel_seen(gid)?;
                }
                if let Some(event) = event {
                    tx.append_event(gid, now, &json(event))?;
                    if let Event::TimerFired(timer) = event {
                        tx.delete_timer(gid, &json(timer))?;
                    }
                }
                for action in actions {
                    match action {
                        Action::SetTimer { timer, .. } => {
                            let deadline = g.timers.iter().find(|t| t.0 == *timer).map(|t| t.1);
                            tx.set_timer(gid, &json(timer), deadline.unwrap_or(now))?;
                        }
                        Action::GroupStatus(status) => tx.set_group_status(gid, status.as_str())?,
                        _ => {}
                    }
                }
                for task in 0..engine.spec().tasks.len() {
                    tx.set_task(
                        gid,
                        task,
                        engine.task_status(task).as_str(),
                        engine.attempt(task),
                        engine.restarts(task),
                    )?;
                }
                let pending = actions
                    .iter()
                    .any(|a| matches!(a, Action::Terminate { .. } | Action::Kill { .. }))
                    .then(|| json(actions));
                tx.save_runtime(gid, &json(engine), pending.as_deref())
            })
            .map_err(db)
    }

    /// Gives the engine's committed decision to the group's backend.
    fn execute(&mut self, gid: i64, actions: &[Action]) -> io::Result<()> {
        let Some(g) = self.groups.get_mut(&gid) else {
            return Ok(());
        };
        let kind = g.kind;
        let Some(engine) = g.engine.take() else {
            return Ok(());
        };
        let result = self.backend(kind).map(|b| b.execute(gid, &engine, actions));
        if let Some(g) = self.groups.get_mut(&gid) {
            g.status = engine.group_status().as_str().to_owned();
            g.engine = Some(engine);
        }
        result
    }

    /// Records a group's end and lets its backend release what it held.
    fn finish(&mut self, gid: i64) -> io::Result<()> {
        self.store
            .transaction(|tx| tx.finish_group(gid, now_ms()))
            .map_err(db)?;
        if let Some(g) = self.groups.get(&gid) {
            log(format_args!("group {gid} ({}): {}", g.name, g.status));
        }
        self.close(gid)
    }

    /// Forgets a group that has ended: its backend releases it, then what
    /// the backend kept for it is dropped.
    fn close(&mut self, gid: i64) -> io::Result<()> {
        let Some(g) = self.groups.remove(&gid) else {
            return Ok(());
        };
        self.worker_closed(g.member.as_ref());
        self.backend(g.kind)?.release(gid);
        self.store
            .transaction(|tx| tx.clear_network(gid))
            .map_err(db)?;
        self.collect_files();
        Ok(())
    }

    /// Removes the snapshots no live group is given any more (also those
    /// of groups that ended while no supervisor ran), and the files
    /// helpers no live group's plan names (an earlier build's).
    fn collect_files(&mut self) {
        self.buckets_due = true;
        let live = || self.store.live_snapshots().map_err(|e| e.to_string());
        if let Err(e) = self.snapshots.collect(live) {
            log(format_args!("cannot remove unused snapshots: {e}"));
        }
        // Skipped while a submission writes: the next collection does it.
        let Ok(Some(_excluding)) = self.snapshots.try_excluding() else {
            return;
        };
        let named = |path: &std::path::Path| {
            let text = serde_json::to_string(&path.display().to_string()).unwrap_or_default();
            // Unsure is named: kept.
            self.store
                .live_groups_naming(text.trim_matches('"'))
                .map_or(true, |groups| !groups.is_empty())
        };
        if let Err(e) = crate::files::helper::collect(&self.backends.dir, named) {
            log(format_args!("cannot remove unused files helpers: {e}"));
        }
    }

    /// A group this supervisor could not take charge of. One that never
    /// started on its backend ends FAILED_SETUP with the reason; one that
    /// did (its nodes may be running, its instances costing) is never
    /// given up on: the reason is its outage, and it is tried again.
    fn not_adopted(&mut self, gid: i64, reason: &str) -> io::Result<()> {
        // A group the store cannot tell of is not started.
        let job = self.store.group(gid).ok().flatten().and_then(|g| g.job);
        let started = job.is_some()
            || self.store.runtime_state(gid).is_ok_and(|state| {
                state.engine.is_some() || state.network.is_some() || state.pending.is_some()
            });
        if !started {
            self.unadopted.remove(&gid);
            // What the backend took on before the failure is let go.
            self.close(gid)?;
            return self.fail_group(gid, reason);
        }
        // Forgotten, not released: what runs on the backend (its network,
        // its key) is the group's, for the next try.
        self.groups.remove(&gid);
        let outage = format!(
            "this supervisor cannot take charge of the group ({reason}); it tries again every \
             {} s, and a cancel waits until it has",
            ADOPT_RETRY.as_secs()
        );
        self.store
            .transaction(|tx| tx.set_outage(gid, Some(&outage)))
            .map_err(db)?;
        self.unadopted
            .insert(gid, now_ms() + ADOPT_RETRY.as_millis() as i64);
        Ok(())
    }

    /// Ends a group that cannot be started at all (its network, its plan,
    /// its cluster refused it): every task FAILED_SETUP.
    fn fail_group(&mut self, gid: i64, reason: &str) -> io::Result<()> {
        self.store
            .transaction(|tx| {
                tx.set_error(gid, reason)?;
                tx.end_unstarted(gid, Status::FailedSetup.as_str(), now_ms())
            })
            .map_err(db)
    }

    /// What backends kept for groups that ended while a supervisor died
    /// between the record and the release.
    fn sweep(&mut self) {
        let Ok(leftovers) = self.store.finished_with_network() else {
            return;
        };
        for (gid, kept) in leftovers {
            let kind = self
                .store
                .group(gid)
                .ok()
                .flatten()
                .map_or(store::Backend::Local, |g| g.backend);
            // A backend that cannot start sweeps at the next supervisor's.
            if let Ok(backend) = self.backend(kind) {
                backend.sweep(gid, &kept);
                let _ = self.store.transaction(|tx| tx.clear_network(gid));
            }
        }
        self.collect_files();
    }
}

fn node_row(info: &NodeInfo) -> NodeRow {
    NodeRow {
        task: info.task as i64,
        rank: i64::from(info.rank),
        hostname: info.hostname.clone(),
        ip: info.ip.clone(),
        pid: info.pid,
        attempt: i64::from(info.attempt),
        phase: info.phase.clone(),
        exit_code: info.exit_code.map(i64::from),
        handle: info.handle.clone(),
        machine: info.machine.clone(),
    }
}

/// How often a controller's leader reads the store for what other
/// replicas' pods wrote to it.
const LEADER_SCAN: Duration = Duration::from_secs(2);

/// Asks the supervisor of `dir` to pick up what the caller wrote to the
/// store; an error when none answers (none is started: a controller's
/// replica that does not lead must not supervise).
pub fn poke(dir: &Path) -> io::Result<()> {
    let mut stream = UnixStream::connect(dir.join("supervisor.sock"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(b"wake\n")?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line)?;
    if line.trim() == "ok" {
        Ok(())
    } else {
        Err(io::Error::other("the supervisor did not answer"))
    }
}

/// Whether [`wake`] may start a supervisor.
static STARTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// From now on [`wake`] starts no supervisor: in a controller's pod, where
/// only the replica that leads supervises (a command run there for a
/// client leaves what it wrote to the leader's next scan of the store).
pub fn never_start() {
    STARTS.store(false, std::sync::atomic::Ordering::SeqCst);
}

/// Asks the supervisor of `dir` to pick up what the caller wrote to the
/// store, starting one if none answers (unless [`never_start`]).
pub fn wake(dir: &Path) -> io::Result<()> {
    let ask = || poke(dir);
    if ask().is_ok() || !STARTS.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(());
    }
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("supervisor.log"))?;
    let mut child = Command::new(std::env::current_exe()?)
        .arg("__supervise")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    let mut last = None;
    for _ in 0..1000 {
        match ask() {
            Ok(()) => {
                // Reaped by a thread, so a long-running client leaves no
                // zombie when the supervisor exits first.
                std::thread::spawn(move || child.wait());
                return Ok(());
            }
            Err(e) => last = Some(e),
        }
        if let Ok(Some(status)) = child.try_wait() {
            if ask().is_ok() {
                return Ok(());
            }
            return Err(io::Error::other(format!(
                "the supervisor exited ({status}); see {}",
                dir.join("supervisor.log").display()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Err(last.unwrap_or_else(|| io::Error::other("the supervisor did not start")))
}

/// The engine's types as the store keeps them.
fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}
