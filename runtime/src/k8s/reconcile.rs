//! From the engine's goal and the group's objects to the API requests that
//! close the gap. Pure and idempotent, like a kube-rs reconciler: the same
//! state gives the same requests, and once a request's effect is seen it
//! is not asked again.
//!
//! Who owns what. The manifests own creation: the JobSet controller
//! creates every node Job, and recreates one that is deleted while the
//! JobSet runs; the Job controller creates its pod. The runtime owns
//! every decision SkyPilot's semantics need, through the engine:
//!
//! - **Attempts.** A node Job created by JobSet carries no attempt; the
//!   runtime annotates it with the engine's current attempt
//!   (`skyc.io/attempt`, [`Op::Bind`]) before it reads its pods, so a
//!   pod's end is always told to the engine with the attempt it ran.
//! - **Restarts** (a new attempt): the old attempt's Jobs are deleted in
//!   the foreground, each only if it is still the Job of that uid
//!   ([`Op::Delete`]); JobSet recreates them, with the same names and
//!   hostnames, and they are bound to the new attempt. The task restarts
//!   as a whole, every node.
//! - **Stopping** an attempt (a node failed, or the task is terminated):
//!   its Jobs go to `parallelism: 0` ([`Op::Stop`]); the Job controller
//!   deletes the pods, each getting SIGTERM and its grace period, and the
//!   Job stays active so JobSet neither recreates nor counts it. The
//!   node Jobs' own `backoffLimit` is raised at apply time (see
//!   [`super::apply`]), so no Job ever fails by itself and the JobSet's
//!   native failure never preempts the engine.
//! - **The end.** When every task has ended: a SUCCEEDED group opens the
//!   delay gate ([`Op::OpenGate`], when the JobSet has one) and JobSet
//!   completes natively; any other end fails one Job of the first
//!   unsuccessful primary on purpose (`activeDeadlineSeconds: 1`,
//!   [`Op::FailJobSet`]), so the JobSet fails natively and releases its
//!   quota. A cancel deletes the JobSet in the foreground
//!   ([`Op::DeleteJobSet`]).
//!
//! All of it acts on Jobs, so it holds for a pipeline too, where a Job is
//! a whole step (an Indexed Job of its nodes, see
//! [`Layout`](super::plan::Layout)): binding, stopping (every pod of the
//! step gets SIGTERM) and restarting are the step's, and the Job failed
//! at the end is the failed step's, so JobSet never creates the steps
//! after it. A step the engine has not launched has no Job yet (JobSet
//! creates it once the previous step's is `Complete`); one made before
//! the engine heard of that success is bound to the attempt it will run.

use super::goal::{Goal, Want};
use super::objects::{self, Objects};
use super::plan::Plan;
use crate::policy::Status;
use skyc_targets::k8s::names;

/// One API request, as data: what to do to which object (its uid is the
/// precondition, so a request meant for one incarnation never touches
/// the next).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// Annotate a node Job with the attempt it runs.
    Bind {
        job: String,
        uid: String,
        attempt: u32,
    },
    /// `parallelism: 0`: stop the Job's pod, keep the Job.
    Stop { job: String, uid: String },
    /// Delete a node Job of an older attempt (foreground).
    Delete { job: String, uid: String },
    /// `parallelism: 1` on the delay gate.
    OpenGate { job: String, uid: String },
    /// `activeDeadlineSeconds: 1` on one Job, so the JobSet fails.
    FailJobSet { job: String, uid: String },
    /// Delete the JobSet (foreground): cancel.
    DeleteJobSet { uid: String },
    /// Delete pods now (grace 0): the engine's SIGKILL after the grace.
    KillPod { pod: String, uid: String },
}

