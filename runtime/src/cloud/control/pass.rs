//! The control plane's part of a pass, as the backend runs it every few
//! seconds for each group through the [`reconciler`] runner: read the
//! run's world, say what it shows ([`observe`]), carry out what the
//! engine's state asks ([`reconcile`]), and say when everything is gone
//! ([`Report::Settled`]).
//!
//! A launch the provider has no room for (capacity, a quota) leaves its
//! task PENDING (`TaskQueued`) with the provider's message, and is asked
//! again on the next pass.
//!
//! The pass works from the goal it is given; events it reports reach the
//! engine through the supervisor, and the next pass works from the goal
//! that follows. A call that fails is reported and asked again on a later
//! pass (the reconciler asks for what is still missing); no answer, or a
//! 5xx, is an outage: statuses stay as they are until the provider
//! answers again.

use super::observe::observe;
use super::reconcile::{Op, reconcile, settled};
use crate::backend::Report;
use crate::cloud::Provider;
use crate::cloud::data::node::Outcomes;
use crate::cloud::run::Run;
use crate::cloud::world::World;
use crate::policy::Event;
use crate::reconciler::goal::Goal;
use crate::reconciler::{self, Applied, Passed, Reconciler, Settled, Sight, Told};

/// The run's control plane as the [`reconciler`] runs it: the provider's
/// world as read at the start of the pass (the data plane has read the
/// nodes from the same world), driven to the goal.
pub struct Control<'a, P: Provider> {
    pub provider: &'a P,
    pub goal: &'a Goal,
    /// How the nodes' setups and runs ended, as the data plane read them.
    pub outcomes: &'a Outcomes,
    pub told: &'a mut Told,
    /// The world read for this pass, until [`Reconciler::see`] takes it.
    pub seen: Option<Result<World, P::Error>>,
}

impl<P: Provider> Reconciler for Control<'_, P> {
    type World = World;
    type Op = Op;

    fn told(&mut self) -> &mut Told {
        self.told
    }

    async fn see(&mut self) -> Sight<World> {
        let seen = match self.seen.take() {
            Some(seen) => seen,
            None => self.provider.world().await,
        };
        match seen {
            Ok(world) => {
                let mut sight = Sight::world(world);
                if let Some(why) = sight.world.as_ref().and_then(|w| w.bucket_unread.as_ref()) {
                    sight
                        .reports
                        .push(Report::Error(format!("the run's files: {why}")));
                }
                sight
            }
            Err(e) if P::is_outage(&e) => Sight::outage(e.to_string()),
            Err(e) => Sight::failed(e.to_string()),
        }
    }

    fn observe(&mut self, world: &World) -> Vec<Report> {
        observe(&self.provider.run(), world, self.goal, self.outcomes)
    }

    fn reconcile(&mut self, world: &World) -> Vec<Op> {
        reconcile(&self.provider.run(), world, self.goal)
    }

    async fn apply(&mut self, world: &World, ops: Vec<Op>) -> Applied {
        let mut out = Applied::default();
        for op in &ops {
            match self.provider.apply(world, op).await {
                Ok(took) => {
                    out.acted |= took;
                    // Launched: whatever the provider refused before, the
                    // task waits no more.
                    if let Op::Launch { task, .. } = op {
                        out.reports.push(Report::Waiting {
                            task: *task,
                            why: None,
                        });
                    }
                }
                Err(e) if P::is_outage(&e) => out.outage = Some(e.to_string()),
                Err(e) => out
                    .reports
                    .extend(refused::<P>(self.provider.run(), op, &e)),
            }
        }
        out
    }

    fn settled(&mut self, world: &World, asked: bool) -> Settled {
        if !asked && settled(world, self.goal) {
            Settled::Yes
        } else {
            Settled::No
        }
    }
}

/// One pass over a group's run, reading its world first.
pub async fn pass<P: Provider>(
    provider: &P,
    goal: &Goal,
    outcomes: &Outcomes,
    told: &mut Told,
) -> Passed {
    let mut control = Control {
        provider,
        goal,
        outcomes,
        told,
        seen: None,
    };
    reconciler::pass(&mut control).await
}

/// What the supervisor hears of an operation the provider refused.
pub fn refused<P: Provider>(run: Run<'_>, op: &Op, e: &P::Error) -> Vec<Report> {
    match op {
        // The tasks with files wait for them: why, until they are up.
        Op::UploadFiles => {
            let mut out = vec![Report::Error(format!("the run's files: {e}"))];
            if let Some(bucket) = run.bucket {
                for (task, digests) in bucket.tasks.iter().enumerate() {
                    if !digests.is_empty() {
                        out.push(Report::Waiting {
                            task,
                            why: Some(format!(
                                "waits for its files to be uploaded to {} (bucket {}): {e}; tried again",
                                P::STORE,
                                bucket.name
                            )),
                        });
                    }
                }
            }
            out
        }
        Op::Launch {
            task,
            rank,
            attempt,
        } if P::is_capacity(e) => vec![
            Report::Event {
                event: Event::TaskQueued {
                    task: *task,
                    attempt: *attempt,
                },
                at_ms: None,
            },
            // Why the task waits, until it runs; not an error of the
            // group's that would outlive the wait.
            Report::Waiting {
                task: *task,
                why: Some(format!(
                    "{}-{rank} waits for {}: {e}; asked again",
                    run.spec.tasks.get(*task).map_or("?", |t| t.name.as_str()),
                    P::COMPUTE
                )),
            },
        ],
        _ => vec![Report::Error(e.to_string())],
    }
}
