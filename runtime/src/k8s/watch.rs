//! List, then watch, one kind of the group's objects into the shared
//! [`Objects`].
//!
//! Written out rather than taken from kube's `runtime::watcher`: three
//! states (list, watch, back off) are all the runtime needs, and its
//! requests stay exactly these: a list, then watches from the list's
//! `resourceVersion`, each ended by the server after `timeoutSeconds` and
//! resumed from the last version seen. A `410 Gone` (the version is too
//! old) lists again at once; any other failure lists again after a
//! backoff. A watch that stays silent past its timeout is taken for a
//! dead connection.

use super::jobset::JobSet;
use super::kueue::Workload;
use super::objects::{self, Kind, Objects};
use super::retry;
use crate::reconciler::backoff::Backoff;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::{Resource, ResourceExt};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// How long the server keeps one watch open.
pub const WATCH_SECS: u32 = 290;

/// What a group's watches share with its reconciler.
#[derive(Debug, Default)]
pub struct Shared {
    pub objs: Objects,
    /// Kinds listed at least once: before all are, nothing is decided.
    pub listed: BTreeSet<Kind>,
    /// Since when the API server has not answered, and why.
    pub outage: Option<String>,
}

pub type SharedRef = Arc<Mutex<Shared>>;

/// Locks, and carries on past a panicked holder: the data is a cache
/// that the next list rebuilds.
pub fn lock(shared: &SharedRef) -> std::sync::MutexGuard<'_, Shared> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A kind the runtime watches, and where it goes in [`Objects`].
pub trait Watched:
    Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static
{
    const KIND: Kind;
    /// Read only when the server lets it be: refused (403) or not served
    /// (404), the watch ends instead of asking again.
    const OPTIONAL: bool = false;
    fn put(objs: &mut Objects, obj: Self);
    fn remove(objs: &mut Objects, name: &str);
    /// Forgets every object no newer than the list of version `listed`:
    /// one the runtime wrote after the list was taken (a pod it just
    /// created) stays.
    fn clear(objs: &mut Objects, listed: Option<u64>);
}

/// Whether a cached object is newer than a list of version `listed`.
fn after(meta: &kube::core::ObjectMeta, listed: Option<u64>) -> bool {
    matches!((objects::version(meta), listed), (Some(v), Some(l)) if v > l)
}

/// Keeps the newer of two versions: a watch event older than what a
/// write of the runtime's own returned is not taken.
fn newer(old: Option<&kube::core::ObjectMeta>, new: &kube::core::ObjectMeta) -> bool {
    match (old.and_then(objects::version), objects::version(new)) {
        (Some(o), Some(n)) => n >= o,
        _ => true,
    }
}

impl Watched for JobSet {
    const KIND: Kind = Kind::JobSet;
    fn put(objs: &mut Objects, obj: Self) {
        if newer(objs.jobset.as_ref().map(|j| &j.metadata), &obj.metadata) {
            objs.jobset = Some(obj);
        }
    }
    fn remove(objs: &mut Objects, _: &str) {
        objs.jobset = None;
    }
    fn clear(objs: &mut Objects, listed: Option<u64>) {
        if !objs
            .jobset
            .as_ref()
            .is_some_and(|j| after(&j.metadata, listed))
        {
            objs.jobset = None;
        }
    }
}

impl Watched for Job {
    const KIND: Kind = Kind::Job;
    fn put(objs: &mut Objects, obj: Self) {
        let name = obj.name_any();
        if newer(objs.jobs.get(&name).map(|j| &j.metadata), &obj.metadata) {
            objs.jobs.insert(name, obj);
        }
    }
    fn remove(objs: &mut Objects, name: &str) {
        objs.jobs.remove(name);
    }
    fn clear(objs: &mut Objects, listed: Option<u64>) {
        objs.jobs.retain(|_, j| after(&j.metadata, listed));
    }
}

