//! One pass of the control plane, as the backend runs it every few
//! seconds for each group: read the run's world, say what it shows
//! ([`observe`]), carry out what the engine's state asks ([`reconcile`]),
//! and say when everything is gone ([`Report::Settled`]).
//!
//! The pass works from the goal it is given; events it reports reach the
//! engine through the supervisor, and the next pass works from the goal
//! that follows. A call that fails is reported and asked again on a later
//! pass (the reconciler asks for what is still missing); no answer, or a
//! 5xx, is an outage: statuses stay as they are until EC2 answers again.

use super::client::{Ec2, Error};
use super::node::Outcomes;
use super::observe::observe;
use super::ops;
use super::plan::Plan;
use super::reconcile::{reconcile, settled};
use crate::backend::Report;
use crate::k8s::goal::Goal;

/// Whether an error means EC2 is out of reach, rather than refusing one
/// call.
pub fn is_outage(e: &Error) -> bool {
    match e {
        Error::Unreachable { .. } => true,
        Error::Api { status, .. } => *status >= 500,
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
}

/// One pass over a group's run.
pub async fn pass(ec2: &Ec2, plan: &Plan, goal: &Goal, outcomes: &Outcomes) -> Passed {
    let mut out = Passed::default();
    let world = match ops::world(ec2, plan).await {
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
    let ops = reconcile(plan, &world, goal);
    for op in &ops {
        if let Err(e) = ops::apply(ec2, plan, &world, op).await {
            if is_outage(&e) {
                out.outage = Some(e.to_string());
            } else {
                out.reports.push(Report::Error(e.to_string()));
            }
        }
    }
    if ops.is_empty() && settled(&world, goal) {
        out.reports.push(Report::Settled);
    }
    out
}
