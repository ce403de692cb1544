//! Two replicas of the controller, on threads of the test, sharing one
//! state directory (the controller's claim) and the fake API server. What
//! is asserted is what the cluster and the store end up with: one leader
//! at a time, the group taken over by the other replica when the leader
//! ends without releasing the Lease (as a SIGKILLed pod does), no pod
//! created twice, and the group's end as the engine decides it.
//!
//! The replicas as processes of their own, one SIGKILLed, are the
//! command line's test (`tests/k8s/client.rs`). Not covered: replicas
//! reaching the API server over TLS with a pod's service account (the
//! client of `skyc controller serve` reads it: `k8s::client::in_cluster`,
//! tested on its own), and a leader frozen rather than ended.

use super::driver::{insert, plan, tuning, turn};
use super::fake::{Fake, NS};
use crate::controller::{self, Ended, Replica};
use crate::k8s::lease::Timing;
use crate::store::Store;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const GROUP: &str = "\
name: g
execution: parallel
primary_tasks: [trainer]
termination_delay: 1s
---
name: trainer
num_nodes: 2
run: echo train
---
name: buffer
run: sleep 1000
";

fn timing() -> Timing {
    Timing {
        duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry: Duration::from_millis(200),
    }
}

struct Running {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<std::io::Result<Ended>>,
}

fn replica(fake: &Fake, dir: &std::path::Path, me: &str) -> Running {
    let stop = Arc::new(AtomicBool::new(false));
    let (fake, dir, me, halt) = (fake.clone(), dir.to_owned(), me.to_owned(), stop.clone());
    let thread = std::thread::spawn(move || {
        let leases = {
            let fake = fake.clone();
            move || Ok(kube::api::Api::namespaced(kube::Client::new(fake, NS), NS))
        };
        let replica = Replica {
            identity: me,
            lease: "skyc-controller".into(),
            timing: timing(),
        };
        controller::serve(
            &dir,
            leases,
            |fence| super::driver::fenced(&fake, fence),
            &replica,
            tuning(),
            halt,
        )
    });
    Running { stop, thread }
}

fn holder(fake: &Fake) -> Option<String> {
    fake.world()
        .get("leases", "skyc-controller")
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
}

