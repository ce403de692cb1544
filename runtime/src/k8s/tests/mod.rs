//! Scripted-API scenarios: the Kubernetes backend on its own thread,
//! talking to a fake API server through kube's client, with the engine
//! around it as the supervisor runs it. Each step changes the cluster as
//! its controllers would, and the test asserts the exact write requests
//! the backend made (method, path, the body's essentials) and the
//! engine's statuses.

mod controllers;
mod driver;
mod fake;

use crate::backend::Report;
use crate::policy::{Event, Status, Timer};
use driver::Driver;

const J: &str = "/apis/batch/v1/namespaces/team/jobs";
const JS: &str = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team/jobsets";
const P: &str = "/api/v1/namespaces/team/pods";
const CM: &str = "/api/v1/namespaces/team/configmaps";
const RULES: &str = "POST /apis/authorization.k8s.io/v1/selfsubjectrulesreviews SelfSubjectRulesReview";

/// A primary and an auxiliary that outlives it by 30 s.
const DELAYED: &str = "\
name: g
execution: parallel
primary_tasks: [trainer]
termination_delay: 30s
---
name: trainer
run: echo train
---
name: buffer
run: sleep 1000
";

fn bind(d: &Driver, job: &str, attempt: u32) -> String {
    format!(
        "PATCH {J}/{job} {{\"metadata\":{{\"annotations\":{{\"skyc.io/attempt\":\"{attempt}\"}}}}}} uid={}",
        d.uid("jobs", job)
    )
}

fn stop(d: &Driver, job: &str) -> String {
    format!("PATCH {J}/{job} {{\"spec\":{{\"parallelism\":0}}}} uid={}", d.uid("jobs", job))
}

fn applied() -> Vec<String> {
    vec![
        RULES.to_owned(),
        format!("PATCH {CM}/g-skyc apply ConfigMap g-skyc manager=skyc"),
        format!("PATCH {JS}/g apply JobSet g manager=skyc"),
    ]
}

/// Applies, lets JobSet and Job make the pods, binds them, runs them.
fn running(yaml: &str) -> Driver {
    let mut d = Driver::start(yaml);
    assert_eq!(d.writes(), applied());
    d.cluster(|w| w.reconcile_cluster());
    let mut jobs: Vec<String> = d.fake.world().names("jobs");
    jobs.retain(|j| !j.contains("skyc-gate"));
    let mut expected: Vec<String> = d
        .plan
        .spec
        .tasks
        .iter()
        .flat_map(|t| (0..t.num_nodes).map(move |r| format!("g-{}-{r}-0", t.name)))
        .collect();
    let binds: Vec<String> = expected.iter().map(|j| bind(&d, j, 0)).collect();
    expected.sort();
    jobs.sort();
    assert_eq!(jobs, expected);
    assert_eq!(d.writes(), binds);
    d.cluster(|w| w.run_pending());
    assert!(d.writes().is_empty());
    assert!(d.statuses().iter().all(|s| *s == Status::Running), "{:?}", d.statuses());
    d
}

#[test]
fn a_clean_run_with_a_termination_delay() {
    let mut d = running(DELAYED);
    // The trainer ends well: the buffer gets its 30 s, counted from the
    // container's recorded end.
    let pod = d.fake.world().pod_of("g-trainer-0-0");
    d.cluster(|w| {
        w.exit(&pod, 0);
        w.reconcile_cluster();
    });
    assert!(d.writes().is_empty());
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Running]);
    assert!(d.timers.iter().any(|t| t.0 == Timer::AuxiliaryDelay(1)));
    let finished = d.fake.world().get("pods", &pod).unwrap()["status"]["containerStatuses"][0]
        ["state"]["terminated"]["finishedAt"]
        .as_str()
        .unwrap()
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_millisecond();
    assert!(d.event_times.iter().any(|(e, at)| matches!(
        e,
        Event::NodeExited { task: 0, code: 0, .. }
    ) && *at == Some(finished)));
    // The delay passes: the buffer's Job stops (SIGTERM through the pod's
    // deletion), then the gate opens and JobSet completes by itself.
    d.fire(Timer::AuxiliaryDelay(1));
    assert_eq!(d.writes(), [stop(&d, "g-buffer-0-0")]);
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Cancelling]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Cancelled]);
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert_eq!(
        d.writes(),
        [format!(
            "PATCH {J}/g-skyc-gate-0 {{\"spec\":{{\"parallelism\":1}}}} uid={}",
            d.uid("jobs", "g-skyc-gate-0")
        )]
    );
    assert!(!d.settled());
    d.cluster(|w| {
        w.reconcile_cluster();
        let gate = w.pod_of("g-skyc-gate-0");
        w.run(&gate);
        w.exit(&gate, 0);
        w.reconcile_cluster();
    });
    assert_eq!(
        d.fake.world().get("jobsets", "g").unwrap()["status"]["terminalState"],
        "Completed"
    );
    assert!(d.writes().is_empty());
    assert!(d.settled());
    assert!(d.reports.iter().any(|r| matches!(r, Report::Job(id) if id.starts_with("team/g uid-"))));
}
