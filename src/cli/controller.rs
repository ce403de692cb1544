//! skyc's controller: the supervisor and its state where the groups run
//! (docs/controller.md). `skyc build --target k8s --controller` prints
//! what runs it on Kubernetes; `skyc controller serve` is what its pods
//! run.

use super::exit::{NOT_FOUND, OK, USAGE};
use super::out::{errln, outln};
use super::state::StateArgs;
use skyc_runtime::controller::{Ended, Replica};
use skyc_runtime::k8s::client;
use skyc_runtime::k8s::lease::Timing;
use skyc_targets::k8s::controller::{self, Controller};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

#[derive(clap::Subcommand)]
pub(crate) enum Command {
    Status(StatusArgs),
    Serve(ServeArgs),
}

/// Show the controller of a namespace: its replicas, which one leads and
/// when it last renewed its Lease, its state claim.
#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    /// The controller's namespace; default: the kubeconfig context's.
    #[arg(long, value_name = "NAME")]
    namespace: Option<String>,
    /// The kubeconfig context [default: the current one].
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// As JSON.
    #[arg(long)]
    json: bool,
}

/// Run a replica of the controller in a pod: wait for its Lease, then
/// supervise the state directory's groups while holding it.
///
/// The cluster is the pod's own (KUBERNETES_SERVICE_HOST and _PORT, the
/// service account's token, CA and namespace); the replica's name in the
/// Lease is $SKYC_CONTROLLER_ID, else $HOSTNAME. Exits 75 when it loses
/// the Lease (its Deployment starts it again, to wait), 0 on SIGTERM.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    state: StateArgs,
}

/// A replica that lost its Lease: started again, it waits for it.
const LOST: u8 = 75;

fn status(args: &StatusArgs) -> u8 {
    let found =
        skyc_runtime::controller::status_of(args.context.as_deref(), args.namespace.as_deref());
    let status = match found {
        Ok(Some(status)) => status,
        Ok(None) => {
            errln!(
                "skyc: no controller in {}: `skyc build --target k8s --controller` prints one to apply",
                args.namespace
                    .as_deref()
                    .unwrap_or("the context's namespace")
            );
            return NOT_FOUND;
        }
        Err(message) => {
            errln!("error: {message}");
            return USAGE;
        }
    };
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&status).unwrap_or_default()
        );
        return OK;
    }
    let image = status.image.as_deref().unwrap_or("?");
    outln!(
        "controller in {}: {} of {} replicas ready ({image})",
        status.namespace,
        status.ready,
        status.replicas
    );
    match (&status.leader, status.renewed_seconds_ago) {
        (Some(leader), Some(ago)) => outln!(
            "leader: {leader}, Lease renewed {ago} s ago ({} changes of leader)",
            status.transitions
        ),
        (Some(leader), None) => outln!("leader: {leader}"),
        (None, _) => outln!("leader: none yet"),
    }
    outln!(
        "state: {}",
        status
            .state
            .as_deref()
            .unwrap_or("no claim (skyc-controller-state is missing)")
    );
    OK
}

pub(crate) fn run(command: &Command) -> u8 {
    match command {
        Command::Status(args) => status(args),
        Command::Serve(serve) => match self::serve(serve) {
            Ok(Ended::Stopped) => OK,
            Ok(Ended::Lost) => LOST,
            Err(message) => {
                errln!("error: {message}");
                USAGE
            }
        },
    }
}

fn serve(args: &ServeArgs) -> Result<Ended, String> {
    let accounts = std::env::var_os("SKYC_SERVICEACCOUNT_DIR")
        .map_or_else(|| client::SERVICE_ACCOUNT.into(), std::path::PathBuf::from);
    let config = client::in_cluster(|name| std::env::var(name).ok(), &accounts)?;
    let identity = ["SKYC_CONTROLLER_ID", "HOSTNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|v| !v.is_empty()))
        .ok_or("neither SKYC_CONTROLLER_ID nor HOSTNAME names this replica")?;
    let dir = args.state.dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(signal, Arc::clone(&stop));
    }
    let replica = Replica {
        identity,
        lease: controller::LEASE.to_owned(),
        timing: Timing::default(),
    };
    skyc_runtime::controller::serve_in_cluster(&dir, config, &replica, stop)
}

/// How the controller runs (`skyc build --target k8s --controller`).
#[derive(clap::Args)]
pub(crate) struct ControllerArgs {
    /// The controller's image: skyc and nothing else
    /// (deploy/controller/Dockerfile builds it).
    #[arg(long, value_name = "IMAGE", default_value = controller::DEFAULT_IMAGE, help_heading = "Controller")]
    controller_image: String,
    /// Replicas of the controller: they elect a leader with a Lease, the
    /// others wait; more than one needs `--controller-storage-class` of a
    /// ReadWriteMany class.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        help_heading = "Controller"
    )]
    controller_replicas: u32,
    /// The storage class of the controller's state claim; default: the
    /// cluster's.
    #[arg(long, value_name = "NAME", help_heading = "Controller")]
    controller_storage_class: Option<String>,
    /// The size of the controller's state claim.
    #[arg(
        long,
        value_name = "SIZE",
        default_value = "10Gi",
        help_heading = "Controller"
    )]
    controller_storage: String,
}

impl ControllerArgs {
    /// The controller's objects in `namespace` (kubectl's when `None`).
    pub(crate) fn objects(
        &self,
        namespace: Option<String>,
    ) -> Result<Vec<serde_json::Value>, String> {
        controller::objects(&Controller {
            namespace,
            image: self.controller_image.clone(),
            replicas: self.controller_replicas,
            storage: self.controller_storage.clone(),
            storage_class: self.controller_storage_class.clone(),
            ..Controller::default()
        })
    }
}
