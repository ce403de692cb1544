//! `skyc run FILE --target slurm` on a pipeline, on the real cluster
//! scripts/test starts: one batch job per step, submitted at once and
//! chained by Slurm, followed by the supervisor with SkyPilot's statuses;
//! `status`, `logs` (per step), `cancel` and the exit codes as for a
//! group. Skipped (loudly) without a cluster, and serialised with the
//! other Slurm tests.

use crate::slurm_e2e::{cluster, cluster_dir, cluster_script, wait_idle_nodes};
use crate::support::scratch::{Scratch, task, text};
use serde_json::Value;
use skyc_compiler::{Options, compile};
use skyc_runtime::backend::{Adoption, Backend as _, Report, Role};
use skyc_runtime::policy::{Engine, GroupSpec, Status};
use skyc_runtime::slurm::{Plan, PlannedStep, SUBMITTING, SlurmBackend, read_status};
use skyc_runtime::store::{Backend, NewGroup, NewTask, Store, now_ms};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Compute nodes see the target directory (the cluster's nodes are this
/// machine's namespaces); the test's files and state live there.
fn scratch(name: &str) -> Scratch {
    Scratch::under(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("slurm-pipeline-{name}"),
    )
}

const SLURM: &[&str] = &["--target", "slurm", "--grace", "2"];

fn detach(s: &Scratch, file: &str) -> i64 {
    let mut args = vec!["-d"];
    args.extend_from_slice(SLURM);
    let out = s.run(file, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().parse().expect("group id")
}

fn finished(status: &Value) -> bool {
    !status["finished_at_ms"].is_null()
}

fn statuses(status: &Value) -> Vec<String> {
    status["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap().to_owned())
        .collect()
}

/// The job ids `skyc status` shows for the group, one per step submitted.
fn jobs(status: &Value) -> Vec<String> {
    status["job"]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .filter(|j| !j.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `(state, reason)` of one job, as squeue shows it (finished jobs stay
/// listed: MinJobAge=600 on the test cluster).
fn job_state(id: &str) -> (String, String) {
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-j", id, "-o", "%T|%r"])
        .output()
        .unwrap();
    let text = text(&out.stdout);
    let (state, reason) = text.trim().split_once('|').unwrap_or(("", ""));
    (state.to_owned(), reason.to_owned())
}

/// `ID|COMMENT` of every job submitted for the group: each step's comment
/// is the plan's token and the step's index.
fn submitted(state: &Path, gid: i64) -> Vec<String> {
    let store = Store::open(state).expect("store");
    let plan: Plan = serde_json::from_str(&store.plan(gid).expect("plan")).expect("plan");
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-o", "%i|%k"])
        .output()
        .expect("squeue");
    let mut jobs: Vec<String> = text(&out.stdout)
        .lines()
        .filter(|l| {
            l.split_once('|')
                .is_some_and(|(_, c)| c.starts_with(&format!("{}-", plan.token)))
        })
        .map(str::to_owned)
        .collect();
    jobs.sort();
    jobs
}

/// `(step, event, time, rest)` of each line the steps appended to
/// `$SCRATCH/steps`.
fn steps(s: &Scratch) -> Vec<(String, String, f64, String)> {
    s.read("steps")
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

/// `skyc logs`: its exit code and the nodes' lines. skyc's own lines
/// (`(skyc) step: waiting: Slurm: Dependency ...`) are left out: whether a
/// step was seen waiting depends on when squeue was read.
fn logs(s: &Scratch, id: i64, what: &[&str]) -> (Option<i32>, String) {
    let mut args = vec!["logs".to_owned(), id.to_string()];
    args.extend(what.iter().map(|w| (*w).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = s.skyc(&args).output().expect("skyc logs");
    let nodes: String = text(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with("(skyc) "))
        .map(|l| format!("{l}\n"))
        .collect();
    (out.status.code(), nodes)
}

fn kill_supervisor(status: &Value) -> i64 {
    let pid = status["supervisor_pid"].as_i64().expect("supervisor pid");
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success())
    );
    pid
}

#[test]
fn steps_run_in_order_each_in_a_job_of_its_own() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("order");
    // Every node records when it ran, its task id and its job; the middle
    // step has two nodes.
    s.write(
        "p.yaml",
        r#"name: chain
---
name: prep
run: |
  echo "prep start $(date +%s.%N) $SKYPILOT_TASK_ID $SLURM_JOB_ID ${SKYPILOT_JOBGROUP_NAME-none}" >> "$SCRATCH/steps"
  echo "prepared"
  sleep 1
  echo "prep end $(date +%s.%N)" >> "$SCRATCH/steps"
---
name: train
num_nodes: 2
run: |
  echo "train start $(date +%s.%N) $SKYPILOT_TASK_ID $SLURM_JOB_ID ${SKYPILOT_JOBGROUP_NAME-none}" >> "$SCRATCH/steps"
  echo "trained on rank $SKYPILOT_NODE_RANK of $SKYPILOT_NUM_NODES"
  sleep 1
  echo "train end $(date +%s.%N)" >> "$SCRATCH/steps"
---
run: |
  echo "chain-2 start $(date +%s.%N) $SKYPILOT_TASK_ID $SLURM_JOB_ID ${SKYPILOT_JOBGROUP_NAME-none}" >> "$SCRATCH/steps"
  echo "evaluated"
"#,
    );
    let out = s.run("p.yaml", SLURM);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{stdout}");
    assert!(stderr.contains("submitted to slurm as job"), "{stderr}");
    for step in ["prep", "train", "chain-2"] {
        assert!(
            stderr.contains(&format!("skyc: {step} SUCCEEDED")),
            "{stderr}"
        );
    }
    assert!(
        stderr.contains("skyc: group 1 (chain) SUCCEEDED"),
        "{stderr}"
    );
    // The nodes' output in the foreground, prefixed per step and node.
    assert!(stdout.contains("(prep-0) prepared\n"), "{stdout}");
    assert!(
        stdout.contains("(train-1) trained on rank 1 of 2\n"),
        "{stdout}"
    );
    assert!(stdout.contains("(chain-2-0) evaluated\n"), "{stdout}");

    let status = s.status(1);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(statuses(&status), ["SUCCEEDED"; 3]);
    let ids = jobs(&status);
    assert_eq!(ids.len(), 3, "a job per step: {status:#}");
    for id in &ids {
        assert_eq!(job_state(id).0, "COMPLETED", "job {id}");
    }
    // A step never starts before the one before it ended.
    let lines = steps(&s);
    let time = |step: &str, event: &str| -> Vec<f64> {
        lines
            .iter()
            .filter(|l| l.0 == step && l.1 == event)
            .map(|l| l.2)
            .collect()
    };
    let last = |v: Vec<f64>| v.into_iter().fold(f64::MIN, f64::max);
    let first = |v: Vec<f64>| v.into_iter().fold(f64::MAX, f64::min);
    assert_eq!(time("train", "start").len(), 2, "both nodes: {lines:?}");
    assert!(
        last(time("prep", "end")) <= first(time("train", "start")),
        "train began before prep ended: {lines:?}"
    );
    assert!(
        last(time("train", "end")) <= first(time("chain-2", "start")),
        "chain-2 began before train ended: {lines:?}"
    );
    // Each step in its own job, with its own task id (the pipeline's id is
    // step 0's job), and no Job Group.
    let want: Vec<String> = ["prep-0", "train-1", "chain-2-2"]
        .iter()
        .map(|s| format!("skyc-slurm-{}_chain_{s}", ids[0]))
        .collect();
    for (i, step) in ["prep", "train", "chain-2"].iter().enumerate() {
        for line in lines.iter().filter(|l| l.0 == *step && l.1 == "start") {
            let f: Vec<&str> = line.3.split(' ').collect();
            assert_eq!(f, [&*want[i], &*ids[i], "none"], "{line:?}");
        }
    }
    // `skyc logs` per step (a name or an index), and all of them.
    let (code, prep) = logs(&s, 1, &["prep"]);
    assert_eq!((code, prep.as_str()), (Some(0), "(prep-0) prepared\n"));
    let (_, train) = logs(&s, 1, &["1"]);
    let mut train: Vec<&str> = train.lines().collect();
    train.sort_unstable();
    assert_eq!(
        train,
        [
            "(train-0) trained on rank 0 of 2",
            "(train-1) trained on rank 1 of 2"
        ]
    );
    let (_, node) = logs(&s, 1, &["chain-2-0"]);
    assert_eq!(node, "(chain-2-0) evaluated\n");
    let (_, all) = logs(&s, 1, &[]);
    assert_eq!(all.lines().count(), 4, "{all}");
    // Each step's files in a directory of its own.
    let dir = s.state().join("groups/1");
    for (i, step) in ["prep", "train", "chain-2"].iter().enumerate() {
        let lines = read_status(&dir.join(step));
        assert!(
            lines
                .last()
                .is_some_and(|l| format!("{:?}", l.what).contains("SUCCEEDED")),
            "{step}: {lines:?}"
        );
        assert!(dir.join(format!("step-{i}-{step}.sbatch")).exists());
    }
}

#[test]
fn a_failing_step_after_its_restarts_fails_the_pipeline_and_cancels_the_rest() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("fail");
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
  echo "attempt $SKYC_ATTEMPT"
  exit 7
---
name: never
run: echo never >> "$SCRATCH/ran"
---
name: never-either
run: echo never-either >> "$SCRATCH/ran"
"#,
    );
    let out = s.run("p.yaml", SLURM);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(100), "{stderr}");
    assert!(
        stderr.contains("skyc: group 1 (failing) FAILED"),
        "{stderr}"
    );
    assert_eq!(s.read("ran"), "first\nflaky\nflaky\n");
    let status = s.status(1);
    assert_eq!(
        status["status"], "FAILED",
        "the pipeline's status is the failed step's: {status:#}"
    );
    assert_eq!(
        statuses(&status),
        ["SUCCEEDED", "FAILED", "CANCELLED", "CANCELLED"]
    );
    let flaky = task(&status, "flaky");
    assert_eq!(flaky["restarts"], 1);
    assert_eq!(flaky["restarts_on_errors"], 1);
    assert_eq!(flaky["nodes"][0]["exit_code"], 7);
    // Slurm cancelled the later steps' jobs for their dependency, unrun.
    let ids = jobs(&status);
    assert_eq!(ids.len(), 4);
    assert_eq!(job_state(&ids[0]).0, "COMPLETED");
    assert_eq!(job_state(&ids[1]).0, "FAILED");
    for id in &ids[2..] {
        let (state, reason) = job_state(id);
        assert_eq!(state, "CANCELLED", "job {id}");
        assert!(reason.contains("Dependency"), "job {id}: {reason}");
    }
    let (code, logs) = logs(&s, 1, &["flaky"]);
    assert_eq!(code, Some(100));
    assert_eq!(logs, "(flaky-0) attempt 0\n(flaky-0) attempt 1\n");
}

#[test]
fn cancel_in_the_middle_cancels_every_job_and_exits_103() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("cancel");
    s.write(
        "p.yaml",
        r#"name: cancelled
---
name: one
run: echo one >> "$SCRATCH/ran"
---
name: two
run: |
  trap 'echo "two got SIGTERM"; exit 143' TERM
  echo two >> "$SCRATCH/ran"
  while :; do sleep 0.1; done
---
name: three
run: echo three >> "$SCRATCH/ran"
---
name: four
run: echo four >> "$SCRATCH/ran"
"#,
    );
    // In the foreground: Ctrl-C cancels the pipeline.
    let mut run = s.skyc(&["run", "p.yaml"]);
    run.args(SLURM)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = run.spawn().expect("skyc run");
    let status = s.wait_for(1, Duration::from_secs(60), |st| {
        finished(st) || task(st, "two")["status"] == "RUNNING"
    });
    assert_eq!(
        statuses(&status),
        ["SUCCEEDED", "RUNNING", "PENDING", "PENDING"]
    );
    assert_eq!(status["status"], "RUNNING");
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.read("ran") != "one\ntwo\n" {
        assert!(Instant::now() < deadline, "{}", s.read("ran"));
        std::thread::sleep(Duration::from_millis(50));
    }
    let asked = Instant::now();
    assert!(
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success())
    );
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    eprintln!(
        "Ctrl-C -> pipeline CANCELLED in {:.1} s",
        asked.elapsed().as_secs_f64()
    );
    assert_eq!(out.status.code(), Some(103), "{stderr}");
    assert!(stderr.contains("skyc: cancelling group 1"), "{stderr}");
    assert!(
        stderr.contains("skyc: group 1 (cancelled) CANCELLED"),
        "{stderr}"
    );
    let status = s.status(1);
    assert_eq!(status["status"], "CANCELLED", "{status:#}");
    assert_eq!(
        statuses(&status),
        ["SUCCEEDED", "CANCELLED", "CANCELLED", "CANCELLED"]
    );
    // Every job of the chain was cancelled; none after the cancel ran.
    let ids = jobs(&status);
    assert_eq!(ids.len(), 4);
    assert_eq!(job_state(&ids[0]).0, "COMPLETED");
    for id in &ids[1..] {
        assert_eq!(job_state(id).0, "CANCELLED", "job {id}");
    }
    assert_eq!(s.read("ran"), "one\ntwo\n");
    let (code, two) = logs(&s, 1, &["two"]);
    assert_eq!(code, Some(103), "`logs` ends with the pipeline's code");
    assert!(two.contains("(two-0) two got SIGTERM"), "{two}");
}

#[test]
fn a_supervisor_killed_between_two_steps_leaves_each_step_one_run() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("supervisor");
    s.write(
        "p.yaml",
        r#"name: svcrash
---
name: first
run: |
  echo "first start" >> "$SCRATCH/ran"
  sleep 2
---
name: second
run: |
  echo "second start" >> "$SCRATCH/ran"
  sleep 2
---
name: third
run: echo "third start" >> "$SCRATCH/ran"
"#,
    );
    let id = detach(&s, "p.yaml");
    let status = s.wait_for(id, Duration::from_secs(60), |st| {
        finished(st) || task(st, "first")["status"] == "RUNNING"
    });
    // The first step ends, and the second starts, while no supervisor runs.
    let dead = kill_supervisor(&status);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !s.read("ran").contains("second start") {
        assert!(Instant::now() < deadline, "{}", s.read("ran"));
        std::thread::sleep(Duration::from_millis(100));
    }
    // The next command starts a new supervisor, which finds every job
    // again; killed once more while the second step runs.
    let status = s.wait_for(id, Duration::from_secs(30), |st| {
        finished(st) || task(st, "second")["status"] == "RUNNING"
    });
    assert_eq!(statuses(&status), ["SUCCEEDED", "RUNNING", "PENDING"]);
    let second = kill_supervisor(&status);
    assert_ne!(dead, second);
    std::thread::sleep(Duration::from_millis(500));
    let status = s.wait_for(id, Duration::from_secs(60), finished);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(statuses(&status), ["SUCCEEDED"; 3]);
    // Each step started exactly once: three jobs in all, each step's
    // start line once.
    assert_eq!(s.read("ran"), "first start\nsecond start\nthird start\n");
    assert_eq!(
        submitted(&s.state(), id).len(),
        3,
        "{:?}",
        submitted(&s.state(), id)
    );
    // Each status line of each step is in the group's history once,
    // across supervisors.
    let store = Store::open(&s.state()).unwrap();
    let dir = s.state().join("groups").join(id.to_string());
    for (i, step) in ["first", "second", "third"].iter().enumerate() {
        let lines = read_status(&dir.join(step));
        assert!(lines.len() >= 4, "{step}: {lines:?}");
        assert_eq!(
            store.count_events_keyed(id, &format!("slurm.{i}")).unwrap(),
            lines.len(),
            "{step}"
        );
    }
}

