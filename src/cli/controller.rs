//! skyc's controller: the supervisor and its state where the groups run
//! (docs/controller.md). `skyc build --target k8s --controller` prints
//! what runs it on Kubernetes; `skyc controller serve` is what its pods
//! run.

use super::exit::{FAILED, NOT_FOUND, OK, USAGE};
use super::out::{errln, outln};
use super::state::StateArgs;
use skyc_runtime::controller::remote::Remote;
use skyc_runtime::controller::{Ended, Replica};
use skyc_runtime::k8s::client;
use skyc_runtime::k8s::lease::Timing;
use skyc_targets::cloud::controller as aws_controller;
use skyc_targets::k8s::controller::{self, Controller};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

#[derive(clap::Subcommand)]
pub(crate) enum Command {
    Up(UpArgs),
    Status(StatusArgs),
    Down(DownArgs),
    Serve(ServeArgs),
    /// The live groups and pools of the state directory, a line each.
    #[command(hide = true)]
    Live(LiveArgs),
    /// A client's command, run on the controller (`--state-dir
    /// k8s://NS`): ended when the session's input closes.
    #[command(hide = true)]
    Answer(AnswerArgs),
    /// A group, pool file or jobs a client planned: recorded here, with
    /// their snapshots.
    #[command(hide = true)]
    Accept(AcceptArgs),
    /// The live pool of that name that takes jobs, as JSON: what a
    /// client plans `run --pool` against.
    #[command(hide = true)]
    Pool(PoolArgs),
    /// Jobs a client submitted, followed until they end (`run --pool`
    /// through the controller): the jobs go on when the client goes.
    #[command(hide = true)]
    Follow(FollowArgs),
    /// Which of the snapshots named the state directory does not hold.
    #[command(hide = true)]
    Missing(MissingArgs),
    /// Start (or restart) the controller's service on its instance (aws).
    #[command(hide = true)]
    Start(StartArgs),
}

#[derive(clap::Args)]
pub(crate) struct StartArgs {
    #[command(flatten)]
    state: StateArgs,
}

/// Where a controller runs.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Where {
    /// Kubernetes: a Deployment in a namespace.
    K8s,
    /// AWS: an instance in a region.
    Aws,
}

#[derive(clap::Args)]
pub(crate) struct AnswerArgs {
    /// The command line to run, without `skyc`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    args: Vec<String>,
}

#[derive(clap::Args)]
pub(crate) struct AcceptArgs {
    /// Where this controller runs groups.
    #[arg(long, value_enum, default_value_t = Where::K8s)]
    target: Where,
    /// The stream is a pool file applied.
    #[arg(long, conflicts_with = "jobs")]
    pool: bool,
    /// The stream is jobs for a pool.
    #[arg(long)]
    jobs: bool,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(clap::Args)]
pub(crate) struct FollowArgs {
    #[arg(value_name = "ID", required = true)]
    ids: Vec<i64>,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(clap::Args)]
pub(crate) struct PoolArgs {
    #[arg(value_name = "NAME")]
    name: String,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(clap::Args)]
pub(crate) struct MissingArgs {
    #[arg(value_name = "DIGEST")]
    digests: Vec<String>,
    #[command(flatten)]
    state: StateArgs,
}

/// Start skyc's controller in a namespace: apply its objects (those
/// `skyc build --target k8s --controller` prints) with your credentials,
/// and wait until a replica leads. Then `--state-dir k8s://NAMESPACE`
/// submits to it and lists, follows and cancels its groups.
///
/// With `--target aws`: make its role, instance profile, security group,
/// key pair and instance in a region (those `skyc build --target aws
/// --controller` prints), deliver skyc to it over SSH and start it. Then
/// `--state-dir aws://REGION` reaches it; a stopped controller is started
/// by the next command.
#[derive(clap::Args)]
pub(crate) struct UpArgs {
    /// Where the controller runs: a namespace of Kubernetes (`k8s`), or
    /// an instance of AWS (`aws`).
    #[arg(long, value_enum, default_value_t = Where::K8s)]
    target: Where,
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    pub(crate) aws: super::aws_controller::AwsUpArgs,
    /// How long to wait for a replica to lead.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    wait: u64,
    #[command(flatten)]
    controller: ControllerArgs,
}

