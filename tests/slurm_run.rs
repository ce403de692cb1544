//! `skyc run --target slurm` on the real cluster scripts/test starts: the
//! supervisor submits, watches and cancels; `status`, `logs`, `cancel` and
//! the exit codes are those of every target. Skipped (loudly) without a
//! cluster, like `slurm_e2e`, and serialised with it.

use crate::slurm_e2e::{cluster, cluster_dir, cluster_script, wait_idle_nodes};
use crate::support::root;
use crate::support::scratch::{Scratch, task, text};
use serde_json::Value;
use skyc_compiler::{Options, compile};
use skyc_runtime::backend::{Adoption, Backend as _, Report, Role};
use skyc_runtime::policy::GroupSpec;
use skyc_runtime::policy::{Engine, Status};
use skyc_runtime::slurm::{Plan, SUBMITTING, SlurmBackend, read_status};
use skyc_runtime::store::{Backend, NewGroup, NewTask, Store, now_ms};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Compute nodes see the target directory (the cluster's nodes are this
/// machine's namespaces); the test's files and state live there.
fn scratch(name: &str) -> Scratch {
    Scratch::under(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("slurm-{name}"),
    )
}

const SLURM: &[&str] = &["--target", "slurm"];

fn detach(s: &Scratch, file: &str, extra: &[&str]) -> i64 {
    let mut args = vec!["-d"];
    args.extend_from_slice(SLURM);
    args.extend_from_slice(extra);
    let out = s.run(file, &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().parse().expect("group id")
}

fn finished(status: &Value) -> bool {
    !status["finished_at_ms"].is_null()
}

/// `ID STATE` of every component of the job.
fn components(job: &str) -> Vec<String> {
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-j", job, "-o", "%i %T"])
        .output()
        .expect("squeue");
    text(&out.stdout).lines().map(str::to_owned).collect()
}

/// Components of every job submitted for the group (tagged with its
/// plan's token), as squeue still lists them.
fn submitted(s: &Scratch, id: i64) -> Vec<String> {
    let store = Store::open(&s.state()).expect("store");
    let plan: Plan = serde_json::from_str(&store.plan(id).expect("plan")).expect("plan");
    let out = Command::new("squeue")
        .args(["-h", "-t", "all", "-o", "%i|%k"])
        .output()
        .expect("squeue");
    text(&out.stdout)
        .lines()
        .filter(|l| l.ends_with(&format!("|{}", plan.token)))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_example_group_runs_on_slurm_in_the_foreground() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("example");
    let example = root().join("examples/train-eval.yaml");
    let out = s.run(example.to_str().unwrap(), SLURM);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{stdout}");
    assert!(stderr.contains("submitted to slurm as job"), "{stderr}");
    assert!(stderr.contains("skyc: trainer SUCCEEDED"), "{stderr}");
    assert!(stderr.contains("skyc: evaluator CANCELLED"), "{stderr}");
    // Per-node logs, prefixed, from the job's directory.
    assert!(stdout.contains("(trainer-1) training done"), "{stdout}");
    assert!(
        stdout.contains("(evaluator-0) latest checkpoint: "),
        "{stdout}"
    );
    let status = s.status(1);
    assert_eq!(status["backend"], "slurm");
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert!(status["job"].as_str().is_some_and(|j| !j.is_empty()));
    // The evaluator found the trainer's rank 0 at its node's address,
    // which `status` reports for the node.
    let nodes = task(&status, "trainer")["nodes"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[0]["hostname"], "trainer-0.train-eval");
    let ip0 = nodes[0]["ip"].as_str().unwrap();
    assert_ne!(ip0, nodes[1]["ip"].as_str().unwrap(), "two nodes");
    assert!(
        stdout.contains(&format!("trainer-0.train-eval is at {ip0}")),
        "{stdout}"
    );
    assert_eq!(nodes[0]["exit_code"], 0);
    // Nothing of the group outlives it: the trainer's checkpoint server,
    // started with `&`, no longer listens, and the next run can bind 8000.
    let server = format!("{ip0}:8000").parse().unwrap();
    assert!(
        std::net::TcpStream::connect_timeout(&server, Duration::from_secs(1)).is_err(),
        "the trainer's server outlived the group"
    );
}

#[test]
fn detached_groups_report_status_and_logs_and_cancel_with_scancel() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("cancel");
    s.write(
        "g.yaml",
        r#"name: cancelme
execution: parallel
primary_tasks: [main]
---
name: main
num_nodes: 2
run: |
  echo "main $SKYPILOT_NODE_RANK up"
  sleep 120
---
name: side
run: |
  trap 'echo "side got SIGTERM"; exit 0' TERM
  echo "side up"
  while :; do sleep 0.1; done
"#,
    );
    let id = detach(&s, "g.yaml", &[]);
    let status = s.wait_for(id, Duration::from_secs(30), |st| {
        st["tasks"]
            .as_array()
            .is_some_and(|ts| ts.iter().all(|t| t["status"] == "RUNNING"))
    });
    assert_eq!(status["status"], "RUNNING", "{status:#}");
    let job = status["job"].as_str().unwrap().to_owned();
    // The nodes' lines; skyc's own (why a task waited) depend on when
    // squeue was read.
    let logs = |what: &str| {
        let out = s
            .skyc(&["logs", "--no-follow", &id.to_string(), what])
            .output()
            .expect("skyc logs");
        text(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with("(skyc) "))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    };
    // RUNNING is the script's word when it launched the steps; the nodes
    // start a moment later, in any order.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !logs("main").contains("(main-1) main 1 up") || logs("side-0").is_empty() {
        assert!(Instant::now() < deadline, "{}", logs("main"));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(logs("side-0").trim(), "(side-0) side up");
    let human = s.skyc(&["status"]).output().expect("skyc status");
    assert!(
        text(&human.stdout).contains(&format!("slurm job {job}")),
        "{}",
        text(&human.stdout)
    );
    let asked = Instant::now();
    let out = s.skyc(&["cancel", &id.to_string()]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status = s.wait_for(id, Duration::from_secs(60), finished);
    eprintln!(
        "cancel -> group CANCELLED in {:.1} s",
        asked.elapsed().as_secs_f64()
    );
    assert_eq!(status["status"], "CANCELLED", "{status:#}");
    assert_eq!(task(&status, "main")["status"], "CANCELLED");
    assert_eq!(task(&status, "side")["status"], "CANCELLED");
    let states = components(&job);
    assert!(
        !states.is_empty() && states.iter().all(|l| l.ends_with("CANCELLED")),
        "{states:?}"
    );
    assert!(
        logs("side").contains("side got SIGTERM"),
        "{}",
        logs("side")
    );
}

#[test]
fn a_failed_primary_fails_the_group_after_its_restart_and_exits_100() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("fail");
    s.write(
        "g.yaml",
        r#"name: failing
execution: parallel
primary_tasks: [main]
termination_delay: 60s
---
name: main
resources: {job_recovery: {max_restarts_on_errors: 1}}
run: |
  echo "attempt $SKYC_ATTEMPT"
  sleep 1
  exit 3
---
name: side
run: sleep 120
"#,
    );
    let out = s.run("g.yaml", SLURM);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(100), "{stderr}");
    assert!(
        stderr.contains("skyc: group 1 (failing) FAILED"),
        "{stderr}"
    );
    let status = s.status(1);
    let main = task(&status, "main");
    assert_eq!(main["status"], "FAILED", "{status:#}");
    assert_eq!(main["restarts"], 1);
    assert_eq!(main["restarts_on_errors"], 1);
    assert_eq!(main["nodes"][0]["exit_code"], 3);
    // A failed primary ends the auxiliaries at once, despite the delay.
    assert_eq!(task(&status, "side")["status"], "CANCELLED");
    let logs = text(&s.skyc(&["logs", "1", "main"]).output().unwrap().stdout);
    assert!(
        logs.contains("(main-0) attempt 0") && logs.contains("(main-0) attempt 1"),
        "{logs}"
    );
}

