//! The runtime commands as a SkyPilot user expects them from `sky jobs
//! launch/queue/logs/cancel`: names, the status table, following logs,
//! exit codes, and readers that go away. Groups run on this machine with
//! loopback addresses (the network is not what these tests are about).

use crate::support::scratch::{Scratch, text};
use crate::support::{root, skyc};
use skyc_runtime::store::{Backend, NewGroup, NewTask, Store};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Two tasks that take turns, each waiting for the other's marker, so
/// the order they write in is fixed whatever the machine's load; the pause
/// before each marker lets the node's agent read (and time) the line.
const TWO_TASKS: &str = r#"name: pair
execution: parallel
---
name: ping
run: |
  for i in 1 2 3; do
    echo "ping $i"; sleep 0.3; touch "$SCRATCH/ping-$i"
    until [ -e "$SCRATCH/pong-$i" ]; do sleep 0.02; done
  done
---
name: pong
run: |
  for i in 1 2 3; do
    until [ -e "$SCRATCH/ping-$i" ]; do sleep 0.02; done
    echo "pong $i"; sleep 0.3; touch "$SCRATCH/pong-$i"
  done
"#;

fn run_loopback(s: &Scratch, file: &str, extra: &[&str]) -> Output {
    let mut args = vec!["--network", "loopback"];
    args.extend_from_slice(extra);
    s.run(file, &args)
}

/// A state directory holding groups that never ran, for the listing
/// tests: `(name, status, error)` each, oldest first.
fn store_with(s: &Scratch, groups: &[(&str, &str, Option<&str>)]) {
    std::fs::create_dir_all(s.state()).unwrap();
    let mut store = Store::open(&s.state()).unwrap();
    for (i, (name, status, error)) in groups.iter().enumerate() {
        let id = store
            .insert_group(&NewGroup {
                name,
                source: "g.yaml",
                submitted_at_ms: 1_000 * i as i64,
                plan: "{}",
                backend: Backend::Local,
                snapshots: &[],
                buckets: &[],
                tasks: vec![NewTask {
                    name: "a",
                    primary: true,
                    num_nodes: 1,
                }],
            })
            .unwrap();
        store
            .transaction(|tx| {
                if let Some(error) = error {
                    tx.set_error(id, error)?;
                }
                tx.end_unstarted(id, status, 1_000 * i as i64 + 500)
            })
            .unwrap();
    }
}

