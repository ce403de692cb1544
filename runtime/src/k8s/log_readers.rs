//! Who reads a group's pods' logs ([`super::logs`]), within the
//! supervisor's budget of streams.
//!
//! A followed log is a request held open to the API server: kube's
//! client speaks HTTP/1.1, so each is a connection of its own, about
//! 25 KiB of the supervisor's memory (hyper's buffers, the task). A
//! supervisor follows at most [`Budget`]'s streams at once, for all its
//! groups, first come (in one pass, rank 0 of each task first), and the
//! rank 0 of a task may take one of [`RANK0_RESERVE`] more: a group that
//! starts while others hold every place still has its first node's log
//! as it is written. The logs
//! of the other running pods are read in turns, each to its end and
//! closed ([`TURNS_AT_ONCE`] at a time, [`TURNS_PER_SECOND`] at most per
//! group), each pod again after [`TURN`] or longer as the group grows.
//! A pod that ended, or went, is read to its last line at once; one
//! being deleted is read every [`URGENT`] until it has ended or gone; a
//! finished group waits for them ([`Readers::tail_time`]). A stream that
//! ends frees its place for a pod read in turns, which is followed from
//! where its turns left it. Either way the lines go through
//! [`NodeLog::append`], after the pod's mark: none is written twice.

use super::logs::{self, NodeLog, Reading};
use super::objects;
use super::retry;
use super::watch::{SharedRef, lock};
use crate::reconciler::backoff::Backoff;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// Logs followed at once by one supervisor, for all of its groups.
pub const STREAMS: usize = 128;

/// Places beyond [`STREAMS`] that only a task's rank 0 may take.
pub const RANK0_RESERVE: usize = 32;

/// Logs read in turns at once, per group; twice as many when pods that
/// ended or are being deleted wait.
pub const TURNS_AT_ONCE: usize = 8;

/// The least time between two turns of one pod.
pub const TURN: Duration = Duration::from_secs(5);

/// The most turns a group takes per second, all its pods together: its
/// pods' turns come further apart as there are more of them.
pub const TURNS_PER_SECOND: f64 = 10.0;

/// How often a pod being deleted is read until it has ended or gone.
pub const URGENT: Duration = Duration::from_secs(1);

/// Last reads a finished group is given time for, per second, beyond
/// its first 10 s.
const LAST_READS_PER_SECOND: f64 = 50.0;

/// The supervisor's streams: how many are open, and how many may be.
#[derive(Clone, Debug)]
pub struct Budget {
    open: Arc<AtomicUsize>,
    most: usize,
}

impl Budget {
    pub fn new(most: usize) -> Self {
        Self {
            open: Arc::default(),
            most,
        }
    }

    /// A place for one more stream, held until the guard goes; a task's
    /// rank 0 may take one of the reserve's too.
    fn take(&self, rank: u32) -> Option<Place> {
        let most = if rank == 0 {
            self.most + RANK0_RESERVE.min(self.most)
        } else {
            self.most
        };
        self.open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |open| {
                (open < most).then_some(open + 1)
            })
            .ok()
            .map(|_| Place(self.open.clone()))
    }
}

/// A stream's place in the [`Budget`], given back when its follower ends
/// (or is aborted).
struct Place(Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// How soon a pod read in turns is read again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Urgency {
    /// Ended or gone: one last read, to its end.
    Last,
    /// Being deleted: every [`URGENT`].
    Deleting,
    Running,
}

/// A pod read in turns.
struct Turn {
    node: NodeLog,
    due: Instant,
    urgency: Urgency,
    reading: bool,
}

#[derive(Default)]
struct Turns {
    pods: BTreeMap<String, Turn>,
    /// Pods read to their end, by uid: never read again.
    done: BTreeSet<String>,
}

/// A started pod, as a pass sees it.
pub struct Started {
    /// Its log; rank 0 of each task is followed first.
    pub node: NodeLog,
    pub ended: bool,
    pub deleting: bool,
}

/// The readers of one group's logs.
pub struct Readers {
    budget: Budget,
    backoff: Backoff,
    /// The least time between two turns of one pod ([`TURN`]).
    turn: Duration,
    /// Pods followed, by uid, and their followers.
    following: BTreeSet<String>,
    followers: Vec<tokio::task::JoinHandle<()>>,
    turns: Rc<RefCell<Turns>>,
    /// Wakes the task that reads in turns: a pod to read at once.
    wake: Rc<Notify>,
    taker: Option<tokio::task::JoinHandle<()>>,
}

