//! This machine as a one-node cluster: what it offers, what tasks ask for,
//! and which of its GPUs each node gets.
//!
//! A task that names no cpus or memory reserves none (like a Kubernetes pod
//! without requests). A group that does not fit beside the running ones
//! waits, PENDING, as in a cluster's queue.

use serde::{Deserialize, Serialize};
use skyc_compiler::ir::Candidate;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    pub cpus: f64,
    pub memory_gb: f64,
    /// GPU indices (as `CUDA_VISIBLE_DEVICES` counts them) and names.
    pub gpus: Vec<(u32, String)>,
}

/// What one node of a task reserves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Demand {
    pub cpus: f64,
    pub memory_gb: f64,
    /// Accelerators per node; a fraction shares one GPU.
    pub gpus: f64,
}

impl Demand {
    pub fn of(candidate: &Candidate) -> Self {
        Self {
            cpus: candidate.cpus.map_or(0.0, |q| q.value),
            memory_gb: candidate.memory_gb.map_or(0.0, |q| q.value),
            gpus: candidate.accelerator.as_ref().map_or(0.0, |a| a.count),
        }
    }

    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.cpus > 0.0 {
            parts.push(format!("{} cpus", fmt(self.cpus)));
        }
        if self.memory_gb > 0.0 {
            parts.push(format!("{} GB of memory", fmt(self.memory_gb)));
        }
        if self.gpus > 0.0 {
            parts.push(format!("{} GPUs", fmt(self.gpus)));
        }
        if parts.is_empty() {
            "nothing".to_owned()
        } else {
            parts.join(", ")
        }
    }

    /// `SKYPILOT_NUM_GPUS_PER_NODE`: the accelerator count rounded up.
    pub fn gpus_per_node(&self) -> u32 {
        self.gpus.ceil() as u32
    }
}

fn fmt(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

impl Capacity {
    /// The machine, with `SKYC_LOCAL_CPUS`, `SKYC_LOCAL_MEMORY_GB` and
    /// `SKYC_LOCAL_GPUS` (a count, for machines whose GPUs skyc cannot
    /// see, or to pretend in tests) taking precedence.
    pub fn detect() -> Self {
        let var = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        let cpus = var("SKYC_LOCAL_CPUS").unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
        });
        let memory_gb = var("SKYC_LOCAL_MEMORY_GB").unwrap_or_else(meminfo_gb);
        let gpus = match var("SKYC_LOCAL_GPUS") {
            Some(n) => (0..n as u32).map(|i| (i, "GPU".to_owned())).collect(),
            None => nvidia_gpus(),
        };
        Self {
            cpus,
            memory_gb,
            gpus,
        }
    }

    /// One node of this shape fits on the empty machine.
    pub fn holds(&self, demand: &Demand) -> bool {
        let gpus = self.gpus.len() as f64;
        let gpus_fit = if demand.gpus < 1.0 {
            demand.gpus == 0.0 || gpus > 0.0
        } else {
            demand.gpus.fract() == 0.0 && demand.gpus <= gpus
        };
        demand.cpus <= self.cpus && demand.memory_gb <= self.memory_gb && gpus_fit
    }

    pub fn describe(&self) -> String {
        format!(
            "{} cpus, {} GB of memory, {} GPUs",
            fmt(self.cpus),
            fmt(self.memory_gb.floor()),
            self.gpus.len()
        )
    }
}

fn meminfo_gb() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb / (1024.0 * 1024.0))
        })
        .unwrap_or(0.0)
}

/// NVIDIA GPUs as the driver lists them; none without the driver.
fn nvidia_gpus() -> Vec<(u32, String)> {
    let Ok(out) = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=index,name", "--format=csv,noheader"])
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (i, name) = l.split_once(',')?;
            Some((i.trim().parse().ok()?, name.trim().to_owned()))
        })
        .collect()
}

/// What is in use on the machine.
#[derive(Clone, Debug)]
pub struct Allocator {
    capacity: Capacity,
    cpus: f64,
    memory_gb: f64,
    /// Free share of each GPU, in the order of `capacity.gpus`.
    gpu_free: Vec<f64>,
}

/// What one task attempt holds: per node, its GPUs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    pub demand: Demand,
    pub gpus: Vec<Vec<u32>>,
}

const EPS: f64 = 1e-9;

impl Allocator {
    pub fn new(capacity: Capacity) -> Self {
        let gpu_free = vec![1.0; capacity.gpus.len()];
        Self {
            capacity,
            cpus: 0.0,
            memory_gb: 0.0,
            gpu_free,
        }
    }

    pub fn capacity(&self) -> &Capacity {
        &self.capacity
    }

