//! A pipeline's submission and following against a fake Slurm: sbatch,
//! squeue, sacct and scancel as small bash scripts on the plan's `PATH`,
//! which record what they are asked and answer from files the test
//! writes. What a real cluster does with the jobs is `tests/slurm_run.rs`'s.

use crate::backend::{Adoption, Backend as _, Report, Role, Statuses};
use crate::policy::{Engine, Execution, GroupSpec, Status, TaskSpec};
use crate::slurm::{Plan, PlannedStep, SUBMITTING, SlurmBackend};
use crate::store::{Store, now_ms};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `sbatch` appends `ID|COMMENT|DEPENDENCY|SKYC_OUT|SKYC_PIPELINE_JOB|PWD|SCRIPT`
/// to `sbatch.log` and `ID|COMMENT` to `queue`, or refuses a script
/// listed in `refuse`; `squeue -j ID` answers `state.ID` (else PENDING)
/// for a job in `queue`; `scancel` appends its arguments to
/// `scancel.log`; sacct knows nothing.
const FAKES: [(&str, &str); 4] = [
    (
        "sbatch",
        r#"#!/bin/bash
d=${0%/*} comment="" dep=""
for a; do
    case $a in
    --comment=*) comment=${a#*=} ;;
    --dependency=*) dep=${a#*=} ;;
    esac
done
script=${!#}
if grep -qsx "${script##*/}" "$d/refuse"; then
    echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2
    exit 1
fi
n=$(cat "$d/next")
echo $((n + 1)) >"$d/next"
echo "$n|$comment|$dep|$SKYC_OUT|${SKYC_PIPELINE_JOB-unset}|$PWD|${script##*/}" >>"$d/sbatch.log"
echo "$n|$comment" >>"$d/queue"
echo "$n"
"#,
    ),
    (
        "squeue",
        r#"#!/bin/bash
d=${0%/*} job=""
while [ $# -gt 0 ]; do
    if [ "$1" = -j ]; then job=$2; fi
    shift
done
if [ -z "$job" ]; then
    cat "$d/queue"
elif grep -qs "^$job|" "$d/queue"; then
    echo "$job|$job|$(cat "$d/state.$job" 2>/dev/null || echo PENDING)|None|"
else
    echo "slurm_load_jobs error: Invalid job id specified" >&2
    exit 1
fi
"#,
    ),
    ("sacct", "#!/bin/bash\n"),
    (
        "scancel",
        "#!/bin/bash\necho \"$*\" >>\"${0%/*}/scancel.log\"\n",
    ),
];

/// A state directory, the fake Slurm, and a backend on them.
struct Fake {
    dir: PathBuf,
    store: Store,
    backend: SlurmBackend,
    plan: Plan,
}

impl Fake {
    /// Step `i`'s comment.
    fn tok(&self, i: usize) -> String {
        format!("{}-{i}", self.plan.token)
    }

    fn new(name: &str, steps: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("skyc-fake-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let bin = dir.join("bin");
        fs::create_dir_all(&bin).unwrap();
        for (name, text) in FAKES {
            let path = bin.join(name);
            fs::write(&path, text).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        fs::write(bin.join("next"), "101").unwrap();
        fs::write(bin.join("queue"), "").unwrap();
        let task = |name: &str| TaskSpec {
            name: name.into(),
            primary: true,
            num_nodes: 1,
            termination_delay: Duration::ZERO,
            max_restarts_on_errors: 0,
            recover_on_exit_codes: Vec::new(),
        };
        let plan = Plan {
            group: "p".into(),
            spec: GroupSpec {
                tasks: steps.iter().map(|s| task(s)).collect(),
                grace: Duration::from_secs(1),
                execution: Execution::Serial,
            },
            num_nodes: vec![1; steps.len()],
            script: String::new(),
            steps: steps
                .iter()
                .enumerate()
                .map(|(i, s)| PlannedStep {
                    name: (*s).into(),
                    script: format!("#!/bin/bash\n# step {i}\n"),
                    after: i.checked_sub(1),
                })
                .collect(),
            out_dir: Some(dir.join("jobs")),
            env: vec![("PATH".into(), format!("{}:/usr/bin:/bin", bin.display()))],
            // Unique: a submission is looked up by the sbatch processes of
            // its token, and tests run side by side.
            token: format!("tok.{name}.{}", std::process::id()),
        };
        let state = dir.join("state");
        fs::create_dir_all(&state).unwrap();
        Self {
            store: Store::open(&state).unwrap(),
            backend: SlurmBackend::new(&state),
            dir,
            plan,
        }
    }

    fn adopt(&mut self, job: Option<&str>, marker: Option<&str>, cancel_requested: bool) {
        let plan = serde_json::to_string(&self.plan).unwrap();
        let engine = Engine::new(self.plan.spec.clone());
        self.backend
            .adopt(
                1,
                &Adoption {
                    plan: &plan,
                    role: Role::Group,
                    name: "g",
                    engine: &engine,
                    fresh: job.is_none() && marker.is_none(),
                    job,
                    kept: None,
                    marker,
                    cancel_requested,
                    store: &self.store,
                },
            )
            .unwrap();
    }

    fn drain(&mut self) -> Vec<Report> {
        self.backend
            .drain(now_ms())
            .into_iter()
            .map(|(_, r)| r)
            .collect()
    }

    /// Drains until `done` holds for a report (a few seconds at most).
    fn drain_until(&mut self, done: impl Fn(&Report) -> bool) -> Vec<Report> {
        let mut all = Vec::new();
        for _ in 0..100 {
            let reports = self.drain();
            let stop = reports.iter().any(&done);
            all.extend(reports);
            if stop {
                return all;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("not seen in {all:?}");
    }

    fn jobs(&self) -> PathBuf {
        self.dir.join("jobs")
    }

    fn bin(&self, file: &str) -> String {
        fs::read_to_string(self.dir.join("bin").join(file)).unwrap_or_default()
    }

    /// `sbatch.log`, its fields split.
    fn submitted(&self) -> Vec<Vec<String>> {
        self.bin("sbatch.log")
            .lines()
            .map(|l| l.split('|').map(str::to_owned).collect())
            .collect()
    }

    /// What the dead supervisor left: the directory claimed and the
    /// scripts written (the marker is the adoption's), and jobs `ids` of
    /// the first steps submitted with their tokens.
    fn submitted_before(&self, ids: &[u32]) {
        let jobs = self.jobs();
        let subs = self.plan.submissions(&jobs);
        crate::slurm::submit::prepare(&self.plan, &jobs, &subs).unwrap();
        let mut queue = String::new();
        for (i, id) in ids.iter().enumerate() {
            queue.push_str(&format!("{id}|{}\n", self.tok(i)));
        }
        fs::write(self.dir.join("bin/queue"), queue).unwrap();
        let next = ids.last().map_or(101, |l| l + 1);
        fs::write(self.dir.join("bin/next"), next.to_string()).unwrap();
    }

    /// Slurm forgets job `id` (`MinJobAge` after its end).
    fn forget(&self, id: u32) {
        let queue = self.bin("queue");
        let kept: String = queue
            .lines()
            .filter(|l| !l.starts_with(&format!("{id}|")))
            .map(|l| format!("{l}\n"))
            .collect();
        fs::write(self.dir.join("bin/queue"), kept).unwrap();
    }

    fn set_state(&self, id: u32, state: &str) {
        fs::write(self.dir.join(format!("bin/state.{id}")), state).unwrap();
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn jobs_recorded(reports: &[Report]) -> Vec<&str> {
    reports
        .iter()
        .filter_map(|r| match r {
            Report::Job(j) => Some(j.as_str()),
            _ => None,
        })
        .collect()
}

fn last_statuses(reports: &[Report]) -> Option<&Statuses> {
    reports.iter().rev().find_map(|r| match r {
        Report::Statuses(s) => Some(s),
        _ => None,
    })
}

/// A status file a step's batch script would have written.
fn step_status(out: &Path, step: &str, job: u32, end: &str) {
    fs::create_dir_all(out).unwrap();
    let code = if end == "SUCCEEDED" { 0 } else { 1 };
    fs::write(
        out.join("status"),
        format!(
            "1 r0 job START {job} components={job}\n1 r0 task {step} 0 RUNNING\n\
             2 r0 node {step} 0 0 run {code}\n2 r0 task {step} 0 {end}\n2 r0 group {end}\n"
        ),
    )
    .unwrap();
}

#[test]
fn steps_are_submitted_in_order_after_the_marker_each_after_the_one_before() {
    let mut f = Fake::new("order", &["prep", "train", "eval"]);
    f.adopt(None, None, false);
    // First the scripts and the marker; nothing submitted before it is
    // committed.
    assert_eq!(f.drain(), vec![Report::Marker(Some(SUBMITTING.into()))]);
    let jobs = f.jobs();
    for (i, name) in ["prep", "train", "eval"].iter().enumerate() {
        let script = fs::read_to_string(jobs.join(format!("step-{i}-{name}.sbatch"))).unwrap();
        assert_eq!(script, format!("#!/bin/bash\n# step {i}\n"));
    }
    assert!(f.submitted().is_empty());
    // Then one sbatch per drain, each id recorded (with the ones before)
    // before the next sbatch runs; the marker goes with the last.
    let mut recorded = Vec::new();
    for want in ["101", "101,102", "101,102,103"] {
        let reports = f.drain();
        assert_eq!(jobs_recorded(&reports), [want], "{reports:?}");
        assert_eq!(
            reports.contains(&Report::Marker(None)),
            want == "101,102,103",
            "{reports:?}"
        );
        recorded.extend(reports);
    }
    let out = |s: &str| jobs.join(s).display().to_string();
    let dir = jobs.display().to_string();
    assert_eq!(
        f.submitted(),
        [
            [
                "101",
                &*f.tok(0),
                "",
                &out("prep"),
                "",
                &dir,
                "step-0-prep.sbatch"
            ],
            [
                "102",
                &*f.tok(1),
                "afterok:101",
                &out("train"),
                "101",
                &dir,
                "step-1-train.sbatch"
            ],
            [
                "103",
                &*f.tok(2),
                "afterok:102",
                &out("eval"),
                "101",
                &dir,
                "step-2-eval.sbatch"
            ],
        ]
    );
    // Followed from then on: every step waits (squeue: PENDING), and the
    // pipeline's engine has only step 0 queued.
    if last_statuses(&recorded).is_none() {
        recorded.extend(f.drain_until(|r| matches!(r, Report::Statuses(_))));
    }
    let statuses = last_statuses(&recorded).unwrap();
    assert_eq!(statuses.group, Status::Pending);
    let steps: Vec<Status> = statuses.tasks.iter().map(|t| t.0).collect();
    assert_eq!(steps, [Status::Pending; 3]);
}

#[test]
fn a_new_supervisor_finds_the_steps_submitted_and_submits_only_the_rest() {
    let mut f = Fake::new("recover", &["a", "b", "c"]);
    // The dead supervisor recorded step 0's job, then submitted step 1 and
    // died before recording it.
    f.submitted_before(&[101, 102]);
    f.adopt(Some("101"), Some(SUBMITTING), false);
    let reports = f.drain_until(|r| *r == Report::Marker(None));
    assert_eq!(jobs_recorded(&reports), ["101,102", "101,102,103"]);
    let submitted = f.submitted();
    assert_eq!(submitted.len(), 1, "only step 2: {submitted:?}");
    assert_eq!(
        submitted[0][..5],
        [
            "103",
            &*f.tok(2),
            "afterok:102",
            &*f.jobs().join("c").display().to_string(),
            "101"
        ]
    );
}

#[test]
fn a_step_submitted_late_checks_the_step_before_itself() {
    // Slurm forgot step 0's job: `afterok` on it would be taken as
    // satisfied. Its status file decides.
    let mut f = Fake::new("late-ok", &["a", "b"]);
    f.submitted_before(&[101]);
    f.forget(101);
    step_status(&f.jobs().join("a"), "a", 101, "SUCCEEDED");
    f.adopt(Some("101"), Some(SUBMITTING), false);
    let reports = f.drain_until(|r| *r == Report::Marker(None));
    assert_eq!(jobs_recorded(&reports), ["101,102"]);
    let submitted = f.submitted();
    assert_eq!(submitted[0][..3], ["102", &*f.tok(1), ""], "no dependency");

    // Step 0 failed: step 1 is never submitted, and the pipeline ends as
    // SkyPilot's does, the step after the failed one CANCELLED.
    let mut f = Fake::new("late-failed", &["a", "b"]);
    f.submitted_before(&[101]);
    f.forget(101);
    step_status(&f.jobs().join("a"), "a", 101, "FAILED");
    f.adopt(Some("101"), Some(SUBMITTING), false);
    let reports = f.drain_until(|r| *r == Report::Settled);
    assert!(f.submitted().is_empty(), "{:?}", f.submitted());
    assert!(reports.contains(&Report::Marker(None)));
    let statuses = last_statuses(&reports).unwrap();
    assert_eq!(statuses.group, Status::Failed);
    assert_eq!(statuses.tasks[0].0, Status::Failed);
    assert_eq!(statuses.tasks[1].0, Status::Cancelled);

    // Step 0's job still known and already failed: the same.
    let mut f = Fake::new("late-known", &["a", "b"]);
    f.submitted_before(&[101]);
    f.set_state(101, "FAILED");
    f.adopt(Some("101"), Some(SUBMITTING), false);
    f.drain_until(|r| *r == Report::Marker(None));
    assert!(f.submitted().is_empty(), "{:?}", f.submitted());
}

#[test]
fn cancel_during_submission_submits_no_more_and_cancels_what_was() {
    let mut f = Fake::new("cancel", &["a", "b", "c"]);
    f.adopt(None, None, false);
    f.drain();
    assert_eq!(jobs_recorded(&f.drain()), ["101"]);
    f.backend.cancel(1);
    let reports = f.drain();
    assert!(reports.contains(&Report::Marker(None)), "{reports:?}");
    assert_eq!(f.submitted().len(), 1, "no step after the cancel");
    assert_eq!(f.bin("scancel.log"), "101\n");
    // Slurm cancels the job: the pipeline ends CANCELLED, every step with
    // it, including those never submitted.
    f.set_state(101, "CANCELLED");
    let reports = f.drain_until(|r| *r == Report::Settled);
    let statuses = last_statuses(&reports).unwrap();
    assert_eq!(statuses.group, Status::Cancelled);
    let steps: Vec<Status> = statuses.tasks.iter().map(|t| t.0).collect();
    assert_eq!(steps, [Status::Cancelled; 3]);
}

#[test]
fn a_pipeline_cancelled_before_submission_is_never_submitted() {
    let mut f = Fake::new("unsubmitted", &["a", "b"]);
    f.adopt(None, None, true);
    assert_eq!(f.drain(), vec![Report::Unstarted(Status::Cancelled)]);
    assert!(f.submitted().is_empty());
    assert!(!f.jobs().join("step-0-a.sbatch").exists());
}

#[test]
fn a_step_sbatch_refuses_cancels_the_steps_before_it() {
    // A pipeline is submitted whole or not at all, as the submit script
    // of `skyc build` does it.
    let mut f = Fake::new("refused", &["a", "b", "c"]);
    fs::write(f.dir.join("bin/refuse"), "step-1-b.sbatch\n").unwrap();
    f.adopt(None, None, false);
    let reports = f.drain_until(|r| matches!(r, Report::Refused(_)));
    assert_eq!(jobs_recorded(&reports), ["101"]);
    assert_eq!(f.bin("scancel.log"), "101\n");
    let refused = reports.iter().find_map(|r| match r {
        Report::Refused(e) => Some(e.clone()),
        _ => None,
    });
    assert!(
        refused
            .as_deref()
            .is_some_and(|e| e.starts_with("step b: sbatch") && e.contains("Invalid partition")),
        "{refused:?}"
    );
    assert!(reports.contains(&Report::Marker(None)));
    assert_eq!(f.submitted().len(), 1);
}
