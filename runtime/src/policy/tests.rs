//! Scenarios of the Job Group lifecycle, and properties over random event
//! sequences.

use super::*;
use proptest::prelude::*;
use std::time::Duration;

const GRACE: Duration = Duration::from_secs(5);

fn task(name: &str, primary: bool, nodes: u32) -> TaskSpec {
    TaskSpec {
        name: name.to_owned(),
        primary,
        num_nodes: nodes,
        termination_delay: Duration::from_secs(10),
        max_restarts_on_errors: 0,
        recover_on_exit_codes: Vec::new(),
    }
}

fn engine(tasks: Vec<TaskSpec>) -> Engine {
    let mut e = Engine::new(GroupSpec {
        execution: crate::policy::Execution::Parallel,
        tasks,
        grace: GRACE,
    });
    e.start();
    for t in 0..e.spec().tasks.len() {
        e.handle(Event::TaskStarted {
            task: t,
            attempt: 0,
        });
    }
    e
}

fn exit(task: TaskId, attempt: Attempt, node: u32, code: i32) -> Event {
    Event::NodeExited {
        task,
        attempt,
        node,
        phase: Phase::Run,
        code,
    }
}

fn terminates(actions: &[Action], task: TaskId) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, Action::Terminate { task: t, .. } if *t == task))
}

#[test]
fn auxiliary_waits_its_delay_after_primaries_succeed() {
    let mut e = engine(vec![task("trainer", true, 1), task("buffer", false, 1)]);
    let actions = e.handle(exit(0, 0, 0, 0));
    assert_eq!(e.task_status(0), Status::Succeeded);
    assert!(!terminates(&actions, 1), "no SIGTERM before the delay");
    assert!(actions.contains(&Action::SetTimer {
        timer: Timer::AuxiliaryDelay(1),
        after: Duration::from_secs(10)
    }));
    let actions = e.handle(Event::TimerFired(Timer::AuxiliaryDelay(1)));
    assert!(actions.contains(&Action::Terminate {
        task: 1,
        attempt: 0,
        reason: Reason::PrimariesFinished
    }));
    assert_eq!(e.task_status(1), Status::Cancelling);
    e.handle(exit(1, 0, 0, 143));
    assert_eq!(e.task_status(1), Status::Cancelled);
    assert_eq!(
        e.group_status(),
        Status::Succeeded,
        "group follows its primaries"
    );
    assert!(e.is_finished());
}

#[test]
fn failing_primary_terminates_auxiliaries_at_once() {
    let mut e = engine(vec![task("trainer", true, 1), task("buffer", false, 1)]);
    let actions = e.handle(exit(0, 0, 0, 1));
    assert_eq!(e.task_status(0), Status::Failed);
    assert!(terminates(&actions, 1));
    e.handle(exit(1, 0, 0, 143));
    assert_eq!(e.group_status(), Status::Failed);
}

#[test]
fn a_failing_task_does_not_stop_the_others() {
    let mut e = engine(vec![
        task("a", true, 1),
        task("b", true, 1),
        task("aux", false, 1),
    ]);
    let actions = e.handle(exit(0, 0, 0, 1));
    assert_eq!(e.task_status(0), Status::Failed);
    assert!(!terminates(&actions, 1) && !terminates(&actions, 2));
    assert_eq!(e.task_status(1), Status::Running);
    // The last primary ends: only now do auxiliaries stop, at once since
    // a primary failed.
    let actions = e.handle(exit(1, 0, 0, 0));
    assert!(terminates(&actions, 2));
    assert_eq!(e.group_status(), Status::Failed);
}

#[test]
fn no_primaries_means_every_task_runs_to_its_end() {
    let mut spec = vec![task("a", true, 1), task("b", true, 1)];
    spec[1].termination_delay = Duration::ZERO;
    let mut e = engine(spec);
    let actions = e.handle(exit(0, 0, 0, 0));
    assert!(!terminates(&actions, 1));
    e.handle(exit(1, 0, 0, 0));
    assert_eq!(e.group_status(), Status::Succeeded);
}

