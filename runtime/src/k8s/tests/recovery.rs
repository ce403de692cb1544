//! Scenarios of recovery, failure, cancel and the supervisor's crashes.
//! Each asserts the exact pods that ran: one per node per attempt the
//! engine decided, and no other.

use super::*;

/// One task with a recovery policy, and an auxiliary beside it.
fn recovering(policy: &str) -> String {
    recovering_on(1, policy)
}

/// One task of `nodes` nodes with a recovery policy, and an auxiliary
/// beside it.
fn recovering_on(nodes: u32, policy: &str) -> String {
    format!(
        "\
name: g
execution: parallel
primary_tasks: [trainer]
---
name: trainer
num_nodes: {nodes}
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

/// The pods on the cluster now, sorted.
pub(super) fn pods_now(d: &Driver) -> Vec<String> {
    let mut pods = d.fake.world().names("pods");
    pods.sort();
    pods
}

#[test]
fn a_listed_exit_code_restarts_without_using_the_budget() {
    let mut d = running(&recovering(
        "    max_restarts_on_errors: 0\n    recover_on_exit_codes: [33]",
    ));
    d.cluster(|w| w.exit(&pod("trainer", 0, 0), 33));
    // The ended pod of the old attempt is deleted (its hostname is
    // freed) before the new attempt's pod is made.
    assert_eq!(d.writes(), [stop(&d, "g-trainer-0-0")]);
    assert_eq!(d.statuses()[0], Status::Recovering);
    relaunched(&mut d, 0, "trainer", 1, 1);
    assert_eq!(d.statuses()[0], Status::Running);
    assert_eq!(d.engine.restarts(0), (1, 0));
    d.cluster(|w| w.exit(&pod("trainer", 0, 1), 0));
    // The buffer (no delay) stops at once; then the gate opens.
    assert_eq!(d.writes(), [stop(&d, "g-buffer-0-0")]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Cancelled]);
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert_eq!(d.writes(), [open_gate(&d)]);
    completes(&mut d);
    assert_eq!(
        created(&d),
        ["g-buffer-0-0", "g-trainer-0-0", "g-trainer-0-1"]
    );
}

/// Issue 19: a listed exit code three times, then success: the node ran
/// exactly four times, one pod each.
#[test]
fn a_listed_exit_code_three_times_then_success_runs_four_pods() {
    let mut d = running(&recovering(
        "    max_restarts_on_errors: 0\n    recover_on_exit_codes: [29]",
    ));
    for attempt in 0..3 {
        let p = pod("trainer", 0, attempt);
        // The Job controller (of the gate, the only Job) makes nothing.
        d.cluster(|w| {
            w.exit(&p, 29);
            w.job_controller();
        });
        assert_eq!(d.writes(), [stop(&d, &p)]);
        relaunched(&mut d, 0, "trainer", 1, attempt + 1);
        assert_eq!(d.engine.restarts(0), (attempt + 1, 0));
    }
    d.cluster(|w| w.exit(&pod("trainer", 0, 3), 0));
    assert_eq!(d.writes(), [stop(&d, "g-buffer-0-0")]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert_eq!(d.writes(), [open_gate(&d)]);
    completes(&mut d);
    assert_eq!(
        created(&d),
        [
            "g-buffer-0-0",
            "g-trainer-0-0",
            "g-trainer-0-1",
            "g-trainer-0-2",
            "g-trainer-0-3"
        ]
    );
}

#[test]
fn a_user_failure_within_the_budget_restarts_the_task() {
    let mut d = running(&recovering("    max_restarts_on_errors: 1"));
    // No controller replaces the failed pod: only the engine's restart
    // makes a new one, and the failure counts once.
    d.cluster(|w| {
        w.exit(&pod("trainer", 0, 0), 1);
        w.reconcile_cluster();
    });
    assert_eq!(d.writes(), [stop(&d, "g-trainer-0-0")]);
    relaunched(&mut d, 0, "trainer", 1, 1);
    assert_eq!(d.engine.restarts(0), (1, 1));
    assert_eq!(d.statuses(), [Status::Running, Status::Running]);
    // A second failure: the budget is spent, the task fails (its pod has
    // ended: nothing to stop), the buffer stops at once, and the JobSet
    // is failed on purpose through the gate.
    d.cluster(|w| w.exit(&pod("trainer", 0, 1), 1));
    assert_eq!(d.statuses(), [Status::Failed, Status::Cancelling]);
    assert_eq!(d.writes(), [stop(&d, "g-buffer-0-0")]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.statuses(), [Status::Failed, Status::Cancelled]);
    assert_eq!(d.engine.group_status(), Status::Failed);
    assert_eq!(d.writes(), [fail_gate(&d)]);
    fails(&mut d);
    assert_eq!(d.engine.restarts(0), (1, 1));
    assert_eq!(
        created(&d),
        ["g-buffer-0-0", "g-trainer-0-0", "g-trainer-0-1"]
    );
}

/// Issue 19: a counted failure of one node of a two-node task restarts
/// the task as a whole, with exactly one new pod per node.
#[test]
fn a_counted_failure_restarts_with_one_new_pod_per_node() {
    let mut d = running(&recovering_on(2, "    max_restarts_on_errors: 1"));
    d.cluster(|w| {
        w.exit(&pod("trainer", 1, 0), 1);
        w.reconcile_cluster();
    });
    // The attempt stops: its healthy node gets SIGTERM.
    assert_eq!(d.writes(), [stop(&d, "g-trainer-0-0")]);
    assert_eq!(d.statuses()[0], Status::Recovering);
    // Once it has ended, the task restarts: the failed pod goes too (its
    // hostname is freed), then the new attempt is launched.
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.writes(), [stop(&d, "g-trainer-1-0")]);
    assert_eq!(d.engine.restarts(0), (1, 1));
    relaunched(&mut d, 0, "trainer", 2, 1);
    assert_eq!(d.statuses(), [Status::Running, Status::Running]);
    // The peer's SIGTERM (143) is the old attempt's: not a failure.
    assert_eq!(d.engine.restarts(0), (1, 1));
    assert_eq!(
        created(&d),
        [
            "g-buffer-0-0",
            "g-trainer-0-0",
            "g-trainer-0-1",
            "g-trainer-1-0",
            "g-trainer-1-1"
        ]
    );
    assert_eq!(
        pods_now(&d),
        ["g-buffer-0-0", "g-trainer-0-1", "g-trainer-1-1"]
    );
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
    d.cluster(|w| {
        w.exit(&pod("buffer", 0, 0), 2);
        w.reconcile_cluster();
    });
    assert_eq!(d.writes(), [stop(&d, "g-buffer-0-0")]);
    relaunched(&mut d, 1, "buffer", 1, 1);
    d.cluster(|w| {
        w.exit(&pod("buffer", 0, 1), 2);
        w.reconcile_cluster();
    });
    // Spent: the buffer fails (its pod has ended, nothing to stop); the
    // trainer runs on.
    assert_eq!(d.statuses(), [Status::Running, Status::Failed]);
    assert!(d.writes().is_empty());
    assert_eq!(d.engine.group_status(), Status::Running);
    d.cluster(|w| {
        w.exit(&pod("trainer", 0, 0), 0);
        w.reconcile_cluster();
    });
    // The group is SkyPilot's: its primaries'.
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Failed]);
    assert_eq!(d.writes(), [open_gate(&d)]);
    completes(&mut d);
    assert_eq!(
        created(&d),
        ["g-buffer-0-0", "g-buffer-0-1", "g-trainer-0-0"]
    );
}

