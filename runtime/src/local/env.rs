//! The environment contract of a node (SkyPilot's managed-job variables),
//! in one place.

use super::capacity::Grant;
use super::network::GroupNetwork;
use super::plan::Plan;
use crate::policy::Phase;

/// A node's environment, in the order it is applied: the submitting
/// client's environment, SkyPilot's variables, then the task's `envs`
/// (with `--env` overrides) and secrets, which win.
pub fn node_env(
    plan: &Plan,
    group_id: i64,
    net: &GroupNetwork,
    grant: &Grant,
    task: usize,
    rank: u32,
    phase: Phase,
) -> Vec<(String, String)> {
    let t = &plan.tasks[task];
    let task_id = |i: usize| {
        format!(
            "sky-managed-{}_{}_{}_{group_id}-{i}",
            plan.submitted, plan.group, plan.tasks[i].name
        )
    };
    let ips = net
        .task_ips(task)
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    let gpus = t.demand.gpus_per_node().to_string();
    let mut env: Vec<(String, String)> = plan.base_env.clone();
    let mut set = |k: &str, v: String| env.push((k.to_owned(), v));
    // A Job Group's own; a pipeline's steps are plain managed-job tasks.
    if plan.spec.execution == crate::policy::Execution::Parallel {
        set("SKYPILOT_JOBGROUP_NAME", plan.group.clone());
        set("SKYPILOT_ROOT_JOB_ID", group_id.to_string());
    }
    set("SKYPILOT_MANAGED_JOB_ID", group_id.to_string());
    set("SKYPILOT_INTERNAL_JOB_ID", group_id.to_string());
    // `--num-jobs N`: each job's rank among the N, on a pool or not.
    let ranks = plan
        .pool_job
        .as_ref()
        .map(|j| (j.rank, j.num_jobs))
        .or(plan.job_rank);
    let (job_rank, num_jobs) = ranks.unwrap_or((0, 1));
    for (k, v) in crate::pool::rank_env(job_rank, num_jobs) {
        set(k, v);
    }
    set("SKYPILOT_TASK_ID", task_id(task));
    set(
        "SKYPILOT_TASK_IDS",
        (0..plan.tasks.len())
            .map(task_id)
            .collect::<Vec<_>>()
            .join("\n"),
    );
    set("SKYPILOT_NUM_NODES", t.num_nodes.to_string());
    match phase {
        Phase::Setup => {
            set("SKYPILOT_SETUP_NODE_RANK", rank.to_string());
            set("SKYPILOT_SETUP_NODE_IPS", ips);
            set("SKYPILOT_SETUP_NUM_GPUS_PER_NODE", gpus);
        }
        Phase::Run => {
            set("SKYPILOT_NODE_RANK", rank.to_string());
            set("SKYPILOT_NODE_IPS", ips);
            set("SKYPILOT_NUM_GPUS_PER_NODE", gpus);
        }
    }
    set(
        "SKYPILOT_CLUSTER_INFO",
        serde_json::json!({
            "cluster_name": format!("{}-{group_id}", t.name),
            "cloud": "local",
            "region": null,
            "zone": null,
        })
        .to_string(),
    );
    if let Ok(user) = std::env::var("USER") {
        set("SKYPILOT_USER", user);
    }
    // A node sees only its own GPUs, and none when it asked for none.
    let visible = grant
        .gpus
        .get(rank as usize)
        .map(|g| {
            g.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    set("CUDA_VISIBLE_DEVICES", visible);
    env.extend(t.envs.iter().cloned());
    dedup_last_wins(env)
}

/// A pool job's node on its worker: the node's contract as for any job
/// ([`node_env`]: its own ids, rank and number of jobs), the addresses
/// of the worker's nodes it runs on, the GPUs the pool gave it
/// (`gpus`: indices among the worker node's), and the pool's `envs` under
/// the job's own.
pub fn job_env(
    job: &Plan,
    gid: i64,
    worker: &Plan,
    worker_net: &GroupNetwork,
    worker_grant: &Grant,
    rank: u32,
    gpus: &[u32],
) -> Vec<(String, String)> {
    // The pool's indices are among the GPUs the worker's node holds.
    let held = worker_grant.gpus.get(rank as usize);
    let machine_gpus: Vec<u32> = gpus
        .iter()
        .filter_map(|&i| held.and_then(|h| h.get(i as usize).copied()))
        .collect();
    let grant = Grant {
        demand: job.tasks[0].demand,
        gpus: (0..=rank)
            .map(|r| {
                if r == rank {
                    machine_gpus.clone()
                } else {
                    Vec::new()
                }
            })
            .collect(),
    };
    let mut env = node_env(job, gid, worker_net, &grant, 0, rank, Phase::Run);
    let nodes = job.tasks[0].num_nodes as usize;
    let ips: Vec<String> = worker_net
        .task_ips(0)
        .iter()
        .take(nodes)
        .map(ToString::to_string)
        .collect();
    let own = |k: &str| job.tasks[0].envs.iter().any(|(name, _)| name == k);
    let mut set = |k: &str, v: String| env.push((k.to_owned(), v));
    set("SKYPILOT_NODE_IPS", ips.join("\n"));
    for (k, v) in &worker.tasks[0].envs {
        if !own(k) {
            set(k, v.clone());
        }
    }
    dedup_last_wins(env)
}

/// Keeps the last value of each name, in first-seen order.
fn dedup_last_wins(env: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::with_capacity(env.len());
    let mut index = std::collections::HashMap::new();
    for (k, v) in env {
        match index.get(&k) {
            Some(&i) => out[i] = (k, v),
            None => {
                index.insert(k.clone(), out.len());
                out.push((k, v));
            }
        }
    }
    out
}
