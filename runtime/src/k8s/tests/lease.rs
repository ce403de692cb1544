//! The controller's election against the fake API server: two replicas,
//! one Lease. What is asserted is what the replicas end up believing,
//! sampled as they run: never two leaders, and the follower leading once
//! the leader is gone, not before its fence has run out.

use super::fake::{Fake, NS};
use crate::k8s::lease::{Elector, Round, Timing};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use std::time::Duration;
use tokio::time::Instant;

/// Short, with room for a loaded machine's stalls (a renewal every
/// 100 ms, a second of them before the fence runs out).
fn timing() -> Timing {
    Timing {
        duration: Duration::from_millis(1_500),
        renew_deadline: Duration::from_millis(1_000),
        retry: Duration::from_millis(100),
    }
}

fn elector(fake: &Fake, me: &str) -> Elector {
    let api: Api<Lease> = Api::namespaced(kube::Client::new(fake.clone(), NS), NS);
    Elector::new(api, "skyc-controller", me, timing())
}

/// A ConfigMap to write: any write does.
fn map(name: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    k8s_openapi::api::core::v1::ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_follower_takes_over_once_the_leader_is_gone_and_never_before() {
    runtime().block_on(async {
        let fake = Fake::default();
        let (mut a, mut b) = (elector(&fake, "pod-a"), elector(&fake, "pod-b"));
        assert!(matches!(a.round().await, Ok(Round::Leads(_))));
        assert_eq!(
            b.round().await.unwrap(),
            Round::Follows(Some("pod-a".into()))
        );
        let (fence_a, fence_b) = (a.fence(), b.fence());
        let leader = tokio::spawn(async move {
            a.keep().await;
        });
        let follower = tokio::spawn(async move {
            b.lead(|_| {}).await;
            b
        });
        // The leader renews: two seconds, twice the Lease's duration, and
        // the follower still follows.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(3) {
            assert!(fence_a.holds(), "the leader renews");
            assert!(!fence_b.holds(), "one leader");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The leader's process is gone (SIGKILL: nothing released).
        leader.abort();
        let killed = Instant::now();
        let mut took = None;
        while killed.elapsed() < Duration::from_secs(5) {
            assert!(!(fence_a.holds() && fence_b.holds()), "never two leaders");
            if fence_b.holds() {
                took = Some(killed.elapsed());
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let took = took.expect("the follower leads within 5 s");
        // Not before the Lease's duration (the record unchanged that long,
        // from the follower's first read after the last renewal), and
        // within it and a few rounds.
        assert!(took >= Duration::from_millis(1_000), "{took:?}");
        assert!(took <= Duration::from_millis(4_000), "{took:?}");
        assert!(!fence_a.holds(), "the old leader's fence ran out first");
        let b = follower.await.unwrap();
        drop(b);
        let lease = fake
            .world()
            .get("leases", "skyc-controller")
            .cloned()
            .unwrap();
        assert_eq!(lease["spec"]["holderIdentity"], "pod-b");
        assert_eq!(lease["spec"]["leaseTransitions"], 1);
    });
}

#[test]
fn of_two_replicas_starting_together_one_leads() {
    runtime().block_on(async {
        let fake = Fake::default();
        let (mut a, mut b) = (elector(&fake, "pod-a"), elector(&fake, "pod-b"));
        let (ra, rb) = tokio::join!(a.round(), b.round());
        let leads = [ra.unwrap(), rb.unwrap()]
            .iter()
            .filter(|r| matches!(r, Round::Leads(_)))
            .count();
        assert_eq!(leads, 1);
        assert!(a.fence().holds() != b.fence().holds());
        // Both taking a Lease whose holder is gone: the API server lets
        // one update through (the other names a version gone).
        fake.world().update("leases", "skyc-controller", |l| {
            l["spec"]["holderIdentity"] = serde_json::json!("");
        });
        let (mut c, mut d) = (elector(&fake, "pod-c"), elector(&fake, "pod-d"));
        let (_, _) = tokio::join!(c.round(), d.round());
        let (rc, rd) = tokio::join!(c.round(), d.round());
        let leads = [rc.unwrap(), rd.unwrap()]
            .iter()
            .filter(|r| matches!(r, Round::Leads(_)))
            .count();
        assert_eq!(leads, 1, "one of the two takes it");
    });
}

#[test]
fn a_leader_that_cannot_renew_stops_leading_before_its_lease_ends() {
    runtime().block_on(async {
        let fake = Fake::default();
        let mut a = elector(&fake, "pod-a");
        let before = Instant::now();
        let Ok(Round::Leads(until)) = a.round().await else {
            panic!("leads");
        };
        // Fenced before the Lease can be taken: its duration counts from a
        // time after the renewal was sent.
        assert!(until <= before + timing().renew_deadline + Duration::from_millis(300));
        assert!(until < before + timing().duration);
        let fence = a.fence();
        // The API server stops answering.
        fake.world().down = true;
        let kept = tokio::time::timeout(Duration::from_secs(3), a.keep()).await;
        assert!(kept.is_ok(), "keep returns once the fence runs out");
        assert!(!fence.holds());
        assert!(Instant::now() >= until, "not before its deadline");
        assert_eq!(fence.until(), None, "the lead is dropped");
        // It does not lead again by itself once the API server answers.
        fake.world().down = false;
        tokio::time::sleep(timing().retry * 3).await;
        assert!(!fence.holds());
    });
}

#[test]
fn a_fenced_client_changes_nothing_once_its_fence_has_run_out() {
    use crate::k8s::lease::Fenced;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PostParams;
    runtime().block_on(async {
        let fake = Fake::default();
        let mut a = elector(&fake, "pod-a");
        let fenced = kube::Client::new(Fenced::new(fake.clone(), a.fence()), NS);
        let maps: Api<ConfigMap> = Api::namespaced(fenced, NS);
        // Not leading yet: refused, and the API server never hears of it.
        let refused = maps.create(&PostParams::default(), &map("early")).await;
        assert!(
            refused
                .unwrap_err()
                .to_string()
                .contains("does not hold its Lease"),
            "refused before leading"
        );
        assert!(matches!(a.round().await, Ok(Round::Leads(_))));
        maps.create(&PostParams::default(), &map("while-leading"))
            .await
            .expect("a leader's write goes through");
        // No renewal: the fence runs out after the renew deadline.
        tokio::time::sleep(timing().renew_deadline + Duration::from_millis(50)).await;
        assert!(
            maps.create(&PostParams::default(), &map("late"))
                .await
                .is_err()
        );
        // Reads are not fenced.
        assert!(maps.get("while-leading").await.is_ok());
        let w = fake.world();
        assert_eq!(w.names("configmaps"), ["while-leading"]);
        assert!(
            !w.requests.iter().any(|r| r.method == "POST"
                && r.path.ends_with("/configmaps")
                && r.body
                    .as_ref()
                    .is_some_and(|b| b["metadata"]["name"] != "while-leading")),
            "no fenced write reached the API server"
        );
    });
}

#[test]
fn a_leader_whose_api_server_stalls_stops_leading_at_its_deadline() {
    use crate::k8s::lease::Fenced;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PostParams;
    runtime().block_on(async {
        let fake = Fake::default();
        let mut a = elector(&fake, "pod-a");
        let Ok(Round::Leads(until)) = a.round().await else {
            panic!("leads");
        };
        let fenced = kube::Client::new(Fenced::new(fake.clone(), a.fence()), NS);
        let maps: Api<ConfigMap> = Api::namespaced(fenced, NS);
        // Requests are taken and never answered.
        fake.world().hang = true;
        // A write sent while leading is abandoned when the fence ends.
        let write = tokio::time::timeout(
            Duration::from_secs(5),
            maps.create(&PostParams::default(), &map("stalled")),
        )
        .await
        .expect("the write ends with the fence");
        assert!(write.is_err());
        assert!(Instant::now() >= until);
        assert!(Instant::now() < until + Duration::from_secs(1));
        // The renewals time out, and the leader stops leading.
        let kept = tokio::time::timeout(Duration::from_secs(5), a.keep()).await;
        assert!(kept.is_ok(), "keep returns although nothing answers");
        assert!(!a.fence().holds());
    });
}

#[test]
fn a_lease_gone_while_held_is_not_made_again_before_its_holder_may_have_stopped() {
    runtime().block_on(async {
        let fake = Fake::default();
        let (mut a, mut b) = (elector(&fake, "pod-a"), elector(&fake, "pod-b"));
        assert!(matches!(a.round().await, Ok(Round::Leads(_))));
        assert_eq!(
            b.round().await.unwrap(),
            Round::Follows(Some("pod-a".into()))
        );
        // Deleted from outside; pod-a may still act on its last renewal.
        fake.world().remove("leases", "skyc-controller");
        let gone = Instant::now();
        assert!(matches!(b.round().await, Ok(Round::Follows(_))));
        assert!(fake.world().get("leases", "skyc-controller").is_none());
        loop {
            if let Ok(Round::Leads(_)) = b.round().await {
                break;
            }
            assert!(
                gone.elapsed() < Duration::from_secs(5),
                "pod-b leads in the end"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(gone.elapsed() >= timing().duration - Duration::from_millis(200));
    });
}