#[test]
fn restarts_within_budget_then_fails() {
    let mut spec = vec![task("flaky", true, 1)];
    spec[0].max_restarts_on_errors = 2;
    let mut e = engine(spec);
    for attempt in 0..2 {
        let actions = e.handle(exit(0, attempt, 0, 1));
        assert!(actions.contains(&Action::Start {
            task: 0,
            attempt: attempt + 1
        }));
        assert_eq!(e.task_status(0), Status::Recovering);
        e.handle(Event::TaskStarted {
            task: 0,
            attempt: attempt + 1,
        });
    }
    let actions = e.handle(exit(0, 2, 0, 1));
    assert!(!actions.iter().any(|a| matches!(a, Action::Start { .. })));
    assert_eq!(e.task_status(0), Status::Failed);
    assert_eq!(e.restarts(0), (2, 2));
}

#[test]
fn listed_exit_codes_restart_without_using_the_budget() {
    let mut spec = vec![task("t", true, 1)];
    spec[0].recover_on_exit_codes = vec![29];
    let mut e = engine(spec);
    for attempt in 0..5 {
        e.handle(exit(0, attempt, 0, 29));
        e.handle(Event::TaskStarted {
            task: 0,
            attempt: attempt + 1,
        });
    }
    assert_eq!(e.restarts(0), (5, 0));
    e.handle(exit(0, 5, 0, 0));
    assert_eq!(e.task_status(0), Status::Succeeded);
}

#[test]
fn lost_node_restarts_only_its_task_as_a_whole() {
    let mut e = engine(vec![task("workers", true, 3), task("server", false, 1)]);
    let actions = e.handle(Event::NodeLost {
        task: 0,
        attempt: 0,
        node: 1,
    });
    assert_eq!(e.task_status(0), Status::Recovering);
    assert!(actions.contains(&Action::Terminate {
        task: 0,
        attempt: 0,
        reason: Reason::AttemptEnded
    }));
    assert!(!terminates(&actions, 1), "the sibling keeps running");
    e.handle(exit(0, 0, 0, 143));
    let actions = e.handle(exit(0, 0, 2, 143));
    assert!(actions.contains(&Action::Start {
        task: 0,
        attempt: 1
    }));
    assert_eq!(e.restarts(0), (1, 0), "preemption does not use the budget");
    // Late news about the old attempt changes nothing.
    assert!(e.handle(exit(0, 0, 1, 1)).is_empty());
}

#[test]
fn setup_failure_is_failed_setup() {
    let mut e = engine(vec![task("t", true, 2)]);
    e.handle(Event::NodeExited {
        task: 0,
        attempt: 0,
        node: 0,
        phase: Phase::Setup,
        code: 3,
    });
    e.handle(exit(0, 0, 1, 143));
    assert_eq!(e.task_status(0), Status::FailedSetup);
    assert_eq!(e.group_status(), Status::FailedSetup);
}

#[test]
fn cancel_terminates_everything_then_kills_after_grace() {
    let mut e = engine(vec![task("a", true, 2), task("b", false, 1)]);
    let actions = e.handle(Event::CancelRequested);
    assert!(terminates(&actions, 0) && terminates(&actions, 1));
    assert!(actions.contains(&Action::SetTimer {
        timer: Timer::Kill {
            task: 0,
            attempt: 0
        },
        after: GRACE
    }));
    e.handle(exit(0, 0, 0, 143));
    let actions = e.handle(Event::TimerFired(Timer::Kill {
        task: 0,
        attempt: 0,
    }));
    assert_eq!(
        actions,
        vec![Action::Kill {
            task: 0,
            attempt: 0
        }]
    );
    e.handle(exit(0, 0, 1, 137));
    e.handle(exit(1, 0, 0, 143));
    assert_eq!(e.task_status(0), Status::Cancelled);
    assert_eq!(e.group_status(), Status::Cancelled);
    assert!(e.is_finished());
}

#[test]
fn engine_state_round_trips_through_serde() {
    let mut e = engine(vec![task("a", true, 2), task("b", false, 1)]);
    e.handle(exit(0, 0, 0, 0));
    let json = serde_json::to_string(&e).unwrap();
    let mut back: Engine = serde_json::from_str(&json).unwrap();
    assert_eq!(back, e);
    // The restored engine carries on where the first left off.
    back.handle(exit(0, 0, 1, 0));
    assert_eq!(back.task_status(0), Status::Succeeded);
}

// Properties over random (also invalid) event sequences.

