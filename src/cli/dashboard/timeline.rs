//! A group's timeline: every attempt of every node, when it started and
//! ended and why, read from the engine's event history (the store's
//! `events`). Pure: events in, spans out.
//!
//! The history holds what the engine was told, not what it decided, so
//! the reason a node was stopped is inferred from what came before its
//! end: a cancel, an auxiliary's delay firing, another node of the same
//! attempt failing, or every primary having ended.

use serde::Serialize;
use skyc_runtime::policy::{Event, Phase, Timer};
use std::collections::{BTreeMap, BTreeSet};

/// One attempt of one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Span {
    pub(crate) task: usize,
    pub(crate) node: u32,
    pub(crate) attempt: u32,
    /// When the attempt started (or was queued, or, failing both, ended).
    pub(crate) start_ms: i64,
    /// When the node ended; `None` while it runs.
    pub(crate) end_ms: Option<i64>,
    /// How it ended: `running`, `succeeded`, `failed`, `lost`, `stopped`,
    /// `terminated` (an auxiliary after the primaries), `cancelled`,
    /// `unknown` (the group ended with no word of the node).
    pub(crate) outcome: &'static str,
    pub(crate) code: Option<i32>,
    /// Said to people: what happened and what came of it.
    pub(crate) why: String,
    /// A later attempt of the task followed.
    pub(crate) restarted: bool,
}

/// A task as the timeline needs it: primary or not, and its nodes.
pub(crate) struct TaskInfo {
    pub(crate) primary: bool,
    pub(crate) num_nodes: u32,
}

/// Why a running attempt is being stopped, as last heard.
#[derive(Clone, Copy)]
enum Stop {
    Cancel,
    AuxiliaryDelay,
    /// Another node of the attempt (this one) failed or was lost.
    Sibling(u32),
}

/// The spans of a group's history: `events` oldest first as (time, JSON);
/// `finished_ms`, when the group has ended, closes what no event closed.
pub(crate) fn spans(
    events: &[(i64, String)],
    tasks: &[TaskInfo],
    finished_ms: Option<i64>,
) -> Vec<Span> {
    let mut open: BTreeMap<(usize, u32, u32), Span> = BTreeMap::new();
    let mut done: Vec<Span> = Vec::new();
    // Attempt starts (queued, then started), per (task, attempt).
    let mut started: BTreeMap<(usize, u32), i64> = BTreeMap::new();
    let mut stops: BTreeMap<(usize, u32), Stop> = BTreeMap::new();
    let mut cancelled = false;
    // Attempts that ended with a node failed or lost (they restart or fail).
    let mut latest: BTreeMap<usize, u32> = BTreeMap::new();
    let mut seen: BTreeSet<(usize, u32, u32)> = BTreeSet::new();
    // Other entries (a followed backend's records) are not the engine's.
    let events: Vec<(i64, Event)> = events
        .iter()
        .filter_map(|(at, text)| Some((*at, serde_json::from_str::<Event>(text).ok()?)))
        .collect();
    let primaries_end = primaries_end(&events, tasks);
    for &(at, ref event) in &events {
        let at = &at;
        let mut ended = None;
        match *event {
            Event::TaskQueued { task, attempt } => {
                started.entry((task, attempt)).or_insert(*at);
                note_attempt(&mut latest, task, attempt);
            }
            Event::TaskStarted { task, attempt } => {
                started.insert((task, attempt), *at);
                note_attempt(&mut latest, task, attempt);
                let nodes = tasks.get(task).map_or(1, |t| t.num_nodes.min(MAX_NODES));
                for node in 0..nodes {
                    let key = (task, node, attempt);
                    if seen.contains(&key) {
                        continue;
                    }
                    open.entry(key).or_insert_with(|| Span {
                        task,
                        node,
                        attempt,
                        start_ms: *at,
                        end_ms: None,
                        outcome: "running",
                        code: None,
                        why: String::new(),
                        restarted: false,
                    });
                }
            }
            // A node a backend stopped itself (a deleted pod, a terminated
            // instance) is reported lost: its reason comes from what came
            // before, as for an exit.
            Event::NodeExited {
                task,
                attempt,
                node,
                phase,
                code,
            } => ended = Some((task, attempt, node, Ended::Exited { phase, code })),
            Event::NodeLost {
                task,
                attempt,
                node,
            } => ended = Some((task, attempt, node, Ended::Lost)),
            Event::TimerFired(Timer::AuxiliaryDelay(task)) => {
                if let Some(&attempt) = latest.get(&task) {
                    stops.entry((task, attempt)).or_insert(Stop::AuxiliaryDelay);
                }
            }
            Event::TimerFired(Timer::Kill { .. }) => {}
            Event::CancelRequested => cancelled = true,
        }
        if let Some((task, attempt, node, ended)) = ended {
            let after_primaries =
                primaries_end.is_some_and(|end| end <= *at) && !is_primary(tasks, task);
            let stop = stop_of(&stops, cancelled, task, attempt, node);
            let (outcome, why) = ended.why(stop, after_primaries);
            if matches!(outcome, "failed" | "lost") {
                stops.entry((task, attempt)).or_insert(Stop::Sibling(node));
            }
            let key = (task, node, attempt);
            let code = ended.code();
            close(
                &mut open, &mut done, &mut seen, &started, key, *at, outcome, code, why,
            );
        }
    }
    for (_, mut span) in open {
        if let Some(end) = finished_ms {
            span.end_ms = Some(end.max(span.start_ms));
            span.outcome = "unknown";
            span.why = "no word of its end before the group ended".into();
        }
        done.push(span);
    }
    // A restart is a later attempt of the same task.
    for span in &mut done {
        if latest.get(&span.task).is_some_and(|&l| l > span.attempt) {
            span.restarted = true;
            if span.outcome != "cancelled" {
                span.why.push_str("; the task restarted");
            }
        }
    }
    done.sort_by_key(|s| (s.task, s.node, s.attempt));
    done
}

