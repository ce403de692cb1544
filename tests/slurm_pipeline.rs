//! Pipelines on a real Slurm cluster, submitted by hand: the submit script
//! `skyc build --target slurm` writes, run with bash. Each step is a job of
//! its own, chained with `--dependency=afterok`; a failing step leaves the
//! next jobs CANCELLED without running. The cluster, and skipping without
//! one, as in `slurm_e2e.rs`.

use crate::slurm::tmp_dir;
use crate::slurm_e2e::{cluster, cluster_dir, cluster_script, wait_idle_nodes};
use crate::support::skyc;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A pipeline submitted by its submit script.
struct Submitted {
    /// Where the script ran (the jobs' submit directory).
    dir: PathBuf,
    /// `(step, job id)` in order, as the script printed them.
    jobs: Vec<(String, String)>,
}

/// How the pipeline is built and submitted.
enum Form {
    /// `skyc build FILE > submit.sh; bash submit.sh`.
    Stdout,
    /// `skyc build FILE --out jobs; SKYC_OUT=out bash jobs/submit.sh`.
    OutDir,
}

fn submit(name: &str, yaml: &str, form: Form) -> Submitted {
    let dir = tmp_dir(&format!("pipeline-{name}"));
    let file = dir.join("pipeline.yaml");
    std::fs::write(&file, yaml).unwrap();
    let mut build = skyc();
    build.args(["build", "--target", "slurm", "--grace", "2"]);
    let (script, out) = match form {
        Form::Stdout => (dir.join("submit.sh"), None),
        Form::OutDir => {
            build.arg("--out").arg(dir.join("jobs"));
            (dir.join("jobs/submit.sh"), Some(dir.join("out")))
        }
    };
    let built = build.arg(&file).output().unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    if let Form::Stdout = form {
        std::fs::write(&script, &built.stdout).unwrap();
    }
    let mut bash = Command::new("bash");
    bash.arg(&script)
        .current_dir(&dir)
        .env_remove("SKYC_OUT")
        .env_remove("SKYC_PIPELINE_JOB");
    if let Some(out) = &out {
        bash.env("SKYC_OUT", out);
    }
    let ran = bash.output().unwrap();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let jobs = String::from_utf8_lossy(&ran.stdout)
        .lines()
        .map(|l| {
            let (step, id) = l.split_once(' ').unwrap();
            assert!(id.bytes().all(|b| b.is_ascii_digit()), "{l}");
            (step.to_owned(), id.to_owned())
        })
        .collect();
    Submitted { dir, jobs }
}

impl Submitted {
    /// The pipeline's output directory when SKYC_OUT was not set.
    fn default_out(&self, pipeline: &str) -> PathBuf {
        self.dir.join(format!("skyc-{pipeline}-{}", self.jobs[0].1))
    }

