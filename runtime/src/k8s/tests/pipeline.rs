//! Pipelines: the engine launches each step's pods only once the step
//! before it SUCCEEDED; a step restarts, fails and is cancelled through
//! its own pods, and the pipeline ends through the gate as a group does.

use super::driver::Driver;
use super::{
    JS, RULES, applied, completes, created, fail_gate, fails, launched, open_gate, pod, relaunched,
    stop,
};
use crate::backend::Report;
use crate::policy::{Event, Status};

/// A 2-node step, then a 1-node one.
const TWO_STEPS: &str = "\
name: g
execution: serial
---
name: train
num_nodes: 2
run: train
---
name: eval
run: eval
";

/// Applies and launches the first step only, and runs its pods.
fn first_step_running(yaml: &str) -> Driver {
    let mut d = Driver::start(yaml);
    let (first, nodes) = (
        d.plan.spec.tasks[0].name.clone(),
        d.plan.spec.tasks[0].num_nodes,
    );
    let mut want = applied();
    want.extend(launched(&d, 0, &first, nodes, 0));
    assert_eq!(d.writes(), want);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.fake.world().names("pods").len(), nodes as usize);
    d.cluster(|w| w.run_pending());
    assert!(d.writes().is_empty());
    assert_eq!(d.statuses()[0], Status::Running);
    assert!(d.statuses()[1..].iter().all(|s| *s == Status::Pending));
    d
}

/// Every node of the step's attempt ends with `code`.
fn step_exits(d: &mut Driver, step: &str, nodes: u32, attempt: u32, code: i32) {
    d.cluster(|w| {
        for i in 0..nodes {
            w.exit(&pod(step, i, attempt), code);
        }
        w.reconcile_cluster();
    });
}

#[test]
fn a_pipeline_runs_its_steps_in_order_to_succeeded() {
    let mut d = first_step_running(TWO_STEPS);
    // Where each node runs: its own pod, with a group's hostname.
    let hosts: Vec<(u32, String, String)> = d
        .reports
        .iter()
        .filter_map(|r| match r {
            Report::Node(n) if n.task == 0 => Some((n.rank, n.hostname.clone(), n.handle.clone())),
            _ => None,
        })
        .collect();
    for rank in 0..2 {
        assert!(
            hosts.contains(&(rank, format!("train-{rank}.g"), pod("train", rank, 0))),
            "{hosts:?}"
        );
    }
    // One node done: the step runs on, and the next waits.
    d.cluster(|w| {
        w.exit(&pod("train", 0, 0), 0);
        w.reconcile_cluster();
    });
    assert!(d.writes().is_empty());
    assert_eq!(d.statuses(), [Status::Running, Status::Pending]);
    // Both done: only then is the next step launched.
    d.cluster(|w| {
        w.exit(&pod("train", 1, 0), 0);
        w.reconcile_cluster();
    });
    assert_eq!(d.writes(), launched(&d, 1, "eval", 1, 0));
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Starting]);
    d.cluster(|w| w.run_pending());
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Running]);
    step_exits(&mut d, "eval", 1, 0, 0);
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Succeeded]);
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert_eq!(d.writes(), [open_gate(&d)]);
    completes(&mut d);
    assert!(d.writes().is_empty());
    assert!(d.settled());
    assert_eq!(created(&d), ["g-eval-0-0", "g-train-0-0", "g-train-1-0"]);
}

#[test]
fn a_failed_step_restarts_then_fails_the_pipeline_and_cancels_the_rest() {
    let mut d = first_step_running(
        "\
name: g
execution: serial
---
name: train
num_nodes: 2
resources:
  job_recovery:
    max_restarts_on_errors: 1
run: train
---
name: eval
run: eval
",
    );
    // Node 1 fails: node 0 gets SIGTERM; once it ended, the failed pod is
    // deleted too, and the step is launched again, every node.
    d.cluster(|w| w.exit(&pod("train", 1, 0), 1));
    assert_eq!(d.statuses(), [Status::Recovering, Status::Pending]);
    assert_eq!(d.writes(), [stop(&d, &pod("train", 0, 0))]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.writes(), [stop(&d, &pod("train", 1, 0))]);
    relaunched(&mut d, 0, "train", 2, 1);
    assert_eq!(d.statuses(), [Status::Running, Status::Pending]);
    assert_eq!(d.engine.restarts(0), (1, 1));
    // Node 0 fails: the budget is spent, the step FAILED, the next one
    // CANCELLED without ever being launched, and the gate fails the
    // JobSet.
    d.cluster(|w| w.exit(&pod("train", 0, 1), 1));
    assert_eq!(d.writes(), [stop(&d, &pod("train", 1, 1))]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.statuses(), [Status::Failed, Status::Cancelled]);
    assert_eq!(d.engine.group_status(), Status::Failed);
    assert_eq!(d.writes(), [fail_gate(&d)]);
    fails(&mut d);
    assert_eq!(d.engine.restarts(0), (1, 1));
    assert_eq!(
        created(&d),
        ["g-train-0-0", "g-train-0-1", "g-train-1-0", "g-train-1-1"],
        "the later step was never launched"
    );
}

