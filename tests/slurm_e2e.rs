//! The Slurm target on a real cluster: scripts built by `skyc build
//! --target slurm`, submitted with sbatch through the runtime's client.
//!
//! scripts/test starts a local cluster (scripts/slurm-cluster, 8 slurmd
//! daemons, each a "node" with its own hostname and loopback address) and
//! exports SLURM_CONF, SKYC_SLURM_DIR and SKYC_SLURM_REQUIRED=1: there a
//! missing cluster fails the suite. A bare `cargo test` without a cluster
//! skips these tests with a loud message. The tests run one at a time
//! (one crashes a node).

use crate::slurm::{check_hostile_outputs, hostile_yaml, tmp_dir};
use crate::support::leftovers::{assert_nothing_outlived, leave_leftovers};
use crate::support::skyc;
use skyc_compiler::{Options, compile};
use skyc_runtime::policy::{GroupSpec, Status};
use skyc_runtime::slurm::{JobState, Slurm, StatusLine, Tracker, What, read_status};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

/// The cluster, or `None` (after a loud message) when there is none and
/// none is required.
pub(crate) fn cluster() -> Option<MutexGuard<'static, ()>> {
    let up = std::env::var_os("SLURM_CONF").is_some()
        && Command::new("sinfo")
            .arg("-h")
            .output()
            .is_ok_and(|o| o.status.success());
    if !up {
        assert!(
            std::env::var_os("SKYC_SLURM_REQUIRED").is_none(),
            "SKYC_SLURM_REQUIRED is set but no Slurm cluster answers (SLURM_CONF={:?})",
            std::env::var_os("SLURM_CONF")
        );
        eprintln!(
            "!!! SKIPPED: no Slurm cluster (SLURM_CONF unset or sinfo fails); scripts/test starts one"
        );
        return None;
    }
    Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()))
}

struct Job {
    id: String,
    out: PathBuf,
    spec: GroupSpec,
}

/// Builds `yaml` for Slurm and submits it.
fn submit(name: &str, yaml: &str, args: &[&str]) -> Job {
    let dir = tmp_dir(&format!("e2e-{name}"));
    let file = dir.join("group.yaml");
    std::fs::write(&file, yaml).unwrap();
    let script = dir.join("job.sh");
    let out = skyc()
        .args(["build", "--target", "slurm", "--out"])
        .arg(&script)
        .args(args)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let group = compile("group.yaml", yaml.as_bytes(), &Options::default())
        .group
        .unwrap();
    let out_dir = dir.join("out");
    let id = Slurm::from_env().submit(&script, &out_dir).unwrap();
    Job {
        id,
        out: out_dir,
        spec: GroupSpec::from_ir(&group, Duration::from_secs(30)),
    }
}

impl Job {
    /// Polls until every component is terminal; returns the tracker fed
    /// with everything seen on the way.
    fn wait(&self, timeout: Duration) -> Tracker {
        let slurm = Slurm::from_env();
        let mut tracker = Tracker::new(self.spec.clone());
        let deadline = Instant::now() + timeout;
        loop {
            let states: Vec<JobState> = slurm
                .components(&self.id)
                .unwrap()
                .into_iter()
                .map(|c| c.state)
                .collect();
            tracker.update(&read_status(&self.out));
            tracker.observe(&states);
            if !states.is_empty() && states.iter().all(JobState::is_terminal) {
                tracker.update(&read_status(&self.out));
                return tracker;
            }
            if Instant::now() > deadline {
                let _ = slurm.cancel(&self.id);
                panic!(
                    "job {} not done after {timeout:?}:\n{}",
                    self.id,
                    self.status_text()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn status_text(&self) -> String {
        std::fs::read_to_string(self.out.join("status")).unwrap_or_default()
    }

    fn lines(&self) -> Vec<StatusLine> {
        read_status(&self.out)
    }

    /// The time of the first status line whose text (after the time)
    /// contains `needle`.
    fn at(&self, needle: &str) -> f64 {
        let text = self.status_text();
        let line = text
            .lines()
            .find(|l| {
                l.split_once(' ')
                    .is_some_and(|(_, rest)| rest.contains(needle))
            })
            .unwrap_or_else(|| panic!("no `{needle}` in\n{text}"));
        line.split(' ').next().unwrap().parse().unwrap()
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.out.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}\n{}", self.status_text()))
    }
}

fn task_statuses(t: &Tracker, spec: &GroupSpec) -> Vec<(String, Status)> {
    spec.tasks
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), t.task_status(i)))
        .collect()
}

