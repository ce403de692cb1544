//! A pool's workers on the cluster: each a group of its own, named after
//! its row, whose nodes hold after setup and are ready once their probe
//! finds the marker; lost when their pod goes; gone with the pool.

use super::driver::{Driver, tuning};
use super::fake::{Fake, NS};
use super::{CM, JS, P, RULES};
use crate::backend::Report;
use crate::k8s::{Lowering, Plan, PoolPlan};
use crate::policy::{Event, Status};
use serde_json::json;
use std::time::Duration;

/// A pool of two 2-node workers.
const POOL: &str = "\
name: trainers
num_nodes: 2
setup: pip install torch
pool:
  workers: 2
";

pub(super) fn pool_plan(yaml: &str) -> PoolPlan {
    let c = skyc_compiler::compile(
        "pool.yaml",
        yaml.as_bytes(),
        &skyc_compiler::Options::default(),
    );
    let group = c
        .group
        .unwrap_or_else(|| panic!("invalid pool: {:?}", c.diagnostics));
    let options = skyc_targets::k8s::Options {
        namespace: Some(NS.to_owned()),
        ..Default::default()
    };
    let pool = group.pool.clone().expect("a pool file");
    PoolPlan::new(
        &group,
        &pool,
        "pool",
        &Lowering {
            options: &options,
            namespace: NS,
            context: None,
            grace: Duration::from_secs(5),
            secrets: &[],
            token: "run-1".into(),
        },
    )
    .unwrap_or_else(|d| panic!("lowering failed: {d:?}"))
}

/// Worker `n` as the backend adopts it: the pool's plan under its row's
/// name, holding its nodes (its row's role).
pub(super) fn worker(n: u32) -> Plan {
    let mut plan = pool_plan(POOL).worker.named(&format!("pool-{n}"));
    plan.hold = true;
    plan
}

fn created(fake: &Fake) -> Vec<String> {
    let mut pods = fake.world().created_pods();
    pods.sort();
    pods
}

