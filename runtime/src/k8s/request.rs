//! Each [`Op`] as its API request, retried while the answer is transient,
//! and its answer written into the cache at once (so the reconciler does
//! not ask again before the watch brings the change).
//!
//! Every write names the object's uid: merge patches carry
//! `metadata.uid`, deletes a uid precondition. A request meant for one
//! incarnation of an object can therefore never touch another of the same
//! name, however late it arrives or often it is retried. Pods are created,
//! never patched: each attempt has its own.

use super::exec::{ExecError, PodExec};
use super::files::FillError;
use super::jobset::JobSet;
use super::plan::{FIELD_MANAGER, LAUNCHED_ANNOTATION, Plan};
use super::reconcile::Op;
use super::retry;
use super::watch::{SharedRef, Watched, lock};
use crate::reconciler::backoff::Backoff;
use either::Either;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

/// How long one request may take before it counts as unanswered.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How a request ended.
#[derive(Debug)]
pub enum Outcome {
    Done,
    /// The object is gone, or is another incarnation: nothing to do.
    Moot,
    /// Refused for good (permissions, validation): say so.
    Refused(String),
    /// Still failing after every try.
    Failing(kube::Error),
    /// Not done, for a reason that may pass (an exec that did not
    /// answer): say it, and try again later.
    Retry(String),
}

/// The API of the group's objects.
#[derive(Clone)]
pub struct Apis {
    pub jobsets: Api<JobSet>,
    pub jobs: Api<Job>,
    pub pods: Api<Pod>,
    pub workloads: Api<super::kueue::Workload>,
    pub group: String,
    /// Commands in pods, and where the snapshots are: the files pod's
    /// filling.
    pub files: Option<(std::sync::Arc<dyn PodExec>, PathBuf)>,
}

impl Apis {
    pub fn new(client: &Client, namespace: &str, group: &str) -> Self {
        Self {
            jobsets: Api::namespaced(client.clone(), namespace),
            jobs: Api::namespaced(client.clone(), namespace),
            pods: Api::namespaced(client.clone(), namespace),
            workloads: Api::namespaced(client.clone(), namespace),
            group: group.to_owned(),
            files: None,
        }
    }
}

fn merge(uid: &str, rest: Value) -> Value {
    let mut patch = rest;
    patch["metadata"]["uid"] = json!(uid);
    patch
}

fn delete_params(uid: &str) -> DeleteParams {
    DeleteParams::foreground().preconditions(Preconditions {
        uid: Some(uid.to_owned()),
        resource_version: None,
    })
}

/// How many pods of one launch are created at once.
const CREATE_CONCURRENCY: usize = 16;

/// Carries out `op`, trying again while the answer is transient.
pub async fn execute(
    plan: &Plan,
    apis: &Apis,
    shared: &SharedRef,
    op: &Op,
    backoff: Backoff,
) -> Outcome {
    if let Op::Launch { task, attempt, .. } = op {
        // The record first: a pod of a recorded attempt is never made
        // again once it is gone.
        let recorded = execute_one(apis, shared, op, backoff).await;
        if !matches!(recorded, Outcome::Done) {
            return recorded;
        }
        return launch(plan, apis, shared, *task, *attempt, backoff).await;
    }
    match op {
        Op::MakeFilesPod { .. } => {
            let anchor = lock(shared).objs.jobset.clone();
            let (Some(anchor), Some(name)) = (anchor, plan.files_pod_name()) else {
                return Outcome::Moot;
            };
            let Some(pod) = plan.files_pod(&anchor) else {
                return Outcome::Moot;
            };
            create_pod(apis, shared, &name, &pod, backoff).await
        }
        _ => execute_one(apis, shared, op, backoff).await,
    }
}

/// Sends the streams to the files pod, then records it filled on the
/// JobSet (the JobSet's uid the precondition, the pod's in the record):
/// nodes are launched once it is.
pub async fn fill_files(
    plan: &Plan,
    apis: &Apis,
    shared: &SharedRef,
    pod: &str,
    uid: &str,
    backoff: Backoff,
) -> Outcome {
    let Some((exec, snapshots)) = &apis.files else {
        return Outcome::Refused("this supervisor cannot run commands in pods".into());
    };
    let filled =
        super::files::fill(exec.as_ref(), &plan.namespace, pod, snapshots, &plan.files).await;
    match filled {
        Ok(()) => {}
        Err(FillError::Exec(ExecError::Gone(_))) => return Outcome::Moot,
        Err(FillError::Exec(ExecError::Failed(why))) => return Outcome::Retry(why),
        Err(FillError::Exec(ExecError::Denied(why)) | FillError::Lost(why)) => {
            return Outcome::Refused(why);
        }
    }
    // Recorded on the JobSet (its uid the precondition), naming this pod.
    let Some(anchor) = lock(shared)
        .objs
        .jobset
        .as_ref()
        .and_then(|j| j.metadata.uid.clone())
    else {
        return Outcome::Moot;
    };
    let body = merge(
        &anchor,
        json!({"metadata": {"annotations": {
            super::files::FILLED_ANNOTATION:
                format!("{}/{uid}", super::files::fill_id(&plan.files))
        }}}),
    );
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let mut tries = 0;
    loop {
        match apis
            .jobsets
            .patch(&apis.group, &params, &Patch::Merge(&body))
            .await
        {
            Ok(p) => {
                put(shared, p);
                return Outcome::Done;
            }
            Err(e) if retry::not_found(&e) || retry::stale(&e) => return Outcome::Moot,
            Err(e) if retry::is_transient(&e) && tries + 1 < backoff.tries => {
                tokio::time::sleep(backoff.delay(tries)).await;
                tries += 1;
            }
            Err(e) if retry::is_transient(&e) => return Outcome::Failing(e),
            Err(e) => return Outcome::Refused(retry::describe(&e)),
        }
    }
}

