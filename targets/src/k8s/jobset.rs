//! The JobSet: one replicated Job per node, the success policy over the
//! primary tasks, the termination-delay gate, and every default the JobSet
//! webhook would add, written out so the object means the same with or
//! without the webhook and validates against the bare CRD.

use super::names::{self, CONTAINER};
use super::pod::node_labels;
use super::recovery::recovery;
use super::{KUEUE_MAX_PODSETS, Lowerer, MAX_OBJECT_BYTES, metadata};
use serde_json::{Map, Value, json};
use skyc_compiler::ir::Role;
use skyc_compiler::{Diagnostic, Rule, Severity};

impl Lowerer<'_> {
    pub(super) fn jobset(&mut self) -> Option<Value> {
        let g = self.group;
        let mut rjobs = Vec::new();
        let mut targets = Vec::new();
        let mut gate_image = None;
        for task in &g.tasks {
            let Some(shape) = self.shape(task) else {
                continue;
            };
            let parts = self.task_parts(task);
            self.check_strategy(task);
            gate_image.get_or_insert_with(|| shape.image.clone());
            for i in 0..task.num_nodes {
                let rjob = names::node_name(&task.name, i);
                if task.role == Role::Primary {
                    targets.push(json!(rjob));
                }
                let mut spec = Map::new();
                // NonIndexed: the Job controller would overwrite the
                // hostname of an Indexed Job's pod.
                spec.insert("completionMode".into(), json!("NonIndexed"));
                spec.insert("completions".into(), json!(1));
                spec.insert("parallelism".into(), json!(1));
                recovery(task, &mut spec);
                spec.insert("template".into(), self.pod(task, i, &shape, &parts));
                let mut annotations = Map::new();
                annotations.insert(
                    "skyc.io/max-restarts-on-errors".into(),
                    json!(task.recovery.max_restarts_on_errors.to_string()),
                );
                if let Some(d) = task.termination_delay_secs {
                    annotations.insert(
                        "skyc.io/termination-delay-seconds".into(),
                        json!(d.to_string()),
                    );
                }
                rjobs.push(json!({
                    "name": rjob,
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": node_labels(&g.name, task, i), "annotations": annotations},
                        "spec": spec,
                    },
                }));
            }
        }
        if self.needs_gate() {
            targets.push(json!(names::GATE));
            rjobs.push(gate(
                &g.name,
                gate_image.as_deref().unwrap_or(&self.options.image),
            ));
        }
        if self.options.queue.is_some() && rjobs.len() > KUEUE_MAX_PODSETS {
            self.push(
                Diagnostic::new(
                    Rule::K8sPodSetCap,
                    self.group_span(),
                    format!(
                        "this group becomes {} replicated Jobs (one per node{}); Kueue admits at most {KUEUE_MAX_PODSETS} PodSets per workload before v0.18 (10 in v0.18, 18 from v0.19)",
                        rjobs.len(),
                        if self.needs_gate() { ", plus the delay gate" } else { "" }
                    ),
                )
                .label("too many PodSets for older Kueue")
                .severity(Severity::Warning)
                .help("check the cluster's Kueue version, or queue the group without Kueue"),
            );
        }
        let mut labels = Map::new();
        labels.insert("skyc.io/group".into(), json!(g.name));
        if let Some(q) = &self.options.queue {
            labels.insert("kueue.x-k8s.io/queue-name".into(), json!(q));
        }
        let jobset = json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": metadata(&g.name, self.options, Value::Object(labels)),
            "spec": {
                "network": {
                    "enableDNSHostnames": true,
                    "subdomain": g.name,
                    "publishNotReadyAddresses": true,
                },
                "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
                "successPolicy": {"operator": "All", "targetReplicatedJobs": targets},
                "replicatedJobs": rjobs,
            },
        });
        let size = jobset.to_string().len();
        if size > MAX_OBJECT_BYTES {
            let nodes: u32 = g.tasks.iter().map(|t| t.num_nodes).sum();
            self.push(
                Diagnostic::new(
                    Rule::K8sTooLarge,
                    self.group_span(),
                    format!(
                        "the JobSet of this group is {size} bytes ({nodes} nodes, one pod template each); the API server stores at most {MAX_OBJECT_BYTES}"
                    ),
                )
                .label("JobSet too large")
                .help("the Kubernetes target lays out one replicated Job per node; split the group or reduce `num_nodes`"),
            );
        }
        Some(jobset)
    }
}

/// The replicated Job that completes the JobSet: it starts with no pod
/// (`parallelism: 0`), and the runtime scales it to 1 once every
/// auxiliary's delay has passed; its pod exits 0.
fn gate(group: &str, image: &str) -> Value {
    let labels = json!({"skyc.io/group": group, "skyc.io/role": "gate"});
    json!({
        "name": names::GATE,
        "replicas": 1,
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "completionMode": "NonIndexed",
                "completions": 1,
                "parallelism": 0,
                "backoffLimit": 0,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "restartPolicy": "Never",
                        "enableServiceLinks": false,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{
                            "name": CONTAINER,
                            "image": image,
                            "command": ["/bin/sh", "-c", "exit 0"],
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "16Mi"},
                                "limits": {"memory": "16Mi"},
                            },
                        }],
                    },
                },
            },
        },
    })
}