    /// Reserves `nodes` nodes of `demand`, all or nothing.
    pub fn allocate(&mut self, demand: Demand, nodes: u32) -> Option<Grant> {
        let n = f64::from(nodes);
        if self.cpus + demand.cpus * n > self.capacity.cpus + EPS
            || self.memory_gb + demand.memory_gb * n > self.capacity.memory_gb + EPS
        {
            return None;
        }
        let mut free = self.gpu_free.clone();
        let mut gpus = Vec::new();
        for _ in 0..nodes {
            gpus.push(take_gpus(&mut free, demand.gpus)?);
        }
        self.gpu_free = free;
        self.cpus += demand.cpus * n;
        self.memory_gb += demand.memory_gb * n;
        let gpus = gpus
            .into_iter()
            .map(|slots| slots.into_iter().map(|s| self.capacity.gpus[s].0).collect())
            .collect();
        Some(Grant { demand, gpus })
    }

    /// Takes back what `grant` held (or re-takes it, for a supervisor
    /// re-adopting running nodes).
    pub fn release(&mut self, grant: &Grant) {
        self.adjust(grant, -1.0);
    }

    pub fn restore(&mut self, grant: &Grant) {
        self.adjust(grant, 1.0);
    }

    fn adjust(&mut self, grant: &Grant, sign: f64) {
        let n = grant.gpus.len() as f64;
        self.cpus = (self.cpus + sign * grant.demand.cpus * n).max(0.0);
        self.memory_gb = (self.memory_gb + sign * grant.demand.memory_gb * n).max(0.0);
        let share = if grant.demand.gpus < 1.0 {
            grant.demand.gpus
        } else {
            1.0
        };
        for node in &grant.gpus {
            for index in node {
                if let Some(slot) = self.capacity.gpus.iter().position(|(i, _)| i == index) {
                    let free = &mut self.gpu_free[slot];
                    *free = (*free - sign * share).clamp(0.0, 1.0);
                }
            }
        }
    }
}

/// Whole free GPUs for a count of one or more, a share of one GPU for a
/// fraction.
fn take_gpus(free: &mut [f64], want: f64) -> Option<Vec<usize>> {
    if want <= 0.0 {
        return Some(Vec::new());
    }
    if want < 1.0 {
        let slot = free.iter().position(|&f| f + EPS >= want)?;
        free[slot] -= want;
        return Some(vec![slot]);
    }
    let slots: Vec<usize> = (0..free.len())
        .filter(|&s| free[s] + EPS >= 1.0)
        .take(want as usize)
        .collect();
    if slots.len() < want as usize {
        return None;
    }
    for &s in &slots {
        free[s] = 0.0;
    }
    Some(slots)
}

/// Something of the machine's that a task waits for: a group or a pool's
/// worker, by the name `skyc status` and `skyc pool status` show, and what
/// it holds.
#[derive(Clone, Debug)]
pub struct Holder {
    pub name: String,
    /// A pool's worker (else a group).
    pub worker: bool,
    pub grant: Grant,
}

