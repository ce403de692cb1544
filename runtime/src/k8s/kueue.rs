//! Kueue's Workload (`kueue.x-k8s.io/v1beta1`), read for one thing: why
//! a queued JobSet is not admitted yet, in Kueue's words.
//!
//! Kueue makes one Workload per queued JobSet (owned by it, labelled with
//! its uid), keeps the JobSet suspended, and says on the Workload why: its
//! `QuotaReserved`
//! condition (`couldn't assign flavors to pod set trainer: insufficient
//! unused quota for nvidia.com/gpu in flavor h100, 8 more needed`), then
//! the state of each admission check (a provisioning request, MultiKueue).
//! Only those fields are typed: a Workload's pod sets (whole pod
//! templates) are skipped as it is read.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use serde::{Deserialize, Serialize};

/// The label by which Kueue ties a Workload to the job it queues.
pub const JOB_UID_LABEL: &str = "kueue.x-k8s.io/job-uid";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Workload {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<WorkloadStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub admission_checks: Vec<AdmissionCheckState>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionCheckState {
    pub name: String,
    /// `Pending`, `Ready`, `Retry` or `Rejected`.
    pub state: String,
    #[serde(default)]
    pub message: String,
}

impl k8s_openapi::Resource for Workload {
    const API_VERSION: &'static str = "kueue.x-k8s.io/v1beta1";
    const GROUP: &'static str = "kueue.x-k8s.io";
    const KIND: &'static str = "Workload";
    const VERSION: &'static str = "v1beta1";
    const URL_PATH_SEGMENT: &'static str = "workloads";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::ListableResource for Workload {
    const LIST_KIND: &'static str = "WorkloadList";
}

impl k8s_openapi::Metadata for Workload {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl Workload {
    /// The uid of the JobSet this Workload queues, if it queues one.
    pub fn jobset_uid(&self) -> Option<&str> {
        self.metadata
            .owner_references
            .as_ref()?
            .iter()
            .find(|o| o.kind == "JobSet" && o.api_version.starts_with("jobset.x-k8s.io/"))
            .map(|o| o.uid.as_str())
    }

    fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
    }

    /// Why the Workload is not admitted, in Kueue's words: no quota
    /// reserved yet (the flavor assigner's message), or, quota reserved,
    /// the admission checks not yet ready. None once admitted.
    pub fn waiting_reason(&self) -> Option<String> {
        if self
            .condition("Admitted")
            .is_some_and(|c| c.status == "True")
        {
            return None;
        }
        let reserved = self.condition("QuotaReserved");
        if reserved.is_none_or(|c| c.status != "True") {
            let said = reserved
                .map(|c| {
                    if c.message.is_empty() {
                        &c.reason
                    } else {
                        &c.message
                    }
                })
                .map_or("not evaluated yet", |s| s.trim());
            return Some(format!("Kueue: waiting for quota: {said}"));
        }
        let checks: Vec<String> = self
            .status
            .iter()
            .flat_map(|s| &s.admission_checks)
            .filter(|c| c.state != "Ready")
            .map(|c| {
                if c.message.is_empty() {
                    format!("{} {}", c.name, c.state)
                } else {
                    format!("{} {}: {}", c.name, c.state, c.message.trim())
                }
            })
            .collect();
        Some(if checks.is_empty() {
            "Kueue: quota reserved, not admitted yet".to_owned()
        } else {
            format!(
                "Kueue: quota reserved, waiting for admission check{} {}",
                if checks.len() == 1 { "" } else { "s" },
                checks.join("; ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn workload(status: serde_json::Value) -> Workload {
        serde_json::from_value(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {"name": "jobset-g-1a2b3", "ownerReferences": [{
                "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "g",
                "uid": "uid-7", "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"queueName": "team", "podSets": [{"name": "trainer", "count": 2,
                "template": {"spec": {"containers": [{"name": "main", "image": "x"}]}}}]},
            "status": status,
        }))
        .unwrap()
    }

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> serde_json::Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": "2026-11-28T00:00:00Z"})
    }

    #[test]
    fn quota_not_reserved_says_the_schedulers_message() {
        let w = workload(json!({"conditions": [condition(
            "QuotaReserved", "False", "Pending",
            "couldn't assign flavors to pod set trainer: insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed",
        )]}));
        assert_eq!(w.jobset_uid(), Some("uid-7"));
        assert_eq!(
            w.waiting_reason().as_deref(),
            Some(
                "Kueue: waiting for quota: couldn't assign flavors to pod set trainer: \
                 insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed"
            )
        );
    }

    #[test]
    fn quota_reserved_waits_for_the_checks_not_ready() {
        let w = workload(json!({
            "conditions": [
                condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue team"),
                condition("Admitted", "False", "NoChecks", ""),
            ],
            "admissionChecks": [
                {"name": "dws", "state": "Pending", "message": "Waiting for capacity", "lastTransitionTime": "2026-11-28T00:00:00Z"},
                {"name": "budget", "state": "Ready", "message": "", "lastTransitionTime": "2026-11-28T00:00:00Z"},
            ],
        }));
        assert_eq!(
            w.waiting_reason().as_deref(),
            Some(
                "Kueue: quota reserved, waiting for admission check dws Pending: Waiting for capacity"
            )
        );
    }

    #[test]
    fn admitted_says_nothing_and_silent_says_it_waits() {
        let admitted = workload(json!({"conditions": [
            condition("QuotaReserved", "True", "QuotaReserved", ""),
            condition("Admitted", "True", "Admitted", "The workload is admitted"),
        ]}));
        assert_eq!(admitted.waiting_reason(), None);
        assert_eq!(
            workload(json!({})).waiting_reason().as_deref(),
            Some("Kueue: waiting for quota: not evaluated yet")
        );
    }
}
