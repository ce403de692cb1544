//! The engine: a pool's workers and its jobs' places, one `handle` per
//! event, and one reconciliation after each.

use super::autoscale::Autoscaler;
use super::replace::{Failure, LastFailure, Replacement};
use super::room::{Free, Placement, Room};
use super::spec::{PoolSpec, Scaling};
use super::{JobId, WorkerId};
use crate::policy::Attempt;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// What a job's attempt wants of the pool, as its own engine says.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobWant {
    pub job: JobId,
    pub attempt: Attempt,
    pub nodes: u32,
    /// Per node; `None`: the job names no resources and takes a whole
    /// worker.
    pub room: Option<Room>,
    /// Whether it may be placed: false while the attempt is being stopped
    /// (it keeps the place it has, if any, until its nodes are down).
    pub placeable: bool,
}

/// What happened to a worker, as its backend reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkerEvent {
    /// Every node's setup ended well: jobs may run on it.
    Ready,
    /// A setup failed: the worker is of no use and is replaced.
    SetupFailed,
    /// A node was lost (its machine, its agent): the worker is being made
    /// again and takes no job until it is ready.
    Lost,
    /// Nothing of the worker is left.
    Gone,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Event {
    /// Every job attempt that holds or wants a place now (level-triggered:
    /// a job absent from the list has none).
    Jobs(Vec<JobWant>),
    Worker(WorkerId, WorkerEvent),
    /// `skyc pool apply` of a file: the pool's new spec.
    Apply(PoolSpec),
    /// `skyc pool apply --workers N`: a fixed size from now on.
    Resize(u32),
    TimerFired(Timer),
    /// `skyc pool down`: retire every worker once its jobs are gone.
    Down,
}

/// Timers the engine asks for; the supervisor fires them back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Timer {
    /// More jobs have waited than the threshold for the upscale delay.
    Upscale,
    /// Fewer workers have been needed for the downscale delay.
    Downscale,
    /// The pause before replacing a worker that ended unasked ran out
    /// ([`replace`](super::replace)).
    Replace,
    /// A worker has stayed ready long enough to forget earlier ends.
    Calm,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Action {
    /// Make a new worker of the current generation.
    Launch {
        worker: WorkerId,
    },
    /// Take a worker down (it runs no job).
    Retire {
        worker: WorkerId,
    },
    /// Run the job's attempt on the worker.
    Place {
        job: JobId,
        attempt: Attempt,
        worker: WorkerId,
        placement: Placement,
    },
    SetTimer {
        timer: Timer,
        after: Duration,
    },
    Status(PoolStatus),
}

/// A pool's status, as `skyc pool status` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PoolStatus {
    /// No worker is ready yet, and one is being made (SkyPilot's
    /// REPLICA_INIT).
    Starting,
    /// At least one worker is ready.
    Ready,
    /// No worker, and none wanted (an autoscaled pool at zero; SkyPilot's
    /// NO_REPLICA).
    NoWorker,
    /// [`SETUP_FAILURES`] workers in a row failed before they were ready
    /// (their setup failed, or they ended by themselves): no more workers
    /// are made until the pool is applied again.
    Failed,
    /// `pool down`: workers are taken down as their jobs end.
    ShuttingDown,
    /// Down, every worker gone.
    Terminated,
}

impl PoolStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PoolStatus::Starting => "REPLICA_INIT",
            PoolStatus::Ready => "READY",
            PoolStatus::NoWorker => "NO_REPLICA",
            PoolStatus::Failed => "FAILED",
            PoolStatus::ShuttingDown => "SHUTTING_DOWN",
            PoolStatus::Terminated => "TERMINATED",
        }
    }
}

