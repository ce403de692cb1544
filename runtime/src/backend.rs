//! The supervisor's one interface to where groups run.
//!
//! The supervisor owns the store, one policy [`Engine`] per group and the
//! timers: it hands each [`Report::Event`] to the group's engine, commits
//! the engine's answer, then gives the actions to the group's backend. A
//! backend (local processes, Slurm, Kubernetes, AWS EC2, each in its own
//! module, its impl in the module's `backend.rs`)
//! turns actions into its own operations and its observations into
//! reports, and never decides anything the engine decides. A backend
//! that runs pools ([`Backend::runs_pools`]) also starts a job on the
//! worker the pool's engine chose ([`Backend::place`]).
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

use crate::policy::{Action, Attempt, Engine, Event, Status};
use crate::pool::Placement;
use crate::store::Store;
use std::os::fd::BorrowedFd;

/// The token a run carries on its cluster or cloud (Slurm's job comment,
/// Kubernetes' run annotation, the `skyc-run` tag and names on AWS), so
/// that a supervisor finds what it made: the submitting client's pid and
/// the time of submission. Letters, digits and `-`, at most 26.
pub fn run_token(submitted_ms: i64) -> String {
    format!("skyc-{}-{submitted_ms}", std::process::id())
}

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
    /// What the backend must find again after a crash (the local
    /// network's addresses and namespaces), handed back by
    /// [`Adoption::kept`]; committed before the backend is asked anything
    /// else.
    Keep(String),
    /// The marker of a step the backend is about to take that a crash
    /// could leave half done (Slurm: sbatch), handed back by
    /// [`Adoption::marker`]; `None` once the step is recorded. Committed
    /// before the next [`Backend::drain`], which takes the step.
    Marker(Option<String>),
    /// An entry for the group's event history (JSON), at `at_ms`.
    Record { at_ms: i64, entry: String },
    /// The statuses of a group whose policy runs where the group runs
    /// ([`Followed`]).
    Statuses(Statuses),
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
    /// The group ended before anything of it ran (cancelled before its
    /// submission): it and every task end with this status.
    Unstarted(Status),
    /// Why the task's nodes wait to start, in the backend's or the
    /// cluster's own words (the machine's capacity, Slurm's pending
    /// reason, the scheduler's message); `None` once they no longer wait.
    /// Said when it changes.
    Waiting { task: usize, why: Option<String> },
    /// What the task's nodes hold to reach its buckets (credentials the
    /// runtime delivers: narrowed to them, or what instead and why), for
    /// `skyc status`. Said when it changes.
    Credentials { task: usize, says: String },
    /// Every node of the task's attempt is past its setup. For a pool's
    /// worker: it is ready for jobs.
    Ready { task: usize, attempt: u32 },
    /// Everything the group had on the backend is gone or in its final
    /// state: once its engine has finished (a [`Followed`] group: at
    /// once), the group can be closed.
    Settled,
}

/// One node as the backend sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub task: usize,
    pub rank: u32,
    pub attempt: u32,
    /// `{task}-{rank}.{group}`.
    pub hostname: String,
    /// The node agent's pid while it runs (local).
    pub pid: Option<i64>,
    /// The pod that runs it (Kubernetes), the instance (a cloud).
    pub handle: String,
    /// The machine it runs on (Kubernetes: `spec.nodeName`).
    pub machine: String,
    pub ip: String,
    /// `setup` or `run` while one runs, or the phase that ended.
    pub phase: Option<String>,
    pub exit_code: Option<i32>,
}

/// The statuses of a group whose policy does not run in the supervisor.
#[derive(Clone, Debug, PartialEq)]
pub struct Statuses {
    pub group: Status,
    /// Per task: its status, attempt and restarts (all, on errors).
    pub tasks: Vec<(Status, u32, (u32, u32))>,
}

/// Where a group's policy runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// In the supervisor: its engine decides from the backend's
    /// [`Report::Event`]s, and the backend carries out the actions.
    Supervised,
    /// Where the group runs (Slurm: the batch script, so the group
    /// outlives the supervisor and its login node). The backend follows
    /// with the same engine and reports [`Report::Statuses`]; the
    /// supervisor keeps no engine or timers for the group.
    Followed,
}

/// What the supervisor hands a backend when it takes charge of a group.
pub struct Adoption<'a> {
    /// The plan the submitting client stored, as JSON.
    pub plan: &'a str,
    /// What the group is to the pools, as the store records it.
    pub role: Role,
    /// Its name in the store (a pool's worker: `{pool}-{n}`).
    pub name: &'a str,
    /// The engine as last committed; not started when the group is new.
    pub engine: &'a Engine,
    /// Whether the group is new (nothing of it exists yet).
    pub fresh: bool,
    /// What a [`Report::Job`] recorded.
    pub job: Option<&'a str>,
    /// What a [`Report::Keep`] recorded.
    pub kept: Option<&'a str>,
    /// What a [`Report::Marker`] left set.
    pub marker: Option<&'a str>,
    /// Whether the user asked to cancel the group.
    pub cancel_requested: bool,
    /// The store, to read what earlier supervisors recorded; only the
    /// supervisor writes it.
    pub store: &'a Store,
}

