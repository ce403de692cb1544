//! A pool's worker in the runtime's layout (`skyc pool apply --target
//! k8s`, and `skyc build POOLFILE --target k8s` to review it): the pool's
//! one task lowered as a group of its own ([`super::pods`]), whose nodes
//! run the pool's setup and then hold, ready for the pool's jobs.
//!
//! A worker is the same anchor JobSet and one pod per node attempt as any
//! group the runtime runs, so everything the runtime does for groups
//! holds for workers too: only its engine creates a pod, a pod deleted or
//! evicted is a lost node (the pool replaces the worker), and deleting
//! the JobSet deletes every pod. What differs is the node's `run`: it
//! writes the node's environment and a readiness marker into
//! [`WORKER_DIR`], then sleeps until the pod is deleted. The container's
//! readiness probe reads the marker, so the pod's `Ready` condition is
//! "setup done" as the kubelet sees it, with no request of the runtime's.
//! Jobs are started in the pod through the `pods/exec` subresource
//! (`skyc_runtime::k8s::exec`).

use super::Options;
use super::names::{self, CONTAINER};
use super::pods::{self, Supervised};
use serde_json::json;
use skyc_compiler::ir::Group;

/// Where a worker node keeps what its jobs need: `env` (the node's
/// environment after setup, as `export -p` writes it), `ready`, and one
/// directory per job attempt.
pub const WORKER_DIR: &str = "/tmp/skyc";

/// The `run` of every worker node: keep the environment setup ran in,
/// mark the node ready, and hold until the pod is deleted (the
/// entrypoint passes SIGTERM to this process group).
pub const HOLD: &str = r#"# skyc: the pool's setup is done; this node now holds for the pool's jobs.
mkdir -p /tmp/skyc
export -p >/tmp/skyc/env
: >/tmp/skyc/ready
echo "skyc: worker node ready"
while :; do
  sleep 3600
done
"#;

/// How often the kubelet reads the readiness marker.
const PROBE_PERIOD_SECONDS: u32 = 2;

/// The name of worker `n` of pool `pool`: a group name on the cluster,
/// as `skyc pool status` numbers it.
pub fn worker_name(pool: &str, n: u64) -> String {
    format!("{pool}-{n}")
}

/// The name a pool's workers are lowered under before they are named:
/// as long as any worker's name can be, so that what fits it fits them.
pub fn placeholder(pool: &str) -> String {
    worker_name(pool, u64::from(u32::MAX))
}

/// Why a pool name cannot name a worker's objects on Kubernetes, if it
/// cannot.
pub fn check_pool_name(pool: &str) -> Result<(), String> {
    let worker = placeholder(pool);
    if names::is_dns1035_label(&worker) {
        Ok(())
    } else {
        Err(format!(
            "pool `{pool}`: on the k8s target a pool's name names its workers' objects \
             (`{pool}-N`), so it is lowercase letters, digits and `-`, starts with a letter, \
             and has at most {} characters",
            63 - (worker.len() - pool.len())
        ))
    }
}

/// The worker of the pool file `group`, named `name`: its objects and
/// node templates, whose nodes hold after setup.
pub fn lower(group: &Group, name: &str, options: &Options) -> Supervised {
    let mut worker = group.clone();
    worker.name = name.to_owned();
    worker.pool = None;
    for task in &mut worker.tasks {
        task.run = Some(HOLD.to_owned());
    }
    let mut lowered = pods::lower(&worker, options);
    for template in &mut lowered.templates {
        for c in template["spec"]["containers"]
            .as_array_mut()
            .into_iter()
            .flatten()
            .filter(|c| c["name"] == CONTAINER)
        {
            c["readinessProbe"] = json!({
                "exec": {"command": ["cat", format!("{WORKER_DIR}/ready")]},
                "periodSeconds": PROBE_PERIOD_SECONDS,
            });
        }
    }
    lowered
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_names() {
        assert!(check_pool_name("train").is_ok());
        assert!(check_pool_name("Train").is_err());
        assert!(check_pool_name("my_pool").is_err());
        assert!(check_pool_name("0pool").is_err());
        assert!(check_pool_name(&"a".repeat(52)).is_ok());
        let long = check_pool_name(&"a".repeat(53)).unwrap_err();
        assert!(long.contains("at most 52 characters"), "{long}");
    }

    #[test]
    fn the_hold_script_writes_what_the_probe_reads() {
        assert!(HOLD.contains(&format!("{WORKER_DIR}/ready")));
        assert!(HOLD.contains(&format!("{WORKER_DIR}/env")));
    }
}
