//! A group run on Slurm, as the supervisor keeps it: submitted once, then
//! polled (the batch script's status file, squeue) into a [`Tracker`], and
//! the tracker's statuses written to the store.
//!
//! A Watch holds nothing that is not in the store, the job directory or
//! Slurm: a new supervisor rebuilds the tracker from the status file. The
//! gap around sbatch is closed by a marker written before it runs and the
//! job's `--comment`: a supervisor that finds the marker waits for any
//! sbatch of the group still running, then looks the job up before it
//! would submit again.

use super::status::What;
use super::{
    JobState, Plan, Slurm, SlurmError, StatusFile, StatusLine, Tracker, is_job_id, read_status,
};
use crate::backend::{NodeInfo, Report, Statuses};
use crate::policy::Status;
use crate::store::Store;
use serde_json::json;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often squeue is asked about a group's job: a call to slurmctld,
/// once a second keeps job states fresh without loading a busy controller.
pub const POLL: Duration = Duration::from_secs(1);

/// How often the batch script's status file is read: a local (or shared)
/// file, where task statuses change.
const STATUS_POLL_MS: i64 = 200;

/// How long every component must look ended, without the script's last
/// line, before that is the group's end: a requeue passes through such
/// states, and a shared filesystem may show the last line late.
const CONFIRM_END_MS: i64 = 5_000;

/// After the script's last line, how long squeue may fail before the group
/// ends on the script's word alone.
const SQUEUE_GIVE_UP_MS: i64 = 30_000;

/// How often a cancel is sent again until the job has ended.
const CANCEL_AGAIN_MS: i64 = 5_000;

/// The supervisor's marker (the group's `pending`) while sbatch may have
/// submitted the job but its id is not recorded yet.
pub const SUBMITTING: &str = "slurm-submitting";

/// The file that claims a job directory for one group (its token).
const OWNER: &str = ".skyc-owner";

pub struct Watch {
    plan: Plan,
    /// The job's directory ([`Plan::out_dir`]).
    out: PathBuf,
    slurm: Slurm,
    job: String,
    /// The batch script's status file, read as it grows.
    status: StatusFile,
    tracker: Tracker,
    next_poll_ms: i64,
    next_squeue_ms: i64,
    /// Since when every component has looked ended.
    ended_since_ms: Option<i64>,
    /// Since when squeue has been failing.
    failing_since_ms: Option<i64>,
    /// A cancel was asked for; when to send it again.
    cancel_at_ms: Option<i64>,
    /// Status lines already recorded as events.
    recorded: usize,
    /// The component states last recorded.
    states: Vec<JobState>,
    /// What was last written to the store.
    written: Option<Snapshot>,
}

/// Why a group could not be taken charge of.
#[derive(Debug)]
pub enum AdoptError {
    /// The group cannot run (sbatch refused it, the directory is taken).
    Fatal(String),
    /// Slurm could not be asked; try again later.
    Retry(String),
}

/// Everything a poll writes, to write only changes.
#[derive(Clone, Debug, PartialEq)]
struct Snapshot {
    statuses: Statuses,
    nodes: Vec<NodeInfo>,
}

/// What one poll found.
pub struct Polled {
    /// For the store, in order.
    pub reports: Vec<Report>,
    /// The group has ended (the last report is [`Report::Settled`]).
    pub finished: bool,
    /// Slurm could not be asked (or the cancel not sent); the next poll
    /// tries again.
    pub problem: Option<String>,
}

fn fatal(message: impl std::fmt::Display) -> AdoptError {
    AdoptError::Fatal(message.to_string())
}

fn store_error(e: crate::store::Error) -> String {
    format!("state store: {e}")
}