#[test]
fn tasks_reach_each_other_by_group_hostname_across_nodes() {
    let Some(_cluster) = cluster() else { return };
    // Each node writes what it sees; the server's rank 0 serves on its own
    // address and the client fetches from it by group hostname.
    let yaml = r#"name: net
execution: parallel
primary_tasks: [client]
---
name: server
num_nodes: 2
resources: {cpus: 1, accelerators: "a100:1"}
run: |
  f="$SKYC_OUT/seen-server-$SKYPILOT_NODE_RANK"
  { hostname; echo "$SKYPILOT_NODE_RANK $SKYPILOT_NUM_NODES $SKYPILOT_NUM_GPUS_PER_NODE ${CUDA_VISIBLE_DEVICES:-none}"
    echo "$SKYPILOT_NODE_IPS" | tr '\n' ' '; echo
    getent hosts "server-0.$SKYPILOT_JOBGROUP_NAME" "server-1.$SKYPILOT_JOBGROUP_NAME" "client-0.$SKYPILOT_JOBGROUP_NAME"
  } > "$f"
  if [ "$SKYPILOT_NODE_RANK" = 0 ]; then
    ip=$(getent hosts "server-0.$SKYPILOT_JOBGROUP_NAME" | awk '{print $1}')
    cd "$SKYC_OUT" && echo hello-from-server > hello && exec python3 -m http.server 8123 --bind "$ip"
  fi
  sleep 60
---
name: client
resources: {cpus: 1}
run: |
  { hostname; getent hosts "server-0.$SKYPILOT_JOBGROUP_NAME"; } > "$SKYC_OUT/seen-client"
  for i in $(seq 50); do
    python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://server-0.$SKYPILOT_JOBGROUP_NAME:8123/hello').read().decode())" > "$SKYC_OUT/fetched" 2>/dev/null && exit 0
    sleep 0.2
  done
  exit 1
"#;
    let job = submit("net", yaml, &["--grace", "2"]);
    let tracker = job.wait(Duration::from_secs(60));
    assert_eq!(
        tracker.group_status(),
        Status::Succeeded,
        "{}",
        job.status_text()
    );
    assert_eq!(job.file("fetched"), "hello-from-server\n");
    // Every node resolves every group hostname to the loopback address of
    // the node that runs it (127.0.0.1K on node nK), on distinct nodes.
    let s0 = job.file("seen-server-0");
    let s1 = job.file("seen-server-1");
    let c0 = job.file("seen-client");
    let node_ip = |seen: &str| {
        let host = seen
            .lines()
            .next()
            .unwrap()
            .trim_start_matches('n')
            .to_owned();
        format!("127.0.0.{}", 10 + host.parse::<u32>().unwrap())
    };
    let (ip0, ip1, ipc) = (node_ip(&s0), node_ip(&s1), node_ip(&c0));
    assert!(
        ip0 != ip1 && ip1 != ipc && ip0 != ipc,
        "three distinct nodes"
    );
    for seen in [&s0, &s1] {
        assert!(seen.contains(&format!("{ip0}      server-0.net")), "{seen}");
        assert!(seen.contains(&format!("{ip1}      server-1.net")), "{seen}");
        assert!(seen.contains(&format!("{ipc}      client-0.net")), "{seen}");
        assert!(
            seen.contains(&format!("\n{ip0} {ip1} \n")),
            "SKYPILOT_NODE_IPS in rank order: {seen}"
        );
    }
    assert!(
        s0.contains("\n0 2 1 0\n") && s1.contains("\n1 2 1 0\n"),
        "rank, nodes, gpus: {s0}{s1}"
    );
    assert!(c0.contains(&format!("{ip0}      server-0.net")));
    // The auxiliary server was terminated once the client succeeded.
    assert_eq!(task_statuses(&tracker, &job.spec)[0].1, Status::Cancelled);
}

const SIGTERM_TRAP: &str = r#"trap 'echo "$EPOCHREALTIME" > "$SKYC_OUT/term-$SKYC_TASK"; exit 0' TERM
  while :; do sleep 0.1; done"#;