/// Remove skyc's controller from a namespace: refused while it supervises
/// a live group or pool. Its state claim (groups, logs) is kept for the
/// next `up` unless `--purge`; the Role `skyc-runner` is kept (your
/// users' binding may name it). With `--target aws`: its instance (its
/// state with it), security group, key pair, instance profile and role.
#[derive(clap::Args)]
pub(crate) struct DownArgs {
    /// Where the controller runs.
    #[arg(long, value_enum, default_value_t = Where::K8s)]
    target: Where,
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    pub(crate) region: super::aws_controller::RegionArgs,
    /// Delete the state claim too: every group's record and logs.
    #[arg(long)]
    purge: bool,
    /// Remove it without asking what is live (when no replica leads).
    #[arg(long)]
    force: bool,
}

#[derive(clap::Args)]
pub(crate) struct LiveArgs {
    #[command(flatten)]
    state: StateArgs,
}

/// Which controller: its namespace, through which context.
#[derive(clap::Args)]
pub(crate) struct ClusterArgs {
    /// The controller's namespace; default: the kubeconfig context's.
    #[arg(long, value_name = "NAME")]
    namespace: Option<String>,
    /// The kubeconfig context [default: the current one].
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
}

impl ClusterArgs {
    /// The `--state-dir` of the controller in `namespace`.
    fn state_dir(&self, namespace: String) -> Remote {
        Remote::K8s(skyc_runtime::controller::pods::K8s {
            namespace,
            context: self.context.clone(),
        })
    }
}

/// Show the controller of a namespace: its replicas, which one leads and
/// when it last renewed its Lease, its state claim; of a region
/// (`--target aws`): its instance and state.
#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    /// Where the controller runs.
    #[arg(long, value_enum, default_value_t = Where::K8s)]
    target: Where,
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(flatten)]
    pub(crate) region: super::aws_controller::RegionArgs,
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
    /// Where this controller runs: in a pod (`k8s`), or on its instance
    /// (`aws`: its region, instance and idle time from its environment,
    /// as the client wrote it).
    #[arg(long, value_enum, default_value_t = Where::K8s)]
    target: Where,
    /// Run out of the cluster, as this kubeconfig says (a controller run
    /// by hand, or by tests), instead of as the pod's service account.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<std::path::PathBuf>,
    /// With --kubeconfig: its context [default: the current one].
    #[arg(long, value_name = "NAME", requires = "kubeconfig")]
    context: Option<String>,
    /// With --kubeconfig: the namespace of the Lease [default: the
    /// context's].
    #[arg(long, value_name = "NAME", requires = "kubeconfig")]
    namespace: Option<String>,
    #[command(flatten)]
    state: StateArgs,
}

/// A replica that lost its Lease: started again, it waits for it.
const LOST: u8 = 75;

