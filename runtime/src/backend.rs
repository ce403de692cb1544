//! The supervisor's one interface to where groups run.
//!
//! The supervisor owns the store, one policy [`Engine`] per group and the
//! timers: it hands each [`Report::Event`] to the group's engine, commits
//! the engine's answer, then gives the actions to the group's backend. A
//! backend (local processes, Slurm, Kubernetes, each in its own module)
//! turns actions into its own operations and its observations into
//! reports, and never decides anything the engine decides.
//!
//! Backends answer through [`Backend::drain`]; the supervisor calls it
//! when [`Backend::wake_fd`] is readable or [`Backend::next_wake_ms`] has
//! passed, so it stays one `poll(2)` loop whatever the backend does
//! inside (a thread, an async runtime, child processes).
//!
//! Crash model: the supervisor may die at any point. A backend holds
//! nothing the store, its cluster or its files do not also hold: the
//! next supervisor adopts every live group again with the engine as last
//! committed, and the backend re-reads the world and reports again.
//! Reports may therefore repeat; the engine ignores an event it has
//! already applied (a node answered twice, a started task started
//! again), so nothing is counted twice.

use crate::policy::{Action, Engine, Event};
use std::os::fd::BorrowedFd;

/// What a backend tells the supervisor about one group.
#[derive(Clone, Debug, PartialEq)]
pub enum Report {
    /// For the group's engine. `at_ms` is when it happened as the cluster
    /// recorded it (a container's end), when known: timers the engine
    /// sets in answer count from then, so an event read late (the
    /// supervisor was down) loses no time and adds none.
    Event { event: Event, at_ms: Option<i64> },
    /// Where a node runs now, for `skyc status`.
    Node(NodeInfo),
    /// The backend's id of the group once it exists there (Slurm: the
    /// job id; Kubernetes: `namespace/name uid`), to record.
    Job(String),
    /// The backend cannot reach its cluster (`Some(why)`, shown by
    /// `skyc status`) or can again (`None`). Statuses stay as last known
    /// meanwhile.
    Outage(Option<String>),
    /// Something the user should see in `skyc status` (the group goes
    /// on): a request the cluster refused, the JobSet deleted outside
    /// skyc.
    Error(String),
    /// The group cannot run at all (refused before anything was created);
    /// it ends FAILED_SETUP with this message.
    Refused(String),
    /// Everything the group had on the backend is gone or in its final
    /// state: once its engine has finished, the group can be closed.
    Settled,
}

/// One node as the backend sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub task: usize,
    pub rank: u32,
    pub attempt: u32,
    /// The process, pod or step that runs it (Kubernetes: the pod name).
    pub handle: String,
    /// The machine it runs on (Kubernetes: `spec.nodeName`).
    pub machine: String,
    pub ip: String,
    pub exit_code: Option<i32>,
}

/// A place where groups run.
pub trait Backend {
    /// The plan a client stored for a group of this backend.
    type Plan;

    /// Takes charge of a group: a new one (its engine not yet started)
    /// or one a previous supervisor ran (`engine` as last committed).
    /// `job` is what a [`Report::Job`] recorded, if anything.
    fn adopt(&mut self, gid: i64, plan: Self::Plan, engine: &Engine, job: Option<String>);

    /// Carries out what the engine decided, after the supervisor has
    /// committed it. `engine` is the state after the decision: a backend
    /// that reconciles (Kubernetes) works from it; one that follows
    /// commands (local processes) from `actions`.
    fn execute(&mut self, gid: i64, engine: &Engine, actions: &[Action]);

    /// The user asked to cancel the group. The engine hears of it too
    /// (`CancelRequested`); this tells the backend to stop everything of
    /// the group even where the engine has nothing running.
    fn cancel(&mut self, gid: i64);

    /// Forgets a group the supervisor has closed.
    fn release(&mut self, gid: i64);

    /// What happened since the last call, per group, in order.
    fn drain(&mut self) -> Vec<(i64, Report)>;

    /// Readable when [`Backend::drain`] has something.
    fn wake_fd(&self) -> Option<BorrowedFd<'_>>;

    /// When to call [`Backend::drain`] even if nothing woke the
    /// supervisor (a poll interval), in Unix milliseconds.
    fn next_wake_ms(&self) -> Option<i64>;
}
