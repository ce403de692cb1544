//! End-to-end tests of `skyc run` on the local target: real supervisors,
//! node agents and node processes, each test in a state directory of its
//! own.

use crate::support;
use crate::support::scratch::{Scratch, kill_supervisor, node_processes, task, text};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Seconds since the epoch written by `date +%s.%N` into a file.
fn stamp(s: &Scratch, name: &str) -> f64 {
    s.read(name)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name}: {:?}", s.read(name)))
}

/// A server on each node of `server` (all on port 8080, each on its own
/// address), and a primary client that reaches every one by group
/// hostname.
const SAME_PORT: &str = r#"name: ports
execution: parallel
primary_tasks: [client]
---
name: server
num_nodes: 2
run: |
  me=$(echo "$SKYPILOT_NODE_IPS" | sed -n "$((SKYPILOT_NODE_RANK + 1))p")
  exec python3 -c '
  import http.server, sys
  class H(http.server.BaseHTTPRequestHandler):
      def do_GET(self):
          self.send_response(200); self.end_headers()
          self.wfile.write(sys.argv[2].encode())
      def log_message(self, *a): pass
  http.server.HTTPServer((sys.argv[1], 8080), H).serve_forever()
  ' "$me" "server-$SKYPILOT_NODE_RANK"
---
name: client
run: |
  getent hosts server-0.$SKYPILOT_JOBGROUP_NAME server-1.$SKYPILOT_JOBGROUP_NAME
  python3 -c '
  import time, urllib.request
  for i in range(2):
      url = f"http://server-{i}.ports:8080/"
      for _ in range(100):
          try:
              print(urllib.request.urlopen(url, timeout=2).read().decode(), "answered", url)
              break
          except OSError:
              time.sleep(0.1)
      else:
          raise SystemExit(f"no answer from {url}")
  '
"#;

fn same_port_servers(network: &str) {
    let s = Scratch::new(&format!("ports-{network}"));
    s.write("g.yaml", SAME_PORT);
    let out = s.run("g.yaml", &["--network", network]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("(client-0) server-0 answered http://server-0.ports:8080/"));
    assert!(stdout.contains("(client-0) server-1 answered http://server-1.ports:8080/"));
    assert!(stdout.contains("server-0.ports"), "getent: {stdout}");
}

#[test]
fn same_port_servers_are_reached_by_group_hostname() {
    same_port_servers("auto");
}

#[test]
fn same_port_servers_on_loopback_addresses() {
    same_port_servers("loopback");
}

#[test]
fn auxiliary_gets_sigterm_after_its_delay() {
    let s = Scratch::new("delay");
    s.write(
        "g.yaml",
        r#"name: delay
execution: parallel
primary_tasks: [main]
termination_delay: 1s
---
name: main
run: sleep 0.3; date +%s.%N > "$SCRATCH/primary-exit"
---
name: helper
run: |
  trap 'date +%s.%N > "$SCRATCH/helper-term"; exit 0' TERM
  while true; do sleep 0.05; done
"#,
    );
    let out = s.run("g.yaml", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let delay = stamp(&s, "helper-term") - stamp(&s, "primary-exit");
    assert!(
        (0.7..=1.3).contains(&delay),
        "SIGTERM {delay:.3}s after the primary, want 1s ± 0.3s"
    );
    let status = s.status(1);
    assert_eq!(status["status"], "SUCCEEDED");
    assert_eq!(task(&status, "helper")["status"], "CANCELLED");
}

#[test]
fn failing_primary_terminates_auxiliaries_at_once() {
    let s = Scratch::new("primary-fails");
    s.write(
        "g.yaml",
        r#"name: fails
execution: parallel
primary_tasks: [main]
termination_delay: 30s
---
name: main
run: sleep 0.3; date +%s.%N > "$SCRATCH/primary-exit"; exit 7
---
name: helper
run: |
  trap 'date +%s.%N > "$SCRATCH/helper-term"; exit 0' TERM
  while true; do sleep 0.05; done
"#,
    );
    let out = s.run("g.yaml", &[]);
    assert_eq!(out.status.code(), Some(100), "{}", text(&out.stderr));
    let delay = stamp(&s, "helper-term") - stamp(&s, "primary-exit");
    assert!(delay < 0.5, "SIGTERM {delay:.3}s after the failure");
    let status = s.status(1);
    assert_eq!(status["status"], "FAILED");
    assert_eq!(task(&status, "main")["nodes"][0]["exit_code"], 7);
    assert_eq!(task(&status, "helper")["status"], "CANCELLED");
}

#[test]
fn restarts_within_budget_and_on_listed_exit_codes() {
    let s = Scratch::new("restarts");
    // Attempts exit 42 (listed), 1, 1 (budget of 2), then succeed.
    s.write(
        "g.yaml",
        r#"name: restarts
---
name: flaky
resources:
  job_recovery:
    max_restarts_on_errors: 2
    recover_on_exit_codes: [42]
run: |
  n=$(cat "$SCRATCH/count" 2>/dev/null || echo 0)
  echo $((n + 1)) > "$SCRATCH/count"
  case $n in 0) exit 42;; 1|2) exit 1;; *) echo done;; esac