impl Readers {
    pub fn new(budget: Budget, backoff: Backoff, turn: Duration) -> Self {
        Self {
            budget,
            backoff,
            turn,
            following: BTreeSet::new(),
            followers: Vec::new(),
            turns: Rc::default(),
            wake: Rc::default(),
            taker: None,
        }
    }

    /// Reads the logs of the pods a pass found started (and of those read
    /// in turns that went): each followed while a place is free, else in
    /// turns.
    pub fn see(&mut self, api: &Api<Pod>, shared: &SharedRef, mut started: Vec<Started>) {
        started.sort_by_key(|s| s.node.rank);
        let seen: BTreeSet<String> = started.iter().map(|s| s.node.uid.clone()).collect();
        self.followers.retain(|f| !f.is_finished());
        self.following.retain(|uid| seen.contains(uid));
        let mut hurry = false;
        {
            let mut turns = self.turns.borrow_mut();
            turns.done.retain(|uid| seen.contains(uid));
            let now = Instant::now();
            // A pod gone from the cache is read once more, to its end.
            for (uid, turn) in &mut turns.pods {
                if !seen.contains(uid) && turn.urgency != Urgency::Last {
                    turn.urgency = Urgency::Last;
                    turn.due = now;
                    hurry = true;
                }
            }
        }
        for pod in started {
            let uid = pod.node.uid.clone();
            let mut turns = self.turns.borrow_mut();
            if self.following.contains(&uid) || turns.done.contains(&uid) {
                continue;
            }
            let urgency = if pod.ended {
                Urgency::Last
            } else if pod.deleting {
                Urgency::Deleting
            } else {
                Urgency::Running
            };
            if let Some(turn) = turns.pods.get_mut(&uid) {
                // Sooner than it was: read at once.
                if urgency < turn.urgency {
                    turn.urgency = urgency;
                    turn.due = Instant::now();
                    hurry = true;
                }
                // Left to its turns: one ending is read to its end there,
                // one being read to that read.
                if turn.urgency != Urgency::Running || turn.reading {
                    continue;
                }
            }
            match self.budget.take(pod.node.rank) {
                Some(place) => {
                    turns.pods.remove(&uid);
                    drop(turns);
                    self.follow(api, shared, pod.node, place);
                }
                None if !turns.pods.contains_key(&uid) => {
                    turns.pods.insert(
                        uid,
                        Turn {
                            node: pod.node,
                            due: Instant::now(),
                            urgency,
                            reading: false,
                        },
                    );
                    hurry = true;
                }
                None => {}
            }
        }
        if hurry {
            self.start_turns(api);
            self.wake.notify_one();
        }
    }

    /// Follows one pod's log until it ends, in its place.
    fn follow(&mut self, api: &Api<Pod>, shared: &SharedRef, node: NodeLog, place: Place) {
        self.following.insert(node.uid.clone());
        let (api, shared, backoff) = (api.clone(), shared.clone(), self.backoff);
        self.followers.push(tokio::task::spawn_local(async move {
            let _place = place;
            let mut failures = 0;
            loop {
                let result = logs::read(&api, &node, Reading::Follow).await;
                let pod_done = {
                    let s = lock(&shared);
                    s.objs.pods.get(&node.pod).is_none_or(|p| {
                        p.metadata.uid.as_deref() != Some(&node.uid) || objects::pod_terminal(p)
                    })
                };
                match result {
                    Ok(()) if pod_done => return,
                    Err(e) if retry::not_found(&e) => return,
                    _ => {}
                }
                tokio::time::sleep(backoff.delay(failures)).await;
                failures += 1;
            }
        }));
    }

    /// The task that reads the pods in turns, unless it runs.
    fn start_turns(&mut self, api: &Api<Pod>) {
        if self.taker.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let (api, turns, wake) = (api.clone(), self.turns.clone(), self.wake.clone());
        self.taker = Some(tokio::task::spawn_local(take_turns(
            api, turns, wake, self.turn,
        )));
    }

    /// Every log read to its end: the followers done, no pod left to read
    /// in turns.
    pub fn done(&self) -> bool {
        self.followers
            .iter()
            .all(tokio::task::JoinHandle::is_finished)
            && self.turns.borrow().pods.is_empty()
    }

    /// How long a finished group may wait for its last lines: 10 s, and
    /// more for many pods still to read in turns.
    pub fn tail_time(&self, at_least: Duration) -> Duration {
        let left = self.turns.borrow().pods.len() as f64;
        at_least + Duration::from_secs_f64(left / LAST_READS_PER_SECOND)
    }

