//! From the group's objects to the engine's events: where the policy
//! engine meets Kubernetes.
//!
//! Level-triggered: it reads the whole current state (as a re-list would
//! give it), not single watch events, so a failure folded into a later
//! state by a re-list is still seen, and reading the same state twice
//! gives the same events, which the engine ignores the second time.
//!
//! A Job belongs to the attempt in its `skyc.io/attempt` annotation (see
//! [`super::reconcile`]); a node is read from the first pod its current
//! Job created for it (a group's node Job has only that node's pods; a
//! pipeline step's Indexed Job has one completion index per node, see
//! [`Layout`](super::plan::Layout)):
//!
//! | what the pod shows | event |
//! |---|---|
//! | condition `DisruptionTarget` (preemption, eviction, drain, a lost node) | `NodeLost` |
//! | `Succeeded` | `NodeExited` run 0 |
//! | `Failed`, container `main` terminated with a code | `NodeExited` with it (setup when the entrypoint's termination message says so) |
//! | `Failed` with no container end (evicted before it ran) | `NodeLost` |
//! | being deleted while the task should run, and not by the JobSet's end | `NodeLost` (killed from outside) |
//! | none left while the attempt stops, or its Job gone | `NodeLost` |
//! | no Job yet while the task should run (JobSet waits on `dependsOn`, or remakes a deleted one) | nothing: waiting |
//!
//! A task is started when every node's pod has started, queued when a pod
//! is unschedulable or the JobSet is suspended (Kueue has not admitted
//! it). Events come in a fixed order, exits before losses, so that when
//! the JobSet ends the auxiliaries itself (no delay gate), the primaries'
//! ends reach the engine before the auxiliaries' pods vanish.

use super::goal::{Goal, Want};
use super::objects::{self, Objects};
use super::plan::Plan;
use crate::backend::{NodeInfo, Report};
use crate::policy::{Event, Phase};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;

/// How one node of the current attempt looks.
#[derive(Clone, Debug, PartialEq)]
enum Seen {
    /// Not decided yet: no pod, or not started.
    Waiting,
    /// Its pod cannot be scheduled.
    Queued,
    Running,
    Exited {
        phase: Phase,
        code: i32,
        at_ms: Option<i64>,
    },
    Lost,
}

/// What the group's objects say now, for the engine and for status.
pub fn observe(plan: &Plan, objs: &Objects, goal: &Goal) -> Vec<Report> {
    let mut queued = Vec::new();
    let mut started = Vec::new();
    let mut exits = Vec::new();
    let mut losses = Vec::new();
    let mut nodes = Vec::new();
    let jobset_ended = objs
        .jobset
        .as_ref()
        .and_then(|j| j.terminal_state())
        .is_some();
    let suspended = objs.jobset.as_ref().is_some_and(|j| j.is_suspended());
    for (task, tg) in goal.tasks.iter().enumerate() {
        if tg.want == Want::Done {
            continue;
        }
        let attempt = tg.attempt;
        let mut all_started = true;
        let mut any_queued = suspended;
        for (rank, &live) in (0u32..).zip(&tg.live) {
            let job = objs.jobs.get(&plan.job_of(task, rank));
            let current = job.filter(|j| objects::bound_attempt(j) == Some(attempt));
            let pods = |job: &Job| -> Vec<&Pod> {
                let mut pods = objs.pods_of(job);
                pods.retain(|p| plan.layout().runs(p, rank));
                pods
            };
            if let Some(job) = current
                && let Some(pod) = pods(job).last()
            {
                nodes.push(NodeInfo {
                    hostname: plan.hostname(task, rank),
                    ..node_info(task, rank, attempt, pod)
                });
            }
            if !live {
                continue;
            }
            let unbound = job
                .filter(|j| objects::bound_attempt(j).is_none() && !objects::deleting(&j.metadata));
            let seen = match (current, unbound) {
                (Some(job), _) => node(job, &pods(job), tg.want, jobset_ended),
                (None, Some(_)) => Seen::Waiting,
                (None, None) => {
                    if tg.want != Want::Run || objs.jobset_gone() || jobset_ended {
                        Seen::Lost
                    } else {
                        Seen::Waiting
                    }
                }
            };
            all_started &= matches!(seen, Seen::Running | Seen::Exited { .. } | Seen::Lost);
            any_queued |= seen == Seen::Queued;
            match seen {
                Seen::Exited { phase, code, at_ms } => exits.push(Report::Event {
                    event: Event::NodeExited {
                        task,
                        attempt,
                        node: rank,
                        phase,
                        code,
                    },
                    at_ms,
                }),
                Seen::Lost => losses.push(Report::Event {
                    event: Event::NodeLost {
                        task,
                        attempt,
                        node: rank,
                    },
                    at_ms: None,
                }),
                Seen::Waiting | Seen::Queued | Seen::Running => {}
            }
        }
        let any_live = tg.live.iter().any(|&l| l);
        if tg.want == Want::Run && any_live {
            if all_started {
                started.push(Report::Event {
                    event: Event::TaskStarted { task, attempt },
                    at_ms: None,
                });
            } else if any_queued {
                queued.push(Report::Event {
                    event: Event::TaskQueued { task, attempt },
                    at_ms: None,
                });
            }
        }
    }
    let mut out = nodes.into_iter().map(Report::Node).collect::<Vec<_>>();
    out.extend(queued);
    out.extend(started);
    out.extend(exits);
    out.extend(losses);
    out
}