/// The window the store cannot close by itself, for a pipeline: a
/// supervisor that died after sbatch took step 1 and before its id was
/// recorded. The next one finds that job by its comment and submits only
/// step 2, after it.
#[test]
fn steps_submitted_before_a_crash_are_found_not_submitted_twice() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("inside-sbatch");
    let yaml = "name: twice\n---\nname: a\nrun: echo a once\n---\nname: b\nrun: echo b once\n\
                ---\nname: c\nrun: echo c once\n";
    let group = compile("p.yaml", yaml.as_bytes(), &Options::default())
        .group
        .unwrap();
    let pipeline = skyc_targets::slurm::pipeline(
        &group,
        &skyc_targets::slurm::Options {
            grace_secs: 2,
            ..Default::default()
        },
    )
    .pipeline
    .unwrap();
    let out = s.dir.join("out");
    let plan = Plan {
        group: group.name.clone(),
        spec: GroupSpec::from_ir(&group, Duration::from_secs(2)),
        num_nodes: vec![1; 3],
        script: String::new(),
        steps: pipeline
            .steps
            .iter()
            .map(|s| PlannedStep {
                name: s.name.clone(),
                script: s.script.clone(),
                after: s.after,
            })
            .collect(),
        out_dir: Some(out.clone()),
        env: std::env::vars().collect(),
        token: format!("skyc-test-{}-{}", std::process::id(), now_ms()),
    };
    std::fs::create_dir_all(s.state()).unwrap();
    let mut store = Store::open(&s.state()).unwrap();
    let gid = store
        .insert_group(&NewGroup {
            name: "twice",
            source: "p.yaml",
            submitted_at_ms: now_ms(),
            plan: &serde_json::to_string(&plan).unwrap(),
            backend: Backend::Slurm,
            snapshots: &[],
            buckets: &[],
            tasks: ["a", "b", "c"]
                .iter()
                .map(|name| NewTask {
                    name,
                    primary: true,
                    num_nodes: 1,
                })
                .collect(),
        })
        .unwrap();
    // What the dead supervisor did: mark, write the scripts, submit steps
    // 0 and 1, record only step 0's job.
    store
        .transaction(|tx| tx.set_pending(gid, Some(SUBMITTING)))
        .unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let subs = plan.submissions(&out);
    for sub in &subs {
        std::fs::write(&sub.file, &sub.script).unwrap();
    }
    let slurm = plan.cluster();
    let first = slurm
        .submit_step(&subs[0].file, &subs[0].out, &subs[0].token, "", None)
        .unwrap();
    let second = slurm
        .submit_step(
            &subs[1].file,
            &subs[1].out,
            &subs[1].token,
            &first,
            Some(&first),
        )
        .unwrap();
    store.transaction(|tx| tx.set_job(gid, &first)).unwrap();
    // A new supervisor's backend.
    let mut backend = SlurmBackend::new(&s.state());
    let engine = Engine::new(plan.spec.clone());
    let plan_json = serde_json::to_string(&plan).unwrap();
    backend
        .adopt(
            gid,
            &Adoption {
                plan: &plan_json,
                role: Role::Group,
                name: "g",
                engine: &engine,
                fresh: false,
                job: Some(&first),
                kept: None,
                marker: Some(SUBMITTING),
                cancel_requested: false,
                store: &store,
            },
        )
        .unwrap();
    let mut reports = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !reports.contains(&Report::Settled) {
        assert!(Instant::now() < deadline, "{reports:?}");
        reports.extend(backend.drain(now_ms()).into_iter().map(|(_, r)| r));
        std::thread::sleep(Duration::from_millis(200));
    }
    let recorded: Vec<&Report> = reports
        .iter()
        .filter(|r| matches!(r, Report::Job(_)))
        .collect();
    assert_eq!(recorded.len(), 2, "{reports:?}");
    assert_eq!(*recorded[0], Report::Job(format!("{first},{second}")));
    let last = reports.iter().rev().find_map(|r| match r {
        Report::Statuses(s) => Some(s.clone()),
        _ => None,
    });
    let last = last.unwrap();
    assert_eq!(last.group, Status::Succeeded, "{last:?}");
    let jobs = submitted(&s.state(), gid);
    assert_eq!(jobs.len(), 3, "{jobs:?}");
    for (i, step) in ["a", "b", "c"].iter().enumerate() {
        assert_eq!(
            std::fs::read_to_string(out.join(step).join(format!("logs/{step}-0.log"))).unwrap(),
            format!("{step} once\n"),
            "step {i}"
        );
    }
}