const TWO_NODES: &str = "\
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
";

#[test]
fn a_disrupted_pod_restarts_every_node_of_its_task_for_free() {
    let mut d = running(TWO_NODES);
    d.cluster(|w| w.disrupt(&pod("trainer", 1, 0), "PreemptionByScheduler"));
    assert_eq!(d.statuses()[0], Status::Recovering);
    // The attempt stops: the healthy node with SIGTERM (the disrupted
    // one is being deleted already).
    assert_eq!(d.writes(), [stop(&d, "g-trainer-0-0")]);
    // Both gone: the new attempt's two pods.
    relaunched(&mut d, 0, "trainer", 2, 1);
    assert_eq!(d.statuses(), [Status::Running, Status::Running]);
    assert_eq!(d.engine.restarts(0), (1, 0));
    assert_eq!(d.engine.restarts(1), (0, 0));
    assert_eq!(
        created(&d),
        [
            "g-buffer-0-0",
            "g-trainer-0-0",
            "g-trainer-0-1",
            "g-trainer-1-0",
            "g-trainer-1-1"
        ]
    );
}

/// Issue 19: one node of a two-node task is taken away: the whole task
/// restarts once, with exactly two new pods; the other task's pod is
/// never touched.
#[test]
fn a_disruption_of_one_node_restarts_its_task_once_and_nothing_else() {
    let mut d = running(TWO_NODES);
    let buffer = d.uid("pods", "g-buffer-0-0");
    d.cluster(|w| {
        w.disrupt(&pod("trainer", 0, 0), "EvictionByEvictionAPI");
        w.reconcile_cluster();
    });
    assert_eq!(d.writes(), [stop(&d, "g-trainer-1-0")]);
    relaunched(&mut d, 0, "trainer", 2, 1);
    // The old pods' ends (143) are the old attempt's: no second restart.
    d.cluster(|w| w.reconcile_cluster());
    assert!(d.writes().is_empty());
    assert_eq!(d.statuses(), [Status::Running, Status::Running]);
    assert_eq!(d.engine.restarts(0), (1, 0));
    assert_eq!(d.engine.restarts(1), (0, 0));
    assert_eq!(d.uid("pods", "g-buffer-0-0"), buffer);
    assert_eq!(
        d.fake.world().get("pods", "g-buffer-0-0").unwrap()["status"]["phase"],
        "Running"
    );
    assert_eq!(
        created(&d),
        [
            "g-buffer-0-0",
            "g-trainer-0-0",
            "g-trainer-0-1",
            "g-trainer-1-0",
            "g-trainer-1-1"
        ]
    );
    assert_eq!(
        pods_now(&d),
        ["g-buffer-0-0", "g-trainer-0-1", "g-trainer-1-1"]
    );
}

