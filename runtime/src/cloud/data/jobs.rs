//! A pool worker's jobs, over the worker's SSH: each job node handed to
//! the worker's node of its rank (`jobs/{job}-{attempt}/`, which the
//! node's agent starts once), stopped there when its engine says so, and
//! followed: its log copied into the job's own directory, its exit told
//! to the job's engine. A job node whose worker node is gone (its
//! instance down, replaced, silent, or the worker retired) is lost, so
//! its engine runs it again on another worker without using its budget.
//!
//! The files on the node are the contract (docs/targets/cloud.md, "The
//! node's directory"); what a supervisor must find again after a crash
//! is there and in the job's `logs/.aws/`: the log offsets, and the
//! instance each node was handed to, recorded before it is handed over.
//! A job handed over is never handed over again (its directory exists),
//! so it never runs twice; one placed again after a crash whose worker
//! node was replaced meanwhile is lost, not started on the new instance.

use crate::backend::{NodeInfo, Report};
use crate::cloud::data::node::Outcome;
use crate::cloud::data::plane::{self, DataPlane};
use crate::cloud::data::remote::{self, RemoteError};
use crate::cloud::instance::State;
use crate::cloud::run::Run;
use crate::cloud::world::{NodeKey, World};
use crate::policy::{Event, Phase};
use crate::reconciler::outbox::Out;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One job's attempt placed on this worker.
pub struct Placed {
    pub attempt: u32,
    /// Per node, the whole `job.sh`.
    pub scripts: Vec<String>,
    pub grace_secs: u64,
    /// The job's task name, for its log names.
    pub task: String,
    /// The job's `logs/` directory.
    pub logs: PathBuf,
    /// The job's reports.
    pub out: Out,
    /// The worker's attempt it was placed on: a later one is another set
    /// of instances.
    pub worker_attempt: u32,
    /// The job's engine stops it.
    pub stop: bool,
    ranks: Vec<Rank>,
    started_told: bool,
}

#[derive(Clone, Debug, Default)]
struct Rank {
    handed: bool,
    /// The instance and address it was handed to.
    on: Option<(String, String)>,
    stop_sent: bool,
    /// Bytes of its log copied (read back after a crash).
    offset: Option<u64>,
    ended: bool,
}

impl Placed {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        attempt: u32,
        scripts: Vec<String>,
        grace_secs: u64,
        task: String,
        logs: PathBuf,
        out: Out,
        worker_attempt: u32,
    ) -> Placed {
        let nodes = scripts.len();
        Placed {
            attempt,
            scripts,
            grace_secs,
            task,
            logs,
            out,
            worker_attempt,
            stop: false,
            ranks: vec![Rank::default(); nodes],
            started_told: false,
        }
    }

    /// `{job}-{attempt}`: the job's directory on the node.
    fn name(&self) -> String {
        format!("{}-{}", self.out.gid, self.attempt)
    }

    fn lose(&mut self, rank: u32, why: &str) {
        let r = &mut self.ranks[rank as usize];
        if r.ended {
            return;
        }
        r.ended = true;
        let log = self.logs.join(crate::paths::log_name(&self.task, rank));
        let _ = plane::append(&log, format!("skyc: {why}\n").as_bytes());
        self.out.send(Report::Event {
            event: Event::NodeLost {
                task: 0,
                attempt: self.attempt,
                node: rank,
            },
            at_ms: None,
        });
    }

    /// The worker is gone (retired, released): every node still running
    /// is lost.
    pub fn lose_all(&mut self, why: &str) {
        for rank in 0..self.ranks.len() as u32 {
            self.lose(rank, why);
        }
    }

    /// Where each node was handed over (instance id, address): what a
    /// closed job leaves on its worker.
    pub fn handed(&self) -> impl Iterator<Item = (&str, &str, String)> {
        self.ranks.iter().filter_map(|r| {
            let (id, address) = r.on.as_ref()?;
            Some((id.as_str(), address.as_str(), self.name()))
        })
    }
}

/// Where the instance a job's node was handed to is recorded.
fn handed_name(job: &str, rank: u32) -> String {
    format!("{job}.r{rank}.instance")
}

