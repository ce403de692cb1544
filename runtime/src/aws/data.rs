//! The data plane's loop step: for every node whose instance runs, deliver
//! the group's `hosts` (once complete, again when it changes), follow its
//! logs into the group's directory, and read how it is doing. Blocking
//! (OpenSSH's client, one node after another); the backend runs it off
//! its async thread.
//!
//! A node's exit is reported only once its logs have been read to the
//! end, since the reconciler terminates an ended node's instance.
//!
//! Secrets are written to each instance once (`secrets/NAME`), before
//! anything else; its agent waits for them. The bytes of each log already
//! copied are counted in the group's `logs/.aws/`, so a new supervisor
//! goes on from there. Nodes are reached at their public address when
//! they have one (a runtime outside the VPC), else at their private one.

use super::node::{self, Outcome, Outcomes};
use super::plan::Plan;
use super::remote::{self, Log, RemoteError, Ssh};
use super::response::State;
use super::world::{NodeKey, World};
use crate::k8s::goal::{Goal, Want};
use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

pub struct DataPlane {
    pub ssh: Ssh,
    /// The spec's `node_dir`.
    pub node_dir: String,
    /// Where node logs go: `{task}-{rank}.log`, every attempt appended.
    pub logs: PathBuf,
    pub timeout: Duration,
    /// Connect to nodes at their private addresses only (else at their
    /// public one when they have one).
    pub private: bool,
    /// Per task, its secrets' values, delivered to each of its instances.
    pub secrets: Vec<Vec<(String, String)>>,
    /// The hosts file each instance has.
    delivered: HashMap<String, String>,
    /// Instances that have their task's secrets.
    armed: std::collections::HashSet<String>,
    /// Bytes of each instance's logs already copied.
    offsets: HashMap<(String, &'static str), u64>,
    /// The last outcome read of each node.
    outcomes: Outcomes,
}

impl DataPlane {
    pub fn new(ssh: Ssh, node_dir: String, logs: PathBuf, timeout: Duration) -> DataPlane {
        DataPlane {
            ssh,
            node_dir,
            logs,
            timeout,
            private: false,
            secrets: Vec::new(),
            delivered: HashMap::new(),
            armed: std::collections::HashSet::new(),
            offsets: HashMap::new(),
            outcomes: Outcomes::new(),
        }
    }

    /// One pass over the nodes; the outcomes so far, and what went wrong
    /// (a node not answering while it boots is not wrong).
    pub fn step(&mut self, plan: &Plan, world: &World, goal: &Goal) -> (&Outcomes, Vec<String>) {
        let hosts = node::hosts(plan, world, goal);
        let mut errors = Vec::new();
        for (task, tg) in goal.tasks.iter().enumerate() {
            if tg.want == Want::Done {
                continue;
            }
            for rank in 0..tg.live.len() as u32 {
                let key = NodeKey {
                    task,
                    rank,
                    attempt: tg.attempt,
                };
                if matches!(self.outcomes.get(&key), Some(Outcome::Exited { .. })) {
                    continue;
                }
                let Some(instance) = world.instance(plan, key) else {
                    continue;
                };
                let address = match &instance.public_ip {
                    Some(public) if !self.private => Some(public),
                    _ => instance.private_ip.as_ref(),
                };
                let (Some(State::Running), Some(ip)) = (instance.state, address) else {
                    continue;
                };
                let name = format!("{}-{rank}", plan.spec.tasks[task].name);
                if let Err(e) = self.arm(&instance.id, ip, task) {
                    if !matches!(e, RemoteError::Unreachable(_)) {
                        errors.push(format!("{name} ({}): {e}", instance.id));
                    }
                    continue;
                }
                match self.node(&instance.id, ip, &name, hosts.as_deref()) {
                    Ok(outcome) => {
                        self.outcomes.insert(key, outcome);
                    }
                    Err(RemoteError::Unreachable(_)) => {}
                    Err(e) => errors.push(format!("{name} ({}): {e}", instance.id)),
                }
            }
        }
        (&self.outcomes, errors)
    }

    /// Delivers the task's secrets to an instance, once: its agent waits
    /// for them before setup.
    fn arm(&mut self, id: &str, ip: &str, task: usize) -> Result<(), RemoteError> {
        if self.armed.contains(id) {
            return Ok(());
        }
        for (name, value) in self.secrets.get(task).into_iter().flatten() {
            // Names are checked when the group is built; one that no
            // command can carry is never sent.
            if let Some(command) = remote::deliver_secret(&self.node_dir, name, value.as_bytes()) {
                self.ssh.run(ip, &command, self.timeout)?;
            }
        }
        self.armed.insert(id.to_owned());
        Ok(())
    }

    fn node(
        &mut self,
        id: &str,
        ip: &str,
        name: &str,
        hosts: Option<&str>,
    ) -> Result<Outcome, RemoteError> {
        if let Some(hosts) = hosts
            && self.delivered.get(id).map(String::as_str) != Some(hosts)
        {
            self.ssh.run(
                ip,
                &remote::deliver_hosts(&self.node_dir, hosts),
                self.timeout,
            )?;
            self.delivered.insert(id.to_owned(), hosts.to_owned());
        }
        let files = remote::parse_files(&self.ssh.run(
            ip,
            &remote::read_files(&self.node_dir),
            self.timeout,
        )?);
        let outcome = node::outcome(&files);
        let done = matches!(outcome, Outcome::Exited { .. });
        for log in [Log::Setup, Log::Run] {
            // Until a read comes back short: everything up to now.
            loop {
                let file = match log {
                    Log::Setup => "setup.log",
                    Log::Run => "run.log",
                };
                let offset = match self.offsets.get(&(id.to_owned(), file)) {
                    Some(&o) => o,
                    None => read_offset(&self.logs, id, file),
                };
                let out = self.ssh.run(
                    ip,
                    &remote::read_log(&self.node_dir, log, offset),
                    self.timeout,
                )?;
                let Some((_, bytes)) = remote::parse_log(&out) else {
                    break;
                };
                if !bytes.is_empty() {
                    std::fs::create_dir_all(&self.logs)
                        .and_then(|()| {
                            std::fs::OpenOptions::new()
                                .create(true)
                                .append(true)
                                .open(self.logs.join(format!("{name}.log")))
                        })
                        .and_then(|mut f| f.write_all(&bytes))
                        .map_err(|e| RemoteError::Spawn(format!("the node's log: {e}")))?;
                    let next = offset + bytes.len() as u64;
                    // After the bytes: a crash in between copies a chunk
                    // twice rather than losing it.
                    write_offset(&self.logs, id, file, next)
                        .map_err(|e| RemoteError::Spawn(format!("the node's log offset: {e}")))?;
                    self.offsets.insert((id.to_owned(), file), next);
                }
                if !done || (bytes.len() as u64) < remote::LOG_CHUNK_BYTES {
                    break;
                }
            }
        }
        Ok(outcome)
    }
}

/// Where the bytes of an instance's log already copied are counted, so a
/// new supervisor goes on from there.
fn offset_path(logs: &std::path::Path, id: &str, file: &str) -> PathBuf {
    logs.join(".aws").join(format!("{id}.{file}.offset"))
}

fn read_offset(logs: &std::path::Path, id: &str, file: &str) -> u64 {
    std::fs::read_to_string(offset_path(logs, id, file))
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(0)
}

fn write_offset(logs: &std::path::Path, id: &str, file: &str, offset: u64) -> std::io::Result<()> {
    let path = offset_path(logs, id, file);
    let dir = path.parent().unwrap_or(logs);
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, offset.to_string())?;
    std::fs::rename(tmp, path)
}
