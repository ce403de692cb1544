//! Scenarios of recovery, failure, cancel and the supervisor's crashes.

use super::*;

fn delete(d: &Driver, job: &str) -> String {
    format!("DELETE {J}/{job} Foreground uid={}", d.uid("jobs", job))
}

/// One task with a recovery policy, and an auxiliary beside it.
fn recovering(policy: &str) -> String {
    format!(
        "\
name: g
execution: parallel
primary_tasks: [trainer]
---
name: trainer
resources:
  job_recovery:
{policy}
run: train
---
name: buffer
run: sleep 1000
"
    )
}

/// The Job a restart deleted goes, JobSet makes it again, the backend
/// binds it to the new attempt and its pod runs.
fn recreated(d: &mut Driver, jobs: &[&str], attempt: u32) {
    d.cluster(|w| w.reconcile_cluster());
    let binds: Vec<String> = jobs.iter().map(|j| bind(d, j, attempt)).collect();
    assert_eq!(d.writes(), binds);
    d.cluster(|w| w.run_pending());
    assert!(d.writes().is_empty());
}

#[test]
fn a_listed_exit_code_restarts_without_using_the_budget() {
    let mut d = running(&recovering(
        "    max_restarts_on_errors: 0\n    recover_on_exit_codes: [33]",
    ));
    let pod = d.fake.world().pod_of("g-trainer-0-0");
    d.cluster(|w| w.exit(&pod, 33));
    assert_eq!(d.writes(), [delete(&d, "g-trainer-0-0")]);
    assert_eq!(d.statuses()[0], Status::Recovering);
    recreated(&mut d, &["g-trainer-0-0"], 1);
    assert_eq!(d.statuses()[0], Status::Running);
    assert_eq!(d.engine.restarts(0), (1, 0));
    let pod = d.fake.world().pod_of("g-trainer-0-0");
    d.cluster(|w| w.exit(&pod, 0));
    // The buffer (no delay) stops at once; JobSet completes by itself.
    assert_eq!(d.writes(), [stop(&d, "g-buffer-0-0")]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Cancelled]);
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert!(d.writes().is_empty());
    assert!(d.settled());
}

#[test]
fn a_user_failure_within_the_budget_restarts_the_task() {
    let mut d = running(&recovering("    max_restarts_on_errors: 1"));
    let pod = d.fake.world().pod_of("g-trainer-0-0");
    // The Job controller replaces the failed pod before the backend acts:
    // the restart deletes the Job with both pods, and the failure counts
    // once.
    d.cluster(|w| {
        w.exit(&pod, 1);
        w.job_controller();
    });
    assert_eq!(d.fake.world().names("pods").len(), 3);
    assert_eq!(d.writes(), [delete(&d, "g-trainer-0-0")]);
    recreated(&mut d, &["g-trainer-0-0"], 1);
    assert_eq!(d.engine.restarts(0), (1, 1));
    assert_eq!(d.statuses(), [Status::Running, Status::Running]);
    // A second failure: the budget is spent, the task fails, its Job stops
    // (no replacement runs), the buffer stops at once, and the JobSet is
    // failed on purpose.
    let pod = d.fake.world().pod_of("g-trainer-0-0");
    d.cluster(|w| w.exit(&pod, 1));
    assert_eq!(d.statuses(), [Status::Failed, Status::Cancelling]);
    assert_eq!(
        d.writes(),
        [stop(&d, "g-trainer-0-0"), stop(&d, "g-buffer-0-0")]
    );
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.statuses(), [Status::Failed, Status::Cancelled]);
    assert_eq!(d.engine.group_status(), Status::Failed);
    assert_eq!(
        d.writes(),
        [format!(
            "PATCH {J}/g-trainer-0-0 {{\"spec\":{{\"activeDeadlineSeconds\":1}}}} uid={}",
            d.uid("jobs", "g-trainer-0-0")
        )]
    );
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(
        d.fake.world().get("jobsets", "g").unwrap()["status"]["terminalState"],
        "Failed"
    );
    assert!(d.writes().is_empty());
    assert!(d.settled());
}