#[test]
fn a_job_sbatch_refuses_is_reported_and_exits_100() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("refused");
    s.write(
        "g.yaml",
        "name: refused\nexecution: parallel\n---\nname: a\nrun: 'true'\n",
    );
    let out = s.run("g.yaml", &["--target", "slurm", "--partition", "nosuch"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(100), "{stderr}");
    assert!(
        stderr.contains("error: group 1 could not start: sbatch"),
        "{stderr}"
    );
    assert!(stderr.contains("nvalid partition"), "{stderr}");
    let status = s.status(1);
    assert_eq!(status["status"], "FAILED_SETUP");
    assert!(
        status["error"]
            .as_str()
            .is_some_and(|e| e.contains("nvalid partition")),
        "{status:#}"
    );
}

#[test]
fn a_node_crash_reports_recovering_and_restarts_the_whole_group() {
    let Some(_cluster) = cluster() else { return };
    let Some(dir) = cluster_dir() else {
        assert!(
            std::env::var_os("SKYC_SLURM_REQUIRED").is_none(),
            "SKYC_SLURM_DIR is needed to crash a node"
        );
        eprintln!("!!! SKIPPED: SKYC_SLURM_DIR unset: cannot crash a node");
        return;
    };
    let s = scratch("crash");
    // First run: the worker waits to be crashed; after the requeue
    // (SLURM_RESTART_COUNT=1) both tasks finish quickly.
    s.write(
        "g.yaml",
        r#"name: crash
execution: parallel
---
name: head
run: |
  [ "${SLURM_RESTART_COUNT:-0}" = 0 ] && sleep 120
  echo "head done on $(hostname)"
---
name: worker
run: |
  hostname > "$SCRATCH/worker-node-${SLURM_RESTART_COUNT:-0}"
  [ "${SLURM_RESTART_COUNT:-0}" = 0 ] && sleep 120
  echo "worker done on $(hostname)"
"#,
    );
    let id = detach(&s, "g.yaml", &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.read("worker-node-0").is_empty() {
        assert!(Instant::now() < deadline, "worker never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    let node = s.read("worker-node-0").trim().to_owned();
    let dir_s = dir.to_string_lossy().into_owned();
    let crashed = Instant::now();
    cluster_script(&["crash-node", &dir_s, &node]);
    let recovering = s.wait_for(id, Duration::from_secs(60), |st| {
        st["status"] == "RECOVERING" || finished(st)
    });
    let seen_after = crashed.elapsed();
    let status = s.wait_for(id, Duration::from_secs(120), finished);
    eprintln!(
        "node crash -> RECOVERING after {:.1} s, group {} after {:.1} s",
        seen_after.as_secs_f64(),
        status["status"],
        crashed.elapsed().as_secs_f64()
    );
    cluster_script(&["revive-node", &dir_s, &node]);
    assert_eq!(recovering["status"], "RECOVERING", "{recovering:#}");
    assert!(
        recovering["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["status"] == "RECOVERING"),
        "the whole group recovers: {recovering:#}"
    );
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    let second = s.read("worker-node-1");
    assert_ne!(
        second.trim(),
        node,
        "the requeued job avoided the crashed node"
    );
    let logs = text(
        &s.skyc(&["logs", &id.to_string(), "worker"])
            .output()
            .unwrap()
            .stdout,
    );
    assert!(logs.contains("(worker-0) worker done on "), "{logs}");
    wait_idle_nodes(8);
}

#[test]
fn a_supervisor_killed_mid_run_loses_nothing() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("supervisor");
    s.write(
        "g.yaml",
        r#"name: svcrash
execution: parallel
primary_tasks: [main]
termination_delay: 1s
---
name: main
run: |
  for i in $(seq 1 30); do echo "line $i"; sleep 0.1; done
---
name: side
run: |
  trap 'echo "side got SIGTERM"; exit 0' TERM
  while :; do sleep 0.1; done
"#,
    );
    let id = detach(&s, "g.yaml", &[]);
    let status = s.wait_for(id, Duration::from_secs(30), |st| {
        task(st, "main")["status"] == "RUNNING"
    });
    let kill = |pid: i64| {
        assert!(
            Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .is_ok_and(|s| s.success())
        );
    };
    let first = status["supervisor_pid"].as_i64().expect("supervisor pid");
    kill(first);
    std::thread::sleep(Duration::from_millis(1500));
    // The next command starts a new supervisor, which finds the job again.
    let status = s.status(id);
    let second = status["supervisor_pid"].as_i64().expect("new supervisor");
    assert_ne!(first, second);
    let status = s.wait_for(id, Duration::from_secs(60), finished);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(task(&status, "side")["status"], "CANCELLED");
    let logs = text(&s.skyc(&["logs", &id.to_string()]).output().unwrap().stdout);
    let lines: Vec<&str> = logs
        .lines()
        .filter_map(|l| l.strip_prefix("(main-0) line "))
        .collect();
    let want: Vec<String> = (1..=30).map(|i| i.to_string()).collect();
    assert_eq!(lines, want, "{logs}");
    assert!(logs.contains("(side-0) side got SIGTERM"), "{logs}");
    let jobs = submitted(&s, id);
    assert_eq!(jobs.len(), 2, "one hetjob of two components: {jobs:?}");
    // Each status line is in the group's history once, across supervisors.
    let store = Store::open(&s.state()).unwrap();
    let lines = read_status(&s.state().join("groups").join(id.to_string()));
    assert!(lines.len() > 5);
    assert_eq!(store.count_events_keyed(id, "slurm").unwrap(), lines.len());
}

/// The window the store cannot close by itself: a supervisor that dies
/// after sbatch submitted the job and before its id was recorded. The
/// next one must find that job by its comment, not submit a second.
#[test]
fn a_job_submitted_before_a_crash_is_found_not_submitted_twice() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("inside-sbatch");
    let yaml = "name: twice\nexecution: parallel\n---\nname: a\nrun: echo once\n";
    let group = compile("g.yaml", yaml.as_bytes(), &Options::default())
        .group
        .unwrap();
    let script = skyc_targets::slurm::build(
        &group,
        &skyc_targets::slurm::Options {
            grace_secs: 5,
            ..Default::default()
        },
    )
    .script
    .unwrap();
    let out = s.dir.join("out");
    let plan = Plan {
        group: group.name.clone(),
        spec: GroupSpec::from_ir(&group, Duration::from_secs(5)),
        num_nodes: vec![1],
        script: script.clone(),
        steps: Vec::new(),
        out_dir: Some(out.clone()),
        env: std::env::vars().collect(),
        token: format!("skyc-test-{}-{}", std::process::id(), now_ms()),
    };
    std::fs::create_dir_all(s.state()).unwrap();
    let mut store = Store::open(&s.state()).unwrap();
    let gid = store
        .insert_group(&NewGroup {
            name: "twice",
            source: "g.yaml",
            submitted_at_ms: now_ms(),
            plan: &serde_json::to_string(&plan).unwrap(),
            backend: Backend::Slurm,
            snapshots: &[],
            buckets: &[],
            tasks: vec![NewTask {
                name: "a",
                primary: true,
                num_nodes: 1,
            }],
        })
        .unwrap();
    // What the dead supervisor did: mark, write the script, submit.
    store
        .transaction(|tx| tx.set_pending(gid, Some(SUBMITTING)))
        .unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("job.sh"), &script).unwrap();
    let job = plan
        .cluster()
        .submit_tagged(&out.join("job.sh"), &out, &plan.token)
        .unwrap();
    // A new supervisor's backend finds the job by its comment.
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
                fresh: true,
                job: None,
                kept: None,
                marker: Some(SUBMITTING),
                cancel_requested: false,
                store: &store,
            },
        )
        .unwrap();
    let mut reports = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !reports.contains(&Report::Settled) {
        assert!(Instant::now() < deadline, "{reports:?}");
        reports.extend(backend.drain(now_ms()).into_iter().map(|(_, r)| r));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        reports.first(),
        Some(&Report::Job(job)),
        "the job found by its comment"
    );
    let last = reports.iter().rev().find_map(|r| match r {
        Report::Statuses(s) => Some(s.group),
        _ => None,
    });
    assert_eq!(last, Some(Status::Succeeded));
    assert_eq!(submitted(&s, gid).len(), 1, "{:?}", submitted(&s, gid));
    assert_eq!(
        std::fs::read_to_string(out.join("logs/a-0.log")).unwrap(),
        "once\n"
    );
}

