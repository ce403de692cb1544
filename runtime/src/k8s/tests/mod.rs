//! Scripted-API scenarios: the Kubernetes backend on its own thread,
//! talking to a fake API server through kube's client, with the engine
//! around it as the supervisor runs it. Each step changes the cluster as
//! its controllers would, and the test asserts the exact write requests
//! the backend made (method, path, the body's essentials) and the
//! engine's statuses.

// The fake cluster, and the front that serves it to processes of their
// own, are built for the `fake-cluster` feature too (the command line's
// tests of a controller); the scenarios are tests only.
#![cfg_attr(not(test), allow(dead_code, unused_imports))]

#[cfg(test)]
mod buckets;
#[cfg(test)]
mod controller;
mod controllers;
mod driver;
mod exec;
mod fake;
#[cfg(test)]
mod files;
// Its server is the command line's tests' (the feature's).
#[cfg_attr(not(feature = "fake-cluster"), allow(dead_code, unreachable_pub))]
pub(super) mod front;
#[cfg(test)]
mod kubelet;
#[cfg(test)]
mod lease;
#[cfg(test)]
mod pipeline;
#[cfg(test)]
mod pool_jobs;
#[cfg(test)]
mod pools;
#[cfg(test)]
mod recovery;
#[cfg(test)]
mod refusals;
#[cfg(test)]
mod supervised;
#[cfg(test)]
mod supervised_pool;
#[cfg(test)]
mod units;
#[cfg(test)]
mod volumes;
#[cfg(test)]
mod ws_exec;

use crate::backend::Report;
use crate::policy::{Event, Status, Timer};
use driver::Driver;

const J: &str = "/apis/batch/v1/namespaces/team/jobs";
const JS: &str = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team/jobsets";
const P: &str = "/api/v1/namespaces/team/pods";
const CM: &str = "/api/v1/namespaces/team/configmaps";
const RULES: &str =
    "POST /apis/authorization.k8s.io/v1/selfsubjectrulesreviews SelfSubjectRulesReview";

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

/// The JobSet records that `attempt` of `task` is launched.
fn launch(d: &Driver, task: usize, attempt: u32) -> String {
    format!(
        "PATCH {JS}/g {{\"metadata\":{{\"annotations\":{{\"skyc.io/launched-{task}\":\"{attempt}\"}}}}}} uid={}",
        d.uid("jobsets", "g")
    )
}

/// The pod of `attempt` of node `rank` of `task`.
fn pod(task: &str, rank: u32, attempt: u32) -> String {
    format!("g-{task}-{rank}-{attempt}")
}

/// The requests that launch `attempt` of `task` (the `index`th) of
/// `nodes` nodes: the record, then one pod per node (created some at
/// once, so in any order).
fn launched(d: &Driver, index: usize, task: &str, nodes: u32, attempt: u32) -> Vec<String> {
    assert_eq!(d.plan.spec.tasks[index].name, task, "task {index}");
    let mut w = vec![launch(d, index, attempt)];
    w.extend((0..nodes).map(|_| format!("POST {P} Pod")));
    w
}

/// A pod deleted with its grace (SIGTERM first).
fn stop(d: &Driver, pod: &str) -> String {
    format!("DELETE {P}/{pod} uid={}", d.uid("pods", pod))
}

/// Every pod the runtime created, sorted: the pods that ran.
fn created(d: &Driver) -> Vec<String> {
    let mut pods = d.fake.world().created_pods();
    pods.sort();
    pods
}

const GATE: &str = "g-skyc-gate-0";

/// `parallelism: 1` on the gate: the group succeeded.
fn open_gate(d: &Driver) -> String {
    format!(
        "PATCH {J}/{GATE} {{\"spec\":{{\"parallelism\":1}}}} uid={}",
        d.uid("jobs", GATE)
    )
}

/// `activeDeadlineSeconds: 1` on the gate: the group ended otherwise.
fn fail_gate(d: &Driver) -> String {
    format!(
        "PATCH {J}/{GATE} {{\"spec\":{{\"activeDeadlineSeconds\":1}}}} uid={}",
        d.uid("jobs", GATE)
    )
}

/// The older attempt's pods are gone: the new attempt is launched, one
/// new pod per node, and they run.
fn relaunched(d: &mut Driver, index: usize, task: &str, nodes: u32, attempt: u32) {
    d.cluster(|w| w.reconcile_cluster());
    let want = launched(d, index, task, nodes, attempt);
    assert_eq!(d.writes(), want);
    d.cluster(|w| w.run_pending());
    assert!(d.writes().is_empty());
}

