//! A pool job on Kubernetes: its one task's nodes run in the pods of the
//! worker the pool placed it on, each node `r` in the worker's node `r`,
//! started and read through `pods/exec` ([`super::job_scripts`]). The job
//! applies nothing of its own.
//!
//! Level-triggered as the groups' task is: every pass reads each node's
//! state in its pod and reports what the engine has not heard. A start
//! is asked of every node the attempt has not seen started; the script
//! starts nothing when the attempt's marker is there, so an attempt given
//! again (a new supervisor) is never started twice. A worker's pod that
//! is gone, not running, or a new one (the attempt's directory absent
//! once started) is the job's node lost with it: its engine starts a new
//! attempt, which the pool places again. The placement and the nodes
//! asked to start are kept in the group's directory ([`Record`]), so a
//! new supervisor signals and reads them where they run, whatever
//! placement it is given again.

use super::client::Cluster;
use super::exec::{Command, ExecError};
use super::job_scripts::{self, Started, State};
use super::plan::Plan;
use super::request::CALL_TIMEOUT;
use crate::backend::Report;
use crate::policy::{Event, Phase};
use crate::pool::Placement;
use crate::reconciler::Told;
use crate::reconciler::backoff::Backoff;
use crate::reconciler::goal::{Goal, Want};
use crate::reconciler::outbox::Out;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use skyc_targets::k8s::names::CONTAINER;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// Where the pool placed an attempt: the worker's pods, one per node of
/// the job, in rank order (empty: the worker is not there).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Placed {
    pub(super) attempt: u32,
    pub(super) namespace: String,
    pub(super) pods: Vec<String>,
    pub(super) placement: Placement,
}

/// One node of the placed attempt, as this supervisor has seen it.
#[derive(Clone, Debug, Default)]
struct Node {
    started: bool,
    ended: bool,
    /// Signals sent (`TERM`, then `KILL`).
    termed: bool,
    killed: bool,
    /// SIGKILL recorded as asked (it may or may not have been sent): a
    /// process found gone was killed, not lost.
    kill_asked: bool,
    /// A start asked that may have run, its answer lost (an exec that
    /// failed or timed out, a "gone" for a pod that runs).
    unanswered: bool,
}

/// What this job's supervisor did, kept in the job's group directory so
/// a new supervisor goes on from it: where the attempt was placed (its
/// pods are never worked out again: a worker made again meanwhile has
/// new pods, where the attempt must not run a second time), which of
/// its nodes were asked to start, and which were sent SIGKILL (each
/// written before it is asked, so a node whose process is gone after a
/// SIGKILL ends killed, not lost, whichever supervisor reads it).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Record {
    placed: Placed,
    started: Vec<bool>,
    #[serde(default)]
    killed: Vec<bool>,
}

const RECORD: &str = "k8s-pool-job.json";

pub(super) struct PoolJob {
    pub(super) plan: Plan,
    pub(super) goal: Goal,
    pub(super) out: Out,
    pub(super) group_dir: PathBuf,
    pub(super) backoff: Backoff,
    pub(super) poll: Duration,
    placed: Option<Placed>,
    nodes: Vec<Node>,
    kill: bool,
    /// What the supervisor has been told: each fact once.
    told: Told,
    /// The last exec refusal reported.
    denied: Option<String>,
}

impl PoolJob {
    pub(super) fn new(
        plan: Plan,
        goal: Goal,
        out: Out,
        group_dir: PathBuf,
        backoff: Backoff,
        poll: Duration,
    ) -> Self {
        let mut job = Self {
            plan,
            goal,
            out,
            group_dir,
            backoff,
            poll,
            placed: None,
            nodes: Vec::new(),
            kill: false,
            told: Told::default(),
            denied: None,
        };
        // A node asked to start before a crash is taken as started: it is
        // signalled and read, and lost if its attempt is not in its pod.
        let record = std::fs::read_to_string(job.group_dir.join(RECORD))
            .ok()
            .and_then(|s| serde_json::from_str::<Record>(&s).ok());
        // A SIGKILL asked is asked again (it may not have been sent).
        if let Some(record) = record {
            job.place(record.placed);
            for (r, node) in job.nodes.iter_mut().enumerate() {
                node.started = record.started.get(r).copied().unwrap_or(false);
                node.kill_asked = record.killed.get(r).copied().unwrap_or(false);
            }
            job.kill = job.nodes.iter().any(|n| n.kill_asked);
        }
        job
    }

