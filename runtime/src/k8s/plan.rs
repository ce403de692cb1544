//! The plan of a group run on Kubernetes: what the submitting client
//! decided, stored with the group for the supervisor.

use super::files::{Packed, packed};
use super::jobset::JobSet;
use crate::policy::GroupSpec;
use crate::pool::JobSpec;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use skyc_compiler::Diagnostic;
use skyc_compiler::ir::Group;
use skyc_targets::k8s::{self, names, pods};
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
    /// What the runtime applies, in order: the ConfigMap, the Secret of
    /// run-time values when the group has secrets, and the anchor JobSet
    /// (`skyc_targets::k8s::pods`).
    pub objects: Vec<Value>,
    /// Each task's pod template, from which the runtime makes every
    /// node's pod of every attempt.
    pub templates: Vec<Value>,
    /// Marks every object of this run (annotation [`RUN_ANNOTATION`]): a
    /// supervisor recognises its own JobSet, and refuses one it did not
    /// create.
    pub token: String,
    /// A pool's worker: its nodes hold after setup ([`k8s::worker`]),
    /// ready for the pool's jobs once their pods are `Ready`. Its store
    /// row's role, set when the backend adopts it (not stored).
    #[serde(skip)]
    pub hold: bool,
    /// A job of a pool: its one task runs in the pods of the worker the
    /// pool gives it ([`super::exec`]); it applies nothing of its own.
    #[serde(default)]
    pub pool_job: Option<JobSpec>,
    /// The streams of the snapshots the nodes are given
    /// ([`super::files`]), served by [`Plan::files_pod`].
    #[serde(default)]
    pub files: Vec<Packed>,
    /// The pod that serves them, when a task has files: created by the
    /// runtime, owned by the JobSet, filled over `pods/exec` before any
    /// node's pod is made.
    #[serde(default)]
    pub files_pod: Option<Value>,
}

/// The annotation that ties an object to one `skyc run`.
pub const RUN_ANNOTATION: &str = "skyc.io/run";

/// The annotation prefix, on the JobSet, of the attempt of each task
/// whose pods the runtime has created (`skyc.io/launched-{task index}`):
/// written before the pods are, so a pod of that attempt that is missing
/// afterwards was taken away, and is never made again.
pub const LAUNCHED_ANNOTATION: &str = "skyc.io/launched-";

/// The label every object and pod of a group carries.
pub const GROUP_LABEL: &str = "skyc.io/group";

/// How a group is lowered for the runtime, beside the group itself.
pub struct Lowering<'a> {
    pub options: &'a k8s::Options,
    /// The namespace, unless the options name one.
    pub namespace: &'a str,
    /// The kubeconfig context the run reaches its cluster through.
    pub context: Option<String>,
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// The values of the tasks' secrets.
    pub secrets: &'a [(String, String)],
    /// The run's token.
    pub token: String,
}

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "skyc";

impl Plan {
    /// The plan of a run of `group` (`skyc run --target k8s`), once the
    /// cluster of `kubeconfig` (`$KUBECONFIG`) and `context` answers: a
    /// group that cannot reach it is never recorded. The Secret the pods
    /// read carries the values of the tasks' `secrets`. `None` with the
    /// errors that prevent it.
    pub fn for_run(
        group: &Group,
        options: &k8s::Options,
        kubeconfig: Option<&str>,
        context: Option<&str>,
        grace: Duration,
        secrets: &[(String, String)],
        token: String,
    ) -> Result<(Option<Self>, Vec<Diagnostic>), String> {
        Self::reached(
            group,
            options,
            (kubeconfig, context),
            grace,
            secrets,
            token,
            Self::new,
        )
    }

