//! Pools on this machine, end to end: `skyc pool apply/status/down` and
//! `skyc run --pool NAME --num-jobs N`, with real workers (node
//! environments holding their resources), real setups and real jobs. The
//! machine is described to skyc (`SKYC_LOCAL_*`) so that what fits is the
//! same everywhere; workers get loopback addresses (the network is not
//! what these tests are about).

use crate::support::scratch::{Scratch, text};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A pool of whole-machine-sized workers: 2 cpus each, on an 8-cpu
/// machine. Its setup leaves a marker in the worker's directory and counts
/// itself.
const POOL: &str = r#"name: workers
pool:
  workers: 2
resources:
  cpus: 2
envs:
  MODEL: tiny
  SHARED: from-pool
setup: |
  echo "setup $(pwd)" >> "$SCRATCH/setups"
  echo prepared > marker.txt
"#;

/// A job: where it ran, what it saw; then it waits for its release file
/// (if `WAIT` is set) and ends.
const JOB: &str = r#"name: infer
resources:
  cpus: 1
envs:
  SHARED: from-job
setup: echo "a job's setup never runs" >> "$SCRATCH/job-setups"
run: |
  echo "$SKYPILOT_JOB_RANK $SKYPILOT_NUM_JOBS $(cat marker.txt) $MODEL $SHARED $SKYPILOT_NODE_IPS" \
    >> "$SCRATCH/ran"
  touch "$SCRATCH/started-$SKYPILOT_JOB_RANK"
  if [ -n "$WAIT" ]; then
    until [ -e "$SCRATCH/release-$SKYPILOT_JOB_RANK" ]; do sleep 0.05; done
  fi
"#;

trait Pools {
    fn cmd(&self, args: &[&str]) -> Command;
    fn ok(&self, args: &[&str]) -> Output;
    fn pools(&self) -> Vec<Value>;
    fn pool(&self, name: &str) -> Value;
    fn wait_pool(&self, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value;
    fn submit(&self, pool: &str, file: &str, n: u32, extra: &[&str]) -> Vec<i64>;
    fn wait_jobs(&self, ids: &[i64]) -> Vec<Value>;
    fn count(&self, file: &str) -> usize;
}

impl Pools for Scratch {
    /// `skyc` on a machine of 8 cpus, 32 GB and no GPU.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = self.skyc(args);
        c.env("SKYC_LOCAL_CPUS", "8")
            .env("SKYC_LOCAL_MEMORY_GB", "32")
            .env("SKYC_LOCAL_GPUS", "0");
        c
    }

    fn ok(&self, args: &[&str]) -> Output {
        let out = self.cmd(args).output().expect("skyc");
        assert!(
            out.status.success(),
            "skyc {args:?}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        out
    }

    fn pools(&self) -> Vec<Value> {
        let out = self.ok(&["pool", "status", "--all", "--json"]);
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    }

    fn pool(&self, name: &str) -> Value {
        self.pools()
            .into_iter()
            .find(|p| p["name"] == name)
            .unwrap_or(Value::Null)
    }

    fn wait_pool(&self, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            let pool = self.pool(name);
            if !pool.is_null() && done(&pool) {
                return pool;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "timed out waiting for {what}; last status: {pool:#}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn submit(&self, pool: &str, file: &str, n: u32, extra: &[&str]) -> Vec<i64> {
        let n = n.to_string();
        let mut args = vec!["run", "--pool", pool, "--num-jobs", &n, "-d", file];
        args.extend_from_slice(extra);
        let out = self.ok(&args);
        text(&out.stdout)
            .lines()
            .map(|l| l.trim().parse().expect("job id"))
            .collect()
    }

    fn wait_jobs(&self, ids: &[i64]) -> Vec<Value> {
        ids.iter().map(|&id| self.wait_finished(id)).collect()
    }

    fn count(&self, file: &str) -> usize {
        self.read(file).lines().count()
    }
}

fn ready_workers(pool: &Value) -> usize {
    workers(pool)
        .iter()
        .filter(|w| w["status"] == "READY")
        .count()
}

fn workers(pool: &Value) -> Vec<Value> {
    pool["workers"].as_array().cloned().unwrap_or_default()
}

/// The `sleep infinity` that holds a worker's node: killing it is the
/// worker's machine going away.
fn hold_of(s: &Scratch, worker_group: i64) -> i32 {
    let marker = format!(
        "SKYC_NODE_DIR={}",
        s.state()
            .join("groups")
            .join(worker_group.to_string())
            .display()
    );
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .find_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let environ = std::fs::read(e.path().join("environ")).ok()?;
            let ours = environ
                .split(|&b| b == 0)
                .any(|v| v.starts_with(marker.as_bytes()));
            (ours && cmdline.starts_with(b"sleep\0infinity")).then_some(pid)
        })
        .expect("the worker's hold")
}

