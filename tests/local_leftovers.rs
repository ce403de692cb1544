//! The local target ends everything a node started when its script ends:
//! background children and daemons that detached (new session, double
//! fork, empty environment), whether the task succeeded, was terminated
//! after the primaries, or failed and restarts.

use crate::support::leftovers::{assert_nothing_outlived, leave_leftovers};
use crate::support::scratch::{Scratch, task, text};

#[test]
fn nothing_a_task_started_outlives_it() {
    leftovers("auto");
}

#[test]
fn nothing_a_task_started_outlives_it_on_loopback_addresses() {
    leftovers("loopback");
}

fn leftovers(network: &str) {
    let s = Scratch::new(&format!("leftovers-{network}"));
    let token = format!("skyc-leftover-{network}-{}", std::process::id());
    let leave = leave_leftovers(&token, "$SCRATCH", "$1");
    s.write(
        "g.yaml",
        &format!(
            r#"name: leftovers
execution: parallel
primary_tasks: [main, flaky]
---
name: main
num_nodes: 2
run: |
  {leave}
  leave main
  sleep 1
---
name: side
run: |
  {leave}
  leave side
  trap 'exit 0' TERM
  while :; do sleep 0.1; done
---
name: flaky
resources:
  job_recovery:
    max_restarts_on_errors: 1
run: |
  {leave}
  if [ ! -e "$SCRATCH/flaky-failed" ]; then
    touch "$SCRATCH/flaky-failed"; leave flaky; exit 1
  fi
  if flock -n "$SCRATCH/lock-flaky-0" true; then echo free; else echo held; fi > "$SCRATCH/flaky-saw"
"#
        ),
    );
    let out = s.run("g.yaml", &["--network", network]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status = s.status(1);
    assert_eq!(task(&status, "side")["status"], "CANCELLED");
    assert_eq!(task(&status, "flaky")["restarts_on_errors"], 1);
    assert_nothing_outlived(&s.dir, &token);
}