fn spec_strategy() -> impl Strategy<Value = GroupSpec> {
    prop::collection::vec(
        (
            any::<bool>(),
            1u32..4,
            0u64..3,
            0u32..3,
            prop::collection::vec(1u8..5, 0..2),
        ),
        1..5,
    )
    .prop_map(|tasks| GroupSpec {
        execution: crate::policy::Execution::Parallel,
        grace: GRACE,
        tasks: tasks
            .into_iter()
            .enumerate()
            .map(|(i, (primary, nodes, delay, budget, codes))| TaskSpec {
                name: format!("t{i}"),
                primary: primary || i == 0,
                num_nodes: nodes,
                termination_delay: Duration::from_secs(delay),
                max_restarts_on_errors: budget,
                recover_on_exit_codes: codes,
            })
            .collect(),
    })
}

fn event_strategy() -> impl Strategy<Value = Event> {
    let task = 0usize..5;
    let attempt = 0u32..4;
    prop_oneof![
        (task.clone(), attempt.clone())
            .prop_map(|(task, attempt)| Event::TaskStarted { task, attempt }),
        (task.clone(), attempt.clone())
            .prop_map(|(task, attempt)| Event::TaskQueued { task, attempt }),
        (
            task.clone(),
            attempt.clone(),
            0u32..4,
            any::<bool>(),
            prop_oneof![Just(0), Just(1), 2i32..5, Just(137)]
        )
            .prop_map(|(task, attempt, node, setup, code)| Event::NodeExited {
                task,
                attempt,
                node,
                phase: if setup { Phase::Setup } else { Phase::Run },
                code,
            }),
        (task.clone(), attempt.clone(), 0u32..4).prop_map(|(task, attempt, node)| {
            Event::NodeLost {
                task,
                attempt,
                node,
            }
        }),
        task.clone()
            .prop_map(|t| Event::TimerFired(Timer::AuxiliaryDelay(t))),
        (task, attempt)
            .prop_map(|(task, attempt)| Event::TimerFired(Timer::Kill { task, attempt })),
        Just(Event::CancelRequested),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_for_any_event_sequence(
        spec in spec_strategy(),
        events in prop::collection::vec(event_strategy(), 0..80),
    ) {
        let n = spec.tasks.len();
        let mut e = Engine::new(spec.clone());
        let mut actions = e.start();
        let mut cancelled = false;
        let mut terminal: Vec<Option<Status>> = vec![None; n];
        let mut last_attempt: Vec<Option<Attempt>> = vec![None; n];
        for event in events {
            if matches!(event, Event::TaskStarted { task, .. } | Event::TaskQueued { task, .. }
                | Event::NodeExited { task, .. } | Event::NodeLost { task, .. } if task >= n)
                || matches!(event, Event::TimerFired(Timer::AuxiliaryDelay(t)) | Event::TimerFired(Timer::Kill { task: t, .. }) if t >= n)
            {
                continue;
            }
            // The state before the event decides what may happen in it.
            let primaries_terminal = (0..n)
                .filter(|&i| spec.tasks[i].primary)
                .all(|i| e.task_status(i).is_terminal());
            cancelled |= event == Event::CancelRequested;
            actions.extend(e.handle(event));
            for a in actions.drain(..) {
                match a {
                    Action::TaskStatus { task, status } => {
                        prop_assert!(terminal[task].is_none(), "task {task} left terminal {:?} for {status}", terminal[task]);
                        if status.is_terminal() {
                            terminal[task] = Some(status);
                        }
                    }
                    Action::Start { task, attempt } => {
                        prop_assert!(terminal[task].is_none());
                        prop_assert!(last_attempt[task].is_none_or(|l| attempt == l + 1), "attempts go up by one");
                        last_attempt[task] = Some(attempt);
                    }
                    Action::Terminate { task, reason: Reason::PrimariesFinished, .. } => {
                        prop_assert!(!spec.tasks[task].primary, "only auxiliaries end with the primaries");
                        prop_assert!(primaries_terminal || (0..n).filter(|&i| spec.tasks[i].primary).all(|i| e.task_status(i).is_terminal()),
                            "auxiliary {task} terminated before the primaries finished");
                    }
                    Action::Terminate { reason: Reason::Cancel, .. } => prop_assert!(cancelled),
                    _ => {}
                }
            }
            for (t, s) in spec.tasks.iter().enumerate() {
                let (_, used) = e.restarts(t);
                prop_assert!(used <= s.max_restarts_on_errors, "task {t} used {used} restarts of {}", s.max_restarts_on_errors);
            }
        }
    }
}

// Pipelines.

fn pipeline(tasks: Vec<TaskSpec>) -> Engine {
    Engine::new(GroupSpec {
        execution: crate::policy::Execution::Serial,
        tasks,
        grace: GRACE,
    })
}

#[test]
fn a_pipeline_starts_each_step_after_the_previous_succeeded() {
    let mut e = pipeline(vec![task("a", true, 2), task("b", true, 1)]);
    let actions = e.start();
    assert!(actions.contains(&Action::Start {
        task: 0,
        attempt: 0
    }));
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Start { task: 1, .. }))
    );
    assert_eq!(e.task_status(1), Status::Pending);
    e.handle(Event::TaskStarted {
        task: 0,
        attempt: 0,
    });
    let actions = e.handle(exit(0, 0, 0, 0));
    assert!(actions.is_empty() || !actions.iter().any(|a| matches!(a, Action::Start { .. })));
    let actions = e.handle(exit(0, 0, 1, 0));
    assert!(actions.contains(&Action::Start {
        task: 1,
        attempt: 0
    }));
    e.handle(Event::TaskStarted {
        task: 1,
        attempt: 0,
    });
    e.handle(exit(1, 0, 0, 0));
    assert_eq!(e.group_status(), Status::Succeeded);
    assert!(e.is_finished());
}

