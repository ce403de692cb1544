//! What the runtime knows of a run on a cloud: its instances as the
//! provider lists them (every state, found by the run's tag; EC2:
//! DescribeInstances), its network (EC2: the security group) and its
//! files' bucket. Each instance is a node's attempt, read from its tags.

use crate::cloud::instance::{Instance, State};
use crate::cloud::run::{ATTEMPT_TAG, RANK_TAG, RUN_TAG, Run, TASK_TAG};
use crate::reconciler::goal::{Goal, TaskGoal};

/// Which node's attempt an instance runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeKey {
    pub task: usize,
    pub rank: u32,
    pub attempt: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct World {
    /// Every instance tagged with the run, in any state (terminated ones
    /// stay listed for about an hour).
    pub instances: Vec<Instance>,
    /// The run's security group, when it exists.
    pub network: Option<Network>,
    /// The keys of the run's files' bucket, when it exists
    /// ([`crate::cloud::run::Bucket`]).
    pub bucket: Option<Vec<String>>,
    /// Why the object store could not be read this pass: the bucket is
    /// then neither filled, deleted nor taken for gone, and the compute
    /// part goes on.
    pub bucket_unread: Option<String>,
}

/// The run's security group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Network {
    pub id: String,
    /// Tagged [`READY_TAG`] once its rules and the run's placement groups
    /// are made too: a supervisor that died in between makes the rest.
    pub ready: bool,
}

/// The tag (value `ready`) that says a run's network is complete.
pub const READY_TAG: &str = "skyc-network";

impl NodeKey {
    /// Every node of each task's current attempt, with its task's goal,
    /// in task and rank order.
    pub fn current(goal: &Goal) -> impl Iterator<Item = (&TaskGoal, NodeKey)> {
        goal.tasks.iter().enumerate().flat_map(|(task, tg)| {
            (0..tg.live.len() as u32).map(move |rank| {
                let key = NodeKey {
                    task,
                    rank,
                    attempt: tg.attempt,
                };
                (tg, key)
            })
        })
    }
}

impl World {
    /// The node an instance of this run runs, if its tags say so.
    pub fn key(plan: &Run<'_>, instance: &Instance) -> Option<NodeKey> {
        if instance.tags.get(RUN_TAG).map(String::as_str) != Some(plan.run) {
            return None;
        }
        let task_name = instance.tags.get(TASK_TAG)?;
        let task = plan.spec.tasks.iter().position(|t| &t.name == task_name)?;
        let rank: u32 = instance.tags.get(RANK_TAG)?.parse().ok()?;
        let attempt: u32 = instance.tags.get(ATTEMPT_TAG)?.parse().ok()?;
        (rank < plan.spec.tasks[task].num_nodes).then_some(NodeKey {
            task,
            rank,
            attempt,
        })
    }

    /// The instance of a node's attempt. Should EC2 ever show two (it
    /// will not, given one `ClientToken` per attempt), the one still
    /// running counts.
    pub fn instance(&self, plan: &Run<'_>, key: NodeKey) -> Option<&Instance> {
        let mut found: Vec<&Instance> = self
            .instances
            .iter()
            .filter(|i| World::key(plan, i) == Some(key))
            .collect();
        found.sort_by_key(|i| (i.state.is_none_or(State::is_down), i.id.clone()));
        found.first().copied()
    }

    /// Instances not yet terminated (shutting down counts: the security
    /// group cannot go until they are gone).
    pub fn remaining(&self) -> impl Iterator<Item = &Instance> {
        self.instances
            .iter()
            .filter(|i| i.state != Some(State::Terminated))
    }
}