/// What the runtime keeps of a pod, and nothing more: a group of 1,000
/// nodes holds 1,000 of them. Of its metadata: its name, uid, version,
/// deletion and skyc's own labels and annotations (the field managers'
/// records, the JobSet's and Kueue's labels and the owner go); of its
/// spec, the node it runs on (its scripts and environment, its volumes,
/// most of a pod's size, are the plan's); of its status: its phase,
/// address, its conditions' type, status, reason and message, and its
/// containers' names, states, readiness and restarts (not their images,
/// image ids or start).
pub(crate) fn slim(pod: Pod) -> Pod {
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodSpec, PodStatus};
    let skycs = |map: Option<std::collections::BTreeMap<String, String>>| {
        map.map(|m| {
            m.into_iter()
                .filter(|(k, _)| k.starts_with(SKYC_PREFIX))
                .collect::<std::collections::BTreeMap<_, _>>()
        })
        .filter(|m| !m.is_empty())
    };
    let containers = |statuses: Option<Vec<ContainerStatus>>| {
        statuses.map(|all| {
            all.into_iter()
                .map(|c| ContainerStatus {
                    name: c.name,
                    state: c.state,
                    last_state: c.last_state,
                    ready: c.ready,
                    restart_count: c.restart_count,
                    ..ContainerStatus::default()
                })
                .collect()
        })
    };
    let meta = pod.metadata;
    Pod {
        metadata: kube::core::ObjectMeta {
            name: meta.name,
            uid: meta.uid,
            resource_version: meta.resource_version,
            deletion_timestamp: meta.deletion_timestamp,
            labels: skycs(meta.labels),
            annotations: skycs(meta.annotations),
            ..Default::default()
        },
        spec: pod.spec.map(|spec| PodSpec {
            node_name: spec.node_name,
            ..Default::default()
        }),
        status: pod.status.map(|s| PodStatus {
            phase: s.phase,
            pod_ip: s.pod_ip,
            conditions: s.conditions.map(|all| {
                all.into_iter()
                    .map(|c| PodCondition {
                        type_: c.type_,
                        status: c.status,
                        reason: c.reason,
                        message: c.message,
                        ..PodCondition::default()
                    })
                    .collect()
            }),
            container_statuses: containers(s.container_statuses),
            init_container_statuses: containers(s.init_container_statuses),
            ..PodStatus::default()
        }),
    }
}

/// skyc's labels and annotations: `skyc.io/...`.
const SKYC_PREFIX: &str = "skyc.io/";

impl Watched for Pod {
    const KIND: Kind = Kind::Pod;
    fn put(objs: &mut Objects, obj: Self) {
        let obj = slim(obj);
        let name = obj.name_any();
        if newer(objs.pods.get(&name).map(|p| &p.metadata), &obj.metadata) {
            objs.pods.insert(name, Arc::new(obj));
        }
    }
    fn remove(objs: &mut Objects, name: &str) {
        objs.pods.remove(name);
    }
    fn clear(objs: &mut Objects, listed: Option<u64>) {
        objs.pods.retain(|_, p| after(&p.metadata, listed));
    }
}

impl Watched for Workload {
    const KIND: Kind = Kind::Workload;
    const OPTIONAL: bool = true;
    /// Only a Workload that queues a JobSet is kept (the watch selects
    /// the group's by its JobSet's uid).
    fn put(objs: &mut Objects, obj: Self) {
        if obj.jobset_uid().is_none() {
            return;
        }
        let name = obj.name_any();
        if newer(
            objs.workloads.get(&name).map(|w| &w.metadata),
            &obj.metadata,
        ) {
            objs.workloads.insert(name, obj);
        }
    }
    fn remove(objs: &mut Objects, name: &str) {
        objs.workloads.remove(name);
    }
    fn clear(objs: &mut Objects, listed: Option<u64>) {
        objs.workloads.retain(|_, w| after(&w.metadata, listed));
    }
}

/// Records a failed request: an outage when the server did not answer.
pub fn failed(shared: &SharedRef, server: &str, e: &kube::Error) {
    if retry::is_outage(e) {
        let mut s = lock(shared);
        if s.outage.is_none() {
            s.outage = Some(format!(
                "the Kubernetes API server {server} is not answering (since {}): {}",
                crate::store::now_ms() / 1000,
                retry::describe(e)
            ));
        }
    }
}

