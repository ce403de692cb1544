//! The data plane's pure half: what a node's directory says (its `status`
//! lines and exit files, read from the node) as an outcome for the engine,
//! and the `hosts` file the runtime delivers to every node. The contract
//! is docs/targets/cloud.md, "The node's directory"; how the files travel
//! (SSH) is docs/targets/cloud.md's, "Inside the AWS runtime".

use crate::cloud::run::Run;
use crate::cloud::world::{NodeKey, World};
use crate::policy::Phase;
use crate::reconciler::goal::{Goal, Want};
use std::collections::BTreeMap;

/// A node's files as last read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFiles {
    /// The `status` file (its last lines are enough).
    pub status: String,
    /// `setup.exit`, `run.exit`: present once the phase has ended.
    pub setup_exit: Option<String>,
    pub run_exit: Option<String>,
}

/// Where a node is, by its files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing recorded yet: the VM boots, or the agent waits for its
    /// hosts and secrets.
    Starting,
    /// A phase runs.
    Running(Phase),
    /// The node is done: `run.exit`, or a `setup.exit` that is not 0.
    Exited { phase: Phase, code: i32 },
    /// The VM booted a second time (`boot again`): its task is not
    /// resumed, the node is lost.
    Rebooted,
    /// SSH has not reached the node for the data plane's limit: lost when
    /// it `answered` before, else a failed setup (it cannot be reached,
    /// so it cannot run).
    Silent { answered: bool },
}

/// The outcomes of the nodes read so far, by node and attempt.
pub type Outcomes = BTreeMap<NodeKey, Outcome>;

fn code(text: &Option<String>) -> Option<i32> {
    text.as_deref()?.trim().parse().ok()
}

/// What a node's files say. An exit file that does not hold a number is
/// not one the agent wrote (it writes them whole, by rename) and counts
/// as not there.
pub fn outcome(files: &NodeFiles) -> Outcome {
    if let Some(code) = code(&files.run_exit) {
        return Outcome::Exited {
            phase: Phase::Run,
            code,
        };
    }
    if let Some(code) = code(&files.setup_exit)
        && code != 0
    {
        return Outcome::Exited {
            phase: Phase::Setup,
            code,
        };
    }
    // `EPOCH.USEC WORDS`, one event a line; the last one says where the
    // node is.
    let last = files
        .status
        .lines()
        .rev()
        .map(|l| l.split_once(' ').map_or("", |(_, words)| words.trim()))
        .find(|w| !w.is_empty());
    match last {
        Some(w) if w.starts_with("boot again") => Outcome::Rebooted,
        Some(w) if w.starts_with("run ") || code(&files.setup_exit) == Some(0) => {
            Outcome::Running(Phase::Run)
        }
        Some(w)
            if w.starts_with("setup ")
                || w.starts_with("workdir ")
                || w.starts_with("buckets ") =>
        {
            Outcome::Running(Phase::Setup)
        }
        _ => Outcome::Starting,
    }
}

/// The `hosts` file every node of the run gets: `IP {task}-{rank}.{group}`
/// for each node of each task that should run, in task and rank order;
/// `None` until every one of them has an address, since a node reads its
/// task's addresses (`SKYPILOT_NODE_IPS`) once, when its setup starts. A
/// pipeline's steps not started yet have no instances and are left out
/// (so a step's file lists that step's nodes: the others have ended or
/// not begun).
pub fn hosts(plan: &Run<'_>, world: &World, goal: &Goal) -> Option<String> {
    let mut out = String::new();
    for (tg, key) in NodeKey::current(goal) {
        if tg.want != Want::Run || !tg.awaits_nodes() {
            continue;
        }
        let (task, rank) = (key.task, key.rank);
        let instance = world.instance(plan, key)?;
        if instance.state.is_some_and(|s| s.is_down()) {
            // Lost: its replacement's address comes with the next
            // attempt.
            continue;
        }
        let ip = instance.private_ip.as_deref()?;
        out.push_str(&format!(
            "{ip} {}-{rank}.{}\n",
            plan.spec.tasks[task].name, plan.group
        ));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(status: &str, setup: Option<&str>, run: Option<&str>) -> NodeFiles {
        NodeFiles {
            status: status.to_owned(),
            setup_exit: setup.map(str::to_owned),
            run_exit: run.map(str::to_owned),
        }
    }

    #[test]
    fn outcomes_follow_the_agents_files() {
        assert_eq!(outcome(&files("", None, None)), Outcome::Starting);
        assert_eq!(
            outcome(&files("1.0 agent start\n1.5 hosts ready\n", None, None)),
            Outcome::Starting
        );
        assert_eq!(
            outcome(&files("1.0 agent start\n2.0 setup start\n", None, None)),
            Outcome::Running(Phase::Setup)
        );
        assert_eq!(
            outcome(&files(
                "2.0 setup start\n3.0 setup exit 0\n3.1 run start\n",
                Some("0\n"),
                None
            )),
            Outcome::Running(Phase::Run)
        );
        assert_eq!(
            outcome(&files("3.0 setup exit 0\n", Some("0\n"), None)),
            Outcome::Running(Phase::Run)
        );
        assert_eq!(
            outcome(&files("9.0 run exit 3\n", Some("0\n"), Some("3\n"))),
            Outcome::Exited {
                phase: Phase::Run,
                code: 3
            }
        );
        assert_eq!(
            outcome(&files("3.0 setup exit 7\n", Some("7\n"), None)),
            Outcome::Exited {
                phase: Phase::Setup,
                code: 7
            }
        );
        // Killed by a signal: 128 + N, as the agent records it.
        assert_eq!(
            outcome(&files("", Some("0"), Some("143"))),
            Outcome::Exited {
                phase: Phase::Run,
                code: 143
            }
        );
        assert_eq!(
            outcome(&files(
                "2.0 run start\n50.0 boot again: the node's task is not restarted\n",
                Some("0\n"),
                None
            )),
            Outcome::Rebooted
        );
        // A torn or foreign file is no exit.
        assert_eq!(
            outcome(&files("2.0 run start\n", Some("0\n"), Some("x"))),
            Outcome::Running(Phase::Run)
        );
    }
}