/// Creates every node's pod of a recorded attempt, some at once; the
/// first failure that is not transient is the outcome (the pods not made
/// are read as lost).
async fn launch(
    plan: &Plan,
    apis: &Apis,
    shared: &SharedRef,
    task: usize,
    attempt: u32,
    backoff: Backoff,
) -> Outcome {
    use futures::StreamExt;
    let Some(anchor) = lock(shared).objs.jobset.clone() else {
        return Outcome::Moot;
    };
    let nodes = plan.spec.tasks.get(task).map_or(0, |t| t.num_nodes);
    let outcomes: Vec<Outcome> = futures::stream::iter(0..nodes)
        .map(|rank| {
            let pod = plan.node_pod(task, rank, attempt, &anchor);
            let name = plan.pod_of(task, rank, attempt);
            async move { create_pod(apis, shared, &name, &pod, backoff).await }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .collect()
        .await;
    outcomes
        .into_iter()
        .find(|o| !matches!(o, Outcome::Done))
        .unwrap_or(Outcome::Done)
}

/// Creates one pod; one of that name already there is this run's (the
/// name carries the attempt), so that is done too.
async fn create_pod(
    apis: &Apis,
    shared: &SharedRef,
    name: &str,
    pod: &Value,
    backoff: Backoff,
) -> Outcome {
    let body: Pod = match serde_json::from_value(pod.clone()) {
        Ok(p) => p,
        Err(e) => return Outcome::Refused(format!("the pod {name} is not a pod: {e}")),
    };
    let params = kube::api::PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..kube::api::PostParams::default()
    };
    let mut tries = 0;
    loop {
        let result = tokio::time::timeout(CALL_TIMEOUT, apis.pods.create(&params, &body)).await;
        match result {
            Ok(Ok(created)) => {
                put(shared, created);
                return Outcome::Done;
            }
            // This run's pod (the name carries the attempt), or one of an
            // earlier run of the group still going away: then wait for it.
            Ok(Err(e)) if retry::already_exists(&e) => {
                let ours = match apis.pods.get_opt(name).await {
                    Ok(Some(p)) => super::objects::run_of(&p.metadata) == run_of_value(pod),
                    Ok(None) => false,
                    Err(_) => false,
                };
                if ours {
                    return Outcome::Done;
                }
                tries += 1;
                if tries >= backoff.tries {
                    return Outcome::Failing(e);
                }
                tokio::time::sleep(backoff.delay(tries - 1)).await;
            }
            Ok(Err(e)) if retry::is_transient(&e) => {
                tries += 1;
                if tries >= backoff.tries {
                    return Outcome::Failing(e);
                }
                tokio::time::sleep(backoff.delay(tries - 1)).await;
            }
            Ok(Err(e)) => {
                return Outcome::Refused(format!("creating pod {name}: {}", retry::describe(&e)));
            }
            Err(_) => {
                tries += 1;
                if tries >= backoff.tries {
                    return Outcome::Failing(kube::Error::ReadEvents(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {} s", CALL_TIMEOUT.as_secs()),
                    )));
                }
            }
        }
    }
}

fn run_of_value(pod: &Value) -> Option<&str> {
    pod["metadata"]["annotations"][super::RUN_ANNOTATION].as_str()
}

async fn execute_one(apis: &Apis, shared: &SharedRef, op: &Op, backoff: Backoff) -> Outcome {
    let mut tries = 0;
    loop {
        let result = match tokio::time::timeout(CALL_TIMEOUT, once(apis, shared, op)).await {
            Ok(r) => r,
            Err(_) => Err(kube::Error::ReadEvents(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {} s", CALL_TIMEOUT.as_secs()),
            ))),
        };
        match result {
            Ok(()) => return Outcome::Done,
            Err(e) if retry::not_found(&e) || retry::stale(&e) => {
                forget(shared, op);
                return Outcome::Moot;
            }
            Err(e) if retry::is_transient(&e) => {
                tries += 1;
                if tries >= backoff.tries {
                    return Outcome::Failing(e);
                }
                tokio::time::sleep(backoff.delay(tries - 1)).await;
            }
            Err(e) => return Outcome::Refused(retry::describe(&e)),
        }
    }
}

