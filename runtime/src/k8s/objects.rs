//! What the runtime knows of one group's objects: the JobSet, its gate's
//! Job, the nodes' pods and Kueue's Workload, as the watches last saw them
//! (and as the runtime's own writes returned them), with the few readings
//! of each that the observer and the reconciler need.

use super::jobset::JobSet;
use super::kueue::Workload;
use super::plan::{LAUNCHED_ANNOTATION, RUN_ANNOTATION};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use skyc_targets::k8s::names::CONTAINER;
use skyc_targets::k8s::pods::{ATTEMPT_LABEL, NODE_INDEX_LABEL, TASK_LABEL};
use std::collections::BTreeMap;

/// The group's objects, by name. Cloned for each pass: a pod is shared,
/// not copied.
#[derive(Clone, Debug, Default)]
pub struct Objects {
    pub jobset: Option<JobSet>,
    pub jobs: BTreeMap<String, Job>,
    pub pods: BTreeMap<String, std::sync::Arc<Pod>>,
    /// Kueue's Workloads of the JobSet, by name (watched by its uid once
    /// it is seen suspended).
    pub workloads: BTreeMap<String, Workload>,
}

/// An object kind the runtime watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    JobSet,
    Job,
    Pod,
    Workload,
}

impl Objects {
    /// The JobSet is gone, or being deleted.
    pub fn jobset_gone(&self) -> bool {
        self.jobset.as_ref().is_none_or(|j| deleting(&j.metadata))
    }

    /// The Workload by which Kueue queues this JobSet.
    pub fn workload(&self) -> Option<&Workload> {
        let uid = self.jobset.as_ref()?.metadata.uid.as_deref()?;
        self.workloads
            .values()
            .find(|w| w.jobset_uid() == Some(uid))
    }
}

/// Whether deletion has begun (`deletionTimestamp` is set).
pub fn deleting(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

/// The run an object belongs to: its `skyc.io/run` annotation.
pub fn run_of(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations
        .as_ref()?
        .get(RUN_ANNOTATION)
        .map(String::as_str)
}

/// `resourceVersion` as a number, where the API server writes one (etcd
/// does); `None` means "cannot be ordered".
pub fn version(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

/// The attempt of `task` whose pods the runtime has created (the
/// JobSet's `skyc.io/launched-{task}` annotation).
pub fn launched(jobset: &JobSet, task: usize) -> Option<u32> {
    jobset
        .metadata
        .annotations
        .as_ref()?
        .get(&format!("{LAUNCHED_ANNOTATION}{task}"))?
        .parse()
        .ok()
}

/// The attempt a node's pod runs (its `skyc.io/attempt` label).
pub fn pod_attempt(pod: &Pod) -> Option<u32> {
    pod.metadata
        .labels
        .as_ref()?
        .get(ATTEMPT_LABEL)?
        .parse()
        .ok()
}

pub fn parallelism(job: &Job) -> i32 {
    job.spec.as_ref().and_then(|s| s.parallelism).unwrap_or(1)
}

pub fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

pub fn pod_terminal(pod: &Pod) -> bool {
    matches!(pod_phase(pod), "Succeeded" | "Failed")
}

/// A true pod condition of `type_`, with its reason.
pub fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| c.reason.as_deref().unwrap_or(""))
}

/// Kubernetes is taking the pod away (preemption, eviction, drain, a
/// lost node): the `DisruptionTarget` condition, with its reason.
pub fn disruption(pod: &Pod) -> Option<&str> {
    pod_condition(pod, "DisruptionTarget")
}

/// Why the scheduler found no node for the pod, in its words (`0/12
/// nodes are available: 12 Insufficient nvidia.com/gpu.`).
pub fn unschedulable_message(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
        .map(|c| c.message.as_deref().unwrap_or("no node fits it"))
}

/// The scheduler found no node for the pod.
pub fn unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
        })
}

/// How the task's container ended, when it has.
pub fn terminated(pod: &Pod) -> Option<&ContainerStateTerminated> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let main = statuses
        .iter()
        .find(|c| c.name == CONTAINER)
        .or(statuses.first())?;
    main.state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .or_else(|| main.last_state.as_ref()?.terminated.as_ref())
}

/// The pod's container has started (it runs, or ran).
pub fn started(pod: &Pod) -> bool {
    matches!(pod_phase(pod), "Running" | "Succeeded" | "Failed")
}

/// The pod runs and is `Ready` (a worker's node: its setup is done, as
/// its readiness probe found), and is not being deleted.
pub fn ready(pod: &Pod) -> bool {
    pod_phase(pod) == "Running"
        && !deleting(&pod.metadata)
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// An init container that ended in failure (the files could not be put
/// in place): the main container never ran.
pub fn init_failed(pod: &Pod) -> Option<&ContainerStateTerminated> {
    pod.status
        .as_ref()?
        .init_container_statuses
        .as_ref()?
        .iter()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
        .find(|t| t.exit_code != 0)
}

/// Why the pod's container waits to start, as the kubelet says
/// (`ImagePullBackOff: ...`), when it does.
pub fn container_waiting(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    // An init container's first (a bucket's sidecar that cannot mount
    // restarts there, and holds the pod back), then the task's.
    let said = |c: &ContainerStatus| {
        let waiting = c.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.as_deref()?;
        // Starting: no reason worth saying.
        if reason == "ContainerCreating" || reason == "PodInitializing" {
            return None;
        }
        let what = match waiting.message.as_deref() {
            Some(m) => format!("{reason}: {m}"),
            None => reason.to_owned(),
        };
        Some(if c.name == CONTAINER {
            what
        } else {
            format!("{}: {what}", c.name)
        })
    };
    status
        .init_container_statuses
        .iter()
        .flatten()
        .find_map(said)
        .or_else(|| status.container_statuses.iter().flatten().find_map(said))
}

/// Whether the JobSet records `pod` filled with what `fill` names
/// ([`super::files::FILLED_ANNOTATION`]): that pod, not an earlier one of
/// its name.
pub fn filled(jobset: &JobSet, pod: &Pod, fill: &str) -> bool {
    let said = jobset
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(super::files::FILLED_ANNOTATION));
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    said.is_some_and(|s| s.split_once('/') == Some((fill, uid)))
}

/// The node of a pod: its task (`skyc.io/task`) and rank
/// (`skyc.io/node-index`).
pub fn node_of(meta: &ObjectMeta) -> Option<(&str, u32)> {
    let labels = meta.labels.as_ref()?;
    let task = labels.get(TASK_LABEL)?;
    let rank = labels.get(NODE_INDEX_LABEL)?.parse().ok()?;
    Some((task, rank))
}