#[test]
fn auxiliaries_get_sigterm_after_their_delay_then_sigkill_after_the_grace() {
    let Some(_cluster) = cluster() else { return };
    let yaml = format!(
        r#"name: delay
execution: parallel
primary_tasks: [main]
termination_delay: {{default: 2s, stubborn: 0s}}
---
name: main
run: sleep 1
---
name: watcher
run: |
  {SIGTERM_TRAP}
---
name: stubborn
run: |
  trap 'echo "$EPOCHREALTIME" > "$SKYC_OUT/term-stubborn"' TERM
  while :; do sleep 0.1; done
"#
    );
    let job = submit("delay", &yaml, &["--grace", "2"]);
    let tracker = job.wait(Duration::from_secs(60));
    assert_eq!(
        tracker.group_status(),
        Status::Succeeded,
        "{}",
        job.status_text()
    );
    let done = job.at("task main 0 SUCCEEDED");
    let term: f64 = job.file("term-watcher").trim().parse().unwrap();
    let delay = term - done;
    eprintln!("primary exit -> watcher SIGTERM: {delay:.3} s (delay 2 s)");
    assert!(
        (2.0..3.5).contains(&delay),
        "SIGTERM {delay:.3} s after the primary, want ~2 s"
    );
    // The stubborn one ignores SIGTERM (its trap returns) and is killed
    // after the 2 s grace.
    let term_stubborn: f64 = job.file("term-stubborn").trim().parse().unwrap();
    assert!(term_stubborn - done < 1.5, "delay 0 means at once");
    let kill = job.at("task stubborn 0 SIGKILL");
    assert!(
        (1.8..3.5).contains(&(kill - term_stubborn)),
        "SIGKILL after the grace"
    );
    let statuses = task_statuses(&tracker, &job.spec);
    assert_eq!(statuses[1].1, Status::Cancelled);
    assert_eq!(statuses[2].1, Status::Cancelled);
}

#[test]
fn a_failed_primary_terminates_auxiliaries_at_once() {
    let Some(_cluster) = cluster() else { return };
    let yaml = format!(
        r#"name: pfail
execution: parallel
primary_tasks: [main]
termination_delay: 60s
---
name: main
num_nodes: 2
run: |
  sleep 1
  [ "$SKYPILOT_NODE_RANK" = 1 ] && exit 3
  sleep 5
---
name: watcher
run: |
  {SIGTERM_TRAP}
"#
    );
    let job = submit("pfail", &yaml, &["--grace", "5"]);
    let tracker = job.wait(Duration::from_secs(60));
    assert_eq!(
        tracker.group_status(),
        Status::Failed,
        "{}",
        job.status_text()
    );
    let failed = job.at("task main 0 FAILED");
    let term: f64 = job.file("term-watcher").trim().parse().unwrap();
    assert!(
        term - failed < 1.5,
        "SIGTERM {:.3} s after the failure",
        term - failed
    );
    assert!(
        job.status_text().contains("node main 0 1 run 3"),
        "{}",
        job.status_text()
    );
    assert!(job.status_text().contains("group FAILED"));
    let states: Vec<JobState> = Slurm::from_env()
        .components(&job.id)
        .unwrap()
        .into_iter()
        .map(|c| c.state)
        .collect();
    assert!(
        states.contains(&JobState::Failed),
        "the job fails with its group: {states:?}"
    );
}

#[test]
fn restarts_follow_the_budget_and_listed_exit_codes() {
    let Some(_cluster) = cluster() else { return };
    // `$SKYC_OUT/count-NAME-RANK` counts attempts per node.
    let count = r#"c="$SKYC_OUT/count-$SKYC_TASK-$SKYPILOT_NODE_RANK"; n=$(( $(cat "$c" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$c""#;
    let yaml = format!(
        r#"name: budget
execution: parallel
---
name: flaky
num_nodes: 2
resources: {{job_recovery: {{max_restarts_on_errors: 2}}}}
run: |
  {count}
  if [ "$SKYPILOT_NODE_RANK" = 1 ] && [ "$n" -le 2 ]; then sleep 0.3; exit 4; fi
  sleep 0.5
---
name: listed
resources: {{job_recovery: {{max_restarts_on_errors: 0, recover_on_exit_codes: [7]}}}}
run: |
  {count}
  [ "$n" -le 3 ] && exit 7
  exit 0
---
name: broke
resources: {{job_recovery: {{max_restarts_on_errors: 1}}}}
run: |
  {count}
  exit 5
---
name: badsetup
setup: exit 9
run: echo never
"#
    );
    let job = submit("budget", &yaml, &[]);
    let tracker = job.wait(Duration::from_secs(90));
    let text = job.status_text();
    let statuses = task_statuses(&tracker, &job.spec);
    assert_eq!(statuses[0].1, Status::Succeeded, "{text}");
    assert_eq!(statuses[1].1, Status::Succeeded, "{text}");
    assert_eq!(statuses[2].1, Status::Failed, "{text}");
    assert_eq!(statuses[3].1, Status::FailedSetup, "{text}");
    // flaky: two budgeted restarts of the whole 2-node task.
    assert_eq!(job.file("count-flaky-0").trim(), "3");
    assert_eq!(job.file("count-flaky-1").trim(), "3");
    assert!(
        text.contains("task flaky 1 RECOVERING restart 2 of 2"),
        "{text}"
    );
    // listed: three free restarts on exit 7 with a budget of 0.
    assert_eq!(job.file("count-listed-0").trim(), "4");
    assert_eq!(
        text.matches("task listed").filter(|_| true).count(),
        4 + 3 + 1,
        "{text}"
    );
    // broke: one restart, then FAILED.
    assert_eq!(job.file("count-broke-0").trim(), "2");
    assert!(text.contains("node badsetup 0 0 setup 9"));
    // The engine, fed the same lines, agrees with the script's statuses.
    for line in job.lines() {
        if let What::Task { name, status, .. } = &line.what
            && ["SUCCEEDED", "FAILED", "FAILED_SETUP"].contains(&status.as_str())
        {
            let i = job.spec.tasks.iter().position(|t| &t.name == name).unwrap();
            assert_eq!(tracker.task_status(i).as_str(), status, "{name}");
        }
    }
    assert_eq!(tracker.engine().restarts(0), (2, 2));
    assert_eq!(tracker.engine().restarts(1), (3, 0));
    assert_eq!(tracker.group_status(), Status::Failed);
}

