//! The data plane's loop step: for every node whose instance runs, deliver
//! the group's `hosts` (once complete, again when it changes), follow its
//! logs into the group's directory, and read how it is doing. Blocking
//! (OpenSSH's client); the nodes of one pass are visited at once, each
//! in a thread of its own ([`MAX_AT_ONCE`] at a time), so a slow or
//! silent node holds up no other. The backend runs it off its async
//! thread.
//!
//! A node's exit is reported only once its logs have been read to the
//! end, since the reconciler terminates an ended node's instance.
//!
//! Secrets are written to each instance once (`secrets/NAME`), before
//! anything else, with the URLs of its task's files
//! (`files/DIGEST.url`); its agent waits for them. The bytes of each log already
//! copied are counted in the group's `logs/.aws/`, so a new supervisor
//! goes on from there. Nodes are reached at their public address when
//! they have one (a runtime outside the VPC), else at their private one.
//!
//! A node the runtime has not read for [`DataPlane::silence`] (no login,
//! no answer, commands failing) is given up on ([`Outcome::Silent`]): one
//! never read cannot be set up (a wrong login user, no sudo, a refused
//! key, a blocked port), one read before has failed.

use crate::cloud::data::node::{self, Outcome, Outcomes};
use crate::cloud::data::remote::{self, LOGS, RemoteError, Ssh};
use crate::cloud::instance::{Instance, State};
use crate::cloud::run::Run;
use crate::cloud::world::{NodeKey, World};
use crate::reconciler::goal::{Goal, Want};
use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The most nodes visited at once (each an `ssh` process).
pub const MAX_AT_ONCE: usize = 32;

/// How long a running instance may go without an SSH answer before its
/// node is given up on. Generous: an instance is `running` well before
/// its sshd answers.
pub const SILENCE: Duration = Duration::from_secs(600);

pub struct DataPlane {
    pub ssh: Ssh,
    /// The spec's `node_dir`.
    pub node_dir: String,
    /// Where node logs go: `{task}-{rank}.log`, every attempt appended.
    pub logs: PathBuf,
    pub timeout: Duration,
    /// How long a node may go without an SSH answer ([`SILENCE`]).
    pub silence: Duration,
    /// Connect to nodes at their private addresses only (else at their
    /// public one when they have one).
    pub private: bool,
    /// Per task, its secrets' values, delivered to each of its instances.
    pub secrets: Vec<Vec<(String, String)>>,
    /// Per task, where each of its snapshots is fetched from (digest,
    /// presigned URL), delivered to each of its instances with the
    /// secrets.
    pub files: Vec<Vec<(String, String)>>,
    /// Per task, the `mounts.sh` of its nodes when they mount buckets,
    /// delivered with the secrets.
    pub mounts: Vec<Option<String>>,
    /// Per task, the credentials its nodes read to mount its buckets,
    /// now (what `credential_process` prints): narrowed to them, renewed.
    pub node_credentials: Vec<Option<String>>,
    /// The credentials each instance has.
    credentialed: HashMap<String, String>,
    /// The hosts file each instance has.
    delivered: HashMap<String, String>,
    /// Instances that have their task's secrets.
    armed: HashSet<String>,
    /// Bytes of each instance's logs already copied, per log of [`LOGS`].
    offsets: HashMap<String, [u64; 2]>,
    /// Per instance: since when it has been tried without an answer, and
    /// whether it ever answered.
    heard: HashMap<String, Heard>,
    /// The last outcome read of each node.
    outcomes: Outcomes,
}

#[derive(Clone, Copy, Debug)]
struct Heard {
    /// The first try since the last answer (or ever).
    silent_since: Option<Instant>,
    /// The last try.
    last_try: Instant,
    answered: bool,
}

/// A longer time between two tries of a node starts its silence again.
const SILENCE_GAP: Duration = Duration::from_secs(120);