/// Runs the cluster's controllers until `done`, at most 30 s.
fn until(fake: &Fake, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not reached");
        turn(&mut fake.world());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_other_replica_takes_the_group_over_when_the_leader_ends() {
    let dir = std::env::temp_dir().join(format!("skyc-controller-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let gid = insert(&dir, &plan(GROUP));
    let fake = Fake::default();
    fake.world().wall_clock = true;
    let a = replica(&fake, &dir, "pod-a");
    until(&fake, "pod-a leads", || {
        holder(&fake).as_deref() == Some("pod-a")
    });
    let b = replica(&fake, &dir, "pod-b");
    let store = Store::open(&dir).unwrap();
    let statuses = |st: &Store| -> Vec<String> {
        st.tasks(gid)
            .unwrap()
            .into_iter()
            .map(|t| t.status)
            .collect()
    };
    until(&fake, "every task running", || {
        statuses(&store) == ["RUNNING", "RUNNING"]
    });
    // While pod-a renews, pod-b waits: for longer than the Lease lasts.
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_millis(3_500) {
        assert_eq!(holder(&fake).as_deref(), Some("pod-a"), "one leader");
        std::thread::sleep(Duration::from_millis(50));
    }
    let created = fake.world().created_pods();
    assert_eq!(created.len(), 3, "{created:?}");
    // The leader ends without releasing anything.
    a.stop.store(true, Ordering::SeqCst);
    let ended = Instant::now();
    assert_eq!(a.thread.join().unwrap().unwrap(), Ended::Stopped);
    // The trainers end meanwhile: nobody supervises until pod-b leads.
    {
        let mut w = fake.world();
        for pod in ["g-trainer-0-0", "g-trainer-1-0"] {
            w.exit(pod, 0);
        }
    }
    until(&fake, "pod-b leads", || {
        holder(&fake).as_deref() == Some("pod-b")
    });
    assert!(
        ended.elapsed() >= Duration::from_secs(2),
        "not before the Lease expired: {:?}",
        ended.elapsed()
    );
    until(&fake, "the group closed", || {
        store
            .group(gid)
            .unwrap()
            .is_some_and(|g| g.finished_at_ms.is_some())
    });
    let group = store.group(gid).unwrap().unwrap();
    assert_eq!(group.status, "SUCCEEDED");
    assert_eq!(statuses(&store), ["SUCCEEDED", "CANCELLED"]);
    // pod-b adopted what pod-a made: no pod of the group made twice.
    assert_eq!(fake.world().created_pods(), created);
    // The replica goes on leading, with nothing to do.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !b.thread.is_finished(),
        "a controller does not end when idle"
    );
    assert_eq!(holder(&fake).as_deref(), Some("pod-b"));
    b.stop.store(true, Ordering::SeqCst);
    assert_eq!(b.thread.join().unwrap().unwrap(), Ended::Stopped);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn status_says_who_leads_how_many_replicas_are_ready_and_the_state() {
    let fake = Fake::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = || kube::Client::new(fake.clone(), NS);
        assert_eq!(controller::status(client(), NS).await.unwrap(), None);
        // The objects `build --target k8s --controller` makes, as the
        // cluster shows them once a replica leads.
        let objects = skyc_targets::k8s::controller::objects(
            &skyc_targets::k8s::controller::Controller::default(),
        )
        .unwrap();
        {
            let mut w = fake.world();
            let mut deployment = objects[6].clone();
            deployment["status"] = serde_json::json!({"readyReplicas": 1});
            w.put("deployments", deployment);
            let mut claim = objects[5].clone();
            claim["status"] = serde_json::json!({"phase": "Bound"});
            w.put("persistentvolumeclaims", claim);
        }
        let mut a = crate::k8s::lease::Elector::new(
            kube::api::Api::namespaced(client(), NS),
            "skyc-controller",
            "skyc-controller-5d8f-x2k4p",
            timing(),
        );
        assert!(matches!(
            a.round().await,
            Ok(crate::k8s::lease::Round::Leads(_))
        ));
        let status = controller::status(client(), NS).await.unwrap().unwrap();
        assert_eq!(status.replicas, 1);
        assert_eq!(status.ready, 1);
        assert_eq!(
            status.image.as_deref(),
            Some(skyc_targets::k8s::controller::DEFAULT_IMAGE)
        );
        assert_eq!(status.leader.as_deref(), Some("skyc-controller-5d8f-x2k4p"));
        assert!(status.renewed_seconds_ago.is_some_and(|s| s <= 1));
        assert_eq!(status.state.as_deref(), Some("Bound"));
        // A refusal of the API server is named.
        fake.world().fail("GET", "/leases/", Some(403), 1);
        let refused = controller::status(client(), NS).await.unwrap_err();
        assert!(refused.contains("the controller's Lease"), "{refused}");
    });
}

/// A group recorded by a command in another replica's pod reaches no
/// socket of the leader's (a claim shared across nodes): the leader finds
/// it in the store all the same, at its next read of it.
#[test]
fn the_leader_takes_on_what_another_pod_recorded_without_telling_it() {
    let dir = std::env::temp_dir().join(format!("skyc-controller-scan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let fake = Fake::default();
    fake.world().wall_clock = true;
    let a = replica(&fake, &dir, "pod-a");
    until(&fake, "pod-a leads", || {
        holder(&fake).as_deref() == Some("pod-a")
    });
    // Recorded as `skyc controller accept` records it, and nobody woken.
    let gid = insert(&dir, &plan(GROUP));
    let store = Store::open(&dir).unwrap();
    let recorded = Instant::now();
    until(&fake, "the group taken on", || {
        store
            .tasks(gid)
            .unwrap()
            .iter()
            .all(|t| t.status == "RUNNING")
    });
    assert!(recorded.elapsed() < Duration::from_secs(10));
    a.stop.store(true, Ordering::SeqCst);
    assert_eq!(a.thread.join().unwrap().unwrap(), Ended::Stopped);
    let _ = std::fs::remove_dir_all(&dir);
}