    /// Saves the placement, the nodes asked to start and those sent
    /// SIGKILL, with `also` (a node, and whether it is killed) about to
    /// be.
    fn save(&self, also: Option<(usize, bool)>) -> std::io::Result<()> {
        let Some(placed) = self.placed.clone() else {
            return Ok(());
        };
        let saved = self.saved();
        let was = |r: usize, f: fn(&Record) -> &Vec<bool>| {
            saved
                .as_ref()
                .is_some_and(|s| f(s).get(r).copied().unwrap_or(false))
        };
        let n = self.nodes.len();
        let started = (0..n)
            .map(|r| {
                self.nodes[r].started || also.is_some_and(|a| a.0 == r) || was(r, |s| &s.started)
            })
            .collect();
        let killed = (0..n)
            .map(|r| {
                let node = &self.nodes[r];
                node.killed || node.kill_asked || also == Some((r, true)) || was(r, |s| &s.killed)
            })
            .collect();
        let record = serde_json::to_string(&Record {
            placed,
            started,
            killed,
        })
        .map_err(std::io::Error::other)?;
        crate::paths::write_atomic(&self.group_dir, RECORD, &record)
    }

    /// The record of the placed attempt, as saved.
    fn saved(&self) -> Option<Record> {
        std::fs::read_to_string(self.group_dir.join(RECORD))
            .ok()
            .and_then(|s| serde_json::from_str::<Record>(&s).ok())
            .filter(|r| r.placed.attempt == self.placed.as_ref().map_or(u32::MAX, |p| p.attempt))
    }

    pub(super) fn set_goal(&mut self, goal: Goal) {
        let cancel = self.goal.cancel;
        self.goal = goal;
        self.goal.cancel |= cancel;
    }

    pub(super) fn cancel(&mut self) {
        self.goal.cancel = true;
    }

    /// The engine's SIGKILL of `attempt`.
    pub(super) fn kill(&mut self, attempt: u32) {
        if self.placed.as_ref().is_some_and(|p| p.attempt == attempt) {
            self.kill = true;
        }
    }

    /// The pool placed `placed`: a new attempt is started from nothing;
    /// the current one given again (after a crash) is left as it is.
    pub(super) fn place(&mut self, placed: Placed) {
        if self
            .placed
            .as_ref()
            .is_some_and(|p| p.attempt == placed.attempt)
        {
            return;
        }
        let nodes = self.plan.spec.tasks.first().map_or(0, |t| t.num_nodes);
        self.nodes = vec![Node::default(); nodes as usize];
        self.kill = false;
        self.placed = Some(placed);
    }

    /// How long to wait before the next pass.
    pub(super) fn interval(&self) -> Duration {
        self.poll
    }

    /// Tells the supervisor what it has not been told.
    fn tell(&mut self, report: Report) {
        if let Some(news) = self.told.news(report) {
            self.out.send(news);
        }
    }

    fn event(&mut self, event: Event) {
        self.tell(Report::Event { event, at_ms: None });
    }

    pub(super) fn set_outage(&mut self, outage: Option<String>) {
        self.tell(Report::Outage(outage));
    }