async fn once(apis: &Apis, shared: &SharedRef, op: &Op) -> Result<(), kube::Error> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let patch_job = |job: &str, uid: &str, rest: Value| {
        let body = merge(uid, rest);
        let job = job.to_owned();
        let params = params.clone();
        async move { apis.jobs.patch(&job, &params, &Patch::Merge(&body)).await }
    };
    match op {
        Op::Launch {
            task,
            attempt,
            anchor,
        } => {
            let body = merge(
                anchor,
                json!({"metadata": {"annotations": {
                    format!("{LAUNCHED_ANNOTATION}{task}"): attempt.to_string()
                }}}),
            );
            let js = apis
                .jobsets
                .patch(&apis.group, &params, &Patch::Merge(&body))
                .await?;
            put(shared, js);
        }
        Op::DeletePod { pod, uid } => {
            let params = DeleteParams::default().preconditions(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            });
            match apis.pods.delete(pod, &params).await? {
                Either::Left(obj) => put_cached(shared, obj),
                Either::Right(_) => forget(shared, op),
            }
        }
        Op::OpenGate { job, uid } => {
            put(
                shared,
                patch_job(job, uid, json!({"spec": {"parallelism": 1}})).await?,
            );
        }
        Op::FailJobSet { job, uid } => {
            put(
                shared,
                patch_job(job, uid, json!({"spec": {"activeDeadlineSeconds": 1}})).await?,
            );
        }
        Op::DeleteJobSet { uid } => {
            match apis
                .jobsets
                .delete(&apis.group, &delete_params(uid))
                .await?
            {
                Either::Left(obj) => put(shared, obj),
                Either::Right(_) => forget(shared, op),
            }
        }
        // Carried out by [`execute`], and by the backend's fill task
        // ([`fill_files`]).
        Op::MakeFilesPod { .. } | Op::FillFiles { .. } => {}
        Op::KillPod { pod, uid } => {
            let params = DeleteParams::default()
                .grace_period(0)
                .preconditions(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                });
            match apis.pods.delete(pod, &params).await? {
                Either::Left(obj) => put_cached(shared, obj),
                Either::Right(_) => forget(shared, op),
            }
        }
    }
    Ok(())
}

fn put<K: Watched>(shared: &SharedRef, obj: K) {
    K::put(&mut lock(shared).objs, obj);
}

/// A deleted pod as the API answered, only if the cache still has it: the
/// watch may have seen it go already (an ended pod goes at once), and it
/// must not come back.
fn put_cached(shared: &SharedRef, pod: Pod) {
    let mut s = lock(shared);
    if s.objs.pods.contains_key(&pod.name_any()) {
        <Pod as Watched>::put(&mut s.objs, pod);
    }
}

/// The object an op was for is gone (or replaced): drop it from the cache
/// if it is still the one the op named.
fn forget(shared: &SharedRef, op: &Op) {
    let mut s = lock(shared);
    let uid_is = |m: &kube::core::ObjectMeta, uid: &str| m.uid.as_deref() == Some(uid);
    match op {
        Op::OpenGate { job, uid } | Op::FailJobSet { job, uid } => {
            if s.objs
                .jobs
                .get(job)
                .is_some_and(|j| uid_is(&j.metadata, uid))
            {
                s.objs.jobs.remove(job);
            }
        }
        Op::MakeFilesPod { anchor: uid }
        | Op::Launch { anchor: uid, .. }
        | Op::DeleteJobSet { uid } => {
            if s.objs
                .jobset
                .as_ref()
                .is_some_and(|j| uid_is(&j.metadata, uid))
            {
                s.objs.jobset = None;
            }
        }
        Op::KillPod { pod, uid } | Op::DeletePod { pod, uid } | Op::FillFiles { pod, uid } => {
            if s.objs
                .pods
                .get(pod)
                .is_some_and(|p| uid_is(&p.metadata, uid))
            {
                s.objs.pods.remove(pod);
            }
        }
    }
}

/// The op's object, for messages.
pub fn describe(op: &Op) -> String {
    match op {
        Op::Launch { task, attempt, .. } => {
            format!("launching attempt {attempt} of task {task}")
        }
        Op::DeletePod { pod, .. } => format!("stopping pod {pod}"),
        Op::OpenGate { job, .. } => format!("opening the delay gate {job}"),
        Op::FailJobSet { job, .. } => format!("failing Job {job}"),
        Op::DeleteJobSet { .. } => "deleting the JobSet".to_owned(),
        Op::KillPod { pod, .. } => format!("killing pod {pod}"),
        Op::MakeFilesPod { .. } => "creating the files pod".to_owned(),
        Op::FillFiles { pod, .. } => format!("sending the files to pod {pod}"),
    }
}

/// `namespace/name uid` of a JobSet: the backend's id of the group.
pub fn job_id(js: &JobSet) -> String {
    format!(
        "{}/{} {}",
        js.namespace().unwrap_or_default(),
        js.name_any(),
        js.uid().unwrap_or_default()
    )
}
