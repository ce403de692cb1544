//! From the engine's goal and the group's objects to the API requests that
//! close the gap. Pure and idempotent, like a kube-rs reconciler: the same
//! state gives the same requests, and once a request's effect is seen it
//! is not asked again.
//!
//! Who owns what. The runtime owns every node's pod: each attempt of each
//! node is exactly one pod, created when the engine launched the attempt
//! and by nothing else (no Job replaces it, so no pod ever runs that the
//! engine did not decide, whether the supervisor is up or not). The
//! JobSet anchors the group: its headless Service publishes the pods'
//! hostnames, its end is the group's, and deleting it deletes the pods.
//!
//! - **Launch** ([`Op::Launch`]): once a task's current attempt is
//!   launched and no pod of an older attempt of it is left, the JobSet
//!   records the attempt (`skyc.io/launched-{task}`), then every node's
//!   pod is created. The record comes first: a pod of a recorded attempt
//!   that is missing was taken away (or never made, the supervisor having
//!   died in between) and is read as lost, never made again.
//! - **Stopping** an attempt (a node failed or was lost, or the task is
//!   terminated): its pods are deleted ([`Op::DeletePod`]), each getting
//!   SIGTERM and the run's grace; the engine's SIGKILL after the grace
//!   deletes the rest at once ([`Op::KillPod`]).
//! - **Restarts** (a newer attempt): the older attempt's pods are deleted,
//!   ended ones included, so a hostname is never held by two pods; the new
//!   attempt is launched once they are gone. The task restarts as a
//!   whole, every node.
//! - **The end.** When every task has ended: a SUCCEEDED group opens the
//!   gate ([`Op::OpenGate`]) and JobSet completes natively; any other end
//!   fails the gate on purpose (`activeDeadlineSeconds: 1`,
//!   [`Op::FailJobSet`]), so the JobSet fails natively. A cancel deletes
//!   the JobSet in the foreground ([`Op::DeleteJobSet`]), and the pods
//!   with it.
//!
//! - **Files** (a group whose tasks have files): while the group runs, its
//!   files pod is there ([`Op::MakeFilesPod`], again if it is lost) and
//!   filled ([`Op::FillFiles`]); no node's pod is made before it is
//!   filled, and it is deleted once the group ends.
//!
//! A pipeline is the same: the engine launches each step only after the
//! one before it succeeded.

use super::objects::{self, Objects};
use super::plan::Plan;
use crate::policy::Status;
use crate::reconciler::goal::{Goal, Want};
use k8s_openapi::api::core::v1::Pod;
use skyc_targets::k8s::pods::TASK_LABEL;

/// One API request, as data: what to do to which object (its uid is the
/// precondition, so a request meant for one incarnation never touches
/// the next).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// Record `attempt` of `task` on the JobSet (uid `anchor`), then
    /// create its nodes' pods.
    Launch {
        task: usize,
        attempt: u32,
        anchor: String,
    },
    /// Delete a node's pod with its grace: SIGTERM, then SIGKILL.
    DeletePod { pod: String, uid: String },
    /// `parallelism: 1` on the delay gate.
    OpenGate { job: String, uid: String },
    /// `activeDeadlineSeconds: 1` on the gate, so the JobSet fails.
    FailJobSet { job: String, uid: String },
    /// Delete the JobSet (foreground): cancel.
    DeleteJobSet { uid: String },
    /// Delete pods now (grace 0): the engine's SIGKILL after the grace.
    KillPod { pod: String, uid: String },
    /// Create the files pod, owned by the JobSet (uid `anchor`).
    MakeFilesPod { anchor: String },
    /// Send the streams to the files pod, then mark it filled.
    FillFiles { pod: String, uid: String },
}