/// One node to visit in a pass, with what the visit needs.
struct Visit<'a> {
    key: NodeKey,
    id: String,
    address: String,
    /// `{task}-{rank}`, as messages name the node.
    name: String,
    /// The node's log in the group's directory.
    log: PathBuf,
    /// The task's secrets and its files' URLs, when the instance does
    /// not have them yet.
    secrets: Option<Arming<'a>>,
    /// The hosts file, when the instance does not have this one.
    hosts: Option<&'a str>,
    /// The credentials its buckets are mounted with, when the instance
    /// does not have these.
    credentials: Option<&'a str>,
    offsets: [u64; 2],
}

/// What arms an instance: its task's secrets (name, value), where its
/// files are fetched from (digest, URL), and its `mounts.sh`.
type Arming<'a> = (
    &'a [(String, String)],
    &'a [(String, String)],
    Option<&'a str>,
);

/// What a visit did; `result` is the node's outcome or why it has none.
struct Visited {
    armed: bool,
    delivered: bool,
    credentialed: bool,
    offsets: [u64; 2],
    result: Result<Outcome, RemoteError>,
}

impl DataPlane {
    pub fn new(ssh: Ssh, node_dir: String, logs: PathBuf, timeout: Duration) -> DataPlane {
        DataPlane {
            ssh,
            node_dir,
            logs,
            timeout,
            silence: SILENCE,
            private: false,
            secrets: Vec::new(),
            files: Vec::new(),
            mounts: Vec::new(),
            node_credentials: Vec::new(),
            credentialed: HashMap::new(),
            delivered: HashMap::new(),
            armed: HashSet::new(),
            offsets: HashMap::new(),
            heard: HashMap::new(),
            outcomes: Outcomes::new(),
        }
    }