/// A node that no longer answers: its pod is evicted but stays
/// `Terminating`, holding its hostname. Past its grace (and the
/// runtime's patience) it is deleted at once, and only then does the
/// task's next attempt start.
#[test]
fn a_pod_stuck_terminating_on_a_lost_node_is_deleted_at_once_then_the_task_restarts() {
    let fake = super::fake::Fake::default();
    let mut plan = super::driver::plan(TWO_NODES);
    plan.spec.grace = std::time::Duration::from_millis(100);
    let mut tuning = super::driver::tuning();
    tuning.force_after = std::time::Duration::from_millis(1500);
    let mut d = Driver::start_with(fake, plan, tuning);
    d.writes();
    d.cluster(|w| {
        w.reconcile_cluster();
        w.run_pending();
    });
    let lost = pod("trainer", 0, 0);
    d.cluster(|w| {
        w.unreachable.insert(lost.clone());
        w.disrupt(&lost, "DeletionByTaintManager");
        w.reconcile_cluster();
    });
    assert_eq!(d.writes(), [stop(&d, "g-trainer-1-0")]);
    d.cluster(|w| w.reconcile_cluster());
    // The lost pod is still there: no new attempt yet.
    assert!(d.writes().is_empty());
    assert!(d.fake.world().get("pods", &lost).is_some());
    std::thread::sleep(std::time::Duration::from_millis(2000));
    d.settle();
    let writes = d.writes();
    assert!(
        writes[0].starts_with(&format!("DELETE {P}/{lost} grace=0 uid=")),
        "{writes:?}"
    );
    assert_eq!(writes[1..], launched(&d, 0, "trainer", 2, 1)[..]);
    assert_eq!(d.engine.restarts(0), (1, 0));
    assert_eq!(
        created(&d),
        [
            "g-buffer-0-0",
            "g-trainer-0-0",
            "g-trainer-0-1",
            "g-trainer-1-0",
            "g-trainer-1-1"
        ]
    );
}