impl Allocator {
    /// Why `nodes` nodes of `demand` wait, in a sentence: the first of
    /// cpus, memory and GPUs that is short, what the machine has, and who
    /// holds it (`waiting for 1 cpu: this machine has 2, held by pool
    /// workers pb-1, pb-2`).
    pub fn why_waiting(&self, demand: &Demand, nodes: u32, holders: &[Holder]) -> String {
        let n = f64::from(nodes);
        let cap = &self.capacity;
        type Held = fn(&Grant) -> f64;
        let (need, has, unit, held): (f64, f64, (&str, &str), Held) =
            if self.cpus + demand.cpus * n > cap.cpus + EPS {
                (demand.cpus * n, cap.cpus, ("cpu", "cpus"), |g| {
                    g.demand.cpus * g.gpus.len() as f64
                })
            } else if self.memory_gb + demand.memory_gb * n > cap.memory_gb + EPS {
                (
                    demand.memory_gb * n,
                    cap.memory_gb.floor(),
                    ("GB of memory", "GB of memory"),
                    |g| g.demand.memory_gb * g.gpus.len() as f64,
                )
            } else {
                (
                    demand.gpus * n,
                    cap.gpus.len() as f64,
                    ("GPU", "GPUs"),
                    |g| g.demand.gpus * g.gpus.len() as f64,
                )
            };
        let unit = if (need - 1.0).abs() < EPS {
            unit.0
        } else {
            unit.1
        };
        let names = |worker: bool| -> Vec<&str> {
            let mut v: Vec<&str> = holders
                .iter()
                .filter(|h| h.worker == worker && held(&h.grant) > EPS)
                .map(|h| h.name.as_str())
                .collect();
            v.sort_unstable();
            v
        };
        let list = |kind: (&str, &str), names: Vec<&str>| -> Option<String> {
            const SHOWN: usize = 4;
            let kind = if names.len() == 1 { kind.0 } else { kind.1 };
            let more = names.len().saturating_sub(SHOWN);
            let mut shown = names.into_iter().take(SHOWN).collect::<Vec<_>>().join(", ");
            if shown.is_empty() {
                return None;
            }
            if more > 0 {
                shown.push_str(&format!(" and {more} more"));
            }
            Some(format!("{kind} {shown}"))
        };
        let by: Vec<String> = [
            list(("pool worker", "pool workers"), names(true)),
            list(("group", "groups"), names(false)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let held_by = if by.is_empty() {
            String::new()
        } else {
            format!(", held by {}", by.join(" and "))
        };
        format!(
            "waiting for {} {unit}: this machine has {}{held_by}",
            fmt(need),
            fmt(has)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(cpus: f64, gpus: u32) -> Capacity {
        Capacity {
            cpus,
            memory_gb: 16.0,
            gpus: (0..gpus).map(|i| (i, "GPU".to_owned())).collect(),
        }
    }

    #[test]
    fn gpus_are_handed_out_whole_or_shared() {
        let mut a = Allocator::new(machine(8.0, 2));
        let two = Demand {
            gpus: 1.0,
            ..Demand::default()
        };
        let g = a.allocate(two, 2).expect("fits");
        assert_eq!(g.gpus, vec![vec![0], vec![1]]);
        assert!(a.allocate(two, 1).is_none());
        a.release(&g);
        let half = Demand {
            gpus: 0.5,
            ..Demand::default()
        };
        let h1 = a.allocate(half, 1).expect("fits");
        let h2 = a.allocate(half, 1).expect("fits");
        assert_eq!(
            (h1.gpus.clone(), h2.gpus.clone()),
            (vec![vec![0]], vec![vec![0]])
        );
        assert_eq!(a.allocate(two, 2), None, "GPU 0 is taken by two halves");
        a.release(&h1);
        a.release(&h2);
        assert!(a.allocate(two, 2).is_some());
    }

    #[test]
    fn cpus_and_memory_are_all_or_nothing() {
        let mut a = Allocator::new(machine(4.0, 0));
        let d = Demand {
            cpus: 2.0,
            memory_gb: 4.0,
            gpus: 0.0,
        };
        assert!(a.allocate(d, 3).is_none());
        let g = a.allocate(d, 2).expect("fits");
        assert!(a.allocate(d, 1).is_none());
        a.release(&g);
        assert!(a.allocate(d, 1).is_some());
        assert!(
            a.allocate(Demand::default(), 100).is_some(),
            "no request, no reservation"
        );
    }

    #[test]
    fn holds() {
        let m = machine(2.0, 0);
        assert!(m.holds(&Demand::default()));
        assert!(!m.holds(&Demand {
            cpus: 4.0,
            ..Demand::default()
        }));
        assert!(!m.holds(&Demand {
            gpus: 0.5,
            ..Demand::default()
        }));
        assert!(machine(2.0, 2).holds(&Demand {
            gpus: 2.0,
            ..Demand::default()
        }));
        assert!(!machine(2.0, 2).holds(&Demand {
            gpus: 3.0,
            ..Demand::default()
        }));
    }

    fn cpus(n: f64) -> Demand {
        Demand {
            cpus: n,
            ..Demand::default()
        }
    }

    #[test]
    fn a_wait_names_what_is_short_and_who_holds_it() {
        let mut a = Allocator::new(Capacity {
            cpus: 2.0,
            memory_gb: 8.0,
            gpus: vec![(0, "L4".into())],
        });
        let held = |name: &str, worker, grant: Grant| Holder {
            name: name.into(),
            worker,
            grant,
        };
        let w1 = a.allocate(cpus(1.0), 1).unwrap();
        let w2 = a.allocate(cpus(1.0), 1).unwrap();
        let holders = vec![held("pb-1", true, w1), held("pb-2", true, w2)];
        assert_eq!(
            a.why_waiting(&cpus(1.0), 1, &holders),
            "waiting for 1 cpu: this machine has 2, held by pool workers pb-1, pb-2"
        );
        let mut b = Allocator::new(a.capacity().clone());
        let g = b
            .allocate(
                Demand {
                    memory_gb: 6.0,
                    gpus: 1.0,
                    ..Demand::default()
                },
                1,
            )
            .unwrap();
        let holders = vec![held("train (3)", false, g)];
        let memory = Demand {
            memory_gb: 4.0,
            ..Demand::default()
        };
        assert_eq!(
            b.why_waiting(&memory, 1, &holders),
            "waiting for 4 GB of memory: this machine has 8, held by group train (3)"
        );
        let gpu = Demand {
            gpus: 1.0,
            ..Demand::default()
        };
        assert_eq!(
            b.why_waiting(&gpu, 1, &holders),
            "waiting for 1 GPU: this machine has 1, held by group train (3)"
        );
    }
}