impl Watch {
    /// A group whose job a previous supervisor submitted (or found):
    /// what it recorded is not recorded again.
    pub fn resume(
        store: &Store,
        state_dir: &Path,
        gid: i64,
        plan: Plan,
        job: String,
        cancel_requested: bool,
        now_ms: i64,
    ) -> Result<Self, String> {
        let recorded = store
            .count_events_keyed(gid, "slurm")
            .map_err(store_error)?;
        let states = store
            .last_event_keyed(gid, "slurm_job")
            .map_err(store_error)?
            .and_then(|e| serde_json::from_str::<serde_json::Value>(&e).ok())
            .and_then(|v| {
                v["slurm_job"].as_array().map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(JobState::parse))
                        .collect()
                })
            })
            .unwrap_or_default();
        let mut watch = Self::new(state_dir, gid, plan, job, now_ms);
        watch.recorded = recorded;
        watch.states = states;
        // A cancel a previous supervisor saw may not have reached Slurm.
        watch.cancel_at_ms = cancel_requested.then_some(now_ms);
        Ok(watch)
    }

    /// A group whose job was just submitted.
    pub fn new(state_dir: &Path, gid: i64, plan: Plan, job: String, now_ms: i64) -> Self {
        let out = plan.out_dir(state_dir, gid);
        Self {
            tracker: Tracker::new(plan.spec.clone()),
            status: StatusFile::new(&out),
            slurm: plan.cluster(),
            plan,
            out,
            job,
            next_poll_ms: now_ms,
            next_squeue_ms: now_ms,
            ended_since_ms: None,
            failing_since_ms: None,
            cancel_at_ms: None,
            recorded: 0,
            states: Vec::new(),
            written: None,
        }
    }

    pub fn job(&self) -> &str {
        &self.job
    }

    pub fn next_poll_ms(&self) -> i64 {
        self.next_poll_ms
    }

    /// Asks for the job's cancel: scancel now, and again until the job
    /// has ended; the end arrives through the polls.
    pub fn cancel(&mut self, now_ms: i64) {
        self.cancel_at_ms = Some(now_ms);
        self.next_poll_ms = now_ms;
        self.next_squeue_ms = now_ms;
    }

    /// Polls the job: what changed, for the store.
    pub fn poll(&mut self, now_ms: i64) -> Polled {
        self.next_poll_ms = now_ms + STATUS_POLL_MS;
        let mut problem = None;
        if let Some(at) = self.cancel_at_ms
            && at <= now_ms
        {
            self.cancel_at_ms = Some(now_ms + CANCEL_AGAIN_MS);
            if let Err(e) = self.slurm.cancel(&self.job) {
                problem = Some(format!("cancelling: {e}"));
            }
        }
        // The status file first, then squeue: a job found PENDING after
        // the file showed it running was requeued, never the reverse.
        let fresh = self.status.refresh();
        self.tracker.update(self.status.lines());
        let query = now_ms >= self.next_squeue_ms || self.tracker.ended_by_script();
        if !query && fresh == 0 {
            // Nothing can have changed: statuses, nodes (the run's hosts
            // file precedes its first line) and errors all follow lines.
            return Polled {
                reports: Vec::new(),
                finished: false,
                problem,
            };
        }
        let mut finished = false;
        let states = if query {
            self.next_squeue_ms = now_ms + POLL.as_millis() as i64;
            match self.query() {
                Ok(states) => {
                    self.failing_since_ms = None;
                    self.tracker.observe(&states);
                    finished = self.ended(&states, now_ms);
                    states
                }
                Err(e) => {
                    let since = *self.failing_since_ms.get_or_insert(now_ms);
                    // The script said its last word and Slurm cannot be
                    // asked: the word stands.
                    finished =
                        self.tracker.ended_by_script() && now_ms - since >= SQUEUE_GIVE_UP_MS;
                    problem = Some(e.to_string());
                    self.states.clone()
                }
            }
        } else {
            self.states.clone()
        };
        if finished {
            self.cancel_at_ms = None;
            self.tracker.conclude();
        }
        let lines = self.status.lines();
        let new_lines = &lines[self.recorded.min(lines.len())..];
        let mut errors: Vec<String> = new_lines
            .iter()
            .filter_map(|l| match &l.what {
                What::Error(message) => Some(message.clone()),
                _ => None,
            })
            .collect();
        if finished && !self.tracker.ended_by_script() {
            errors.push(self.unfinished_reason(&states));
        }
        let snapshot = self.snapshot(lines);
        let states_changed = states != self.states;
        let mut reports = Vec::new();
        if self.written.as_ref() != Some(&snapshot)
            || !new_lines.is_empty()
            || states_changed
            || !errors.is_empty()
            || finished
        {
            let changed_states = states_changed.then_some(states.as_slice());
            reports = Self::reports(&snapshot, new_lines, changed_states, &errors, now_ms);
            if finished {
                reports.push(Report::Settled);
            }
            self.recorded = lines.len();
            self.states = states;
            self.written = Some(snapshot);
        }
        Polled {
            reports,
            finished,
            problem: problem.filter(|_| !finished),
        }
    }

    /// The components' states: squeue, else sacct once slurmctld has
    /// forgotten the job (`MinJobAge`); empty when neither knows it.
    fn query(&self) -> Result<Vec<JobState>, SlurmError> {
        let states: Vec<JobState> = self
            .slurm
            .components(&self.job)?
            .into_iter()
            .map(|c| c.state)
            .collect();
        if !states.is_empty() {
            return Ok(states);
        }
        Ok(self
            .slurm
            .accounting(&self.job)?
            .unwrap_or_default()
            .iter()
            .filter(|r| r.len() >= 3 && !r[0].contains('.'))
            .map(|r| JobState::parse(&r[2]))
            .collect())
    }

    /// Whether the job has ended for good, given its states now.
    fn ended(&mut self, states: &[JobState], now_ms: i64) -> bool {
        if !states.iter().all(JobState::is_terminal) {
            self.ended_since_ms = None;
            if states.contains(&JobState::Completing) {
                self.next_squeue_ms = now_ms + STATUS_POLL_MS;
            }
            return false;
        }
        let since = *self.ended_since_ms.get_or_insert(now_ms);
        // Final at once: the script's last line, or a cancel (no requeue
        // follows one, even when some components ended otherwise). Otherwise
        // (a job nobody knows any more included) the same answer for a
        // while.
        let finished = self.tracker.ended_by_script()
            || states.contains(&JobState::Cancelled)
            || now_ms - since >= CONFIRM_END_MS;
        if !finished {
            self.next_squeue_ms = now_ms + STATUS_POLL_MS;
        }
        finished
    }

    fn unfinished_reason(&self, states: &[JobState]) -> String {
        if states.is_empty() {
            return format!(
                "Slurm no longer knows job {} and its batch script recorded no end",
                self.job
            );
        }
        if states.iter().all(|s| *s == JobState::Cancelled) {
            return format!("job {} was cancelled", self.job);
        }
        let names: Vec<&str> = states.iter().map(JobState::name).collect();
        format!(
            "job {} ended {} before its batch script recorded the group's end; see {}",
            self.job,
            names.join(","),
            self.out
                .join(format!("skyc-{}-{}.out", self.plan.group, self.job))
                .display()
        )
    }

    /// What to record of a poll, in the order the store takes it.
    fn reports(
        snapshot: &Snapshot,
        new_lines: &[StatusLine],
        changed_states: Option<&[JobState]>,
        errors: &[String],
        now_ms: i64,
    ) -> Vec<Report> {
        let mut reports = Vec::new();
        for line in new_lines {
            reports.push(Report::Record {
                at_ms: (line.time * 1000.0) as i64,
                entry: json!({ "slurm": line }).to_string(),
            });
        }
        if let Some(states) = changed_states {
            let names: Vec<&str> = states.iter().map(JobState::name).collect();
            reports.push(Report::Record {
                at_ms: now_ms,
                entry: json!({ "slurm_job": names }).to_string(),
            });
        }
        reports.extend(errors.iter().cloned().map(Report::Error));
        reports.push(Report::Statuses(snapshot.statuses.clone()));
        reports.extend(snapshot.nodes.iter().cloned().map(Report::Node));
        reports
    }

    /// The group's status, as last polled.
    pub fn group_status(&self) -> Status {
        self.tracker.group_status()
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
            statuses: Statuses {
                group: self.tracker.group_status(),
                tasks,
            },
            nodes: self.nodes(lines),
        }
    }

    /// The nodes of the current run: addresses from its hosts file, ends
    /// from the status lines of each task's current attempt.
    fn nodes(&self, lines: &[StatusLine]) -> Vec<NodeInfo> {
        let restart = self.tracker.restarts();
        let hosts = self
            .out
            .join(".skyc")
            .join(format!("r{restart}"))
            .join("hosts");
        let engine = self.tracker.engine();
        let mut nodes = Vec::new();
        for (ip, hostname) in read_hosts(&hosts) {
            let Some((task, rank)) = node_of(&self.plan, &hostname) else {
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
            nodes.push(NodeInfo {
                task,
                rank,
                attempt,
                hostname,
                ip,
                phase: end.as_ref().map(|e| e.0.clone()),
                exit_code: end.map(|e| e.1),
                ..NodeInfo::default()
            });
        }
        nodes
    }
}