#[test]
fn a_failed_step_cancels_the_steps_after_it() {
    let mut e = pipeline(vec![
        task("a", true, 1),
        task("b", true, 1),
        task("c", true, 1),
    ]);
    e.start();
    e.handle(Event::TaskStarted {
        task: 0,
        attempt: 0,
    });
    e.handle(exit(0, 0, 0, 0));
    e.handle(Event::TaskStarted {
        task: 1,
        attempt: 0,
    });
    let actions = e.handle(exit(1, 0, 0, 3));
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::Start { task: 2, .. }))
    );
    assert_eq!(e.task_status(1), Status::Failed);
    assert_eq!(e.task_status(2), Status::Cancelled);
    assert_eq!(e.group_status(), Status::Failed, "the failed step's status");
    assert!(e.is_finished());
}

#[test]
fn a_stray_start_report_does_not_run_a_step_that_was_not_launched() {
    let mut e = pipeline(vec![task("a", true, 1), task("b", true, 1)]);
    e.start();
    e.handle(Event::TaskStarted {
        task: 1,
        attempt: 0,
    });
    assert_eq!(e.task_status(1), Status::Pending);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Whatever happens, a step starts only when every step before it
    /// SUCCEEDED, and at most one step is ever in flight.
    #[test]
    fn pipeline_steps_never_overlap(
        spec in spec_strategy(),
        events in prop::collection::vec(event_strategy(), 0..80),
    ) {
        let mut spec = spec;
        spec.execution = crate::policy::Execution::Serial;
        spec.tasks.iter_mut().for_each(|t| t.primary = true);
        let n = spec.tasks.len();
        let mut e = Engine::new(spec);
        let mut actions = e.start();
        for event in events {
            let in_range = match &event {
                Event::TaskStarted { task, .. } | Event::TaskQueued { task, .. }
                | Event::NodeExited { task, .. } | Event::NodeLost { task, .. }
                | Event::TimerFired(Timer::AuxiliaryDelay(task))
                | Event::TimerFired(Timer::Kill { task, .. }) => *task < n,
                Event::CancelRequested => true,
            };
            if !in_range {
                continue;
            }
            actions.extend(e.handle(event));
            for a in actions.drain(..) {
                if let Action::Start { task, .. } = a {
                    for before in 0..task {
                        prop_assert_eq!(e.task_status(before), Status::Succeeded);
                    }
                }
            }
            let in_flight = (0..n)
                .filter(|&t| (0..4).any(|node| e.node_live(t, node)))
                .count();
            prop_assert!(in_flight <= 1, "{in_flight} steps in flight");
        }
    }
}
