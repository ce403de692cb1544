//! The plans of a pool's members on Slurm, made by the submitting client:
//! a worker (one batch job holding its allocation,
//! `skyc_targets::slurm::worker`) and a job (a step of a worker's
//! allocation). Each carries a group's [`Plan`] (flattened: `skyc logs`
//! and `status` read it as any Slurm group's, its logs in the group's
//! directory) and what the member adds.

use super::Plan;
use crate::policy::GroupSpec;
use crate::pool::{JobSpec, PoolSpec, Room};
use serde::{Deserialize, Serialize};
use skyc_compiler::Diagnostic;
use skyc_compiler::ir::{self, Group, Task, Workdir};
use skyc_targets::files::{Mount, Volume};
use skyc_targets::slurm;
use std::path::PathBuf;
use std::time::Duration;

/// A worker: the pool task's batch script (`plan.script`), whose `run`
/// holds the allocation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerPlan {
    #[serde(flatten)]
    pub plan: Plan,
    /// What the pool's jobs run with: the task's envs (after `--env`)
    /// and its workdir.
    pub task: TaskRun,
    /// The pool's files, which its jobs see as its workers do: the
    /// task's mounts, where the compute nodes find their snapshots, and
    /// skyc's files helper.
    #[serde(default)]
    pub files: Vec<Mount>,
    #[serde(default)]
    pub volumes: Vec<Volume>,
    /// The buckets its jobs mount, as its workers do.
    #[serde(default)]
    pub buckets: Vec<skyc_targets::storage::Mounted>,
    #[serde(default)]
    pub files_at: Option<(PathBuf, PathBuf)>,
}

/// A pool job: its one task's `run` as a step of its worker's allocation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobPlan {
    #[serde(flatten)]
    pub plan: Plan,
    pub pool_job: Option<JobSpec>,
    pub task: TaskRun,
}

/// A task's commands and what they run with.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskRun {
    pub name: String,
    pub run: Option<String>,
    pub envs: Vec<(String, String)>,
    /// A local `workdir`: the directory the commands run in (the cluster
    /// shares it).
    pub workdir: Option<String>,
    /// GPUs per node, as the task asks for them (its first candidate).
    pub gpus: f64,
    /// cpus and memory per node, as the task asks for them.
    pub cpus: f64,
    pub memory_gb: f64,
}

impl TaskRun {
    fn of(task: &Task) -> Self {
        let c = task.resources.candidates.first();
        Self {
            name: task.name.clone(),
            run: task.run.clone(),
            envs: task
                .envs
                .iter()
                .map(|e| (e.name.clone(), e.value.clone()))
                .collect(),
            workdir: match &task.workdir {
                Some(Workdir::Local { path, .. }) => Some(path.clone()),
                _ => None,
            },
            gpus: c
                .and_then(|c| c.accelerator.as_ref())
                .map_or(0.0, |a| a.count),
            cpus: c.and_then(|c| c.cpus).map_or(0.0, |q| q.value),
            memory_gb: c.and_then(|c| c.memory_gb).map_or(0.0, |q| q.value),
        }
    }
}

/// A pool as the Slurm target runs it.
pub type PoolPlan = crate::pool::PoolPlan<WorkerPlan>;

/// A plan of `group` with `script`, the client's environment and the
/// group's secrets.
fn base(
    group: &Group,
    script: String,
    grace: Duration,
    secrets: &[(String, String)],
    token: String,
) -> (Plan, Vec<Diagnostic>) {
    let mut env: Vec<(String, String)> = std::env::vars().collect();
    let diagnostics = crate::secrets::merge(&mut env, group, secrets);
    let plan = Plan {
        group: group.name.clone(),
        spec: GroupSpec::from_ir(group, grace),
        num_nodes: group.tasks.iter().map(|t| t.num_nodes).collect(),
        script,
        steps: Vec::new(),
        out_dir: None,
        env,
        token,
    };
    (plan, diagnostics)
}

/// A pool file's group, planned for Slurm: each worker is one batch job
/// (`options` as for a group) that runs the setup and holds its nodes,
/// and offers jobs what it holds: the cpus, memory and GPUs the pool's
/// resources name (one cpu, no memory and no GPU where they name none:
/// what Slurm allocates by default is not known here).
pub fn plan_pool(
    group: &Group,
    pool: &ir::Pool,
    options: &slurm::Options,
    grace: Duration,
    secrets: &[(String, String)],
    token: String,
) -> (Option<PoolPlan>, Vec<Diagnostic>) {
    let built = slurm::worker(group, options);
    let mut diagnostics = built.diagnostics;
    let Some(script) = built.script else {
        return (None, diagnostics);
    };
    let (mut plan, found) = base(group, script, grace, secrets, token);
    diagnostics.extend(found);
    if diagnostics.iter().any(Diagnostic::is_error) {
        return (None, diagnostics);
    }
    // A worker whose setup fails is replaced by the pool, not restarted.
    for t in &mut plan.spec.tasks {
        t.max_restarts_on_errors = 0;
        t.recover_on_exit_codes.clear();
    }
    let mut task = TaskRun::of(&group.tasks[0]);
    let (files, volumes, buckets, files_at) = match &options.files {
        Some(delivery) if delivery.gives(0) => (
            delivery.of(0).to_vec(),
            delivery.volumes_of(0).to_vec(),
            delivery.buckets_of(0).to_vec(),
            Some((delivery.snapshots.clone(), delivery.helper.clone())),
        ),
        _ => (Vec::new(), Vec::new(), Vec::new(), None),
    };
    if files.iter().any(|m| m.workdir) {
        // The files helper starts jobs in the delivered workdir.
        task.workdir = None;
    }
    let offer = Room {
        cpus: if task.cpus > 0.0 { task.cpus } else { 1.0 },
        memory_gb: task.memory_gb,
        gpus: task.gpus,
    };
    let made_of = serde_json::json!({
        "script": plan.script,
        "envs": task.envs,
        "workdir": task.workdir,
    });
    let spec = PoolSpec::new(pool, group.tasks[0].num_nodes, offer, &made_of);
    let worker = WorkerPlan {
        plan,
        task,
        files,
        volumes,
        buckets,
        files_at,
    };
    (Some(PoolPlan { pool: spec, worker }), diagnostics)
}

impl JobPlan {
    /// A job file's group (one task), planned as a job of a Slurm pool;
    /// its setup is the pool's, which its worker ran.
    pub fn new(
        group: &Group,
        grace: Duration,
        secrets: &[(String, String)],
        token: String,
        job: JobSpec,
    ) -> (Option<Self>, Vec<Diagnostic>) {
        let (plan, diagnostics) = base(group, String::new(), grace, secrets, token);
        if diagnostics.iter().any(Diagnostic::is_error) || group.tasks.len() != 1 {
            return (None, diagnostics);
        }
        let task = TaskRun::of(&group.tasks[0]);
        let plan = JobPlan {
            plan,
            pool_job: Some(job),
            task,
        };
        (Some(plan), diagnostics)
    }
}
