//! The Kubernetes target: one Job Group or pipeline to a JobSet and the
//! ConfigMap its pods run from (`skyc build FILE --target k8s`).
//!
//! Layout (docs/targets/k8s.md has the whole design): JobSet `{group}`
//! with one replicated Job `{task}-{i}` per node, each a 1-pod NonIndexed
//! Job whose pod sets `hostname: {task}-{i}` and `subdomain: {group}`, so
//! the headless Service `{group}` that JobSet creates publishes
//! `{task}-{i}.{group}`. Recovery is per node Job (podFailurePolicy and
//! backoffLimit); success is over the primary tasks, with a gate the
//! runtime opens after the termination delays. A pipeline is one
//! replicated Job per step instead, an Indexed Job of all its nodes,
//! each step depending on the previous one (`pipeline.rs`).
//!
//! Pure: [`lower`] takes the IR and options and returns objects and
//! diagnostics located in the source; [`emit`] turns objects into text.

mod buckets;
pub mod controller;
pub mod emit;
pub mod files;
mod jobset;
pub mod names;
mod pipeline;
mod pod;
pub mod pods;
pub mod rbac;
mod recovery;
mod resources;
mod script;
pub mod volume;
pub mod worker;
pub mod yaml;

pub use buckets::{
    BucketMounts, DEFAULT_RCLONE_IMAGE, SCRIPT as BUCKET_SIDECAR_SCRIPT, UPLOAD_GRACE_SECONDS,
};

use serde_json::{Value, json};
use skyc_compiler::ir::{Execution, Group, Task};
use skyc_compiler::{Diagnostic, Rule, Severity, Span};

/// What the command line decides for the Kubernetes target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// `metadata.namespace` of every object; `None` leaves it to kubectl.
    pub namespace: Option<String>,
    /// Kueue LocalQueue, as the `kueue.x-k8s.io/queue-name` label.
    pub queue: Option<String>,
    /// The image of tasks without `image_id: docker:...`.
    pub image: String,
    /// Node label that carries the accelerator type.
    pub gpu_label_key: String,
    /// The Secret `secrets` are read from; `{group}-secrets` by default.
    pub secret_name: Option<String>,
    /// The image of the files pod and of the nodes' init containers.
    pub files_image: String,
    /// The run's files (`workdir` and local `file_mounts`), when the
    /// caller took them; `None` leaves them out, with a warning.
    pub files: Option<files::Files>,
    /// How mounted buckets reach the pods (refused by default).
    pub bucket_mounts: BucketMounts,
    /// Each task's mounted buckets as a submission found them (their
    /// region and endpoint), by task index; `None` leaves those to the
    /// pods' AWS configuration.
    pub buckets: Option<Vec<Vec<crate::storage::Mounted>>>,
}

/// SkyPilot's own default images are cloud images; a plain distribution
/// image has the bash and getent the entrypoint needs.
pub const DEFAULT_IMAGE: &str = "ubuntu:24.04";

impl Default for Options {
    fn default() -> Self {
        Self {
            namespace: None,
            queue: None,
            image: DEFAULT_IMAGE.to_owned(),
            gpu_label_key: resources::GKE_LABEL_KEY.to_owned(),
            secret_name: None,
            files_image: files::DEFAULT_FILES_IMAGE.to_owned(),
            files: None,
            bucket_mounts: BucketMounts::Refused,
            buckets: None,
        }
    }
}

impl Options {
    /// Checks values that come from the command line, not the file.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(ns) = &self.namespace
            && !names::is_dns1123_label(ns)
        {
            return Err(format!("--namespace `{ns}` is not a DNS-1123 label"));
        }
        if let Some(q) = &self.queue
            && (q.is_empty() || !names::is_label_value(q))
        {
            return Err(format!("--queue `{q}` is not a valid label value"));
        }
        if self.image.trim().is_empty() || self.image.contains(char::is_whitespace) {
            return Err(format!(
                "--image `{}` is not an image reference",
                self.image
            ));
        }
        if !names::is_qualified_name(&self.gpu_label_key) {
            return Err(format!(
                "--gpu-label-key `{}` is not a label key",
                self.gpu_label_key
            ));
        }
        if let Some(s) = &self.secret_name
            && !names::is_dns1123_subdomain(s)
        {
            return Err(format!("--secret-name `{s}` is not a DNS-1123 subdomain"));
        }
        Ok(())
    }
}