/// A worker as the engine tracks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum WorkerState {
    /// Asked for: waiting for room, starting, or running its setup.
    Launching,
    Ready,
    /// Taken down, or to be once idle (an older generation, a smaller
    /// pool, `down`); no new job goes to it.
    Retiring,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Worker {
    pub generation: u32,
    pub state: WorkerState,
    /// Per node.
    free: Vec<Free>,
    /// The jobs placed on it.
    pub jobs: BTreeSet<JobId>,
    /// Whether [`Action::Retire`] was given.
    retired: bool,
    /// Whether it was ever ready. (A worker stored by an engine that did
    /// not record it is taken as once ready: it never counts toward a
    /// FAILED pool.)
    #[serde(default = "once_ready")]
    was_ready: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Job {
    want: JobWant,
    /// Its worker and GPUs, once placed. Kept until the attempt lets go,
    /// even if the worker is gone meanwhile: an attempt is placed once.
    placed: Option<(WorkerId, Placement)>,
}

/// The pool's state machine. Serialisable, so a supervisor can persist it
/// and resume after a crash.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pool {
    spec: PoolSpec,
    generation: u32,
    workers: BTreeMap<WorkerId, Worker>,
    next_worker: WorkerId,
    jobs: BTreeMap<JobId, Job>,
    autoscaler: Autoscaler,
    /// How workers that end unasked are replaced, and when no more are.
    #[serde(default)]
    replacement: Replacement,
    down: bool,
    status: PoolStatus,
}

impl Pool {
    pub fn new(spec: PoolSpec) -> Self {
        Self {
            autoscaler: Autoscaler::new(&spec.scaling),
            spec,
            generation: 0,
            workers: BTreeMap::new(),
            next_worker: 1,
            jobs: BTreeMap::new(),
            replacement: Replacement::default(),
            down: false,
            status: PoolStatus::Starting,
        }
    }

    pub fn spec(&self) -> &PoolSpec {
        &self.spec
    }

    pub fn generation(&self) -> u32 {
        self.generation
    }

    pub fn status(&self) -> PoolStatus {
        self.status
    }

    /// The workers the pool has asked for and not yet seen gone.
    pub fn workers(&self) -> &BTreeMap<WorkerId, Worker> {
        &self.workers
    }

    /// How many workers the pool wants now.
    pub fn target(&self) -> u32 {
        if self.down {
            0
        } else {
            self.autoscaler.target()
        }
    }

    /// Where a job's attempt was placed.
    pub fn placed(&self, job: JobId) -> Option<(Attempt, WorkerId, &Placement)> {
        let j = self.jobs.get(&job)?;
        j.placed.as_ref().map(|(w, p)| (j.want.attempt, *w, p))
    }

