//! Pipelines: one Indexed Job per step, each created by JobSet once the
//! previous step's Job is `Complete` (`dependsOn`). The runtime binds,
//! stops, restarts and fails a step through its one Job, and reads a node
//! from the pods of its completion index.

use super::driver::Driver;
use super::{J, JS, RULES, applied, bind, delete, recreated, stop};
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

fn jobs(d: &Driver) -> Vec<String> {
    d.fake.world().names("jobs")
}

fn pod(d: &Driver, job: &str, index: u32) -> String {
    d.fake.world().pod_of_index(job, index)
}

fn fail_jobset(d: &Driver, job: &str) -> String {
    format!(
        "PATCH {J}/{job} {{\"spec\":{{\"activeDeadlineSeconds\":1}}}} uid={}",
        d.uid("jobs", job)
    )
}

/// Applies, lets JobSet make the first step's Job (only it) and the Job
/// its pods, binds it, runs them.
fn first_step_running(yaml: &str) -> Driver {
    let mut d = Driver::start(yaml);
    assert_eq!(d.writes(), applied());
    d.cluster(|w| w.reconcile_cluster());
    let first = format!("g-{}-0", d.plan.spec.tasks[0].name);
    assert_eq!(
        jobs(&d),
        std::slice::from_ref(&first),
        "only the first step's Job"
    );
    assert_eq!(d.writes(), [bind(&d, &first, 0)]);
    let nodes = d.plan.spec.tasks[0].num_nodes;
    assert_eq!(d.fake.world().names("pods").len(), nodes as usize);
    d.cluster(|w| w.run_pending());
    assert!(d.writes().is_empty());
    assert_eq!(d.statuses()[0], Status::Running);
    assert!(d.statuses()[1..].iter().all(|s| *s == Status::Pending));
    d
}

/// Every pod of the step's Job ends with `code`.
fn step_exits(d: &mut Driver, job: &str, nodes: u32, code: i32) {
    let pods: Vec<String> = (0..nodes).map(|i| pod(d, job, i)).collect();
    d.cluster(|w| {
        for p in &pods {
            w.exit(p, code);
        }
        w.reconcile_cluster();
    });
}