/// What a group is to the pools. The store's row says it (its kind and
/// pool), once, for the supervisor and every backend; a plan is never
/// probed for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A group of its own (a pipeline, a `--num-jobs` job without a pool).
    Group,
    /// A pool's worker: its nodes are held after setup, for jobs.
    Worker,
    /// A job submitted to a pool: it runs on a worker the pool places it
    /// on.
    Job,
}

impl Role {
    /// The role of a store row.
    pub fn of(row: &crate::store::GroupRow) -> Self {
        match (row.kind, row.pool) {
            (crate::store::Kind::Worker, _) => Self::Worker,
            (crate::store::Kind::Group, Some(_)) => Self::Job,
            _ => Self::Group,
        }
    }
}

/// A place where groups run.
pub trait Backend {
    /// Where the policy of this backend's groups runs.
    fn policy(&self) -> Policy {
        Policy::Supervised
    }

    /// Takes charge of a group: a new one or one a previous supervisor
    /// ran. An error ends the group FAILED_SETUP with it.
    fn adopt(&mut self, gid: i64, adoption: &Adoption<'_>) -> Result<(), String>;

    /// Carries out what the engine decided, after the supervisor has
    /// committed it. `engine` is the state after the decision: a backend
    /// that reconciles (Kubernetes) works from it; one that follows
    /// commands (local processes) from `actions`.
    fn execute(&mut self, gid: i64, engine: &Engine, actions: &[Action]);

    /// The user asked to cancel the group. The engine hears of it too
    /// (`CancelRequested`); this tells the backend to stop everything of
    /// the group even where the engine has nothing running.
    fn cancel(&mut self, gid: i64);

    /// Forgets a group the supervisor has closed, releasing what it held
    /// on this machine.
    fn release(&mut self, gid: i64);

    /// Undoes what [`Report::Keep`] recorded for a group that was closed
    /// by a supervisor that died before releasing it.
    fn sweep(&mut self, _gid: i64, _kept: &str) {}

    /// What happened since the last call, per group, in order.
    fn drain(&mut self, now_ms: i64) -> Vec<(i64, Report)>;

    /// Whether this backend runs pools: their workers are groups of it
    /// whose plans hold each node after setup, and their jobs run on them
    /// ([`Backend::place`]).
    fn runs_pools(&self) -> bool {
        false
    }

    /// Runs a pool job's attempt on one of the pool's workers (a group of
    /// this backend), as the pool engine placed it; given again after a
    /// crash, so an attempt already started there is left as it is. A
    /// worker that cannot take it (gone, not ready) answers the job's
    /// nodes as lost.
    fn place(&mut self, _job: i64, _attempt: Attempt, _worker: i64, _placement: &Placement) {}

    /// Readable when [`Backend::drain`] has something.
    fn wake_fd(&self) -> Option<BorrowedFd<'_>>;

    /// When to call [`Backend::drain`] even if nothing woke the
    /// supervisor (a poll interval), in Unix milliseconds; none for a
    /// backend that only wakes it through [`Backend::wake_fd`].
    fn next_wake_ms(&self) -> Option<i64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::Role;
    use crate::store::{Backend, Member, NewGroup, Store};

    #[test]
    fn a_groups_role_is_its_rows() {
        let dir = std::env::temp_dir().join(format!("skyc-role-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut store = Store::open(&dir).unwrap();
        let new = |name| NewGroup {
            name,
            source: "f.yaml",
            submitted_at_ms: 0,
            // The plan says nothing of the role.
            plan: "{}",
            backend: Backend::Local,
            snapshots: &[],
            buckets: &[],
            tasks: Vec::new(),
        };
        let group = store.insert_group(&new("g")).unwrap();
        let pool = store.insert_pool(&new("p")).unwrap().unwrap();
        let member = |rank, num_jobs| Member {
            pool: Some(pool),
            rank,
            num_jobs,
        };
        let worker = store
            .transaction(|tx| tx.insert_worker(&new("p-1"), member(1, 0)))
            .unwrap();
        let jobs = store
            .insert_jobs(&[
                (new("j"), Some(member(0, 2))),
                (
                    new("k"),
                    Some(Member {
                        pool: None,
                        rank: 1,
                        num_jobs: 2,
                    }),
                ),
            ])
            .unwrap();
        let role = |gid| Role::of(&store.group(gid).unwrap().unwrap());
        assert_eq!(role(group), Role::Group);
        assert_eq!(role(worker), Role::Worker);
        assert_eq!(role(jobs[0]), Role::Job);
        assert_eq!(role(jobs[1]), Role::Group, "--num-jobs without a pool");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