#[test]
fn a_failed_primary_stops_the_auxiliaries_at_once() {
    let mut d = running(DELAYED);
    d.cluster(|w| w.exit(&pod("trainer", 0, 0), 1));
    // No delay: the buffer stops now; the trainer's pod has ended, and
    // nothing makes another.
    assert_eq!(d.statuses(), [Status::Failed, Status::Cancelling]);
    assert!(!d.timers.iter().any(|t| t.0 == Timer::AuxiliaryDelay(1)));
    assert_eq!(d.writes(), [stop(&d, "g-buffer-0-0")]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.engine.group_status(), Status::Failed);
    assert_eq!(d.writes(), [fail_gate(&d)]);
    fails(&mut d);
    assert_eq!(created(&d), ["g-buffer-0-0", "g-trainer-0-0"]);
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
    let (trainer, buffer) = (pod("trainer", 0, 0), pod("buffer", 0, 0));
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
    assert_eq!(created(&d), ["g-buffer-0-0", "g-trainer-0-0"]);
    assert_eq!(
        d.fake.world().everything(),
        Vec::<String>::new(),
        "the ConfigMap and the Service went with the JobSet"
    );
}

#[test]
fn a_watch_that_is_gone_lists_again_and_misses_nothing() {
    let mut d = running(DELAYED);
    let pod = pod("trainer", 0, 0);
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
    assert_eq!(created(&d), ["g-buffer-0-0", "g-trainer-0-0"]);
}