"#,
    );
    let out = s.run("g.yaml", &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status = s.status(1);
    let flaky = task(&status, "flaky");
    assert_eq!(flaky["status"], "SUCCEEDED");
    assert_eq!(
        (
            flaky["restarts"].as_i64(),
            flaky["restarts_on_errors"].as_i64()
        ),
        (Some(3), Some(2))
    );
    assert_eq!(s.read("count").trim(), "4");
}

#[test]
fn exhausted_budget_fails_the_task_but_not_its_sibling() {
    let s = Scratch::new("budget");
    s.write(
        "g.yaml",
        r#"name: budget
execution: parallel
---
name: broken
resources:
  job_recovery:
    max_restarts_on_errors: 1
run: echo attempt >> "$SCRATCH/broken"; exit 1
---
name: steady
run: sleep 1.5; echo finished > "$SCRATCH/steady"
"#,
    );
    let out = s.run("g.yaml", &[]);
    assert_eq!(out.status.code(), Some(100));
    let status = s.status(1);
    assert_eq!(status["status"], "FAILED");
    assert_eq!(task(&status, "broken")["status"], "FAILED");
    assert_eq!(task(&status, "broken")["restarts_on_errors"], 1);
    assert_eq!(s.read("broken").lines().count(), 2);
    assert_eq!(task(&status, "steady")["status"], "SUCCEEDED");
    assert_eq!(task(&status, "steady")["restarts"], 0);
    assert_eq!(s.read("steady").trim(), "finished");
}

