//! skyc's controller on AWS (docs/controller.md, "On AWS"): one instance
//! that runs skyc's supervisor on its own volume, made and reached from
//! the user's machine.
//!
//! - [`up`] makes what [`skyc_targets::cloud::controller::spec`] lists
//!   (the role, its policy and instance profile, the security group, the
//!   key pair, the instance), each found first so that `up` again
//!   changes nothing made; then delivers skyc itself over SSH and starts
//!   its service. A stopped controller is started again.
//! - [`Aws::session`] is how the command line reaches it: the instance
//!   found by its tag, started when stopped (a command after an idle stop
//!   starts it, as SkyPilot's does), then SSH as root with the key `up`
//!   made on this machine.
//! - [`serve`] is what runs there: the supervisor kept running while
//!   anything is live (a supervisor that died is started again), and the
//!   instance stopped once nothing has been live, and no client has come,
//!   for the idle time.
//! - [`down`] refuses while anything is live, then terminates the
//!   instance and deletes all the rest.

use super::remote::controller_argv;
use super::ssh::SshSession;
use crate::aws::control::ops;
use crate::aws::credentials::Access;
use crate::aws::ec2::client::{Ec2, Error, Tuning};
use crate::aws::ec2::query;
use crate::cloud::data::remote::{Command, RemoteError, Ssh};
use crate::cloud::instance::{Instance, State};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use skyc_targets::cloud::controller::{BINARY, ENVIRONMENT, NAME, SERVICE, STATE_DIR};
use skyc_targets::shell::single_quoted;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a state directory names the controller in an AWS region.
pub const SCHEME: &str = "aws://";

/// The controller of a region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Aws {
    pub region: String,
}

/// What the client keeps of how it reaches the controller, beside its
/// key (`up` writes it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The image's login user.
    pub user: String,
    /// Reach it at its private address (a client inside the VPC).
    pub private: bool,
    /// The skyc delivered to it (this machine's file).
    pub binary: PathBuf,
    /// What its service is started with.
    pub environment: Vec<(String, String)>,
}

/// The shortest idle time a controller is given.
pub const MIN_IDLE: Duration = Duration::from_secs(10);

/// How long the instance may take to run, and its SSH to answer.
const BOOT: Duration = Duration::from_secs(600);

/// Between two looks at an instance that is changing state.
const POLL: Duration = Duration::from_millis(500);

/// The environment a client's own passes on to the controller: where it
/// reaches AWS (a VPC endpoint, a stand-in), so the controller reaches
/// the same. Never a credential: the controller has its instance
/// profile.
const FORWARDED: [&str; 6] = [
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_EC2",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_STS",
    "AWS_ENDPOINT_URL_IAM",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT",
];

impl Aws {
    /// `REGION`, what follows [`SCHEME`] in `s`.
    pub(super) fn parse(s: &str, rest: &str) -> Result<Self, String> {
        let region = !rest.is_empty()
            && rest.len() <= 32
            && rest
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && rest.contains('-')
            && !rest.starts_with('-')
            && !rest.ends_with('-');
        if region {
            Ok(Self {
                region: rest.to_owned(),
            })
        } else {
            Err(format!(
                "`{s}`: a controller's state is `aws://REGION`, REGION an AWS region's name"
            ))
        }
    }

    /// Where this machine keeps the controller's key and [`Record`].
    pub fn dir(&self) -> PathBuf {
        crate::store::user_state_dir()
            .join("controllers")
            .join(format!("aws-{}", self.region))
    }

