//! The AWS backend: the supervisor's [`Backend`] for groups run on EC2.
//!
//! Each group is one thread: every [`POLL`] (or at once when the engine
//! decides something) it reads the run's world, runs the data plane over
//! the running nodes ([`DataPlane::step`]: hosts, exits, logs over SSH,
//! blocking), then one control-plane [`pass`] from the engine's latest
//! state, and sends what they found to the supervisor through a channel
//! and a byte in the wake pipe, as the Kubernetes backend does. The
//! thread holds nothing EC2, the store and the group's directory do not
//! also hold: a new supervisor adopts with the committed engine, finds
//! the run's instances by their `skyc-run` tag and goes on (logs are read
//! again from their start).

use super::plan::{Plan, RunPlan};
use crate::aws::control::ops;
use crate::aws::control::pass::pass;
use crate::aws::credentials::{Keeper, Step};
use crate::aws::data::plane::DataPlane;
use crate::aws::data::remote::Ssh;
use crate::aws::ec2::client::{Ec2, Tuning};
use crate::aws::ec2::retry;
use crate::aws::ec2::sigv4::Credentials;
use crate::backend::{Adoption, Backend, NodeInfo, Report};
use crate::goal::Goal;
use crate::outbox::{Out, Outbox};
use crate::policy::{Action, Engine};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// Between two passes over a group, when nothing happens.
pub const POLL: Duration = Duration::from_secs(3);

/// How long one command on a node may take.
const SSH_TIMEOUT: Duration = Duration::from_secs(30);

/// What a group's thread hears.
enum Msg {
    Goal(Goal),
    Release,
}

pub struct Aws {
    state_dir: PathBuf,
    groups: BTreeMap<i64, mpsc::Sender<Msg>>,
    outbox: Outbox,
    /// The tuning of every group's client (tests make it short).
    tuning: Tuning,
}

impl Aws {
    /// The backend; group logs go under `state_dir`'s group directories.
    pub fn start(state_dir: PathBuf) -> io::Result<Aws> {
        Ok(Aws {
            state_dir,
            groups: BTreeMap::new(),
            outbox: Outbox::new()?,
            tuning: Tuning::default(),
        })
    }

    fn to(&self, gid: i64, msg: Msg) {
        if let Some(tx) = self.groups.get(&gid) {
            let _ = tx.send(msg);
        }
    }
}

impl Drop for Aws {
    fn drop(&mut self) {
        // A dropped sender ends each group's thread at its next wait.
        self.groups.clear();
    }
}

/// A directory for the run's `known_hosts` and SSH connection sockets:
/// the group's own when its path is short enough for a socket's (107
/// bytes, with `cm-` and 64 hex digits), else one under the temporary
/// directory, private to this user, named after the group's directory.
fn ssh_dir(group_dir: &Path) -> io::Result<PathBuf> {
    let own = group_dir.join("ssh");
    let dir = if own.as_os_str().len() <= 36 {
        std::fs::create_dir_all(group_dir)?;
        own
    } else {
        use std::os::unix::ffi::OsStrExt as _;
        let uid = rustix::process::getuid().as_raw();
        let hash = ring::digest::digest(&ring::digest::SHA256, group_dir.as_os_str().as_bytes());
        let hex = crate::aws::ec2::sigv4::hex(hash.as_ref());
        std::env::temp_dir().join(format!("skyc-ssh-{uid}-{}", &hex[..16]))
    };
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    if !meta.is_dir() || meta.uid() != rustix::process::getuid().as_raw() {
        return Err(io::Error::other(format!(
            "{} is not this user's directory",
            dir.display()
        )));
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}

impl Backend for Aws {
    fn adopt(&mut self, gid: i64, adoption: &Adoption<'_>) -> Result<(), String> {
        let run: RunPlan = serde_json::from_str(adoption.plan)
            .map_err(|e| format!("the group's AWS plan: {e}"))?;
        // No credentials yet: the group's thread gets them from the run's
        // source before its first call.
        let unsigned = Credentials {
            access_key_id: String::new(),
            secret_access_key: String::new(),
            session_token: None,
        };
        let settings = crate::aws::ec2::config::Settings {
            profile: run.access.profile.clone(),
            credentials: unsigned,
            credentials_source: String::new(),
            region: run.access.region.clone(),
            endpoint: run.access.endpoint.clone(),
        };
        let ec2 =
            Ec2::new(&settings, Some(&run.plan.region), self.tuning).map_err(|e| e.to_string())?;
        let group_dir = crate::paths::group_dir(&self.state_dir, gid);
        let dir = ssh_dir(&group_dir).map_err(|e| format!("the run's SSH directory: {e}"))?;
        let mut data = DataPlane::new(
            Ssh {
                key: run.key.display().to_string(),
                dir: dir.display().to_string(),
                user: run.user.clone(),
                port: run.port,
            },
            skyc_targets::cloud::NODE_DIR.to_owned(),
            group_dir.join("logs"),
            SSH_TIMEOUT,
        );
        data.secrets = run.secrets.clone();
        data.private = run.private;
        let (tx, rx) = mpsc::channel();
        let out = self.outbox.post().out(gid);
        let region = run.plan.region.clone();
        let group = Group {
            plan: run.plan,
            goal: Goal::from_engine(adoption.engine),
            ec2,
            keeper: Keeper::new(run.access, region),
            data,
            out,
            sent_nodes: BTreeMap::new(),
            sent_events: BTreeSet::new(),
            sent_errors: BTreeSet::new(),
            outage: None,
            settled: false,
        };
        std::thread::Builder::new()
            .name(format!("skyc-aws-{gid}"))
            .spawn(move || group.run(rx))
            .map_err(|e| format!("the group's thread: {e}"))?;
        self.groups.insert(gid, tx);
        Ok(())
    }

    fn execute(&mut self, gid: i64, engine: &Engine, _actions: &[Action]) {
        // Level triggered: the reconciler works from the engine's state,
        // so a stop or a launch decided is carried out from it.
        self.to(gid, Msg::Goal(Goal::from_engine(engine)));
    }

    fn cancel(&mut self, _gid: i64) {
        // The engine hears `CancelRequested`; its next state (a goal
        // with `cancel`) terminates every instance of the run.
    }

    fn release(&mut self, gid: i64) {
        self.to(gid, Msg::Release);
        self.groups.remove(&gid);
    }

    fn drain(&mut self, _now_ms: i64) -> Vec<(i64, Report)> {
        self.outbox.drain()
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.outbox.wake_fd())
    }
}