#[test]
fn a_lost_node_restarts_only_its_task() {
    let s = Scratch::new("lost");
    s.write(
        "g.yaml",
        r#"name: lost
execution: parallel
---
name: victim
num_nodes: 2
run: |
  echo "start $SKYPILOT_NODE_RANK" >> "$SCRATCH/victim"
  if [ -e "$SCRATCH/go" ]; then exit 0; fi
  sleep 30
---
name: bystander
run: until [ -e "$SCRATCH/go" ]; do sleep 0.05; done
"#,
    );
    let id = s.detach("g.yaml");
    let status = s.wait_for(id, Duration::from_secs(20), |s| {
        s["tasks"][0]["nodes"]
            .as_array()
            .is_some_and(|n| n.len() == 2 && n.iter().all(|n| n["phase"] == "run"))
            && s["tasks"][1]["status"] == "RUNNING"
    });
    while s.read("victim").lines().count() < 2 {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(s.dir.join("go"), "").expect("go");
    // The machine of node 1 goes away: its agent dies with SIGKILL.
    let agent = task(&status, "victim")["nodes"][1]["pid"]
        .as_i64()
        .expect("pid");
    let killed = Command::new("kill")
        .args(["-KILL", &agent.to_string()])
        .status();
    assert!(killed.is_ok_and(|s| s.success()));
    let status = s.wait_finished(id);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    let victim = task(&status, "victim");
    assert_eq!(
        (
            victim["restarts"].as_i64(),
            victim["restarts_on_errors"].as_i64()
        ),
        (Some(1), Some(0))
    );
    assert_eq!(s.read("victim").lines().count(), 4, "both nodes restart");
    assert_eq!(task(&status, "bystander")["restarts"], 0);
    assert!(node_processes(&s.state()).is_empty());
}

#[test]
fn node_logs_hold_what_the_nodes_wrote_with_an_index() {
    let s = Scratch::new("logs");
    s.write(
        "g.yaml",
        r#"name: logs
execution: parallel
---
name: talker
num_nodes: 2
setup: echo "setup $SKYPILOT_SETUP_NODE_RANK"
run: |
  echo "out $SKYPILOT_NODE_RANK"
  echo "err $SKYPILOT_NODE_RANK" >&2
  sleep 30 &
  printf 'no newline'
"#,
    );
    let id = s.detach("g.yaml");
    let status = s.wait_finished(id);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    let logs = s.state().join("groups").join(id.to_string()).join("logs");
    for rank in 0..2 {
        let log = logs.join(format!("talker-{rank}.log"));
        let bytes = std::fs::read(&log).expect("log");
        let want = format!("setup {rank}\nout {rank}\nerr {rank}\nno newline");
        assert_eq!(String::from_utf8_lossy(&bytes), want);
        let index = skyc_runtime::local::logindex::read_index(
            &skyc_runtime::local::logindex::index_path(&log),
        )
        .expect("index");
        assert!(index.len() >= 2, "setup and run: {index:?}");
        assert!(index.windows(2).all(|p| p[0].end_offset < p[1].end_offset));
        assert_eq!(index.last().map(|r| r.end_offset), Some(bytes.len() as u64));
    }
    assert!(node_processes(&s.state()).is_empty(), "leftovers killed");
}

#[test]
fn supervisor_sigkill_loses_nothing() {
    let s = Scratch::new("crash");
    // 40 numbered lines per node over ~2 s, and an auxiliary whose delay
    // outlives the supervisor.
    s.write(
        "g.yaml",
        r#"name: crash
execution: parallel
primary_tasks: [writer]
termination_delay: 1s
---
name: writer
num_nodes: 2
setup: echo "setup $SKYPILOT_SETUP_NODE_RANK" >> "$SCRATCH/starts"
run: |
  echo "run $SKYPILOT_NODE_RANK" >> "$SCRATCH/starts"
  for i in $(seq 1 40); do echo "line $i"; sleep 0.05; done
---
name: helper
run: |
  echo helper >> "$SCRATCH/starts"
  trap 'echo helper-term >> "$SCRATCH/starts"; exit 0' TERM
  while true; do sleep 0.05; done
"#,
    );
    let id = s.detach("g.yaml");
    let status = s.wait_for(id, Duration::from_secs(20), |s| {
        s["tasks"][0]["nodes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n["phase"] == "run"))
    });
    let first = kill_supervisor(&status);
    std::thread::sleep(Duration::from_millis(800));
    // The next command notices and starts a new supervisor.
    let status = s.status(id);
    let second = status["supervisor_pid"].as_i64().expect("new supervisor");
    assert_ne!(first, second);
    // Again while the auxiliary waits out its delay.
    let status = s.wait_for(id, Duration::from_secs(20), |s| {
        task(s, "writer")["status"] == "SUCCEEDED"
    });
    kill_supervisor(&status);
    let status = s.wait_finished(id);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(task(&status, "helper")["status"], "CANCELLED");
    let mut starts: Vec<String> = s.read("starts").lines().map(String::from).collect();
    starts.sort();
    assert_eq!(
        starts,
        [
            "helper",
            "helper-term",
            "run 0",
            "run 1",
            "setup 0",
            "setup 1"
        ],
        "no node started twice"
    );
    let logs = s
        .skyc(&["logs", &id.to_string(), "writer"])
        .output()
        .expect("logs");
    let logs = text(&logs.stdout);
    for rank in 0..2 {
        let lines: Vec<_> = logs
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("(writer-{rank}) line ")))
            .collect();
        let want: Vec<String> = (1..=40).map(|i| i.to_string()).collect();
        assert_eq!(lines, want, "every line of writer-{rank}");
    }
    assert!(node_processes(&s.state()).is_empty(), "no orphan");
}