fn note_attempt(latest: &mut BTreeMap<usize, u32>, task: usize, attempt: u32) {
    let l = latest.entry(task).or_insert(attempt);
    *l = (*l).max(attempt);
}

fn stop_of(
    stops: &BTreeMap<(usize, u32), Stop>,
    cancelled: bool,
    task: usize,
    attempt: u32,
    node: u32,
) -> Option<Stop> {
    if cancelled {
        return Some(Stop::Cancel);
    }
    match stops.get(&(task, attempt)) {
        // A node is not stopped by its own end.
        Some(Stop::Sibling(n)) if *n == node => None,
        other => other.copied(),
    }
}

/// The most nodes of one task the timeline draws lanes for (the store's
/// count is not trusted: a state directory can say anything).
const MAX_NODES: u32 = 4096;

fn is_primary(tasks: &[TaskInfo], task: usize) -> bool {
    tasks.get(task).is_some_and(|t| t.primary)
}

/// When the last node of the primaries ended, once every primary task
/// has had a node end and none runs after: an auxiliary stopped from then
/// on was terminated because they ended, one that ended before (while a
/// primary was between attempts, say) was not.
fn primaries_end(events: &[(i64, Event)], tasks: &[TaskInfo]) -> Option<i64> {
    let mut last: BTreeMap<usize, i64> = BTreeMap::new();
    for (at, event) in events {
        match *event {
            Event::NodeExited { task, .. } | Event::NodeLost { task, .. }
                if is_primary(tasks, task) =>
            {
                last.insert(task, *at);
            }
            // A primary started again: its earlier ends were not its last.
            Event::TaskStarted { task, .. } | Event::TaskQueued { task, .. }
                if is_primary(tasks, task) =>
            {
                last.remove(&task);
            }
            _ => {}
        }
    }
    let primaries = tasks.iter().filter(|t| t.primary).count();
    (primaries > 0 && last.len() == primaries).then(|| last.values().copied().max())?
}

/// How a node ended, as the engine heard it.
enum Ended {
    Exited { phase: Phase, code: i32 },
    Lost,
}

impl Ended {
    fn code(&self) -> Option<i32> {
        match self {
            Ended::Exited { code, .. } => Some(*code),
            Ended::Lost => None,
        }
    }