    /// The plan `make` makes once the cluster answers, with the values of
    /// `group`'s secrets: what [`Plan::for_run`] and a pool's apply share.
    pub(super) fn reached<T>(
        group: &Group,
        options: &k8s::Options,
        (kubeconfig, context): (Option<&str>, Option<&str>),
        grace: Duration,
        secrets: &[(String, String)],
        token: String,
        make: impl FnOnce(&Group, &Lowering<'_>) -> Result<T, Vec<Diagnostic>>,
    ) -> Result<(Option<T>, Vec<Diagnostic>), String>
    where
        T: WithKubeconfig,
    {
        if options.queue.is_some() {
            return Err(pods::NO_QUEUE.to_owned());
        }
        let (kubeconfig, context) = super::client::pin(kubeconfig, context);
        let reached = super::client::reach(kubeconfig.as_deref(), context.as_deref())?;
        let mut values: Vec<(String, String)> = Vec::new();
        let mut diagnostics = crate::secrets::merge(&mut values, group, secrets);
        let plan = make(
            group,
            &Lowering {
                options,
                namespace: &reached.namespace,
                context,
                grace,
                secrets: &values,
                token,
            },
        );
        let plan = match plan {
            Ok(mut plan) if !diagnostics.iter().any(Diagnostic::is_error) => {
                plan.set_kubeconfig(kubeconfig);
                Some(plan)
            }
            Ok(_) => None,
            Err(more) => {
                diagnostics.extend(more);
                None
            }
        };
        Ok((plan, diagnostics))
    }

    /// The plan of `group` as `skyc build --target k8s` lowers it (see
    /// [`Lowering`]), plus the Secret of the secrets' values when there
    /// are any.
    pub fn new(group: &Group, lowering: &Lowering<'_>) -> Result<Self, Vec<Diagnostic>> {
        Self::of(group, k8s::pods::lower(group, lowering.options), lowering)
    }

    /// The plan of `group` lowered to `manifests`.
    pub(super) fn of(
        group: &Group,
        manifests: pods::Supervised,
        lowering: &Lowering<'_>,
    ) -> Result<Self, Vec<Diagnostic>> {
        let Lowering {
            options,
            namespace,
            ref context,
            grace,
            secrets,
            ref token,
        } = *lowering;
        if manifests.has_errors() {
            return Err(manifests.diagnostics);
        }
        let mut objects = manifests.objects;
        if !secrets.is_empty() {
            // Before the JobSet: its pods read it.
            let at = objects.len().saturating_sub(1);
            objects.insert(at, k8s::secret(group, options, secrets));
        }
        let files = options.files.as_ref().map(packed).unwrap_or_default();
        if manifests.files_pod.is_some() {
            let at = objects.len().saturating_sub(1);
            objects.insert(
                at,
                k8s::files::key_secret(&group.name, options, &files_key()),
            );
        }
        Ok(Self {
            group: group.name.clone(),
            namespace: options
                .namespace
                .clone()
                .unwrap_or_else(|| namespace.to_owned()),
            context: context.clone(),
            kubeconfig: std::env::var("KUBECONFIG").ok().filter(|k| !k.is_empty()),
            spec: GroupSpec::from_ir(group, grace),
            objects,
            templates: manifests.templates,
            token: token.clone(),
            hold: false,
            pool_job: None,
            files,
            files_pod: manifests.files_pod,
        })
    }

    /// The files pod to create, owned by the JobSet `anchor` and marked
    /// with the run's token.
    pub fn files_pod(&self, anchor: &JobSet) -> Option<Value> {
        let mut pod = self.files_pod.clone()?;
        pod["metadata"]["namespace"] = json!(self.namespace);
        pod["metadata"]["annotations"][RUN_ANNOTATION] = json!(self.token);
        pod["metadata"]["ownerReferences"] = json!([super::apply::owner_reference(anchor)]);
        Some(pod)
    }

    /// The files pod's name.
    pub fn files_pod_name(&self) -> Option<String> {
        self.files_pod.as_ref().map(|_| names::files(&self.group))
    }

    /// The pod of `attempt` of node `rank` of `task`.
    pub fn pod_of(&self, task: usize, rank: u32, attempt: u32) -> String {
        names::pod_name(&self.group, &self.spec.tasks[task].name, rank, attempt)
    }

    /// The pod to create for `attempt` of node `rank` of `task`, owned by
    /// the JobSet `anchor` (so deleting it deletes the pod), with the
    /// JobSet's uid (`SKYPILOT_TASK_ID`), the run's token and its grace.
    pub fn node_pod(&self, task: usize, rank: u32, attempt: u32, anchor: &JobSet) -> Value {
        let Some(template) = self.templates.get(task) else {
            return Value::Null;
        };
        let uid = anchor.metadata.uid.clone().unwrap_or_default();
        let mut pod = pods::node_pod(template, &self.group, rank, attempt);
        pod["metadata"]["namespace"] = json!(self.namespace);
        pod["metadata"]["labels"][pods::JOBSET_UID_LABEL] = json!(uid);
        pod["metadata"]["annotations"][RUN_ANNOTATION] = json!(self.token);
        pod["metadata"]["ownerReferences"] = json!([{
            "apiVersion": super::apply::JOBSET_API,
            "kind": "JobSet",
            "name": self.group,
            "uid": uid,
        }]);
        // The run's grace, or the template's when longer (a sidecar that
        // waits for cached writes to reach their bucket).
        let grace = self.spec.grace.as_secs_f64().ceil() as i64;
        let template_grace = pod["spec"]["terminationGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0);
        let uploads = template_grace == i64::from(k8s::UPLOAD_GRACE_SECONDS);
        pod["spec"]["terminationGracePeriodSeconds"] = json!(if uploads {
            grace.max(template_grace)
        } else {
            grace
        });
        pod
    }

    /// The child Job of the termination-delay gate.
    pub fn gate_job(&self) -> String {
        names::job_name(&self.group, names::GATE)
    }

    /// `{task}-{rank}.{group}`, for a group's node and a pipeline step's.
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

/// The key a run's files are served under: 128 random bits, hex.
fn files_key() -> String {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 16];
    // getrandom(2), which does not fail on Linux once booted.
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A plan whose kubeconfig is the submitting client's.
pub(super) trait WithKubeconfig {
    fn set_kubeconfig(&mut self, kubeconfig: Option<String>);
}

impl WithKubeconfig for Plan {
    fn set_kubeconfig(&mut self, kubeconfig: Option<String>) {
        self.kubeconfig = kubeconfig;
    }
}
