//! The plan of a group run on Kubernetes: what the submitting client
//! decided, stored with the group for the supervisor.

use super::objects;
use crate::policy::Execution;
use crate::policy::GroupSpec;
use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use skyc_compiler::Diagnostic;
use skyc_compiler::ir::Group;
use skyc_targets::k8s::{self, names};
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The group's name: the JobSet's, its headless Service's and the
    /// pods' subdomain.
    pub group: String,
    /// Where every object goes (`--namespace`, else the context's).
    pub namespace: String,
    /// The kubeconfig context (`--context`), else the current one.
    pub context: Option<String>,
    /// The submitting client's `KUBECONFIG`: the supervisor, started by
    /// whichever client came first, reads the same files.
    #[serde(default)]
    pub kubeconfig: Option<String>,
    pub spec: GroupSpec,
    /// What `skyc build --target k8s` emits, in apply order (the
    /// ConfigMap, then the JobSet), plus the Secret of run-time values
    /// when the group has secrets, before the JobSet.
    pub objects: Vec<Value>,
    /// Marks every object of this run (annotation [`RUN_ANNOTATION`]): a
    /// supervisor recognises its own JobSet, and refuses one it did not
    /// create.
    pub token: String,
}

/// Where a node runs: the one place that knows how the lowering maps nodes
/// to Jobs and pods. Everything else (binding, stopping, restarting,
/// failing) acts on Jobs, so it holds for both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A Job Group: one 1-pod Job per node, `{group}-{task}-{rank}-0`;
    /// every pod of the Job runs the node.
    NodeJobs,
    /// A pipeline: one Indexed Job per step, `{group}-{step}-0`, of all
    /// its nodes; a node is the pods of its completion index. The Job is
    /// created by JobSet only once the previous step's completed, so a
    /// step launched but without a Job yet is waiting, not lost.
    StepJobs,
}

impl Layout {
    /// Whether `pod`, of a Job of this layout, runs node `rank`.
    pub fn runs(self, pod: &Pod, rank: u32) -> bool {
        match self {
            Layout::NodeJobs => true,
            Layout::StepJobs => objects::completion_index(&pod.metadata) == Some(rank),
        }
    }
}

/// The annotation that ties an object to one `skyc run`.
pub const RUN_ANNOTATION: &str = "skyc.io/run";

/// The annotation the runtime puts on each node Job: the engine's attempt
/// it runs.
pub const ATTEMPT_ANNOTATION: &str = "skyc.io/attempt";

/// The label every object and pod of a group carries.
pub const GROUP_LABEL: &str = "skyc.io/group";

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "skyc";

impl Plan {
    /// The plan of `group` as `skyc build --target k8s` lowers it with
    /// `options` (whose namespace, if any, wins over `namespace`), plus
    /// the Secret of `secrets` values when there are any.
    pub fn new(
        group: &Group,
        options: &k8s::Options,
        namespace: &str,
        context: Option<String>,
        grace: Duration,
        secrets: &[(String, String)],
        token: String,
    ) -> Result<Self, Vec<Diagnostic>> {
        let manifests = k8s::lower(group, options);
        if manifests.has_errors() {
            return Err(manifests.diagnostics);
        }
        let mut objects = manifests.objects;
        if !secrets.is_empty() {
            // Before the JobSet: its pods read it.
            let at = objects.len().saturating_sub(1);
            objects.insert(at, k8s::secret(group, options, secrets));
        }
        Ok(Self {
            group: group.name.clone(),
            namespace: options
                .namespace
                .clone()
                .unwrap_or_else(|| namespace.to_owned()),
            context,
            kubeconfig: std::env::var("KUBECONFIG").ok().filter(|k| !k.is_empty()),
            spec: GroupSpec::from_ir(group, grace),
            objects,
            token,
        })
    }

    /// How the group's nodes map to Jobs and pods.
    pub fn layout(&self) -> Layout {
        match self.spec.execution {
            Execution::Parallel => Layout::NodeJobs,
            Execution::Serial => Layout::StepJobs,
        }
    }

    /// The child Job that runs node `rank` of `task`.
    pub fn job_of(&self, task: usize, rank: u32) -> String {
        let name = &self.spec.tasks[task].name;
        match self.layout() {
            Layout::NodeJobs => names::job_name(&self.group, &names::node_name(name, rank)),
            Layout::StepJobs => names::job_name(&self.group, name),
        }
    }

    /// The child Jobs of `task`, each once, in rank order.
    pub fn jobs_of(&self, task: usize) -> Vec<String> {
        match self.layout() {
            Layout::NodeJobs => (0..self.spec.tasks[task].num_nodes)
                .map(|rank| self.job_of(task, rank))
                .collect(),
            Layout::StepJobs => vec![self.job_of(task, 0)],
        }
    }

    /// The child Job of the termination-delay gate.
    pub fn gate_job(&self) -> String {
        names::job_name(&self.group, names::GATE)
    }

    /// `{task}-{rank}.{group}` for a group's node; a step's pod has the
    /// Job controller's hostname, `{job}-{rank}`, in the same subdomain.
    pub fn hostname(&self, task: usize, rank: u32) -> String {
        let host = match self.layout() {
            Layout::NodeJobs => names::node_name(&self.spec.tasks[task].name, rank),
            Layout::StepJobs => names::indexed_pod_hostname(&self.job_of(task, rank), rank),
        };
        format!("{host}.{}", self.group)
    }

    /// The label selector of the group's Jobs and pods.
    pub fn selector(&self) -> String {
        format!("{GROUP_LABEL}={}", self.group)
    }

    /// The object of `kind` among [`Plan::objects`].
    pub fn object(&self, kind: &str) -> Option<&Value> {
        self.objects.iter().find(|o| o["kind"] == kind)
    }
}