    /// The job's `run` and environment for node `rank`: the job's own
    /// envs and secrets, then its rank among the jobs submitted with it,
    /// its node's rank and count, and the GPUs the pool gave the node.
    fn start_command(&self, dir: &str, rank: u32, placement: &Placement) -> Command {
        let task = &self.plan.spec.tasks[0];
        let run = self
            .plan
            .object("ConfigMap")
            .and_then(|cm| cm["data"][format!("{}.run.sh", task.name)].as_str())
            .unwrap_or_default()
            .to_owned();
        let mut env: Vec<(String, String)> = Vec::new();
        let template = self.plan.templates.first();
        for e in template
            .and_then(|t| t["spec"]["containers"][0]["env"].as_array())
            .into_iter()
            .flatten()
        {
            let Some(name) = e["name"].as_str() else {
                continue;
            };
            // The worker's node sets SkyPilot's contract; the job's own
            // values of it follow below.
            if name.starts_with("SKYPILOT_") || name.starts_with("SKYC_") {
                continue;
            }
            if let Some(value) = e["value"].as_str() {
                // Lowered for the API server's `$(VAR)` expansion: `$$` is `$`.
                env.push((name.to_owned(), value.replace("$$", "$")));
            } else if let Some(key) = e["valueFrom"]["secretKeyRef"]["key"].as_str() {
                // A secret: its value as `skyc run` was given it, from
                // the plan's Secret, which no pod reads (a job applies
                // nothing of its own).
                let value = self
                    .plan
                    .object("Secret")
                    .and_then(|s| s["stringData"][key].as_str());
                if let Some(value) = value {
                    env.push((name.to_owned(), value.to_owned()));
                }
            }
        }
        if let Some(job) = &self.plan.pool_job {
            env.extend(job.env().map(|(k, v)| (k.to_owned(), v)));
        }
        // The job's own task id, not its worker's (its group id makes it
        // unique, as on the local target).
        env.push((
            "SKYPILOT_TASK_ID".into(),
            format!("skyc-job-{}_{}-0", self.out.gid, task.name),
        ));
        env.push(("SKYPILOT_NODE_RANK".into(), rank.to_string()));
        env.push(("SKYPILOT_NUM_NODES".into(), task.num_nodes.to_string()));
        if let Some(gpus) = placement.gpus.get(rank as usize).filter(|g| !g.is_empty()) {
            let list: Vec<String> = gpus.iter().map(u32::to_string).collect();
            env.push(("CUDA_VISIBLE_DEVICES".into(), list.join(",")));
        }
        job_scripts::start(dir, &run, &env)
    }

