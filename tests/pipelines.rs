//! Managed-job pipelines on this machine: steps one after another, a
//! failing step cancelling the rest, cancel in the middle, and a
//! supervisor killed between two steps. Loopback addresses: pipelines use
//! no group hostnames.

use crate::support::scratch::{Scratch, task, text};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// Each step records when it started and ended, and its task id.
const THREE_STEPS: &str = r#"name: chain
---
name: prep
run: |
  echo "prep start $(date +%s.%N) $SKYPILOT_TASK_ID" >> "$SCRATCH/steps"
  sleep 0.5
  echo "prep end $(date +%s.%N)" >> "$SCRATCH/steps"
---
name: train
run: |
  echo "train start $(date +%s.%N) $SKYPILOT_TASK_ID" >> "$SCRATCH/steps"
  sleep 0.5
  echo "train end $(date +%s.%N)" >> "$SCRATCH/steps"
---
run: |
  echo "eval start $(date +%s.%N) $SKYPILOT_TASK_ID" >> "$SCRATCH/steps"
  test -z "$SKYPILOT_JOBGROUP_NAME"
"#;

fn run(s: &Scratch, file: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["--network", "loopback"];
    args.extend_from_slice(extra);
    s.run(file, &args)
}

fn kill_supervisor(status: &Value) {
    let pid = status["supervisor_pid"].as_i64().expect("supervisor pid");
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success())
    );
}

/// `(step, event, time, task id)` of every line the steps wrote.
fn steps(s: &Scratch) -> Vec<(String, String, f64, String)> {
    s.read("steps")
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
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
fn steps_run_one_after_another_with_their_own_task_ids() {
    let s = Scratch::new("pipe-order");
    s.write("p.yaml", THREE_STEPS);
    let out = run(&s, "p.yaml", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines = steps(&s);
    let names: Vec<String> = lines.iter().map(|l| format!("{} {}", l.0, l.1)).collect();
    assert_eq!(
        names,
        [
            "prep start",
            "prep end",
            "train start",
            "train end",
            "eval start"
        ]
    );
    for pair in lines.windows(2) {
        assert!(
            pair[0].2 <= pair[1].2,
            "a step began before the previous one ended: {lines:?}"
        );
    }
    let ids: Vec<&str> = lines
        .iter()
        .filter(|l| l.1 == "start")
        .map(|l| l.3.as_str())
        .collect();
    assert_eq!(ids.len(), 3);
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "{ids:?}"
    );
    assert!(
        ids[2].contains("_chain-2_"),
        "an unnamed step is `{{pipeline}}-{{index}}`: {ids:?}"
    );
    let status = s.status(1);
    assert_eq!(status["status"], "SUCCEEDED");
    let statuses: Vec<&str> = status["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["SUCCEEDED"; 3]);
}

#[test]
fn a_failing_step_after_its_restarts_cancels_the_rest() {
    let s = Scratch::new("pipe-fail");
    s.write(
        "p.yaml",
        r#"name: failing
---
name: first
run: echo first >> "$SCRATCH/ran"
---
name: flaky
resources:
  job_recovery:
    max_restarts_on_errors: 1
run: |
  echo flaky >> "$SCRATCH/ran"
  exit 7
---
name: never
run: echo never >> "$SCRATCH/ran"
"#,
    );
    let out = run(&s, "p.yaml", &[]);
    assert_eq!(out.status.code(), Some(100), "{}", text(&out.stderr));
    assert_eq!(s.read("ran"), "first\nflaky\nflaky\n");
    let status = s.status(1);
    assert_eq!(
        status["status"], "FAILED",
        "the job's status is the failed step's"
    );
    assert_eq!(task(&status, "first")["status"], "SUCCEEDED");
    assert_eq!(task(&status, "flaky")["status"], "FAILED");
    assert_eq!(task(&status, "flaky")["restarts_on_errors"], 1);
    assert_eq!(task(&status, "never")["status"], "CANCELLED");
    let logs = s.skyc(&["logs", "1", "flaky"]).output().unwrap();
    assert_eq!(logs.status.code(), Some(100));
}

#[test]
fn cancel_in_the_middle_stops_the_step_and_cancels_the_rest() {
    let s = Scratch::new("pipe-cancel");
    s.write(
        "p.yaml",
        r#"name: cancelled
---
name: one
run: echo one >> "$SCRATCH/ran"
---
name: two
run: |
  echo two >> "$SCRATCH/ran"
  sleep 60
---
name: three
run: echo three >> "$SCRATCH/ran"
"#,
    );
    let out = run(&s, "p.yaml", &["-d"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    s.wait_for(1, Duration::from_secs(20), |g| {
        task(g, "two")["status"] == "RUNNING"
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while s.read("ran") != "one\ntwo\n" {
        assert!(std::time::Instant::now() < deadline, "{}", s.read("ran"));
        std::thread::sleep(Duration::from_millis(50));
    }
    let cancel = s.skyc(&["cancel", "1"]).output().unwrap();
    assert!(cancel.status.success());
    let status = s.wait_finished(1);
    assert_eq!(status["status"], "CANCELLED", "{status:#}");
    assert_eq!(task(&status, "one")["status"], "SUCCEEDED");
    assert_eq!(task(&status, "two")["status"], "CANCELLED");
    assert_eq!(task(&status, "three")["status"], "CANCELLED");
    assert_eq!(s.read("ran"), "one\ntwo\n");
}

#[test]
fn a_supervisor_killed_between_two_steps_starts_the_next_exactly_once() {
    let s = Scratch::new("pipe-crash");
    s.write(
        "p.yaml",
        r#"name: crash
---
name: first
run: |
  echo first >> "$SCRATCH/ran"
  sleep 1
---
name: second
run: |
  echo second >> "$SCRATCH/ran"
  sleep 1
---
name: third
run: echo third >> "$SCRATCH/ran"
"#,
    );
    let out = run(&s, "p.yaml", &["-d"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status = s.wait_for(1, Duration::from_secs(20), |g| {
        task(g, "first")["status"] == "RUNNING"
    });
    // The first step ends while no supervisor runs; the next command's
    // supervisor reads its exit and starts the second step.
    kill_supervisor(&status);
    std::thread::sleep(Duration::from_millis(1500));
    let status = s.wait_for(1, Duration::from_secs(20), |g| {
        task(g, "second")["status"] == "RUNNING"
    });
    // And once more right after the second step started.
    kill_supervisor(&status);
    std::thread::sleep(Duration::from_millis(200));
    let status = s.wait_finished(1);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(
        s.read("ran"),
        "first\nsecond\nthird\n",
        "each step exactly once"
    );
}

#[test]
fn status_shows_a_pipeline_and_its_steps() {
    let s = Scratch::new("pipe-status");
    s.write("p.yaml", THREE_STEPS);
    let out = run(&s, "p.yaml", &["-d"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&s.skyc(&["status"]).output().unwrap().stdout);
    // The steps not yet started wait PENDING behind the running one.
    assert!(table.contains("↳   1     train"), "{table}");
    s.wait_finished(1);
    let table = text(&s.skyc(&["status"]).output().unwrap().stdout);
    assert_eq!(
        table
            .lines()
            .filter(|l| l.starts_with('↳') && l.contains("SUCCEEDED"))
            .count(),
        3,
        "{table}"
    );
}