fn applied(name: &str) -> Scratch {
    let s = Scratch::new(name);
    s.write("pool.yaml", POOL);
    s.write("job.yaml", JOB);
    s.ok(&[
        "pool",
        "apply",
        "-p",
        "p",
        "pool.yaml",
        "--network",
        "loopback",
    ]);
    s.wait_pool("p", "2 ready workers", |p| ready_workers(p) == 2);
    s
}

#[test]
fn jobs_run_on_warm_workers_with_their_rank_and_the_pools_environment() {
    let s = applied("pool-basic");
    let ids = s.submit("p", "job.yaml", 6, &[]);
    assert_eq!(ids.len(), 6);
    for job in s.wait_jobs(&ids) {
        assert_eq!(job["status"], "SUCCEEDED", "{job:#}");
        assert_eq!(job["pool"], "p", "{job:#}");
    }
    let ran = s.read("ran");
    let mut ranks: Vec<u32> = ran
        .lines()
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    ranks.sort_unstable();
    assert_eq!(ranks, [0, 1, 2, 3, 4, 5], "{ran}");
    // Each job ran in a worker's directory, after the pool's setup, with
    // the pool's envs under its own.
    for line in ran.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        assert_eq!(
            &fields[1..5],
            ["6", "prepared", "tiny", "from-job"],
            "{line}"
        );
    }
    // Jobs of one cpu share the 2-cpu workers: both workers ran jobs.
    let addresses: std::collections::BTreeSet<&str> =
        ran.lines().map(|l| l.rsplit(' ').next().unwrap()).collect();
    assert_eq!(addresses.len(), 2, "{ran}");
    assert_eq!(s.count("setups"), 2, "each worker set up once");
    assert_eq!(s.read("job-setups"), "", "a job's setup is ignored");
    // The status lists the jobs with their pool and rank.
    let table = text(&s.ok(&["status"]).stdout);
    assert!(table.lines().next().unwrap().contains("POOL"), "{table}");
    assert!(table.contains("rank 5 of 6"), "{table}");
}

/// What the command said of the file: its status and diagnostics (not
/// the lines after them, which name the scratch directory).
fn transcript(o: &Output) -> String {
    let stderr = text(&o.stderr);
    let diagnostics: String = stderr
        .lines()
        .take_while(|l| !l.starts_with("skyc: "))
        .map(|l| format!("{l}\n"))
        .collect();
    format!(
        "exit: {}\n--- stderr\n{diagnostics}",
        o.status.code().unwrap_or(-1)
    )
}

