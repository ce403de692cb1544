//! Pools on AWS: what `skyc pool apply --target aws` and `skyc run --pool`
//! store (docs/pools.md, "On AWS").
//!
//! - A worker is the pool file's group run on instances of its own (one
//!   per node, of the type SkyPilot's catalog rule chooses, tagged with
//!   the pool's name), whose agents hold after setup and run the jobs the
//!   runtime hands them ([`PoolPlan`]: the run's plan; it holds because
//!   its store row is a worker's, `Adoption::role`).
//! - A job is a group of the pool whose plan is its script
//!   ([`JobPlan`]): the runtime writes it to each node of the worker the
//!   pool engine chose, over the worker's SSH, and follows it there.

use super::plan::{RunOptions, RunPlan};
use crate::policy::GroupSpec;
use crate::pool::{JobSpec, PoolSpec, Room};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use skyc_compiler::Diagnostic;
use skyc_compiler::ir::{self, Group};
use skyc_targets::cloud::{self, Catalog};
use skyc_targets::shell::{is_variable_name, quote};
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

/// A pool as the AWS target runs it: each worker a run of [`RunPlan`].
pub type PoolPlan = crate::pool::PoolPlan<RunPlan>;

impl PoolPlan {
    /// The pool file's group, planned for AWS under the pool's `name`:
    /// the run every worker is made from (each worker its own run of it,
    /// see [`RunPlan::for_worker`]), and what a worker's node offers jobs
    /// (the chosen instance type's vCPUs, memory and accelerators). No
    /// plan when the diagnostics hold an error.
    pub fn for_pool(
        group: &Group,
        pool: &ir::Pool,
        name: &str,
        catalog: &Catalog,
        options: &RunOptions<'_>,
    ) -> Result<(Option<Self>, Vec<Diagnostic>), String> {
        let (run, diagnostics) = RunPlan::for_run(group, catalog, options)?;
        let Some(mut worker) = run else {
            return Ok((None, diagnostics));
        };
        // Each worker makes its own key (`RunPlan::for_worker`): the run's
        // is not needed.
        let _ = std::fs::remove_file(worker.key.with_extension("pub"));
        let _ = std::fs::remove_file(&worker.key);
        if let Some(dir) = worker.key.parent() {
            let _ = std::fs::remove_dir(dir);
        }
        worker.plan.pool = Some(name.to_owned());
        // A worker whose setup fails is replaced by the pool, not restarted.
        for t in &mut worker.plan.spec.tasks {
            t.max_restarts_on_errors = 0;
            t.recover_on_exit_codes.clear();
        }
        // The instance type chosen is in the spec's task (the build is
        // pure and quick: built again rather than carried through).
        let doc = cloud::build(group, catalog).document.unwrap_or_default();
        let chosen = &doc["tasks"][0];
        let offer = Room {
            cpus: chosen["vcpus"].as_f64().unwrap_or(0.0),
            memory_gb: chosen["memory_gb"].as_f64().unwrap_or(0.0),
            gpus: accelerators(&chosen["accelerator"]),
        };
        let task = &group.tasks[0];
        // The nodes' requests hold all a worker is made of (the instance
        // type and image, disks, and in the boot script the setup, envs
        // and workdir), and the secrets and the buckets it mounts are
        // delivered to it: a change of any is a new generation of
        // workers. (Only a worker that mounts carries `mounts`, so the
        // others keep their key.)
        let mut made_of = serde_json::json!({
            "nodes": worker.plan.nodes,
            "secrets": worker.secrets,
        });
        if !worker.plan.mounts.is_empty() {
            made_of["mounts"] = serde_json::json!(worker.plan.mounts);
            made_of["policies"] = serde_json::json!(worker.plan.policies);
        }
        let spec = PoolSpec::new(pool, task.num_nodes, offer, &made_of);
        Ok((Some(PoolPlan { pool: spec, worker }), diagnostics))
    }
}

/// `A100:8` as 8; none as 0.
fn accelerators(value: &Value) -> f64 {
    value
        .as_str()
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0.0)
}

