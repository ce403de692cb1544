//! A pool on this machine: each worker is a group whose nodes are held
//! once their setup ended well (its store row is a worker's:
//! `Adoption::role`), offering jobs what it holds. The jobs on a worker
//! are `pool_job.rs`'s.

use super::plan::{Plan, PlanOptions, PoolPlan};
use crate::pool::{PoolSpec, Room};
use skyc_compiler::Diagnostic;
use skyc_compiler::ir::{self, Group};

impl PoolPlan {
    /// A pool file's group, planned for this machine: each worker is a
    /// node environment holding the pool's resources while it exists, and
    /// offers jobs what it holds (this machine's cpus and memory, for
    /// what the pool does not name; GPUs only as the pool names them).
    pub fn new(
        group: &Group,
        pool: &ir::Pool,
        options: &PlanOptions<'_>,
    ) -> (Option<Self>, Vec<Diagnostic>) {
        let (plan, diagnostics) = Plan::new(group, options);
        let Some(mut worker) = plan else {
            return (None, diagnostics);
        };
        // A worker whose setup fails is replaced by the pool, not restarted.
        for t in &mut worker.spec.tasks {
            t.max_restarts_on_errors = 0;
            t.recover_on_exit_codes.clear();
        }
        let task = &worker.tasks[0];
        let demand = task.demand;
        let machine = options.capacity;
        let offer = Room {
            cpus: if demand.cpus > 0.0 {
                demand.cpus
            } else {
                machine.cpus
            },
            memory_gb: if demand.memory_gb > 0.0 {
                demand.memory_gb
            } else {
                machine.memory_gb
            },
            // GPUs are held one by one: a worker offers only those it
            // holds, never the machine's others.
            gpus: demand.gpus,
        };
        let made_of = serde_json::json!({
            "setup": task.setup,
            "envs": task.envs,
            "workdir": task.workdir,
            // New files make new workers.
            "files": task.files,
            "demand": task.demand,
            "num_nodes": task.num_nodes,
        });
        let spec = PoolSpec::new(pool, task.num_nodes, offer, &made_of);
        (Some(Self { pool: spec, worker }), diagnostics)
    }
}