#[test]
fn a_started_group_its_supervisor_cannot_take_charge_of_is_kept_and_tried_again() {
    let s = Scratch::new("unadopted");
    s.write(
        "g.yaml",
        r#"name: kept
---
name: worker
run: |
  echo started >> "$SCRATCH/marks"
  while [ ! -e "$SCRATCH/go" ]; do sleep 0.05; done
  echo finished >> "$SCRATCH/marks"
"#,
    );
    let id = s.detach("g.yaml");
    let status = s.wait_for(id, Duration::from_secs(20), |_| {
        s.read("marks").contains("started")
    });
    kill_supervisor(&status);
    // The group's plan as a supervisor that cannot read it finds it.
    let db = rusqlite::Connection::open(s.state().join("state.db")).expect("the store");
    let plan: String = db
        .query_row("SELECT plan FROM groups WHERE id = ?1", [id], |r| r.get(0))
        .expect("the plan");
    db.execute("UPDATE groups SET plan = '{}' WHERE id = ?1", [id])
        .expect("plan replaced");
    // The next supervisor keeps the group, its node running, and says why.
    let status = s.wait_for(id, Duration::from_secs(20), |s| {
        s["unreachable"]
            .as_str()
            .is_some_and(|u| u.contains("cannot take charge of the group"))
    });
    assert_eq!(status["status"], "RUNNING", "{status:#}");
    assert!(status["finished_at_ms"].is_null());
    assert!(!node_processes(&s.state()).is_empty(), "the node runs on");
    // Readable again: the next try (a client's request) takes charge,
    // and the group ends as it would have.
    db.execute("UPDATE groups SET plan = ?2 WHERE id = ?1", (id, &plan))
        .expect("plan restored");
    std::fs::write(s.dir.join("go"), "").expect("go");
    let status = s.wait_finished(id);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert!(status["unreachable"].is_null(), "{status:#}");
    assert_eq!(s.read("marks"), "started\nfinished\n", "one run");
}

#[test]
fn environment_contract() {
    let s = Scratch::new("env");
    s.write(
        "g.yaml",
        r#"name: envs
execution: parallel
---
name: trainer
num_nodes: 2
resources:
  accelerators: A100:1
envs:
  MODEL: small
  STEPS: 10
setup: echo "setup rank=$SKYPILOT_SETUP_NODE_RANK"
run: |
  echo "rank=$SKYPILOT_NODE_RANK nodes=$SKYPILOT_NUM_NODES gpus=$SKYPILOT_NUM_GPUS_PER_NODE cuda=$CUDA_VISIBLE_DEVICES"
  echo "group=$SKYPILOT_JOBGROUP_NAME model=$MODEL steps=$STEPS ips=$(echo "$SKYPILOT_NODE_IPS" | wc -l)"
  echo "task_id=$SKYPILOT_TASK_ID"
  echo "task_ids=$(echo "$SKYPILOT_TASK_IDS" | wc -l)"
---
name: eval
run: echo "eval cuda=[$CUDA_VISIBLE_DEVICES] gpus=$SKYPILOT_NUM_GPUS_PER_NODE"
"#,
    );
    let out = s
        .skyc(&["run", "g.yaml", "--env", "STEPS=99"])
        .env("SKYC_LOCAL_GPUS", "2")
        .output()
        .expect("run");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for want in [
        "(trainer-0) setup rank=0",
        "(trainer-1) setup rank=1",
        "(trainer-0) rank=0 nodes=2 gpus=1 cuda=0",
        "(trainer-1) rank=1 nodes=2 gpus=1 cuda=1",
        "(trainer-0) group=envs model=small steps=99 ips=2",
        "(trainer-0) task_ids=2",
        "(eval-0) eval cuda=[] gpus=0",
    ] {
        assert!(stdout.contains(want), "missing `{want}` in:\n{stdout}");
    }
    let task_id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("(trainer-0) task_id="))
        .expect("task id");
    assert!(
        task_id.starts_with("sky-managed-20") && task_id.ends_with("_envs_trainer_1-0"),
        "{task_id}"
    );
}

