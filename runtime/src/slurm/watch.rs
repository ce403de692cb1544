//! A batch job run by `skyc run --target slurm`, as the supervisor keeps
//! it: a group's one job, or one step's of a pipeline. Submitted once,
//! then polled (the batch script's status file, squeue) into a
//! [`Tracker`], and the tracker's statuses written to the store.
//!
//! A Watch holds nothing that is not in the store, the job directory or
//! Slurm: a new supervisor rebuilds the tracker from the status file.
//! Submission is `submit.rs`'s.

use super::status::What;
use super::{JobState, Plan, Slurm, SlurmError, StatusFile, StatusLine, Tracker};
use crate::backend::{NodeInfo, Report, Statuses};
use crate::policy::{Execution, GroupSpec, Status};
use crate::store::Store;
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

/// How long every component must look ended, without the script's last
/// line, before that is the group's end: a requeue passes through such
/// states, and a shared filesystem may show the last line late.
const CONFIRM_END_MS: i64 = 5_000;

/// After the script's last line, how long squeue may fail before the group
/// ends on the script's word alone.
const SQUEUE_GIVE_UP_MS: i64 = 30_000;

/// How often a cancel is sent again until the job has ended.
const CANCEL_AGAIN_MS: i64 = 5_000;

/// What a [`Watch`] follows: one batch job, a group's or a pipeline
/// step's.
#[derive(Clone, Debug)]
pub struct Followed {
    /// The job's tasks (a step's: its one task).
    pub spec: GroupSpec,
    /// The group's (pipeline's) name: its hosts' names end with it.
    pub group: String,
    /// The job's name, as Slurm names its output
    /// (`skyc-<name>-<jobid>.out`, in `submit_dir`).
    pub name: String,
    /// The job's `SKYC_OUT`: status file, `logs/`, `.skyc/`.
    pub out: PathBuf,
    /// Where sbatch ran.
    pub submit_dir: PathBuf,
    /// The keys of its status lines and job states in the group's history:
    /// `slurm` and `slurm_job` for a group, `slurm.<i>` and
    /// `slurm_job.<i>` for a pipeline's step `i`.
    pub lines_key: String,
    pub states_key: String,
}

impl Followed {
    /// A group's one job.
    pub fn group(plan: &Plan, state_dir: &Path, gid: i64) -> Self {
        let out = plan.out_dir(state_dir, gid);
        Self {
            spec: plan.spec.clone(),
            group: plan.group.clone(),
            name: plan.group.clone(),
            submit_dir: out.clone(),
            out,
            lines_key: "slurm".into(),
            states_key: "slurm_job".into(),
        }
    }

    /// Step `i` of a pipeline: a job of one task.
    pub fn step(plan: &Plan, state_dir: &Path, gid: i64, i: usize) -> Self {
        let dir = plan.out_dir(state_dir, gid);
        let task = plan.spec.tasks[i].clone();
        Self {
            spec: GroupSpec {
                tasks: vec![task.clone()],
                grace: plan.spec.grace,
                execution: Execution::Parallel,
            },
            group: plan.group.clone(),
            out: dir.join(&task.name),
            name: task.name,
            submit_dir: dir,
            lines_key: format!("slurm.{i}"),
            states_key: format!("slurm_job.{i}"),
        }
    }
}

