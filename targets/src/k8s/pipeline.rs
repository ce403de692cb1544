//! A pipeline: one replicated Job per step, each after the previous one
//! completed.
//!
//! A step is one Indexed Job of `num_nodes` pods, so one replicated Job
//! holds all of it and the next step waits for it with a single
//! `dependsOn: [{name: previous step, status: Complete}]`: created only
//! once every pod of the previous step succeeded. A chain needs no more
//! than one entry, which is all JobSet v0.8 accepts (its CRD allows one;
//! later ones still document a single entry). The first step has none, as
//! JobSet requires.
//!
//! A step that fails for good (its Job past `backoffLimit`) fails the
//! JobSet, as no `failurePolicy` is written; JobSet never creates the steps
//! after it. The success policy names every step: the pipeline succeeds
//! when all of them did. Steps have no group hostnames, no termination
//! delay and no gate: every step is primary.

use super::Lowerer;
use super::jobset::Rjobs;
use super::names::{self, MAX_INDEXED_PARALLELISM, POD_NAME_SUFFIX_LEN};
use super::pod::Pods;
use serde_json::{Map, Value, json};
use skyc_compiler::Rule;
use skyc_compiler::ir::Task;

impl Lowerer<'_> {
    /// The steps' replicated Jobs, in order, and the success targets.
    pub(super) fn step_rjobs(&mut self) -> (Rjobs, Vec<Value>) {
        let g = self.group;
        let mut rjobs = Rjobs::default();
        let mut previous: Option<&str> = None;
        for task in &g.tasks {
            let Some(shape) = self.shape(task) else {
                continue;
            };
            let parts = self.task_parts(task);
            self.check_strategy(task);
            if rjobs.full() {
                // Every step is still checked, so all findings show.
                continue;
            }
            let mut rjob = Map::new();
            rjob.insert("name".into(), json!(task.name));
            rjob.insert("replicas".into(), json!(1));
            if let Some(p) = previous {
                rjob.insert(
                    "dependsOn".into(),
                    json!([{"name": p, "status": "Complete"}]),
                );
            }
            rjob.insert(
                "template".into(),
                self.job_template(task, Pods::Step, &shape, &parts),
            );
            rjobs.push(Value::Object(rjob));
            previous = Some(&task.name);
        }
        let targets = g.tasks.iter().map(|t| json!(t.name)).collect();
        (rjobs, targets)
    }

    /// A step names its Job `{group}-{step}-0` and its pods
    /// `{group}-{step}-0-{i}-xxxxx`; the JobSet webhook requires both to be
    /// DNS-1035 labels, and the API server caps an Indexed Job's
    /// parallelism.
    pub(super) fn check_step_names(&mut self, task: &Task) {
        let job = names::job_name(&self.group.name, &task.name);
        if !names::is_dns1123_label(&task.name) {
            self.error(
                Rule::K8sInvalidName,
                task,
                format!(
                    "the step `{}` is not a DNS-1123 label, so it cannot name the step's Job `{job}`",
                    task.name
                ),
                "not a DNS label",
                Some("use lower-case letters, digits and `-`, starting and ending with a letter or digit"),
            );
        } else if task.num_nodes > MAX_INDEXED_PARALLELISM {
            self.error(
                Rule::K8sUnsupported,
                task,
                format!(
                    "the step `{}` has {} nodes; its Indexed Job may run at most {MAX_INDEXED_PARALLELISM} pods at once",
                    task.name, task.num_nodes
                ),
                "too many nodes for one Job",
                Some(&format!("reduce `num_nodes` to {MAX_INDEXED_PARALLELISM} or fewer")),
            );
        } else {
            let last = names::indexed_pod_hostname(&job, task.num_nodes.saturating_sub(1));
            let len = last.len() + POD_NAME_SUFFIX_LEN;
            if len > 63 {
                self.error(
                    Rule::K8sInvalidName,
                    task,
                    format!(
                        "the pods of the step `{}` are named `{last}-xxxxx`, {len} characters; JobSet requires 63 at most",
                        task.name
                    ),
                    "name too long",
                    Some(&format!(
                        "shorten the pipeline or step name by {} characters",
                        len - 63
                    )),
                );
            }
        }
    }
}