/// Where the group's files pod is.
enum Files<'a> {
    /// The group has no files.
    None,
    /// Not there, or going away.
    Absent,
    /// There, running, not yet filled.
    Unfilled(&'a Pod),
    /// There and filled: nodes may fetch from it.
    Filled(&'a Pod),
    /// There, not ready to be filled (starting), or ended.
    Other(&'a Pod),
}

fn files_pod<'a>(plan: &Plan, objs: &'a Objects) -> Files<'a> {
    let Some(name) = plan.files_pod_name() else {
        return Files::None;
    };
    let Some(pod) = objs.pods.get(&name) else {
        return Files::Absent;
    };
    if objects::deleting(&pod.metadata) {
        Files::Absent
    } else if objects::pod_terminal(pod) || !objects::ready(pod) {
        Files::Other(pod)
    } else if super::files::filled(plan, objs, pod) {
        Files::Filled(pod)
    } else {
        Files::Unfilled(pod)
    }
}

impl<'a> Files<'a> {
    /// The pod, unless it is absent or going away.
    fn pod(&self) -> Option<&'a Pod> {
        match *self {
            Files::Unfilled(p) | Files::Filled(p) | Files::Other(p) => Some(p),
            Files::None | Files::Absent => None,
        }
    }
}

fn delete(pod: &Pod) -> Op {
    Op::DeletePod {
        pod: pod.metadata.name.clone().unwrap_or_default(),
        uid: uid(&pod.metadata),
    }
}

fn uid(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    m.uid.clone().unwrap_or_default()
}

/// The pods of each task, any attempt, in one look at every pod.
pub fn pods_by_task<'a>(plan: &Plan, objs: &'a Objects) -> Vec<Vec<&'a Pod>> {
    let index: std::collections::BTreeMap<&str, usize> = plan
        .spec
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    let mut out = vec![Vec::new(); plan.spec.tasks.len()];
    for p in objs.pods.values() {
        let task = p.metadata.labels.as_ref().and_then(|l| l.get(TASK_LABEL));
        if let Some(&i) = task.and_then(|t| index.get(t.as_str())) {
            out[i].push(&**p);
        }
    }
    out
}

/// The requests that bring the group's objects to the goal, in order.
pub fn reconcile(plan: &Plan, objs: &Objects, goal: &Goal) -> Vec<Op> {
    let mut ops = Vec::new();
    let Some(jobset) = objs.jobset.as_ref() else {
        return ops;
    };
    if goal.cancel || goal.end == Some(Status::Cancelled) {
        if !objects::deleting(&jobset.metadata) {
            ops.push(Op::DeleteJobSet {
                uid: uid(&jobset.metadata),
            });
        }
        return ops;
    }
    let ended = jobset.terminal_state().is_some();
    let open = !ended && !jobset.is_suspended() && !objects::deleting(&jobset.metadata);
    let files = files_pod(plan, objs);
    if goal.end.is_some() {
        // No node will fetch from it again.
        if let Some(pod) = files.pod() {
            ops.push(delete(pod));
        }
    } else if open {
        match files {
            Files::Absent => ops.push(Op::MakeFilesPod {
                anchor: uid(&jobset.metadata),
            }),
            Files::Unfilled(pod) => ops.push(Op::FillFiles {
                pod: pod.metadata.name.clone().unwrap_or_default(),
                uid: uid(&pod.metadata),
            }),
            // Lost (its node gone, evicted): deleted, then made again.
            Files::Other(pod) if objects::pod_terminal(pod) => ops.push(delete(pod)),
            _ => {}
        }
    }
    let files_ready = matches!(files, Files::None | Files::Filled(_));
    let by_task = pods_by_task(plan, objs);
    for (task, tg) in goal.tasks.iter().enumerate() {
        let mut older_left = false;
        for &pod in &by_task[task] {
            let Some(attempt) = objects::pod_attempt(pod) else {
                continue;
            };
            let stop = if attempt < tg.attempt {
                older_left = true;
                true
            } else if attempt == tg.attempt {
                match tg.want {
                    Want::Run => false,
                    Want::Stop | Want::Done => !objects::pod_terminal(pod),
                }
            } else {
                false
            };
            if stop && !objects::deleting(&pod.metadata) {
                ops.push(Op::DeletePod {
                    pod: pod.metadata.name.clone().unwrap_or_default(),
                    uid: uid(&pod.metadata),
                });
            }
        }
        let launched = objects::launched(jobset, task);
        if open
            && files_ready
            && tg.want == Want::Run
            && tg.live.iter().any(|&l| l)
            && launched.is_none_or(|a| a < tg.attempt)
            && !older_left
        {
            ops.push(Op::Launch {
                task,
                attempt: tg.attempt,
                anchor: uid(&jobset.metadata),
            });
        }
    }
    if goal.end.is_some() && !ended {
        let gate = plan.gate_job();
        if let Some(job) = objs.jobs.get(&gate)
            && !objects::deleting(&job.metadata)
        {
            let job_uid = uid(&job.metadata);
            if goal.end == Some(Status::Succeeded) {
                if objects::parallelism(job) == 0 {
                    ops.push(Op::OpenGate {
                        job: gate,
                        uid: job_uid,
                    });
                }
            } else if job
                .spec
                .as_ref()
                .and_then(|s| s.active_deadline_seconds)
                .is_none_or(|d| d > 1)
            {
                ops.push(Op::FailJobSet {
                    job: gate,
                    uid: job_uid,
                });
            }
        }
    }
    ops
}