#[test]
fn the_pool_ignores_a_jobs_setup_with_a_warning_and_refuses_what_does_not_fit() {
    let s = applied("pool-fit");
    let out = s
        .cmd(&["run", "--pool", "p", "-d", "job.yaml"])
        .output()
        .unwrap();
    assert!(out.status.success());
    s.write(
        "big.yaml",
        "name: big\nnum_nodes: 2\nresources:\n  cpus: 4\nrun: echo no\n",
    );
    let big = s.cmd(&["run", "--pool", "p", "big.yaml"]).output().unwrap();
    assert_eq!(big.status.code(), Some(1), "{}", text(&big.stderr));
    s.write(
        "group.yaml",
        "name: g\nexecution: parallel\n---\nname: a\nrun: echo a\n---\nname: b\nrun: echo b\n",
    );
    let group = s
        .cmd(&["run", "--pool", "p", "group.yaml"])
        .output()
        .unwrap();
    assert_eq!(group.status.code(), Some(1));
    let not_pool = s
        .cmd(&["pool", "apply", "-p", "q", "job.yaml"])
        .output()
        .unwrap();
    assert_eq!(not_pool.status.code(), Some(1));
    crate::support::snapshots("cli").bind(|| {
        insta::assert_snapshot!("pool_job_ignored", transcript(&out));
        insta::assert_snapshot!("pool_job_misfit", transcript(&big));
        insta::assert_snapshot!("pool_job_group", transcript(&group));
        insta::assert_snapshot!("pool_apply_job_file", transcript(&not_pool));
    });
    let out = s
        .cmd(&["run", "--pool", "nope", "job.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no pool named `nope`"));
}

#[test]
fn a_lost_worker_s_job_runs_again_without_its_budget_and_the_other_is_untouched() {
    let s = applied("pool-lost");
    // Whole-worker jobs: one on each worker.
    s.write(
        "whole.yaml",
        &JOB.replace("resources:\n  cpus: 1\n", "")
            .replace("name: infer", "name: whole"),
    );
    let ids = s.submit("p", "whole.yaml", 2, &["--env", "WAIT=1"]);
    let start = Instant::now();
    while !(s.dir.join("started-0").exists() && s.dir.join("started-1").exists()) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "jobs did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pool = s.pool("p");
    let on = |job: i64| {
        workers(&pool)
            .into_iter()
            .find(|w| w["jobs"].as_array().unwrap().contains(&Value::from(job)))
            .expect("its worker")
    };
    let (lost, kept) = (on(ids[0]), on(ids[1]));
    assert_ne!(lost["group"], kept["group"]);
    let hold = hold_of(&s, lost["group"].as_i64().unwrap());
    assert!(
        Command::new("kill")
            .args(["-KILL", &hold.to_string()])
            .status()
            .unwrap()
            .success()
    );
    // The job goes back to waiting and runs again once a worker is ready.
    let job = s.wait_for(ids[0], Duration::from_secs(60), |j| {
        j["tasks"][0]["restarts"] == 1 && j["status"] == "RUNNING"
    });
    assert_eq!(job["tasks"][0]["restarts_on_errors"], 0, "{job:#}");
    std::fs::write(s.dir.join("release-0"), "").unwrap();
    std::fs::write(s.dir.join("release-1"), "").unwrap();
    let jobs = s.wait_jobs(&ids);
    assert_eq!(jobs[0]["status"], "SUCCEEDED", "{:#}", jobs[0]);
    assert_eq!(jobs[1]["status"], "SUCCEEDED", "{:#}", jobs[1]);
    assert_eq!(jobs[1]["recoveries"], 0, "the other job ran once");
    // Rank 0 ran twice (once per attempt), rank 1 once; the lost worker
    // was made again (a third setup); the other one was not touched.
    let ranks: Vec<String> = s
        .read("ran")
        .lines()
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect();
    assert_eq!(ranks.iter().filter(|r| *r == "0").count(), 2, "{ranks:?}");
    assert_eq!(ranks.iter().filter(|r| *r == "1").count(), 1, "{ranks:?}");
    assert_eq!(s.count("setups"), 3);
    let pool = s.wait_pool("p", "2 ready workers", |p| ready_workers(p) == 2);
    assert!(
        workers(&pool).iter().any(|w| w["group"] == kept["group"]),
        "{pool:#}"
    );
}