    /// Jobs whose attempt has a place.
    pub fn placed_jobs(&self) -> impl Iterator<Item = JobId> + '_ {
        self.jobs
            .values()
            .filter(|j| j.placed.is_some())
            .map(|j| j.want.job)
    }

    /// Jobs waiting for a place, in the order they are placed.
    pub fn waiting(&self) -> impl Iterator<Item = JobId> + '_ {
        self.jobs
            .values()
            .filter(|j| j.placed.is_none() && j.want.placeable)
            .map(|j| j.want.job)
    }

    /// The last worker that failed before it was ready, and how: where a
    /// FAILED pool's reason is.
    pub fn last_failure(&self) -> Option<LastFailure> {
        self.replacement.last_failure()
    }

    /// Whether new workers wait for a pause after a worker ended unasked.
    pub fn replacement_held(&self) -> bool {
        self.replacement.held()
    }

    /// Down, and every worker gone.
    pub fn is_finished(&self) -> bool {
        self.status == PoolStatus::Terminated
    }

    /// Asks for the first workers.
    pub fn start(&mut self) -> Vec<Action> {
        let mut out = Vec::new();
        self.reconcile(&mut out);
        if !out.iter().any(|a| matches!(a, Action::Status(_))) {
            out.push(Action::Status(self.status));
        }
        out
    }

    pub fn handle(&mut self, event: Event) -> Vec<Action> {
        let mut out = Vec::new();
        match event {
            Event::Jobs(wants) => self.sync_jobs(wants),
            Event::Worker(id, event) => self.on_worker(id, event, &mut out),
            Event::Apply(spec) => {
                if spec.worker_key != self.spec.worker_key {
                    self.generation += 1;
                    for w in self.workers.values_mut() {
                        w.state = WorkerState::Retiring;
                    }
                }
                // Applied again: failed setups are tried anew, at once.
                self.replacement.reset();
                self.autoscaler.rescale(&spec.scaling);
                self.spec = spec;
            }
            Event::Resize(n) => {
                self.spec.scaling = Scaling::Fixed { workers: n };
                self.autoscaler.rescale(&self.spec.scaling);
                self.replacement.reset();
            }
            Event::TimerFired(Timer::Replace) => self.replacement.resume(),
            Event::TimerFired(Timer::Calm) => {
                let workers = &self.workers;
                self.replacement.calm(|id| {
                    workers
                        .get(&id)
                        .is_some_and(|w| w.state == WorkerState::Ready)
                });
            }
            Event::TimerFired(timer) => self.autoscaler.fired(timer),
            Event::Down => self.down = true,
        }
        self.reconcile(&mut out);
        out
    }

    fn sync_jobs(&mut self, wants: Vec<JobWant>) {
        let wanted: BTreeMap<JobId, JobWant> = wants.into_iter().map(|w| (w.job, w)).collect();
        // Attempts that let go of their place give it back.
        let gone: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(id, j)| wanted.get(id).is_none_or(|w| w.attempt != j.want.attempt))
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            if let Some(job) = self.jobs.remove(&id) {
                self.unplace(&job);
            }
        }
        for (id, want) in wanted {
            match self.jobs.get_mut(&id) {
                Some(job) => job.want.placeable = want.placeable,
                None => {
                    self.jobs.insert(id, Job { want, placed: None });
                }
            }
        }
    }

    fn unplace(&mut self, job: &Job) {
        let Some((worker, placement)) = &job.placed else {
            return;
        };
        let Some(w) = self.workers.get_mut(worker) else {
            return;
        };
        w.jobs.remove(&job.want.job);
        if w.jobs.is_empty() {
            // Whole again, whatever sums of fractions left behind.
            let nodes = w.free.len();
            w.free = vec![Free::new(&self.spec.offer); nodes];
            return;
        }
        for (node, gpus) in placement.gpus.iter().enumerate() {
            if let Some(free) = w.free.get_mut(node) {
                match &job.want.room {
                    Some(room) => free.give(room, gpus),
                    None => *free = Free::new(&self.spec.offer),
                }
            }
        }
    }

    fn on_worker(&mut self, id: WorkerId, event: WorkerEvent, out: &mut Vec<Action>) {
        let current = self.generation;
        let Some(w) = self.workers.get_mut(&id) else {
            return;
        };
        match event {
            WorkerEvent::Ready => {
                if w.state == WorkerState::Launching {
                    w.state = WorkerState::Ready;
                    w.was_ready = true;
                    if w.generation == current {
                        self.replacement.ready(id, out);
                    }
                }
            }
            WorkerEvent::SetupFailed => {
                if w.generation == current && w.state != WorkerState::Retiring {
                    self.replacement.ended(id, Some(Failure::SetupFailed), out);
                }
                w.state = WorkerState::Retiring;
                if !w.retired {
                    w.retired = true;
                    out.push(Action::Retire { worker: id });
                }
            }
            WorkerEvent::Lost => {
                if w.state == WorkerState::Ready {
                    w.state = WorkerState::Launching;
                }
            }
            WorkerEvent::Gone => {
                let unasked = !w.retired
                    && !self.down
                    && w.generation == current
                    && w.state != WorkerState::Retiring;
                if unasked {
                    let never_ready = !w.was_ready && w.state != WorkerState::Ready;
                    let failure = never_ready.then_some(Failure::EndedBeforeReady);
                    self.replacement.ended(id, failure, out);
                }
                self.workers.remove(&id);
            }
        }
    }

    /// Brings the workers to the target, places what waits, and says the
    /// pool's status.
    fn reconcile(&mut self, out: &mut Vec<Action>) {
        if self.down {
            for w in self.workers.values_mut() {
                w.state = WorkerState::Retiring;
            }
        }
        let queue = self.waiting().count() as u32;
        if !self.down {
            self.autoscaler.observe(queue, out);
        }
        let target = if self.down {
            0
        } else {
            self.autoscaler.target()
        };
        let mut active = self.active_workers();
        let failed_out = self.replacement.failed_out();
        while active < target && !failed_out && !self.replacement.held() {
            let id = self.next_worker;
            self.next_worker += 1;
            self.workers.insert(
                id,
                Worker {
                    generation: self.generation,
                    state: WorkerState::Launching,
                    free: vec![Free::new(&self.spec.offer); self.spec.nodes as usize],
                    jobs: BTreeSet::new(),
                    retired: false,
                    was_ready: false,
                },
            );
            out.push(Action::Launch { worker: id });
            active += 1;
        }
        // Waiting jobs take ready workers before any is found idle.
        self.place(out);
        // Too many: the idle ones go, those still launching first, then
        // the newest.
        if active > target {
            let mut idle: Vec<(bool, WorkerId)> = self
                .workers
                .iter()
                .filter(|(_, w)| self.is_active(w) && w.jobs.is_empty())
                .map(|(id, w)| (w.state == WorkerState::Ready, *id))
                .collect();
            idle.sort_by_key(|&(ready, id)| (ready, std::cmp::Reverse(id)));
            for (_, id) in idle.into_iter().take((active - target) as usize) {
                if let Some(w) = self.workers.get_mut(&id) {
                    w.state = WorkerState::Retiring;
                }
            }
        }
        for (id, w) in &mut self.workers {
            if w.state == WorkerState::Retiring && w.jobs.is_empty() && !w.retired {
                w.retired = true;
                out.push(Action::Retire { worker: *id });
            }
        }
        let ready = self.workers.values().any(|w| w.state == WorkerState::Ready);
        let status = if self.down {
            if self.workers.is_empty() {
                PoolStatus::Terminated
            } else {
                PoolStatus::ShuttingDown
            }
        } else if ready {
            PoolStatus::Ready
        } else if failed_out {
            PoolStatus::Failed
        } else if target == 0 && self.workers.is_empty() {
            PoolStatus::NoWorker
        } else {
            PoolStatus::Starting
        };
        if status != self.status {
            self.status = status;
            out.push(Action::Status(status));
        }
    }

    /// Launching or ready, of the current generation.
    fn is_active(&self, w: &Worker) -> bool {
        w.generation == self.generation && w.state != WorkerState::Retiring
    }

    fn active_workers(&self) -> u32 {
        self.workers.values().filter(|w| self.is_active(w)).count() as u32
    }

    /// Waiting jobs in submission order, each on the ready worker that
    /// fits it and runs the most jobs (so whole workers stay free), lowest
    /// number first among equals.
    fn place(&mut self, out: &mut Vec<Action>) {
        let waiting: Vec<JobId> = self.waiting().collect();
        for id in waiting {
            let want = self.jobs[&id].want.clone();
            let mut best: Option<(usize, WorkerId)> = None;
            for (wid, w) in &self.workers {
                if w.state != WorkerState::Ready
                    || w.generation != self.generation
                    || (want.nodes as usize) > w.free.len()
                {
                    continue;
                }
                if want.room.is_none() && !w.jobs.is_empty() {
                    continue;
                }
                let mut trial = w.free.clone();
                if take(&mut trial, &want).is_some()
                    && best.is_none_or(|(load, _)| w.jobs.len() > load)
                {
                    best = Some((w.jobs.len(), *wid));
                }
            }
            let Some((_, wid)) = best else {
                continue;
            };
            let w = self.workers.get_mut(&wid).expect("chosen above");
            let Some(placement) = take(&mut w.free, &want) else {
                continue;
            };
            w.jobs.insert(id);
            if let Some(job) = self.jobs.get_mut(&id) {
                job.placed = Some((wid, placement.clone()));
            }
            out.push(Action::Place {
                job: id,
                attempt: want.attempt,
                worker: wid,
                placement,
            });
        }
    }
}

/// Takes a job's room on the first nodes of a worker, all or nothing.
fn take(free: &mut [Free], want: &JobWant) -> Option<Placement> {
    let mut gpus = Vec::with_capacity(want.nodes as usize);
    for node in free.iter_mut().take(want.nodes as usize) {
        let given = match &want.room {
            Some(room) => node.take(room),
            None => node.take_all(),
        };
        gpus.push(given?);
    }
    Some(Placement { gpus })
}

fn once_ready() -> bool {
    true
}