/// A request was answered: any outage is over.
pub fn answered(shared: &SharedRef) {
    lock(shared).outage = None;
}

/// Where every watch of a group puts what it sees: the one cache, the
/// loop it wakes, the server named in outages, and how it backs off.
#[derive(Clone)]
pub struct Sink {
    pub shared: SharedRef,
    pub notify: Arc<Notify>,
    pub server: String,
    pub backoff: Backoff,
}

/// Lists and watches `api` (narrowed by `selector`, a label selector, or
/// a field selector when `by_field`) for as long as the task lives.
pub async fn run<K: Watched>(api: Api<K>, selector: String, by_field: bool, sink: Sink) {
    let Sink {
        shared,
        notify,
        server,
        backoff,
    } = sink;
    let mut failures = 0u32;
    loop {
        let lp = if by_field {
            ListParams::default().fields(&selector)
        } else {
            ListParams::default().labels(&selector)
        };
        let mut version = match api.list(&lp).await {
            Ok(list) => {
                failures = 0;
                let mut s = lock(&shared);
                let listed = list
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|v| v.parse().ok());
                K::clear(&mut s.objs, listed);
                for item in list.items {
                    K::put(&mut s.objs, item);
                }
                s.listed.insert(K::KIND);
                s.outage = None;
                drop(s);
                notify.notify_one();
                list.metadata.resource_version.unwrap_or_default()
            }
            Err(e) if K::OPTIONAL && matches!(retry::code(&e), Some(403 | 404)) => {
                crate::supervisor::log(format_args!(
                    "not watching {}: {}",
                    K::plural(&()),
                    retry::describe(&e)
                ));
                return;
            }
            Err(e) => {
                failed(&shared, &server, &e);
                notify.notify_one();
                tokio::time::sleep(backoff.delay(failures)).await;
                failures += 1;
                continue;
            }
        };
        let wp = if by_field {
            WatchParams::default().fields(&selector)
        } else {
            WatchParams::default().labels(&selector)
        }
        .timeout(WATCH_SECS);
        // Watches from `version` until one must list again.
        let relist_after = 'watching: loop {
            let stream = match api.watch(&wp, &version).await {
                Ok(stream) => stream,
                Err(e) if retry::code(&e) == Some(410) => break 'watching None,
                Err(e) => {
                    failed(&shared, &server, &e);
                    notify.notify_one();
                    break 'watching Some(e);
                }
            };
            let mut stream = std::pin::pin!(stream);
            let idle = Duration::from_secs(u64::from(WATCH_SECS) + 30);
            loop {
                let next = match tokio::time::timeout(idle, stream.next()).await {
                    Ok(next) => next,
                    Err(_) => break 'watching None,
                };
                let Some(event) = next else {
                    // The server ended the watch: resume it.
                    continue 'watching;
                };
                let mut s = lock(&shared);
                match event {
                    Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj)) => {
                        if let Some(v) = obj.meta().resource_version.clone() {
                            version = v;
                        }
                        K::put(&mut s.objs, obj);
                    }
                    Ok(WatchEvent::Deleted(obj)) => {
                        if let Some(v) = obj.meta().resource_version.clone() {
                            version = v;
                        }
                        K::remove(&mut s.objs, &obj.name_any());
                    }
                    Ok(WatchEvent::Bookmark(b)) => version = b.metadata.resource_version,
                    Ok(WatchEvent::Error(status)) if status.code == 410 => break 'watching None,
                    Ok(WatchEvent::Error(status)) => {
                        break 'watching Some(kube::Error::Api(status));
                    }
                    Err(e) => {
                        drop(s);
                        failed(&shared, &server, &e);
                        notify.notify_one();
                        break 'watching Some(e);
                    }
                }
                s.outage = None;
                drop(s);
                notify.notify_one();
            }
        };
        if relist_after.is_some() {
            tokio::time::sleep(backoff.delay(failures)).await;
            failures += 1;
        }
    }
}
