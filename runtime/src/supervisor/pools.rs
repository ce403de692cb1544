//! The supervisor's side of pools: one pool engine ([`Pool`]) per pool,
//! fed what the pool's workers and jobs (groups of their own, with their
//! own engines) do, and carried out through the pool's backend.
//!
//! - A worker is a group of kind `worker` made from the pool's worker
//!   plan: its engine runs setup and then holds the nodes. Its backend's
//!   [`Report::Ready`](crate::backend::Report::Ready) makes it ready; its
//!   engine's RECOVERING (a node lost) or end tells the pool it is lost or
//!   failed; its row closing tells it is gone.
//! - A job is a group of the pool (its `pool` column). What its engine
//!   wants (an attempt with nodes owed) is given to the pool engine,
//!   level-triggered, after every round; a place the pool decides is given
//!   to the backend ([`Backend::place`](crate::backend::Backend::place)).
//!
//! Crash model: the pool engine is committed with every decision, and a
//! new worker's row in the same transaction; after a crash the pool, its
//! workers and jobs are adopted again from the store, every placement is
//! given again (the backend leaves a started attempt as it is), and
//! workers decided but not recorded are recorded then.

use super::{Supervisor, db, json, log};
use crate::pool::{self, JobWant, Pool, PoolPlan, WorkerEvent, WorkerId};
use crate::store::{self, Kind, Member, NewGroup, NewTask, now_ms};
use std::collections::{BTreeMap, VecDeque};
use std::io;

pub(super) struct PoolRun {
    pub(super) kind: store::Backend,
    name: String,
    source: String,
    pub(super) pool: Pool,
    pub(super) timers: Vec<(pool::Timer, i64)>,
    pub(super) inbox: VecDeque<pool::Event>,
    /// Worker numbers to their groups.
    workers: BTreeMap<WorkerId, i64>,
    /// The plan each new worker is made from (the backend's, as JSON).
    worker_plan: String,
    /// What the jobs wanted when last told; none yet after an adoption, so
    /// the first round tells the engine (a job may have ended unheard).
    wants: Option<Vec<JobWant>>,
}

/// A client's request to a live pool (the `request` column).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// `skyc pool apply FILE`: the pool's new plan.
    Apply(serde_json::Value),
    /// `skyc pool apply --workers N`.
    Workers(u32),
}

/// What a group is to a pool.
#[derive(Clone, Debug)]
pub(super) enum Membership {
    Job {
        pool: i64,
        spec: pool::JobSpec,
    },
    Worker {
        pool: i64,
        id: WorkerId,
        /// What the pool was last told of it.
        told: Option<WorkerEvent>,
    },
}