    /// The outcome and what to say of it, given the stop last asked of
    /// its attempt and whether the primaries had all ended by then.
    fn why(&self, stop: Option<Stop>, after_primaries: bool) -> (&'static str, String) {
        let exit = match self {
            Ended::Exited { code, .. } => format!(" (exit {code})"),
            Ended::Lost => String::new(),
        };
        match (self, stop) {
            (Ended::Exited { code: 0, .. }, None) => ("succeeded", "succeeded".to_owned()),
            (_, Some(Stop::Cancel)) => ("cancelled", format!("cancelled{exit}")),
            (_, Some(Stop::AuxiliaryDelay)) => (
                "terminated",
                "auxiliary terminated after its termination delay".to_owned(),
            ),
            (_, Some(Stop::Sibling(n))) => (
                "stopped",
                format!("stopped: node {n} of this attempt ended first"),
            ),
            (_, None) if after_primaries => (
                "terminated",
                format!("auxiliary terminated after the primaries ended{exit}"),
            ),
            (Ended::Exited { phase, code }, None) => (
                "failed",
                format!(
                    "{} failed with exit {code}",
                    if *phase == Phase::Setup {
                        "setup"
                    } else {
                        "run"
                    }
                ),
            ),
            (Ended::Lost, None) => (
                "lost",
                "lost: preempted, its machine gone or killed from outside".to_owned(),
            ),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn close(
    open: &mut BTreeMap<(usize, u32, u32), Span>,
    done: &mut Vec<Span>,
    seen: &mut BTreeSet<(usize, u32, u32)>,
    started: &BTreeMap<(usize, u32), i64>,
    key: (usize, u32, u32),
    at: i64,
    outcome: &'static str,
    code: Option<i32>,
    why: String,
) {
    // A node answered twice (after a supervisor's crash) counts once.
    if !seen.insert(key) {
        return;
    }
    let (task, node, attempt) = key;
    let start_ms = open
        .remove(&key)
        .map(|s| s.start_ms)
        .or_else(|| started.get(&(task, attempt)).copied())
        .unwrap_or(at);
    done.push(Span {
        task,
        node,
        attempt,
        start_ms,
        end_ms: Some(at),
        outcome,
        code,
        why,
        restarted: false,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(at: i64, v: serde_json::Value) -> (i64, String) {
        (at, v.to_string())
    }

    fn exited(task: usize, attempt: u32, node: u32, code: i32) -> serde_json::Value {
        json!({"NodeExited": {"task": task, "attempt": attempt, "node": node, "phase": "Run", "code": code}})
    }

    fn started(task: usize, attempt: u32) -> serde_json::Value {
        json!({"TaskStarted": {"task": task, "attempt": attempt}})
    }

    fn lost(task: usize, attempt: u32, node: u32) -> serde_json::Value {
        json!({"NodeLost": {"task": task, "attempt": attempt, "node": node}})
    }

    /// Tasks as (primary, nodes).
    fn tasks(of: &[(bool, u32)]) -> Vec<TaskInfo> {
        of.iter()
            .map(|&(primary, num_nodes)| TaskInfo { primary, num_nodes })
            .collect()
    }

    #[test]
    fn the_event_shapes_are_the_engines() {
        // The history is the engine's events as the supervisor serialises
        // them; a change of shape must show here.
        let e: Event = serde_json::from_value(exited(1, 2, 3, 4)).unwrap();
        assert!(matches!(
            e,
            Event::NodeExited {
                task: 1,
                attempt: 2,
                node: 3,
                code: 4,
                ..
            }
        ));
        let t: Event =
            serde_json::from_value(json!({"TimerFired": {"AuxiliaryDelay": 1}})).unwrap();
        assert_eq!(t, Event::TimerFired(Timer::AuxiliaryDelay(1)));
    }

    #[test]
    fn a_restart_on_error_shows_both_attempts() {
        let tasks = tasks(&[(true, 2)]);
        let events = [
            ev(10, started(0, 0)),
            ev(20, exited(0, 0, 1, 1)),
            ev(21, exited(0, 0, 0, 143)),
            ev(30, started(0, 1)),
            ev(40, exited(0, 1, 0, 0)),
            ev(41, exited(0, 1, 1, 0)),
        ];
        let s = spans(&events, &tasks, Some(41));
        let brief: Vec<_> = s
            .iter()
            .map(|s| (s.node, s.attempt, s.outcome, s.restarted))
            .collect();
        assert_eq!(
            brief,
            [
                (0, 0, "stopped", true),
                (0, 1, "succeeded", false),
                (1, 0, "failed", true),
                (1, 1, "succeeded", false)
            ]
        );
        assert_eq!(s[2].why, "run failed with exit 1; the task restarted");
        assert_eq!((s[2].start_ms, s[2].end_ms), (10, Some(20)));
    }

    #[test]
    fn auxiliaries_lost_nodes_and_cancel_are_told_apart() {
        let tasks = tasks(&[(true, 1), (false, 1), (false, 1)]);
        let events = [
            ev(1, started(0, 0)),
            ev(1, started(1, 0)),
            ev(1, started(2, 0)),
            ev(5, lost(0, 0, 0)),
            ev(6, started(0, 1)),
            ev(9, exited(0, 1, 0, 0)),
            ev(12, json!({"TimerFired": {"AuxiliaryDelay": 1}})),
            ev(13, exited(1, 0, 0, 143)),
            ev(14, exited(2, 0, 0, 143)),
        ];
        let s = spans(&events, &tasks, None);
        let brief: Vec<_> = s.iter().map(|s| (s.task, s.attempt, s.outcome)).collect();
        assert_eq!(
            brief,
            [
                (0, 0, "lost"),
                (0, 1, "succeeded"),
                (1, 0, "terminated"),
                (2, 0, "terminated")
            ]
        );
        assert!(s[2].why.contains("termination delay"), "{}", s[2].why);
        assert!(s[3].why.contains("primaries ended"), "{}", s[3].why);

        let cancelled = [
            ev(1, started(0, 0)),
            ev(2, json!("CancelRequested")),
            ev(3, exited(0, 0, 0, 143)),
        ];
        assert_eq!(spans(&cancelled, &tasks, Some(3))[0].outcome, "cancelled");
    }

    #[test]
    fn nodes_a_cluster_backend_stopped_are_told_apart_from_lost_ones() {
        // Kubernetes and AWS report a node they stopped (a deleted pod, a
        // terminated instance) as lost: the reason is what came before.
        let tasks = tasks(&[(true, 2), (false, 1), (false, 1)]);
        let events = [
            ev(1, started(0, 0)),
            ev(1, started(1, 0)),
            ev(1, started(2, 0)),
            ev(4, exited(0, 0, 1, 1)),
            ev(5, lost(0, 0, 0)),
            // An auxiliary crashing while the primary is between attempts
            // failed: the primaries had not ended.
            ev(6, exited(2, 0, 0, 2)),
            ev(7, started(0, 1)),
            ev(7, started(2, 1)),
            ev(9, exited(0, 1, 0, 0)),
            ev(9, exited(0, 1, 1, 0)),
            ev(10, lost(2, 1, 0)),
            ev(12, json!({"TimerFired": {"AuxiliaryDelay": 1}})),
            ev(13, lost(1, 0, 0)),
        ];
        let s = spans(&events, &tasks, Some(13));
        let brief: Vec<_> = s
            .iter()
            .map(|s| (s.task, s.node, s.attempt, s.outcome))
            .collect();
        assert_eq!(
            brief,
            [
                (0, 0, 0, "stopped"),
                (0, 0, 1, "succeeded"),
                (0, 1, 0, "failed"),
                (0, 1, 1, "succeeded"),
                (1, 0, 0, "terminated"),
                (2, 0, 0, "failed"),
                (2, 0, 1, "terminated"),
            ]
        );
        assert!(s[4].why.contains("termination delay"), "{}", s[4].why);
        assert!(s[6].why.contains("primaries ended"), "{}", s[6].why);
    }

    #[test]
    fn open_spans_run_until_the_group_ends_and_noise_is_skipped() {
        let tasks = tasks(&[(true, 1)]);
        let events = [
            ev(1, started(0, 0)),
            ev(2, json!({"slurm": "RUNNING"})),
            (3, "not json".into()),
            ev(4, exited(0, 0, 0, 0)),
            ev(5, exited(0, 0, 0, 0)),
        ];
        let s = spans(&events, &tasks, None);
        assert_eq!(s.len(), 1, "a node answered twice counts once: {s:?}");
        let running = spans(&events[..1], &tasks, None);
        assert_eq!((running[0].outcome, running[0].end_ms), ("running", None));
        let ended = spans(&events[..1], &tasks, Some(9));
        assert_eq!((ended[0].outcome, ended[0].end_ms), ("unknown", Some(9)));
    }
}
