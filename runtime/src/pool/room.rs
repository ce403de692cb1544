//! What a worker offers and what a job takes of it, per node, counted as
//! the cluster job queue counts them: cpus and memory as amounts, GPUs one
//! by one, a fraction sharing one GPU with other fractions.

use serde::{Deserialize, Serialize};

/// Tolerance of sums of fractions (0.1 + 0.2 is not 0.3 in binary).
const EPS: f64 = 1e-9;

/// A node's cpus, memory and GPUs: what a worker's node offers, or what a
/// job asks of each of its nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Room {
    pub cpus: f64,
    pub memory_gb: f64,
    /// Accelerators: a whole number, or a fraction of one GPU.
    pub gpus: f64,
}

impl Room {
    /// What a job may ask of a worker offering `self`: every amount within
    /// the node's, whole GPUs when more than one, no more GPUs than it has.
    pub fn admits(&self, ask: &Room) -> bool {
        let gpus_ok = if ask.gpus <= 1.0 {
            ask.gpus == 0.0 || self.gpus >= 1.0 - EPS
        } else {
            ask.gpus.fract() == 0.0 && ask.gpus <= self.gpus + EPS
        };
        ask.cpus <= self.cpus + EPS && ask.memory_gb <= self.memory_gb + EPS && gpus_ok
    }

    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.cpus > 0.0 {
            parts.push(format!("{} cpus", num(self.cpus)));
        }
        if self.memory_gb > 0.0 {
            parts.push(format!("{} GB of memory", num(self.memory_gb)));
        }
        if self.gpus > 0.0 {
            parts.push(format!("{} GPUs", num(self.gpus)));
        }
        if parts.is_empty() {
            "nothing".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// At most one decimal: a machine's memory is not read to the byte.
fn num(x: f64) -> String {
    let tenths = (x * 10.0).round() / 10.0;
    if tenths.fract() == 0.0 {
        format!("{tenths:.0}")
    } else {
        format!("{tenths:.1}")
    }
}

/// What is free on one node of a worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Free {
    pub cpus: f64,
    pub memory_gb: f64,
    /// The free share of each of the node's GPUs (1.0: idle).
    pub gpus: Vec<f64>,
}

/// Where a job's node runs on its worker: the worker's node (the job's
/// rank) and the GPUs it was given, by index among the node's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Per node of the job, the indices of its GPUs on the worker's node.
    pub gpus: Vec<Vec<u32>>,
}

impl Free {
    pub fn new(offer: &Room) -> Self {
        Self {
            cpus: offer.cpus,
            memory_gb: offer.memory_gb,
            gpus: vec![1.0; offer.gpus.floor() as usize],
        }
    }

    /// Takes `ask` if it fits: the GPUs given, by index.
    pub fn take(&mut self, ask: &Room) -> Option<Vec<u32>> {
        if ask.cpus > self.cpus + EPS || ask.memory_gb > self.memory_gb + EPS {
            return None;
        }
        let gpus = pick_gpus(&self.gpus, ask.gpus)?;
        self.cpus -= ask.cpus;
        self.memory_gb -= ask.memory_gb;
        let share = ask.gpus.min(1.0);
        for &g in &gpus {
            self.gpus[g as usize] -= share;
        }
        Some(gpus)
    }

    /// Gives back what [`take`](Self::take) gave.
    pub fn give(&mut self, ask: &Room, gpus: &[u32]) {
        self.cpus += ask.cpus;
        self.memory_gb += ask.memory_gb;
        let share = ask.gpus.min(1.0);
        for &g in gpus {
            if let Some(free) = self.gpus.get_mut(g as usize) {
                *free = (*free + share).min(1.0);
            }
        }
    }

    /// The whole node, for a job that names no resources (on a worker
    /// that runs no job).
    pub fn take_all(&mut self) -> Option<Vec<u32>> {
        self.cpus = 0.0;
        self.memory_gb = 0.0;
        let all = (0..self.gpus.len() as u32).collect();
        self.gpus.iter_mut().for_each(|g| *g = 0.0);
        Some(all)
    }
}

/// A fraction goes on the fullest GPU it fits on (so whole GPUs stay free);
/// a whole number takes that many idle GPUs, lowest indices first.
fn pick_gpus(free: &[f64], want: f64) -> Option<Vec<u32>> {
    if want <= 0.0 {
        return Some(Vec::new());
    }
    if want < 1.0 {
        return free
            .iter()
            .enumerate()
            .filter(|(_, f)| **f + EPS >= want)
            .min_by(|a, b| a.1.total_cmp(b.1).then(a.0.cmp(&b.0)))
            .map(|(i, _)| vec![i as u32]);
    }
    let idle: Vec<u32> = free
        .iter()
        .enumerate()
        .filter(|(_, f)| **f >= 1.0 - EPS)
        .map(|(i, _)| i as u32)
        .take(want as usize)
        .collect();
    (idle.len() == want as usize).then_some(idle)
}
