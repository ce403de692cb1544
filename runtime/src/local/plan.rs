//! The plan: what the supervisor needs to run a group on this machine,
//! made from the IR by the submitting client and stored with the group.

use super::capacity::{Capacity, Demand};
use crate::files::take::delivered;
use crate::files::{Files, Mount, Volume};
use crate::policy::GroupSpec;
use crate::pool::JobSpec;
use serde::{Deserialize, Serialize};
use skyc_compiler::ir::{Group, InterConnection, Task, Workdir};
use skyc_compiler::{Diagnostic, Rule};
use skyc_targets::storage::Mounted;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub group: String,
    /// Submission time, as SkyPilot writes it in task ids.
    pub submitted: String,
    pub spec: GroupSpec,
    pub network: NetworkRequest,
    /// Hostnames are wanted (`inter_connection` unset or `true`).
    pub hostnames: bool,
    /// Hostnames are required (`inter_connection: true`).
    pub hostnames_required: bool,
    /// The submitting client's environment, the base of every node's.
    pub base_env: Vec<(String, String)>,
    pub tasks: Vec<TaskPlan>,
    /// A pool's worker: once its setup ended well on every node, each node
    /// is held (its directory, address and resources kept) until the
    /// worker is retired, and the pool's jobs run in it. Its store row's
    /// role, set when the backend adopts it (not stored in the plan).
    #[serde(skip)]
    pub hold: bool,
    /// A job of a pool: its one task's `run` runs on a worker the pool
    /// gives it, in the worker's directory and environment.
    #[serde(default)]
    pub pool_job: Option<JobSpec>,
    /// One of `--num-jobs N` jobs submitted together: its rank, and N.
    #[serde(default)]
    pub job_rank: Option<(u32, u32)>,
}

/// A pool as the local target runs it: each worker made from a [`Plan`].
pub type PoolPlan = crate::pool::PoolPlan<Plan>;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskPlan {
    pub name: String,
    pub num_nodes: u32,
    pub setup: Option<String>,
    pub run: Option<String>,
    /// The task's `envs`, `--env` overrides applied, then its secrets.
    pub envs: Vec<(String, String)>,
    /// Where the task's commands run, for plans stored before `files`; a
    /// per-node directory when `None`.
    pub workdir: Option<PathBuf>,
    pub demand: Demand,
    /// Its `workdir` and local file mounts, as snapshots of the state
    /// directory: each node sees them at their destinations.
    #[serde(default)]
    pub files: Vec<Mount>,
    /// The volumes it mounts: directories of the state directory, shared.
    #[serde(default)]
    pub volumes: Vec<Volume>,
    /// The buckets it mounts, each node with its own FUSE client.
    #[serde(default)]
    pub buckets: Vec<Mounted>,
}

/// How nodes get their network identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkRequest {
    /// Namespaces when this machine allows them, else loopback addresses.
    Auto,
    /// A network namespace per node on a bridge; fail if not possible.
    Netns,
    /// A loopback address per node, sharing the host's network.
    Loopback,
}

pub struct PlanOptions<'a> {
    pub grace: Duration,
    pub network: NetworkRequest,
    pub base_env: Vec<(String, String)>,
    /// Values for the tasks' `secrets`, by name.
    pub secrets: &'a [(String, String)],
    /// The tasks' code and data, taken from their sources.
    pub files: &'a Files,
    pub submitted: String,
    pub capacity: &'a Capacity,
}

