//! The JobSet resource (`jobset.x-k8s.io/v1alpha2`), typed for the fields
//! the runtime reads and the Kubernetes target writes.
//!
//! Hand-written rather than derived (`kube`'s `CustomResource` needs
//! proc macros and schemars; skyc never installs the CRD) or taken from a
//! generated crate (those pin older kube releases and copy the Job and
//! Pod types). The Job template is k8s-openapi's own `JobTemplateSpec`.
//! Fields skyc does not use (`failurePolicy`, `coordinator`,
//! `volumeClaimPolicies`...) are kept as raw JSON, so reading and writing
//! a JobSet back loses nothing; a test round-trips every example's
//! manifests through this type.

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSet {
    /// Always `jobset.x-k8s.io/v1alpha2` when written; kept as read.
    #[serde(default = "api_version", skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default = "kind", skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: JobSetSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<JobSetStatus>,
}

fn api_version() -> String {
    "jobset.x-k8s.io/v1alpha2".into()
}

fn kind() -> String {
    "JobSet".into()
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicated_jobs: Vec<ReplicatedJob>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_policy: Option<SuccessPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_policy: Option<StartupPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// `failurePolicy`, `coordinator`, `volumeClaimPolicies` and whatever
    /// a later JobSet adds: carried, not interpreted.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJob {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_name: Option<String>,
    pub template: JobTemplateSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "enableDNSHostnames"
    )]
    pub enable_dns_hostnames: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish_not_ready_addresses: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SuccessPolicy {
    /// `All` or `Any`.
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_replicated_jobs: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartupPolicy {
    /// `AnyOrder` or `InOrder`.
    pub startup_policy_order: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSetStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub restarts: i32,
    /// `Completed` or `Failed` once the JobSet has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_state: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicated_jobs_status: Vec<ReplicatedJobStatus>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJobStatus {
    pub name: String,
    #[serde(default)]
    pub ready: i32,
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default)]
    pub failed: i32,
    #[serde(default)]
    pub active: i32,
    #[serde(default)]
    pub suspended: i32,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl k8s_openapi::Resource for JobSet {
    const API_VERSION: &'static str = "jobset.x-k8s.io/v1alpha2";
    const GROUP: &'static str = "jobset.x-k8s.io";
    const KIND: &'static str = "JobSet";
    const VERSION: &'static str = "v1alpha2";
    const URL_PATH_SEGMENT: &'static str = "jobsets";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::ListableResource for JobSet {
    const LIST_KIND: &'static str = "JobSetList";
}

impl k8s_openapi::Metadata for JobSet {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl JobSet {
    /// `Completed` or `Failed` once the JobSet controller ended it: its
    /// `terminalState`, else a true condition of either type.
    pub fn terminal_state(&self) -> Option<&str> {
        let status = self.status.as_ref()?;
        if let Some(s) = status.terminal_state.as_deref().filter(|s| !s.is_empty()) {
            return Some(s);
        }
        status
            .conditions
            .iter()
            .find(|c| c.status == "True" && (c.type_ == "Completed" || c.type_ == "Failed"))
            .map(|c| c.type_.as_str())
    }

    /// Whether the JobSet waits (Kueue has not admitted it yet).
    pub fn is_suspended(&self) -> bool {
        self.spec.suspend == Some(true)
    }

    /// The replicated Job named `name`.
    pub fn replicated_job(&self, name: &str) -> Option<&ReplicatedJob> {
        self.spec.replicated_jobs.iter().find(|r| r.name == name)
    }
}
