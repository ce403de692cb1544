//! What the pool engine needs to know of a pool: taken from the IR's
//! `pool` section and the target's plan of a worker.

use super::room::Room;
use serde::{Deserialize, Serialize};
use skyc_compiler::ir::{Pool, PoolWorkers};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolSpec {
    pub scaling: Scaling,
    /// Nodes per worker (the pool task's `num_nodes`).
    pub nodes: u32,
    /// What each node of a worker offers to jobs, as the target resolved
    /// the pool's resources.
    pub offer: Room,
    /// Identifies what a worker is made of (setup, resources, workdir,
    /// envs, nodes): workers made from another key are of an older
    /// generation and are retired as they become idle.
    pub worker_key: String,
}

impl PoolSpec {
    /// The spec of `pool`, whose workers have `nodes` nodes each offering
    /// `offer` and are made of `made_of`: what of the target's worker plan
    /// makes a new generation of workers when it changes.
    pub fn new(pool: &Pool, nodes: u32, offer: Room, made_of: &serde_json::Value) -> Self {
        Self {
            scaling: Scaling::from_ir(&pool.workers),
            nodes,
            offer,
            worker_key: worker_key(&made_of.to_string()),
        }
    }
}

/// A pool as every target stores it (the pool's row's plan): the pool
/// engine's spec, and the target's plan each worker is made from, a
/// group plan of that target whose nodes are held after setup. The
/// supervisor and `skyc run --pool` read only `pool`; `W` is the target's
/// plan type, or JSON where the target does not matter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoolPlan<W = serde_json::Value> {
    pub pool: PoolSpec,
    pub worker: W,
}

/// What a job of a pool is, beside its group: what it takes of a worker,
/// and its rank among the jobs submitted with it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Per node; `None`: the job names no resources and takes a whole
    /// worker.
    pub room: Option<Room>,
    /// `SKYPILOT_JOB_RANK`.
    pub rank: u32,
    /// `SKYPILOT_NUM_JOBS`.
    pub num_jobs: u32,
}

impl JobSpec {
    /// What the job's nodes see of its rank, on every target.
    pub fn env(&self) -> [(&'static str, String); 2] {
        rank_env(self.rank, self.num_jobs)
    }
}

/// `SKYPILOT_JOB_RANK` and `SKYPILOT_NUM_JOBS`: a job's rank among the
/// `--num-jobs` submitted with it, on a pool or not.
pub fn rank_env(rank: u32, num_jobs: u32) -> [(&'static str, String); 2] {
    [
        ("SKYPILOT_JOB_RANK", rank.to_string()),
        ("SKYPILOT_NUM_JOBS", num_jobs.to_string()),
    ]
}

/// A worker's identity for [`PoolSpec::worker_key`]: FNV-1a (64 bits) of
/// what the worker is made of, so the key is stable across skyc versions
/// and holds no value of it (envs may carry secrets).
pub fn worker_key(made_of: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in made_of.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// A scaling delay in seconds, at most a year: a longer one never comes,
/// and a timer's deadline must stay a number of milliseconds.
fn delay(seconds: f64) -> Duration {
    const YEAR: f64 = 365.0 * 24.0 * 3600.0;
    Duration::try_from_secs_f64(seconds.clamp(0.0, YEAR)).unwrap_or(Duration::ZERO)
}

/// How many workers a pool keeps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Scaling {
    /// `workers: N`.
    Fixed { workers: u32 },
    /// `min_workers`..`max_workers`, by the queue-length rule.
    Autoscaled {
        min_workers: u32,
        max_workers: u32,
        queue_length_threshold: u32,
        upscale_delay: Duration,
        downscale_delay: Duration,
    },
}

impl Scaling {
    pub fn from_ir(workers: &PoolWorkers) -> Self {
        let n = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        match *workers {
            PoolWorkers::Fixed { count } => Scaling::Fixed { workers: n(count) },
            PoolWorkers::Autoscaled {
                min_workers,
                max_workers,
                queue_length_threshold,
                upscale_delay_seconds,
                downscale_delay_seconds,
            } => Scaling::Autoscaled {
                min_workers: n(min_workers),
                max_workers: n(max_workers),
                queue_length_threshold: n(queue_length_threshold),
                upscale_delay: delay(upscale_delay_seconds),
                downscale_delay: delay(downscale_delay_seconds),
            },
        }
    }

    /// The number of workers a pool starts with.
    pub fn initial(&self) -> u32 {
        match *self {
            Scaling::Fixed { workers } => workers,
            Scaling::Autoscaled { min_workers, .. } => min_workers,
        }
    }

    /// The size as `skyc pool status` shows it.
    pub fn describe(&self) -> String {
        match *self {
            Scaling::Fixed { workers: 1 } => "1 worker".into(),
            Scaling::Fixed { workers } => format!("{workers} workers"),
            Scaling::Autoscaled {
                min_workers,
                max_workers,
                ..
            } => format!("{min_workers} to {max_workers} workers"),
        }
    }
}
