//! The reconcile runner under the backends that drive a cluster's API
//! (Kubernetes, EC2): one pass's shape, written once.
//!
//! A pass sees the cluster ([`Reconciler::see`]: a watcher's cache, or a
//! fresh read), tells what it shows ([`Reconciler::observe`]), asks the
//! cluster for what the engine's goal still lacks
//! ([`Reconciler::reconcile`], [`Reconciler::apply`]) and says when
//! nothing more will happen there ([`Reconciler::settled`]). Everything a
//! pass finds goes through one [`Told`], so each fact reaches the
//! supervisor once however many passes find it, and an outage is told
//! when it starts and when it ends.
//!
//! The runner is level-triggered, as kube-rs's controller runner is: a
//! pass works from the goal and the world as they are, never from what
//! an earlier pass did, so a pass repeated, skipped or run by a new
//! supervisor after a crash does the same. When a pass runs (a watch
//! event, a poll interval, a new goal) is each backend's loop's.
//!
//! Beside the runner: [`goal`] (what the engine wants, read from its
//! state), [`outbox`] (how the loop's reports reach the supervisor's
//! `poll(2)` loop), [`backoff`] (how long to wait before asking again).

pub mod backoff;
pub mod goal;
pub mod outbox;
mod told;

pub use told::Told;

use crate::backend::Report;

/// A backend's side of a group's pass: how it sees its cluster and acts
/// on it. Its futures run on the group's own thread (a current-thread
/// runtime or a `LocalSet`), so they need not be `Send`.
#[allow(async_fn_in_trait)]
pub trait Reconciler {
    /// The cluster as one pass sees it.
    type World;
    /// One request the reconciler may make of the cluster.
    type Op;

    /// What the group's loop has told the supervisor.
    fn told(&mut self) -> &mut Told;

    /// The cluster as it is now (or as last listed), whether it is out of
    /// reach, and what seeing it found to say.
    async fn see(&mut self) -> Sight<Self::World>;

    /// What the world shows: the engine's events, the nodes for
    /// `status`, why tasks wait.
    fn observe(&mut self, world: &Self::World) -> Vec<Report>;

    /// The requests that take the world toward the goal, in order.
    fn reconcile(&mut self, world: &Self::World) -> Vec<Self::Op>;

    /// Makes them; what the answers say.
    async fn apply(&mut self, world: &Self::World, ops: Vec<Self::Op>) -> Applied;

    /// Whether nothing more of the group will happen on the cluster;
    /// `asked` when this pass made requests.
    fn settled(&mut self, world: &Self::World, asked: bool) -> Settled;
}

/// What seeing the cluster gave.
pub struct Sight<W> {
    /// `None` when there is nothing to reconcile from yet (the cluster out
    /// of reach, or a watch not listed yet).
    pub world: Option<W>,
    /// The cluster is out of reach, and why.
    pub outage: Option<String>,
    /// Told before anything the world shows.
    pub reports: Vec<Report>,
}

impl<W> Sight<W> {
    pub fn world(world: W) -> Self {
        Self {
            world: Some(world),
            outage: None,
            reports: Vec::new(),
        }
    }

    /// Nothing seen, for a reason that is not an outage.
    pub fn failed(error: String) -> Self {
        Self {
            world: None,
            outage: None,
            reports: vec![Report::Error(error)],
        }
    }

    pub fn outage(why: String) -> Self {
        Self {
            world: None,
            outage: Some(why),
            reports: Vec::new(),
        }
    }
}

/// What the cluster answered a pass's requests.
#[derive(Default)]
pub struct Applied {
    pub reports: Vec<Report>,
    /// A request found the cluster out of reach.
    pub outage: Option<String>,
    /// The cluster took a request: the world is changing, and the next
    /// pass should come soon to see how.
    pub acted: bool,
}

/// The cluster's part of a group is over, or given up on.
#[derive(Debug, PartialEq, Eq)]
pub enum Settled {
    No,
    Yes,
    /// Not reached within the backend's limit: said, and settled all the
    /// same, since the group's end is the engine's.
    GaveUp(String),
}

/// What one pass found.
#[derive(Debug, Default, PartialEq)]
pub struct Passed {
    /// For the supervisor, in order: news only ([`Told::news`]).
    pub reports: Vec<Report>,
    /// The cluster was out of reach during the pass, and why.
    pub outage: Option<String>,
    /// Requests were made.
    pub asked: bool,
    /// [`Applied::acted`].
    pub acted: bool,
}