/// `{task}-{rank}.{group}` back to its task and rank.
fn node_of(plan: &Plan, hostname: &str) -> Option<(usize, u32)> {
    let node = hostname.strip_suffix(&format!(".{}", plan.group))?;
    let (name, rank) = node.rsplit_once('-')?;
    let task = plan.spec.tasks.iter().position(|t| t.name == name)?;
    let rank: u32 = rank.parse().ok()?;
    (rank < *plan.num_nodes.get(task)?).then_some((task, rank))
}

/// Claims the job directory and writes the batch script into it; the
/// script's path.
pub(super) fn prepare(plan: &Plan, out: &Path) -> Result<PathBuf, String> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(out)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    claim(out, &plan.token).map_err(|e| match e {
        AdoptError::Fatal(m) | AdoptError::Retry(m) => m,
    })?;
    let script = out.join("job.sh");
    fs::write(&script, &plan.script).map_err(|e| format!("{}: {e}", script.display()))?;
    Ok(script)
}

/// Submits the prepared script; the group is marked [`SUBMITTING`] by
/// then, so that a crash around sbatch is recovered by [`find`], not by a
/// second job.
pub(super) fn submit(
    slurm: &Slurm,
    plan: &Plan,
    out: &Path,
    script: &Path,
) -> Result<String, AdoptError> {
    match slurm.submit_tagged(script, out, &plan.token) {
        Ok(job) => Ok(job),
        // sbatch can fail after slurmctld took the job (a timeout on the
        // answer): only a lookup tells.
        Err(e) => match find(slurm, plan, out) {
            Ok(Some(job)) => Ok(job),
            Ok(None) if is_transient(&e.message) => Err(AdoptError::Retry(e.to_string())),
            Ok(None) => Err(AdoptError::Fatal(e.to_string())),
            Err(lookup) => Err(AdoptError::Retry(format!("{e}; then {lookup}"))),
        },
    }
}