/// One pass over the worker's jobs, after the data plane's pass over its
/// nodes (`data`'s outcomes say which nodes hold).
pub fn step(
    jobs: &mut BTreeMap<i64, Placed>,
    data: &DataPlane,
    plan: &Run<'_>,
    world: &World,
    errors: &mut Vec<String>,
) {
    let mut failed = std::collections::BTreeSet::new();
    for job in jobs.values_mut() {
        for rank in 0..job.ranks.len() as u32 {
            if job.ranks[rank as usize].ended {
                continue;
            }
            let key = NodeKey {
                task: 0,
                rank,
                attempt: job.worker_attempt,
            };
            let instance = world.instance(plan, key);
            let held = matches!(data.outcome(key), Some(Outcome::Running(Phase::Run)));
            let up = instance.is_some_and(|i| i.state == Some(State::Running));
            let (Some(instance), true, true) = (instance, up, held) else {
                if instance.is_none_or(|i| i.state.is_none_or(State::is_down))
                    || !matches!(data.outcome(key), None | Some(Outcome::Running(_)))
                {
                    job.lose(rank, "its worker's node is gone");
                }
                continue;
            };
            let Some(address) = data.address(instance) else {
                continue;
            };
            // A node that failed a command this pass is not tried again
            // for its other jobs: one silent node costs a pass one
            // timeout, not one per job.
            if failed.contains(&instance.id) {
                continue;
            }
            if let Err(e) = visit(job, rank, data, &instance.id, address) {
                failed.insert(instance.id.clone());
                errors.push(format!(
                    "job {} on {} ({}): {e}",
                    job.out.gid, instance.id, job.task
                ));
            }
        }
        if !job.started_told && job.ranks.iter().all(|r| r.handed) {
            job.started_told = true;
            job.out.send(Report::Event {
                event: Event::TaskStarted {
                    task: 0,
                    attempt: job.attempt,
                },
                at_ms: None,
            });
        }
    }
}

/// Hands the job node over (once), asks it to stop (once, when its
/// engine stops it), then reads its state and new log bytes.
fn visit(
    job: &mut Placed,
    rank: u32,
    data: &DataPlane,
    id: &str,
    address: &str,
) -> Result<(), RemoteError> {
    let name = job.name();
    let dir = &data.node_dir;
    let log_name = format!("{name}.run.log");
    let log = job.logs.join(crate::paths::log_name(&job.task, rank));
    let r = &mut job.ranks[rank as usize];
    if !r.handed {
        let marker = job.logs.join(".aws").join(handed_name(&name, rank));
        match std::fs::read_to_string(&marker) {
            // Handed to an instance that is no longer the worker's node:
            // it ran there, and must not start again here.
            Ok(before) if before.trim() != id => {
                job.lose(rank, "its worker's node was replaced");
                return Ok(());
            }
            Ok(_) => {}
            Err(_) => {
                crate::paths::write_atomic(&job.logs.join(".aws"), &handed_name(&name, rank), id)
                    .map_err(|e| RemoteError::Spawn(format!("the job's record: {e}")))?;
            }
        }
        let script = &job.scripts[rank as usize];
        let Some(command) = remote::deliver_job(dir, &name, job.grace_secs, job.stop, script)
        else {
            return Err(RemoteError::Spawn(format!("`{name}` is not a job name")));
        };
        data.ssh.run(id, address, &command, data.timeout)?;
        r.handed = true;
        r.stop_sent = job.stop;
        r.on = Some((id.to_owned(), address.to_owned()));
        job.out.send(Report::Node(NodeInfo {
            task: 0,
            rank,
            attempt: job.attempt,
            hostname: String::new(),
            handle: id.to_owned(),
            machine: format!("worker instance {id}"),
            phase: Some("run".into()),
            ..NodeInfo::default()
        }));
    }
    if job.stop && !r.stop_sent {
        data.ssh
            .run(id, address, &remote::stop_job(dir, &name), data.timeout)?;
        r.stop_sent = true;
    }
    let mut offset = *r
        .offset
        .get_or_insert_with(|| plane::read_offset(&job.logs, id, &log_name));
    loop {
        let out = data.ssh.run(
            id,
            address,
            &remote::read_job(dir, &name, offset),
            data.timeout,
        )?;
        let read = remote::parse_job(&out);
        let mut full = false;
        if let Some((_, bytes)) = &read.log
            && !bytes.is_empty()
        {
            plane::append(&log, bytes)
                .map_err(|e| RemoteError::Spawn(format!("the job's log: {e}")))?;
            offset += bytes.len() as u64;
            plane::write_offset(&job.logs, id, &log_name, offset)
                .map_err(|e| RemoteError::Spawn(format!("the job's log offset: {e}")))?;
            full = bytes.len() as u64 >= remote::LOG_CHUNK_BYTES;
        }
        job.ranks[rank as usize].offset = Some(offset);
        // An ended job's log is read to its end before its exit is told;
        // a running one's a chunk a pass.
        if full && read.exit.is_some() {
            continue;
        }
        if let Some(code) = read.exit.filter(|_| !full) {
            job.ranks[rank as usize].ended = true;
            job.out.send(Report::Event {
                event: Event::NodeExited {
                    task: 0,
                    attempt: job.attempt,
                    node: rank,
                    phase: Phase::Run,
                    code,
                },
                at_ms: None,
            });
        }
        return Ok(());
    }
}