    fn record(&self) -> Result<Record, String> {
        let path = self.dir().join("controller.json");
        let text = std::fs::read_to_string(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "this machine has not brought the controller up (no {}): \
                     `skyc controller up --target aws --controller-region {}`",
                    path.display(),
                    self.region
                )
            } else {
                format!("{}: {e}", path.display())
            }
        })?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn ssh(&self, record: &Record) -> Result<Ssh, String> {
        let dir = self.dir();
        let sockets = crate::cloud::data::remote::ssh_dir(&dir)
            .map_err(|e| format!("the controller's SSH directory: {e}"))?;
        Ok(Ssh {
            key: dir.join("id_ed25519").display().to_string(),
            dir: sockets.display().to_string(),
            user: record.user.clone(),
            port: None,
        })
    }

    /// A session with the controller: its instance started when it is
    /// stopped (its service started with it).
    pub(super) fn session(&self) -> Result<SshSession, String> {
        let cloud = Cloud::connect(&self.region)?;
        let instance = cloud
            .rt
            .block_on(find(&cloud.ec2, &self.region))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| {
                format!(
                    "no controller runs in {} (`skyc controller up --target aws \
                     --controller-region {}`)",
                    self.region, self.region
                )
            })?;
        self.session_with(&cloud, instance)
    }

    /// [`Aws::session`] with the instance `cloud` found.
    fn session_with(&self, cloud: &Cloud, instance: Instance) -> Result<SshSession, String> {
        let record = self.record()?;
        let ssh = self.ssh(&record)?;
        let (instance, started) = cloud.running(instance)?;
        let address = address(&instance, record.private)?;
        if started {
            eprintln!(
                "skyc: the controller's instance {} was stopped: started it again",
                instance.id
            );
            wait_ssh(&ssh, &instance.id, &address)?;
            deliver(&ssh, &instance, &record, &self.region)?;
        }
        Ok(SshSession {
            ssh,
            instance: instance.id,
            address,
        })
    }
}

/// As the command line names it: `aws://REGION`.
impl std::fmt::Display for Aws {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}", self.region)
    }
}

/// The region's EC2 and IAM, with the user's own credentials.
struct Cloud {
    rt: tokio::runtime::Runtime,
    ec2: Ec2,
    iam: Ec2,
}

impl Cloud {
    fn connect(region: &str) -> Result<Cloud, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the AWS client: {e}"))?;
        let (access, chain) = Access::from_env().map_err(|e| e.to_string())?;
        let fetched = rt
            .block_on(chain.fetch(&access, region))
            .map_err(|e| format!("cannot get AWS credentials from {}: {e}", chain.describe()))?;
        let settings = access.settings(fetched.credentials, &chain);
        let ec2 =
            Ec2::new(&settings, Some(region), Tuning::default()).map_err(|e| e.to_string())?;
        let iam = Ec2::iam(
            &settings,
            region,
            access.iam_endpoint.as_deref(),
            Tuning::default(),
        )
        .map_err(|e| e.to_string())?;
        Ok(Cloud { rt, ec2, iam })
    }

    /// `instance` running: started when stopped, waited for when it is
    /// changing state; whether this started it.
    fn running(&self, mut instance: Instance) -> Result<(Instance, bool), String> {
        let mut started = false;
        let deadline = Instant::now() + BOOT;
        loop {
            match instance.state {
                Some(State::Running) if address(&instance, false).is_ok() => {
                    return Ok((instance, started));
                }
                Some(State::Stopped) => {
                    let mut p = query::action("StartInstances");
                    query::list(&mut p, "InstanceId", &[&instance.id]);
                    self.rt
                        .block_on(self.ec2.call(&p))
                        .map_err(|e| e.to_string())?;
                    started = true;
                }
                Some(s) if s.is_ending() => {
                    return Err(format!(
                        "the controller's instance {} is {}",
                        instance.id,
                        s.as_str()
                    ));
                }
                _ => {}
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the controller's instance {} is not running after {} s",
                    instance.id,
                    BOOT.as_secs()
                ));
            }
            std::thread::sleep(POLL);
            instance = self
                .rt
                .block_on(described(&self.ec2, &instance.id))
                .map_err(|e| e.to_string())?;
        }
    }
}

/// The controller's instance in `region` (tagged [`NAME`] with the
/// region), unless terminated.
async fn find(ec2: &Ec2, region: &str) -> Result<Option<Instance>, Error> {
    let mut all = ops::instances_tagged(ec2, NAME, region).await?;
    all.retain(|i| !i.state.is_some_and(State::is_ending));
    all.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(all.into_iter().next())
}

async fn described(ec2: &Ec2, id: &str) -> Result<Instance, Error> {
    let mut p = query::action("DescribeInstances");
    query::list(&mut p, "InstanceId", &[id]);
    let body = ec2.call(&p).await?;
    let (mut list, _) =
        crate::aws::ec2::response::instances(&body).map_err(|e| Error::Response {
            service: "EC2",
            action: "DescribeInstances".into(),
            why: e.0,
        })?;
    list.pop().ok_or_else(|| Error::Response {
        service: "EC2",
        action: "DescribeInstances".into(),
        why: format!("no instance {id}"),
    })
}