/// Makes `out` this group's: `.skyc-owner` created exclusively with the
/// group's token, or already holding it (a resubmission after a crash).
/// A directory with another run's output is refused.
fn claim(out: &Path, token: &str) -> Result<(), AdoptError> {
    let owner = out.join(OWNER);
    match fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&owner)
    {
        Ok(mut f) => {
            if out.join("status").exists() {
                let _ = fs::remove_file(&owner);
            } else {
                return f
                    .write_all(token.as_bytes())
                    .map_err(|e| fatal(format!("{}: {e}", owner.display())));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            if fs::read_to_string(&owner).is_ok_and(|t| t == token) {
                return Ok(());
            }
        }
        Err(e) => return Err(fatal(format!("{}: {e}", owner.display()))),
    }
    Err(fatal(format!(
        "{} holds the output of another run; choose a new directory",
        out.display()
    )))
}

/// sbatch errors after which the job may yet be submitted: slurmctld
/// could not be reached, or did not answer in time.
fn is_transient(message: &str) -> bool {
    [
        "Unable to contact",
        "timed out",
        "Socket",
        "temporarily",
        "Connection refused",
        "Zero Bytes",
        "no answer in",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// The job a supervisor submitted before it died: in the queue by its
/// comment, or named by the status file once Slurm has forgotten it.
pub(super) fn find(slurm: &Slurm, plan: &Plan, out: &Path) -> Result<Option<String>, String> {
    if let Some(job) = slurm.find(&plan.token).map_err(|e| e.to_string())? {
        return Ok(Some(job));
    }
    Ok(read_status(out).into_iter().find_map(|l| match l.what {
        What::JobStart { leader } if is_job_id(&leader) => Some(leader),
        _ => None,
    }))
}

/// Whether an sbatch carrying the group's token still runs (the dead
/// supervisor's child, which outlives it).
pub(super) fn sbatch_running(token: &str) -> bool {
    let needle = format!("--comment={token}");
    let Ok(entries) = fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == needle.as_bytes()))
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{GroupSpec, TaskSpec};

    fn plan(tasks: Vec<TaskSpec>) -> Plan {
        Plan {
            group: "g.x".into(),
            num_nodes: tasks.iter().map(|t| t.num_nodes).collect(),
            spec: GroupSpec {
                execution: crate::policy::Execution::Parallel,
                tasks,
                grace: Duration::ZERO,
            },
            script: String::new(),
            out_dir: None,
            env: Vec::new(),
            token: "t".into(),
        }
    }

    fn task(name: &str, n: u32) -> TaskSpec {
        TaskSpec {
            name: name.into(),
            primary: true,
            num_nodes: n,
            termination_delay: Duration::ZERO,
            max_restarts_on_errors: 0,
            recover_on_exit_codes: Vec::new(),
        }
    }

    #[test]
    fn group_hostnames_map_back_to_their_nodes() {
        let plan = plan(vec![task("a-b", 2), task("c", 1)]);
        assert_eq!(node_of(&plan, "a-b-1.g.x"), Some((0, 1)));
        assert_eq!(node_of(&plan, "c-0.g.x"), Some((1, 0)));
        assert_eq!(node_of(&plan, "c-1.g.x"), None, "rank past num_nodes");
        assert_eq!(node_of(&plan, "c-0.other"), None);
        assert_eq!(node_of(&plan, "d-0.g.x"), None);
    }

    #[test]
    fn a_job_directory_belongs_to_one_group() {
        let dir = std::env::temp_dir().join(format!("skyc-claim-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        assert!(claim(&dir, "one").is_ok());
        assert!(claim(&dir, "one").is_ok(), "the same group again");
        assert!(matches!(claim(&dir, "two"), Err(AdoptError::Fatal(_))));
        let other = dir.join("sub");
        fs::create_dir_all(&other).unwrap();
        fs::write(other.join("status"), "1 r0 group SUCCEEDED\n").unwrap();
        assert!(matches!(claim(&other, "one"), Err(AdoptError::Fatal(_))));
        assert!(!other.join(OWNER).exists());
        let _ = fs::remove_dir_all(&dir);
    }
}