/// One node of the current attempt, from its Job and the first of the
/// pods the Job made for it (later ones are the Job's own replacements,
/// which the runtime's restart supersedes).
fn node(job: &Job, pods: &[&Pod], want: Want, jobset_ended: bool) -> Seen {
    let Some(pod) = pods.first() else {
        return if objects::job_condition(job, "Complete") {
            Seen::Exited {
                phase: Phase::Run,
                code: 0,
                at_ms: None,
            }
        } else if want != Want::Run || objects::deleting(&job.metadata) || jobset_ended {
            Seen::Lost
        } else {
            Seen::Waiting
        };
    };
    if objects::disruption(pod).is_some() {
        return Seen::Lost;
    }
    match objects::pod_phase(pod) {
        "Succeeded" => {
            return Seen::Exited {
                phase: Phase::Run,
                code: 0,
                at_ms: objects::terminated(pod).and_then(finished_ms),
            };
        }
        "Failed" => {
            return match objects::terminated(pod) {
                Some(t) => Seen::Exited {
                    phase: phase_of(t.message.as_deref()),
                    code: t.exit_code,
                    at_ms: finished_ms(t),
                },
                None => Seen::Lost,
            };
        }
        _ => {}
    }
    if objects::deleting(&pod.metadata) && want == Want::Run && !jobset_ended {
        return Seen::Lost;
    }
    if objects::started(pod) {
        Seen::Running
    } else if objects::unschedulable(pod) {
        Seen::Queued
    } else {
        Seen::Waiting
    }
}

/// The entrypoint's termination message names the phase that failed
/// (`setup`); anything else is `run`.
fn phase_of(message: Option<&str>) -> Phase {
    match message.and_then(|m| m.lines().next()) {
        Some(line) if line.trim() == "setup" => Phase::Setup,
        _ => Phase::Run,
    }
}

fn finished_ms(t: &k8s_openapi::api::core::v1::ContainerStateTerminated) -> Option<i64> {
    t.finished_at.as_ref().map(|t| t.0.as_millisecond())
}

fn node_info(task: usize, rank: u32, attempt: u32, pod: &Pod) -> NodeInfo {
    let status = pod.status.as_ref();
    NodeInfo {
        task,
        rank,
        attempt,
        hostname: String::new(),
        pid: None,
        handle: pod.metadata.name.clone().unwrap_or_default(),
        machine: pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        ip: status.and_then(|s| s.pod_ip.clone()).unwrap_or_default(),
        phase: None,
        exit_code: objects::terminated(pod).map(|t| t.exit_code),
    }
}
