//! `skyc volume apply|delete --target k8s` against the scripted cluster:
//! the claim made once, kept when applied again, someone else's claim
//! refused unless adopted, and deleted only when skyc made it.

use super::fake::{Fake, NS};
use crate::k8s::volume::{self, Claimed};
use serde_json::json;
use skyc_compiler::ir::{At, Volume};
use skyc_targets::k8s::volume::claim;

fn ckpts(use_existing: bool) -> Volume {
    Volume {
        name: "ckpts".into(),
        r#type: "k8s-pvc".into(),
        infra: None,
        size_gb: Some(10),
        use_existing,
        config: Some(json!({"access_mode": "ReadWriteMany"})),
        at: At::default(),
    }
}

/// `f` with a client of `fake`, in a runtime of its own.
fn with<T>(fake: &Fake, f: impl AsyncFnOnce(&kube::Client) -> T) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let client = kube::Client::new(fake.clone(), NS);
            f(&client).await
        })
}

#[test]
fn a_volume_is_a_claim_made_once_and_deleted_with_it() {
    let fake = Fake::default();
    let c = claim(&ckpts(false), NS).unwrap();
    let apply = async |client: &kube::Client| volume::apply(client, NS, &c, false).await;
    assert_eq!(with(&fake, apply), Ok(Claimed::Made));
    let made = fake.world().get("persistentvolumeclaims", "ckpts").cloned();
    let made = made.expect("the claim");
    assert_eq!(made["spec"]["resources"]["requests"]["storage"], "10Gi");
    assert_eq!(made["spec"]["accessModes"], json!(["ReadWriteMany"]));
    // Applied again: kept, not made twice.
    assert_eq!(with(&fake, apply), Ok(Claimed::Kept));
    let posts = fake
        .world()
        .requests
        .iter()
        .filter(|r| r.method == "POST")
        .count();
    assert_eq!(posts, 1);
    let delete = async |client: &kube::Client| volume::delete(client, NS, "ckpts").await;
    assert_eq!(with(&fake, delete), Ok(true));
    assert!(
        fake.world()
            .get("persistentvolumeclaims", "ckpts")
            .is_none()
    );
}

#[test]
fn someone_elses_claim_is_adopted_only_when_asked_and_never_deleted() {
    let fake = Fake::default();
    fake.world().put(
        "persistentvolumeclaims",
        json!({"metadata": {"name": "ckpts", "namespace": NS}, "spec": {"accessModes": ["ReadWriteOnce"]}}),
    );
    let made = claim(&ckpts(false), NS).unwrap();
    let refused = with(&fake, async |client| {
        volume::apply(client, NS, &made, false).await
    });
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("skyc did not make it")),
        "{refused:?}"
    );
    let adopted = claim(&ckpts(true), NS).unwrap();
    let adopt = async |client: &kube::Client| volume::apply(client, NS, &adopted, true).await;
    assert_eq!(with(&fake, adopt), Ok(Claimed::Kept));
    let delete = async |client: &kube::Client| volume::delete(client, NS, "ckpts").await;
    assert_eq!(with(&fake, delete), Ok(false));
    assert!(
        fake.world()
            .get("persistentvolumeclaims", "ckpts")
            .is_some()
    );
    // Nothing to adopt: said.
    let none = with(&Fake::default(), adopt);
    assert!(
        none.as_ref().is_err_and(|e| e.contains("use_existing")),
        "{none:?}"
    );
}