#[test]
fn a_supervisor_killed_during_the_delay_carries_on_without_repeating() {
    let mut d = running(DELAYED);
    d.cluster(|w| {
        w.exit(&pod("trainer", 0, 0), 0);
        w.reconcile_cluster();
    });
    assert!(d.timers.iter().any(|t| t.0 == Timer::AuxiliaryDelay(1)));
    let engine = d.engine.clone();
    d.kill_supervisor();
    d.restart_supervisor();
    // The new backend finds this run's JobSet: no apply, no request that
    // was made already (no launch: both attempts are recorded); the
    // trainer's end is reported again and ignored.
    assert_eq!(d.writes(), [RULES]);
    assert_eq!(d.engine, engine);
    d.fire(Timer::AuxiliaryDelay(1));
    assert_eq!(d.writes(), [stop(&d, "g-buffer-0-0")]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert_eq!(d.writes(), [open_gate(&d)], "the gate opens once");
    completes(&mut d);
    assert_eq!(created(&d), ["g-buffer-0-0", "g-trainer-0-0"]);
}

/// How many times the engine was told of a failure of the trainer.
fn failures(d: &Driver) -> usize {
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
}

#[test]
fn a_supervisor_killed_during_a_restart_restarts_once() {
    let mut d = running(&recovering("    max_restarts_on_errors: 2"));
    // Killed before the failure was recorded: the next supervisor reads
    // it from the cluster, and restarts.
    d.kill_supervisor();
    d.cluster(|w| w.exit(&pod("trainer", 0, 0), 1));
    d.restart_supervisor();
    assert_eq!(d.writes(), [RULES.to_owned(), stop(&d, "g-trainer-0-0")]);
    assert_eq!(d.engine.restarts(0), (1, 1));
    // Killed after the old pod's delete, before the launch: the next
    // supervisor launches the attempt the engine decided, once.
    d.kill_supervisor();
    d.cluster(|w| w.reconcile_cluster());
    assert!(d.fake.world().get("pods", "g-trainer-0-0").is_none());
    d.restart_supervisor();
    let mut want = vec![RULES.to_owned()];
    want.extend(launched(&d, 0, "trainer", 1, 1));
    assert_eq!(d.writes(), want);
    d.cluster(|w| w.run_pending());
    assert!(d.writes().is_empty());
    assert_eq!(d.statuses()[0], Status::Running);
    // Killed after the second restart was recorded, before it was carried
    // out: the next supervisor carries it out from the engine's state,
    // once, and does not count the failure again.
    d.dies_before_executing = true;
    d.cluster(|w| w.exit(&pod("trainer", 0, 1), 1));
    assert_eq!(d.engine.restarts(0), (2, 2));
    assert!(d.writes().is_empty());
    d.kill_supervisor();
    d.restart_supervisor();
    assert_eq!(d.writes(), [RULES.to_owned(), stop(&d, "g-trainer-0-1")]);
    assert_eq!(d.engine.restarts(0), (2, 2));
    // Killed after the launch was recorded, before its pod was made: the
    // pod is never made late; it is read as lost, and the task restarts
    // for free with a new attempt.
    d.kill_supervisor();
    d.cluster(|w| {
        w.reconcile_cluster();
        w.update("jobsets", "g", |js| {
            js["metadata"]["annotations"]["skyc.io/launched-0"] = serde_json::json!("2");
        });
    });
    d.restart_supervisor();
    let mut want = vec![RULES.to_owned()];
    want.extend(launched(&d, 0, "trainer", 1, 3));
    assert_eq!(d.writes(), want);
    d.cluster(|w| w.run_pending());
    assert!(d.writes().is_empty());
    assert_eq!(d.statuses()[0], Status::Running);
    assert_eq!(d.engine.restarts(0), (3, 2));
    assert_eq!(failures(&d), 2, "each failure told once");
    assert_eq!(
        created(&d),
        [
            "g-buffer-0-0",
            "g-trainer-0-0",
            "g-trainer-0-1",
            "g-trainer-0-3"
        ]
    );
}

/// Issue 19: a pod fails while the supervisor is down for longer than
/// any Job backoff, the cluster's controllers running all along: no pod
/// is made meanwhile; the next supervisor counts the failure once and
/// makes exactly one new pod per node.
#[test]
fn a_failure_while_the_supervisor_is_down_is_counted_once() {
    let mut d = running(&recovering_on(2, "    max_restarts_on_errors: 1"));
    d.kill_supervisor();
    d.cluster(|w| w.exit(&pod("trainer", 0, 0), 1));
    let before = pods_now(&d);
    for _ in 0..5 {
        d.cluster(|w| w.reconcile_cluster());
    }
    assert_eq!(pods_now(&d), before, "no controller makes a pod");
    assert_eq!(
        created(&d),
        ["g-buffer-0-0", "g-trainer-0-0", "g-trainer-1-0"]
    );
    assert!(d.writes().is_empty());
    d.restart_supervisor();
    // The failure is read from the cluster: the attempt stops (the
    // healthy node gets SIGTERM), and once it has ended the task restarts
    // (the failed pod goes too).
    assert_eq!(d.writes(), [RULES.to_owned(), stop(&d, "g-trainer-1-0")]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.writes(), [stop(&d, "g-trainer-0-0")]);
    assert_eq!(d.engine.restarts(0), (1, 1));
    relaunched(&mut d, 0, "trainer", 2, 1);
    d.cluster(|w| w.reconcile_cluster());
    assert!(d.writes().is_empty());
    assert_eq!(d.statuses(), [Status::Running, Status::Running]);
    assert_eq!(d.engine.restarts(0), (1, 1));
    assert_eq!(failures(&d), 1, "the failure told once");
    assert_eq!(
        created(&d),
        [
            "g-buffer-0-0",
            "g-trainer-0-0",
            "g-trainer-0-1",
            "g-trainer-1-0",
            "g-trainer-1-1"
        ]
    );
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
                // The trainer's first pod, twice.
                w.fail("POST", "/pods", Some(503), 2);
            }
            fake
        },
        driver::plan(DELAYED),
        driver::tuning(),
    );
    let cm = format!("PATCH {CM}/g-skyc apply ConfigMap g-skyc manager=skyc");
    let js = format!("PATCH {JS}/g apply JobSet g manager=skyc");
    // Each failure starts the adoption again from its first check (all
    // of it is idempotent), after a backoff; a pod's create is retried
    // by itself.
    let post = format!("POST {P} Pod");
    // The JobSet first, then the ConfigMap it owns: the ConfigMap's
    // failure finds the JobSet there at the next check, and only the
    // ConfigMap is applied.
    let mut want = vec![
        RULES.to_owned(),
        RULES.to_owned(),
        js.clone(),
        RULES.to_owned(),
        js,
        cm.clone(),
        RULES.to_owned(),
        cm,
        launch(&d, 0, 0),
        post.clone(),
        post.clone(),
        post,
    ];
    want.extend(launched(&d, 1, "buffer", 1, 0));
    assert_eq!(d.writes(), want);
    d.cluster(|w| w.reconcile_cluster());
    assert!(d.writes().is_empty());
    d.cluster(|w| w.run_pending());
    assert_eq!(d.statuses(), [Status::Running, Status::Running]);
    // The failed creates made no pod: one pod per node.
    assert_eq!(pods_now(&d), ["g-buffer-0-0", "g-trainer-0-0"]);
    let mut made = created(&d);
    made.dedup();
    assert_eq!(made, ["g-buffer-0-0", "g-trainer-0-0"]);
}

