//! skyc's controller: the supervisor of a state directory run in the
//! cluster, by whichever of its replicas holds the Lease
//! (docs/controller.md).
//!
//! A replica waits until it leads ([`crate::k8s::lease::Elector`]), then
//! supervises the state directory as the supervisor a client starts does,
//! with two differences: it does not end when it has nothing to do, and
//! it stops the moment it no longer leads. Its Kubernetes client is
//! fenced ([`crate::k8s::lease::Fenced`]): a request that changes
//! anything is not sent unless the Lease is held, so a replica that lost
//! the Lease (its renewals unanswered, a node cut off) changes nothing
//! even before its loop has noticed. The Lease is renewed on a thread of
//! its own, never behind the supervisor's work.

pub mod aws;
pub mod install;
pub mod pods;
pub mod remote;
pub mod ssh;
pub mod submission;

use crate::k8s::lease::{Elector, Fence, Timing};
use crate::k8s::{Connect, Tuning};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// One replica of the controller.
#[derive(Clone, Debug)]
pub struct Replica {
    /// Its name in the Lease (the pod's).
    pub identity: String,
    /// The Lease's name.
    pub lease: String,
    pub timing: Timing,
}

/// How a replica ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It led, then lost the Lease: another replica leads, or none can
    /// reach the API server.
    Lost,
    /// Asked to stop (`stop`), without releasing the Lease: the next
    /// leader takes it once it has expired, as after a crash.
    Stopped,
}

/// Runs replica `replica` of the controller of `dir`: waits to lead
/// through the Leases API `leases` makes (on the election's thread, whose
/// runtime its client lives in), then supervises with the Kubernetes
/// client `connect(fence)` makes, until it loses the Lease or `stop` is
/// set.
pub fn serve(
    dir: &Path,
    leases: impl FnOnce() -> Result<Api<Lease>, String> + Send + 'static,
    connect: impl FnOnce(Fence) -> Connect,
    replica: &Replica,
    tuning: Tuning,
    stop: Arc<AtomicBool>,
) -> io::Result<Ended> {
    let (leads, led) = std::sync::mpsc::channel::<Fence>();
    let lost = Arc::new(AtomicBool::new(false));
    // Set once the supervisor has returned, for whatever reason: the
    // replica renews no more (it no longer acts), and ends.
    let done = Arc::new(AtomicBool::new(false));
    // The election's own thread and runtime: its client's connections
    // live there, and its renewals never wait for the supervisor.
    let election = {
        let (stop, lost) = (stop.clone(), lost.clone());
        let done = done.clone();
        let replica = replica.clone();
        std::thread::Builder::new()
            .name("skyc-lease".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("the election's runtime: {e}"))?;
                rt.block_on(async {
                    let mut elector =
                        Elector::new(leases()?, &replica.lease, &replica.identity, replica.timing);
                    // Who holds the Lease, said when it changes.
                    let mut said: Option<Option<String>> = None;
                    let heard = |heard: Result<Option<&str>, &crate::k8s::lease::Error>| match heard
                    {
                        Ok(holder) if said.as_ref().is_none_or(|s| s.as_deref() != holder) => {
                            crate::supervisor::log(format_args!(
                                "the Lease is held by {}: waiting",
                                holder.unwrap_or("nobody")
                            ));
                            said = Some(holder.map(str::to_owned));
                        }
                        Ok(_) => {}
                        Err(e) => crate::supervisor::log(format_args!("the Lease: {e}")),
                    };
                    tokio::select! {
                        () = elector.lead(heard) => {}
                        () = stopped(&stop) => return Ok(()),
                    }
                    let _ = leads.send(elector.fence());
                    tokio::select! {
                        () = elector.keep() => {}
                        () = stopped(&stop) => {}
                        () = stopped(&done) => {}
                    }
                    lost.store(true, Ordering::SeqCst);
                    Ok(())
                })
            })?
    };
    // Until it leads, or is stopped before.
    let fence = loop {
        if let Ok(fence) = led.recv_timeout(std::time::Duration::from_millis(100)) {
            break fence;
        }
        if stop.load(Ordering::SeqCst) || election.is_finished() {
            return match election.join() {
                Ok(Ok(())) => Ok(Ended::Stopped),
                Ok(Err(e)) => Err(io::Error::other::<String>(e)),
                Err(_) => Err(io::Error::other("the election's thread panicked")),
            };
        }
    };
    crate::supervisor::log(format_args!("leading as {}", replica.identity));
    let k8s = (connect(fence.clone()), tuning);
    let lead = {
        let (stop, lost) = (stop.clone(), lost.clone());
        Box::new(move || {
            fence.holds() && !lost.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst)
        })
    };
    // The supervisor returns once the replica does not lead, or when it
    // cannot take the state directory (another supervisor holds it: a
    // replica frozen, or whose lock a shared volume has not let go yet);
    // either way it is not acting, and neither is the election.
    let served = crate::supervisor::serve_leading(dir, k8s, lead);
    done.store(true, Ordering::SeqCst);
    let _ = election.join();
    served?;
    Ok(if stop.load(Ordering::SeqCst) {
        Ended::Stopped
    } else {
        crate::supervisor::log("the Lease is lost: this replica stops");
        Ended::Lost
    })
}