/// The objects of one group, in apply order, and what lowering found.
#[derive(Debug)]
pub struct Manifests {
    /// Empty when there is an error.
    pub objects: Vec<Value>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Manifests {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Kueue turns each replicated Job into one PodSet; up to v0.17 a workload
/// holds at most 8 (10 in v0.18, 18 from v0.19).
pub const KUEUE_MAX_PODSETS: usize = 8;

/// The most the API server stores in one object (etcd's default request
/// limit is 1.5 MiB).
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// A ConfigMap's data may not exceed 1 MiB.
pub const MAX_CONFIG_MAP_BYTES: usize = 1 << 20;

/// How a group's nodes become pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Self-contained manifests for `kubectl apply`: one JobSet whose
    /// controllers create and recover every node's pod (`skyc build`).
    JobSet,
    /// What skyc's runtime applies (`skyc run`): a JobSet that anchors the
    /// group (its headless Service, its end, Kueue-free), and one pod per
    /// node attempt that the runtime creates itself ([`pods`]).
    Pods,
}

/// Lowers `group` to a ConfigMap (entrypoint and scripts) and a JobSet.
pub fn lower(group: &Group, options: &Options) -> Manifests {
    let mut l = Lowerer::new(group, options, Layout::JobSet);
    let objects = l.lower();
    l.finish(objects)
}

/// The Secret a runtime creates from values given at run time (never from
/// the file: values do not enter the IR). `skyc build` does not emit it.
pub fn secret(group: &Group, options: &Options, values: &[(String, String)]) -> Value {
    let data: serde_json::Map<String, Value> =
        values.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(
            &secret_name(group, options),
            options,
            json!({"skyc.io/group": group.name}),
        ),
        "type": "Opaque",
        "stringData": data,
    })
}

fn secret_name(group: &Group, options: &Options) -> String {
    options
        .secret_name
        .clone()
        .unwrap_or_else(|| names::secret(&group.name))
}

fn metadata(name: &str, options: &Options, labels: Value) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("name".into(), json!(name));
    if let Some(ns) = &options.namespace {
        m.insert("namespace".into(), json!(ns));
    }
    m.insert("labels".into(), labels);
    Value::Object(m)
}

/// A task's container parts, built once per task.
pub(crate) struct Parts {
    /// The env after the contract.
    pub env: Vec<Value>,
    pub mounts: Vec<Value>,
    pub volumes: Vec<Value>,
    /// The init container that puts the task's files in place.
    pub init: Option<Value>,
    /// The sidecars that mount the task's buckets.
    pub sidecars: Vec<Value>,
    /// Whether a sidecar waits for cached writes at the pod's end.
    pub uploads: bool,
}

/// Lowering state: the input and the diagnostics found so far.
pub(crate) struct Lowerer<'a> {
    group: &'a Group,
    options: &'a Options,
    layout: Layout,
    diagnostics: Vec<Diagnostic>,
}

impl<'a> Lowerer<'a> {
    fn new(group: &'a Group, options: &'a Options, layout: Layout) -> Self {
        Self {
            group,
            options,
            layout,
            diagnostics: Vec::new(),
        }
    }

    /// The objects, or none when an error was found, with every finding
    /// in source order.
    fn finish(self, objects: Vec<Value>) -> Manifests {
        let mut diagnostics = self.diagnostics;
        diagnostics.sort_by_key(|d| (d.primary.span.start, d.primary.span.end, d.rule));
        let failed = diagnostics.iter().any(Diagnostic::is_error);
        Manifests {
            objects: if failed { Vec::new() } else { objects },
            diagnostics,
        }
    }
}