impl Plan {
    /// Plans a compiled group for this machine: picks, per task, the first
    /// resource candidate the machine can hold. Diagnostics point at the
    /// task at fault; the plan is `None` when one is an error.
    pub fn new(group: &Group, options: &PlanOptions<'_>) -> (Option<Self>, Vec<Diagnostic>) {
        let mut diagnostics = Vec::new();
        let mut tasks = Vec::new();
        let mut unresolved = Vec::new();
        for (index, task) in group.tasks.iter().enumerate() {
            let at = task.name_span;
            let mut report = |rule: Rule, message: String| {
                diagnostics.push(Diagnostic::new(rule, at, message).label("this task"));
            };
            let demands: Vec<Demand> = task.resources.candidates.iter().map(Demand::of).collect();
            let demand = demands.iter().find(|d| options.capacity.holds(d)).copied();
            if demand.is_none() {
                let wanted = demands
                    .iter()
                    .map(Demand::describe)
                    .collect::<Vec<_>>()
                    .join(" or ");
                report(
                    Rule::ExceedsLocalCapacity,
                    format!(
                        "task `{}` needs {wanted} per node; this machine offers {}",
                        task.name,
                        options.capacity.describe()
                    ),
                );
            }
            let mut envs: Vec<(String, String)> = task
                .envs
                .iter()
                .map(|e| (e.name.clone(), e.value.clone()))
                .collect();
            let (secrets, missing) = crate::secrets::resolve(task, options.secrets);
            envs.extend(secrets);
            unresolved.extend(missing);
            if let Some(Workdir::Git { url, .. }) = &task.workdir {
                report(
                    Rule::UnsupportedLocally,
                    format!(
                        "task `{}` has a git workdir ({url}); the local target runs tasks \
                             in a local directory only",
                        task.name
                    ),
                );
            }
            for ignored in not_applied(task) {
                report(
                    Rule::NotAppliedLocally,
                    format!("task `{}`: {ignored}", task.name),
                );
            }
            tasks.push(TaskPlan {
                name: task.name.clone(),
                num_nodes: task.num_nodes,
                setup: task.setup.clone(),
                run: task.run.clone(),
                envs,
                workdir: None,
                demand: demand.unwrap_or_default(),
                files: options.files.tasks.get(index).cloned().unwrap_or_default(),
                volumes: options
                    .files
                    .volumes
                    .get(index)
                    .cloned()
                    .unwrap_or_default(),
                buckets: options
                    .files
                    .buckets
                    .get(index)
                    .cloned()
                    .unwrap_or_default(),
            });
        }
        diagnostics.extend(unresolved);
        if diagnostics.iter().any(Diagnostic::is_error) {
            return (None, diagnostics);
        }
        let plan = Self {
            group: group.name.clone(),
            submitted: options.submitted.clone(),
            spec: GroupSpec::from_ir(group, options.grace),
            network: options.network,
            hostnames: group.inter_connection != InterConnection::Disabled,
            hostnames_required: group.inter_connection == InterConnection::Required,
            base_env: options.base_env.clone(),
            tasks,
            hold: false,
            pool_job: None,
            job_rank: None,
        };
        (Some(plan), diagnostics)
    }

    /// `{task}-{rank}.{group}`: the contract on every target.
    pub fn hostname(&self, task: usize, rank: u32) -> String {
        format!("{}-{rank}.{}", self.tasks[task].name, self.group)
    }

    pub fn primary(&self, task: usize) -> bool {
        self.spec.tasks[task].primary
    }

    /// Every (task, rank) of the group, in order.
    pub fn nodes(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.tasks
            .iter()
            .enumerate()
            .flat_map(|(t, task)| (0..task.num_nodes).map(move |r| (t, r)))
    }
}

/// What of a task this machine does not do, said once per kind.
fn not_applied(task: &Task) -> Vec<String> {
    let mut out = Vec::new();
    let any =
        |f: &dyn Fn(&skyc_compiler::ir::Candidate) -> bool| task.resources.candidates.iter().any(f);
    if any(&|c| c.infra.as_ref().is_some_and(|i| i.cloud.is_some())) {
        out.push("`infra` is not applied: the local target runs on this machine".to_owned());
    }
    if any(&|c| c.use_spot) {
        out.push("`use_spot` is not applied: local nodes are never preempted".to_owned());
    }
    if any(&|c| c.image.is_some()) {
        out.push(
            "`image_id` is not applied: commands run on this machine, not in the image".to_owned(),
        );
    }
    if any(&|c| c.instance_type.is_some() || c.disk_tier.is_some() || c.network_tier.is_some()) {
        out.push("instance types and disk or network tiers are not applied locally".to_owned());
    }
    if any(&|c| c.accelerator.is_some()) {
        out.push(
            "the accelerator type is not checked locally; only the count is reserved from this \
             machine's GPUs"
                .to_owned(),
        );
    }
    if task
        .file_mounts
        .iter()
        .any(|m| !delivered(m) && skyc_targets::storage::to_mount(m).is_none())
    {
        out.push(
            "file mounts from buckets other than S3 and GCS are not applied on this machine"
                .to_owned(),
        );
    }
    out
}

/// SkyPilot's run timestamp: `2026-11-21-09-30-00-123456`, in UTC.
pub fn run_timestamp(unix_ms: i64) -> String {
    let ts = jiff::Timestamp::from_millisecond(unix_ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let micros = unix_ms.rem_euclid(1000) * 1000;
    format!("{}-{micros:06}", ts.strftime("%Y-%m-%d-%H-%M-%S"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(run_timestamp(0), "1970-01-01-00-00-00-000000");
        assert_eq!(
            run_timestamp(1_795_254_600_123),
            "2026-11-21-09-50-00-123000"
        );
        assert_eq!(run_timestamp(951_782_400_000), "2000-02-29-00-00-00-000000");
        assert_eq!(run_timestamp(-1), "1969-12-31-23-59-59-999000");
    }
}