#[test]
fn an_auxiliary_exhausting_its_budget_does_not_stop_the_others() {
    let mut d = running(
        "\
name: g
execution: parallel
primary_tasks: [trainer]
---
name: trainer
run: train
---
name: buffer
resources:
  job_recovery:
    max_restarts_on_errors: 1
run: serve
",
    );
    for attempt in 0..2 {
        let pod = d.fake.world().pod_of("g-buffer-0-0");
        d.cluster(|w| {
            w.exit(&pod, 2);
            w.job_controller();
        });
        if attempt == 0 {
            assert_eq!(d.writes(), [delete(&d, "g-buffer-0-0")]);
            recreated(&mut d, &["g-buffer-0-0"], 1);
        }
    }
    // Spent: the buffer fails and its Job stops; the trainer runs on.
    assert_eq!(d.statuses(), [Status::Running, Status::Failed]);
    assert_eq!(d.writes(), [stop(&d, "g-buffer-0-0")]);
    d.cluster(|w| w.reconcile_cluster());
    assert!(d.writes().is_empty());
    assert_eq!(d.engine.group_status(), Status::Running);
    let pod = d.fake.world().pod_of("g-trainer-0-0");
    d.cluster(|w| {
        w.exit(&pod, 0);
        w.reconcile_cluster();
    });
    // The group is SkyPilot's: its primaries'.
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Failed]);
    assert!(d.writes().is_empty());
    assert!(d.settled());
}

#[test]
fn a_disrupted_pod_restarts_every_node_of_its_task_for_free() {
    let mut d = running(
        "\
name: g
execution: parallel
primary_tasks: [trainer]
---
name: trainer
num_nodes: 2
run: train
---
name: buffer
run: serve
",
    );
    let pod = d.fake.world().pod_of("g-trainer-1-0");
    d.cluster(|w| w.disrupt(&pod, "PreemptionByScheduler"));
    assert_eq!(d.statuses()[0], Status::Recovering);
    // The attempt stops: both nodes, the healthy one with SIGTERM.
    assert_eq!(
        d.writes(),
        [stop(&d, "g-trainer-0-0"), stop(&d, "g-trainer-1-0")]
    );
    d.cluster(|w| w.reconcile_cluster());
    // Both gone: both Jobs are deleted, and made again.
    assert_eq!(
        d.writes(),
        [delete(&d, "g-trainer-0-0"), delete(&d, "g-trainer-1-0")]
    );
    recreated(&mut d, &["g-trainer-0-0", "g-trainer-1-0"], 1);
    assert_eq!(d.statuses(), [Status::Running, Status::Running]);
    assert_eq!(d.engine.restarts(0), (1, 0));
    assert_eq!(d.engine.restarts(1), (0, 0));
}

#[test]
fn a_failed_primary_stops_the_auxiliaries_at_once() {
    let mut d = running(DELAYED);
    let pod = d.fake.world().pod_of("g-trainer-0-0");
    d.cluster(|w| w.exit(&pod, 1));
    // No delay: the buffer stops now, the trainer's Job too (so the Job
    // controller's replacement never runs).
    assert_eq!(d.statuses(), [Status::Failed, Status::Cancelling]);
    assert!(!d.timers.iter().any(|t| t.0 == Timer::AuxiliaryDelay(1)));
    assert_eq!(
        d.writes(),
        [stop(&d, "g-trainer-0-0"), stop(&d, "g-buffer-0-0")]
    );
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.engine.group_status(), Status::Failed);
    assert_eq!(
        d.writes(),
        [format!(
            "PATCH {J}/g-trainer-0-0 {{\"spec\":{{\"activeDeadlineSeconds\":1}}}} uid={}",
            d.uid("jobs", "g-trainer-0-0")
        )]
    );
    d.cluster(|w| w.reconcile_cluster());
    assert!(d.settled());
    // JobSet ended the Jobs still active (the gate's).
    assert!(d.fake.world().get("jobs", "g-skyc-gate-0").is_none());
}

