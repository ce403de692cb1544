//! `skyc run --target k8s`.
//!
//! Without a cluster: what the client refuses before anything is recorded
//! (no cluster configured, an API server that does not answer, flags of
//! another target), and `build --rbac`.
//!
//! With one: the end-to-end scenarios of the local target against a real
//! cluster with JobSet installed, when `SKYC_K8S_E2E=1` and `KUBECONFIG`
//! are set (docs/targets/k8s.md, "Testing against a cluster"); skipped,
//! loudly, otherwise. Pods share no file system with the test, so every
//! check reads `skyc status` and `skyc logs`.

use crate::support::scratch::{Scratch, task, text};
use crate::support::{root, skyc};
use serde_json::Value;
use std::process::{Command, Output};
use std::time::Duration;

/// A kubeconfig whose API server is a closed port on this machine.
fn unreachable_kubeconfig(s: &Scratch) -> std::path::PathBuf {
    // Bound and dropped: nothing listens there any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    s.write(
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: \
             https://127.0.0.1:{port}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u, \
             namespace: team}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
}

fn statuses(s: &Scratch) -> Value {
    let out = s.skyc(&["status", "--json"]).output().expect("status");
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

#[test]
fn an_api_server_that_does_not_answer_is_named_and_nothing_is_recorded() {
    let s = Scratch::new("k8s-unreachable");
    let kubeconfig = unreachable_kubeconfig(&s);
    let example = root().join("examples/train-eval.yaml");
    let out = s
        .skyc(&["run", &example.to_string_lossy(), "--target", "k8s"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("skyc run");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the Kubernetes API server https://127.0.0.1:")
            && stderr.contains("did not answer"),
        "{stderr}"
    );
    assert_eq!(statuses(&s), Value::Array(Vec::new()), "no group recorded");
}

#[test]
fn no_cluster_configured_is_a_clear_error() {
    let s = Scratch::new("k8s-none");
    let example = root().join("examples/train-eval.yaml");
    let out = s
        .skyc(&["run", &example.to_string_lossy(), "--target", "k8s"])
        .env("KUBECONFIG", s.dir.join("no-such-kubeconfig"))
        .env("HOME", &s.dir)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("skyc run");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains("no-such-kubeconfig"), "{stderr}");
    assert_eq!(statuses(&s), Value::Array(Vec::new()));
}

#[test]
fn flags_of_other_targets_are_refused() {
    let s = Scratch::new("k8s-flags");
    let example = root().join("examples/train-eval.yaml");
    let example = example.to_string_lossy();
    for (args, want) in [
        (
            vec!["--target", "k8s", "--network", "netns"],
            "--network is for the local target",
        ),
        (
            vec!["--target", "k8s", "--out-dir", "x"],
            "--out-dir is for the Slurm target",
        ),
        (vec!["--context", "prod"], "--context is for the k8s target"),
        (
            vec!["--bucket-mounts", "sidecar"],
            "--bucket-mounts is for the k8s target",
        ),
    ] {
        let mut all = vec!["run", &example];
        all.extend(args);
        let out = s.skyc(&all).output().expect("skyc run");
        assert_eq!(out.status.code(), Some(2));
        assert!(text(&out.stderr).contains(want), "{}", text(&out.stderr));
    }
}

#[test]
fn build_rbac_prepends_the_role_the_runtime_needs() {
    let example = root().join("examples/train-eval.yaml");
    let out = skyc()
        .args(["build", &example.to_string_lossy(), "--target", "k8s"])
        .args(["--rbac", "--namespace", "team", "-o", "json"])
        .output()
        .expect("skyc build");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // JSON output is one `List`.
    let list: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(list["kind"], "List");
    let role = &list["items"][0];
    assert_eq!(role["kind"], "Role");
    assert_eq!(role["metadata"]["namespace"], "team");
    let rules = role["rules"].as_array().expect("rules");
    let grants = |resource: &str, verb: &str| {
        rules.iter().any(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|x| x == resource))
                && r["verbs"]
                    .as_array()
                    .is_some_and(|vs| vs.iter().any(|x| x == verb))
        })
    };
    for (resource, verb) in [
        ("jobsets", "patch"),
        ("jobsets", "watch"),
        ("pods", "create"),
        ("pods", "delete"),
        ("pods/log", "get"),
        // Setting an owner reference on them, where the API server
        // enforces owner-reference permissions.
        ("configmaps", "delete"),
    ] {
        assert!(grants(resource, verb), "{resource} {verb}: {role:#}");
    }
    let out = skyc()
        .args([
            "build",
            &example.to_string_lossy(),
            "--target",
            "slurm",
            "--rbac",
        ])
        .output()
        .expect("skyc build");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--rbac is for the k8s target"));
}