/// The gate is open: its pod runs and ends, and JobSet completes by
/// itself, with no more requests.
fn completes(d: &mut Driver) {
    d.cluster(|w| {
        w.reconcile_cluster();
        let gate = w.pod_of(GATE);
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
}

/// The gate was failed on purpose: its Job exceeds its deadline, and
/// JobSet fails by itself, with no more requests.
fn fails(d: &mut Driver) {
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(
        d.fake.world().get("jobsets", "g").unwrap()["status"]["terminalState"],
        "Failed"
    );
    assert!(d.writes().is_empty());
    assert!(d.settled());
}

fn applied() -> Vec<String> {
    vec![
        RULES.to_owned(),
        format!("PATCH {JS}/g apply JobSet g manager=skyc"),
        format!("PATCH {CM}/g-skyc apply ConfigMap g-skyc manager=skyc"),
    ]
}

/// Applies, lets JobSet make the gate, launches every task, runs the
/// pods.
fn running(yaml: &str) -> Driver {
    let mut d = Driver::start(yaml);
    let tasks: Vec<(String, u32)> = d
        .plan
        .spec
        .tasks
        .iter()
        .map(|t| (t.name.clone(), t.num_nodes))
        .collect();
    // Every task is launched as soon as the JobSet is applied.
    let mut expected = applied();
    for (i, (name, nodes)) in tasks.iter().enumerate() {
        expected.extend(launched(&d, i, name, *nodes, 0));
    }
    assert_eq!(d.writes(), expected);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.fake.world().names("jobs"), ["g-skyc-gate-0"]);
    assert!(d.writes().is_empty());
    let mut pods: Vec<String> = d.fake.world().names("pods");
    let mut want: Vec<String> = tasks
        .iter()
        .flat_map(|(name, n)| (0..*n).map(move |r| pod(name, r, 0)))
        .collect();
    pods.sort();
    want.sort();
    assert_eq!(pods, want);
    d.cluster(|w| w.run_pending());
    assert!(d.writes().is_empty());
    assert!(
        d.statuses().iter().all(|s| *s == Status::Running),
        "{:?}",
        d.statuses()
    );
    d
}

#[test]
fn a_clean_run_with_a_termination_delay() {
    let mut d = running(DELAYED);
    // The trainer ends well: the buffer gets its 30 s, counted from the
    // container's recorded end.
    let pod = pod("trainer", 0, 0);
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
        Event::NodeExited {
            task: 0,
            code: 0,
            ..
        }
    ) && *at == Some(finished)));
    // The delay passes: the buffer's pod is deleted (SIGTERM, then its
    // grace), then the gate opens and JobSet completes by itself.
    d.fire(Timer::AuxiliaryDelay(1));
    assert_eq!(d.writes(), [stop(&d, "g-buffer-0-0")]);
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Cancelling]);
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Cancelled]);
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert_eq!(d.writes(), [open_gate(&d)]);
    assert!(!d.settled());
    completes(&mut d);
    assert!(
        d.reports
            .iter()
            .any(|r| matches!(r, Report::Job(id) if id.starts_with("team/g uid-")))
    );
    // Each node ran once, in one pod.
    assert_eq!(created(&d), ["g-buffer-0-0", "g-trainer-0-0"]);
    // The finished JobSet stays, as the group's record, and holds all
    // that is left; deleted (by kubectl, or the group's next run), it
    // takes everything with it.
    let left = d.fake.world().everything();
    assert!(left.contains(&"configmaps/g-skyc".to_owned()), "{left:?}");
    assert!(left.contains(&"services/g".to_owned()), "{left:?}");
    {
        let w = d.fake.world();
        // The JobSet, or its gate's Job (the gate's pods).
        let owners: Vec<String> = ["jobsets/g", "jobs/g-skyc-gate-0"]
            .iter()
            .filter_map(|k| k.split_once('/'))
            .filter_map(|(r, n)| w.get(r, n))
            .map(|o| o["metadata"]["uid"].as_str().unwrap().to_owned())
            .collect();
        for key in left.iter().filter(|k| !k.starts_with("jobsets/")) {
            let (resource, name) = key.split_once('/').unwrap();
            let o = w.get(resource, name).unwrap();
            let owned = o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|rs| {
                    rs.iter()
                        .any(|r| owners.iter().any(|u| r["uid"] == u.as_str()))
                });
            assert!(owned, "{key} is not the JobSet's: {o:#}");
        }
    }
    d.cluster(|w| {
        w.remove("jobsets", "g");
        w.reconcile_cluster();
        w.reconcile_cluster();
    });
    assert_eq!(d.fake.world().everything(), Vec::<String>::new());
}

/// The store row's role of a test's plan: a worker's holds its nodes,
/// a job's runs on a worker.
pub(super) fn role(plan: &super::plan::Plan) -> crate::backend::Role {
    use crate::backend::Role;
    if plan.hold {
        Role::Worker
    } else if plan.pool_job.is_some() {
        Role::Job
    } else {
        Role::Group
    }
}