#[test]
fn a_failed_setup_is_replaced_and_three_in_a_row_fail_the_pool() {
    let s = Scratch::new("pool-setup");
    // The first setup fails, the others succeed.
    s.write(
        "flaky.yaml",
        &POOL.replace("workers: 2", "workers: 1").replace(
            "setup: |\n",
            "setup: |\n  if [ ! -e \"$SCRATCH/failed-once\" ]; then touch \"$SCRATCH/failed-once\"; exit 3; fi\n",
        ),
    );
    s.ok(&[
        "pool",
        "apply",
        "-p",
        "flaky",
        "flaky.yaml",
        "--network",
        "loopback",
    ]);
    let pool = s.wait_pool("flaky", "a ready worker", |p| ready_workers(p) == 1);
    let states: Vec<String> = workers(&pool)
        .iter()
        .map(|w| w["status"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(states, ["READY"], "live workers: {pool:#}");
    assert_eq!(pool["status"], "READY");
    // Always failing: three workers, each after a longer pause than the
    // one before, then the pool says so and stops.
    s.write(
        "broken.yaml",
        &POOL.replace("workers: 2", "workers: 1").replace(
            "setup: |\n",
            "setup: |\n  date +%s.%N >> \"$SCRATCH/broken-setups\"\n  echo broken; exit 1\n",
        ),
    );
    s.ok(&[
        "pool",
        "apply",
        "-p",
        "broken",
        "broken.yaml",
        "--network",
        "loopback",
    ]);
    let pool = s.wait_pool("broken", "FAILED", |p| p["status"] == "FAILED");
    let error = pool["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with(
            "3 workers in a row failed before they were ready (the last one's setup failed; its log: `skyc logs "
        ),
        "{pool:#}"
    );
    // No fourth worker comes, however long one waits (the next pause
    // would be 4 s).
    std::thread::sleep(Duration::from_secs(5));
    let pool = s.pool("broken");
    assert_eq!(pool["status"], "FAILED");
    let mut times: Vec<f64> = std::fs::read_to_string(s.dir.join("broken-setups"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    times.sort_by(f64::total_cmp);
    assert_eq!(times.len(), 3, "three setups: {times:?}");
    assert!(times[1] - times[0] >= 1.0, "paused 1 s: {times:?}");
    assert!(times[2] - times[1] >= 2.0, "then 2 s: {times:?}");
    assert!(
        workers(&pool).is_empty(),
        "no worker is left or made: {pool:#}"
    );
    assert_eq!(
        s.count("setups"),
        1,
        "only the flaky pool's second worker set up"
    );
}

#[test]
fn a_failed_job_follows_its_own_recovery_and_its_worker_stays() {
    let s = applied("pool-recovery");
    s.write(
        "flaky-job.yaml",
        "name: flaky\nresources:\n  cpus: 1\n  job_recovery:\n    max_restarts_on_errors: 1\nrun: |\n  if [ ! -e \"$SCRATCH/failed\" ]; then touch \"$SCRATCH/failed\"; exit 7; fi\n  echo done >> \"$SCRATCH/ran\"\n",
    );
    let ids = s.submit("p", "flaky-job.yaml", 1, &[]);
    let job = &s.wait_jobs(&ids)[0];
    assert_eq!(job["status"], "SUCCEEDED", "{job:#}");
    assert_eq!(job["tasks"][0]["restarts_on_errors"], 1, "{job:#}");
    assert_eq!(s.count("setups"), 2, "no worker was made again");
}

#[test]
fn applying_again_resizes_in_place_or_replaces_workers_as_they_become_idle() {
    let s = applied("pool-update");
    // Only the size changes: the workers stay, one more is made.
    s.write("three.yaml", &POOL.replace("workers: 2", "workers: 3"));
    s.ok(&[
        "pool",
        "apply",
        "-p",
        "p",
        "three.yaml",
        "--network",
        "loopback",
    ]);
    let pool = s.wait_pool("p", "3 ready workers", |p| ready_workers(p) == 3);
    assert_eq!(s.count("setups"), 3);
    let first: Vec<Value> = workers(&pool).iter().map(|w| w["group"].clone()).collect();
    // `--workers 1`: down to one, idle ones first.
    s.ok(&["pool", "apply", "-p", "p", "--workers", "1"]);
    s.wait_pool("p", "1 worker", |p| workers(p).len() == 1);
    // A running job keeps its worker through a change of setup.
    let ids = s.submit("p", "job.yaml", 1, &["--env", "WAIT=1"]);
    let start = Instant::now();
    while !s.dir.join("started-0").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the job did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let old = s.pool("p");
    let busy = workers(&old)[0]["group"].clone();
    assert!(first.contains(&busy));
    s.write(
        "v2.yaml",
        &POOL
            .replace("workers: 2", "workers: 1")
            .replace("echo prepared", "echo v2"),
    );
    s.ok(&[
        "pool",
        "apply",
        "-p",
        "p",
        "v2.yaml",
        "--network",
        "loopback",
    ]);
    let pool = s.wait_pool("p", "a new worker ready", |p| {
        workers(p)
            .iter()
            .any(|w| w["group"] != busy && w["status"] == "READY")
    });
    let old_worker = workers(&pool)
        .into_iter()
        .find(|w| w["group"] == busy)
        .expect("the busy worker stays while its job runs");
    assert_eq!(old_worker["status"], "SHUTTING_DOWN", "{pool:#}");
    std::fs::write(s.dir.join("release-0"), "").unwrap();
    assert_eq!(s.wait_jobs(&ids)[0]["status"], "SUCCEEDED");
    s.wait_pool("p", "the old worker gone", |p| {
        workers(p).iter().all(|w| w["group"] != busy)
    });
    // New jobs see the new setup.
    let ids = s.submit("p", "job.yaml", 1, &[]);
    s.wait_jobs(&ids);
    assert!(s.read("ran").lines().last().unwrap().contains(" v2 "));
}

#[test]
fn an_autoscaled_pool_grows_with_its_queue_and_shrinks_to_zero() {
    let s = Scratch::new("pool-auto");
    s.write(
        "auto.yaml",
        &POOL.replace(
            "workers: 2",
            "min_workers: 0\n  max_workers: 2\n  queue_length_threshold: 1\n  upscale_delay_seconds: 1\n  downscale_delay_seconds: 1",
        ),
    );
    s.write("job.yaml", JOB);
    s.ok(&[
        "pool",
        "apply",
        "-p",
        "auto",
        "auto.yaml",
        "--network",
        "loopback",
    ]);
    let pool = s.wait_pool("auto", "NO_REPLICA", |p| p["status"] == "NO_REPLICA");
    assert_eq!(pool["target_workers"], 0);
    // Six jobs of one cpu: a first worker at once (two of them run there),
    // four wait, more than the threshold: one more worker after the delay,
    // and no more than max_workers.
    let ids = s.submit("auto", "job.yaml", 6, &["--env", "WAIT=1"]);
    s.wait_pool("auto", "2 ready workers", |p| ready_workers(p) == 2);
    let start = Instant::now();
    while (0..4).any(|r| !s.dir.join(format!("started-{r}")).exists()) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "4 jobs did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(s.count("setups"), 2, "grown to max_workers, not beyond");
    for rank in 0..6 {
        std::fs::write(s.dir.join(format!("release-{rank}")), "").unwrap();
    }
    for job in s.wait_jobs(&ids) {
        assert_eq!(job["status"], "SUCCEEDED", "{job:#}");
    }
    // Nothing waits or runs: down to zero after the delay.
    s.wait_pool("auto", "no worker", |p| {
        p["status"] == "NO_REPLICA" && workers(p).is_empty()
    });
}

#[test]
fn a_supervisor_killed_during_a_batch_loses_nothing_and_runs_nothing_twice() {
    let s = applied("pool-chaos");
    s.write(
        "short.yaml",
        &JOB.replace(
            "  touch \"$SCRATCH/started-$SKYPILOT_JOB_RANK\"\n",
            "  touch \"$SCRATCH/started-$SKYPILOT_JOB_RANK\"; sleep 0.3\n",
        ),
    );
    let ids = s.submit("p", "short.yaml", 20, &[]);
    let mut kills = 0;
    let start = Instant::now();
    while kills < 4 && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(400));
        let pid = std::fs::read_to_string(s.state().join("supervisor.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok());
        if let Some(pid) = pid {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            kills += 1;
        }
        // The next command starts a new supervisor.
        let _ = s.cmd(&["status"]).output();
    }
    assert!(kills >= 2, "the supervisor was killed {kills} times");
    let jobs = s.wait_jobs(&ids);
    let by_status: BTreeMap<String, usize> = jobs.iter().fold(BTreeMap::new(), |mut m, j| {
        *m.entry(j["status"].as_str().unwrap().to_owned())
            .or_default() += 1;
        m
    });
    assert_eq!(by_status.get("SUCCEEDED"), Some(&20), "{by_status:?}");
    let ran = s.read("ran");
    for rank in 0..20 {
        let times = ran
            .lines()
            .filter(|l| l.split(' ').next() == Some(&rank.to_string()))
            .count();
        assert_eq!(times, 1, "rank {rank} ran {times} times: {ran}");
    }
    assert_eq!(s.count("setups"), 2, "no worker was set up twice");
}

#[test]
fn down_cancels_the_pools_jobs_and_ends_its_workers() {
    let s = applied("pool-down");
    let ids = s.submit("p", "job.yaml", 3, &["--env", "WAIT=1"]);
    let start = Instant::now();
    while !s.dir.join("started-0").exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "no job started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // `cancel --pool` cancels the jobs and keeps the pool.
    s.ok(&["cancel", "--pool", "p"]);
    for job in s.wait_jobs(&ids) {
        assert_eq!(job["status"], "CANCELLED", "{job:#}");
    }
    assert_eq!(s.pool("p")["status"], "READY");
    let more = s.submit("p", "job.yaml", 2, &["--env", "WAIT=1"]);
    s.ok(&["pool", "down", "p"]);
    for job in s.wait_jobs(&more) {
        assert_eq!(job["status"], "CANCELLED", "{job:#}");
    }
    let pool = s.wait_pool("p", "TERMINATED", |p| p["status"] == "TERMINATED");
    for w in workers(&pool) {
        assert_eq!(w["status"], "CANCELLED", "{pool:#}");
    }
    // A pool that is down takes no job.
    let out = s.cmd(&["run", "--pool", "p", "job.yaml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn num_jobs_without_a_pool_runs_ranked_jobs_each_on_its_own() {
    let s = Scratch::new("num-jobs");
    s.write(
        "job.yaml",
        "name: ranked\nrun: |\n  echo \"$SKYPILOT_JOB_RANK/$SKYPILOT_NUM_JOBS\" >> \"$SCRATCH/ran\"\n  echo \"I am $SKYPILOT_JOB_RANK\"\n",
    );
    let out = s
        .cmd(&[
            "run",
            "--num-jobs",
            "3",
            "job.yaml",
            "--network",
            "loopback",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut ran: Vec<String> = s.read("ran").lines().map(str::to_owned).collect();
    ran.sort();
    assert_eq!(ran, ["0/3", "1/3", "2/3"]);
    let stdout = text(&out.stdout);
    for rank in 0..3 {
        let line = format!("(rank {rank}) I am {rank}\n");
        assert!(stdout.contains(&line), "{stdout}");
    }
}

/// Tables whose ages, durations and addresses change from run to run,
/// for a snapshot: those masked, and columns one space apart (their
/// widths follow what was masked).
fn steady(tables: &str) -> String {
    let mask = |w: &str| -> String {
        let digits = |t: &str| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit());
        let timed = w.len() > 1 && w.ends_with(['s', 'm', 'h', 'd']) && digits(&w[..w.len() - 1]);
        let address = w.split('.').count() == 4 && w.split('.').all(digits);
        if timed {
            "T".into()
        } else if address {
            "IP".into()
        } else if digits(w) {
            "N".into()
        } else if w == "sec" {
            "secs".into()
        } else {
            w.to_owned()
        }
    };
    tables
        .lines()
        .map(|l| l.split_whitespace().map(mask).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn what_waits_for_the_machine_says_for_what_and_who_holds_it() {
    let s = Scratch::new("pool-waiting");
    s.write(
        "pb.yaml",
        "name: pb\npool:\n  workers: 4\nresources:\n  cpus: 1\nsetup: echo ready\n",
    );
    s.write(
        "g.yaml",
        "name: g\nresources:\n  cpus: 1\nrun: echo started; sleep 2\n",
    );
    // A machine of 2 cpus: two workers fit, two wait, and so does a group.
    let two = |args: &[&str]| {
        let out = s
            .cmd(args)
            .env("SKYC_LOCAL_CPUS", "2")
            .output()
            .expect("skyc");
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    two(&[
        "pool",
        "apply",
        "-p",
        "pb",
        "pb.yaml",
        "--network",
        "loopback",
    ]);
    let pool = s.wait_pool("pb", "two ready, two waiting", |p| {
        ready_workers(p) == 2
            && workers(p)
                .iter()
                .filter(|w| w["waiting"].is_object())
                .count()
                == 2
    });
    let why = "waiting for 1 cpu: this machine has 2, held by pool workers pb-1, pb-2";
    for w in workers(&pool).iter().filter(|w| w["status"] == "PENDING") {
        assert_eq!(w["waiting"]["why"], why, "{pool:#}");
        assert!(w["waiting"]["since_ms"].is_i64(), "{pool:#}");
    }
    let id: i64 = two(&["run", "-d", "g.yaml", "--network", "loopback"])
        .trim()
        .parse()
        .expect("an id");
    let start = Instant::now();
    let group = loop {
        let g = s.try_status(id);
        if g["tasks"][0]["waiting"].is_object() {
            break g;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{g:#}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(group["tasks"][0]["waiting"]["why"], why, "{group:#}");
    let tables = format!(
        "$ skyc pool status pb\n{}\n$ skyc status {id}\n{}",
        two(&["pool", "status", "pb"]),
        two(&["status", &id.to_string()])
            .lines()
            .take(3)
            .collect::<Vec<_>>()
            .join("\n")
    );
    crate::support::snapshots("cli").bind(|| {
        insta::assert_snapshot!("waiting-for-the-machine", steady(&tables));
    });
    // The pool goes: the group runs, and no longer says it waits.
    s.ok(&["pool", "down", "pb"]);
    let running = s.wait_for(id, Duration::from_secs(30), |g| {
        g["tasks"][0]["status"] == "RUNNING"
    });
    assert!(running["tasks"][0]["waiting"].is_null(), "{running:#}");
    let g = s.wait_finished(id);
    assert_eq!(g["status"], "SUCCEEDED", "{g:#}");
    // `skyc logs` says why it waited, once, before what the task wrote.
    let logs = two(&["logs", &id.to_string(), "--no-follow"]);
    let lines: Vec<&str> = logs.lines().collect();
    assert_eq!(
        lines.first().copied(),
        Some(&*format!("(skyc) g: {why}")),
        "{logs}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains("waiting for")).count(),
        1,
        "{logs}"
    );
    assert!(lines.contains(&"(g-0) started"), "{logs}");
}
