//! From the engine's goal and the run's instances to the provider's
//! calls that close the gap (named here as EC2's). Pure and idempotent,
//! like the Kubernetes reconciler: the same state gives the same calls,
//! and once a call's effect is seen it is not asked again.
//!
//! - **Launch** a node's instance when its task should run, the engine
//!   still waits for the node, and no instance of that node's attempt
//!   exists in any state. The request carries the attempt's
//!   `ClientToken`, so one sent twice (a retry; a supervisor that died
//!   before it saw the instance) is one instance.
//! - **Terminate** (EC2's only way to stop a node) every instance that is
//!   not wanted: of an older attempt, of an attempt that is ending
//!   (the engine's SIGTERM), of a task that has ended, and all of them on
//!   cancel and at the group's end. A node that has ended keeps its
//!   instance until its task ends. Instances already shutting down or
//!   terminated are left alone.
//! - **The network** (the run's security group and placement groups) is
//!   made before the first launch and deleted once the group has ended and
//!   every instance is terminated (EC2 refuses to delete a group in use).
//! - **The files** (the run's bucket, when a task has files) are uploaded
//!   before the first launch, and deleted, bucket and all, as soon as the
//!   group has ended or is cancelled.

use crate::cloud::instance::State;
use crate::cloud::run::Run;
use crate::cloud::world::{NodeKey, World};
use crate::reconciler::goal::{Goal, Want};

/// One operation of the provider's, as data.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// Terminate these instances (sorted).
    Terminate { ids: Vec<String> },
    /// Make the run's security group, its rules and placement groups
    /// (what is missing of them).
    EnsureNetwork,
    /// Launch a node's attempt.
    Launch {
        task: usize,
        rank: u32,
        attempt: u32,
    },
    /// Delete the run's security group (and placement groups).
    DeleteNetwork,
    /// Make the run's bucket and upload the streams it lacks.
    UploadFiles,
    /// Delete the run's bucket and everything in it.
    DeleteFiles,
}

/// The calls that bring the run's instances to the goal, in order.
pub fn reconcile(plan: &Run<'_>, world: &World, goal: &Goal) -> Vec<Op> {
    let everything_ends = goal.cancel || goal.end.is_some();
    let mut terminate: Vec<String> = Vec::new();
    for instance in &world.instances {
        if instance.state.is_some_and(State::is_ending) {
            continue;
        }
        // One instance per node's attempt: should EC2 ever show two (a
        // token EC2 forgot), the one the world counts stays.
        let wanted = !everything_ends
            && World::key(plan, instance).is_some_and(|key| {
                wanted(goal, key)
                    && world
                        .instance(plan, key)
                        .is_some_and(|kept| kept.id == instance.id)
            });
        if !wanted {
            terminate.push(instance.id.clone());
        }
    }
    terminate.sort();
    terminate.dedup();
    let mut ops = Vec::new();
    if !terminate.is_empty() {
        ops.push(Op::Terminate { ids: terminate });
    }
    if everything_ends {
        if world.bucket.is_some() && world.bucket_unread.is_none() {
            ops.push(Op::DeleteFiles);
        }
        if world.network.is_some() && world.remaining().next().is_none() {
            ops.push(Op::DeleteNetwork);
        }
        return ops;
    }
    let mut launches = Vec::new();
    for (task, tg) in goal.tasks.iter().enumerate() {
        if tg.want != Want::Run {
            continue;
        }
        for (rank, &live) in (0u32..).zip(&tg.live) {
            let key = NodeKey {
                task,
                rank,
                attempt: tg.attempt,
            };
            if live && world.instance(plan, key).is_none() {
                launches.push(Op::Launch {
                    task,
                    rank,
                    attempt: tg.attempt,
                });
            }
        }
    }
    if !launches.is_empty() {
        // The launches need the security group, complete, and every
        // stream in the bucket: they wait for the next pass when not.
        let network = world.network.as_ref().is_some_and(|n| n.ready);
        let files = plan
            .bucket
            .is_none_or(|b| b.complete(world.bucket.as_deref()));
        if !network {
            ops.push(Op::EnsureNetwork);
        }
        // Unread, the bucket is not filled blind: the next pass reads it.
        if !files && world.bucket_unread.is_none() {
            ops.push(Op::UploadFiles);
        }
        if network && files {
            ops.extend(launches);
        }
    }
    ops
}

/// Whether the instance of `key` should still run: every instance of a
/// running attempt, also of a node that has ended, as a cluster stays up
/// until its job ends (what an ended node left running, a server its
/// peers use, goes on until its task ends).
fn wanted(goal: &Goal, key: NodeKey) -> bool {
    let Some(tg) = goal.tasks.get(key.task) else {
        return false;
    };
    tg.want == Want::Run && key.attempt == tg.attempt
}

/// Everything the run had is gone: once the engine has finished, the
/// group can be closed.
pub fn settled(world: &World, goal: &Goal) -> bool {
    goal.end.is_some()
        && world.network.is_none()
        && world.bucket.is_none()
        && world.bucket_unread.is_none()
        && world.remaining().next().is_none()
}