/// The engine's SIGKILL for an attempt: every pod of it not yet ended.
pub fn kill(plan: &Plan, objs: &Objects, task: usize, attempt: u32) -> Vec<Op> {
    if task >= plan.spec.tasks.len() {
        return Vec::new();
    }
    pods_by_task(plan, objs)
        .swap_remove(task)
        .into_iter()
        .filter(|p| objects::pod_attempt(p) == Some(attempt) && !objects::pod_terminal(p))
        .map(|p| Op::KillPod {
            pod: p.metadata.name.clone().unwrap_or_default(),
            uid: uid(&p.metadata),
        })
        .collect()
}

/// The group has ended on the cluster as well as in the engine: every
/// pod has ended, and a group's JobSet has reached its own end (or, on a
/// cancel, is gone with its pods). A pool worker's JobSet need not reach
/// its end: it is deleted ([`remove_worker`]).
pub fn ended(plan: &Plan, objs: &Objects, goal: &Goal) -> bool {
    if goal.end.is_none() {
        return false;
    }
    if plan.hold {
        return objs.pods.values().all(|p| objects::pod_terminal(p));
    }
    if goal.cancel || goal.end == Some(Status::Cancelled) {
        return objs.jobset.is_none() && objs.pods.is_empty();
    }
    objs.jobset
        .as_ref()
        .is_none_or(|j| j.terminal_state().is_some())
        && objs.pods.values().all(|p| objects::pod_terminal(p))
}

/// A pool worker leaves nothing behind when it ends, whether retired or
/// ended by itself: once it has [`ended`] (and its logs are read: the
/// caller's `logs_read`), its JobSet is deleted, and the garbage collector
/// takes its pods, Jobs, Service, ConfigMap and Secret with it. A group's
/// finished JobSet stays, holding what it owns, as the group's record on
/// the cluster until the group runs again.
pub fn remove_worker(plan: &Plan, objs: &Objects, goal: &Goal, logs_read: bool) -> Option<Op> {
    let jobset = objs.jobset.as_ref()?;
    (plan.hold && logs_read && !objects::deleting(&jobset.metadata) && ended(plan, objs, goal))
        .then(|| Op::DeleteJobSet {
            uid: uid(&jobset.metadata),
        })
}

/// Nothing more will happen on the cluster: the group has [`ended`],
/// and nothing of a worker is left.
pub fn settled(plan: &Plan, objs: &Objects, goal: &Goal) -> bool {
    ended(plan, objs, goal) && !(plan.hold && objs.jobset.is_some())
}