/// [`serve`] in a pod: the Lease in the pod's namespace, through a client
/// of `config` (the pod's service account); groups through a client of
/// the same account, fenced by the Lease.
pub fn serve_in_cluster(
    dir: &Path,
    config: kube::Config,
    replica: &Replica,
    tuning: Tuning,
    stop: Arc<AtomicBool>,
) -> Result<Ended, String> {
    let leases = {
        let (config, namespace) = (config.clone(), config.default_namespace.clone());
        move || {
            // Not fenced: the Lease is how the fence is kept. Its client
            // is built as the groups' is (`client::from_config`).
            let cluster = crate::k8s::client::from_config(config)?;
            Ok(Api::namespaced(cluster.client, &namespace))
        }
    };
    let connect = move |fence: Fence| -> Connect {
        Arc::new(move |_plan: &crate::k8s::Plan| {
            let cluster = crate::k8s::client::fenced(config.clone(), fence.clone());
            Box::pin(async move { cluster })
        })
    };
    serve(dir, leases, connect, replica, tuning, stop)
        .map_err(|e| format!("the controller of {}: {e}", dir.display()))
}

/// Resolves once `stop` is set.
async fn stopped(stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The controller of a namespace as the cluster shows it
/// (`skyc controller status`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Status {
    pub namespace: String,
    /// The Deployment's replicas: wanted, and ready.
    pub replicas: i32,
    pub ready: i32,
    pub image: Option<String>,
    /// The Lease's holder, and how long ago it renewed it (by this
    /// machine's clock against the holder's: approximate); `None` when no
    /// replica has led yet.
    pub leader: Option<String>,
    pub renewed_seconds_ago: Option<i64>,
    pub transitions: i32,
    /// The state claim's phase (`Bound`), `None` when it is missing.
    pub state: Option<String>,
}

/// The controller's Deployment, Lease and state claim in `namespace`;
/// `None` when the Deployment is not there.
pub async fn status(client: kube::Client, namespace: &str) -> Result<Option<Status>, String> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use skyc_targets::k8s::controller::{CLAIM, LEASE, NAME};
    let failed = |what: &str, e: kube::Error| {
        format!(
            "the controller's {what} in {namespace}: {}",
            crate::k8s::retry::describe(&e)
        )
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let Some(deployment) = deployments
        .get_opt(NAME)
        .await
        .map_err(|e| failed("Deployment", e))?
    else {
        return Ok(None);
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = leases
        .get_opt(LEASE)
        .await
        .map_err(|e| failed("Lease", e))?;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, namespace);
    let claim = claims
        .get_opt(CLAIM)
        .await
        .map_err(|e| failed("state claim", e))?;
    let spec = lease.and_then(|l| l.spec).unwrap_or_default();
    let now = jiff::Timestamp::now();
    Ok(Some(Status {
        namespace: namespace.to_owned(),
        replicas: deployment
            .spec
            .as_ref()
            .and_then(|s| s.replicas)
            .unwrap_or(1),
        ready: deployment
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
        image: deployment
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.image),
        leader: spec.holder_identity.filter(|h| !h.is_empty()),
        renewed_seconds_ago: spec
            .renew_time
            .map(|t| now.duration_since(t.0).as_secs().max(0)),
        transitions: spec.lease_transitions.unwrap_or(0),
        state: claim.map(|c| {
            c.status
                .and_then(|s| s.phase)
                .unwrap_or_else(|| "Pending".into())
        }),
    }))
}

/// [`status`] for a caller outside any async runtime: the cluster of
/// kubeconfig context `context` (the current one when `None`), in
/// `namespace` (the context's when `None`).
pub fn status_of(context: Option<&str>, namespace: Option<&str>) -> Result<Option<Status>, String> {
    use crate::k8s::client::PROBE_TIMEOUT;
    with_cluster(context, namespace, |client, namespace| async move {
        tokio::time::timeout(PROBE_TIMEOUT, status(client, &namespace))
            .await
            .map_err(|_| format!("did not answer within {} s", PROBE_TIMEOUT.as_secs()))?
    })
}

/// A client of kubeconfig context `context` (the current one when
/// `None`) and the namespace (`namespace`, else the context's); `f` run
/// with them outside any async runtime, its error said with the API
/// server's address.
pub fn with_cluster<T, F>(
    context: Option<&str>,
    namespace: Option<&str>,
    f: impl FnOnce(kube::Client, String) -> F,
) -> Result<T, String>
where
    F: std::future::Future<Output = Result<T, String>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the Kubernetes client: {e}"))?;
    rt.block_on(async {
        let cluster = crate::k8s::client::connect(None, context).await?;
        let namespace = namespace.unwrap_or(&cluster.namespace).to_owned();
        let server = cluster.server.clone();
        f(cluster.client, namespace)
            .await
            .map_err(|e| format!("the Kubernetes API server {server}: {e}"))
    })
}