#[test]
fn cancel_deletes_the_jobset_and_waits_for_its_pods() {
    let mut d = running(DELAYED);
    let js = d.uid("jobsets", "g");
    d.cancel();
    assert_eq!(d.writes(), [format!("DELETE {JS}/g Foreground uid={js}")]);
    assert_eq!(d.statuses(), [Status::Cancelling, Status::Cancelling]);
    // The grace passes before the pods are gone: they are killed.
    let timer = Timer::Kill {
        task: 0,
        attempt: 0,
    };
    let (trainer, buffer) = {
        let w = d.fake.world();
        (w.pod_of("g-trainer-0-0"), w.pod_of("g-buffer-0-0"))
    };
    d.fire(timer);
    assert_eq!(
        d.writes(),
        [format!(
            "DELETE {P}/{trainer} grace=0 uid={}",
            d.uid("pods", &trainer)
        )]
    );
    assert!(!d.settled());
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.statuses(), [Status::Cancelled, Status::Cancelled]);
    assert_eq!(d.engine.group_status(), Status::Cancelled);
    assert!(d.fake.world().get("pods", &buffer).is_none());
    assert!(d.fake.world().get("jobsets", "g").is_none());
    assert!(d.writes().is_empty());
    assert!(d.settled());
}

#[test]
fn a_watch_that_is_gone_lists_again_and_misses_nothing() {
    let mut d = running(DELAYED);
    let pod = d.fake.world().pod_of("g-trainer-0-0");
    let before = d.fake.world().requests.len();
    // The pod watch ends with 410 Gone, and the trainer ends while no
    // watch is open.
    d.cluster(|w| {
        w.expire_watches("pods");
        w.exit(&pod, 0);
    });
    let after: Vec<String> = d.fake.world().requests[before..]
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        after,
        [format!("GET {P}"), format!("GET {P}")],
        "a list, then a watch"
    );
    let watch = d.fake.world().requests.last().unwrap().query.clone();
    assert!(watch.contains("watch=true"), "{watch}");
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Running]);
}

#[test]
fn a_supervisor_killed_during_the_delay_carries_on_without_repeating() {
    let mut d = running(DELAYED);
    let pod = d.fake.world().pod_of("g-trainer-0-0");
    d.cluster(|w| {
        w.exit(&pod, 0);
        w.reconcile_cluster();
    });
    assert!(d.timers.iter().any(|t| t.0 == Timer::AuxiliaryDelay(1)));
    let engine = d.engine.clone();
    d.kill_supervisor();
    d.restart_supervisor();
    // The new backend finds this run's JobSet: no apply, no request that
    // was made already; the trainer's end is reported again and ignored.
    assert_eq!(d.writes(), [RULES]);
    assert_eq!(d.engine, engine);
    d.fire(Timer::AuxiliaryDelay(1));
    assert_eq!(d.writes(), [stop(&d, "g-buffer-0-0")]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert_eq!(d.writes().len(), 1, "the gate opens once");
}

#[test]
fn a_supervisor_killed_during_a_restart_restarts_once() {
    let mut d = running(&recovering("    max_restarts_on_errors: 2"));
    let exits = |d: &Driver| {
        d.reports
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
            .count()
    };
    // Killed before the failure was recorded: the next supervisor reads
    // it from the cluster, and restarts.
    d.kill_supervisor();
    let pod = d.fake.world().pod_of("g-trainer-0-0");
    d.cluster(|w| w.exit(&pod, 1));
    d.restart_supervisor();
    assert_eq!(d.writes(), [RULES.to_owned(), delete(&d, "g-trainer-0-0")]);
    assert_eq!(d.engine.restarts(0), (1, 1));
    recreated(&mut d, &["g-trainer-0-0"], 1);
    // Killed after the second restart was recorded, before it was carried
    // out: the next supervisor carries it out from the engine's state,
    // once, and does not count the failure again.
    let pod = d.fake.world().pod_of("g-trainer-0-0");
    d.dies_before_executing = true;
    d.cluster(|w| w.exit(&pod, 1));
    assert_eq!(d.engine.restarts(0), (2, 2));
    assert!(d.writes().is_empty());
    d.kill_supervisor();
    d.restart_supervisor();
    assert_eq!(d.writes(), [RULES.to_owned(), delete(&d, "g-trainer-0-0")]);
    assert_eq!(d.engine.restarts(0), (2, 2));
    // Killed after the delete, before the new Job was bound: the new
    // incarnation is bound to the current attempt, not deleted again.
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.writes(), [bind(&d, "g-trainer-0-0", 2)]);
    d.kill_supervisor();
    d.cluster(|w| {
        w.remove("jobs", "g-trainer-0-0");
        w.reconcile_cluster();
    });
    d.restart_supervisor();
    assert_eq!(d.writes(), [RULES.to_owned(), bind(&d, "g-trainer-0-0", 2)]);
    d.cluster(|w| w.run_pending());
    assert_eq!(d.statuses()[0], Status::Running);
    assert_eq!(d.engine.restarts(0), (2, 2));
    assert_eq!(exits(&d), 2, "each failure told once");
}