fn status(args: &StatusArgs) -> u8 {
    if args.target == Where::Aws {
        return super::aws_controller::status(&args.region, args.json);
    }
    let found = skyc_runtime::controller::status_of(
        args.cluster.context.as_deref(),
        args.cluster.namespace.as_deref(),
    );
    let status = match found {
        Ok(Some(status)) => status,
        Ok(None) => {
            errln!(
                "skyc: no controller in {}: `skyc build --target k8s --controller` prints one to apply",
                args.cluster
                    .namespace
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
        Command::Up(args) => up(args),
        Command::Down(args) => down(args),
        Command::Live(args) => live(args),
        Command::Status(args) => status(args),
        Command::Answer(args) => answer(args),
        Command::Accept(args) => accept(args),
        Command::Follow(args) => match args.state.local() {
            Ok(dir) => super::jobs::follow_for_client(&dir, &args.ids),
            Err(message) => {
                errln!("error: {message}");
                USAGE
            }
        },
        Command::Pool(args) => match args.state.local().and_then(|dir| {
            skyc_runtime::controller::aws::client_here(&dir);
            let store = skyc_runtime::store::Store::open(&dir)
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            skyc_runtime::pool::admission::for_jobs(&store, &args.name)
        }) {
            Ok(found) => {
                super::out::json(&found);
                OK
            }
            Err(message) => {
                errln!("error: {message}");
                USAGE
            }
        },
        Command::Missing(args) => match args.state.local().and_then(|dir| {
            skyc_runtime::controller::aws::client_here(&dir);
            skyc_runtime::controller::submission::missing(&dir, &args.digests)
        }) {
            Ok(missing) => {
                for digest in missing {
                    outln!("{digest}");
                }
                OK
            }
            Err(message) => {
                errln!("error: {message}");
                USAGE
            }
        },
        Command::Start(args) => {
            match args.state.local().and_then(|dir| {
                skyc_runtime::controller::aws::start(&dir, &dir.join("controller.env"))
            }) {
                Ok(()) => OK,
                Err(message) => {
                    errln!("error: {message}");
                    USAGE
                }
            }
        }
        Command::Serve(serve) if serve.target == Where::Aws => {
            super::aws_controller::serve(&serve.state)
        }
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
    let config = match &args.kubeconfig {
        Some(file) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the Kubernetes client: {e}"))?;
            let file = file.to_string_lossy();
            let mut config = rt.block_on(client::load(Some(&file), args.context.as_deref()))?;
            if let Some(namespace) = &args.namespace {
                config.default_namespace.clone_from(namespace);
            }
            config
        }
        None => {
            let accounts = std::env::var_os("SKYC_SERVICEACCOUNT_DIR")
                .map_or_else(|| client::SERVICE_ACCOUNT.into(), std::path::PathBuf::from);
            client::in_cluster(|name| std::env::var(name).ok(), &accounts)?
        }
    };
    let identity = ["SKYC_CONTROLLER_ID", "HOSTNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|v| !v.is_empty()))
        .ok_or("neither SKYC_CONTROLLER_ID nor HOSTNAME names this replica")?;
    let dir = args.state.local()?;
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
    skyc_runtime::controller::serve_in_cluster(
        &dir,
        config,
        &replica,
        skyc_runtime::k8s::Tuning::default(),
        stop,
    )
}

/// `30s`, `10m`, `1h`: a whole number and its unit.
fn duration(s: &str) -> Result<std::time::Duration, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}`: a number and its unit (`30s`, `10m`, `1h`)"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => return Err(format!("`{s}`: the unit is `s`, `m` or `h`")),
    };
    Ok(std::time::Duration::from_secs(seconds))
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
    /// The controller's region (aws); default: the cheapest that offers
    /// its instance.
    #[arg(long, value_name = "REGION", help_heading = "Controller")]
    controller_region: Option<String>,
    /// The controller's instance type (aws); default: SkyPilot's rule
    /// for its resources (4+ vCPUs, 4 GiB each), the cheapest on demand.
    #[arg(long, value_name = "TYPE", help_heading = "Controller")]
    controller_instance_type: Option<String>,
    /// The controller's disk, in GB (aws): its state lives there.
    #[arg(long, value_name = "GB", default_value_t = aws_controller::DEFAULT_DISK_GB, help_heading = "Controller")]
    controller_disk: u64,
    /// How long with nothing live and no client before the controller
    /// stops its instance (aws): `30s`, `10m`, `1h`; the next command
    /// that reaches it starts it again.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = duration, help_heading = "Controller")]
    pub(crate) controller_idle: std::time::Duration,
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

    /// The controller on AWS, as these options ask.
    pub(crate) fn aws(&self) -> aws_controller::Controller {
        aws_controller::Controller {
            region: self.controller_region.clone(),
            instance_type: self.controller_instance_type.clone(),
            disk_gb: self.controller_disk,
            idle_seconds: self.controller_idle.as_secs(),
        }
    }

    /// The controller's instance spec on AWS (`build --target aws
    /// --controller`).
    pub(crate) fn aws_spec(
        &self,
        catalog: &skyc_targets::cloud::Catalog,
    ) -> Result<serde_json::Value, String> {
        aws_controller::spec(&self.aws(), catalog)
    }
}

/// Runs a client's command line here; the process ends when the session
/// that asked for it does (its input closed): a client gone leaves
/// nothing running, `logs -f` included.
fn answer(args: &AnswerArgs) -> u8 {
    use clap::Parser;
    let cli = match super::Cli::try_parse_from(
        std::iter::once("skyc".to_owned()).chain(args.args.iter().cloned()),
    ) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { USAGE } else { OK };
        }
    };
    use super::pool::Command as Pool;
    let answered = match &cli.command {
        super::Command::Status(_)
        | super::Command::Logs(_)
        | super::Command::Cancel(_)
        | super::Command::Controller(Command::Follow(_))
        | super::Command::Pool(Pool::Status(_) | Pool::Down(_)) => true,
        // A file is planned by the client and accepted, never here.
        super::Command::Pool(Pool::Apply(apply)) => !apply.has_file(),
        // One request of the client's dashboard, never a server here.
        super::Command::Dashboard(dashboard) => dashboard.answers(),
        _ => false,
    };
    if !answered {
        errln!(
            "error: only status, logs, cancel, pool status|down|apply --workers, following \
             jobs and the dashboard's requests are answered for a client"
        );
        return USAGE;
    }
    // The replica that leads supervises; a command run for a client in a
    // pod that does not lead must not start a supervisor of its own.
    skyc_runtime::supervisor::never_start();
    // A client came: a controller that stops when idle is not idle.
    if let Some(dir) = args.args.iter().skip_while(|a| *a != "--state-dir").nth(1) {
        let seen = std::path::Path::new(dir).join(skyc_runtime::controller::aws::CLIENT_SEEN);
        let _ = std::fs::write(seen, b"");
    }
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
        std::process::exit(i32::from(CLIENT_GONE));
    });
    super::dispatch(cli.command)
}