/// One group's loop.
struct Group {
    plan: Plan,
    goal: Goal,
    /// Signs with the keeper's latest credentials.
    ec2: Ec2,
    keeper: Keeper,
    data: DataPlane,
    out: Out,
    /// What `status` was last told of each node, so a pass that finds
    /// nothing new says nothing.
    sent_nodes: BTreeMap<(usize, u32, u32), NodeInfo>,
    /// Events already told (by their text).
    sent_events: BTreeSet<String>,
    /// Data-plane errors already shown.
    sent_errors: BTreeSet<String>,
    outage: Option<String>,
    settled: bool,
}

impl Group {
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                self.out
                    .send(Report::Error(format!("the AWS backend's runtime: {e}")));
                return;
            }
        };
        loop {
            self.step(&rt);
            // Wait for the next decision, or the poll interval; take
            // every decision queued meanwhile, the latest goal winning.
            match rx.recv_timeout(POLL) {
                Ok(msg) => {
                    if !self.hear(msg) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            while let Ok(msg) = rx.try_recv() {
                if !self.hear(msg) {
                    return;
                }
            }
        }
    }

    /// Takes a message; false to end the loop.
    fn hear(&mut self, msg: Msg) -> bool {
        match msg {
            Msg::Goal(goal) => {
                self.goal = goal;
                true
            }
            Msg::Release => {
                // The group is closed, its instances gone: its SSH state
                // and key have nothing left to reach.
                let _ = std::fs::remove_dir_all(&self.data.ssh.dir);
                let key = PathBuf::from(&self.data.ssh.key);
                let _ = std::fs::remove_file(key.with_extension("pub"));
                let _ = std::fs::remove_file(&key);
                // The run's own directory, made for the key alone.
                if let Some(dir) = key.parent() {
                    let _ = std::fs::remove_dir(dir);
                }
                false
            }
        }
    }

    fn set_outage(&mut self, outage: Option<String>) {
        if outage != self.outage {
            self.out.send(Report::Outage(outage.clone()));
            self.outage = outage;
        }
    }

    /// One pass: the data plane over the world as it is, then the
    /// control plane.
    fn step(&mut self, rt: &tokio::runtime::Runtime) {
        match rt.block_on(self.keeper.step(std::time::SystemTime::now())) {
            Step::Keep => {}
            Step::Use(credentials) => self.ec2 = self.ec2.with_credentials(credentials),
            Step::Warn(e) => {
                if self.sent_errors.insert(e.clone()) {
                    self.out.send(Report::Error(e));
                }
            }
            Step::Outage(why) => {
                self.set_outage(Some(why));
                return;
            }
        }
        let world = match rt.block_on(ops::world(&self.ec2, &self.plan)) {
            Ok(w) => w,
            Err(e) if crate::aws::control::pass::is_outage(&e) => {
                self.set_outage(Some(e.to_string()));
                return;
            }
            Err(e) if e.code().is_some_and(retry::is_expired_credentials) => {
                // The run's source is asked again on the next pass; the
                // same credentials again are an outage.
                self.keeper.refused(e.to_string());
                let e = format!("{e}; asking the run's credential source again");
                if self.sent_errors.insert(e.clone()) {
                    self.out.send(Report::Error(e));
                }
                return;
            }
            Err(e) => {
                self.out.send(Report::Error(e.to_string()));
                return;
            }
        };
        let (outcomes, errors) = self.data.step(&self.plan, &world, &self.goal);
        for e in errors {
            if self.sent_errors.insert(e.clone()) {
                self.out.send(Report::Error(e));
            }
        }
        let passed = rt.block_on(pass(&self.ec2, &self.plan, &self.goal, outcomes));
        self.set_outage(passed.outage);
        let mut settled = false;
        for report in passed.reports {
            match report {
                Report::Node(info) => {
                    let key = (info.task, info.rank, info.attempt);
                    if self.sent_nodes.get(&key) != Some(&info) {
                        self.sent_nodes.insert(key, info.clone());
                        self.out.send(Report::Node(info));
                    }
                }
                Report::Settled => settled = true,
                // A pass finds the same facts again (a running task is
                // started at every pass): each is told once, or the
                // store's history would grow by a row a pass.
                Report::Event { event, at_ms } => {
                    if self.sent_events.insert(format!("{event:?}")) {
                        self.out.send(Report::Event { event, at_ms });
                    }
                }
                other => self.out.send(other),
            }
        }
        if settled && !self.settled {
            self.out.send(Report::Settled);
        }
        self.settled = settled;
    }
}