#[test]
fn an_api_server_that_stops_answering_is_an_outage_until_it_answers() {
    let mut d = running(DELAYED);
    let pod = pod("trainer", 0, 0);
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
    assert_eq!(created(&d), ["g-buffer-0-0", "g-trainer-0-0"]);
}

/// The API server refuses the pods for good (a quota, an admission
/// policy): the task fails its setup once, and is never launched again.
#[test]
fn a_pod_the_api_server_refuses_fails_its_task_setup_once() {
    let fake = super::fake::Fake::default();
    fake.world().fail("POST", "/pods", Some(403), 1);
    let mut d = Driver::start_with(fake, super::driver::plan(DELAYED), super::driver::tuning());
    d.settle();
    // The buffer is stopped at once (its primary failed).
    d.cluster(|w| {
        w.run_pending();
        w.reconcile_cluster();
    });
    assert_eq!(d.statuses(), [Status::FailedSetup, Status::Cancelled]);
    assert_eq!(d.engine.group_status(), Status::FailedSetup);
    assert_eq!(d.engine.restarts(0), (0, 0));
    assert!(
        d.reports
            .iter()
            .any(|r| matches!(r, Report::Error(m) if m.contains("launching attempt 0 of task 0"))),
        "{:?}",
        d.reports
    );
    let launches = d
        .writes()
        .iter()
        .filter(|w| w.contains("skyc.io/launched-0"))
        .count();
    assert_eq!(launches, 1, "launched once");
    assert_eq!(created(&d), ["g-buffer-0-0"]);
}

/// A pod of an earlier run of the group, still going away, holds the
/// name of this run's first pod: it is neither read nor taken for this
/// run's, and this run's pod is made once it is gone.
#[test]
fn a_pod_of_an_earlier_run_is_not_taken_for_this_runs() {
    let fake = super::fake::Fake::default();
    fake.world().put(
        "pods",
        serde_json::json!({
            "metadata": {"name": "g-trainer-0-0", "labels": {"skyc.io/group": "g",
                "skyc.io/task": "trainer", "skyc.io/node-index": "0", "skyc.io/attempt": "0"},
                "annotations": {"skyc.io/run": "run-0"}},
            "spec": {"containers": []},
            "status": {"phase": "Succeeded"},
        }),
    );
    let mut d = Driver::start_with(fake, super::driver::plan(DELAYED), super::driver::tuning());
    // The earlier run's Succeeded pod is not this run's end.
    assert_ne!(d.statuses()[0], Status::Succeeded);
    d.cluster(|w| {
        w.remove("pods", "g-trainer-0-0");
        w.reconcile_cluster();
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    d.settle();
    d.cluster(|w| w.run_pending());
    assert_eq!(d.statuses(), [Status::Running, Status::Running]);
    // This run's pod (of its first attempt, or, when the earlier one
    // outlasted the creation's tries, of a free second one).
    let attempt = d.engine.attempt(0);
    let mine = d
        .fake
        .world()
        .get("pods", &pod("trainer", 0, attempt))
        .cloned();
    assert_eq!(
        mine.unwrap()["metadata"]["annotations"]["skyc.io/run"],
        "run-1"
    );
    assert_eq!(d.engine.restarts(0).1, 0, "no budget used");
}