#[test]
fn cancel_in_the_middle_deletes_the_jobset_and_cancels_the_rest() {
    let mut d = first_step_running(
        "\
name: g
execution: serial
---
name: fetch
run: fetch
---
name: train
num_nodes: 2
run: train
---
name: publish
run: publish
",
    );
    step_exits(&mut d, "fetch", 1, 0, 0);
    assert_eq!(d.writes(), launched(&d, 1, "train", 2, 0));
    d.cluster(|w| w.run_pending());
    assert_eq!(
        d.statuses(),
        [Status::Succeeded, Status::Running, Status::Pending]
    );
    let js = d.uid("jobsets", "g");
    d.cancel();
    assert_eq!(d.writes(), [format!("DELETE {JS}/g Foreground uid={js}")]);
    assert_eq!(
        d.statuses(),
        [Status::Succeeded, Status::Cancelling, Status::Cancelled]
    );
    // The garbage collector deletes the JobSet's pods (SIGTERM).
    d.cluster(|w| w.reconcile_cluster());
    assert!(d.writes().is_empty());
    assert_eq!(
        d.statuses(),
        [Status::Succeeded, Status::Cancelled, Status::Cancelled]
    );
    assert_eq!(d.engine.group_status(), Status::Cancelled);
    assert!(d.fake.world().get("jobsets", "g").is_none());
    assert!(d.settled());
    assert_eq!(
        created(&d),
        ["g-fetch-0-0", "g-train-0-0", "g-train-1-0"],
        "the last step was never launched"
    );
}

#[test]
fn a_supervisor_killed_between_two_steps_starts_the_next_once() {
    let mut d = first_step_running(
        "\
name: g
execution: serial
---
name: train
num_nodes: 2
resources:
  job_recovery:
    max_restarts_on_errors: 3
run: train
---
name: eval
run: eval
",
    );
    // Killed before a failure was recorded: the next supervisor reads it
    // from the cluster and restarts the step, once.
    d.kill_supervisor();
    d.cluster(|w| {
        w.exit(&pod("train", 0, 0), 1);
        // Nothing replaces the pod meanwhile.
        for _ in 0..5 {
            w.reconcile_cluster();
        }
    });
    assert_eq!(d.fake.world().created_pods().len(), 2);
    d.restart_supervisor();
    assert_eq!(
        d.writes(),
        [RULES.to_owned(), stop(&d, &pod("train", 1, 0))]
    );
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.writes(), [stop(&d, &pod("train", 0, 0))]);
    relaunched(&mut d, 0, "train", 2, 1);
    assert_eq!(d.engine.restarts(0), (1, 1));
    // The step ends well while no supervisor runs: nothing launches the
    // next step meanwhile.
    d.kill_supervisor();
    d.cluster(|w| {
        for i in 0..2 {
            w.exit(&pod("train", i, 1), 0);
        }
        w.reconcile_cluster();
    });
    assert!(d.fake.world().get("pods", &pod("eval", 0, 0)).is_none());
    d.restart_supervisor();
    let mut want = vec![RULES.to_owned()];
    want.extend(launched(&d, 1, "eval", 1, 0));
    assert_eq!(d.writes(), want);
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Starting]);
    // Killed again after the step was launched: nothing is done twice.
    let engine = d.engine.clone();
    d.kill_supervisor();
    d.restart_supervisor();
    assert_eq!(d.writes(), [RULES]);
    assert_eq!(d.engine, engine);
    d.cluster(|w| w.run_pending());
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Running]);
    assert_eq!(d.engine.attempt(1), 0);
    assert_eq!(d.engine.restarts(0), (1, 1), "the restart counted once");
    let exits = d
        .reports
        .iter()
        .filter(|r| {
            matches!(
                r,
                Report::Event {
                    event: Event::NodeExited {
                        task: 0,
                        code: 1,
                        ..
                    },
                    ..
                }
            )
        })
        .count();
    assert_eq!(exits, 1, "the failure told once");
    step_exits(&mut d, "eval", 1, 0, 0);
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert_eq!(
        created(&d),
        [
            "g-eval-0-0",
            "g-train-0-0",
            "g-train-0-1",
            "g-train-1-0",
            "g-train-1-1"
        ]
    );
}