    /// Stops every reader (the group is let go).
    pub fn abort(&mut self) {
        for f in self.followers.drain(..).chain(self.taker.take()) {
            f.abort();
        }
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.abort();
    }
}

/// Reads the pods in turns, as they come due, a few at a time and no
/// faster than [`TURNS_PER_SECOND`] (but pods that ended or are being
/// deleted), until none is left to read.
async fn take_turns(api: Api<Pod>, turns: Rc<RefCell<Turns>>, wake: Rc<Notify>, turn: Duration) {
    loop {
        let now = Instant::now();
        let (due, next) = {
            let mut t = turns.borrow_mut();
            if t.pods.is_empty() {
                return;
            }
            let mut due: Vec<(&String, &Turn)> = t
                .pods
                .iter()
                .filter(|(_, turn)| turn.due <= now && !turn.reading)
                .collect();
            due.sort_by_key(|(_, turn)| (turn.urgency, turn.due));
            let urgent = due.iter().any(|(_, t)| t.urgency != Urgency::Running);
            let at_once = if urgent {
                2 * TURNS_AT_ONCE
            } else {
                TURNS_AT_ONCE
            };
            let picked: Vec<(String, NodeLog, Urgency)> = due
                .into_iter()
                .take(at_once)
                .map(|(uid, turn)| (uid.clone(), turn.node.clone(), turn.urgency))
                .collect();
            for (uid, _, _) in &picked {
                if let Some(turn) = t.pods.get_mut(uid) {
                    turn.reading = true;
                }
            }
            let next = t.pods.values().map(|t| t.due).min();
            (picked, next)
        };
        if due.is_empty() {
            let until = next
                .unwrap_or(now + turn)
                .max(now + Duration::from_millis(50));
            tokio::select! {
                () = tokio::time::sleep_until(until) => {}
                () = wake.notified() => {}
            }
            continue;
        }
        let running = due
            .iter()
            .filter(|(_, _, u)| *u == Urgency::Running)
            .count();
        let read = futures::future::join_all(due.into_iter().map(|(uid, node, urgency)| {
            let api = api.clone();
            async move {
                let how = if urgency == Urgency::Last {
                    Reading::Last
                } else {
                    Reading::Now
                };
                let result = logs::read(&api, &node, how).await;
                (uid, urgency, result)
            }
        }))
        .await;
        {
            let mut t = turns.borrow_mut();
            let every = Duration::from_secs_f64(t.pods.len() as f64 / TURNS_PER_SECOND).max(turn);
            let now = Instant::now();
            for (uid, was, result) in read {
                let gone = matches!(&result, Err(e) if retry::not_found(e));
                // Read to its end after it ended (or it is gone): done.
                if (was == Urgency::Last && result.is_ok()) || gone {
                    t.pods.remove(&uid);
                    t.done.insert(uid);
                    continue;
                }
                if let Some(turn) = t.pods.get_mut(&uid) {
                    turn.reading = false;
                    turn.due = match turn.urgency {
                        // Ended while being read (then at once), or being
                        // deleted, or its last read failed: again soon.
                        Urgency::Last if was != Urgency::Last => now,
                        Urgency::Last | Urgency::Deleting => now + URGENT,
                        Urgency::Running => now + every,
                    };
                }
            }
        }
        // The group's pace: the running pods just read use up its turns
        // for a while, unless a pod that ended or is being deleted waits.
        let pace = Duration::from_secs_f64(running as f64 / TURNS_PER_SECOND);
        if !pace.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(pace) => {}
                () = wake.notified() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Places are taken up to the budget, and given back with their
    /// guard; a task's rank 0 still finds one in the reserve when every
    /// other place is taken, and only then is refused.
    #[test]
    fn rank_0_finds_a_place_when_the_others_are_taken() {
        let budget = Budget::new(2);
        let (a, b) = (budget.take(3).unwrap(), budget.take(0).unwrap());
        assert!(budget.take(1).is_none(), "the budget is spent");
        let reserved = [budget.take(0).unwrap(), budget.take(0).unwrap()];
        assert!(budget.take(0).is_none(), "and so is the reserve");
        drop(reserved);
        drop(a);
        assert!(budget.take(1).is_some(), "given back with the guard");
        drop(b);
        // No reserve beyond a budget of none (logs are off then).
        assert!(Budget::new(0).take(0).is_none());
    }
}
