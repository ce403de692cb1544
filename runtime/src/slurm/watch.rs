//! A group run on Slurm, as the supervisor keeps it: submitted once, then
//! polled (squeue, the batch script's status file) into a [`Tracker`], and
//! the tracker's statuses written to the store.
//!
//! Nothing here is needed to survive a supervisor crash but the job id:
//! the status file and Slurm hold the rest, so a new supervisor rebuilds
//! the tracker by reading the file from the start. The one gap, a crash
//! inside sbatch, is closed by marking the group before sbatch runs and
//! finding the job by its `--comment` afterwards.

use super::status::What;
use super::{JobState, Plan, Slurm, SlurmError, StatusLine, Tracker, read_status};
use crate::policy::Status;
use crate::store::{NodeRow, Store};
use serde_json::json;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often squeue is asked about a group's job: a call to slurmctld,
/// once a second keeps job states fresh without loading a busy controller.
pub const POLL: Duration = Duration::from_secs(1);

/// How often the batch script's status file is read: a local (or shared)
/// file, where task statuses change.
const STATUS_POLL_MS: i64 = 200;

/// The supervisor's marker (the group's `pending`) while sbatch may have
/// submitted the job but its id is not recorded yet.
pub const SUBMITTING: &str = "slurm-submitting";

pub struct Watch {
    gid: i64,
    plan: Plan,
    /// The job's directory ([`Plan::out_dir`]).
    out: PathBuf,
    slurm: Slurm,
    job: String,
    tracker: Tracker,
    next_poll_ms: i64,
    next_squeue_ms: i64,
    /// Polls in a row that found every component ended.
    ended_polls: u32,
    /// Status lines already recorded as events.
    recorded: usize,
    /// The component states last recorded.
    states: Vec<JobState>,
    /// What was last written to the store.
    written: Option<Snapshot>,
}

/// Everything a poll writes, to write only changes.
#[derive(Clone, Debug, PartialEq)]
struct Snapshot {
    group: Status,
    tasks: Vec<(Status, u32, (u32, u32))>,
    nodes: Vec<NodeRow>,
}

type Error = String;

fn store_error(e: crate::store::Error) -> Error {
    format!("state store: {e}")
}

fn slurm_error(e: SlurmError) -> Error {
    e.to_string()
}

impl Watch {
    /// Takes charge of a group: submits it, or finds the job a previous
    /// supervisor submitted.
    pub fn adopt(
        store: &mut Store,
        state_dir: &Path,
        gid: i64,
        now_ms: i64,
    ) -> Result<Self, Error> {
        let plan: Plan = serde_json::from_str(&store.plan(gid).map_err(store_error)?)
            .map_err(|e| format!("the group's Slurm plan: {e}"))?;
        let row = store
            .group(gid)
            .map_err(store_error)?
            .ok_or("the group vanished from the store")?;
        let state = store.runtime_state(gid).map_err(store_error)?;
        let slurm = plan.cluster();
        let out = plan.out_dir(state_dir, gid);
        let job = match row.job {
            Some(job) => job,
            None => {
                let found = if state.pending.as_deref() == Some(SUBMITTING) {
                    find(&slurm, &plan, &out)?
                } else {
                    None
                };
                let job = match found {
                    Some(job) => job,
                    None => submit(store, gid, &slurm, &plan, &out)?,
                };
                store
                    .transaction(|tx| {
                        tx.set_job(gid, &job)?;
                        tx.set_pending(gid, None)?;
                        tx.append_event(gid, now_ms, &json!({ "slurm_submitted": job }).to_string())
                    })
                    .map_err(store_error)?;
                job
            }
        };
        let tracker = Tracker::new(plan.spec.clone());
        Ok(Self {
            gid,
            plan,
            out,
            slurm,
            job,
            tracker,
            next_poll_ms: now_ms,
            next_squeue_ms: now_ms,
            ended_polls: 0,
            recorded: 0,
            states: Vec::new(),
            written: None,
        })
    }

    pub fn job(&self) -> &str {
        &self.job
    }

    pub fn next_poll_ms(&self) -> i64 {
        self.next_poll_ms
    }

    /// Cancels the whole job; its end arrives through the next polls.
    pub fn cancel(&mut self, now_ms: i64) -> Result<(), Error> {
        self.next_poll_ms = now_ms;
        self.next_squeue_ms = now_ms;
        self.slurm.cancel(&self.job).map_err(slurm_error)
    }