impl Supervisor {
    /// Takes charge of a pool: a new one asks for its first workers; one a
    /// previous supervisor ran resumes as last committed.
    pub(super) fn adopt_pool(&mut self, gid: i64, row: &store::GroupRow) -> Result<(), String> {
        let backend = self.backend(row.backend).map_err(|e| e.to_string())?;
        if !backend.runs_pools() {
            return Err(format!(
                "pools do not run on the {} target yet",
                row.backend.as_str()
            ));
        }
        let plan_text = self.store.plan(gid).map_err(|e| e.to_string())?;
        let plan: PoolPlan =
            serde_json::from_str(&plan_text).map_err(|e| format!("the pool's plan: {e}"))?;
        let state = self.store.runtime_state(gid).map_err(|e| e.to_string())?;
        let fresh = state.engine.is_none();
        let engine = match state.engine.as_deref().map(serde_json::from_str) {
            Some(Ok(engine)) => engine,
            Some(Err(e)) => return Err(format!("the pool's engine: {e}")),
            None => Pool::new(plan.pool),
        };
        let timers = self.stored_timers(gid)?;
        let rows = self
            .store
            .members(gid, Kind::Worker, true)
            .map_err(|e| e.to_string())?;
        let mut workers = BTreeMap::new();
        let mut inbox = VecDeque::new();
        for w in &rows {
            let Some(id) = w.rank.and_then(|r| WorkerId::try_from(r).ok()) else {
                continue;
            };
            if w.finished_at_ms.is_some() {
                // Closed while no supervisor told the pool.
                if engine.workers().contains_key(&id) {
                    inbox.push_back(pool::Event::Worker(id, WorkerEvent::Gone));
                }
            } else {
                workers.insert(id, w.id);
            }
        }
        self.pools.insert(
            gid,
            PoolRun {
                kind: row.backend,
                name: row.name.clone(),
                source: row.source.clone(),
                pool: engine,
                timers,
                inbox,
                workers,
                worker_plan: plan.worker.to_string(),
                wants: None,
            },
        );
        if fresh {
            let actions = self
                .pools
                .get_mut(&gid)
                .map(|p| p.pool.start())
                .unwrap_or_default();
            self.carry_out(gid, None, &actions, None)
                .map_err(|e| e.to_string())?;
        } else {
            log(format_args!("pool {gid}: re-adopting"));
            // Workers decided but never recorded are recorded now.
            let missing: Vec<pool::Action> = self.pools[&gid]
                .pool
                .workers()
                .keys()
                .filter(|id| !rows.iter().any(|w| w.rank == Some(i64::from(**id))))
                .map(|&worker| pool::Action::Launch { worker })
                .collect();
            self.carry_out(gid, None, &missing, None)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Gives every placement of the pools' engines to their backends again:
    /// after an adoption, a placement decided but maybe not carried out.
    /// Workers' states are read again first: a worker lost while no
    /// supervisor told its pool is not given a job.
    pub(super) fn place_again(&mut self) -> io::Result<()> {
        let workers: Vec<i64> = self
            .groups
            .iter()
            .filter(|(_, g)| matches!(g.member, Some(Membership::Worker { .. })))
            .map(|(&gid, _)| gid)
            .collect();
        for gid in workers {
            self.worker_engine_changed(gid);
        }
        let mut places = Vec::new();
        for p in self.pools.values() {
            for job in p.pool.placed_jobs() {
                if let Some((attempt, worker, placement)) = p.pool.placed(job)
                    && let Some(&wgid) = p.workers.get(&worker)
                {
                    places.push((p.kind, job, attempt, wgid, placement.clone()));
                }
            }
        }
        for (kind, job, attempt, wgid, placement) in places {
            if self.groups.contains_key(&job) {
                self.backend(kind)?.place(job, attempt, wgid, &placement);
            }
        }
        Ok(())
    }

    /// Jobs whose pool is down (or was taken down as they were
    /// submitted): nothing would ever place them, so they are cancelled,
    /// saying why.
    pub(super) fn orphans(&mut self) -> io::Result<()> {
        let orphaned: Vec<(i64, i64)> = self
            .groups
            .iter()
            .filter_map(|(&gid, g)| match &g.member {
                Some(Membership::Job { pool, .. }) if !self.pools.contains_key(pool) => {
                    Some((gid, *pool))
                }
                _ => None,
            })
            .collect();
        for (gid, pool) in orphaned {
            // A pool this supervisor could not take charge of yet is tried
            // again; only one that has ended leaves its jobs behind.
            let row = self.store.group(pool).map_err(db)?;
            if row.as_ref().is_some_and(|p| p.finished_at_ms.is_none()) {
                continue;
            }
            let name = row.map_or_else(|| pool.to_string(), |p| p.name);
            self.store
                .transaction(|tx| tx.set_error(gid, &format!("pool `{name}` is down")))
                .map_err(db)?;
            self.store.request_cancel(gid).map_err(db)?;
            self.pass_cancel(gid)?;
        }
        Ok(())
    }

    /// A pool's client requests: `apply`, `--workers`, and `down` (its
    /// cancel), each handled once.
    pub(super) fn pool_requests(&mut self, gid: i64) -> io::Result<()> {
        if !self.pools.contains_key(&gid) {
            return Ok(());
        }
        let state = self.store.runtime_state(gid).map_err(db)?;
        if state.cancel_requested && !state.cancel_seen {
            // Its jobs are cancelled with it; workers go as they empty.
            for job in self.store.members(gid, Kind::Group, false).map_err(db)? {
                self.store.request_cancel(job.id).map_err(db)?;
            }
            self.pool_event(gid, pool::Event::Down, None, None, true)?;
        }
        let Some(text) = self.store.pending_request(gid).map_err(db)? else {
            return Ok(());
        };
        match serde_json::from_str::<Request>(&text) {
            Ok(Request::Apply(plan)) => {
                let spec = serde_json::from_value::<PoolPlan>(plan.clone());
                match spec {
                    Ok(new) => {
                        if let Some(p) = self.pools.get_mut(&gid) {
                            p.worker_plan = new.worker.to_string();
                        }
                        let plan = plan.to_string();
                        self.pool_event(
                            gid,
                            pool::Event::Apply(new.pool),
                            Some(&text),
                            Some(&plan),
                            false,
                        )?;
                    }
                    Err(e) => {
                        log(format_args!("pool {gid}: an unreadable update: {e}"));
                        self.store
                            .transaction(|tx| tx.take_request(gid, &text))
                            .map_err(db)?;
                    }
                }
            }
            Ok(Request::Workers(n)) => {
                self.pool_event(gid, pool::Event::Resize(n), Some(&text), None, false)?;
            }
            Err(e) => {
                log(format_args!("pool {gid}: an unreadable request: {e}"));
                self.store
                    .transaction(|tx| tx.take_request(gid, &text))
                    .map_err(db)?;
            }
        }
        Ok(())
    }

    /// Hands one client event to a pool's engine, recording with its answer
    /// that the request (or the cancel) was taken.
    fn pool_event(
        &mut self,
        gid: i64,
        event: pool::Event,
        request: Option<&str>,
        new_plan: Option<&str>,
        cancel_seen: bool,
    ) -> io::Result<()> {
        let Some(p) = self.pools.get_mut(&gid) else {
            return Ok(());
        };
        let actions = p.pool.handle(event.clone());
        let taken = Taken {
            request: request.filter(|_| !cancel_seen),
            cancel: cancel_seen,
            plan: new_plan,
        };
        self.carry_out(gid, Some(&event), &actions, Some(taken))
    }

    /// What a worker's group did, for its pool: ready, lost, failed, gone.
    pub(super) fn tell_pool(&mut self, gid: i64, event: WorkerEvent) {
        let Some(g) = self.groups.get_mut(&gid) else {
            return;
        };
        let Some(Membership::Worker { pool, id, told }) = &mut g.member else {
            return;
        };
        if *told == Some(event) && event != WorkerEvent::Ready {
            return;
        }
        *told = Some(event);
        let (pool, id) = (*pool, *id);
        if let Some(p) = self.pools.get_mut(&pool) {
            p.inbox.push_back(pool::Event::Worker(id, event));
        }
    }

    /// Reads a worker's engine after an event: a lost node (RECOVERING) or
    /// an end that was not asked for is the pool's to hear.
    pub(super) fn worker_engine_changed(&mut self, gid: i64) {
        let Some(g) = self.groups.get(&gid) else {
            return;
        };
        let (Some(engine), Some(Membership::Worker { .. })) = (&g.engine, &g.member) else {
            return;
        };
        use crate::policy::Status;
        let event = match engine.task_status(0) {
            Status::Recovering => Some(WorkerEvent::Lost),
            Status::FailedSetup => Some(WorkerEvent::SetupFailed),
            // The hold ended by itself: the worker is lost for good, and
            // replaced once gone.
            Status::Failed | Status::Succeeded => Some(WorkerEvent::Lost),
            _ => None,
        };
        if let Some(event) = event {
            self.tell_pool(gid, event);
        }
    }

    /// Tells each pool what its jobs want now, if that changed, and hands
    /// the pools' events to their engines.
    pub(super) fn pump_pools(&mut self) -> io::Result<bool> {
        let mut wants: BTreeMap<i64, Vec<JobWant>> =
            self.pools.keys().map(|&p| (p, Vec::new())).collect();
        for (&gid, g) in &self.groups {
            let (Some(Membership::Job { pool, spec }), Some(engine)) = (&g.member, &g.engine)
            else {
                continue;
            };
            let nodes = engine.spec().tasks[0].num_nodes;
            let owed = (0..nodes).any(|n| engine.node_live(0, n));
            if let (true, Some(list)) = (owed, wants.get_mut(pool)) {
                list.push(JobWant {
                    job: gid,
                    attempt: engine.attempt(0),
                    nodes,
                    room: spec.room,
                    placeable: !engine.stopping(0) && !engine.is_cancelled(),
                });
            }
        }
        let mut busy = false;
        for (pid, list) in wants {
            let Some(p) = self.pools.get_mut(&pid) else {
                continue;
            };
            if p.wants.as_ref() != Some(&list) {
                p.wants = Some(list.clone());
                p.inbox.push_back(pool::Event::Jobs(list));
            }
            while let Some(event) = self.pools.get_mut(&pid).and_then(|p| p.inbox.pop_front()) {
                busy = true;
                let Some(p) = self.pools.get_mut(&pid) else {
                    break;
                };
                let actions = p.pool.handle(event.clone());
                self.carry_out(pid, Some(&event), &actions, None)?;
            }
            if self.pools.get(&pid).is_some_and(|p| p.pool.is_finished()) {
                self.store
                    .transaction(|tx| tx.finish_group(pid, now_ms()))
                    .map_err(db)?;
                if let Some(p) = self.pools.remove(&pid) {
                    log(format_args!("pool {pid} ({}): down", p.name));
                }
                // Its buckets may be used by no one now.
                self.buckets_due = true;
                // Jobs submitted while it went down have nowhere to run.
                self.orphans()?;
            }
        }
        Ok(busy)
    }

    /// Commits a pool engine's answer (and the workers it decided, and what
    /// the client asked that it took), then carries it out.
    fn carry_out(
        &mut self,
        gid: i64,
        event: Option<&pool::Event>,
        actions: &[pool::Action],
        taken: Option<Taken<'_>>,
    ) -> io::Result<()> {
        let failed = match self.pools.get(&gid) {
            Some(p) if actions.contains(&pool::Action::Status(pool::PoolStatus::Failed)) => {
                Some(self.failure_reason(gid, &p.pool)?)
            }
            _ => None,
        };
        let Some(p) = self.pools.get_mut(&gid) else {
            return Ok(());
        };
        let now = now_ms();
        for action in actions {
            if let pool::Action::SetTimer { timer, after } = action {
                p.timers.retain(|t| t.0 != *timer);
                p.timers.push((*timer, now + after.as_millis() as i64));
            }
        }
        let p = &*p;
        let launched: Vec<WorkerId> = actions
            .iter()
            .filter_map(|a| match a {
                pool::Action::Launch { worker } => Some(*worker),
                _ => None,
            })
            .collect();
        let worker_tasks: Vec<(String, bool, u32)> =
            serde_json::from_str::<WorkerTasks>(&p.worker_plan)
                .map(|w| {
                    w.spec
                        .tasks
                        .into_iter()
                        .map(|t| (t.name, t.primary, t.num_nodes))
                        .collect()
                })
                .unwrap_or_default();
        let made = self
            .store
            .transaction(|tx| {
                if let Some(event) = event
                    && !matches!(event, pool::Event::Jobs(_))
                {
                    tx.append_event(gid, now, &json(event))?;
                    if let pool::Event::TimerFired(timer) = event {
                        tx.delete_timer(gid, &json(timer))?;
                    }
                }
                for action in actions {
                    match action {
                        pool::Action::SetTimer { timer, .. } => {
                            let deadline = p.timers.iter().find(|t| t.0 == *timer).map(|t| t.1);
                            tx.set_timer(gid, &json(timer), deadline.unwrap_or(now))?;
                        }
                        pool::Action::Status(status) => {
                            tx.set_group_status(gid, status.as_str())?;
                            if let (pool::PoolStatus::Failed, Some(why)) = (status, &failed) {
                                tx.set_pool_error(gid, Some(why))?;
                            } else if *status == pool::PoolStatus::Starting {
                                tx.set_pool_error(gid, None)?;
                            }
                        }
                        _ => {}
                    }
                }
                if let Some(taken) = &taken {
                    if let Some(request) = taken.request {
                        tx.take_request(gid, request)?;
                    }
                    if taken.cancel {
                        tx.mark_cancel_seen(gid)?;
                    }
                    if let Some(plan) = taken.plan {
                        tx.set_plan(gid, plan)?;
                    }
                }
                let mut made = Vec::new();
                for &worker in &launched {
                    let name = format!("{}-{worker}", p.name);
                    let tasks = worker_tasks
                        .iter()
                        .map(|(name, primary, num_nodes)| NewTask {
                            name,
                            primary: *primary,
                            num_nodes: *num_nodes,
                        })
                        .collect();
                    let new = NewGroup {
                        name: &name,
                        source: &p.source,
                        submitted_at_ms: now,
                        plan: &p.worker_plan,
                        backend: p.kind,
                        snapshots: &crate::files::take::digests_in(&p.worker_plan),
                        buckets: &crate::files::take::buckets_in(&p.worker_plan),
                        tasks,
                    };
                    let member = Member {
                        pool: Some(gid),
                        rank: worker,
                        num_jobs: 0,
                    };
                    made.push((worker, tx.insert_worker(&new, member)?));
                }
                tx.save_runtime(gid, &json(&p.pool), None)?;
                Ok(made)
            })
            .map_err(db)?;
        if let Some(p) = self.pools.get_mut(&gid) {
            p.workers.extend(made.iter().copied());
        }
        for (worker, wgid) in made {
            if !self.groups.contains_key(&wgid)
                && let Err(e) = self.adopt(wgid)
            {
                log(format_args!("worker {wgid}: {e}"));
                self.not_adopted(wgid, &e)?;
                // A worker that cannot be made is a failed one: replaced,
                // and counted.
                if !self.groups.contains_key(&wgid)
                    && let Some(p) = self.pools.get_mut(&gid)
                {
                    p.workers.remove(&worker);
                    p.inbox
                        .push_back(pool::Event::Worker(worker, WorkerEvent::SetupFailed));
                    p.inbox
                        .push_back(pool::Event::Worker(worker, WorkerEvent::Gone));
                }
            }
        }
        for action in actions {
            match action {
                pool::Action::Retire { worker } => {
                    let Some(&wgid) = self.pools.get(&gid).and_then(|p| p.workers.get(worker))
                    else {
                        continue;
                    };
                    if self.groups.contains_key(&wgid) {
                        self.store.request_cancel(wgid).map_err(db)?;
                        self.pass_cancel(wgid)?;
                    } else if let Some(p) = self.pools.get_mut(&gid) {
                        // Closed already (a failed setup).
                        p.workers.remove(worker);
                        p.inbox
                            .push_back(pool::Event::Worker(*worker, WorkerEvent::Gone));
                    }
                }
                pool::Action::Place {
                    job,
                    attempt,
                    worker,
                    placement,
                } => {
                    let Some(p) = self.pools.get(&gid) else {
                        continue;
                    };
                    let (kind, wgid) = (p.kind, p.workers.get(worker).copied());
                    if let Some(wgid) = wgid {
                        self.backend(kind)?.place(*job, *attempt, wgid, placement);
                    }
                }
                pool::Action::Launch { .. }
                | pool::Action::SetTimer { .. }
                | pool::Action::Status(_) => {}
            }
        }
        Ok(())
    }

    /// Why a pool is FAILED, from its engine's last failure: what
    /// happened to the last worker, and where its log is.
    fn failure_reason(&self, gid: i64, engine: &Pool) -> io::Result<String> {
        use crate::pool::replace::Failure;
        let last = engine.last_failure();
        let what = match last.map(|l| l.failure) {
            Some(Failure::EndedBeforeReady) => "the last one ended by itself before it was ready",
            Some(Failure::SetupFailed) | None => "the last one's setup failed",
        };
        let worker = match last {
            Some(l) => self
                .store
                .members(gid, Kind::Worker, true)
                .map_err(db)?
                .into_iter()
                .find(|w| w.rank == Some(i64::from(l.worker))),
            None => None,
        };
        let log = worker
            .map(|w| format!("; its log: `skyc logs {}`", w.id))
            .unwrap_or_default();
        Ok(format!(
            "{} workers in a row failed before they were ready ({what}{log}); apply the pool \
             again to try anew",
            pool::SETUP_FAILURES
        ))
    }

    /// A worker's group closed: its pool hears it is gone.
    pub(super) fn worker_closed(&mut self, member: Option<&Membership>) {
        if let Some(Membership::Worker { pool, id, .. }) = member
            && let Some(p) = self.pools.get_mut(pool)
        {
            p.workers.remove(id);
            p.inbox
                .push_back(pool::Event::Worker(*id, WorkerEvent::Gone));
        }
    }
}

/// What a client asked that an engine answer takes.
struct Taken<'a> {
    /// The request taken, as read: one written since stays for the next
    /// turn.
    request: Option<&'a str>,
    cancel: bool,
    plan: Option<&'a str>,
}

/// The tasks of a worker's plan, for its row.
#[derive(serde::Deserialize)]
struct WorkerTasks {
    spec: crate::policy::GroupSpec,
}
