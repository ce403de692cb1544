//! The pool engine: SkyPilot's managed-job pools as a pure state machine.
//!
//! A pool is a set of workers, each set up once, to which jobs are
//! submitted. The engine decides, from events, which workers should exist
//! and which job runs on which worker; it does no I/O and reads no clock.
//!
//! - Workers: the pool keeps `target` workers of its current generation
//!   (a fixed `workers`, or the queue-length autoscaler's answer between
//!   `min_workers` and `max_workers`). A worker whose setup fails, or that
//!   ends without being retired, is replaced after a pause that grows with
//!   each such end; after [`SETUP_FAILURES`] in a row that never became
//!   ready the pool stops replacing and says so ([`replace`]). A change of the workers' setup,
//!   resources, workdir, envs or nodes starts a new generation: new
//!   workers start, and old ones are retired as they become idle, so no
//!   running job is killed.
//! - Jobs: each job is a group of its own with its own policy
//!   [`Engine`](crate::policy::Engine); the pool sees, level-triggered,
//!   which attempts want a place ([`Event::Jobs`]) and places them on ready
//!   workers by resources ([`room`]): jobs that fit share a worker (the
//!   one running the most jobs), a job
//!   that names no resources takes a whole one. Waiting jobs are placed in
//!   submission order, and one that fits nowhere does not hold back a later
//!   one that fits (backfill).
//! - Every target stores a pool alike ([`PoolPlan`]): this spec, and the
//!   target's plan of a worker (its own group plan, holding each node
//!   after setup). A job of a pool is a group of the pool's target whose
//!   plan carries a [`JobSpec`]; the target's backend starts it on the
//!   worker the engine chose ([`Backend::place`](crate::backend::Backend::place)).
//! - A lost worker's jobs are answered by the backend as lost nodes, so
//!   their engines restart them (RECOVERING) without using their restart
//!   budget; the new attempts wait here for a place like any other.

pub mod admission;
mod autoscale;
mod engine;
pub mod replace;
pub mod room;
mod spec;
#[cfg(test)]
mod tests;

pub use autoscale::Autoscaler;
pub use engine::{
    Action, Event, JobWant, Pool, PoolStatus, Timer, Worker, WorkerEvent, WorkerState,
};
pub use room::{Placement, Room};
pub use spec::{JobSpec, PoolPlan, PoolSpec, Scaling, rank_env, worker_key};

/// A worker's number in its pool: 1, 2, ... never reused.
pub type WorkerId = u32;
/// A job: the id of its group.
pub type JobId = i64;

/// Workers in a row that failed before they were ready (a failed setup,
/// or an end by themselves) after which a pool stops replacing workers.
pub const SETUP_FAILURES: u32 = 3;
