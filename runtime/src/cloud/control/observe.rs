//! From the run's instances to the engine's events: where the policy
//! engine meets the cloud (states and reasons named here as EC2's, onto
//! which a provider maps its own). Level-triggered, as the Kubernetes observer: it reads
//! the whole state each time, and reading the same state twice gives the
//! same events, which the engine ignores the second time.
//!
//! For each node the engine still waits for, in its task's current
//! attempt:
//!
//! | the attempt | the node's instance | event |
//! |---|---|---|
//! | should run | `pending`, none yet | — (launching) |
//! | should run | `running` | — (`TaskStarted` once every node's is) |
//! | should run | `stopping`, `stopped`, `shutting-down`, `terminated` | `NodeLost`: skyc stops no instance it still wants, so this was done out of band (a spot interruption, a failed host, a user) |
//! | is ending (the engine stops it) | `shutting-down`, `terminated`, or none | `NodeLost`: the node is down, as the engine asked |
//! | is ending | `pending`, `running`, stopping | — (terminating) |
//!
//! A lost node comes with a [`Report::Error`] saying which instance and
//! why (its `stateReason`, e.g. `Server.SpotInstanceTermination`).
//!
//! How a node's setup and run ended comes from the data plane (its files,
//! [`crate::cloud::data::node::Outcomes`]): a node done is `NodeExited` with its phase
//! and code whatever its instance shows (a node that ended and was then
//! terminated is not lost), and exits come before losses in one pass; a
//! node whose VM booted again is lost. A node SSH never reached in the
//! data plane's limit failed its setup (exit 255, as `ssh` says); one
//! that answered, then went silent that long, is lost.

use crate::backend::{NodeInfo, Report};
use crate::cloud::data::node::{Outcome, Outcomes};
use crate::cloud::instance::{Instance, State};
use crate::cloud::run::Run;
use crate::cloud::world::{NodeKey, World};
use crate::policy::{Event, Phase};
use crate::reconciler::goal::{Goal, Want};

/// What the run's instances say now, for the engine and for status.
pub fn observe(plan: &Run<'_>, world: &World, goal: &Goal, outcomes: &Outcomes) -> Vec<Report> {
    let mut started = Vec::new();
    let mut exits = Vec::new();
    let mut losses = Vec::new();
    let mut nodes = Vec::new();
    for (task, tg) in goal.tasks.iter().enumerate() {
        if tg.want == Want::Done {
            continue;
        }
        let attempt = tg.attempt;
        let mut all_running = true;
        let mut any_live = false;
        for (rank, &live) in (0u32..).zip(&tg.live) {
            let key = NodeKey {
                task,
                rank,
                attempt,
            };
            let instance = world.instance(plan, key);
            let outcome = outcomes.get(&key).copied();
            if let Some(i) = instance {
                let mut info = node_info(key, i);
                info.hostname = format!("{}-{rank}.{}", plan.spec.tasks[task].name, plan.group);
                if let Some(Outcome::Exited { phase, code }) = outcome {
                    info.exit_code = Some(code);
                    info.phase = Some(crate::paths::phase_name(phase).to_owned());
                }
                nodes.push(Report::Node(info));
            }
            if !live {
                continue;
            }
            any_live = true;
            let exit = match outcome {
                Some(Outcome::Exited { phase, code }) => Some((phase, code)),
                // Never reached: ssh's own status for a failed login.
                Some(Outcome::Silent { answered: false }) => Some((Phase::Setup, 255)),
                _ => None,
            };
            if let Some((phase, code)) = exit {
                exits.push(Report::Event {
                    event: Event::NodeExited {
                        task,
                        attempt,
                        node: rank,
                        phase,
                        code,
                    },
                    at_ms: None,
                });
                continue;
            }
            let state = instance.and_then(|i| i.state);
            let silent = outcome == Some(Outcome::Silent { answered: true });
            let lost = outcome == Some(Outcome::Rebooted)
                || silent
                || match tg.want {
                    Want::Run => state.is_some_and(State::is_down),
                    _ => instance.is_none() || state.is_some_and(State::is_ending),
                };
            if lost {
                // A silent node's error comes from the data plane, with
                // what SSH said.
                if tg.want == Want::Run
                    && !silent
                    && let Some(i) = instance
                {
                    losses.push(Report::Error(lost_message(plan, key, i)));
                }
                losses.push(Report::Event {
                    event: Event::NodeLost {
                        task,
                        attempt,
                        node: rank,
                    },
                    at_ms: None,
                });
            }
            if state != Some(State::Running) {
                all_running = false;
            }
        }
        if tg.want == Want::Run && any_live && all_running {
            started.push(Report::Event {
                event: Event::TaskStarted { task, attempt },
                at_ms: None,
            });
        }
    }
    let mut out = nodes;
    out.extend(started);
    out.extend(exits);
    out.extend(losses);
    out
}

/// A node for `skyc status`: its instance, type and zone, and address.
pub fn node_info(key: NodeKey, i: &Instance) -> NodeInfo {
    let mut machine = i.instance_type.clone();
    if let Some(zone) = &i.zone {
        machine.push(' ');
        machine.push_str(zone);
    }
    if i.lifecycle.as_deref() == Some("spot") {
        machine.push_str(" spot");
    }
    NodeInfo {
        task: key.task,
        rank: key.rank,
        attempt: key.attempt,
        handle: i.id.clone(),
        machine,
        ip: i.private_ip.clone().unwrap_or_default(),
        ..NodeInfo::default()
    }
}

/// `trainer-1 (i-0abc, spot) was terminated out of band:
/// Server.SpotInstanceTermination (a spot interruption)`.
fn lost_message(plan: &Run<'_>, key: NodeKey, i: &Instance) -> String {
    let task = &plan.spec.tasks[key.task].name;
    let state = match i.state {
        Some(State::Stopping | State::Stopped) => "stopped",
        Some(State::Pending | State::Running) => "rebooted",
        Some(_) => "terminated",
        None => "in an unknown state",
    };
    let mut text = format!("{task}-{} ({}", key.rank, i.id);
    if i.lifecycle.as_deref() == Some("spot") {
        text.push_str(", spot");
    }
    text.push_str(&format!(") was {state} out of band"));
    if let Some(code) = &i.reason_code {
        text.push_str(": ");
        text.push_str(code);
        let why = match code.as_str() {
            "Server.SpotInstanceTermination" => Some("a spot interruption"),
            "Server.InternalError" | "Server.ScheduledStop" => Some("a host failure"),
            "Client.UserInitiatedShutdown" => Some("by an API call or the console"),
            "Client.InstanceInitiatedShutdown" => Some("shut down from inside the instance"),
            "Server.InsufficientInstanceCapacity" => Some("no capacity"),
            _ => None,
        };
        if let Some(why) = why {
            text.push_str(&format!(" ({why})"));
        }
    }
    text.push_str("; its task restarts on new instances");
    text
}
