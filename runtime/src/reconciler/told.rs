//! What a group's loop has told the supervisor, and the rule that each
//! fact is told once: a level-triggered pass finds the same facts again
//! (a running node is running at every pass), and each one told again
//! would be a row of the group's history per pass.

use crate::backend::{NodeInfo, Report};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Default)]
pub struct Told {
    /// Events, by their text: each is a fact of the engine's, told once.
    events: BTreeSet<String>,
    /// What `status` was last told of each node's attempt.
    nodes: BTreeMap<(usize, u32, u32), NodeInfo>,
    /// Attempts told ready.
    ready: BTreeSet<(usize, u32)>,
    /// Why each task waits, as last told.
    waiting: BTreeMap<usize, Option<String>>,
    /// What each task's nodes hold, as last told.
    credentials: BTreeMap<usize, String>,
    /// Errors told once ([`Told::once`]).
    errors: BTreeSet<String>,
    outage: Option<String>,
    settled: bool,
}

impl Told {
    /// The report, when it tells the supervisor something it has not
    /// been told:
    /// - an event, a ready attempt and the group's settling: once;
    /// - a node, why a task waits, what its nodes hold, and an outage: when
    ///   they change (the first word of waiting too, even that the task
    ///   does not wait: a supervisor that adopts the group may have shown
    ///   an old reason; no word of an outage yet is no outage);
    /// - anything else: always (an error is told each time it happens;
    ///   [`Told::once`] tells one once).
    pub fn news(&mut self, report: Report) -> Option<Report> {
        let new = match &report {
            Report::Event { event, .. } => self.events.insert(format!("{event:?}")),
            Report::Node(info) => {
                let key = (info.task, info.rank, info.attempt);
                let new = self.nodes.get(&key) != Some(info);
                if new {
                    self.nodes.insert(key, info.clone());
                }
                new
            }
            Report::Ready { task, attempt } => self.ready.insert((*task, *attempt)),
            Report::Waiting { task, why } => {
                let new = self.waiting.get(task) != Some(why);
                if new {
                    self.waiting.insert(*task, why.clone());
                }
                new
            }
            Report::Credentials { task, says } => {
                let new = self.credentials.get(task) != Some(says);
                if new {
                    self.credentials.insert(*task, says.clone());
                }
                new
            }
            Report::Outage(why) => {
                let new = self.outage != *why;
                if new {
                    self.outage.clone_from(why);
                }
                new
            }
            Report::Settled => !std::mem::replace(&mut self.settled, true),
            _ => true,
        };
        new.then_some(report)
    }

    /// An error told the first time only: one the loop meets again at
    /// every pass until what causes it changes (a node that cannot be
    /// reached, a credential source that refuses).
    pub fn once(&mut self, error: String) -> Option<Report> {
        self.errors
            .insert(error.clone())
            .then_some(Report::Error(error))
    }

    /// Whether the event has been told.
    pub fn has_told(&self, event: &crate::policy::Event) -> bool {
        self.events.contains(&format!("{event:?}"))
    }

    /// Whether the group's settling has been told.
    pub fn settled(&self) -> bool {
        self.settled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Event;

    fn node(attempt: u32, phase: &str) -> Report {
        Report::Node(NodeInfo {
            task: 0,
            rank: 1,
            attempt,
            phase: Some(phase.into()),
            ..NodeInfo::default()
        })
    }

    #[test]
    fn each_fact_is_told_once_and_each_change_when_it_changes() {
        let mut told = Told::default();
        let started = Report::Event {
            event: Event::CancelRequested,
            at_ms: None,
        };
        assert!(told.news(started.clone()).is_some());
        assert!(told.news(started).is_none());
        assert!(told.has_told(&Event::CancelRequested));

        assert!(told.news(node(0, "setup")).is_some());
        assert!(told.news(node(0, "setup")).is_none());
        assert!(told.news(node(0, "run")).is_some());
        // Another attempt's node is another node.
        assert!(told.news(node(1, "run")).is_some());
        assert!(told.news(node(0, "run")).is_none());

        let waiting = |why: Option<&str>| Report::Waiting {
            task: 0,
            why: why.map(str::to_owned),
        };
        assert!(told.news(waiting(None)).is_some(), "the first word");
        assert!(told.news(waiting(None)).is_none());
        assert!(told.news(waiting(Some("quota"))).is_some());
        assert!(told.news(waiting(Some("quota"))).is_none());
        assert!(told.news(waiting(None)).is_some());

        let creds = |says: &str| Report::Credentials {
            task: 0,
            says: says.into(),
        };
        assert!(told.news(creds("narrowed")).is_some());
        assert!(told.news(creds("narrowed")).is_none());
        assert!(told.news(creds("the run's own")).is_some());

        assert!(told.news(Report::Outage(None)).is_none());
        assert!(told.news(Report::Outage(Some("down".into()))).is_some());
        assert!(told.news(Report::Outage(Some("down".into()))).is_none());
        assert!(told.news(Report::Outage(None)).is_some());

        let ready = Report::Ready {
            task: 0,
            attempt: 2,
        };
        assert!(told.news(ready.clone()).is_some());
        assert!(told.news(ready).is_none());

        assert!(!told.settled());
        assert!(told.news(Report::Settled).is_some());
        assert!(told.news(Report::Settled).is_none());
        assert!(told.settled());

        // Errors: each time, or once when asked.
        let e = Report::Error("refused".into());
        assert!(told.news(e.clone()).is_some());
        assert!(told.news(e).is_some());
        assert!(told.once("unreachable".into()).is_some());
        assert!(told.once("unreachable".into()).is_none());
    }
}