/// The cluster of the end-to-end tests, or `None` after a loud message.
fn cluster() -> Option<()> {
    if std::env::var_os("SKYC_K8S_E2E").is_some_and(|v| v == "1")
        && std::env::var_os("KUBECONFIG").is_some()
    {
        return Some(());
    }
    eprintln!(
        "!!! SKIPPED: no Kubernetes cluster for the end-to-end tests (set SKYC_K8S_E2E=1 and \
         KUBECONFIG; docs/targets/k8s.md, \"Testing against a cluster\")"
    );
    None
}

/// `skyc run ... --target k8s` with the e2e namespace and image.
fn run_k8s(s: &Scratch, file: &str, extra: &[&str]) -> Output {
    let namespace = std::env::var("SKYC_K8S_E2E_NAMESPACE").unwrap_or_else(|_| "default".into());
    // Tasks need bash, python3 and getent.
    let image = std::env::var("SKYC_K8S_E2E_IMAGE").unwrap_or_else(|_| "python:3.12-slim".into());
    let mut args = vec![
        "run",
        file,
        "--target",
        "k8s",
        "--namespace",
        &namespace,
        "--image",
        &image,
    ];
    args.extend_from_slice(extra);
    s.skyc(&args).output().expect("skyc run")
}

/// Waits until no object whose name starts with `prefix` is left in the
/// namespace: none of the kinds skyc makes, or that are made for it.
fn wait_gone(prefix: &str, what: &str) {
    let namespace = std::env::var("SKYC_K8S_E2E_NAMESPACE").unwrap_or_else(|_| "default".into());
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        let out = Command::new("kubectl")
            .args([
                "get",
                "jobsets,jobs,pods,services,configmaps,secrets",
                "-n",
                &namespace,
                "-o",
                "name",
            ])
            .output()
            .expect("kubectl");
        // An answer that lists nothing because it was refused proves
        // nothing.
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "kubectl get: {}",
            text(&out.stderr)
        );
        let left = text(&out.stdout);
        if !left.lines().any(|l| l.contains(&format!("/{prefix}"))) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left after {what}:\n{left}"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Deletes the finished JobSet `name`, which holds everything left of
/// its group, and waits until it has taken the rest with it.
fn delete_jobset(name: &str) {
    let namespace = std::env::var("SKYC_K8S_E2E_NAMESPACE").unwrap_or_else(|_| "default".into());
    let deleted = Command::new("kubectl")
        .args(["delete", "jobset", name, "-n", &namespace, "--wait=false"])
        .status()
        .is_ok_and(|st| st.success());
    assert!(deleted, "kubectl delete jobset {name}");
    wait_gone(name, "the group's end and its JobSet's deletion");
}

fn logs(s: &Scratch, id: i64) -> String {
    let out = s
        .skyc(&["logs", &id.to_string(), "--no-follow"])
        .output()
        .expect("skyc logs");
    text(&out.stdout)
}

/// The number a node printed after `marker ` in its log.
fn stamp(logs: &str, marker: &str) -> f64 {
    logs.lines()
        .find_map(|l| l.split_once(&format!("{marker} ")).map(|(_, v)| v.trim()))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no `{marker}` in the logs:\n{logs}"))
}

/// Group names are unique per run: a JobSet of the same name may still be
/// going away from an earlier run.
fn unique(name: &str) -> String {
    format!("{name}-{}", std::process::id() % 100_000)
}