fn readies(d: &Driver) -> Vec<(usize, u32)> {
    d.reports
        .iter()
        .filter_map(|r| match r {
            Report::Ready { task, attempt } => Some((*task, *attempt)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_worker_plan_is_named_after_its_row_everywhere() {
    let plan = worker(3);
    assert_eq!(plan.group, "pool-3");
    assert!(plan.hold);
    let text = serde_json::to_string(&plan).unwrap();
    assert!(!text.contains("pool-4294967295"), "{text}");
    let cm = plan.object("ConfigMap").unwrap();
    assert_eq!(cm["metadata"]["name"], "pool-3-skyc");
    assert!(
        cm["data"]["entrypoint.sh"]
            .as_str()
            .unwrap()
            .contains("group=pool-3")
    );
    assert_eq!(cm["data"]["trainers.setup.sh"], "pip install torch");
    let pod = &plan.templates[0];
    assert_eq!(pod["spec"]["subdomain"], "pool-3");
    assert_eq!(
        pod["spec"]["containers"][0]["readinessProbe"]["exec"]["command"],
        json!(["cat", "/tmp/skyc/ready"])
    );
    // Workers are replaced, not restarted.
    assert_eq!(plan.spec.tasks[0].max_restarts_on_errors, 0);
}

#[test]
fn two_workers_are_created_once_each_and_ready_after_setup() {
    let fake = Fake::default();
    let mut workers: Vec<Driver> = (0..2)
        .map(|n| Driver::start_with(fake.clone(), worker(n), tuning()))
        .collect();
    let mut writes = fake.world().take_writes();
    writes.sort();
    let mut want = Vec::new();
    for n in 0..2 {
        let g = format!("pool-{n}");
        want.extend([
            RULES.to_owned(),
            format!("PATCH {CM}/{g}-skyc apply ConfigMap {g}-skyc manager=skyc"),
            format!("PATCH {JS}/{g} apply JobSet {g} manager=skyc"),
            format!(
                "PATCH {JS}/{g} {{\"metadata\":{{\"annotations\":{{\"skyc.io/launched-0\":\"0\"}}}}}} uid={}",
                fake.world().uid("jobsets", &g)
            ),
            format!("POST {P} Pod"),
            format!("POST {P} Pod"),
        ]);
    }
    want.sort();
    assert_eq!(writes, want);
    // Setup runs: started, not ready.
    fake.world().reconcile_cluster();
    fake.world().run_pending();
    for d in &mut workers {
        d.settle();
        assert_eq!(d.statuses(), [Status::Running]);
        assert!(readies(d).is_empty());
    }
    // One node's probe succeeds: not ready until both have.
    fake.world().probe_succeeds("pool-0-trainers-0-0");
    workers[0].settle();
    assert!(readies(&workers[0]).is_empty());
    for pod in [
        "pool-0-trainers-1-0",
        "pool-1-trainers-0-0",
        "pool-1-trainers-1-0",
    ] {
        fake.world().probe_succeeds(pod);
    }
    for d in &mut workers {
        d.settle();
        assert_eq!(readies(d), [(0, 0)], "ready once");
    }
    assert!(fake.world().take_writes().is_empty());
    assert_eq!(
        created(&fake),
        [
            "pool-0-trainers-0-0",
            "pool-0-trainers-1-0",
            "pool-1-trainers-0-0",
            "pool-1-trainers-1-0"
        ]
    );
}

/// Worker 0 and 1, both ready.
fn ready_pool() -> (Fake, Vec<Driver>) {
    let fake = Fake::default();
    let mut workers: Vec<Driver> = (0..2)
        .map(|n| Driver::start_with(fake.clone(), worker(n), tuning()))
        .collect();
    fake.world().reconcile_cluster();
    fake.world().run_pending();
    let pods = fake.world().names("pods");
    for pod in pods {
        fake.world().probe_succeeds(&pod);
    }
    for d in &mut workers {
        d.settle();
        assert_eq!(readies(d), [(0, 0)]);
    }
    fake.world().take_writes();
    (fake, workers)
}

#[test]
fn a_worker_pod_deleted_out_of_band_is_its_worker_lost_and_the_other_untouched() {
    let (fake, mut workers) = ready_pool();
    fake.world()
        .disrupt("pool-0-trainers-1-0", "DeletionByTaintManager");
    fake.world().reconcile_cluster();
    for d in &mut workers {
        d.settle();
    }
    let lost = |d: &Driver| {
        d.reports.iter().any(|r| {
            matches!(
                r,
                Report::Event {
                    event: Event::NodeLost {
                        task: 0,
                        attempt: 0,
                        node: 1
                    },
                    ..
                }
            )
        })
    };
    assert!(lost(&workers[0]));
    assert!(!lost(&workers[1]));
    assert_eq!(workers[1].statuses(), [Status::Running]);
    // Nothing of worker 1 was touched.
    assert!(
        fake.world()
            .take_writes()
            .iter()
            .all(|w| !w.contains("pool-1")),
    );
}

#[test]
fn pool_down_deletes_every_worker() {
    let (fake, mut workers) = ready_pool();
    for d in &mut workers {
        d.cancel();
    }
    let mut writes = fake.world().take_writes();
    writes.sort();
    let want: Vec<String> = (0..2)
        .map(|n| {
            format!(
                "DELETE {JS}/pool-{n} Foreground uid={}",
                fake.world().uid("jobsets", &format!("pool-{n}"))
            )
        })
        .collect();
    assert_eq!(writes, want);
    fake.world().reconcile_cluster();
    for d in &mut workers {
        d.settle();
        assert!(d.settled());
    }
    let w = fake.world();
    assert!(w.names("pods").is_empty(), "{:?}", w.names("pods"));
    assert!(w.names("jobsets").is_empty());
}

#[test]
fn a_worker_without_exec_rights_is_refused_before_anything_is_created() {
    let fake = Fake::default();
    fake.world().rules = json!([{"apiGroups": ["*"], "resources": ["jobsets", "jobs", "pods", "pods/log", "configmaps"], "verbs": ["*"]}]);
    let d = Driver::start_with(fake.clone(), worker(0), tuning());
    let refused = d.reports.iter().find_map(|r| match r {
        Report::Refused(m) => Some(m.clone()),
        _ => None,
    });
    let m = refused.unwrap_or_else(|| panic!("not refused: {:?}", d.reports));
    assert!(m.contains("may not get pods/exec, create pods/exec"), "{m}");
    assert_eq!(fake.world().take_writes(), [RULES]);
}

/// kube's exec is a WebSocket GET, authorized as `get`: a Role with only
/// `create` on `pods/exec` cannot start a job.
#[test]
fn a_worker_with_only_create_on_exec_is_refused() {
    let fake = Fake::default();
    fake.world().rules = json!([
        {"apiGroups": ["*"], "resources": ["jobsets", "jobs", "pods", "pods/log", "configmaps"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]}
    ]);
    let d = Driver::start_with(fake.clone(), worker(0), tuning());
    let refused = d.reports.iter().find_map(|r| match r {
        Report::Refused(m) => Some(m.clone()),
        _ => None,
    });
    let m = refused.unwrap_or_else(|| panic!("not refused: {:?}", d.reports));
    assert!(m.contains("may not get pods/exec"), "{m}");
    assert!(!m.contains("create pods/exec"), "{m}");
}