#[test]
fn api_errors_are_retried_with_backoff() {
    let mut d = Driver::start_with(
        {
            let fake = fake::Fake::default();
            {
                let mut w = fake.world();
                w.fail("POST", "selfsubjectrulesreviews", Some(503), 1);
                w.fail("PATCH", "/configmaps/", Some(429), 1);
                w.fail("PATCH", "/jobsets/", Some(409), 1);
            }
            fake
        },
        driver::plan(DELAYED),
        driver::tuning(),
    );
    let cm = format!("PATCH {CM}/g-skyc apply ConfigMap g-skyc manager=skyc");
    let js = format!("PATCH {JS}/g apply JobSet g manager=skyc");
    // Each failure starts the adoption again from its first check (all
    // of it is idempotent), after a backoff.
    assert_eq!(
        d.writes(),
        [
            RULES.to_owned(),
            RULES.to_owned(),
            cm.clone(),
            RULES.to_owned(),
            cm.clone(),
            js.clone(),
            RULES.to_owned(),
            cm,
            js
        ]
    );
    d.cluster(|w| {
        w.fail("PATCH", "/jobs/g-trainer-0-0", Some(500), 2);
        w.reconcile_cluster();
    });
    let b = bind(&d, "g-trainer-0-0", 0);
    assert_eq!(
        d.writes(),
        [b.clone(), b.clone(), b, bind(&d, "g-buffer-0-0", 0)]
    );
    d.cluster(|w| w.run_pending());
    assert_eq!(d.statuses(), [Status::Running, Status::Running]);
}

#[test]
fn an_api_server_that_stops_answering_is_an_outage_until_it_answers() {
    let mut d = running(DELAYED);
    let pod = d.fake.world().pod_of("g-trainer-0-0");
    d.cluster(|w| {
        w.down = true;
        w.close_watches();
    });
    let outage = d.reports.iter().rev().find_map(|r| match r {
        Report::Outage(o) => Some(o.clone()),
        _ => None,
    });
    let message = outage.flatten().expect("an outage is reported");
    assert!(message.contains("https://api.test:6443"), "{message}");
    // Statuses stay as they were.
    assert_eq!(d.statuses(), [Status::Running, Status::Running]);
    // The trainer ends meanwhile; the server answers again.
    d.cluster(|w| {
        w.exit(&pod, 0);
        w.down = false;
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    d.settle();
    assert_eq!(
        d.reports
            .iter()
            .rev()
            .find(|r| matches!(r, Report::Outage(_))),
        Some(&Report::Outage(None))
    );
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Running]);
}
