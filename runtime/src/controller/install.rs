//! `skyc controller up|down` on Kubernetes: the controller's objects
//! (`skyc_targets::k8s::controller::objects`) applied with the user's
//! own credentials, the way `kubectl apply --server-side` would, and
//! removed again.
//!
//! Down refuses while the controller supervises a live group or pool, as
//! SkyPilot's `sky jobs controller down` does: what is live is asked of
//! the controller itself (`skyc controller live` in its leading pod). It
//! keeps the Role `skyc-runner` (the users' own binding may name it) and,
//! unless purged, the state claim: a next `up` finds its groups, logs and
//! snapshots again.

use super::{pods, remote};
use crate::k8s::FIELD_MANAGER;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use serde_json::Value;
use skyc_targets::k8s::controller::{CLAIM, LEASE, NAME, RUNNER_BINDING};
use std::time::{Duration, Instant};

/// The objects of `down`, in order, by API version, kind and name: all
/// but the Role `skyc-runner`; the claim only when purged. The
/// Deployment first: its pods end while their account and Lease stand.
fn owned(purge: bool) -> Vec<(&'static str, &'static str, &'static str)> {
    let rbac = "rbac.authorization.k8s.io/v1";
    let mut owned = vec![
        ("apps/v1", "Deployment", NAME),
        (rbac, "RoleBinding", NAME),
        (rbac, "RoleBinding", RUNNER_BINDING),
        (rbac, "Role", NAME),
        ("v1", "ServiceAccount", NAME),
        ("coordination.k8s.io/v1", "Lease", LEASE),
    ];
    if purge {
        owned.push(("v1", "PersistentVolumeClaim", CLAIM));
    }
    owned
}

/// The API of the controller's objects of `kind` in `namespace`. Every
/// kind of the controller's is named by its kind, lower case, with an s.
fn api(
    client: &kube::Client,
    namespace: &str,
    api_version: &str,
    kind: &str,
) -> Api<DynamicObject> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let plural = format!("{}s", kind.to_lowercase());
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural);
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Applies `objects` in `namespace`, in their order.
pub async fn apply(
    client: &kube::Client,
    namespace: &str,
    objects: &[Value],
) -> Result<Vec<String>, String> {
    let mut applied = Vec::new();
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let mut object = object.clone();
        object["metadata"]["namespace"] = Value::String(namespace.to_owned());
        api(client, namespace, api_version, kind)
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&object),
            )
            .await
            .map_err(|e| {
                format!(
                    "applying {kind} {name}: {}",
                    crate::k8s::retry::describe(&e)
                )
            })?;
        applied.push(format!("{}/{name}", kind.to_lowercase()));
    }
    Ok(applied)
}

/// The Lease's holder and when it renewed, if it is fresh (renewed
/// within its duration, by this machine's clock).
async fn fresh_holder(leases: &Api<Lease>) -> Result<Option<String>, String> {
    let lease = leases
        .get_opt(LEASE)
        .await
        .map_err(|e| format!("its Lease: {}", crate::k8s::retry::describe(&e)))?;
    let spec = lease.and_then(|l| l.spec).unwrap_or_default();
    let fresh = spec.renew_time.as_ref().is_some_and(|t| {
        let age = jiff::Timestamp::now().duration_since(t.0);
        age.as_secs() <= i64::from(spec.lease_duration_seconds.unwrap_or(15))
    });
    Ok(spec.holder_identity.filter(|h| !h.is_empty() && fresh))
}

/// The replica leading before an update: `up` waits for another.
pub async fn holder(client: &kube::Client, namespace: &str) -> Result<Option<String>, String> {
    fresh_holder(&Api::namespaced(client.clone(), namespace)).await
}

/// Waits until a replica other than `before` holds the Lease and has
/// renewed it lately; answers its name.
pub async fn leader(
    client: &kube::Client,
    namespace: &str,
    before: Option<&str>,
    within: Duration,
) -> Result<String, String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + within;
    loop {
        // Asked again until the deadline: an API server that did not
        // answer once may the next time; the last error is said.
        let last = match fresh_holder(&leases).await {
            Ok(Some(holder)) if Some(holder.as_str()) != before => return Ok(holder),
            Ok(_) => None,
            Err(e) => Some(e),
        };
        if Instant::now() >= deadline {
            let update = if before.is_some() {
                "of the update "
            } else {
                ""
            };
            return Err(last.unwrap_or_else(|| {
                format!(
                    "no replica {update}leads after {} s (`skyc controller status` shows its \
                     pods; `kubectl describe deployment {NAME}` why they do not run)",
                    within.as_secs()
                )
            }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The Deployment's pod template (`None`: there is no Deployment): an
/// apply that changes it replaces the pods; one that changes only the
/// replicas does not.
pub async fn template(client: &kube::Client, namespace: &str) -> Result<Option<Value>, String> {
    Ok(api(client, namespace, "apps/v1", "Deployment")
        .get_opt(NAME)
        .await
        .map_err(|e| format!("its Deployment: {}", crate::k8s::retry::describe(&e)))?
        .map(|d| d.data["spec"]["template"].clone()))
}

/// What down removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Down {
    Removed(Vec<String>),
    /// Live groups and pools, as the controller lists them: nothing
    /// removed.
    Live(Vec<String>),
}

/// Removes the controller of `namespace`, unless it supervises something
/// live (asked of its leader; without one, only when `force`).
pub async fn down(
    client: &kube::Client,
    namespace: &str,
    purge: bool,
    force: bool,
) -> Result<Down, String> {
    if !force {
        let pod = pods::leader(client, namespace)
            .await
            .map_err(|e| format!("{e}; without a leader, what is live cannot be asked: `--force` removes the controller anyway"))?;
        let argv = remote::controller_argv("live", &[]);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = pods::exec(client, namespace, &pod, argv, None, &mut out, &mut err).await?;
        if code != 0 {
            return Err(format!(
                "pod {pod} could not say what is live: {}",
                String::from_utf8_lossy(&err).trim()
            ));
        }
        let live: Vec<String> = String::from_utf8_lossy(&out)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        if !live.is_empty() {
            return Ok(Down::Live(live));
        }
    }
    let mut removed = Vec::new();
    // The Deployment first, in the foreground, and waited for: its pods
    // end (their grace) while their account, Roles and Lease still
    // stand, and their hold on the claim goes with them.
    for (api_version, kind, name) in owned(purge) {
        let api = api(client, namespace, api_version, kind);
        let params = if kind == "Deployment" {
            DeleteParams::foreground()
        } else {
            DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => removed.push(format!("{}/{name}", kind.to_lowercase())),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(format!(
                    "deleting {kind} {name}: {}",
                    crate::k8s::retry::describe(&e)
                ));
            }
        }
        if kind == "Deployment" {
            gone(&api, name).await?;
        }
    }
    Ok(Down::Removed(removed))
}

/// Waits until `name` is gone (its foreground deletion done).
async fn gone(api: &Api<DynamicObject>, name: &str) -> Result<(), String> {
    let deadline = Instant::now() + POD_END;
    while api
        .get_opt(name)
        .await
        .map_err(|e| format!("its Deployment: {}", crate::k8s::retry::describe(&e)))?
        .is_some()
    {
        if Instant::now() >= deadline {
            return Err(format!(
                "its pods have not ended after {} s (`kubectl get pods -l \
                 app.kubernetes.io/name={NAME}`)",
                POD_END.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// How long down waits for the controller's pods to end: longer than
/// their grace period (30 s).
const POD_END: Duration = Duration::from_secs(120);