#[test]
fn logs_interleave_nodes_in_written_order_and_exit_with_job_codes() {
    let s = Scratch::new("jobs-logs");
    s.write("g.yaml", TWO_TASKS);
    let out = run_loopback(&s, "g.yaml", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let logs = s.skyc(&["logs", "1"]).output().unwrap();
    assert_eq!(logs.status.code(), Some(0));
    assert_eq!(
        text(&logs.stdout),
        "(ping-0) ping 1\n(pong-0) pong 1\n(ping-0) ping 2\n(pong-0) pong 2\n\
         (ping-0) ping 3\n(pong-0) pong 3\n"
    );
    assert!(
        text(&logs.stderr).contains("group 1 has 2 tasks; `skyc logs 1 TASK` shows one"),
        "{}",
        text(&logs.stderr)
    );
    // A task by index, as `sky jobs logs 42 0`; the newest group with no id.
    let by_index = s.skyc(&["logs", "1", "1"]).output().unwrap();
    assert_eq!(
        text(&by_index.stdout),
        "(pong-0) pong 1\n(pong-0) pong 2\n(pong-0) pong 3\n"
    );
    assert!(by_index.stderr.is_empty(), "{}", text(&by_index.stderr));
    let latest = s.skyc(&["logs"]).output().unwrap();
    assert_eq!(latest.stdout, logs.stdout);
    let missing = s.skyc(&["logs", "7"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(102));
    assert!(text(&missing.stderr).contains("no group 7"));
    let no_task = s.skyc(&["logs", "1", "nosuch"]).output().unwrap();
    assert_eq!(no_task.status.code(), Some(2));
    assert!(text(&no_task.stderr).contains("its tasks are 0: ping, 1: pong"));
}

#[test]
fn logs_follow_a_running_group_to_its_end_and_report_its_status() {
    let s = Scratch::new("jobs-follow");
    s.write(
        "g.yaml",
        "name: slow\nexecution: parallel\n---\nname: a\nrun: |\n  echo start\n  until [ -e \"$SCRATCH/go\" ]; do sleep 0.05; done\n  echo end; exit 4\n",
    );
    let out = run_loopback(&s, "g.yaml", &["-d"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1\n", "stdout carries only the id");
    let hints = text(&out.stderr);
    for hint in ["skyc logs 1", "skyc status 1", "skyc cancel 1"] {
        assert!(hints.contains(hint), "{hints}");
    }
    s.wait_for(1, Duration::from_secs(20), |g| g["status"] == "RUNNING");
    let partial = s.skyc(&["logs", "--no-follow", "1"]).output().unwrap();
    assert_eq!(partial.status.code(), Some(101), "not finished");
    // The group ends a moment after `logs` began to follow it.
    let go = s.dir.join("go");
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(800));
        std::fs::write(go, "").unwrap();
    });
    let followed = s.skyc(&["logs", "1"]).output().unwrap();
    release.join().unwrap();
    assert_eq!(text(&followed.stdout), "(a-0) start\n(a-0) end\n");
    assert_eq!(followed.status.code(), Some(100), "FAILED");
    assert!(!s.status(1)["finished_at_ms"].is_null());
}

#[test]
fn names_select_groups_and_cancel_reports_its_exit_code() {
    let s = Scratch::new("jobs-names");
    s.write(
        "g.yaml",
        "name: sleeper\nexecution: parallel\n---\nname: a\nrun: sleep 60\n",
    );
    let out = run_loopback(&s, "g.yaml", &["-d", "-n", "exp-1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = s
        .skyc(&["status", "-n", "exp-1", "--json"])
        .output()
        .unwrap();
    let groups: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(groups[0]["id"], 1);
    assert_eq!(groups[0]["name"], "exp-1");
    // The same shape with an id.
    let one = s.skyc(&["status", "1", "--json"]).output().unwrap();
    let one: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    assert_eq!(one[0]["name"], "exp-1");
    // A name where an id goes is pointed at -n.
    let wrong = s.skyc(&["status", "exp-1"]).output().unwrap();
    assert_eq!(wrong.status.code(), Some(2));
    let message = text(&wrong.stderr);
    assert!(message.contains("`exp-1` is not a group id"), "{message}");
    assert!(message.contains("-n exp-1"), "{message}");
    assert!(!message.contains("invalid digit"), "{message}");
    s.wait_for(1, Duration::from_secs(20), |g| g["status"] == "RUNNING");
    let cancel = s.skyc(&["cancel", "-n", "exp-1"]).output().unwrap();
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    let logs = s.skyc(&["logs", "-n", "exp-1"]).output().unwrap();
    assert_eq!(logs.status.code(), Some(103), "CANCELLED");
    // With -n, the one positional is the task.
    let task_logs = s.skyc(&["logs", "-n", "exp-1", "0"]).output().unwrap();
    assert_eq!(
        task_logs.status.code(),
        Some(103),
        "{}",
        text(&task_logs.stderr)
    );
    let unknown = s.skyc(&["cancel", "-n", "nosuch"]).output().unwrap();
    assert_eq!(unknown.status.code(), Some(102));
    let nothing = s.skyc(&["cancel", "--all"]).output().unwrap();
    assert!(nothing.status.success());
    assert!(
        text(&nothing.stderr).contains("nothing to cancel"),
        "{}",
        text(&nothing.stderr)
    );
}

#[test]
fn status_lists_groups_like_sky_jobs_queue() {
    let s = Scratch::new("jobs-status");
    let mut groups = vec![(
        "broken",
        "FAILED_SETUP",
        Some("could not start:\nline two\n\tthree"),
    )];
    groups.extend(std::iter::repeat_n(("old", "SUCCEEDED", None), 11));
    store_with(&s, &groups);
    let out = s.skyc(&["status"]).output().unwrap();
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("ID  TASK  NAME")
            && lines[0].contains("SUBMITTED")
            && lines[0].contains("#RECOVERIES")
            && lines[0].contains("STATUS")
            && lines[0].ends_with("DETAILS"),
        "{table}"
    );
    // 10 groups and their task rows; the two oldest are left out, and said so.
    assert_eq!(lines.len(), 1 + 10 * 2, "{table}");
    assert!(lines[2].starts_with("↳   0     a"), "{table}");
    assert!(!table.contains("broken"), "{table}");
    assert!(text(&out.stderr).contains("2 older groups not shown"));
    let all = text(&s.skyc(&["status", "-a"]).output().unwrap().stdout);
    assert_eq!(all.lines().count(), 1 + 12 * 2, "{all}");
    let broken = all.lines().find(|l| l.contains("broken")).unwrap();
    assert!(
        broken.contains("FAILED_SETUP")
            && broken.ends_with("error: could not start: line two three"),
        "an error stays in its row: {all}"
    );
    // One group: its row, its nodes, and the error in full.
    let one = text(&s.skyc(&["status", "1"]).output().unwrap().stdout);
    assert!(one.contains("NODE  HOSTNAME"), "{one}");
    assert!(
        one.ends_with("error: could not start:\nline two\n\tthree\n"),
        "{one}"
    );
}

#[test]
fn restarts_and_failures_show_in_task_rows() {
    let s = Scratch::new("jobs-rows");
    s.write(
        "g.yaml",
        r#"name: rows
execution: parallel
---
name: flaky
resources:
  job_recovery:
    max_restarts_on_errors: 1
run: exit 3
"#,
    );
    let out = run_loopback(&s, "g.yaml", &[]);
    assert_eq!(out.status.code(), Some(100), "{}", text(&out.stderr));
    let table = text(&s.skyc(&["status"]).output().unwrap().stdout);
    let row = table.lines().find(|l| l.contains("flaky")).unwrap();
    assert!(
        row.contains("FAILED  primary, 1 restart (1 on errors), flaky-0 exit 3"),
        "{table}"
    );
}

/// Every subcommand whose reader goes away stops as standard tools do:
/// ended by SIGPIPE (or done), with nothing on standard error.
#[test]
fn a_closed_reader_ends_every_subcommand_quietly() {
    let s = Scratch::new("jobs-pipe");
    s.write(
        "many.yaml",
        "name: many\nexecution: parallel\n---\nname: a\nrun: seq 1 20000\n",
    );
    s.write(
        "slow.yaml",
        "name: slow\nexecution: parallel\n---\nname: a\nrun: |\n  seq 1 100; sleep 30\n",
    );
    let out = run_loopback(&s, "many.yaml", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let example = root().join("examples/train-eval.yaml");
    let example = example.to_str().unwrap();
    let broken = root().join("tests/fixtures/cli/broken.yaml");
    let broken = broken.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["check", "--format", "json", broken],
        vec!["check", "--format", "sarif", broken],
        vec!["build", example, "--target", "ir"],
        vec!["build", example, "--target", "k8s"],
        vec!["build", example, "--target", "slurm"],
        vec!["schema"],
        vec!["completions", "bash"],
        vec!["status"],
        vec!["status", "--json"],
        vec!["status", "1"],
        vec!["logs", "1"],
        vec!["logs", "1", "--no-follow"],
        vec!["run", "--network", "loopback", "-d", "slow.yaml"],
        vec!["run", "--network", "loopback", "slow.yaml"],
    ];
    for args in cases {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut cmd = if args[0] == "--help" || !needs_state(args[0]) {
            let mut c = skyc();
            c.args(&args).current_dir(&s.dir);
            c
        } else {
            s.skyc(&args)
        };
        let child = cmd
            .stdout(writer)
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let out = wait_limited(child, &args);
        let stderr = text(&out.stderr);
        let quiet_lines: Vec<&str> = stderr
            .lines()
            .filter(|l| {
                l.starts_with("skyc: ") || l.starts_with("hint: ") || l.starts_with("note: ")
            })
            .collect();
        assert!(
            !stderr.contains("panicked")
                && !stderr.contains("Broken pipe")
                && !stderr.contains("error")
                && quiet_lines.len() == stderr.lines().count(),
            "{args:?}: {stderr}"
        );
        assert!(
            out.status.signal() == Some(13) || out.status.code() == Some(0),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
}

fn needs_state(command: &str) -> bool {
    matches!(command, "status" | "logs" | "run" | "cancel")
}

fn wait_limited(child: std::process::Child, args: &[&str]) -> Output {
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(20));
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    });
    let out = child.wait_with_output().unwrap();
    assert!(
        !watchdog.is_finished(),
        "{args:?} did not end when its reader went away"
    );
    out
}

#[test]
fn diagnostics_end_with_one_summary_everywhere() {
    let broken = root().join("tests/fixtures/cli/broken.yaml");
    let broken = broken.to_str().unwrap();
    let check = skyc()
        .args(["check", broken])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let summary = text(&check.stderr).lines().last().unwrap().to_owned();
    assert!(summary.starts_with("failed: "), "{summary}");
    let build = skyc()
        .args(["build", broken, "--target", "ir"])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(text(&build.stderr).lines().last(), Some(summary.as_str()));
    let s = Scratch::new("jobs-summary");
    let run = s
        .skyc(&["run", broken])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    assert_eq!(text(&run.stderr).lines().last(), Some(summary.as_str()));
}

/// At a terminal, a clean check says so; in a pipe it stays silent.
#[test]
fn a_clean_check_says_so_at_a_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIPPED: util-linux `script` (a terminal for the test) is not installed");
        return;
    }
    let valid = root().join("examples/train-eval.yaml");
    let command = format!("{} check {}", env!("CARGO_BIN_EXE_skyc"), valid.display());
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("ok: no problems in 1 file"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn completions_are_generated_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef skyc"),
        ("fish", "complete -c skyc"),
    ] {
        let out = skyc().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        assert!(text(&out.stdout).contains(marker), "{shell}");
    }
}