/// GPUs by type on the cluster, which names its models `a100` (the first
/// half of its nodes) and `H100` (the rest): `H100` lands on the H100
/// nodes, `A100` on the a100 ones, as the cluster names them; a model it
/// lacks is an error at the accelerator naming what it has, and nothing
/// is submitted.
#[test]
fn gpus_are_asked_by_the_type_the_cluster_names_on_slurm() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("gpu-types");
    s.write(
        "g.yaml",
        r#"name: gpus
execution: parallel
---
name: big
resources: {cpus: 1, accelerators: "H100:2"}
run: echo "$SLURMD_NODENAME $SKYPILOT_NUM_GPUS_PER_NODE" > "$SKYC_OUT/big"
---
name: small
resources: {cpus: 1, accelerators: {A100: 1}}
run: echo "$SLURMD_NODENAME $SKYPILOT_NUM_GPUS_PER_NODE" > "$SKYC_OUT/small"
"#,
    );
    let out_dir = s.dir.join("out");
    let out_arg = out_dir.to_string_lossy().into_owned();
    let mut args = SLURM.to_vec();
    args.extend_from_slice(&["--out-dir", &out_arg]);
    let out = s.run("g.yaml", &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let script = std::fs::read_to_string(out_dir.join("job.sh")).expect("the job's script");
    assert!(script.contains("#SBATCH --gres=gpu:H100:2\n"), "{script}");
    assert!(script.contains("#SBATCH --gres=gpu:a100:1\n"), "{script}");
    let node = |file: &str| -> (u32, String) {
        let seen = std::fs::read_to_string(out_dir.join(file)).expect("a node's record");
        let (name, gpus) = seen.trim().split_once(' ').expect("node and gpus");
        (
            name.trim_start_matches('n').parse().expect("nN"),
            gpus.to_owned(),
        )
    };
    let (big, big_gpus) = node("big");
    let (small, small_gpus) = node("small");
    assert!((5..=8).contains(&big), "H100 on an H100 node: n{big}");
    assert!((1..=4).contains(&small), "A100 on an a100 node: n{small}");
    assert_eq!((big_gpus.as_str(), small_gpus.as_str()), ("2", "1"));

    s.write(
        "v100.yaml",
        "name: old\nresources:\n  cpus: 1\n  accelerators: V100:1\nrun: echo never\n",
    );
    let out = s.run("v100.yaml", SLURM);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    crate::support::snapshots("slurm").bind(|| {
        insta::assert_snapshot!("run-gpu-type-the-cluster-lacks", text(&out.stderr));
    });
    let status = s.skyc(&["status", "--json"]).output().expect("status");
    let groups: Value = serde_json::from_slice(&status.stdout).expect("JSON");
    assert_eq!(
        groups.as_array().map(Vec::len),
        Some(1),
        "only the first group was recorded: {groups:#}"
    );
}