pub struct Watch {
    followed: Followed,
    /// The job's directory ([`Followed::out`]).
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
    /// Why the job is pending, as last reported.
    waiting: Option<String>,
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

fn store_error(e: crate::store::Error) -> String {
    format!("state store: {e}")
}

impl Watch {
    /// A job a previous supervisor submitted (or found): what it
    /// recorded is not recorded again.
    pub fn resume(
        store: &Store,
        gid: i64,
        slurm: Slurm,
        followed: Followed,
        job: String,
        cancel_requested: bool,
        now_ms: i64,
    ) -> Result<Self, String> {
        let recorded = store
            .count_events_keyed(gid, &followed.lines_key)
            .map_err(store_error)?;
        let states = store
            .last_event_keyed(gid, &followed.states_key)
            .map_err(store_error)?
            .and_then(|e| serde_json::from_str::<serde_json::Value>(&e).ok())
            .and_then(|v| {
                v[&followed.states_key].as_array().map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(JobState::parse))
                        .collect()
                })
            })
            .unwrap_or_default();
        let mut watch = Self::new(slurm, followed, job, now_ms);
        watch.recorded = recorded;
        watch.states = states;
        // A cancel a previous supervisor saw may not have reached Slurm.
        watch.cancel_at_ms = cancel_requested.then_some(now_ms);
        Ok(watch)
    }

    /// A job just submitted.
    pub fn new(slurm: Slurm, followed: Followed, job: String, now_ms: i64) -> Self {
        let out = followed.out.clone();
        Self {
            tracker: Tracker::new(followed.spec.clone()),
            status: StatusFile::new(&out),
            slurm,
            followed,
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
            waiting: None,
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
        self.tracker.cancel_asked(now_ms);
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
        let mut waiting = self.waiting.clone();
        let states = if query {
            self.next_squeue_ms = now_ms + POLL.as_millis() as i64;
            match self.query() {
                Ok((states, pending)) => {
                    waiting = pending;
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
            reports = self.reports(&snapshot, new_lines, changed_states, &errors, now_ms);
            if finished {
                reports.push(Report::Settled);
            }
            self.recorded = lines.len();
            self.states = states;
            self.written = Some(snapshot);
        }
        if waiting != self.waiting {
            // Every task of the job waits with it (a group's hetjob is
            // allocated whole).
            for task in 0..self.followed.spec.tasks.len() {
                reports.push(Report::Waiting {
                    task,
                    why: waiting.clone(),
                });
            }
            self.waiting = waiting;
        }
        Polled {
            reports,
            finished,
            problem: problem.filter(|_| !finished),
        }
    }

    /// The components' states, and why the job is pending when it is.
    fn query(&self) -> Result<(Vec<JobState>, Option<String>), SlurmError> {
        let components = self.slurm.components(&self.job)?;
        if components.is_empty() {
            return Ok((accounted_states(&self.slurm, &self.job)?, None));
        }
        let pending = components
            .iter()
            .find_map(|c| waiting_reason(&c.state, &c.reason));
        Ok((components.into_iter().map(|c| c.state).collect(), pending))
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
            self.followed
                .submit_dir
                .join(format!("skyc-{}-{}.out", self.followed.name, self.job))
                .display()
        )
    }

    /// What to record of a poll, in the order the store takes it.
    fn reports(
        &self,
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
                entry: json!({ &self.followed.lines_key: line }).to_string(),
            });
        }
        if let Some(states) = changed_states {
            let names: Vec<&str> = states.iter().map(JobState::name).collect();
            reports.push(Report::Record {
                at_ms: now_ms,
                entry: json!({ &self.followed.states_key: names }).to_string(),
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

    /// A task's status, attempt and restarts (all, on errors), as last
    /// polled.
    pub fn task(&self, task: usize) -> (Status, u32, (u32, u32)) {
        let engine = self.tracker.engine();
        (
            self.tracker.task_status(task),
            engine.attempt(task),
            engine.restarts(task),
        )
    }

    fn snapshot(&self, lines: &[StatusLine]) -> Snapshot {
        let tasks = (0..self.followed.spec.tasks.len())
            .map(|t| self.task(t))
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
            let Some((task, rank)) = node_of(&self.followed, &hostname) else {
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
                    && *name == self.followed.spec.tasks[task].name
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

/// The components' states of a job: squeue, else sacct once slurmctld has
/// forgotten the job (`MinJobAge`); empty when neither knows it.
pub(super) fn job_states(slurm: &Slurm, job: &str) -> Result<Vec<JobState>, SlurmError> {
    let states: Vec<JobState> = slurm
        .components(job)?
        .into_iter()
        .map(|c| c.state)
        .collect();
    if !states.is_empty() {
        return Ok(states);
    }
    accounted_states(slurm, job)
}

/// The components' states of a job slurmctld has forgotten, from sacct.
fn accounted_states(slurm: &Slurm, job: &str) -> Result<Vec<JobState>, SlurmError> {
    Ok(slurm
        .accounting(job)?
        .unwrap_or_default()
        .iter()
        .filter(|r| r.len() >= 3 && !r[0].contains('.'))
        .map(|r| JobState::parse(&r[2]))
        .collect())
}

/// Why a component waits: its squeue reason while it is PENDING, when
/// Slurm gives one.
pub(super) fn waiting_reason(state: &JobState, reason: &str) -> Option<String> {
    (*state == JobState::Pending && !matches!(reason, "" | "None")).then(|| pending_reason(reason))
}

/// Slurm's pending reason (squeue's `%r`), as Slurm says it, with what it
/// means for the common ones.
fn pending_reason(reason: &str) -> String {
    let meaning = match reason {
        "Resources" => Some("the nodes it asks for are busy"),
        "Priority" => Some("jobs of higher priority are ahead of it"),
        "Dependency" => Some("it waits for the job before it"),
        "BeginTime" => Some("its start time has not come"),
        "JobHeldUser" | "JobHeldAdmin" => Some("it is held"),
        "PartitionDown" | "PartitionInactive" => Some("its partition is not up"),
        "Reservation" => Some("it waits for its reservation"),
        r if r.starts_with("ReqNodeNotAvail") => {
            Some("nodes it needs are down, drained or reserved")
        }
        r if r.starts_with("QOS") || r.starts_with("Assoc") => {
            Some("a limit of its QOS or account holds it")
        }
        _ => None,
    };
    match meaning {
        Some(m) => format!("Slurm: {reason} ({m})"),
        None => format!("Slurm: {reason}"),
    }
}

/// `{task}-{rank}.{group}` back to its task and rank.
fn node_of(followed: &Followed, hostname: &str) -> Option<(usize, u32)> {
    let node = hostname.strip_suffix(&format!(".{}", followed.group))?;
    let (name, rank) = node.rsplit_once('-')?;
    let tasks = &followed.spec.tasks;
    let task = tasks.iter().position(|t| t.name == name)?;
    let rank: u32 = rank.parse().ok()?;
    (rank < tasks[task].num_nodes).then_some((task, rank))
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
    use crate::policy::TaskSpec;

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

    fn plan(execution: Execution, tasks: Vec<TaskSpec>) -> Plan {
        Plan {
            group: "g.x".into(),
            num_nodes: tasks.iter().map(|t| t.num_nodes).collect(),
            spec: GroupSpec {
                execution,
                tasks,
                grace: Duration::ZERO,
            },
            script: String::new(),
            steps: Vec::new(),
            out_dir: Some("/jobs".into()),
            env: Vec::new(),
            token: "t".into(),
        }
    }

    #[test]
    fn group_hostnames_map_back_to_their_nodes() {
        let plan = plan(Execution::Parallel, vec![task("a-b", 2), task("c", 1)]);
        let group = Followed::group(&plan, Path::new("/state"), 1);
        assert_eq!(node_of(&group, "a-b-1.g.x"), Some((0, 1)));
        assert_eq!(node_of(&group, "c-0.g.x"), Some((1, 0)));
        assert_eq!(node_of(&group, "c-1.g.x"), None, "rank past num_nodes");
        assert_eq!(node_of(&group, "c-0.other"), None);
        assert_eq!(node_of(&group, "d-0.g.x"), None);
    }

    #[test]
    fn a_pipeline_step_is_followed_as_a_job_of_its_one_task() {
        let plan = plan(Execution::Serial, vec![task("train", 2), task("eval", 1)]);
        let step = Followed::step(&plan, Path::new("/state"), 1, 1);
        assert_eq!(step.spec.tasks, vec![task("eval", 1)]);
        assert_eq!(step.spec.execution, Execution::Parallel);
        assert_eq!(step.out, Path::new("/jobs/eval"));
        assert_eq!(step.submit_dir, Path::new("/jobs"));
        assert_eq!((step.name.as_str(), step.group.as_str()), ("eval", "g.x"));
        assert_eq!(
            (step.lines_key.as_str(), step.states_key.as_str()),
            ("slurm.1", "slurm_job.1")
        );
        // The step's hosts file names its nodes after the pipeline.
        assert_eq!(node_of(&step, "eval-0.g.x"), Some((0, 0)));
        assert_eq!(node_of(&step, "train-0.g.x"), None, "another step's");
    }

    #[test]
    fn a_pending_reason_is_slurms_word_with_its_meaning() {
        assert_eq!(
            pending_reason("Resources"),
            "Slurm: Resources (the nodes it asks for are busy)"
        );
        assert_eq!(
            pending_reason("ReqNodeNotAvail, UnavailableNodes:n3"),
            "Slurm: ReqNodeNotAvail, UnavailableNodes:n3 (nodes it needs are down, drained or reserved)"
        );
        assert_eq!(
            pending_reason("QOSMaxGpuPerUser"),
            "Slurm: QOSMaxGpuPerUser (a limit of its QOS or account holds it)"
        );
        assert_eq!(pending_reason("Licenses"), "Slurm: Licenses");
    }
}