    /// Polls the job and records what changed; `Ok(true)` once the group
    /// has ended and is recorded so.
    pub fn poll(&mut self, store: &mut Store, now_ms: i64) -> Result<bool, Error> {
        self.next_poll_ms = now_ms + STATUS_POLL_MS;
        // The status file first, then squeue: a job found PENDING after
        // the file showed it running was requeued, never the reverse.
        let lines = read_status(&self.out);
        self.tracker.update(&lines);
        let query = now_ms >= self.next_squeue_ms || self.tracker.ended_by_script();
        let mut finished = false;
        let states = if query {
            self.next_squeue_ms = now_ms + POLL.as_millis() as i64;
            let mut states: Vec<JobState> = self
                .slurm
                .components(&self.job)
                .map_err(slurm_error)?
                .into_iter()
                .map(|c| c.state)
                .collect();
            if states.is_empty() {
                // Forgotten by slurmctld (MinJobAge): accounting may remember.
                states = self.accounted_states().unwrap_or_default();
            }
            self.tracker.observe(&states);
            let ended = states.iter().all(JobState::is_terminal);
            self.ended_polls = if ended { self.ended_polls + 1 } else { 0 };
            // A requeue can pass through an ended-looking state; only the
            // script's last line, a cancel, or the same answer twice is
            // the end.
            finished = ended
                && (self.tracker.ended_by_script()
                    || states.is_empty()
                    || states.iter().all(|s| *s == JobState::Cancelled)
                    || self.ended_polls >= 2);
            // Ending (or to be confirmed): ask again soon.
            if (ended && !finished) || states.contains(&JobState::Completing) {
                self.next_squeue_ms = now_ms + STATUS_POLL_MS;
            }
            states
        } else {
            self.states.clone()
        };
        let mut errors: Vec<String> = lines[self.recorded.min(lines.len())..]
            .iter()
            .filter_map(|l| match &l.what {
                What::Error(message) => Some(message.clone()),
                _ => None,
            })
            .collect();
        if finished && !self.tracker.ended_by_script() {
            if states.is_empty() {
                self.tracker.forgotten();
                errors.push(format!(
                    "Slurm no longer knows job {} and its batch script recorded no end",
                    self.job
                ));
            } else if !states.contains(&JobState::Cancelled) {
                let names: Vec<&str> = states.iter().map(JobState::name).collect();
                errors.push(format!(
                    "job {} ended {} before its batch script recorded the group's end; \
                     see {}",
                    self.job,
                    names.join(","),
                    self.out
                        .join(format!("skyc-{}-{}.out", self.plan.group, self.job))
                        .display()
                ));
            }
        }
        let snapshot = self.snapshot(&lines);
        let new_lines = &lines[self.recorded.min(lines.len())..];
        let states_changed = states != self.states;
        if self.written.as_ref() == Some(&snapshot)
            && new_lines.is_empty()
            && !states_changed
            && errors.is_empty()
            && !finished
        {
            return Ok(false);
        }
        let gid = self.gid;
        store
            .transaction(|tx| {
                for line in new_lines {
                    let at = (line.time * 1000.0) as i64;
                    tx.append_event(gid, at, &json!({ "slurm": line }).to_string())?;
                }
                if states_changed {
                    let names: Vec<&str> = states.iter().map(JobState::name).collect();
                    tx.append_event(gid, now_ms, &json!({ "slurm_job": names }).to_string())?;
                }
                for error in &errors {
                    tx.set_error(gid, error)?;
                }
                tx.set_group_status(gid, snapshot.group.as_str())?;
                for (task, (status, attempt, restarts)) in snapshot.tasks.iter().enumerate() {
                    tx.set_task(gid, task, status.as_str(), *attempt, *restarts)?;
                }
                for node in &snapshot.nodes {
                    tx.upsert_node(gid, node)?;
                }
                if finished {
                    tx.finish_group(gid, now_ms)?;
                }
                Ok(())
            })
            .map_err(store_error)?;
        self.recorded = lines.len();
        self.states = states;
        self.written = Some(snapshot);
        Ok(finished)
    }

    /// The group's status, as last polled.
    pub fn group_status(&self) -> Status {
        self.tracker.group_status()
    }

