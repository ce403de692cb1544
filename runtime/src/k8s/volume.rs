//! `skyc volume apply|delete --target k8s`: the PersistentVolumeClaim of a
//! volume ([`skyc_targets::k8s::volume`]) made, adopted or deleted.
//!
//! A claim skyc made carries its label; one without it is adopted only
//! with `use_existing: true`, and never deleted (as SkyPilot leaves a
//! claim it registered with `use_existing`).

use super::retry;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::Value;
use skyc_targets::k8s::volume::VOLUME_LABEL;

/// What applying did.
#[derive(Debug, PartialEq, Eq)]
pub enum Claimed {
    Made,
    /// It was there: made by skyc before, or adopted (`use_existing`).
    Kept,
}

/// Makes `claim` in `namespace`, or keeps the claim of its name.
pub async fn apply(
    client: &Client,
    namespace: &str,
    claim: &Value,
    use_existing: bool,
) -> Result<Claimed, String> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let name = claim["metadata"]["name"].as_str().unwrap_or_default();
    let found = api.get_opt(name).await.map_err(|e| said(&e, namespace))?;
    match found {
        Some(_) if use_existing => Ok(Claimed::Kept),
        Some(pvc) if ours(&pvc, name) => Ok(Claimed::Kept),
        Some(_) => Err(format!(
            "a PersistentVolumeClaim `{name}` exists in namespace `{namespace}` and skyc did not \
             make it: set `use_existing: true` to mount it, or give this volume another name"
        )),
        None if use_existing => Err(format!(
            "`use_existing: true`, and there is no PersistentVolumeClaim `{name}` in namespace \
             `{namespace}`"
        )),
        None => {
            let pvc: PersistentVolumeClaim = serde_json::from_value(claim.clone())
                .map_err(|e| format!("the claim is not a PersistentVolumeClaim: {e}"))?;
            match api.create(&PostParams::default(), &pvc).await {
                Ok(_) => Ok(Claimed::Made),
                // Made meanwhile by another client.
                Err(e) if retry::already_exists(&e) => Ok(Claimed::Kept),
                Err(e) => Err(said(&e, namespace)),
            }
        }
    }
}

/// Deletes the claim `name` of `namespace` if skyc made it; one it did
/// not (adopted with `use_existing`) is left as it is. `Ok(false)`: left.
pub async fn delete(client: &Client, namespace: &str, name: &str) -> Result<bool, String> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await.map_err(|e| said(&e, namespace))? {
        None => Ok(true),
        Some(pvc) if !ours(&pvc, name) => Ok(false),
        Some(_) => match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(true),
            Err(e) if retry::not_found(&e) => Ok(true),
            Err(e) => Err(said(&e, namespace)),
        },
    }
}

fn ours(pvc: &PersistentVolumeClaim, name: &str) -> bool {
    pvc.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(VOLUME_LABEL))
        .is_some_and(|v| v == name)
}

fn said(e: &kube::Error, namespace: &str) -> String {
    match retry::code(e) {
        Some(403) => format!(
            "the user may not manage PersistentVolumeClaims in namespace `{namespace}`: {}",
            retry::describe(e)
        ),
        _ => retry::describe(e),
    }
}

/// For a caller outside any async runtime (`skyc volume`): `f` with the
/// cluster of `context`.
pub fn blocking<T>(
    kubeconfig: Option<&str>,
    context: Option<&str>,
    f: impl AsyncFnOnce(&super::client::Cluster) -> Result<T, String>,
) -> Result<T, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the Kubernetes client: {e}"))?;
    rt.block_on(async {
        let cluster = super::client::connect(kubeconfig, context).await?;
        f(&cluster).await
    })
}