/// The client that asked has gone.
const CLIENT_GONE: u8 = 130;

/// Records what a client planned (`skyc run|pool apply --state-dir
/// k8s://NS`), its stream on stdin; prints what was recorded.
fn accept(args: &AcceptArgs) -> u8 {
    use skyc_runtime::controller::submission::{self, Kind};
    if let Ok(dir) = args.state.local() {
        skyc_runtime::controller::aws::client_here(&dir);
    }
    let kind = match (args.pool, args.jobs) {
        (true, _) => Kind::Pool,
        (_, true) => Kind::Jobs,
        _ => Kind::Group,
    };
    let stdin = std::io::stdin();
    let accepted = args.state.local().and_then(|dir| match args.target {
        Where::K8s => submission::accept(&dir, stdin.lock(), kind, submission::on_kubernetes()),
        Where::Aws => {
            let accepted = submission::accept(&dir, stdin.lock(), kind, submission::on_aws(&dir))?;
            // One machine: the supervisor runs beside the command.
            skyc_runtime::supervisor::wake(&dir).map_err(|e| format!("supervisor: {e}"))?;
            Ok(accepted)
        }
    });
    match accepted {
        Ok(accepted) => {
            outln!("{}", accepted.answer());
            OK
        }
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

fn up(args: &UpArgs) -> u8 {
    use skyc_runtime::controller::install;
    if args.target == Where::Aws {
        return super::aws_controller::up(&args.aws, &args.controller);
    }
    let wait = std::time::Duration::from_secs(args.wait);
    let done = skyc_runtime::controller::with_cluster(
        args.cluster.context.as_deref(),
        args.cluster.namespace.as_deref(),
        |client, namespace| async move {
            let objects = args.controller.objects(Some(namespace.clone()))?;
            let (template, holder) = (
                install::template(&client, &namespace).await?,
                install::holder(&client, &namespace).await?,
            );
            let applied = install::apply(&client, &namespace, &objects).await?;
            for object in &applied {
                errln!("skyc: applied {object}");
            }
            // A changed pod template replaces the pods: a replica of the
            // update must lead, not the one leading before. (A change of
            // the replicas alone keeps the leader.)
            let before = match install::template(&client, &namespace).await? {
                now if template.is_some() && now != template => holder,
                _ => None,
            };
            let leader = install::leader(&client, &namespace, before.as_deref(), wait).await?;
            Ok((namespace, leader))
        },
    );
    match done {
        Ok((namespace, leader)) => {
            let state = args.cluster.state_dir(namespace.clone());
            errln!("skyc: the controller in {namespace} leads as {leader}");
            errln!("  submit to it:  skyc run FILE --target k8s --state-dir {state}");
            errln!("  its groups:    skyc status --state-dir {state}");
            OK
        }
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

/// The controller `remote` names, made first when SkyPilot's
/// configuration asks for one and none is there (on AWS reached as the
/// run reaches its nodes: `aws`'s SSH options).
pub(crate) fn ensure(remote: &Remote, aws: &super::aws::AwsArgs) -> Result<(), String> {
    match remote {
        Remote::Aws(on_aws) => {
            let (user, private) = aws.ssh();
            super::aws_controller::ensure_for_run(&on_aws.region, user, private)
        }
        Remote::K8s(k8s) => ensure_on_kubernetes(k8s),
    }
}

/// How long a controller made by a run may take to lead.
const MADE_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// The controller SkyPilot's configuration (`jobs.controller`) asks for,
/// made in the namespace of `k8s` by the first run (or pool) that needs
/// one, as SkyPilot starts its jobs controller on the first managed job:
/// when the namespace holds no controller's Deployment. Without that
/// configuration nothing is made, and the run says how to make one.
fn ensure_on_kubernetes(k8s: &skyc_runtime::controller::pods::K8s) -> Result<(), String> {
    use skyc_runtime::controller::install;
    // Nothing configured, nothing to make: the run reaches the controller
    // or says why not, as without this.
    let config = match super::sky_config::jobs_controller() {
        Ok(None) => return Ok(()),
        config => config,
    };
    let made = skyc_runtime::controller::with_cluster(
        k8s.context.as_deref(),
        Some(&k8s.namespace),
        |client, namespace| async move {
            // One that answers is there, whatever the configuration says
            // (found as every client command finds it, with the client's
            // rights).
            if skyc_runtime::controller::pods::leader(&client, &namespace)
                .await
                .is_ok()
            {
                return Ok(None);
            }
            let Some(config) = config? else {
                return Ok(None);
            };
            // There but not leading: the run says so, nothing is made.
            if install::template(&client, &namespace).await?.is_some() {
                return Ok(None);
            }
            let (wanted, notes) = config.on_kubernetes()?;
            for note in &notes {
                errln!("skyc: note: {}: jobs.controller: {note}", config.file);
            }
            errln!(
                "skyc: no controller in {namespace}: making the one {} configures \
                 (jobs.controller; image {}, `skyc controller up --controller-image` for \
                 another)",
                config.file,
                wanted.image
            );
            let objects = controller::objects(&Controller {
                namespace: Some(namespace.clone()),
                ..wanted
            })?;
            for object in install::apply(&client, &namespace, &objects).await? {
                errln!("skyc: applied {object}");
            }
            install::leader(&client, &namespace, None, MADE_WAIT)
                .await
                .map(Some)
        },
    )?;
    if let Some(leader) = made {
        errln!(
            "skyc: the controller in {} leads as {leader}",
            k8s.namespace
        );
    }
    Ok(())
}

fn down(args: &DownArgs) -> u8 {
    use skyc_runtime::controller::install::{self, Down};
    if args.target == Where::Aws {
        return super::aws_controller::down(&args.region, args.force);
    }
    let done = skyc_runtime::controller::with_cluster(
        args.cluster.context.as_deref(),
        args.cluster.namespace.as_deref(),
        |client, namespace| async move {
            install::down(&client, &namespace, args.purge, args.force)
                .await
                .map(|down| (namespace, down))
        },
    );
    match done {
        Ok((namespace, Down::Removed(removed))) => {
            if removed.is_empty() {
                errln!("skyc: no controller in {namespace}");
                return NOT_FOUND;
            }
            for object in removed {
                errln!("skyc: deleted {object}");
            }
            if !args.purge {
                errln!(
                    "skyc: kept persistentvolumeclaim/{} (its groups and logs; \
                     `--purge` deletes it)",
                    controller::CLAIM
                );
            }
            OK
        }
        Ok((namespace, Down::Live(live))) => refuse_live(
            &namespace,
            &live,
            &args.cluster.state_dir(namespace.clone()),
        ),
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

/// `down` refused: what is live on the controller `where_` (at `state`),
/// and how to end it.
pub(crate) fn refuse_live(where_: &str, live: &[String], state: &Remote) -> u8 {
    errln!("error: the controller in {where_} supervises what is live:");
    for line in live {
        errln!("  {line}");
    }
    errln!(
        "cancel them first: `skyc cancel --all --state-dir {state}`, \
         `skyc pool down --all --state-dir {state}`"
    );
    FAILED
}

/// The live groups and pools of a state directory, a line each: what
/// `controller down` refuses to end.
fn live(args: &LiveArgs) -> u8 {
    let listed = args.state.local().and_then(|dir| {
        let store = skyc_runtime::store::Store::open(&dir).map_err(|e| e.to_string())?;
        let live = store.live_groups().map_err(|e| e.to_string())?;
        live.into_iter()
            .filter_map(|id| store.group(id).transpose())
            .map(|g| g.map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()
    });
    match listed {
        Ok(groups) => {
            for g in groups {
                if g.kind != skyc_runtime::store::Kind::Worker {
                    outln!("{} {} ({}) {}", g.kind.as_str(), g.id, g.name, g.status);
                }
            }
            OK
        }
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}