    /// sacct's states of the job's components (not of its steps).
    fn accounted_states(&self) -> Option<Vec<JobState>> {
        let rows = self.slurm.accounting(&self.job).ok()??;
        Some(
            rows.iter()
                .filter(|r| r.len() >= 3 && !r[0].contains('.'))
                .map(|r| JobState::parse(&r[2]))
                .collect(),
        )
    }

    fn snapshot(&self, lines: &[StatusLine]) -> Snapshot {
        let engine = self.tracker.engine();
        let tasks = (0..self.plan.spec.tasks.len())
            .map(|t| {
                (
                    self.tracker.task_status(t),
                    engine.attempt(t),
                    engine.restarts(t),
                )
            })
            .collect();
        Snapshot {
            group: self.tracker.group_status(),
            tasks,
            nodes: self.nodes(lines),
        }
    }

    /// The nodes of the current run: addresses from its hosts file, ends
    /// from the status lines of each task's current attempt.
    fn nodes(&self, lines: &[StatusLine]) -> Vec<NodeRow> {
        let restart = self.tracker.restarts();
        let hosts = self
            .out
            .join(".skyc")
            .join(format!("r{restart}"))
            .join("hosts");
        let engine = self.tracker.engine();
        let mut nodes = Vec::new();
        for (ip, hostname) in read_hosts(&hosts) {
            let Some((task, rank)) = self.node_of(&hostname) else {
                continue;
            };
            let attempt = engine.attempt(task);
            let end = lines.iter().rev().find_map(|l| match &l.what {
                What::Node {
                    name,
                    attempt: a,
                    rank: r,
                    phase,
                    code,
                } if l.restart == restart
                    && *name == self.plan.spec.tasks[task].name
                    && *a == attempt
                    && *r == rank =>
                {
                    Some((phase.clone(), *code))
                }
                _ => None,
            });
            nodes.push(NodeRow {
                task: task as i64,
                rank: i64::from(rank),
                hostname,
                ip,
                pid: None,
                attempt: i64::from(attempt),
                phase: end.as_ref().map(|e| e.0.clone()),
                exit_code: end.map(|e| i64::from(e.1)),
            });
        }
        nodes
    }

    /// `{task}-{rank}.{group}` back to its task and rank.
    fn node_of(&self, hostname: &str) -> Option<(usize, u32)> {
        let node = hostname.strip_suffix(&format!(".{}", self.plan.group))?;
        let (name, rank) = node.rsplit_once('-')?;
        let task = self.plan.spec.tasks.iter().position(|t| t.name == name)?;
        let rank: u32 = rank.parse().ok()?;
        (rank < self.plan.num_nodes[task]).then_some((task, rank))
    }
}

/// Writes the script and submits it, marking the group first so that a
/// crash inside sbatch is recovered by [`find`], not by a second job.
fn submit(
    store: &mut Store,
    gid: i64,
    slurm: &Slurm,
    plan: &Plan,
    out: &Path,
) -> Result<String, Error> {
    if out.join("status").exists() {
        return Err(format!(
            "{} holds the output of another run; choose a new directory",
            out.display()
        ));
    }
    let script = out.join("job.sh");
    fs::create_dir_all(out)
        .and_then(|()| fs::write(&script, &plan.script))
        .map_err(|e| format!("{}: {e}", out.display()))?;
    store
        .transaction(|tx| tx.set_pending(gid, Some(SUBMITTING)))
        .map_err(store_error)?;
    slurm
        .submit_as(&script, out, &plan.env, &plan.token)
        .map_err(slurm_error)
}

/// The job a supervisor submitted before it died: in the queue by its
/// comment, or named by the status file once Slurm has forgotten it.
fn find(slurm: &Slurm, plan: &Plan, out: &Path) -> Result<Option<String>, Error> {
    if let Some(job) = slurm.find(&plan.token).map_err(slurm_error)? {
        return Ok(Some(job));
    }
    Ok(read_status(out).into_iter().find_map(|l| match l.what {
        What::JobStart { leader } => Some(leader),
        _ => None,
    }))
}

/// `IP HOSTNAME` lines.
fn read_hosts(path: &Path) -> Vec<(String, String)> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.to_owned(), f.next()?.to_owned()))
        })
        .collect()
}
