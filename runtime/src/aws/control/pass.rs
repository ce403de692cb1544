//! One pass of the control plane, as the backend runs it every few
//! seconds for each group: read the run's world, say what it shows
//! ([`observe`]), carry out what the engine's state asks ([`reconcile`]),
//! and say when everything is gone ([`Report::Settled`]).
//!
//! A launch EC2 has no room for (capacity, a quota) leaves its task
//! PENDING (`TaskQueued`) with EC2's message, and is asked again on the
//! next pass.
//!
//! The pass works from the goal it is given; events it reports reach the
//! engine through the supervisor, and the next pass works from the goal
//! that follows. A call that fails is reported and asked again on a later
//! pass (the reconciler asks for what is still missing); no answer, or a
//! 5xx, is an outage: statuses stay as they are until EC2 answers again.

use crate::aws::control::files::{self, RunFiles};
use crate::aws::control::observe::observe;
use crate::aws::control::ops;
use crate::aws::control::reconcile::{Op, reconcile, settled};
use crate::aws::data::node::Outcomes;
use crate::aws::ec2::client::{Ec2, Error};
use crate::aws::ec2::retry;
use crate::aws::plan::Plan;
use crate::aws::world::World;
use crate::backend::Report;
use crate::goal::Goal;
use crate::policy::Event;

/// Whether an error means EC2 is out of reach, rather than refusing one
/// call.
pub fn is_outage(e: &Error) -> bool {
    match e {
        Error::Unreachable { .. } => true,
        Error::Api { status, code, .. } => *status >= 500 && !retry::is_capacity(code),
        _ => false,
    }
}

/// What one pass found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Passed {
    /// For the supervisor, in order.
    pub reports: Vec<Report>,
    /// EC2 is out of reach (why), or `None`: the backend reports a change
    /// as [`Report::Outage`].
    pub outage: Option<String>,
    /// EC2 took an operation ([`ops::apply`]): the world is changing,
    /// and the next pass comes soon to see how (a network made is
    /// followed by its launches).
    pub acted: bool,
}

/// One pass over a group's run.
pub async fn pass(
    ec2: &Ec2,
    files: Option<&RunFiles>,
    plan: &Plan,
    goal: &Goal,
    outcomes: &Outcomes,
) -> Passed {
    let mut out = Passed::default();
    let world = match world(ec2, files, plan).await {
        Ok(w) => w,
        Err(e) if is_outage(&e) => {
            out.outage = Some(e.to_string());
            return out;
        }
        Err(e) => {
            out.reports.push(Report::Error(e.to_string()));
            return out;
        }
    };
    out.reports.extend(observe(plan, &world, goal, outcomes));
    if let Some(why) = &world.bucket_unread {
        out.reports
            .push(Report::Error(format!("the run's files: {why}")));
    }
    let ops = reconcile(plan, &world, goal);
    for op in &ops {
        match ops::apply(ec2, files, plan, &world, op).await {
            Ok(took) => {
                out.acted |= took;
                // Launched: whatever EC2 refused before, the task waits no
                // more.
                if let Op::Launch { task, .. } = op {
                    out.reports.push(Report::Waiting {
                        task: *task,
                        why: None,
                    });
                }
            }
            Err(e) if is_outage(&e) => out.outage = Some(e.to_string()),
            Err(e) => out.reports.extend(refused(plan, op, &e)),
        }
    }
    if ops.is_empty() && settled(&world, goal) {
        out.reports.push(Report::Settled);
    }
    out
}

/// The run as EC2 and S3 show it.
pub async fn world(ec2: &Ec2, files: Option<&RunFiles>, plan: &Plan) -> Result<World, Error> {
    let mut world = ops::world(ec2, plan).await?;
    match files::observe(files, plan).await {
        Ok(bucket) => world.bucket = bucket,
        Err(e) => world.bucket_unread = Some(e.to_string()),
    }
    Ok(world)
}

/// What the supervisor hears of an operation EC2 refused.
pub fn refused(plan: &Plan, op: &Op, e: &Error) -> Vec<Report> {
    match op {
        // The tasks with files wait for them: why, until they are up.
        Op::UploadFiles => {
            let mut out = vec![Report::Error(format!("the run's files: {e}"))];
            if let Some(bucket) = &plan.bucket {
                for (task, digests) in bucket.tasks.iter().enumerate() {
                    if !digests.is_empty() {
                        out.push(Report::Waiting {
                            task,
                            why: Some(format!(
                                "waits for its files to be uploaded to S3 (bucket {}): {e}; tried again",
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
        } if e.code().is_some_and(retry::is_capacity) => vec![
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
                    "{}-{rank} waits for EC2: {e}; asked again",
                    plan.spec.tasks.get(*task).map_or("?", |t| t.name.as_str())
                )),
            },
        ],
        _ => vec![Report::Error(e.to_string())],
    }
}
