//! From the group's objects to the engine's events: where the policy
//! engine meets Kubernetes.
//!
//! Level-triggered: it reads the whole current state (as a re-list would
//! give it), not single watch events, so a failure folded into a later
//! state by a re-list is still seen, and reading the same state twice
//! gives the same events, which the engine ignores the second time.
//!
//! A node of the current attempt is read from its one pod,
//! `{group}-{task}-{rank}-{attempt}` (see [`super::reconcile`]):
//!
//! | what the pod shows | event |
//! |---|---|
//! | condition `DisruptionTarget` (preemption, eviction, drain, a lost node) | `NodeLost` |
//! | `Succeeded` | `NodeExited` run 0 |
//! | `Failed`, container `main` terminated with a code | `NodeExited` with it (setup when the entrypoint's termination message says so) |
//! | `Failed` with no container end (evicted before it ran) | `NodeLost` |
//! | being deleted while the task should run | `NodeLost` (killed from outside) |
//! | missing once the attempt is launched (`skyc.io/launched-{task}`), or the JobSet gone | `NodeLost` |
//! | the attempt not launched yet | nothing: waiting |
//!
//! A task is started when every node's pod has started, queued when a pod
//! is unschedulable or the JobSet is suspended; while it waits, why
//! (`Report::Waiting`): the scheduler's message, or for a suspended JobSet
//! Kueue's (its Workload's quota or admission checks), else that it is
//! suspended. A pool worker's task is ready (`Report::Ready`) when every
//! node's pod is `Ready`: its probe found the marker the node writes after
//! setup. Events come in a fixed
//! order, exits before losses.

use super::objects::{self, Objects};
use super::plan::Plan;
use crate::backend::{NodeInfo, Report};
use crate::policy::{Event, Phase};
use crate::reconciler::goal::{Goal, Want};
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
    let mut ready = Vec::new();
    let mut nodes = Vec::new();
    let mut waiting = Vec::new();
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
        let launched = objs
            .jobset
            .as_ref()
            .and_then(|j| objects::launched(j, task))
            .is_some_and(|a| a >= attempt);
        let mut all_started = true;
        let mut any_queued = suspended;
        for (rank, &live) in (0u32..).zip(&tg.live) {
            let pod = objs.pods.get(&plan.pod_of(task, rank, attempt));
            if let Some(pod) = pod {
                nodes.push(NodeInfo {
                    hostname: plan.hostname(task, rank),
                    ..node_info(task, rank, attempt, pod)
                });
            }
            if !live {
                continue;
            }
            let seen = match pod {
                Some(pod) => node(pod, tg.want, jobset_ended),
                None if launched || objs.jobset_gone() || jobset_ended => Seen::Lost,
                None if tg.want != Want::Run => Seen::Lost,
                None => Seen::Waiting,
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
        // A worker's nodes are ready once every pod's probe found the
        // marker its `run` writes after setup.
        let all_ready = (0u32..).zip(&tg.live).all(|(rank, &live)| {
            live && objs
                .pods
                .get(&plan.pod_of(task, rank, attempt))
                .is_some_and(|p| objects::ready(p))
        });
        if plan.hold && tg.want == Want::Run && all_ready {
            ready.push(Report::Ready { task, attempt });
        }
        let why = if tg.want != Want::Run || !any_live || all_started {
            None
        } else if suspended {
            // Admitted by Kueue: resumed in a moment.
            match objs.workload() {
                Some(w) => w.waiting_reason(),
                None => Some(
                    "Kubernetes: the JobSet is suspended (by Kueue, or by hand); its pods start \
                     once it is resumed"
                        .to_owned(),
                ),
            }
        } else {
            (0u32..)
                .zip(&tg.live)
                .filter(|(_, live)| **live)
                .filter_map(|(rank, _)| objs.pods.get(&plan.pod_of(task, rank, attempt)))
                .find_map(|p| objects::unschedulable_message(p))
                .map(|m| format!("Kubernetes: {}", m.trim()))
                .or_else(|| files_waiting(plan, objs))
        };
        waiting.push(Report::Waiting { task, why });
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
    out.extend(ready);
    out.extend(waiting);
    out
}

/// Why nodes wait for the group's files pod, when they do: no node's pod
/// is made before it is filled.
fn files_waiting(plan: &Plan, objs: &Objects) -> Option<String> {
    let name = plan.files_pod_name()?;
    let pod = objs.pods.get(&name)?;
    if super::files::filled(plan, objs, pod) {
        return None;
    }
    let why = objects::unschedulable_message(pod)
        .map(|m| m.trim().to_owned())
        .or_else(|| objects::container_waiting(pod));
    Some(match why {
        Some(why) => format!("Kubernetes: the files pod {name} does not start: {why}"),
        None if objects::ready(pod) => {
            format!("Kubernetes: sending the tasks' files to the files pod {name}")
        }
        None => format!("Kubernetes: the files pod {name} is starting"),
    })
}

/// One node of the current attempt, from its pod.
fn node(pod: &Pod, want: Want, jobset_ended: bool) -> Seen {
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
            return match (objects::terminated(pod), objects::init_failed(pod)) {
                (Some(t), _) => Seen::Exited {
                    phase: phase_of(t.message.as_deref()),
                    code: t.exit_code,
                    at_ms: finished_ms(t),
                },
                // The files pod never answered: the cluster's doing.
                (None, Some(t)) if t.exit_code == skyc_targets::k8s::files::UNREACHABLE_EXIT => {
                    Seen::Lost
                }
                // Its files could not be put in place: its setup failed.
                (None, Some(t)) => Seen::Exited {
                    phase: Phase::Setup,
                    code: t.exit_code,
                    at_ms: finished_ms(t),
                },
                (None, None) => Seen::Lost,
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