#[test]
fn groups_that_do_not_fit_wait_pending() {
    let s = Scratch::new("pending");
    s.write(
        "g.yaml",
        r#"name: big
---
name: work
resources:
  cpus: 2
run: |
  date +%s.%N >> "$SCRATCH/starts"
  sleep 1
"#,
    );
    let with_cpus = |args: &[&str]| {
        let mut c = s.skyc(args);
        c.env("SKYC_LOCAL_CPUS", "3")
            .env("SKYC_LOCAL_MEMORY_GB", "16")
            .env("SKYC_LOCAL_GPUS", "0");
        c
    };
    let a = with_cpus(&["run", "g.yaml", "-d"]).output().expect("run");
    let b = with_cpus(&["run", "g.yaml", "-d"]).output().expect("run");
    assert!(a.status.success() && b.status.success());
    let second: i64 = text(&b.stdout).trim().parse().expect("id");
    let status = s.wait_for(second, Duration::from_secs(10), |s| {
        s["status"] != "STARTING"
    });
    assert_eq!(status["status"], "PENDING", "{status:#}");
    let status = s.wait_finished(second);
    assert_eq!(status["status"], "SUCCEEDED");
    let starts: Vec<f64> = s
        .read("starts")
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    assert_eq!(starts.len(), 2);
    assert!(
        starts[1] - starts[0] >= 0.9,
        "the second waited for the first: {starts:?}"
    );

    // A task no machine of this size can hold is an error before it runs.
    s.write(
        "huge.yaml",
        "name: huge\nresources:\n  cpus: 64\n  accelerators: H100:8\nrun: echo never\n",
    );
    let out = with_cpus(&["run", "huge.yaml"]).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    support::snapshots("local").bind(|| insta::assert_snapshot!("exceeds_capacity", stderr));
}

#[test]
fn cancel_terminates_every_task() {
    let s = Scratch::new("cancel");
    s.write(
        "g.yaml",
        r#"name: cancelled
execution: parallel
---
name: a
num_nodes: 2
run: sleep 60
---
name: b
run: |
  trap 'echo b-term >> "$SCRATCH/terms"; exit 0' TERM
  while true; do sleep 0.05; done
"#,
    );
    let id = s.detach("g.yaml");
    s.wait_for(id, Duration::from_secs(20), |s| {
        s["status"] == "RUNNING" && s["tasks"][1]["status"] == "RUNNING"
    });
    std::thread::sleep(Duration::from_millis(200));
    let out = s
        .skyc(&["cancel", &id.to_string()])
        .output()
        .expect("cancel");
    assert!(out.status.success());
    let status = s.wait_finished(id);
    assert_eq!(status["status"], "CANCELLED");
    assert!(
        status["tasks"]
            .as_array()
            .is_some_and(|t| t.iter().all(|t| t["status"] == "CANCELLED"))
    );
    assert_eq!(s.read("terms").trim(), "b-term");
    assert!(node_processes(&s.state()).is_empty());
}

#[test]
fn ctrl_c_cancels_a_foreground_run() {
    let s = Scratch::new("ctrl-c");
    s.write("g.yaml", "name: interrupted\nrun: sleep 60\n");
    let child = s
        .skyc(&["run", "g.yaml"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    let status = s.wait_for(1, Duration::from_secs(20), |s| s["status"] == "RUNNING");
    assert_eq!(status["name"], "interrupted");
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .is_ok_and(|s| s.success())
    );
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(103), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("CANCELLED"));
    assert_eq!(s.status(1)["status"], "CANCELLED");
}