/// The address the client reaches the instance at.
fn address(instance: &Instance, private: bool) -> Result<String, String> {
    let address = if private {
        instance.private_ip.clone()
    } else {
        instance
            .public_ip
            .clone()
            .or_else(|| instance.private_ip.clone())
    };
    address.ok_or_else(|| format!("instance {} has no address yet", instance.id))
}

/// Waits until the instance's SSH answers.
fn wait_ssh(ssh: &Ssh, id: &str, address: &str) -> Result<(), String> {
    let deadline = Instant::now() + BOOT;
    let probe = Command {
        script: "true".into(),
        stdin: Vec::new(),
    };
    loop {
        match ssh.run(id, address, &probe, Duration::from_secs(30)) {
            Ok(_) => return Ok(()),
            Err(e @ (RemoteError::Spawn(_) | RemoteError::Failed { .. })) => {
                return Err(format!("instance {id}: {e}"));
            }
            Err(RemoteError::Unreachable(why)) if why.contains("Permission denied") => {
                return Err(format!(
                    "instance {id} refuses this machine's key ({why}): the key pair {NAME} was \
                     imported by another machine's `skyc controller up`"
                ));
            }
            Err(e) if Instant::now() > deadline => {
                return Err(format!("instance {id} at {address}: {e}"));
            }
            Err(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}

/// The SHA-256 of a file, in hex.
fn sha256(path: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    Ok(ctx
        .finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Gives the controller skyc (unless it has these very bytes, or the
/// file is gone from this machine: the one there is kept) and its
/// service's environment, then starts its service (restarted only when
/// either changed: a supervisor at work is left alone).
fn deliver(ssh: &Ssh, instance: &Instance, record: &Record, region: &str) -> Result<(), String> {
    let id = &instance.id;
    let address = &address(instance, record.private)?;
    let run = |command: &Command, timeout: u64| {
        ssh.run(id, address, command, Duration::from_secs(timeout))
            .map_err(|e| format!("instance {id}: {e}"))
    };
    let bin = single_quoted(BINARY);
    let held = run(
        &Command {
            script: format!("sha256sum {bin} 2>/dev/null || true"),
            stdin: Vec::new(),
        },
        60,
    )?;
    match sha256(&record.binary) {
        Ok(ours) if held.split_whitespace().next() != Some(ours.as_str()) => {
            let tmp = single_quoted(&format!("{BINARY}.tmp"));
            let dir = single_quoted(&format!("{STATE_DIR}/bin"));
            let command = Command {
                script: format!(
                    "umask 077 && mkdir -p {dir} && cat > {tmp} && chmod 0755 {tmp} && mv -f {tmp} {bin}"
                ),
                stdin: Vec::new(),
            };
            // Streamed from the file, never held whole.
            let file = std::fs::File::open(&record.binary)
                .map_err(|e| format!("{}: {e}", record.binary.display()))?;
            let argv = ssh.argv(id, address, &command);
            let out = std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(file)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .output()
                .map_err(|e| format!("cannot run ssh: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "instance {id}: delivering skyc: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        Ok(_) => {}
        Err(e) if held.trim().is_empty() => return Err(e),
        Err(e) => eprintln!("skyc: note: {e}: the controller keeps the skyc it has"),
    }
    // Where the runs' nodes see the controller's SSH come from, by the
    // address each run reaches its nodes at (a public one changes with
    // each start).
    let private = instance.private_ip.as_deref().unwrap_or(address);
    let public = instance.public_ip.as_deref().unwrap_or(private);
    let mut environment = format!(
        "SKYC_CONTROLLER_REGION={region}\nSKYC_CONTROLLER_INSTANCE={id}\n\
         SKYC_CONTROLLER_PRIVATE_IP={private}\nSKYC_CONTROLLER_PUBLIC_IP={public}\n"
    );
    for (k, v) in &record.environment {
        environment.push_str(&format!("{k}={v}\n"));
    }
    let env = single_quoted(ENVIRONMENT);
    let env_tmp = single_quoted(&format!("{ENVIRONMENT}.tmp"));
    run(
        &Command {
            // Replaced only when it differs: its time tells `start`
            // whether the service must take it.
            script: format!(
                "umask 077 && cat > {env_tmp} && if cmp -s {env_tmp} {env}; then rm -f {env_tmp}; \
                 else mv -f {env_tmp} {env}; fi"
            ),
            stdin: environment.into_bytes(),
        },
        60,
    )?;
    let start = super::ssh::script(&controller_argv("start", &[]));
    run(
        &Command {
            script: start,
            stdin: Vec::new(),
        },
        120,
    )?;
    Ok(())
}

/// What `controller up --target aws` is asked.
pub struct Up {
    pub region: String,
    /// `skyc build --target aws --controller`'s document.
    pub spec: Value,
    pub user: String,
    pub private: bool,
    /// The skyc to deliver (a static executable for the instance's OS).
    pub binary: PathBuf,
    pub idle: Duration,
}

/// Where `up` left the controller.
pub struct Upped {
    pub instance: String,
    pub address: String,
    /// What `up` made (none when everything was there).
    pub made: Vec<String>,
}

/// A value a service's environment file can hold on one line.
fn env_value(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 1024
        && v.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\'' && b != b'\\')
}

/// Makes the controller of `up.region` (what is there already is kept),
/// delivers skyc and starts it.
pub fn up(up: &Up) -> Result<Upped, String> {
    let remote = Aws {
        region: up.region.clone(),
    };
    let dir = remote.dir();
    let key = dir.join("id_ed25519");
    if !key.exists() {
        crate::aws::plan::make_key(&dir, NAME)?;
    }
    let public_key = std::fs::read_to_string(key.with_extension("pub"))
        .map_err(|e| format!("{}: {e}", key.display()))?;
    let mut environment = vec![(
        "SKYC_CONTROLLER_IDLE_SECONDS".to_owned(),
        up.idle.as_secs().to_string(),
    )];
    for k in FORWARDED {
        if let Ok(v) = std::env::var(k)
            && !v.is_empty()
        {
            if !env_value(&v) {
                return Err(format!("${k} cannot be passed on to the controller: `{v}`"));
            }
            environment.push((k.to_owned(), v));
        }
    }
    let binary =
        std::path::absolute(&up.binary).map_err(|e| format!("{}: {e}", up.binary.display()))?;
    sha256(&binary)?;
    let cloud = Cloud::connect(&up.region)?;
    let mut made = Vec::new();
    let instance = cloud.rt.block_on(async {
        for request in up.spec["requests"].as_array().into_iter().flatten() {
            let operation = request["operation"].as_str().unwrap_or_default();
            if operation == "RunInstances" {
                // The key pair first: the launch names it.
                if import_key(&cloud.ec2, public_key.trim()).await? {
                    made.push(format!("key pair {NAME}"));
                }
                if let Some(found) = find(&cloud.ec2, &up.region)
                    .await
                    .map_err(|e| e.to_string())?
                {
                    return Ok(found);
                }
                let launched = launch(&cloud.ec2, &request["request"]).await?;
                made.push(format!("instance {}", launched.id));
                return Ok(launched);
            }
            if let Some(what) = make(&cloud, operation, &request["request"]).await? {
                made.push(what);
            }
        }
        Err("the controller's spec has no RunInstances".to_owned())
    })?;
    let (instance, _) = cloud.running(instance)?;
    let record = Record {
        user: up.user.clone(),
        private: up.private,
        binary,
        environment,
    };
    let address = address(&instance, up.private)?;
    std::fs::write(
        dir.join("controller.json"),
        serde_json::to_string_pretty(&record).unwrap_or_default(),
    )
    .map_err(|e| format!("{}: {e}", dir.display()))?;
    let ssh = remote.ssh(&record)?;
    wait_ssh(&ssh, &instance.id, &address)?;
    deliver(&ssh, &instance, &record, &up.region)?;
    Ok(Upped {
        instance: instance.id,
        address,
        made,
    })
}

/// Imports the controller's key pair; whether it was not there.
async fn import_key(ec2: &Ec2, public_key: &str) -> Result<bool, String> {
    use base64::Engine as _;
    let mut p = query::action("ImportKeyPair");
    p.push(("KeyName".into(), NAME.into()));
    p.push((
        "PublicKeyMaterial".into(),
        base64::engine::general_purpose::STANDARD.encode(public_key),
    ));
    p.push(("TagSpecification.1.ResourceType".into(), "key-pair".into()));
    p.push(("TagSpecification.1.Tag.1.Key".into(), NAME.into()));
    p.push(("TagSpecification.1.Tag.1.Value".into(), ec2.region().into()));
    match ec2.call(&p).await {
        Ok(_) => Ok(true),
        Err(e) if e.code() == Some("InvalidKeyPair.Duplicate") => Ok(false),
        Err(e) => Err(e.to_string()),
    }
}

/// Launches the controller's instance; an instance profile IAM has not
/// spread to EC2 yet is tried again (for up to a minute, as IAM is
/// eventually consistent).
async fn launch(ec2: &Ec2, request: &Value) -> Result<Instance, String> {
    let mut request = request.clone();
    request["ClientToken"] = serde_json::json!(format!("{NAME}-{}", crate::store::now_ms()));
    let params = query::serialize("RunInstances", &request).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match ec2.call(&params).await {
            Ok(body) => {
                let (mut list, _) = crate::aws::ec2::response::instances(&body)
                    .map_err(|e| format!("RunInstances: {}", e.0))?;
                return list
                    .pop()
                    .ok_or_else(|| "RunInstances gave no instance".to_owned());
            }
            Err(e)
                if e.code() == Some("InvalidParameterValue")
                    && e.to_string()
                        .to_ascii_lowercase()
                        .contains("instance profile")
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Sends one of the spec's requests before the launch; what it made,
/// `None` when that was there already.
async fn make(cloud: &Cloud, operation: &str, request: &Value) -> Result<Option<String>, String> {
    let (client, params) = match operation {
        "CreateSecurityGroup" | "AuthorizeSecurityGroupIngress" => (
            &cloud.ec2,
            query::serialize(operation, request).map_err(|e| e.to_string())?,
        ),
        _ => (&cloud.iam, iam_params(operation, request)?),
    };
    let what = match operation {
        "CreateRole" => format!("role {NAME}"),
        "CreateInstanceProfile" => format!("instance profile {NAME}"),
        "AddRoleToInstanceProfile" => format!("role {NAME} in its instance profile"),
        "CreateSecurityGroup" => format!("security group {NAME}"),
        _ => format!("{NAME}'s SSH rule"),
    };
    match client.call(&params).await {
        // The policy is set every time (to this skyc's): nothing made.
        Ok(_) if operation == "PutRolePolicy" => Ok(None),
        Ok(_) => Ok(Some(what)),
        Err(e)
            if matches!(
                e.code(),
                Some(
                    "EntityAlreadyExists"
                        | "InvalidGroup.Duplicate"
                        | "InvalidPermission.Duplicate"
                )
            ) || (operation == "AddRoleToInstanceProfile"
                && e.code() == Some("LimitExceeded")) =>
        {
            Ok(None)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// An IAM request as Query parameters: its members flat, `Tags` as
/// `Tags.member.N.Key`/`Value`.
fn iam_params(operation: &str, request: &Value) -> Result<Vec<(String, String)>, String> {
    let mut p = vec![
        ("Action".to_owned(), operation.to_owned()),
        ("Version".to_owned(), "2010-05-08".to_owned()),
    ];
    for (k, v) in request.as_object().into_iter().flatten() {
        match v {
            Value::String(s) => p.push((k.clone(), s.clone())),
            Value::Array(tags) if k == "Tags" => {
                for (i, t) in tags.iter().enumerate() {
                    let n = i + 1;
                    p.push((
                        format!("Tags.member.{n}.Key"),
                        t["Key"].as_str().unwrap_or_default().to_owned(),
                    ));
                    p.push((
                        format!("Tags.member.{n}.Value"),
                        t["Value"].as_str().unwrap_or_default().to_owned(),
                    ));
                }
            }
            _ => return Err(format!("{operation}: {k} cannot be sent")),
        }
    }
    Ok(p)
}

/// The controller as AWS shows it (`controller status --target aws`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Status {
    pub region: String,
    pub instance: String,
    pub state: String,
    pub instance_type: String,
    pub address: Option<String>,
}

/// The controller of `region`; `None` when there is none.
pub fn status(region: &str) -> Result<Option<Status>, String> {
    let cloud = Cloud::connect(region)?;
    let found = cloud
        .rt
        .block_on(find(&cloud.ec2, region))
        .map_err(|e| e.to_string())?;
    Ok(found.map(|i| Status {
        region: region.to_owned(),
        state: i.state.map_or("unknown", State::as_str).to_owned(),
        instance_type: i.instance_type.clone(),
        address: i.public_ip.clone().or(i.private_ip.clone()),
        instance: i.id,
    }))
}

/// What `down` did.
pub enum Down {
    /// What it deleted.
    Removed(Vec<String>),
    /// What is live (a line each): nothing was deleted.
    Live(Vec<String>),
}

/// Removes the controller of `region`: refused while it supervises
/// anything live (unless `force`, which does not ask); the instance
/// (and its state with its volume), then the security group, the key
/// pair, the instance profile and the role.
pub fn down(region: &str, force: bool) -> Result<Down, String> {
    let remote = Aws {
        region: region.to_owned(),
    };
    let cloud = Cloud::connect(region)?;
    let found = cloud
        .rt
        .block_on(find(&cloud.ec2, region))
        .map_err(|e| e.to_string())?;
    if let Some(instance) = &found
        && !force
    {
        let mut session = remote.session_with(&cloud, instance.clone())?;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = super::remote::Session::exec(
            &mut session,
            controller_argv("live", &[]),
            None,
            &mut out,
            &mut err,
        )?;
        if code != 0 {
            return Err(format!(
                "instance {} could not say what is live: {}",
                instance.id,
                String::from_utf8_lossy(&err).trim()
            ));
        }
        let live: Vec<String> = String::from_utf8_lossy(&out)
            .lines()
            .map(str::to_owned)
            .collect();
        if !live.is_empty() {
            return Ok(Down::Live(live));
        }
    }
    let mut removed = Vec::new();
    cloud.rt.block_on(async {
        if let Some(instance) = &found {
            ops::terminate(&cloud.ec2, std::slice::from_ref(&instance.id))
                .await
                .map_err(|e| e.to_string())?;
            removed.push(format!("instance {}", instance.id));
        }
        // The group is in use until the instance has ended.
        let deadline = Instant::now() + BOOT;
        loop {
            let mut p = query::action("DeleteSecurityGroup");
            p.push(("GroupName".into(), NAME.into()));
            match cloud.ec2.call(&p).await {
                Ok(_) => {
                    removed.push(format!("security group {NAME}"));
                    break;
                }
                Err(e) if e.code() == Some("InvalidGroup.NotFound") => break,
                Err(e) if e.code() == Some("DependencyViolation") && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        let mut p = query::action("DescribeKeyPairs");
        query::filters(&mut p, &[("key-name", &[NAME])]);
        let keys = cloud.ec2.call(&p).await.map_err(|e| e.to_string())?;
        if keys.contains("<keyName>") {
            let mut p = query::action("DeleteKeyPair");
            p.push(("KeyName".into(), NAME.into()));
            cloud.ec2.call(&p).await.map_err(|e| e.to_string())?;
            removed.push(format!("key pair {NAME}"));
        }
        for (operation, extra, what) in [
            (
                "RemoveRoleFromInstanceProfile",
                Some(("InstanceProfileName", NAME)),
                None,
            ),
            (
                "DeleteInstanceProfile",
                Some(("InstanceProfileName", NAME)),
                Some(format!("instance profile {NAME}")),
            ),
            ("DeleteRolePolicy", Some(("PolicyName", NAME)), None),
            ("DeleteRole", None, Some(format!("role {NAME}"))),
        ] {
            let mut p = vec![
                ("Action".to_owned(), operation.to_owned()),
                ("Version".to_owned(), "2010-05-08".to_owned()),
            ];
            if operation != "DeleteInstanceProfile" {
                p.push(("RoleName".into(), NAME.into()));
            }
            if let Some((k, v)) = extra {
                p.push((k.into(), v.into()));
            }
            match cloud.iam.call(&p).await {
                Ok(_) => removed.extend(what),
                Err(e) if e.code() == Some("NoSuchEntity") => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok::<_, String>(())
    })?;
    let _ = std::fs::remove_dir_all(remote.dir());
    Ok(Down::Removed(removed))
}

/// What [`serve`] is told by its environment (the file the client
/// writes, [`ENVIRONMENT`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Serving {
    pub region: String,
    pub instance: String,
    /// Nothing live and no client for this long: the instance stops.
    pub idle: Duration,
}

impl Serving {
    /// From the service's environment; `None` with what is missing.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Serving, String> {
        let get = |k: &str| {
            var(k)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("${k} is not set"))
        };
        let idle = get("SKYC_CONTROLLER_IDLE_SECONDS")?;
        Ok(Serving {
            region: get("SKYC_CONTROLLER_REGION")?,
            instance: get("SKYC_CONTROLLER_INSTANCE")?,
            idle: Duration::from_secs(
                idle.parse().map_err(|_| {
                    format!("$SKYC_CONTROLLER_IDLE_SECONDS: `{idle}` is not a number")
                })?,
            ),
        })
    }
}

/// The file a command run for a client touches: the controller is not
/// idle while clients come.
pub const CLIENT_SEEN: &str = "client.seen";

/// Says that a client is here, for as long as this process runs: the
/// controller's service counts the time since the file was last touched
/// as idle (on a controller that does not stop when idle, a file no one
/// reads).
pub fn client_here(dir: &Path) {
    let seen = dir.join(CLIENT_SEEN);
    if std::fs::write(&seen, b"").is_err() {
        return;
    }
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(LOOK);
            if let Ok(f) = std::fs::File::options().write(true).open(&seen) {
                let _ = f.set_modified(std::time::SystemTime::now());
            }
        }
    });
}

/// How often [`serve`] looks.
const LOOK: Duration = Duration::from_secs(2);

/// Keeps the supervisor of `dir` running while anything is live, and
/// stops the instance once nothing has been live, and no client has
/// come, for `serving.idle`. Returns when `stop` is set.
pub fn serve(
    dir: &Path,
    serving: &Serving,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<(), String> {
    use std::sync::atomic::Ordering;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("controller.lock"))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return Err(format!("another controller serves {}", dir.display()));
    }
    crate::paths::write_atomic(dir, "controller.pid", &std::process::id().to_string())
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    crate::supervisor::log(format_args!(
        "serving {} as instance {} in {}; stopped after {} s idle",
        dir.display(),
        serving.instance,
        serving.region,
        serving.idle.as_secs()
    ));
    let mut active = Instant::now();
    let mut stopped_at: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        let live = crate::store::Store::open(dir)
            .and_then(|s| s.live_groups())
            .map(|l| !l.is_empty())
            .unwrap_or(true);
        let supervising = held(&dir.join("supervisor.lock"));
        if live && !supervising {
            match crate::supervisor::wake(dir) {
                Ok(()) => crate::supervisor::log("started the supervisor: a group is live"),
                Err(e) => crate::supervisor::log(format_args!("cannot start the supervisor: {e}")),
            }
        }
        // A client's last command, by the file it touches while it runs.
        let seen = std::fs::metadata(dir.join(CLIENT_SEEN))
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .and_then(|ago| Instant::now().checked_sub(ago));
        if live || supervising {
            active = Instant::now();
        } else if let Some(seen) = seen
            && seen > active
        {
            active = seen;
        }
        if active.elapsed() < LOOK {
            stopped_at = None;
        }
        let due = active.elapsed() >= serving.idle
            && stopped_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(60));
        if due {
            match stop_instance(serving) {
                Ok(()) => crate::supervisor::log(format_args!(
                    "idle for {} s: stopping instance {}",
                    serving.idle.as_secs(),
                    serving.instance
                )),
                Err(e) => crate::supervisor::log(format_args!(
                    "idle, but cannot stop instance {}: {e}",
                    serving.instance
                )),
            }
            stopped_at = Some(Instant::now());
        }
        std::thread::sleep(LOOK);
    }
    Ok(())
}

/// Whether a process holds the lock `path` (a supervisor its state
/// directory's): asked without a word to it (a client's wake-up would
/// keep it busy).
fn held(path: &Path) -> bool {
    std::fs::File::open(path).is_ok_and(|f| {
        rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared).is_err()
    })
}

/// Stops the controller's own instance, with its instance profile's
/// credentials.
fn stop_instance(serving: &Serving) -> Result<(), String> {
    let cloud = Cloud::connect(&serving.region)?;
    let mut p = query::action("StopInstances");
    query::list(&mut p, "InstanceId", &[&serving.instance]);
    cloud
        .rt
        .block_on(cloud.ec2.call(&p))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Starts the controller's service here: through systemd when it runs
/// the machine (the unit the boot script installed, restarted so a new
/// skyc or environment is taken), else as a process of its own (a
/// machine without systemd), the one running first told to stop.
pub fn start(dir: &Path, environment: &Path) -> Result<(), String> {
    // Restarted when skyc or its environment is newer than the one
    // serving (its pid file's time), else left as it is.
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let started = modified(&dir.join("controller.pid"));
    let serving = held(&dir.join("controller.lock"));
    let changed = [Path::new(BINARY), environment]
        .iter()
        .any(|p| modified(p) > started);
    if Path::new("/run/systemd/system").is_dir() {
        let verb = if changed { "restart" } else { "start" };
        let out = std::process::Command::new("systemctl")
            .args([verb, SERVICE])
            .output()
            .map_err(|e| format!("systemctl: {e}"))?;
        return if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "systemctl {verb} {SERVICE}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        };
    }
    if serving && !changed {
        return Ok(());
    }
    // The one serving holds the lock: it is told to stop (and waited
    // for). A pid whose process does not hold it (a machine started
    // again) is left alone.
    if serving
        && let Some(pid) = std::fs::read_to_string(dir.join("controller.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
            .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        for _ in 0..200 {
            if !held(&dir.join("controller.lock")) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let text = std::fs::read_to_string(environment)
        .map_err(|e| format!("{}: {e}", environment.display()))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("supervisor.log"))
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut command =
        std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
    command
        .args(["controller", "serve", "--target", "aws", "--state-dir"])
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    for line in text.lines() {
        if let Some((k, v)) = line.split_once('=') {
            command.env(k, v);
        }
    }
    // Out of the process group of the SSH command that started it.
    {
        use std::os::unix::process::CommandExt as _;
        command.process_group(0);
    }
    let child = command
        .spawn()
        .map_err(|e| format!("cannot start the controller: {e}"))?;
    std::thread::sleep(Duration::from_millis(300));
    drop(child);
    Ok(())
}

/// The service's environment as the client wrote it ([`ENVIRONMENT`] of
/// `dir`): `KEY=VALUE` lines.
pub fn environment(dir: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(dir.join("controller.env"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// A group a client planned for AWS, made this controller's
/// ([`crate::aws::RunPlan::for_controller`]): its key made here, its
/// nodes' SSH opened to this instance, its credentials this instance's
/// profile, found as the service's environment says (the endpoints the
/// client reached AWS at).
pub fn admit(dir: &Path, plan: &str) -> Result<String, String> {
    let mut run: crate::aws::RunPlan =
        serde_json::from_str(plan).map_err(|e| format!("the group's plan: {e}"))?;
    make_own(dir, &mut run)?;
    serde_json::to_string(&run).map_err(|e| e.to_string())
}

/// A pool a client planned for AWS, its workers' run made this
/// controller's as a group's is ([`admit`]).
pub fn admit_pool(dir: &Path, plan: &str) -> Result<String, String> {
    let mut pool: crate::aws::PoolPlan =
        serde_json::from_str(plan).map_err(|e| format!("the pool's plan: {e}"))?;
    make_own(dir, &mut pool.worker)?;
    // Each worker makes its own key (`RunPlan::for_worker`): the run's
    // is not needed.
    if let Some(run_dir) = pool.worker.key.parent() {
        let _ = std::fs::remove_dir_all(run_dir);
    }
    serde_json::to_string(&pool).map_err(|e| e.to_string())
}

fn make_own(dir: &Path, run: &mut crate::aws::RunPlan) -> Result<(), String> {
    let env = environment(dir);
    let var = |k: &str| {
        env.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var(k).ok())
    };
    let (access, _) = Access::resolve(&var, &crate::aws::credentials::files::read_file)
        .map_err(|e| e.to_string())?;
    let from = if run.private {
        var("SKYC_CONTROLLER_PRIVATE_IP")
    } else {
        var("SKYC_CONTROLLER_PUBLIC_IP")
    };
    run.for_controller(dir, from.map(|ip| format!("{ip}/32")), access)
}