    /// Waits until every job has ended; returns `(state, reason)` of each.
    fn wait(&self, timeout: Duration) -> Vec<(String, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            let states: Vec<(String, String)> =
                self.jobs.iter().map(|(_, id)| job_state(id)).collect();
            if states.iter().all(|(s, _)| is_terminal(s)) {
                return states;
            }
            if Instant::now() > deadline {
                let ids: Vec<&str> = self.jobs.iter().map(|(_, id)| id.as_str()).collect();
                let _ = Command::new("scancel").args(&ids).status();
                panic!("jobs not done after {timeout:?}: {states:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// `(state, reason)` of one job, as squeue shows it (finished jobs stay
/// listed: MinJobAge=600 on the test cluster).
fn job_state(id: &str) -> (String, String) {
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-j", id, "-o", "%T|%r"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let (state, reason) = text.trim().split_once('|').unwrap_or(("", ""));
    (state.to_owned(), reason.to_owned())
}

fn is_terminal(state: &str) -> bool {
    [
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    ]
    .contains(&state)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `group` line of a step's status file (the step's status).
fn step_status(step_out: &Path) -> String {
    read(&step_out.join("status"))
        .lines()
        .rev()
        .find_map(|l| l.split_once(" group ").map(|(_, s)| s.to_owned()))
        .unwrap_or_default()
}

/// `(step, event, time, rest)` of each line the steps appended to `file`.
fn events(file: &Path) -> Vec<(String, String, f64, String)> {
    read(file)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.splitn(4, ' ').collect();
            (
                f[0].to_owned(),
                f[1].to_owned(),
                f[2].parse().unwrap(),
                f.get(3).copied().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn steps_run_in_order_each_in_a_job_of_its_own() {
    let Some(_cluster) = cluster() else { return };
    // The middle step has two nodes; every node records when it ran and
    // what it was told.
    let yaml = r#"name: chain
---
name: prep
run: |
  echo "prep start $(date +%s.%N) $SKYPILOT_TASK_ID ${SKYPILOT_JOBGROUP_NAME-none} $SLURM_JOB_ID" >> "$SKYC_OUT/../steps"
  sleep 1
  echo "prep end $(date +%s.%N)" >> "$SKYC_OUT/../steps"
---
name: train
num_nodes: 2
run: |
  echo "train start $(date +%s.%N) $SKYPILOT_TASK_ID ${SKYPILOT_JOBGROUP_NAME-none} $SLURM_JOB_ID $SKYPILOT_NODE_RANK/$SKYPILOT_NUM_NODES $(hostname)" >> "$SKYC_OUT/../steps"
  sleep 1
  echo "train end $(date +%s.%N)" >> "$SKYC_OUT/../steps"
---
run: |
  echo "chain-2 start $(date +%s.%N) $SKYPILOT_TASK_ID ${SKYPILOT_JOBGROUP_NAME-none} $SLURM_JOB_ID" >> "$SKYC_OUT/../steps"
  printf '%s\n' "$SKYPILOT_TASK_IDS" > "$SKYC_OUT/../task-ids"
"#;
    let p = submit("order", yaml, Form::Stdout);
    let names: Vec<&str> = p.jobs.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(names, ["prep", "train", "chain-2"]);
    let states = p.wait(Duration::from_secs(90));
    assert!(states.iter().all(|(s, _)| s == "COMPLETED"), "{states:?}");
    let out = p.default_out("chain");
    for (step, _) in &p.jobs {
        assert_eq!(step_status(&out.join(step)), "SUCCEEDED", "{step}");
    }
    let lines = events(&out.join("steps"));
    let time = |step: &str, event: &str| -> Vec<f64> {
        lines
            .iter()
            .filter(|l| l.0 == step && l.1 == event)
            .map(|l| l.2)
            .collect()
    };
    let max = |v: Vec<f64>| v.into_iter().fold(f64::MIN, f64::max);
    let min = |v: Vec<f64>| v.into_iter().fold(f64::MAX, f64::min);
    assert_eq!(time("train", "start").len(), 2, "both nodes ran: {lines:?}");
    assert!(
        max(time("prep", "end")) <= min(time("train", "start")),
        "train began before prep ended: {lines:?}"
    );
    assert!(
        max(time("train", "end")) <= min(time("chain-2", "start")),
        "chain-2 began before train ended: {lines:?}"
    );
    // Each step in its own job, with its own task id (the pipeline's id is
    // step 0's job), and no Job Group.
    let first = &p.jobs[0].1;
    let want_ids: Vec<String> = ["prep-0", "train-1", "chain-2-2"]
        .iter()
        .map(|s| format!("skyc-slurm-{first}_chain_{s}"))
        .collect();
    for (i, (step, job)) in p.jobs.iter().enumerate() {
        for line in lines.iter().filter(|l| &l.0 == step && l.1 == "start") {
            let f: Vec<&str> = line.3.split(' ').collect();
            assert_eq!(f[0], want_ids[i], "{line:?}");
            assert_eq!(f[1], "none", "SKYPILOT_JOBGROUP_NAME is set: {line:?}");
            assert_eq!(f[2], job, "ran in the job of its step: {line:?}");
        }
    }
    let mut ranks: Vec<&str> = lines
        .iter()
        .filter(|l| l.0 == "train" && l.1 == "start")
        .map(|l| l.3.split(' ').nth(3).unwrap())
        .collect();
    ranks.sort_unstable();
    assert_eq!(ranks, ["0/2", "1/2"]);
    assert_eq!(read(&out.join("task-ids")), want_ids.join("\n") + "\n");
    // Slurm's own output of each job, named after its step.
    for (step, job) in &p.jobs {
        assert!(p.dir.join(format!("skyc-{step}-{job}.out")).exists());
    }
}

#[test]
fn a_failed_step_cancels_the_jobs_after_it() {
    let Some(_cluster) = cluster() else { return };
    let yaml = r#"name: failing
---
name: first
run: echo first >> "$SKYC_OUT/../ran"
---
name: flaky
resources:
  job_recovery:
    max_restarts_on_errors: 1
run: |
  echo flaky >> "$SKYC_OUT/../ran"
  exit 7
---
name: never
run: echo never >> "$SKYC_OUT/../ran"
---
name: never-either
run: echo never-either >> "$SKYC_OUT/../ran"
"#;
    let p = submit("fail", yaml, Form::OutDir);
    let states = p.wait(Duration::from_secs(90));
    let got: Vec<&str> = states.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        got,
        ["COMPLETED", "FAILED", "CANCELLED", "CANCELLED"],
        "{states:?}"
    );
    for (state, reason) in &states[2..] {
        assert!(
            reason.contains("Dependency"),
            "{state} for its dependency: {reason}"
        );
    }
    // The failing step used its restart inside its job, then its job
    // failed; the steps after it never started.
    let out = p.dir.join("out");
    assert_eq!(read(&out.join("ran")), "first\nflaky\nflaky\n");
    assert_eq!(step_status(&out.join("first")), "SUCCEEDED");
    assert_eq!(step_status(&out.join("flaky")), "FAILED");
    let flaky = read(&out.join("flaky/status"));
    assert!(
        flaky.contains(" task flaky 0 RECOVERING restart 1 of 1")
            && flaky.contains(" task flaky 1 FAILED"),
        "{flaky}"
    );
    assert!(!out.join("never").exists() && !out.join("never-either").exists());
}

#[test]
fn a_step_requeued_after_a_node_crash_still_runs_the_next() {
    let Some(_cluster) = cluster() else { return };
    let Some(dir) = cluster_dir() else {
        assert!(
            std::env::var_os("SKYC_SLURM_REQUIRED").is_none(),
            "SKYC_SLURM_DIR is needed to crash a node"
        );
        eprintln!("!!! SKIPPED: SKYC_SLURM_DIR unset: cannot crash a node");
        return;
    };
    // A requeue is not a failure: the next step waits for the requeued
    // job, and runs once it COMPLETED.
    let yaml = r#"name: requeue
---
name: long
run: |
  hostname > "$SKYC_OUT/../node-${SLURM_RESTART_COUNT:-0}"
  [ "${SLURM_RESTART_COUNT:-0}" = 0 ] && sleep 120
  echo "long end $(date +%s.%N)" >> "$SKYC_OUT/../steps"
---
name: after
run: echo "after start $(date +%s.%N)" >> "$SKYC_OUT/../steps"
"#;
    let nodes = Command::new("sinfo")
        .args(["-h", "-N", "-o", "%N"])
        .output()
        .unwrap();
    let mut nodes: Vec<String> = String::from_utf8_lossy(&nodes.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    nodes.sort();
    nodes.dedup();
    let p = submit("requeue", yaml, Form::Stdout);
    let out = p.default_out("requeue");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !out.join("node-0").exists() {
        assert!(Instant::now() < deadline, "step 0 never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let node = read(&out.join("node-0")).trim().to_owned();
    let dir_s = dir.to_string_lossy().into_owned();
    cluster_script(&["crash-node", &dir_s, &node]);
    let states = p.wait(Duration::from_secs(120));
    cluster_script(&["revive-node", &dir_s, &node]);
    wait_idle_nodes(nodes.len());
    assert_eq!(
        states.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>(),
        ["COMPLETED", "COMPLETED"],
        "{states:?}"
    );
    assert_ne!(read(&out.join("node-1")).trim(), node);
    let lines = events(&out.join("steps"));
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(
        (lines[0].0.as_str(), lines[1].0.as_str()),
        ("long", "after")
    );
    assert!(lines[0].2 <= lines[1].2, "{lines:?}");
    let long = read(&out.join("long/status"));
    assert!(long.contains(" r1 group SUCCEEDED"), "{long}");
}
