//! Who reads a group's pods' logs ([`super::logs`]), within the
//! supervisor's budget of streams.
//!
//! A followed log is a request held open to the API server: kube's
//! client speaks HTTP/1.1, so each is a connection of its own, about
//! 25 KiB of the supervisor's memory (hyper's buffers, the task). A
//! supervisor follows at most [`Budget`]'s streams at once, rank 0 of
//! each task first; the logs of the other running pods are read in
//! turns, each to its end and closed, a few at a time ([`TURNS_AT_ONCE`]),
//! each pod again after [`TURN`] or longer, so that a group of thousands
//! of nodes asks the API server for no more than [`TURNS_PER_SECOND`].
//! A pod that ended (or went) is read at once, to its end: a finished
//! group has all of its nodes' output. A stream that ends frees its place
//! for a pod read in turns, which is followed from where its turns left
//! it. Either way the lines go through [`NodeLog::append`], after the
//! pod's mark: none is written twice.

use super::logs::{self, NodeLog};
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
use tokio::time::Instant;

/// Logs followed at once by one supervisor, for all of its groups.
pub const STREAMS: usize = 128;

/// Logs read in turns at once, per group.
pub const TURNS_AT_ONCE: usize = 8;

/// The least time between two turns of one pod.
pub const TURN: Duration = Duration::from_secs(5);

/// The most turns a group takes per second, all its pods together: its
/// pods' turns come further apart as there are more of them.
pub const TURNS_PER_SECOND: f64 = 10.0;

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

    /// A place for one more stream, held until the guard goes.
    fn take(&self) -> Option<Place> {
        self.open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |open| {
                (open < self.most).then_some(open + 1)
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

/// A pod read in turns.
struct Turn {
    node: NodeLog,
    due: Instant,
    /// The pod ended or went: its next turn reads it to its end, its last.
    ended: bool,
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
    pub node: NodeLog,
    /// Its rank among its task's nodes: rank 0 are followed first.
    pub rank: u32,
    pub ended: bool,
}

/// The readers of one group's logs.
pub struct Readers {
    budget: Budget,
    backoff: Backoff,
    /// Pods followed, by uid, and their followers.
    following: BTreeSet<String>,
    followers: Vec<tokio::task::JoinHandle<()>>,
    turns: Rc<RefCell<Turns>>,
    taker: Option<tokio::task::JoinHandle<()>>,
}

impl Readers {
    pub fn new(budget: Budget, backoff: Backoff) -> Self {
        Self {
            budget,
            backoff,
            following: BTreeSet::new(),
            followers: Vec::new(),
            turns: Rc::default(),
            taker: None,
        }
    }

    /// Reads the logs of the pods a pass found started (and of those read
    /// in turns that went): each followed while a place is free, else in
    /// turns.
    pub fn see(&mut self, api: &Api<Pod>, shared: &SharedRef, mut started: Vec<Started>) {
        started.sort_by_key(|s| s.rank);
        let seen: BTreeSet<&str> = started.iter().map(|s| s.node.uid.as_str()).collect();
        {
            let mut turns = self.turns.borrow_mut();
            let now = Instant::now();
            // A pod gone from the cache is read once more, to its end.
            for (uid, turn) in &mut turns.pods {
                if !seen.contains(uid.as_str()) && !turn.ended {
                    turn.ended = true;
                    turn.due = now;
                }
            }
        }
        for pod in started {
            let uid = pod.node.uid.clone();
            let mut turns = self.turns.borrow_mut();
            if self.following.contains(&uid) || turns.done.contains(&uid) {
                continue;
            }
            let turn = turns.pods.get_mut(&uid);
            // Read in turns now: a pod that ended is read to its end
            // there, one being read is left to that read.
            if let Some(turn) = turn {
                if pod.ended && !turn.ended {
                    turn.ended = true;
                    turn.due = Instant::now();
                }
                if turn.ended || turn.reading {
                    continue;
                }
            }
            match self.budget.take() {
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
                            ended: pod.ended,
                            reading: false,
                        },
                    );
                    drop(turns);
                    self.start_turns(api);
                }
                None => {}
            }
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
                let result = logs::read(&api, &node, true).await;
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

    /// The task that reads the pods in turns, once there are some.
    fn start_turns(&mut self, api: &Api<Pod>) {
        if self.taker.as_ref().is_some_and(|t| !t.is_finished()) {
            return;
        }
        let (api, turns) = (api.clone(), self.turns.clone());
        self.taker = Some(tokio::task::spawn_local(take_turns(api, turns)));
    }

    /// Every log read to its end: the followers done, no pod left to read
    /// in turns.
    pub fn done(&self) -> bool {
        self.followers
            .iter()
            .all(tokio::task::JoinHandle::is_finished)
            && self.turns.borrow().pods.is_empty()
    }

    /// Stops every reader (the group is let go).
    pub fn abort(&mut self) {
        for f in self.followers.drain(..).chain(self.taker.take()) {
            f.abort();
        }
    }
}

/// Reads the pods in turns, as they come due, a few at a time, until none
/// is left to read.
async fn take_turns(api: Api<Pod>, turns: Rc<RefCell<Turns>>) {
    loop {
        let now = Instant::now();
        let due: Vec<(String, NodeLog, bool)> = {
            let mut t = turns.borrow_mut();
            if t.pods.is_empty() {
                return;
            }
            let mut due: Vec<(&String, &Turn)> = t
                .pods
                .iter()
                .filter(|(_, turn)| turn.due <= now && !turn.reading)
                .collect();
            // Ended pods first: their output is what a finished group
            // waits for.
            due.sort_by_key(|(_, turn)| (!turn.ended, turn.due));
            let picked: Vec<(String, NodeLog, bool)> = due
                .into_iter()
                .take(TURNS_AT_ONCE)
                .map(|(uid, turn)| (uid.clone(), turn.node.clone(), turn.ended))
                .collect();
            for (uid, _, _) in &picked {
                if let Some(turn) = t.pods.get_mut(uid) {
                    turn.reading = true;
                }
            }
            picked
        };
        if due.is_empty() {
            let next = turns
                .borrow()
                .pods
                .values()
                .map(|t| t.due)
                .min()
                .unwrap_or(now + TURN);
            tokio::time::sleep_until(next.max(now + Duration::from_millis(50))).await;
            continue;
        }
        let read = futures::future::join_all(due.into_iter().map(|(uid, node, ended)| {
            let api = api.clone();
            async move {
                let result = logs::read(&api, &node, false).await;
                (uid, ended, result)
            }
        }))
        .await;
        let mut t = turns.borrow_mut();
        let every = Duration::from_secs_f64(t.pods.len() as f64 / TURNS_PER_SECOND).max(TURN);
        let now = Instant::now();
        for (uid, ended, result) in read {
            let gone = matches!(&result, Err(e) if retry::not_found(e));
            // Read to its end after it ended (or it is gone): done.
            if (ended && result.is_ok()) || gone {
                t.pods.remove(&uid);
                t.done.insert(uid);
                continue;
            }
            if let Some(turn) = t.pods.get_mut(&uid) {
                turn.reading = false;
                turn.due = match (turn.ended, ended) {
                    // It ended while being read: read it again at once.
                    (true, false) => now,
                    // Its last read failed: again soon.
                    (true, true) => now + TURN,
                    _ => now + every,
                };
            }
        }
    }
}