#[test]
fn a_pipeline_runs_its_steps_in_order_to_succeeded() {
    let mut d = first_step_running(TWO_STEPS);
    // Where each node runs: the step's pods, with the Job controller's
    // hostnames.
    let hosts: Vec<(u32, String, String)> = d
        .reports
        .iter()
        .filter_map(|r| match r {
            Report::Node(n) if n.task == 0 => Some((n.rank, n.hostname.clone(), n.handle.clone())),
            _ => None,
        })
        .collect();
    for rank in 0..2 {
        let handle = pod(&d, "g-train-0", rank);
        assert!(
            hosts.contains(&(rank, format!("g-train-0-{rank}.g"), handle.clone())),
            "{hosts:?}"
        );
        assert!(
            handle.starts_with(&format!("g-train-0-{rank}-")),
            "{handle}"
        );
    }
    // One node done: the step runs on, and the next waits.
    let first = pod(&d, "g-train-0", 0);
    d.cluster(|w| {
        w.exit(&first, 0);
        w.reconcile_cluster();
    });
    assert!(d.writes().is_empty());
    assert_eq!(d.statuses(), [Status::Running, Status::Pending]);
    assert_eq!(jobs(&d), ["g-train-0"]);
    // Both done: the step's Job completes, and only then does JobSet make
    // the next step's, which is bound to its first attempt.
    let second = pod(&d, "g-train-0", 1);
    d.cluster(|w| {
        w.exit(&second, 0);
        w.reconcile_cluster();
    });
    assert_eq!(jobs(&d), ["g-eval-0", "g-train-0"]);
    assert_eq!(d.writes(), [bind(&d, "g-eval-0", 0)]);
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Starting]);
    d.cluster(|w| w.run_pending());
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Running]);
    step_exits(&mut d, "g-eval-0", 1, 0);
    // JobSet completes by itself: no gate, no write.
    assert!(d.writes().is_empty());
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Succeeded]);
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert_eq!(
        d.fake.world().get("jobsets", "g").unwrap()["status"]["terminalState"],
        "Completed"
    );
    assert!(d.settled());
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
    // Node 1 fails: the step's Job stops (node 0 gets SIGTERM), then the
    // restart deletes it and JobSet makes it again.
    let failed = pod(&d, "g-train-0", 1);
    d.cluster(|w| w.exit(&failed, 1));
    assert_eq!(d.statuses(), [Status::Recovering, Status::Pending]);
    assert_eq!(d.writes(), [stop(&d, "g-train-0")]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.writes(), [delete(&d, "g-train-0")]);
    recreated(&mut d, &["g-train-0"], 1);
    assert_eq!(d.statuses(), [Status::Running, Status::Pending]);
    assert_eq!(d.engine.restarts(0), (1, 1));
    assert_eq!(jobs(&d), ["g-train-0"]);
    // Node 0 fails: the budget is spent, the step FAILED, the next one
    // CANCELLED without ever being created, and the failed step's Job
    // fails the JobSet.
    let failed = pod(&d, "g-train-0", 0);
    d.cluster(|w| w.exit(&failed, 1));
    assert_eq!(d.writes(), [stop(&d, "g-train-0")]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.statuses(), [Status::Failed, Status::Cancelled]);
    assert_eq!(d.engine.group_status(), Status::Failed);
    assert_eq!(d.writes(), [fail_jobset(&d, "g-train-0")]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(
        d.fake.world().get("jobsets", "g").unwrap()["status"]["terminalState"],
        "Failed"
    );
    assert!(d.writes().is_empty());
    assert!(d.settled());
    assert_eq!(jobs(&d), ["g-train-0"], "the later step was never created");
    assert_eq!(d.engine.restarts(0), (1, 1));
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
    step_exits(&mut d, "g-fetch-0", 1, 0);
    assert_eq!(d.writes(), [bind(&d, "g-train-0", 0)]);
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
    // JobSet deletes its Jobs, the Job controller their pods (SIGTERM).
    d.cluster(|w| w.reconcile_cluster());
    assert!(d.writes().is_empty());
    assert_eq!(
        d.statuses(),
        [Status::Succeeded, Status::Cancelled, Status::Cancelled]
    );
    assert_eq!(d.engine.group_status(), Status::Cancelled);
    assert!(d.fake.world().get("jobsets", "g").is_none());
    assert!(d.settled());
    let publish = d
        .fake
        .world()
        .requests
        .iter()
        .any(|r| r.line().contains("g-publish-0"));
    assert!(!publish, "the last step was never created");
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
    let failed = pod(&d, "g-train-0", 0);
    d.cluster(|w| w.exit(&failed, 1));
    d.restart_supervisor();
    assert_eq!(d.writes(), [RULES.to_owned(), stop(&d, "g-train-0")]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.writes(), [delete(&d, "g-train-0")]);
    recreated(&mut d, &["g-train-0"], 1);
    assert_eq!(d.engine.restarts(0), (1, 1));
    // The step ends well while no supervisor runs; JobSet makes the next
    // step's Job meanwhile.
    d.kill_supervisor();
    let pods: Vec<String> = (0..2).map(|i| pod(&d, "g-train-0", i)).collect();
    d.cluster(|w| {
        for p in &pods {
            w.exit(p, 0);
        }
        w.reconcile_cluster();
    });
    assert_eq!(jobs(&d), ["g-eval-0", "g-train-0"]);
    let eval = d.uid("jobs", "g-eval-0");
    d.restart_supervisor();
    assert_eq!(d.writes(), [RULES.to_owned(), bind(&d, "g-eval-0", 0)]);
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Starting]);
    // Killed again after the step was bound: nothing is done twice.
    let engine = d.engine.clone();
    d.kill_supervisor();
    d.restart_supervisor();
    assert_eq!(d.writes(), [RULES]);
    assert_eq!(d.engine, engine);
    d.cluster(|w| w.run_pending());
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Running]);
    assert_eq!(d.uid("jobs", "g-eval-0"), eval, "the next step's Job, once");
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
    step_exits(&mut d, "g-eval-0", 1, 0);
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert!(d.settled());
}