impl Lowerer<'_> {
    fn lower(&mut self) -> Vec<Value> {
        self.check_names();
        if self.diagnostics.iter().any(Diagnostic::is_error) {
            return Vec::new();
        }
        let config_map = self.config_map();
        let files = self.files_config_map();
        let jobset = self.jobset();
        let mut objects = vec![config_map];
        objects.extend(files);
        objects.extend(jobset);
        objects
    }

    /// What the file is, in messages.
    fn what(&self) -> &'static str {
        match self.group.execution {
            Execution::Parallel => "group",
            Execution::Serial => "pipeline",
        }
    }

    /// Where group-wide findings point: the header's name, or the task of
    /// a single-task file.
    fn group_span(&self) -> Span {
        self.group
            .name_span
            .or_else(|| self.group.tasks.first().map(|t| t.name_span))
            .unwrap_or_default()
    }

    fn push(&mut self, d: Diagnostic) {
        self.diagnostics.push(d);
    }

    /// A setting that is reported and not applied.
    fn warn(&mut self, task: &Task, message: String) {
        self.push(
            Diagnostic::new(Rule::K8sIgnoredSetting, task.name_span, message)
                .label("in this task")
                .severity(Severity::Warning),
        );
    }

    fn error(&mut self, rule: Rule, task: &Task, message: String, label: &str, help: Option<&str>) {
        let mut d = Diagnostic::new(rule, task.name_span, message)
            .label(label)
            .severity(Severity::Error);
        if let Some(h) = help {
            d = d.help(h);
        }
        self.push(d);
    }

    /// Names become Service, Job and host names; the API server and the
    /// JobSet webhook would reject what fails here, at apply time.
    fn check_names(&mut self) {
        let g = &self.group.name;
        if !names::is_dns1035_label(g) {
            self.push(
                Diagnostic::new(
                    Rule::K8sInvalidName,
                    self.group_span(),
                    format!(
                        "the {} name `{g}` is not a DNS-1035 label, so it cannot name the JobSet, its headless Service and the pods' subdomain",
                        self.what()
                    ),
                )
                .label("not a DNS-1035 label")
                .help(if self.group.name_span.is_none() && self.group.execution == Execution::Serial {
                    "a pipeline without a header is named after its first step: start the file with a header `name: ...` of lower-case letters, digits and `-`"
                } else {
                    "use lower-case letters, digits and `-`, starting with a letter, at most 63 characters"
                }),
            );
            return;
        }
        for task in &self.group.tasks {
            if self.group.execution == Execution::Serial && self.layout == Layout::JobSet {
                self.check_step_names(task);
                continue;
            }
            let last = names::node_name(&task.name, task.num_nodes.saturating_sub(1));
            let job = names::job_name(g, &last);
            if !names::is_dns1123_label(&last) {
                self.error(
                    Rule::K8sInvalidName,
                    task,
                    format!(
                        "`{last}` is not a DNS-1123 label, so `{last}.{g}` cannot be a pod hostname"
                    ),
                    "not a DNS label",
                    Some("use lower-case letters, digits and `-`, starting and ending with a letter or digit"),
                );
            } else if self.layout == Layout::JobSet && job.len() > 63 {
                self.error(
                    Rule::K8sInvalidName,
                    task,
                    format!(
                        "the Job `{job}` is {} characters; JobSet requires `{{group}}-{{task}}-{{node}}-0` to fit 63",
                        job.len()
                    ),
                    "name too long",
                    Some(&format!(
                        "shorten the group or task name by {} characters",
                        job.len() - 63
                    )),
                );
            }
        }
        if self.needs_gate() {
            let gate = names::job_name(g, names::GATE);
            if gate.len() > 63 {
                self.push(
                    Diagnostic::new(
                        Rule::K8sInvalidName,
                        self.group_span(),
                        format!(
                            "`{gate}` (the termination-delay gate) is {} characters; JobSet requires 63 at most",
                            gate.len()
                        ),
                    )
                    .label("name too long")
                    .help(format!("shorten the group name by {} characters", gate.len() - 63)),
                );
            }
        }
    }

    /// A gate is needed when some auxiliary must outlive the primaries,
    /// and always when the runtime runs the group: it is the JobSet's
    /// only replicated Job then.
    fn needs_gate(&self) -> bool {
        self.layout == Layout::Pods
            || self
                .group
                .tasks
                .iter()
                .any(|t| t.termination_delay_secs.is_some_and(|d| d > 0))
    }
}
