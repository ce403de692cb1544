//! The JobSet: its replicated Jobs (one per node of a Job Group, one per
//! step of a pipeline), the success policy, the termination-delay gate,
//! and every default the JobSet webhook would add, written out so the
//! object means the same with or without the webhook and validates
//! against the bare CRD.

use super::names::{self, CONTAINER};
use super::pod::{Pods, node_labels};
use super::recovery::recovery;
use super::resources::Shape;
use super::{KUEUE_MAX_PODSETS, Lowerer, MAX_OBJECT_BYTES, Parts, metadata};
use serde_json::{Map, Value, json};
use skyc_compiler::ir::{Execution, Role, Task};
use skyc_compiler::{Diagnostic, Rule, Severity};

impl Lowerer<'_> {
    pub(super) fn jobset(&mut self) -> Option<Value> {
        let g = self.group;
        let (built, targets) = match g.execution {
            Execution::Parallel => self.node_rjobs(),
            Execution::Serial => self.step_rjobs(),
        };
        let stopped = built.full();
        let rjobs = built.list;
        if self.options.queue.is_some() && rjobs.len() > KUEUE_MAX_PODSETS {
            let layout = match g.execution {
                Execution::Parallel if self.needs_gate() => "one per node, plus the delay gate",
                Execution::Parallel => "one per node",
                Execution::Serial => "one per step",
            };
            self.push(
                Diagnostic::new(
                    Rule::K8sPodSetCap,
                    self.group_span(),
                    format!(
                        "this {} becomes {} replicated Jobs ({layout}); Kueue admits at most {KUEUE_MAX_PODSETS} PodSets per workload before v0.18 (10 in v0.18, 18 from v0.19)",
                        self.what(),
                        rjobs.len(),
                    ),
                )
                .label("too many PodSets for older Kueue")
                .severity(Severity::Warning)
                .help(format!(
                    "check the cluster's Kueue version, or queue the {} without Kueue",
                    self.what()
                )),
            );
        }
        let jobset = self.jobset_object(targets, rjobs);
        // Not measured when building stopped: it is past the limit.
        let size = (!stopped).then(|| jobset.to_string().len());
        if size.is_none_or(|s| s > MAX_OBJECT_BYTES) {
            let (what, help) = match g.execution {
                Execution::Parallel => (
                    format!(
                        "{} nodes, one pod template each",
                        g.tasks.iter().map(|t| u64::from(t.num_nodes)).sum::<u64>()
                    ),
                    "these self-contained manifests hold one replicated Job per node; `skyc run --target k8s` runs a group of any size (one pod per node under an anchor JobSet, which `skyc build --target k8s --layout pods` prints), or split the group",
                ),
                Execution::Serial => (
                    format!("{} steps, one pod template each", g.tasks.len()),
                    "these self-contained manifests hold one replicated Job per step; `skyc run --target k8s` runs a pipeline of any length (`skyc build --target k8s --layout pods` prints its objects), or split the pipeline into several files",
                ),
            };
            self.push(
                Diagnostic::new(
                    Rule::K8sTooLarge,
                    self.group_span(),
                    match size {
                        Some(size) => format!(
                            "the JobSet of this {} is {size} bytes ({what}); the API server stores at most {MAX_OBJECT_BYTES}",
                            self.what()
                        ),
                        None => format!(
                            "the JobSet of this {} would be larger than the {MAX_OBJECT_BYTES} bytes the API server stores ({what})",
                            self.what()
                        ),
                    },
                )
                .label("JobSet too large")
                .help(help),
            );
        }
        Some(jobset)
    }

    /// The JobSet of `rjobs`, complete when the `targets` are: the
    /// headless Service `{group}` of the pods' subdomain comes from its
    /// `network`.
    pub(super) fn jobset_object(&self, targets: Vec<Value>, rjobs: Vec<Value>) -> Value {
        let g = self.group;
        let mut labels = Map::new();
        labels.insert("skyc.io/group".into(), json!(g.name));
        if let Some(q) = &self.options.queue {
            labels.insert("kueue.x-k8s.io/queue-name".into(), json!(q));
        }
        json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": metadata(&g.name, self.options, Value::Object(labels)),
            "spec": {
                "network": {
                    "enableDNSHostnames": true,
                    "subdomain": g.name,
                    "publishNotReadyAddresses": true,
                },
                // The webhook's default, written out. A pipeline's order is
                // in `dependsOn`, which excludes only `InOrder`.
                "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
                "successPolicy": {"operator": "All", "targetReplicatedJobs": targets},
                "replicatedJobs": rjobs,
            },
        })
    }

    /// A Job Group: one replicated Job `{task}-{i}` per node, all started
    /// at once; success when every node of every primary (and the gate,
    /// when some auxiliary has a delay) completed.
    fn node_rjobs(&mut self) -> (Rjobs, Vec<Value>) {
        let g = self.group;
        let mut rjobs = Rjobs::default();
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
                if rjobs.full() {
                    break;
                }
                let rjob = names::node_name(&task.name, i);
                if task.role == Role::Primary {
                    targets.push(json!(rjob));
                }
                rjobs.push(json!({
                    "name": rjob,
                    "replicas": 1,
                    "template": self.job_template(task, Pods::Node(i), &shape, &parts),
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
        (rjobs, targets)
    }

    /// The Job template of `pods` of `task`: how many pods, its recovery,
    /// the pod template, and the annotations a runtime reads back from the
    /// cluster.
    pub(super) fn job_template(
        &self,
        task: &Task,
        pods: Pods,
        shape: &Shape,
        parts: &Parts,
    ) -> Value {
        let mut spec = Map::new();
        match pods {
            Pods::Node(_) => {
                // NonIndexed: the Job controller would overwrite the
                // hostname of an Indexed Job's pod.
                spec.insert("completionMode".into(), json!("NonIndexed"));
                spec.insert("completions".into(), json!(1));
                spec.insert("parallelism".into(), json!(1));
            }
            Pods::Step => {
                // Every node at once, each index (rank) succeeding once.
                spec.insert("completionMode".into(), json!("Indexed"));
                spec.insert("completions".into(), json!(task.num_nodes));
                spec.insert("parallelism".into(), json!(task.num_nodes));
            }
        }
        recovery(task, &mut spec);
        spec.insert("template".into(), self.pod(task, pods, shape, parts));
        let mut annotations = Map::new();
        annotations.insert(
            "skyc.io/max-restarts-on-errors".into(),
            json!(task.recovery.max_restarts_on_errors.to_string()),
        );
        // Only a Job Group's auxiliaries outlive anything.
        if let (Pods::Node(_), Some(d)) = (pods, task.termination_delay_secs) {
            annotations.insert(
                "skyc.io/termination-delay-seconds".into(),
                json!(d.to_string()),
            );
        }
        json!({
            "metadata": {"labels": node_labels(&self.group.name, task, pods), "annotations": annotations},
            "spec": spec,
        })
    }
}

/// Replicated Jobs as they are built, up to the API server's limit: past
/// it the JobSet is an error anyway, and a file of millions of nodes (or
/// thousands of steps) must not first build a pod template for each.
#[derive(Default)]
pub(super) struct Rjobs {
    pub list: Vec<Value>,
    bytes: usize,
}

impl Rjobs {
    /// Whether the replicated Jobs alone are more than the API server
    /// stores; later ones are not built.
    pub(super) fn full(&self) -> bool {
        self.bytes > MAX_OBJECT_BYTES
    }

    pub(super) fn push(&mut self, rjob: Value) {
        self.bytes += rjob.to_string().len();
        self.list.push(rjob);
    }
}

/// The replicated Job that completes the JobSet: it starts with no pod
/// (`parallelism: 0`), and the runtime scales it to 1 once every
/// auxiliary's delay has passed; its pod exits 0.
pub(super) fn gate(group: &str, image: &str) -> Value {
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