/// The requests that bring the group's objects to the goal, in order.
pub fn reconcile(plan: &Plan, objs: &Objects, goal: &Goal) -> Vec<Op> {
    let mut ops = Vec::new();
    let Some(jobset) = objs.jobset.as_ref() else {
        return ops;
    };
    let uid = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.uid.clone().unwrap_or_default()
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
    for (task, tg) in goal.tasks.iter().enumerate() {
        for job_name in plan.jobs_of(task) {
            let Some(job) = objs.jobs.get(&job_name) else {
                continue;
            };
            if objects::deleting(&job.metadata) {
                continue;
            }
            let job_uid = uid(&job.metadata);
            match objects::bound_attempt(job) {
                None if !ended => ops.push(Op::Bind {
                    job: job_name,
                    uid: job_uid,
                    attempt: tg.attempt,
                }),
                None => {}
                // An older attempt's Job: deleted for the restart, unless
                // the task has ended meanwhile (JobSet would make it again
                // only to be stopped): then stopped where it is.
                Some(a) if a < tg.attempt && !ended => {
                    if tg.want != Want::Done {
                        ops.push(Op::Delete {
                            job: job_name,
                            uid: job_uid,
                        });
                    } else if tg.status != Status::Succeeded
                        && objects::parallelism(job) != 0
                        && !objects::job_finished(job)
                    {
                        ops.push(Op::Stop {
                            job: job_name,
                            uid: job_uid,
                        });
                    }
                }
                Some(a) if a == tg.attempt => {
                    let stop = match tg.want {
                        Want::Run => false,
                        Want::Stop => true,
                        Want::Done => tg.status != Status::Succeeded,
                    };
                    if stop && objects::parallelism(job) != 0 && !objects::job_finished(job) {
                        ops.push(Op::Stop {
                            job: job_name,
                            uid: job_uid,
                        });
                    }
                }
                Some(_) => {}
            }
        }
    }
    match goal.end {
        Some(Status::Succeeded) if !ended => {
            let gate = plan.gate_job();
            if jobset.replicated_job(names::GATE).is_some()
                && let Some(job) = objs.jobs.get(&gate)
                && objects::parallelism(job) == 0
                && !objects::deleting(&job.metadata)
            {
                ops.push(Op::OpenGate {
                    job: gate,
                    uid: uid(&job.metadata),
                });
            }
        }
        Some(status) if status != Status::Succeeded && !ended => {
            if let Some((job, meta)) = failing_job(plan, objs, goal)
                && !meta.1
            {
                ops.push(Op::FailJobSet { job, uid: meta.0 });
            }
        }
        _ => {}
    }
    ops
}

/// The Job to fail the JobSet with: the first Job of the first primary
/// that did not succeed (in a pipeline, the step that failed: the later
/// ones have no Job), and whether its deadline is set already.
fn failing_job(plan: &Plan, objs: &Objects, goal: &Goal) -> Option<(String, (String, bool))> {
    let task = (0..goal.tasks.len())
        .find(|&t| plan.spec.tasks[t].primary && goal.tasks[t].status != Status::Succeeded)?;
    plan.jobs_of(task).into_iter().find_map(|name| {
        let job = objs.jobs.get(&name)?;
        if objects::deleting(&job.metadata) {
            return None;
        }
        let deadline = job
            .spec
            .as_ref()
            .and_then(|s| s.active_deadline_seconds)
            .is_some_and(|d| d <= 1);
        Some((
            name,
            (job.metadata.uid.clone().unwrap_or_default(), deadline),
        ))
    })
}

/// The engine's SIGKILL for an attempt: every pod of its Jobs not yet
/// ended.
pub fn kill(plan: &Plan, objs: &Objects, task: usize, attempt: u32) -> Vec<Op> {
    if task >= plan.spec.tasks.len() {
        return Vec::new();
    }
    let mut ops = Vec::new();
    for name in plan.jobs_of(task) {
        let Some(job) = objs.jobs.get(&name) else {
            continue;
        };
        if objects::bound_attempt(job) != Some(attempt) {
            continue;
        }
        for pod in objs.pods_of(job) {
            if !objects::pod_terminal(pod) {
                ops.push(Op::KillPod {
                    pod: pod.metadata.name.clone().unwrap_or_default(),
                    uid: pod.metadata.uid.clone().unwrap_or_default(),
                });
            }
        }
    }
    ops
}

/// Everything the group had is gone or final: nothing more will happen
/// on the cluster once the engine has finished.
pub fn settled(objs: &Objects, goal: &Goal) -> bool {
    if goal.end.is_none() {
        return false;
    }
    if goal.cancel || goal.end == Some(Status::Cancelled) {
        return objs.jobset.is_none() && objs.pods.is_empty();
    }
    objs.jobset
        .as_ref()
        .is_none_or(|j| j.terminal_state().is_some())
}