#[test]
fn e2e_the_example_group_succeeds_with_working_hostnames() {
    let Some(()) = cluster() else { return };
    let s = Scratch::new("k8s-e2e-example");
    let text_ = std::fs::read_to_string(root().join("examples/train-eval.yaml")).expect("example");
    let name = unique("train-eval");
    s.write(
        "g.yaml",
        &text_.replace("name: train-eval", &format!("name: {name}")),
    );
    let out = run_k8s(&s, "g.yaml", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let status = s.status(1);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(task(&status, "evaluator")["status"], "CANCELLED");
    for node in task(&status, "trainer")["nodes"].as_array().expect("nodes") {
        assert!(
            node["pod"].is_string() && node["machine"].is_string(),
            "{node}"
        );
        assert!(
            node["ip"].as_str().is_some_and(|ip| !ip.is_empty()),
            "{node}"
        );
    }
    let logs = text(&out.stdout);
    assert!(logs.contains("latest checkpoint:"), "{logs}");
    // The finished JobSet holds everything left of the group: deleted,
    // it takes the rest with it.
    delete_jobset(&name);
}

#[test]
fn e2e_auxiliaries_stop_after_their_delay_and_at_once_on_failure() {
    let Some(()) = cluster() else { return };
    for (primary_exit, delay, want_status, want_code) in
        [(0, 5.0, "SUCCEEDED", 0), (7, 0.0, "FAILED", 100)]
    {
        let s = Scratch::new(&format!("k8s-e2e-delay-{primary_exit}"));
        let name = unique(&format!("delay{primary_exit}"));
        s.write(
            "g.yaml",
            &format!(
                r#"name: {name}
execution: parallel
primary_tasks: [main]
termination_delay: 5s
---
name: main
run: sleep 5; echo "primary-exit $(date +%s.%N)"; exit {primary_exit}
---
name: helper
run: |
  trap 'echo "helper-term $(date +%s.%N)"; exit 0' TERM
  while true; do sleep 0.1; done
"#
            ),
        );
        let out = run_k8s(&s, "g.yaml", &[]);
        assert_eq!(out.status.code(), Some(want_code), "{}", text(&out.stderr));
        let status = s.status(1);
        assert_eq!(status["status"], want_status, "{status:#}");
        assert_eq!(task(&status, "helper")["status"], "CANCELLED");
        let logs = logs(&s, 1);
        let waited = stamp(&logs, "helper-term") - stamp(&logs, "primary-exit");
        // Pod deletion and kubelet signalling add a few seconds; node
        // clocks may differ by a little.
        assert!(
            (delay - 1.0..=delay + 8.0).contains(&waited),
            "SIGTERM {waited:.1}s after the primary, want about {delay}s"
        );
    }
}

#[test]
fn e2e_an_exhausted_budget_fails_its_task_but_not_its_sibling() {
    let Some(()) = cluster() else { return };
    let s = Scratch::new("k8s-e2e-budget");
    let name = unique("budget");
    s.write(
        "g.yaml",
        &format!(
            r#"name: {name}
execution: parallel
---
name: broken
resources:
  job_recovery:
    max_restarts_on_errors: 1
run: echo attempt; exit 1
---
name: steady
run: sleep 20; echo finished
"#
        ),
    );
    let out = run_k8s(&s, "g.yaml", &[]);
    assert_eq!(out.status.code(), Some(100), "{}", text(&out.stderr));
    let status = s.status(1);
    assert_eq!(task(&status, "broken")["status"], "FAILED");
    assert_eq!(task(&status, "broken")["restarts_on_errors"], 1);
    assert_eq!(task(&status, "steady")["status"], "SUCCEEDED");
    assert_eq!(task(&status, "steady")["restarts"], 0);
    let logs = logs(&s, 1);
    assert_eq!(logs.matches("(broken-0) attempt").count(), 2, "{logs}");
    assert!(logs.contains("(steady-0) finished"), "{logs}");
}

/// A run that always exits with a listed code restarts without end;
/// every start of the user's `run` is one the engine decided: after
/// some restarts and a cancel, the starts in the logs are the engine's
/// attempts, never more (a Job would also have replaced each pod on its
/// own).
#[test]
fn e2e_every_start_of_a_node_is_an_attempt_of_the_engine() {
    let Some(()) = cluster() else { return };
    let s = Scratch::new("k8s-e2e-listed");
    let name = unique("listed");
    s.write(
        "g.yaml",
        &format!(
            r#"name: {name}
execution: parallel
---
name: trainer
resources:
  job_recovery:
    recover_on_exit_codes: [29]
run: echo "start $(date +%s.%N)"; sleep 3; exit 29
"#
        ),
    );
    let out = run_k8s(&s, "g.yaml", &["-d"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    while task(&s.status(1), "trainer")["restarts"].as_u64() < Some(3) {
        assert!(std::time::Instant::now() < deadline, "{:#}", s.status(1));
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    let cancel = s.skyc(&["cancel", "1"]).output().expect("skyc cancel");
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    while s.status(1)["status"] != "CANCELLED" {
        assert!(std::time::Instant::now() < deadline, "{:#}", s.status(1));
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    let status = s.status(1);
    let attempts = task(&status, "trainer")["restarts"].as_u64().unwrap() + 1;
    let starts = logs(&s, 1).matches("(trainer-0) start").count() as u64;
    assert!(
        (attempts - 1..=attempts).contains(&starts),
        "{starts} starts for {attempts} attempts"
    );
}

#[test]
fn e2e_cancel_and_a_killed_supervisor() {
    let Some(()) = cluster() else { return };
    let s = Scratch::new("k8s-e2e-cancel");
    let name = unique("cancel");
    s.write(
        "g.yaml",
        &format!(
            r#"name: {name}
execution: parallel
primary_tasks: [main]
termination_delay: 10s
---
name: main
num_nodes: 2
run: for i in $(seq 1 30); do echo "line $i"; sleep 1; done
---
name: helper
run: while true; do sleep 1; done
"#
        ),
    );
    let out = run_k8s(&s, "g.yaml", &["-d"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id: i64 = text(&out.stdout).trim().parse().expect("group id");
    let status = s.wait_for(id, Duration::from_secs(300), |st| {
        task(st, "main")["status"] == "RUNNING" && task(st, "helper")["status"] == "RUNNING"
    });
    // A new supervisor takes over from the store and the cluster.
    let pid = status["supervisor_pid"].as_i64().expect("supervisor pid");
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .is_ok_and(|st| st.success())
    );
    std::thread::sleep(Duration::from_secs(3));
    let out = s
        .skyc(&["cancel", &id.to_string()])
        .output()
        .expect("cancel");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status = s.wait_for(id, Duration::from_secs(180), |st| {
        !st["finished_at_ms"].is_null()
    });
    assert_eq!(status["status"], "CANCELLED", "{status:#}");
    for t in ["main", "helper"] {
        assert_eq!(task(&status, t)["status"], "CANCELLED", "{status:#}");
        assert_eq!(task(&status, t)["restarts"], 0, "no restart counted");
    }
    let logs = logs(&s, id);
    assert!(logs.contains("(main-1) line 1"), "{logs}");
    wait_gone(&name, "a cancel");
}

#[test]
fn a_pipeline_is_accepted_up_to_the_cluster_check() {
    let s = Scratch::new("k8s-pipeline");
    let kubeconfig = unreachable_kubeconfig(&s);
    let file = root().join("tests/fixtures/k8s-pipelines/train-then-eval.yaml");
    let out = s
        .skyc(&["run", &file.to_string_lossy(), "--target", "k8s"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("skyc run");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the Kubernetes API server https://127.0.0.1:")
            && stderr.contains("did not answer")
            && !stderr.contains("pipeline"),
        "{stderr}"
    );
    assert_eq!(statuses(&s), Value::Array(Vec::new()), "no group recorded");
}

#[test]
fn e2e_a_pipeline_runs_its_steps_in_order_and_a_failed_step_cancels_the_rest() {
    let Some(()) = cluster() else { return };
    for (exit, want_status, want_code) in [(0, "SUCCEEDED", 0), (3, "FAILED", 100)] {
        let s = Scratch::new(&format!("k8s-e2e-pipeline-{exit}"));
        let name = unique(&format!("pipe{exit}"));
        s.write(
            "g.yaml",
            &format!(
                r#"name: {name}
execution: serial
---
name: train
num_nodes: 2
resources:
  job_recovery:
    max_restarts_on_errors: 1
run: |
  sleep 3
  echo "train-id $SKYPILOT_TASK_ID"
  echo "train-end $(date +%s.%N)"
  [ "$SKYPILOT_NODE_RANK" = 1 ] && exit {exit}
  exit 0
---
name: eval
run: |
  echo "eval-id $SKYPILOT_TASK_ID"
  echo "eval-start $(date +%s.%N)"
"#
            ),
        );
        let out = run_k8s(&s, "g.yaml", &[]);
        assert_eq!(out.status.code(), Some(want_code), "{}", text(&out.stderr));
        let status = s.status(1);
        assert_eq!(status["status"], want_status, "{status:#}");
        let logs = logs(&s, 1);
        if exit == 0 {
            assert_eq!(task(&status, "train")["status"], "SUCCEEDED");
            assert_eq!(task(&status, "eval")["status"], "SUCCEEDED");
            let ends: Vec<f64> = logs
                .lines()
                .filter_map(|l| l.split_once("train-end ").map(|(_, v)| v.trim()))
                .filter_map(|v| v.parse().ok())
                .collect();
            assert_eq!(ends.len(), 2, "both nodes of the first step:\n{logs}");
            let last = ends.iter().copied().fold(f64::MIN, f64::max);
            // Node clocks may differ by a little.
            assert!(stamp(&logs, "eval-start") > last - 1.0, "{logs}");
            let id = |marker: &str| {
                logs.lines()
                    .find_map(|l| {
                        l.split_once(&format!("{marker} "))
                            .map(|(_, v)| v.trim().to_owned())
                    })
                    .unwrap_or_default()
            };
            assert!(
                !id("train-id").is_empty() && id("train-id") != id("eval-id"),
                "{logs}"
            );
        } else {
            assert_eq!(task(&status, "train")["status"], "FAILED");
            assert_eq!(task(&status, "train")["restarts_on_errors"], 1);
            assert_eq!(task(&status, "eval")["status"], "CANCELLED");
            assert!(!logs.contains("eval-start"), "{logs}");
        }
    }
}

/// A pool on the Kubernetes target without a cluster: a name that cannot
/// name its workers' objects, and a cluster that does not answer, are
/// refused before anything is recorded.
#[test]
fn a_k8s_pool_is_refused_before_anything_is_recorded() {
    let s = Scratch::new("k8s-pool-refused");
    s.write(
        "pool.yaml",
        "name: w\npool:\n  workers: 2\nsetup: echo ready\n",
    );
    let kubeconfig = unreachable_kubeconfig(&s);
    let out = s
        .skyc(&[
            "pool",
            "apply",
            "-p",
            "My_Pool",
            "pool.yaml",
            "--target",
            "k8s",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("skyc pool apply");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("on the k8s target a pool's name"),
        "{stderr}"
    );
    let out = s
        .skyc(&[
            "pool",
            "apply",
            "-p",
            "gpus",
            "pool.yaml",
            "--target",
            "k8s",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("skyc pool apply");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("did not answer"), "{stderr}");
    let out = s
        .skyc(&["pool", "status", "--json"])
        .output()
        .expect("pool status");
    assert_eq!(text(&out.stdout).trim(), "[]", "no pool recorded");
}

/// A pool of two workers: three ranked jobs each run once, in a worker
/// that ran the pool's setup; the pool goes down with every object.
#[test]
fn e2e_a_pool_runs_ranked_jobs_in_its_workers_and_goes_down() {
    let Some(()) = cluster() else { return };
    let s = Scratch::new("k8s-e2e-pool");
    let namespace = std::env::var("SKYC_K8S_E2E_NAMESPACE").unwrap_or_else(|_| "default".into());
    let image = std::env::var("SKYC_K8S_E2E_IMAGE").unwrap_or_else(|_| "python:3.12-slim".into());
    let pool = unique("pool");
    s.write(
        "pool.yaml",
        "name: w\npool:\n  workers: 2\nsetup: echo set up > /tmp/setup-done\n",
    );
    let out = s
        .skyc(&[
            "pool",
            "apply",
            "-p",
            &pool,
            "pool.yaml",
            "--target",
            "k8s",
            "--namespace",
            &namespace,
            "--image",
            &image,
        ])
        .output()
        .expect("skyc pool apply");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    s.write(
        "job.yaml",
        "name: j\nrun: |\n  test -f /tmp/setup-done && echo rank $SKYPILOT_JOB_RANK of $SKYPILOT_NUM_JOBS\n",
    );
    let out = s
        .skyc(&["run", "--pool", &pool, "--num-jobs", "3", "job.yaml"])
        .output()
        .expect("skyc run --pool");
    let logs = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}\n{logs}", text(&out.stderr));
    for rank in 0..3 {
        assert_eq!(
            logs.matches(&format!("rank {rank} of 3")).count(),
            1,
            "{logs}"
        );
    }
    let out = s
        .skyc(&["pool", "down", &pool])
        .output()
        .expect("pool down");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    wait_gone(&format!("{pool}-"), "pool down");
}

/// The RLHF example's code folder, and a workdir, reach every pod: each
/// node prints the digest of what it read at the destinations, and
/// nothing of the group (its files pod included) is left once its JobSet
/// is deleted.
#[test]
fn e2e_files_reach_every_pod() {
    let Some(()) = cluster() else { return };
    let s = Scratch::new("k8s-e2e-files");
    std::fs::create_dir_all(s.dir.join("code/lib")).expect("code");
    s.write("code/lib/model.py", "WEIGHTS = 3\n");
    s.write("work/run.sh", "echo from the workdir\n");
    let name = unique("files");
    s.write(
        "g.yaml",
        &format!(
            "name: {name}\nexecution: parallel\n---\nname: trainer\nnum_nodes: 2\nworkdir: \
             ./work\nfile_mounts:\n  /code: ./code\nrun: |\n  sha256sum /code/lib/model.py\n  \
             bash run.sh\n---\nname: evaluator\nfile_mounts:\n  /code: ./code\nrun: cat \
             /code/lib/model.py\n"
        ),
    );
    let out = run_k8s(&s, "g.yaml", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let status = s.status(1);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    let logs = logs(&s, 1);
    let digest = skyc_runtime::files::tar::sha256(b"WEIGHTS = 3\n");
    assert_eq!(
        logs.matches(&format!("{digest}  /code/lib/model.py"))
            .count(),
        2,
        "{logs}"
    );
    assert_eq!(logs.matches("from the workdir").count(), 2, "{logs}");
    assert!(logs.contains("WEIGHTS = 3"), "{logs}");
    delete_jobset(&name);
}

/// `skyc volume apply --target k8s` makes a PersistentVolumeClaim: a
/// cluster that does not answer is said at the volume file's name, and
/// nothing is recorded; a volume of another kind is refused before any
/// cluster is asked.
#[test]
fn a_k8s_volume_needs_its_cluster_and_nothing_is_recorded_without_it() {
    let s = Scratch::new("k8s-volume-unreachable");
    let kubeconfig = unreachable_kubeconfig(&s);
    s.write(
        "ckpts.yaml",
        "name: ckpts\ntype: k8s-pvc\nsize: 10Gi\nconfig:\n  access_mode: ReadWriteMany\n",
    );
    let out = s
        .skyc(&[
            "volume",
            "apply",
            "ckpts.yaml",
            "--target",
            "k8s",
            "--color",
            "never",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("skyc volume apply");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("ckpts.yaml:1:7"), "{err}");
    assert!(err.contains("127.0.0.1"), "{err}");
    let ls = s
        .skyc(&["volume", "ls", "--json"])
        .output()
        .expect("skyc volume ls");
    assert_eq!(text(&ls.stdout).trim(), "[]");
    // Not a claim: refused at once.
    s.write(
        "rp.yaml",
        "name: rp\ntype: runpod-network-volume\nsize: 10Gi\n",
    );
    let out = s
        .skyc(&[
            "volume", "apply", "rp.yaml", "--target", "k8s", "--color", "never",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("skyc volume apply");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("k8s-pvc"),
        "{}",
        text(&out.stderr)
    );
}