    /// One look at the job's nodes.
    pub(super) async fn pass(&mut self, cluster: &Cluster) {
        if self.told.settled() {
            return;
        }
        let Some(tg) = self.goal.tasks.first().cloned() else {
            return;
        };
        // An attempt stopped before the pool placed it: nothing of it
        // ran, and its nodes are answered as lost (as the local target
        // answers a pool job's idle nodes), so its engine can end it.
        let stopping = tg.want != Want::Run || self.goal.cancel;
        let placed_now = self
            .placed
            .as_ref()
            .is_some_and(|p| p.attempt == tg.attempt);
        if stopping && !placed_now {
            for (node, _) in (0u32..).zip(&tg.live).filter(|(_, live)| **live) {
                self.event(Event::NodeLost {
                    task: 0,
                    attempt: tg.attempt,
                    node,
                });
            }
        }
        let Some(placed) = self.placed.clone() else {
            // Never placed: nothing ran; settled once the engine is done.
            if self.goal.end.is_some() {
                self.settle();
            }
            return;
        };
        let attempt = placed.attempt;
        let current = tg.attempt == attempt;
        let mut outage = None;
        let mut denied = None;
        for rank in 0..self.nodes.len() {
            let r = rank as u32;
            let node = self.nodes[rank].clone();
            if node.ended {
                continue;
            }
            let lost = Event::NodeLost {
                task: 0,
                attempt,
                node: r,
            };
            let Some(pod) = placed.pods.get(rank) else {
                self.nodes[rank].ended = true;
                self.event(lost);
                continue;
            };
            let dir = job_scripts::attempt_dir(self.out.gid, attempt);
            let stopping = !(current && tg.want == Want::Run && !self.goal.cancel);
            if !node.started && stopping && node.unanswered {
                // Asked to start, with no answer: signalled and read as a
                // started node, never left running. (A start refused
                // ran nothing, and ends here as below.)
                self.nodes[rank].started = true;
            } else if !node.started {
                if stopping {
                    // Stopped before it started: nothing of it ran.
                    self.nodes[rank].ended = true;
                    if current {
                        self.event(lost);
                    }
                    continue;
                }
                if let Err(e) = self.save(Some((rank, false))) {
                    outage = Some(format!("saving the job's placement: {e}"));
                    continue;
                }
                let command = self.start_command(&dir, r, &placed.placement);
                match cluster.exec.exec(&placed.namespace, pod, command).await {
                    Ok(out) => match job_scripts::parse_start(&out) {
                        Some(Started::Yes) => self.nodes[rank].started = true,
                        Some(Started::Unready) | None => {
                            self.log(
                                r,
                                &format!(
                                    "skyc: worker pod {pod} cannot take the job: {}\n",
                                    out.trim()
                                ),
                            );
                            self.nodes[rank].ended = true;
                            self.event(lost);
                        }
                    },
                    Err(ExecError::Gone(why)) => {
                        let unsure = self.gone(cluster, &placed.namespace, pod, rank, &why).await;
                        self.nodes[rank].unanswered |= unsure.is_some();
                        outage = unsure.or(outage);
                    }
                    Err(ExecError::Failed(why)) => {
                        self.nodes[rank].unanswered = true;
                        outage = Some(why);
                    }
                    Err(ExecError::Denied(why)) => denied = Some(why),
                }
                continue;
            }
            let stop = !current || tg.want != Want::Run || self.goal.cancel;
            if stop && (!node.termed || (self.kill && !node.killed)) {
                let kill = self.kill;
                if kill {
                    if let Err(e) = self.save(Some((rank, true))) {
                        outage = Some(format!("saving the job's placement: {e}"));
                        continue;
                    }
                    self.nodes[rank].kill_asked = true;
                }
                let command = job_scripts::signal(&dir, kill);
                let sent = match cluster.exec.exec(&placed.namespace, pod, command).await {
                    Ok(_) => Ok(()),
                    // Gone with the pod: nothing left to signal (its poll
                    // tells the loss). A pod that runs is signalled again.
                    Err(ExecError::Gone(why)) => {
                        match pod_gone(cluster, &placed.namespace, pod).await {
                            Ok(true) => Ok(()),
                            Ok(false) => Err(ExecError::Failed(unconfirmed(pod, &why))),
                            Err(e) => Err(ExecError::Failed(e)),
                        }
                    }
                    Err(e) => Err(e),
                };
                match sent {
                    Ok(()) => {
                        self.nodes[rank].termed = true;
                        self.nodes[rank].killed |= kill;
                    }
                    Err(ExecError::Gone(why)) => outage = Some(why),
                    Err(ExecError::Failed(why)) => outage = Some(why),
                    Err(ExecError::Denied(why)) => denied = Some(why),
                }
            }
            'poll: loop {
                let offset = self.offset(r);
                match cluster
                    .exec
                    .exec(&placed.namespace, pod, job_scripts::poll(&dir, offset))
                    .await
                {
                    Ok(out) => match job_scripts::parse_poll(&out) {
                        Some((state, log)) => {
                            self.append(r, offset, &log);
                            // A full chunk: more of the log is left, read
                            // before its end is reported (the next poll, at
                            // once).
                            let more = log.len() as u64 >= job_scripts::LOG_CHUNK_BYTES;
                            let killed = self.nodes[rank].killed || self.nodes[rank].kill_asked;
                            let exit = match state {
                                State::Running => None,
                                State::Exited(code) => Some(code),
                                // Killed by the engine's SIGKILL.
                                State::Vanished if killed => Some(137),
                                State::Absent | State::Vanished => None,
                            };
                            if state != State::Running && more {
                                continue 'poll;
                            }
                            if let Some(code) = exit {
                                self.nodes[rank].ended = true;
                                self.event(Event::NodeExited {
                                    task: 0,
                                    attempt,
                                    node: r,
                                    phase: Phase::Run,
                                    code,
                                });
                            } else if state != State::Running {
                                self.log(
                                    r,
                                    &format!(
                                        "skyc: the job's process in worker pod {pod} is gone\n"
                                    ),
                                );
                                self.nodes[rank].ended = true;
                                self.event(lost);
                            }
                        }
                        None => {
                            outage = Some(format!(
                                "an answer of pod {pod} that is not skyc's: {out:?}"
                            ))
                        }
                    },
                    Err(ExecError::Gone(why)) => {
                        let unsure = self.gone(cluster, &placed.namespace, pod, rank, &why).await;
                        outage = unsure.or(outage);
                    }
                    Err(ExecError::Failed(why)) => outage = Some(why),
                    Err(ExecError::Denied(why)) => denied = Some(why),
                }
                break;
            }
        }
        self.deny(denied);
        if current && tg.want == Want::Run && self.nodes.iter().all(|n| n.started) {
            self.event(Event::TaskStarted { task: 0, attempt });
        }
        self.set_outage(outage);
        if self.goal.end.is_some() && self.nodes.iter().all(|n| n.ended || !n.started) {
            self.settle();
        }
    }

    /// An exec answered that node `rank`'s pod is gone: the node is lost
    /// once the pod itself, read, says so ([`pod_gone`]); else the
    /// outage to show, and the node is asked again.
    async fn gone(
        &mut self,
        cluster: &Cluster,
        namespace: &str,
        pod: &str,
        rank: usize,
        why: &str,
    ) -> Option<String> {
        match pod_gone(cluster, namespace, pod).await {
            Ok(true) => {
                let r = rank as u32;
                self.log(r, &format!("skyc: worker pod {pod} is gone: {why}\n"));
                self.nodes[rank].ended = true;
                let attempt = self.placed.as_ref().map_or(0, |p| p.attempt);
                self.event(Event::NodeLost {
                    task: 0,
                    attempt,
                    node: r,
                });
                None
            }
            Ok(false) => Some(unconfirmed(pod, why)),
            Err(e) => Some(e),
        }
    }

    /// An exec the API server refuses is no outage: the user must act
    /// (grant `pods/exec`), so it is shown once as an error; the job's
    /// nodes are asked again each pass meanwhile.
    fn deny(&mut self, denied: Option<String>) {
        if let Some(why) = &denied
            && self.denied.as_ref() != Some(why)
        {
            self.out.send(Report::Error(format!(
                "the API server refuses an exec in the job's worker pods: {why}"
            )));
        }
        self.denied = denied;
    }

    fn settle(&mut self) {
        self.tell(Report::Settled);
    }

    fn log_path(&self, rank: u32) -> PathBuf {
        let task = &self.plan.spec.tasks[0].name;
        crate::paths::log(&self.group_dir, task, rank)
    }

    /// How much of node `rank`'s log of the placed attempt is kept here.
    fn offset_path(&self, rank: u32) -> PathBuf {
        let attempt = self.placed.as_ref().map_or(0, |p| p.attempt);
        self.group_dir
            .join("logs")
            .join(".k8s")
            .join(format!("job-{rank}-{attempt}"))
    }

    fn offset(&self, rank: u32) -> u64 {
        std::fs::read_to_string(self.offset_path(rank))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Appends what a poll read from `offset`, then records the new
    /// offset, so a new supervisor neither loses nor repeats a byte
    /// (short of a crash between the two writes).
    fn append(&self, rank: u32, offset: u64, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.write_log(rank, bytes);
        let path = self.offset_path(rank);
        if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
            let _ = std::fs::create_dir_all(dir);
            let _ = crate::paths::write_atomic(
                dir,
                &name.to_string_lossy(),
                &(offset + bytes.len() as u64).to_string(),
            );
        }
    }

    /// A line of skyc's own in node `rank`'s log.
    fn log(&self, rank: u32, line: &str) {
        self.write_log(rank, line.as_bytes());
    }

    fn write_log(&self, rank: u32, bytes: &[u8]) {
        let path = self.log_path(rank);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            let _ = f.write_all(bytes);
        }
    }

    /// Backoff for a cluster that does not answer.
    pub(super) fn backoff(&self) -> Backoff {
        self.backoff
    }
}