    /// Where the runtime reaches an instance: its public address when it
    /// has one (unless [`DataPlane::private`]), else its private one.
    pub fn address<'i>(&self, instance: &'i Instance) -> Option<&'i str> {
        match &instance.public_ip {
            Some(public) if !self.private => Some(public),
            _ => instance.private_ip.as_deref(),
        }
    }

    /// The last outcome read of a node.
    pub fn outcome(&self, key: NodeKey) -> Option<Outcome> {
        self.outcomes.get(&key).copied()
    }

    /// The last outcome read of each node.
    pub fn outcomes(&self) -> &Outcomes {
        &self.outcomes
    }

    /// One pass over the nodes; the outcomes so far, and what went wrong
    /// (a node not answering while it boots is not wrong, until it has
    /// been silent too long).
    pub fn step(&mut self, plan: &Run<'_>, world: &World, goal: &Goal) -> (&Outcomes, Vec<String>) {
        let hosts = node::hosts(plan, world, goal);
        let mut visits = Vec::new();
        for (tg, key) in NodeKey::current(goal) {
            if tg.want == Want::Done || goal.cancel {
                // A cancelled run's instances are being terminated:
                // nothing to read that the engine waits for.
                continue;
            }
            let (task, rank) = (key.task, key.rank);
            if matches!(
                self.outcomes.get(&key),
                Some(Outcome::Exited { .. } | Outcome::Silent { .. })
            ) {
                continue;
            }
            let Some(instance) = world.instance(plan, key) else {
                continue;
            };
            let (Some(State::Running), Some(address)) = (instance.state, self.address(instance))
            else {
                continue;
            };
            let address = address.to_owned();
            let id = instance.id.clone();
            visits.push(Visit {
                key,
                name: format!("{}-{rank}", plan.spec.tasks[task].name),
                log: self
                    .logs
                    .join(crate::paths::log_name(&plan.spec.tasks[task].name, rank)),
                address,
                secrets: (!self.armed.contains(&id)).then(|| {
                    (
                        self.secrets.get(task).map(Vec::as_slice).unwrap_or(&[]),
                        self.files.get(task).map(Vec::as_slice).unwrap_or(&[]),
                        self.mounts.get(task).and_then(Option::as_deref),
                    )
                }),
                hosts: hosts
                    .as_deref()
                    .filter(|h| self.delivered.get(&id).map(String::as_str) != Some(h)),
                credentials: self
                    .node_credentials
                    .get(task)
                    .and_then(Option::as_deref)
                    .filter(|c| self.credentialed.get(&id).map(String::as_str) != Some(c)),
                offsets: self
                    .offsets
                    .get(&id)
                    .copied()
                    .unwrap_or_else(|| LOGS.map(|log| read_offset(&self.logs, &id, log))),
                id,
            });
        }
        let visited: Vec<Visited> = visits
            .chunks(MAX_AT_ONCE)
            .flat_map(|chunk| {
                std::thread::scope(|s| {
                    let handles: Vec<_> = chunk.iter().map(|v| s.spawn(|| self.visit(v))).collect();
                    handles
                        .into_iter()
                        .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let now = Instant::now();
        let mut errors = Vec::new();
        // Every node silent while some answered before: the runtime's own
        // network is the likelier fault (a changed address no longer in
        // the `tcp/22` rule, a VPN down), and no node is given up on.
        let all_silent = !visited.is_empty()
            && visited.iter().all(|d| {
                matches!(
                    d.result,
                    Err(RemoteError::Unreachable(_) | RemoteError::Timeout(_))
                )
            });
        let runtime_cut_off = all_silent
            && (self.heard.values().any(|h| h.answered)
                || visits.iter().any(|v| v.offsets != [0, 0]));
        if runtime_cut_off {
            errors.push(
                "no node of the run answers over SSH: the runtime's own network may be cut \
                 off from them (its address no longer the --ssh-from one?); none is given up \
                 on until one answers"
                    .to_owned(),
            );
        }
        for (v, done) in visits.iter().zip(visited) {
            if done.armed {
                self.armed.insert(v.id.clone());
            }
            if done.delivered
                && let Some(h) = v.hosts
            {
                self.delivered.insert(v.id.clone(), h.to_owned());
            }
            if done.credentialed
                && let Some(c) = v.credentials
            {
                self.credentialed.insert(v.id.clone(), c.to_owned());
            }
            if done.offsets != v.offsets {
                self.offsets.insert(v.id.clone(), done.offsets);
            }
            let heard = self.heard.entry(v.id.clone()).or_insert(Heard {
                silent_since: None,
                last_try: now,
                // Log bytes copied (by this supervisor or one before it)
                // mean the node answered once.
                answered: v.offsets != [0, 0],
            });
            // Silence counts over tries that follow each other; a gap (an
            // EC2 outage, a suspended laptop) starts it again.
            if now.duration_since(heard.last_try) > SILENCE_GAP || runtime_cut_off {
                heard.silent_since = None;
            }
            heard.last_try = now;
            match done.result {
                Ok(outcome) => {
                    heard.silent_since = None;
                    heard.answered = true;
                    self.outcomes.insert(v.key, outcome);
                }
                // The runtime's own failure (ssh not runnable, its disk):
                // shown, never held against the node.
                Err(e @ RemoteError::Spawn(_)) => {
                    errors.push(format!("{} ({}): {e}", v.name, v.id));
                }
                _ if runtime_cut_off => {}
                // No login, no answer in time, or a command that fails
                // (no sudo, a full disk on the node): the node cannot be
                // followed. Shown at once unless it may be a node still
                // booting; given up on once it has lasted too long.
                Err(e) => {
                    let why = match e {
                        RemoteError::Unreachable(why) => why,
                        other => {
                            let text = other.to_string();
                            errors.push(format!("{} ({}): {text}", v.name, v.id));
                            text
                        }
                    };
                    let since = *heard.silent_since.get_or_insert(now);
                    if now.duration_since(since) >= self.silence {
                        let answered = heard.answered;
                        errors.push(silent_message(v, answered, self.silence, &why));
                        self.outcomes.insert(v.key, Outcome::Silent { answered });
                    }
                }
            }
        }
        (&self.outcomes, errors)
    }

    /// Visits one node: its secrets and hosts when it lacks them, then
    /// its state and new log bytes (all of them once it has ended).
    fn visit(&self, v: &Visit<'_>) -> Visited {
        let mut done = Visited {
            armed: false,
            delivered: false,
            credentialed: false,
            offsets: v.offsets,
            result: Ok(Outcome::Starting),
        };
        done.result = self.visit_steps(v, &mut done);
        done
    }

    fn visit_steps(&self, v: &Visit<'_>, done: &mut Visited) -> Result<Outcome, RemoteError> {
        if let Some((secrets, files, mounts)) = v.secrets {
            for (name, value) in secrets {
                // Names are checked when the group is built; one that no
                // command can carry is never sent.
                if let Some(command) =
                    remote::deliver_secret(&self.node_dir, name, value.as_bytes())
                {
                    self.ssh.run(&v.id, &v.address, &command, self.timeout)?;
                }
            }
            if let Some(command) = remote::deliver_file_urls(&self.node_dir, files) {
                self.ssh.run(&v.id, &v.address, &command, self.timeout)?;
            }
            if let Some(script) = mounts {
                self.ssh.run(
                    &v.id,
                    &v.address,
                    &remote::deliver_mounts(&self.node_dir, script),
                    self.timeout,
                )?;
            }
            done.armed = true;
        }
        if let Some(hosts) = v.hosts {
            self.ssh.run(
                &v.id,
                &v.address,
                &remote::deliver_hosts(&self.node_dir, hosts),
                self.timeout,
            )?;
            done.delivered = true;
        }
        if let Some(credentials) = v.credentials {
            self.ssh.run(
                &v.id,
                &v.address,
                &remote::deliver_credentials(&self.node_dir, credentials),
                self.timeout,
            )?;
            done.credentialed = true;
        }
        loop {
            let out = self.ssh.run(
                &v.id,
                &v.address,
                &remote::read_node(&self.node_dir, done.offsets),
                self.timeout,
            )?;
            let read = remote::parse_node(&out);
            let outcome = node::outcome(&read.files);
            let mut full = false;
            for (i, log) in read.logs.iter().enumerate() {
                let Some((_, bytes)) = log else { continue };
                if bytes.is_empty() {
                    continue;
                }
                append(&v.log, bytes)
                    .map_err(|e| RemoteError::Spawn(format!("the node's log: {e}")))?;
                done.offsets[i] += bytes.len() as u64;
                // After the bytes: a crash in between copies a chunk
                // twice rather than losing it.
                write_offset(&self.logs, &v.id, LOGS[i], done.offsets[i])
                    .map_err(|e| RemoteError::Spawn(format!("the node's log offset: {e}")))?;
                full |= bytes.len() as u64 >= remote::LOG_CHUNK_BYTES;
            }
            // An ended node is read to the end of its logs before its
            // exit is told; a running one a chunk a pass.
            if !full || !matches!(outcome, Outcome::Exited { .. }) {
                return Ok(outcome);
            }
        }
    }
}

pub(crate) fn append(log: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?
        .write_all(bytes)
}

/// Why a node is given up on, for `skyc status` and the log.
fn silent_message(v: &Visit<'_>, answered: bool, silence: Duration, why: &str) -> String {
    let secs = silence.as_secs();
    let span = if secs < 120 {
        format!("{secs} s")
    } else {
        format!("{} min", secs.div_ceil(60))
    };
    let why = if why.is_empty() { "no answer" } else { why };
    if answered {
        format!(
            "{} ({}): no usable SSH answer for {span} ({why}); \
             the node is lost and its task restarts on new instances",
            v.name, v.id
        )
    } else {
        format!(
            "{} ({}): no usable SSH answer in {span} since it began running ({why}); \
             its setup fails. Check the image's login user and its sudo (--ssh-user), that \
             the nodes see the runtime at the --ssh-from address, and that the image runs sshd",
            v.name, v.id
        )
    }
}

/// Where the bytes of an instance's log already copied are counted, so a
/// new supervisor goes on from there.
/// Where the bytes copied of an instance's log are counted.
fn offset_name(id: &str, file: &str) -> String {
    format!("{id}.{file}.offset")
}

pub(super) fn read_offset(logs: &Path, id: &str, file: &str) -> u64 {
    std::fs::read_to_string(logs.join(".aws").join(offset_name(id, file)))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

pub(super) fn write_offset(logs: &Path, id: &str, file: &str, offset: u64) -> std::io::Result<()> {
    crate::paths::write_atomic(
        &logs.join(".aws"),
        &offset_name(id, file),
        &offset.to_string(),
    )
}