#[test]
fn a_step_requeued_after_a_node_crash_is_recovering_then_the_next_runs() {
    let Some(_cluster) = cluster() else { return };
    let Some(dir) = cluster_dir() else {
        assert!(
            std::env::var_os("SKYC_SLURM_REQUIRED").is_none(),
            "SKYC_SLURM_DIR is needed to crash a node"
        );
        eprintln!("!!! SKIPPED: SKYC_SLURM_DIR unset: cannot crash a node");
        return;
    };
    let s = scratch("requeue");
    s.write(
        "p.yaml",
        r#"name: requeue
---
name: long
run: |
  hostname > "$SCRATCH/node-${SLURM_RESTART_COUNT:-0}"
  [ "${SLURM_RESTART_COUNT:-0}" = 0 ] && sleep 120
  echo "long end $(date +%s.%N)" >> "$SCRATCH/steps"
---
name: after
run: echo "after start $(date +%s.%N)" >> "$SCRATCH/steps"
"#,
    );
    let id = detach(&s, "p.yaml");
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.read("node-0").is_empty() {
        assert!(Instant::now() < deadline, "step 0 never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let node = s.read("node-0").trim().to_owned();
    let dir_s = dir.to_string_lossy().into_owned();
    let crashed = Instant::now();
    cluster_script(&["crash-node", &dir_s, &node]);
    let recovering = s.wait_for(id, Duration::from_secs(60), |st| {
        st["status"] == "RECOVERING" || finished(st)
    });
    let seen_after = crashed.elapsed();
    let status = s.wait_for(id, Duration::from_secs(120), finished);
    eprintln!(
        "node crash -> RECOVERING after {:.1} s, pipeline {} after {:.1} s",
        seen_after.as_secs_f64(),
        status["status"],
        crashed.elapsed().as_secs_f64()
    );
    cluster_script(&["revive-node", &dir_s, &node]);
    wait_idle_nodes(8);
    assert_eq!(
        statuses(&recovering),
        ["RECOVERING", "PENDING"],
        "{recovering:#}"
    );
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(statuses(&status), ["SUCCEEDED"; 2]);
    assert_ne!(s.read("node-1").trim(), node, "requeued elsewhere");
    let lines = steps(&s);
    let order: Vec<&str> = lines.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(order, ["long", "after"], "{lines:?}");
    assert!(lines[0].2 <= lines[1].2, "{lines:?}");
}

/// Nothing of a pipeline run with `--out-dir` may land on another run's
/// output: a step's status file there is refused before anything is
/// submitted.
#[test]
fn an_out_dir_holding_a_steps_output_is_refused() {
    let s = scratch("out-dir");
    s.write(
        "p.yaml",
        "name: p\n---\nname: a\nrun: 'true'\n---\nname: b\nrun: 'true'\n",
    );
    let taken: PathBuf = s.dir.join("taken");
    std::fs::create_dir_all(taken.join("b")).unwrap();
    std::fs::write(taken.join("b/status"), "1 r0 group SUCCEEDED\n").unwrap();
    let mut args = SLURM.to_vec();
    let out_dir = taken.to_string_lossy().into_owned();
    args.extend(["--out-dir", &out_dir]);
    let out = s.run("p.yaml", &args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("holds the output of another run"),
        "{stderr}"
    );
    assert!(!s.state().exists(), "nothing was recorded");
}