/// One pass over a group.
pub async fn pass<R: Reconciler>(r: &mut R) -> Passed {
    let mut passed = Passed::default();
    let sight = r.see().await;
    // An outage is told before what the pass found, its end after what
    // the pass asked has answered: one word per pass, not an end and a
    // start again when a request finds the cluster out of reach.
    passed.outage = sight.outage;
    if passed.outage.is_some() {
        let outage = passed.outage.clone();
        tell(r, &mut passed, Report::Outage(outage));
    }
    for report in sight.reports {
        tell(r, &mut passed, report);
    }
    let Some(world) = sight.world else {
        if passed.outage.is_none() {
            tell(r, &mut passed, Report::Outage(None));
        }
        return passed;
    };
    for report in r.observe(&world) {
        tell(r, &mut passed, report);
    }
    let ops = r.reconcile(&world);
    passed.asked = !ops.is_empty();
    let applied = r.apply(&world, ops).await;
    passed.acted = applied.acted;
    for report in applied.reports {
        tell(r, &mut passed, report);
    }
    if passed.outage.is_none() {
        passed.outage.clone_from(&applied.outage);
        tell(r, &mut passed, Report::Outage(applied.outage));
    }
    if !r.told().settled() {
        match r.settled(&world, passed.asked) {
            Settled::No => {}
            Settled::Yes => tell(r, &mut passed, Report::Settled),
            Settled::GaveUp(why) => {
                tell(r, &mut passed, Report::Error(why));
                tell(r, &mut passed, Report::Settled);
            }
        }
    }
    passed
}

fn tell<R: Reconciler>(r: &mut R, passed: &mut Passed, report: Report) {
    if let Some(news) = r.told().news(report) {
        passed.reports.push(news);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Event;

    /// A cluster of one counter the goal wants at 3; each pass's
    /// request adds one.
    struct Counter {
        told: Told,
        at: u32,
        down: bool,
        /// Requests find the cluster out of reach.
        unreachable: bool,
        asked: Vec<u32>,
    }

    impl Reconciler for Counter {
        type World = u32;
        type Op = u32;
        fn told(&mut self) -> &mut Told {
            &mut self.told
        }
        async fn see(&mut self) -> Sight<u32> {
            if self.down {
                Sight::outage("no answer".into())
            } else {
                Sight::world(self.at)
            }
        }
        fn observe(&mut self, world: &u32) -> Vec<Report> {
            (*world >= 1)
                .then_some(Report::Event {
                    event: Event::CancelRequested,
                    at_ms: None,
                })
                .into_iter()
                .collect()
        }
        fn reconcile(&mut self, world: &u32) -> Vec<u32> {
            (*world < 3).then_some(*world + 1).into_iter().collect()
        }
        async fn apply(&mut self, _: &u32, ops: Vec<u32>) -> Applied {
            if self.unreachable && !ops.is_empty() {
                return Applied {
                    outage: Some("no answer to a request".into()),
                    ..Applied::default()
                };
            }
            self.asked.extend(&ops);
            if let Some(&to) = ops.last() {
                self.at = to;
            }
            Applied {
                acted: !ops.is_empty(),
                ..Applied::default()
            }
        }
        fn settled(&mut self, world: &u32, asked: bool) -> Settled {
            if *world == 3 && !asked {
                Settled::Yes
            } else {
                Settled::No
            }
        }
    }

    #[test]
    fn passes_drive_the_world_to_the_goal_and_tell_each_fact_once() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut c = Counter {
            told: Told::default(),
            at: 0,
            down: false,
            unreachable: true,
            asked: Vec::new(),
        };
        // Seen, but every request unanswered: the outage is told once,
        // not ended and started again at each pass.
        let p = rt.block_on(pass(&mut c));
        assert_eq!(p.outage.as_deref(), Some("no answer to a request"));
        assert_eq!(
            p.reports,
            vec![Report::Outage(Some("no answer to a request".into()))]
        );
        assert!(rt.block_on(pass(&mut c)).reports.is_empty());
        c.unreachable = false;
        let p = rt.block_on(pass(&mut c));
        assert_eq!(p.reports, vec![Report::Outage(None)]);
        let mut all = Vec::new();
        for _ in 0..2 {
            let p = rt.block_on(pass(&mut c));
            assert!(p.asked && p.acted);
            all.extend(p.reports);
        }
        // Seen at 1 and 2: one event told.
        assert_eq!(all.len(), 1, "{all:?}");
        c.down = true;
        let p = rt.block_on(pass(&mut c));
        assert_eq!(p.outage.as_deref(), Some("no answer"));
        assert_eq!(p.reports, vec![Report::Outage(Some("no answer".into()))]);
        assert!(rt.block_on(pass(&mut c)).reports.is_empty());
        c.down = false;
        let p = rt.block_on(pass(&mut c));
        assert_eq!(p.reports, vec![Report::Outage(None), Report::Settled]);
        assert!(!p.asked);
        assert!(rt.block_on(pass(&mut c)).reports.is_empty());
        assert_eq!(c.asked, vec![1, 2, 3]);
    }
}