/// A job the cluster cannot place yet says why, in Slurm's words: a group
/// waits behind one that holds every node, and no longer says so once it
/// runs.
#[test]
fn a_pending_group_says_why_in_slurms_words() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("pending-reason");
    s.write(
        "all.yaml",
        "name: all\nnum_nodes: 8\nresources:\n  cpus: 4\nrun: sleep 60\n",
    );
    s.write(
        "one.yaml",
        "name: one\nresources:\n  cpus: 4\nrun: sleep 3\n",
    );
    let all = detach(&s, "all.yaml", &[]);
    s.wait_for(all, Duration::from_secs(60), |st| st["status"] == "RUNNING");
    let one = detach(&s, "one.yaml", &[]);
    let status = s.wait_for(one, Duration::from_secs(60), |st| {
        task(st, "one")["waiting"].is_object()
    });
    let why = task(&status, "one")["waiting"]["why"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        why.starts_with("Slurm: Resources") || why.starts_with("Slurm: Priority"),
        "{status:#}"
    );
    assert_eq!(task(&status, "one")["status"], "PENDING", "{status:#}");
    let out = s
        .skyc(&["status", &one.to_string()])
        .output()
        .expect("status");
    assert!(
        text(&out.stdout).contains("waiting"),
        "{}",
        text(&out.stdout)
    );
    // Once the nodes are free it runs, and waits no more.
    let cancelled = s
        .skyc(&["cancel", &all.to_string()])
        .output()
        .expect("cancel");
    assert!(cancelled.status.success());
    let running = s.wait_for(one, Duration::from_secs(120), |st| {
        task(st, "one")["status"] == "RUNNING"
    });
    assert!(task(&running, "one")["waiting"].is_null(), "{running:#}");
    let done = s.wait_for(one, Duration::from_secs(120), finished);
    assert_eq!(done["status"], "SUCCEEDED", "{done:#}");
}
