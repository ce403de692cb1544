//! The plan of a group run on Kubernetes: what the submitting client
//! decided, stored with the group for the supervisor.

use crate::policy::GroupSpec;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use skyc_compiler::ir::{Execution, Group};
use skyc_compiler::{Diagnostic, Rule};
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
        let unsupported = Self::unsupported(group);
        if !unsupported.is_empty() {
            return Err(unsupported);
        }
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

    /// What of `group` the runtime cannot run (checked before anything
    /// else, the cluster included).
    pub fn unsupported(group: &Group) -> Vec<Diagnostic> {
        if group.execution != Execution::Serial {
            return Vec::new();
        }
        // The runtime reads one Job per node; a pipeline's step is one
        // Indexed Job of all its nodes.
        let span = group
            .name_span
            .or_else(|| group.tasks.first().map(|t| t.name_span))
            .unwrap_or_default();
        vec![
            Diagnostic::new(
                Rule::K8sUnsupported,
                span,
                "`skyc run --target k8s` does not run pipelines yet".to_owned(),
            )
            .label("a pipeline")
            .help(
                "`skyc build FILE --target k8s | kubectl apply --server-side -f -` runs its \
                 steps in order with JobSet alone, or `skyc run FILE` runs it on this machine",
            ),
        ]
    }

    /// The child Job that runs node `rank` of `task`.
    pub fn job_name(&self, task: usize) -> impl Fn(u32) -> String + '_ {
        move |rank| {
            names::job_name(
                &self.group,
                &names::node_name(&self.spec.tasks[task].name, rank),
            )
        }
    }

    /// The child Job of the termination-delay gate.
    pub fn gate_job(&self) -> String {
        names::job_name(&self.group, names::GATE)
    }

    /// `{task}-{rank}.{group}`.
    pub fn hostname(&self, task: usize, rank: u32) -> String {
        format!(
            "{}.{}",
            names::node_name(&self.spec.tasks[task].name, rank),
            self.group
        )
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
