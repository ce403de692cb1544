//! The layout skyc's runtime applies (`skyc run --target k8s`, and
//! `skyc build --target k8s --layout pods` to review it).
//!
//! The runtime, not a controller, starts every node: each attempt of each
//! node is exactly one pod, `{group}-{task}-{rank}-{attempt}`, created
//! when the engine decides the attempt and never replaced by anything
//! else. A Job would replace a failed or evicted pod on its own (its
//! backoff, `podFailurePolicy: Ignore`), and JobSet reacts to a failed
//! Job only by failing or restarting the whole set, so neither may own a
//! node's pod when the engine counts restarts.
//!
//! The JobSet stays, as the group's anchor: its only replicated Job is the
//! gate (no pod until the runtime opens it), its `network` gives the
//! headless Service `{group}` that publishes every pod with
//! `hostname: {task}-{rank}` and `subdomain: {group}` as
//! `{task}-{rank}.{group}` (JobSet selects the pods by the
//! `jobset.sigs.k8s.io/jobset-name` label, which node pods carry), its
//! end is the group's end as `kubectl get jobset` shows it, and deleting
//! it deletes the node pods (their owner). Nothing in it grows with the
//! number of nodes, so a group of any size is a few small objects and one
//! pod per node.

use super::names::{self, CONTAINER};
use super::pod::Pods;
use super::{Layout, Lowerer, Manifests, Options};
use serde_json::{Map, Value, json};
use skyc_compiler::ir::Group;

/// Why the runtime's layout takes no Kueue queue.
pub const NO_QUEUE: &str = "`skyc run --target k8s` does not take --queue: skyc's runtime creates each node's pod itself, so that only its engine starts one, and Kueue would admit the group's JobSet without the nodes' quota; to queue a group with Kueue, apply `skyc build --target k8s --queue NAME` with kubectl";

/// The label JobSet's headless Service selects its pods by.
pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";

/// The label that carries the JobSet's uid: `SKYPILOT_TASK_ID` is made
/// from it (stable across restarts), and the runtime sets it on each pod.
pub const JOBSET_UID_LABEL: &str = "jobset.sigs.k8s.io/jobset-uid";

/// The label of the attempt a node's pod runs.
pub const ATTEMPT_LABEL: &str = "skyc.io/attempt";

/// The label of a node's rank.
pub const NODE_INDEX_LABEL: &str = "skyc.io/node-index";

/// The label of a node's task.
pub const TASK_LABEL: &str = "skyc.io/task";

/// The runtime's objects of one group.
#[derive(Debug)]
pub struct Supervised {
    /// In apply order: the ConfigMap of scripts, the anchor JobSet. Empty
    /// when there is an error.
    pub objects: Vec<Value>,
    /// One pod template per task, in task order: its node 0 at attempt 0;
    /// [`node_pod`] makes any node's pod of any attempt from it.
    pub templates: Vec<Value>,
    /// The pod that serves the run's files to its nodes
    /// ([`super::files::files_pod`]), when a task has files; the runtime
    /// creates it, owned by the JobSet, and fills it.
    pub files_pod: Option<Value>,
    pub diagnostics: Vec<skyc_compiler::Diagnostic>,
}

impl Supervised {
    pub fn has_errors(&self) -> bool {
        self.diagnostics
            .iter()
            .any(skyc_compiler::Diagnostic::is_error)
    }

    /// Every object the group starts with, for review: the anchor's
    /// objects, then attempt 0 of every node.
    pub fn manifests(&self, group: &str) -> Vec<Value> {
        let mut all = self.objects.clone();
        all.extend(self.files_pod.clone());
        for template in &self.templates {
            let nodes = template["metadata"]["annotations"]["skyc.io/num-nodes"]
                .as_str()
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(1);
            all.extend((0..nodes).map(|rank| node_pod(template, group, rank, 0)));
        }
        all
    }
}

/// Lowers `group` to the runtime's layout: the ConfigMap and the anchor
/// JobSet, and each task's pod template.
pub fn lower(group: &Group, options: &Options) -> Supervised {
    let mut l = Lowerer::new(group, options, Layout::Pods);
    let (objects, templates) = l.supervised();
    let Manifests {
        objects,
        diagnostics,
    } = l.finish(objects);
    let files = options.files.as_ref().is_some_and(super::files::Files::any);
    Supervised {
        templates: if objects.is_empty() {
            Vec::new()
        } else {
            templates
        },
        files_pod: (files && !objects.is_empty())
            .then(|| super::files::files_pod(&group.name, options)),
        objects,
        diagnostics,
    }
}

/// The pod of node `rank` of the task of `template`, at `attempt`: its
/// name, hostname, rank and labels. The runtime adds what only the
/// cluster knows (namespace, owner, the JobSet's uid) and the run's
/// grace.
pub fn node_pod(template: &Value, group: &str, rank: u32, attempt: u32) -> Value {
    let task = template["metadata"]["labels"][TASK_LABEL]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut metadata = Map::new();
    metadata.insert(
        "name".into(),
        json!(names::pod_name(group, &task, rank, attempt)),
    );
    if let Some(ns) = template["metadata"].get("namespace") {
        metadata.insert("namespace".into(), ns.clone());
    }
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(NODE_INDEX_LABEL.into(), json!(rank.to_string()));
    labels.insert(ATTEMPT_LABEL.into(), json!(attempt.to_string()));
    labels.insert(JOBSET_NAME_LABEL.into(), json!(group));
    metadata.insert("labels".into(), Value::Object(labels));
    if let Some(a) = template["metadata"].get("annotations") {
        metadata.insert("annotations".into(), a.clone());
    }
    let mut spec = template["spec"].clone();
    spec["hostname"] = json!(names::node_name(&task, rank));
    if let Some(containers) = spec["containers"].as_array_mut() {
        for c in containers.iter_mut().filter(|c| c["name"] == CONTAINER) {
            for e in c["env"].as_array_mut().into_iter().flatten() {
                if e["name"] == "SKYPILOT_NODE_RANK" {
                    e["value"] = json!(rank.to_string());
                }
            }
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
    })
}

impl Lowerer<'_> {
    /// The ConfigMap, the anchor JobSet (the gate alone), and the tasks'
    /// pod templates.
    fn supervised(&mut self) -> (Vec<Value>, Vec<Value>) {
        self.check_names();
        if self.diagnostics.iter().any(|d| d.is_error()) {
            return (Vec::new(), Vec::new());
        }
        let config_map = self.config_map();
        let g = self.group;
        let mut templates = Vec::new();
        let mut image = None;
        for task in &g.tasks {
            let Some(shape) = self.shape(task) else {
                continue;
            };
            let parts = self.task_parts(task);
            self.check_strategy(task);
            image.get_or_insert_with(|| shape.image.clone());
            let mut pod = self.pod(task, Pods::Node(0), &shape, &parts);
            if let Some(ns) = &self.options.namespace {
                pod["metadata"]["namespace"] = json!(ns);
            }
            let mut annotations = Map::new();
            annotations.insert(
                "skyc.io/num-nodes".into(),
                json!(task.num_nodes.to_string()),
            );
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
            pod["metadata"]["annotations"] = Value::Object(annotations);
            templates.push(pod);
        }
        let gate = super::jobset::gate(&g.name, image.as_deref().unwrap_or(&self.options.image));
        let jobset = self.jobset_object(vec![json!(names::GATE)], vec![gate]);
        (vec![config_map, jobset], templates)
    }
}