/// The dir of the cluster scripts/test started (for crash-node).
pub(crate) fn cluster_dir() -> Option<PathBuf> {
    std::env::var_os("SKYC_SLURM_DIR").map(PathBuf::from)
}

pub(crate) fn cluster_script(args: &[&str]) {
    let script = crate::support::root().join("scripts/slurm-cluster");
    let out = Command::new(script).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// After a revive, the node must be idle again before the next test.
pub(crate) fn wait_idle_nodes(n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new("sinfo")
            .args(["-h", "-N", "-t", "idle", "-o", "%N"])
            .output()
            .unwrap();
        let mut nodes: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_owned)
            .collect();
        nodes.sort();
        nodes.dedup();
        if nodes.len() >= n || Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn hostile_values_arrive_intact_on_the_cluster() {
    let Some(_cluster) = cluster() else { return };
    // The tasks write under $SKYC_HOSTILE_OUT and would touch $SKYC_CANARY:
    // both come from the submit environment, which sbatch exports.
    let dir = tmp_dir("e2e-hostile-run");
    let yaml = hostile_yaml();
    let file = dir.join("group.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let script = dir.join("job.sh");
    assert!(
        skyc()
            .args(["build", "--target", "slurm", "--out"])
            .arg(&script)
            .arg(&file)
            .status()
            .unwrap()
            .success()
    );
    let out = dir.join("out");
    let canary2 = dir.join("CANARY");
    let status = Command::new("sbatch")
        .args(["--parsable", "--wait"])
        .arg(&script)
        .current_dir(&dir)
        .env("SKYC_OUT", &out)
        .env("SKYC_HOSTILE_OUT", &dir)
        .env("SKYC_CANARY", &canary2)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        std::fs::read_to_string(out.join("status")).unwrap_or_default()
    );
    check_hostile_outputs(&dir, &canary2);
}

#[test]
fn nothing_a_task_started_outlives_its_step() {
    let Some(_cluster) = cluster() else { return };
    // Every task leaves a background child and a detached daemon: `main`
    // when it succeeds, `side` when it is terminated after the primaries,
    // `flaky` when its first attempt fails; its second attempt checks that
    // they are gone.
    let token = format!("skyc-leftover-{}", std::process::id());
    let leave = leave_leftovers(&token, "$SKYC_OUT", "$SKYC_TASK");
    let yaml = format!(
        r#"name: leftovers
execution: parallel
primary_tasks: [main, flaky]
---
name: main
num_nodes: 2
run: |
  {leave}
  leave
  sleep 1
---
name: side
run: |
  {leave}
  leave
  trap 'exit 0' TERM
  while :; do sleep 0.1; done
---
name: flaky
resources: {{job_recovery: {{max_restarts_on_errors: 1}}}}
run: |
  {leave}
  if [ "$SKYC_ATTEMPT" = 0 ]; then leave; exit 1; fi
  if flock -n "$SKYC_OUT/lock-flaky-0" true; then echo free; else echo held; fi > "$SKYC_OUT/flaky-saw"
"#
    );
    let job = submit("leftovers", &yaml, &["--grace", "5"]);
    let tracker = job.wait(Duration::from_secs(60));
    let text = job.status_text();
    assert_eq!(tracker.group_status(), Status::Succeeded, "{text}");
    let statuses = task_statuses(&tracker, &job.spec);
    assert_eq!(statuses[1].1, Status::Cancelled, "side: {text}");
    assert!(text.contains("task flaky 0 RECOVERING"), "{text}");
    assert_nothing_outlived(&job.out, &token);
}