/// A process's parent and state letter, from `/proc/PID/stat`.
fn parent_and_state(pid: i64) -> Option<(i64, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) S ppid ...`; comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    Some((fields.next()?.parse().ok()?, state))
}

/// The children of `parent` whose command line is `skyc __spawn`.
fn spawn_helpers(parent: i64) -> Vec<i64> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: i64 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let helper = cmdline.split(|&b| b == 0).nth(1) == Some(b"__spawn".as_slice());
            (helper && parent_and_state(pid)?.0 == parent).then_some(pid)
        })
        .collect()
}

fn node_pids(status: &serde_json::Value) -> Vec<i64> {
    status["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["nodes"].as_array().into_iter().flatten())
        .filter_map(|n| n["pid"].as_i64())
        .collect()
}

#[test]
fn node_agents_come_from_the_spawn_helper_which_is_replaced_when_gone() {
    let s = Scratch::new("spawner");
    s.write("g.yaml", "name: g\nnum_nodes: 2\nrun: sleep 60\n");
    let first = s.detach("g.yaml");
    let running = |id| {
        s.wait_for(id, Duration::from_secs(20), |g| {
            g["status"] == "RUNNING" && node_pids(g).len() == 2
        })
    };
    let status = running(first);
    let supervisor = status["supervisor_pid"].as_i64().expect("a supervisor");
    // The supervisor's one helper started every agent: they are its
    // children, not the supervisor's.
    let helpers = spawn_helpers(supervisor);
    assert_eq!(helpers.len(), 1, "{helpers:?}");
    // Each agent runs the executable skyc carries, installed once in the
    // state directory.
    let installed: Vec<_> = std::fs::read_dir(s.state().join("bin"))
        .expect("the agent installed")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(installed.len(), 1, "{installed:?}");
    for pid in node_pids(&status) {
        assert_eq!(parent_and_state(pid).map(|p| p.0), Some(helpers[0]));
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).expect("its executable");
        assert_eq!(exe, installed[0]);
    }
    // The helper killed: the nodes it started run on, and the next group's
    // are started by a new helper.
    assert!(
        Command::new("kill")
            .args(["-KILL", &helpers[0].to_string()])
            .status()
            .is_ok_and(|s| s.success())
    );
    let second = s.detach("g.yaml");
    let status = running(second);
    let again = spawn_helpers(supervisor);
    assert_eq!(again.len(), 1, "{again:?}");
    assert_ne!(again[0], helpers[0]);
    for pid in node_pids(&status) {
        assert_eq!(parent_and_state(pid).map(|p| p.0), Some(again[0]));
    }
    assert_eq!(s.status(first)["status"], "RUNNING");
    // The second group cancelled while the first runs on (so the
    // supervisor and its helper stay): its agents end and the helper reaps
    // them, leaving no zombie under it.
    assert!(
        s.skyc(&["cancel", &second.to_string()])
            .status()
            .expect("cancel")
            .success()
    );
    s.wait_finished(second);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let zombies: Vec<i64> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .filter(|&pid| parent_and_state(pid) == Some((again[0], 'Z')))
            .collect();
        if zombies.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "unreaped: {zombies:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(spawn_helpers(supervisor), again, "the helper still serves");
    assert!(
        s.skyc(&["cancel", "--all"])
            .status()
            .expect("cancel")
            .success()
    );
    s.wait_finished(first);
    assert!(node_processes(&s.state()).is_empty());
}

/// A state directory whose filesystem is mounted `noexec` (a common
/// `/tmp`) can start no agent: the node's start says why and what to do,
/// where it would otherwise fail with a bare EACCES; so does one remounted
/// `noexec` after the agent was installed. Root only: the filesystem is a
/// tmpfs mounted in a mount namespace of the test's own, and goes with
/// its last process (the supervisor, which exits when idle).
#[test]
fn a_state_directory_mounted_noexec_is_refused_with_the_way_out() {
    let may_mount = rustix::process::geteuid().is_root()
        && Command::new("unshare")
            .args(["--mount", "true"])
            .status()
            .is_ok_and(|s| s.success());
    if !may_mount {
        eprintln!("skipped: mounting a noexec filesystem needs root and mount namespaces");
        return;
    }
    let s = Scratch::new("noexec");
    let file = s.write("hello.yaml", "name: hello\nrun: echo hi\n");
    let mount = s.dir.join("noexec");
    std::fs::create_dir_all(&mount).unwrap();
    // `$1`: the mount point; `$2`: skyc; `$3`: the file; `$4`: what to do
    // before the run that is checked.
    let run = |before: &str| {
        let out = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg(r#"eval "$4" && exec "$2" run --state-dir "$1/state" "$3""#)
            .arg("sh")
            .arg(&mount)
            .arg(env!("CARGO_BIN_EXE_skyc"))
            .arg(&file)
            .arg(before)
            .output()
            .expect("unshare");
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    // Mounted noexec from the start: the install is refused.
    let (code, stdout, stderr) = run(r#"mount -t tmpfs -o noexec tmpfs "$1""#);
    assert_eq!(code, Some(100), "{stdout}{stderr}");
    // The node's log, which `run` follows.
    assert!(
        stdout.contains(
            "(hello-0) skyc: cannot start the node: cannot install skyc's node agent as "
        ) && stdout.contains("its filesystem is mounted noexec; use a state directory on another"),
        "{stdout}{stderr}"
    );
    // Installed, then remounted noexec: the start is refused in the same
    // words.
    let (code, stdout, stderr) = run(
        r#"mount -t tmpfs tmpfs "$1" && "$2" run --state-dir "$1/state" "$3" >/dev/null &&
           mount -o remount,noexec "$1""#,
    );
    assert_eq!(code, Some(100), "{stdout}{stderr}");
    assert!(
        stdout.contains("(hello-0) skyc: cannot start the node: cannot run skyc's node agent ")
            && stdout
                .contains("its filesystem is mounted noexec; use a state directory on another"),
        "{stdout}{stderr}"
    );
}
