//! `job_recovery` as each node Job's failure handling.
//!
//! One node is one 1-pod Job, so the Job's own budget is per node:
//! - preemption, eviction and drain (pod condition `DisruptionTarget`) are
//!   ignored: the pod is replaced and nothing is counted, as SkyPilot
//!   recovers preemptions for free;
//! - `recover_on_exit_codes` are ignored the same way: retried, not
//!   counted;
//! - any other failure counts against `backoffLimit =
//!   max_restarts_on_errors`.
//!
//! The pod's `restartPolicy` must be `Never` for a podFailurePolicy, and
//! `podReplacementPolicy: Failed` keeps two pods from ever holding one
//! hostname.

use super::Lowerer;
use super::names::CONTAINER;
use serde_json::{Map, Value, json};
use skyc_compiler::ir::Task;

/// SkyPilot's built-in strategies; both mean "recover from preemption",
/// which the Job does by replacing the pod.
const BUILT_IN: &[&str] = &["EAGER_NEXT_REGION", "FAILOVER"];

impl Lowerer<'_> {
    /// Reports a strategy Kubernetes cannot follow; once per task.
    pub(super) fn check_strategy(&mut self, task: &Task) {
        let r = &task.recovery;
        if !BUILT_IN.contains(&r.strategy.as_str()) {
            self.warn(
                task,
                format!(
                    "`{}`: the recovery strategy `{}` has no Kubernetes meaning; a preempted pod is replaced in place",
                    task.name, r.strategy
                ),
            );
        }
    }
}

/// Inserts `backoffLimit`, `podReplacementPolicy` and `podFailurePolicy`
/// into a node's Job spec.
pub(super) fn recovery(task: &Task, spec: &mut Map<String, Value>) {
    let r = &task.recovery;
    spec.insert("backoffLimit".into(), json!(r.max_restarts_on_errors));
    spec.insert("podReplacementPolicy".into(), json!("Failed"));
    let mut rules = vec![json!({
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    })];
    // Exit code 0 is success, and the API server forbids it in `In`.
    let mut codes: Vec<u8> = r
        .recover_on_exit_codes
        .iter()
        .copied()
        .filter(|&c| c != 0)
        .collect();
    codes.sort_unstable();
    codes.dedup();
    if !codes.is_empty() {
        rules.push(json!({
            "action": "Ignore",
            "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": codes},
        }));
    }
    spec.insert("podFailurePolicy".into(), json!({ "rules": rules }));
}