impl RunPlan {
    /// The run of one worker of a pool: the pool's run under a name of its
    /// own (`{run}-w{gid}`), so each worker's instances, key pair and
    /// security group are found as its own, with an SSH key of its own in
    /// `dir` (made once: a new supervisor finds it there), removed with
    /// the worker like a group's.
    pub fn for_worker(mut self, gid: i64, dir: &Path) -> Result<RunPlan, String> {
        self.plan.run = format!("{}-w{gid}", self.plan.run);
        if let Some(bucket) = &mut self.plan.bucket {
            bucket.name = crate::aws::control::files::worker_bucket(&bucket.name, gid);
        }
        let key = dir.join("id_ed25519");
        let key = if key.exists() && key.with_extension("pub").exists() {
            key
        } else {
            let _ = std::fs::remove_dir_all(dir);
            super::plan::make_key(dir, &self.plan.key_pair())?
        };
        let public_key = std::fs::read_to_string(key.with_extension("pub"))
            .map_err(|e| format!("the worker's key: {e}"))?;
        if let Some(ssh) = &mut self.plan.ssh {
            ssh.public_key = public_key.trim().to_owned();
        }
        self.key = key;
        Ok(self)
    }
}

/// What `skyc run --pool NAME` stores for each job of a pool on AWS.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobPlan {
    pub spec: GroupSpec,
    pub pool_job: JobSpec,
    /// The job's name (`SKYPILOT_JOBGROUP_NAME`) and submission time, as
    /// SkyPilot writes it in task ids.
    pub group: String,
    pub submitted: String,
    /// The end of the job's `job.sh` (see [`JobPlan::job_sh`]): its
    /// `envs`, secrets and rank, then its `run`.
    pub script: String,
    /// Seconds between SIGTERM and SIGKILL when the job is stopped.
    pub grace_secs: u64,
}