/// Whether the worker's pod is gone as its own object says: not there,
/// being deleted, not running, or its container not running. An exec's
/// 404 or 400 alone is not taken for it: a proxy or a misrouted request
/// answers those too, and a job taken as lost runs a second time.
async fn pod_gone(cluster: &Cluster, namespace: &str, pod: &str) -> Result<bool, String> {
    let api: Api<Pod> = Api::namespaced(cluster.client.clone(), namespace);
    let found = tokio::time::timeout(CALL_TIMEOUT, api.get_opt(pod))
        .await
        .map_err(|_| {
            format!(
                "reading worker pod {pod}: no answer within {} s",
                CALL_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| format!("reading worker pod {pod}: {e}"))?;
    let Some(found) = found else {
        return Ok(true);
    };
    let status = found.status.unwrap_or_default();
    let running = status.phase.as_deref() == Some("Running")
        && status
            .container_statuses
            .unwrap_or_default()
            .iter()
            .filter(|c| c.name == CONTAINER)
            .all(|c| c.state.as_ref().is_none_or(|s| s.running.is_some()));
    Ok(found.metadata.deletion_timestamp.is_some() || !running)
}

/// The outage of an exec answered "gone" for a pod that runs.
fn unconfirmed(pod: &str, why: &str) -> String {
    format!("an exec in worker pod {pod} answered {why}, but the pod runs: asking again")
}