impl JobPlan {
    /// The plan of one job of `group` (one task, checked to fit the
    /// pool), ranked by `job`. No plan when a value cannot be carried (a
    /// located error) or a secret has no value.
    pub fn new(
        group: &Group,
        job: JobSpec,
        secrets: &[(String, String)],
        grace: Duration,
        submitted: String,
    ) -> (Option<JobPlan>, Vec<Diagnostic>) {
        let task = &group.tasks[0];
        let (found, mut diagnostics) = crate::secrets::resolve(task, secrets);
        let mut script = String::new();
        let mut bad = None;
        let envs = task
            .envs
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_str()));
        let ranks = job.env();
        let ranks = ranks.iter().map(|(k, v)| (*k, v.as_str()));
        let found_env = found.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        for (name, value) in envs.chain(found_env).chain(ranks) {
            if !is_variable_name(name) || value.contains('\0') {
                bad = Some(name.to_owned());
                continue;
            }
            let _ = writeln!(script, "export {name}={}", quote(value));
        }
        let run = task.run.as_deref().unwrap_or(":");
        if run.contains('\0') {
            bad = Some("run".to_owned());
        }
        script.push_str(run);
        script.push('\n');
        if let Some(what) = bad {
            diagnostics.push(
                Diagnostic::new(
                    skyc_compiler::Rule::CloudUnrepresentable,
                    task.name_span,
                    format!(
                        "job `{}`: `{}` cannot be written to a shell script (a NUL byte, \
                         or not a variable name)",
                        task.name,
                        what.escape_debug()
                    ),
                )
                .label("this job"),
            );
        }
        if diagnostics.iter().any(Diagnostic::is_error) {
            return (None, diagnostics);
        }
        let plan = JobPlan {
            spec: GroupSpec::from_ir(group, grace),
            pool_job: job,
            group: group.name.clone(),
            submitted,
            script,
            grace_secs: grace.as_secs_f64().ceil() as u64,
        };
        (Some(plan), diagnostics)
    }

    /// The whole `job.sh` of the job (group `gid`) on a worker's node
    /// whose directory is `node_dir`: the worker's `envs`, then the job's
    /// own contract as a node of the job (its ids and its number of
    /// nodes, the addresses of the worker nodes it runs on, the GPUs the
    /// pool gave it: `gpus`, indices on the worker's node), then its own
    /// `envs`, secrets and rank, then its `run`.
    pub fn job_sh(&self, node_dir: &str, gid: i64, gpus: &[u32]) -> String {
        let task = &self.spec.tasks[0];
        let task_id = format!(
            "sky-managed-{}_{}_{}_{gid}-0",
            self.submitted, self.group, task.name
        );
        let visible: Vec<String> = gpus.iter().map(u32::to_string).collect();
        let mut s = format!(". {}\n", quote(&format!("{node_dir}/envs.sh")));
        for (k, v) in [
            ("SKYPILOT_JOBGROUP_NAME", self.group.clone()),
            ("SKYPILOT_MANAGED_JOB_ID", gid.to_string()),
            ("SKYPILOT_INTERNAL_JOB_ID", gid.to_string()),
            ("SKYPILOT_TASK_ID", task_id.clone()),
            ("SKYPILOT_TASK_IDS", task_id),
            ("SKYPILOT_NUM_NODES", task.num_nodes.to_string()),
            ("SKYPILOT_NUM_GPUS_PER_NODE", gpus.len().to_string()),
            ("CUDA_VISIBLE_DEVICES", visible.join(",")),
        ] {
            let _ = writeln!(s, "export {k}={}", quote(&v));
        }
        // The worker's first nodes, as many as the job has.
        let _ = writeln!(
            s,
            "SKYPILOT_NODE_IPS=$(printf '%s\\n' \"$SKYPILOT_NODE_IPS\" | head -n {})\n\
             export SKYPILOT_NODE_IPS",
            task.num_nodes
        );
        s.push_str(&self.script);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_script_gives_it_its_own_contract_and_values_verbatim() {
        let yaml = "name: job\nnum_nodes: 2\nenvs:\n  A: \"it's $HOME `x`\"\nsecrets:\n  TOKEN: null\n\
                    run: |\n  echo \"$A|$TOKEN|$SKYPILOT_JOB_RANK/$SKYPILOT_NUM_JOBS|$SKYPILOT_NUM_NODES\"\n  \
                    echo \"$SKYPILOT_NODE_IPS|$CUDA_VISIBLE_DEVICES|$POOL|$SKYPILOT_MANAGED_JOB_ID\"\n";
        let c = skyc_compiler::compile("job.yaml", yaml.as_bytes(), &Default::default());
        let group = c.group.expect("a group");
        let job = JobSpec {
            room: None,
            rank: 2,
            num_jobs: 4,
        };
        let secrets = [("TOKEN".to_owned(), "s3cr'et\"".to_owned())];
        let (plan, found) = JobPlan::new(&group, job, &secrets, Duration::from_secs(3), "t".into());
        assert!(found.is_empty(), "{found:?}");
        let plan = plan.expect("a plan");
        let dir = std::env::temp_dir().join(format!("skyc-job-sh-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("envs.sh"), "export POOL=from-pool\n").unwrap();
        let sh = plan.job_sh(&dir.display().to_string(), 17, &[1, 3]);
        std::fs::write(dir.join("job.sh"), &sh).unwrap();
        let out = std::process::Command::new("bash")
            .arg(dir.join("job.sh"))
            .env("SKYPILOT_NODE_IPS", "10.0.0.1\n10.0.0.2\n10.0.0.3")
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "it's $HOME `x`|s3cr'et\"|2/4|2\n10.0.0.1\n10.0.0.2|1,3|from-pool|17\n",
            "{sh}"
        );
        assert_eq!(plan.grace_secs, 3);
    }

    #[test]
    fn accelerators_are_counted_from_the_spec() {
        assert_eq!(accelerators(&serde_json::json!("A100:8")), 8.0);
        assert_eq!(accelerators(&serde_json::json!("T4:1")), 1.0);
        assert_eq!(accelerators(&Value::Null), 0.0);
    }
}
