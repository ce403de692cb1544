//! Pools on Slurm: `skyc build POOLFILE --target slurm` (the worker's
//! batch script, snapshotted and shellchecked), and on the real cluster
//! scripts/test starts (skipped loudly without one, serialised with the
//! other Slurm tests): workers as batch jobs holding their allocation
//! after setup, jobs as steps of it, a worker cancelled out of band
//! or whose node fails replaced, GPUs packed as the pool placed them,
//! `cancel --pool` and `pool down` leaving nothing in squeue, a
//! supervisor killed mid-batch starting nothing twice.

use crate::slurm::{have, tmp_dir};
use crate::slurm_e2e::{cluster, cluster_dir, cluster_script, wait_idle_nodes};
use crate::support::scratch::{Scratch, text};
use crate::support::{root, skyc, snapshots};
use serde_json::Value;
use skyc_targets::slurm::{LAUNCH, SUPERVISOR_MARKER};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Compute nodes see the target directory (the cluster's nodes are this
/// machine's namespaces): the test's files and state live there.
fn scratch(name: &str) -> Scratch {
    Scratch::under(
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        &format!("slurm-pool-{name}"),
    )
}

/// Two workers of 2 cpus each; the setup counts itself and leaves a
/// marker in the worker's directory.
const POOL: &str = r#"name: workers
pool:
  workers: 2
resources:
  cpus: 2
envs:
  MODEL: tiny
  SHARED: from-pool
  QUOTED: 'a''b $(touch "$SCRATCH/pwned") `touch "$SCRATCH/pwned"` "c" \n'
setup: |
  echo "setup $(hostname) $(pwd)" >> "$SCRATCH/setups"
  echo prepared > marker.txt
"#;

/// A job: what it saw and where; it leaves a process behind (which must
/// not outlive it), then waits for its release file (if `WAIT` is set)
/// and ends.
const JOB: &str = r#"name: infer
resources:
  cpus: 1
envs:
  SHARED: from-job
run: |
  echo "$SKYPILOT_JOB_RANK $SKYPILOT_NUM_JOBS $(cat marker.txt) $MODEL $SHARED $(hostname) $SKYPILOT_NODE_IPS" \
    >> "$SCRATCH/ran"
  printf '%s' "$QUOTED" > "$SCRATCH/quoted-$SKYPILOT_JOB_RANK"
  touch "$SCRATCH/started-$SKYPILOT_JOB_RANK"
  (exec -a skyc-pool-leak sleep 300) &
  if [ -n "$WAIT" ]; then
    until [ -e "$SCRATCH/release-$SKYPILOT_JOB_RANK" ]; do sleep 0.1; done
  fi
"#;

fn ok(s: &Scratch, args: &[&str]) -> Output {
    let out = s.skyc(args).output().expect("skyc");
    assert!(
        out.status.success(),
        "skyc {args:?}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

fn pool(s: &Scratch, name: &str) -> Value {
    let out = ok(s, &["pool", "status", "--all", "--json"]);
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .find(|p| p["name"] == name)
        .unwrap_or(Value::Null)
}

fn wait_pool(s: &Scratch, name: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let p = pool(s, name);
        if !p.is_null() && done(&p) {
            return p;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "timed out waiting for {what}; last status: {p:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn workers(pool: &Value) -> Vec<Value> {
    pool["workers"].as_array().cloned().unwrap_or_default()
}

fn ready_workers(pool: &Value) -> usize {
    workers(pool)
        .iter()
        .filter(|w| w["status"] == "READY")
        .count()
}

/// A scratch directory with the pool `p` applied on Slurm and ready.
fn applied(name: &str) -> Scratch {
    let s = scratch(name);
    s.write("pool.yaml", POOL);
    s.write("job.yaml", JOB);
    ok(
        &s,
        &["pool", "apply", "-p", "p", "pool.yaml", "--target", "slurm"],
    );
    wait_pool(&s, "p", "2 ready workers", |p| ready_workers(p) == 2);
    s
}

fn submit(s: &Scratch, file: &str, n: u32, extra: &[&str]) -> Vec<i64> {
    let n = n.to_string();
    let mut args = vec!["run", "--pool", "p", "--num-jobs", &n, "-d", file];
    args.extend_from_slice(extra);
    text(&ok(s, &args).stdout)
        .lines()
        .map(|l| l.trim().parse().expect("job id"))
        .collect()
}

fn wait_jobs(s: &Scratch, ids: &[i64]) -> Vec<Value> {
    ids.iter()
        .map(|&id| {
            s.wait_for(id, Duration::from_secs(90), |j| {
                !j["finished_at_ms"].is_null()
            })
        })
        .collect()
}

fn wait_file(s: &Scratch, name: &str) {
    let start = Instant::now();
    while !s.dir.join(name).exists() {
        assert!(start.elapsed() < Duration::from_secs(60), "no {name}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every pending or running Slurm job and step, `ID|NAME`.
fn squeue(steps: bool) -> Vec<String> {
    let mut args = vec!["-h", "-o", "%i|%50j"];
    if steps {
        args.push("-s");
    }
    let out = Command::new("squeue").args(&args).output().expect("squeue");
    text(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(""))
        .collect()
}

/// The Slurm job (a worker's) whose step runs job `job`'s attempt.
fn worker_job_of(job: i64) -> Option<String> {
    let name = format!("|skyc-j{job}-");
    squeue(true)
        .into_iter()
        .find(|l| l.contains(&name))
        .and_then(|l| l.split('.').next().map(str::to_owned))
}

/// The Slurm jobs of the pool's workers still in squeue (named after the
/// pool file's group).
fn worker_jobs() -> Vec<String> {
    squeue(false)
        .into_iter()
        .filter(|l| l.ends_with("|workers"))
        .map(|l| l.split('|').next().unwrap().to_owned())
        .collect()
}

#[test]
fn build_prints_the_workers_batch_script() {
    let settings = snapshots("slurm");
    settings.bind(|| {
        let out = skyc()
            .args(["build", "--target", "slurm", "tests/fixtures/cli/pool.yaml"])
            .current_dir(root())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let script = text(&out.stdout);
        assert!(script.contains("#SBATCH --no-requeue"), "{script}");
        assert!(script.contains(SUPERVISOR_MARKER), "the same lifecycle");
        let group = &script[..script.find(SUPERVISOR_MARKER).unwrap()];
        insta::assert_snapshot!(
            "pool_worker",
            format!(
                "--- stderr\n{}--- the worker's part\n{group}",
                text(&out.stderr)
            )
        );
    });
}

#[test]
fn the_workers_script_and_the_launcher_are_shellcheck_clean() {
    if !have("shellcheck") {
        return;
    }
    let dir = tmp_dir("pool-shellcheck");
    let pool = dir.join("pool.yaml");
    std::fs::write(
        &pool,
        POOL.replace("  MODEL: tiny", "  MODEL: \"it's $(rm -rf /) `x`\""),
    )
    .unwrap();
    let script = dir.join("worker.sh");
    let out = skyc()
        .args(["build", "--target", "slurm", "--out"])
        .arg(&script)
        .arg(&pool)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let launch = dir.join("launch.sh");
    std::fs::write(&launch, LAUNCH).unwrap();
    for path in [&script, &launch] {
        let out = Command::new("shellcheck")
            .args(["-s", "bash"])
            .arg(path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "shellcheck {}:\n{}",
            path.display(),
            text(&out.stdout)
        );
    }
}

#[test]
fn jobs_run_once_each_on_warm_workers_with_the_setups_environment_and_their_rank() {
    let Some(_cluster) = cluster() else { return };
    let s = applied("ranked");
    assert_eq!(s.read("setups").lines().count(), 2, "one setup per worker");
    let start = Instant::now();
    let ids = submit(&s, "job.yaml", 4, &[]);
    let jobs = wait_jobs(&s, &ids);
    let took = start.elapsed();
    eprintln!("4 jobs on 2 warm Slurm workers: {took:?} from submission to the last end");
    for job in &jobs {
        assert_eq!(job["status"], "SUCCEEDED", "{job:#}");
        assert_eq!(job["recoveries"], 0, "{job:#}");
    }
    let ran = s.read("ran");
    let mut ranks: Vec<&str> = ran.lines().map(|l| l.split(' ').next().unwrap()).collect();
    ranks.sort_unstable();
    assert_eq!(ranks, ["0", "1", "2", "3"], "each rank once: {ran}");
    for line in ran.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        // Ranked among 4, in the worker's directory (the setup's marker),
        // with the pool's envs and the job's on top, on one of the
        // worker's nodes.
        assert_eq!(&f[1..5], ["4", "prepared", "tiny", "from-job"], "{line}");
        assert!(f[5].starts_with('n'), "{line}");
        assert!(f[6].starts_with("127.0.0."), "{line}");
    }
    // Packed by resources: two 1-cpu jobs per 2-cpu worker, so both
    // workers ran jobs, and no worker ran its setup again.
    let hosts: std::collections::BTreeSet<&str> =
        ran.lines().map(|l| l.split(' ').nth(5).unwrap()).collect();
    assert_eq!(hosts.len(), 2, "{ran}");
    assert_eq!(s.read("setups").lines().count(), 2);
    // A value full of shell arrives as written, and runs nothing.
    assert_eq!(
        s.read("quoted-0"),
        r#"a'b $(touch "$SCRATCH/pwned") `touch "$SCRATCH/pwned"` "c" \n"#
    );
    assert!(!s.dir.join("pwned").exists());
    // Nothing a job started outlives it.
    let start = Instant::now();
    while !leaked().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "{:?}", leaked());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Processes left by the jobs (`skyc-pool-leak`), anywhere on the
/// machine (the cluster's nodes are its namespaces).
fn leaked() -> Vec<String> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).next() == Some(b"skyc-pool-leak"))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn a_worker_cancelled_out_of_band_is_replaced_and_its_job_runs_again_elsewhere() {
    let Some(_cluster) = cluster() else { return };
    let s = applied("lost");
    // Whole-worker jobs: one on each worker.
    s.write(
        "whole.yaml",
        &JOB.replace("resources:\n  cpus: 1\n", "")
            .replace("name: infer", "name: whole"),
    );
    let ids = submit(&s, "whole.yaml", 2, &["--env", "WAIT=1"]);
    wait_file(&s, "started-0");
    wait_file(&s, "started-1");
    let lost = worker_job_of(ids[0]).expect("job 0's worker");
    let kept = worker_job_of(ids[1]).expect("job 1's worker");
    assert_ne!(lost, kept);
    assert!(
        Command::new("scancel")
            .arg(&lost)
            .status()
            .unwrap()
            .success()
    );
    // The job goes back to waiting, then runs again on the replacement.
    let job = s.wait_for(ids[0], Duration::from_secs(90), |j| {
        j["tasks"][0]["restarts"] == 1 && j["status"] == "RUNNING"
    });
    assert_eq!(job["tasks"][0]["restarts_on_errors"], 0, "{job:#}");
    // RUNNING once launched: its step is in squeue a moment later.
    let again = (0..100)
        .find_map(|_| {
            worker_job_of(ids[0]).or_else(|| {
                std::thread::sleep(Duration::from_millis(100));
                None
            })
        })
        .expect("job 0's new worker");
    assert!(again != lost && again != kept, "{again}");
    std::fs::write(s.dir.join("release-0"), "").unwrap();
    std::fs::write(s.dir.join("release-1"), "").unwrap();
    let jobs = wait_jobs(&s, &ids);
    assert_eq!(jobs[0]["status"], "SUCCEEDED", "{:#}", jobs[0]);
    assert_eq!(jobs[1]["status"], "SUCCEEDED", "{:#}", jobs[1]);
    assert_eq!(jobs[1]["recoveries"], 0, "the other job ran once");
    let ranks: Vec<String> = s
        .read("ran")
        .lines()
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect();
    assert_eq!(ranks.iter().filter(|r| *r == "0").count(), 2, "{ranks:?}");
    assert_eq!(ranks.iter().filter(|r| *r == "1").count(), 1, "{ranks:?}");
    // The lost worker was made again (a third setup); the other one runs
    // on, untouched.
    assert_eq!(s.read("setups").lines().count(), 3);
    wait_pool(&s, "p", "2 ready workers", |p| ready_workers(p) == 2);
    let jobs = worker_jobs();
    assert!(jobs.contains(&kept) && !jobs.contains(&lost), "{jobs:?}");
    // Made again as its group's next attempt, whose job wrote in its own
    // directory (`a1/`); the first attempt's status is kept in `a0/`, and
    // its log goes on with the restart, where `skyc logs` reads it.
    let groups = s.state().join("groups");
    let group = std::fs::read_dir(&groups)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|g| std::fs::read_to_string(g.join("jobid.0")).is_ok_and(|j| j.trim() == lost))
        .expect("the lost worker's group");
    let status = std::fs::read_to_string(group.join("a0/status")).unwrap();
    assert!(status.contains(&format!("job START {lost} ")), "{status}");
    let again = std::fs::read_to_string(group.join("jobid.1")).unwrap();
    let status = std::fs::read_to_string(group.join("a1/status")).unwrap();
    assert!(status.contains(&format!("job START {again} ")), "{status}");
    let gid = group.file_name().unwrap().to_string_lossy().into_owned();
    let out = s.skyc(&["logs", &gid, "--no-follow"]).output().unwrap();
    assert!(
        text(&out.stdout).contains("skyc: restarting workers (attempt 1)"),
        "{}",
        text(&out.stdout)
    );
    // Every setup ran in its worker's group directory, the lost one's
    // twice.
    let setups = s.read("setups");
    let dirs: Vec<&str> = setups.lines().filter_map(|l| l.split(' ').nth(2)).collect();
    assert!(
        dirs.iter().all(|d| Path::new(d).parent() == Some(&groups)),
        "{setups}"
    );
    let here = group.to_string_lossy();
    assert_eq!(dirs.iter().filter(|d| **d == here).count(), 2, "{setups}");
}

#[test]
fn cancel_pool_and_pool_down_leave_nothing_in_squeue() {
    let Some(_cluster) = cluster() else { return };
    let s = applied("down");
    let ids = submit(&s, "job.yaml", 3, &["--env", "WAIT=1"]);
    wait_file(&s, "started-0");
    ok(&s, &["cancel", "--pool", "p"]);
    for job in wait_jobs(&s, &ids) {
        assert_eq!(job["status"], "CANCELLED", "{job:#}");
    }
    // The jobs' steps are gone; the workers stay.
    let start = Instant::now();
    while squeue(true).iter().any(|l| l.contains("|skyc-j")) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            squeue(true)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(pool(&s, "p")["status"], "READY");
    assert_eq!(worker_jobs().len(), 2);
    // Resized without naming the target (the pool's is Slurm): one
    // worker's job goes, and it comes back.
    ok(&s, &["pool", "apply", "-p", "p", "--workers", "1"]);
    let start = Instant::now();
    while worker_jobs().len() != 1 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            worker_jobs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    ok(&s, &["pool", "apply", "-p", "p", "--workers", "2"]);
    wait_pool(&s, "p", "2 ready workers", |p| ready_workers(p) == 2);
    let more = submit(&s, "job.yaml", 2, &["--env", "WAIT=1"]);
    wait_file(&s, "started-1");
    ok(&s, &["pool", "down", "p"]);
    for job in wait_jobs(&s, &more) {
        assert_eq!(job["status"], "CANCELLED", "{job:#}");
    }
    let p = wait_pool(&s, "p", "TERMINATED", |p| p["status"] == "TERMINATED");
    for w in workers(&p) {
        assert_eq!(w["status"], "CANCELLED", "{p:#}");
    }
    // Nothing of the pool is left: no worker's job, no step of one.
    let start = Instant::now();
    let ours = |l: &String| l.ends_with("|workers") || l.contains("|skyc-j");
    while squeue(false).iter().any(ours) || squeue(true).iter().any(ours) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "left in squeue: {:?} {:?}",
            squeue(false),
            squeue(true)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_supervisor_killed_mid_batch_starts_no_job_twice() {
    let Some(_cluster) = cluster() else { return };
    let s = applied("chaos");
    s.write(
        "short.yaml",
        &JOB.replace(
            "  touch \"$SCRATCH/started-$SKYPILOT_JOB_RANK\"\n",
            "  touch \"$SCRATCH/started-$SKYPILOT_JOB_RANK\"; sleep 1\n",
        ),
    );
    let ids = submit(&s, "short.yaml", 10, &[]);
    let mut kills = 0;
    let start = Instant::now();
    while kills < 3 && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(700));
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
        let _ = s.skyc(&["status"]).output();
    }
    assert!(kills >= 2, "the supervisor was killed {kills} times");
    for job in wait_jobs(&s, &ids) {
        assert_eq!(job["status"], "SUCCEEDED", "{job:#}");
    }
    let ran = s.read("ran");
    for rank in 0..10 {
        let times = ran
            .lines()
            .filter(|l| l.split(' ').next() == Some(&rank.to_string()))
            .count();
        assert_eq!(times, 1, "rank {rank} ran {times} times: {ran}");
    }
    assert_eq!(
        s.read("setups").lines().count(),
        2,
        "no worker set up twice"
    );
    assert_eq!(worker_jobs().len(), 2, "no worker submitted twice");
}

#[test]
fn a_worker_whose_node_fails_is_replaced_and_its_job_runs_again() {
    let Some(_cluster) = cluster() else { return };
    let Some(dir) = cluster_dir() else {
        eprintln!("!!! SKIPPED: SKYC_SLURM_DIR unset (crash-node needs the cluster's directory)");
        return;
    };
    let s = applied("node");
    s.write(
        "whole.yaml",
        &JOB.replace("resources:\n  cpus: 1\n", "")
            .replace("name: infer", "name: whole"),
    );
    let ids = submit(&s, "whole.yaml", 1, &["--env", "WAIT=1"]);
    wait_file(&s, "started-0");
    let node = s.read("ran").split(' ').nth(5).unwrap().to_owned();
    let dir = dir.to_string_lossy().into_owned();
    let crashed = Instant::now();
    cluster_script(&["crash-node", &dir, &node]);
    let job = s.wait_for(ids[0], Duration::from_secs(90), |j| {
        j["tasks"][0]["restarts"] == 1 && j["status"] == "RUNNING"
    });
    eprintln!(
        "node crash -> the pool's job running again after {:.1} s",
        crashed.elapsed().as_secs_f64()
    );
    cluster_script(&["revive-node", &dir, &node]);
    assert_eq!(job["tasks"][0]["restarts_on_errors"], 0, "{job:#}");
    std::fs::write(s.dir.join("release-0"), "").unwrap();
    let jobs = wait_jobs(&s, &ids);
    assert_eq!(jobs[0]["status"], "SUCCEEDED", "{:#}", jobs[0]);
    let ran = s.read("ran");
    let again = ran.lines().nth(1).and_then(|l| l.split(' ').nth(5));
    assert!(again.is_some_and(|n| n != node), "{ran}");
    wait_pool(&s, "p", "2 ready workers", |p| ready_workers(p) == 2);
    ok(&s, &["pool", "down", "p"]);
    wait_pool(&s, "p", "TERMINATED", |p| p["status"] == "TERMINATED");
    wait_idle_nodes(8);
}

#[test]
fn jobs_use_the_gpus_the_pool_placed_them_on() {
    let Some(_cluster) = cluster() else { return };
    let s = scratch("gpus");
    s.write(
        "pool.yaml",
        &POOL
            .replace("workers: 2", "workers: 1")
            .replace("  cpus: 2\n", "  cpus: 2\n  accelerators: A100:2\n"),
    );
    s.write(
        "job.yaml",
        &JOB.replace("  cpus: 1\n", "  cpus: 1\n  accelerators: A100:1\n")
            .replace(
                "$SKYPILOT_NODE_IPS",
                "$SKYPILOT_NUM_GPUS_PER_NODE gpu=$CUDA_VISIBLE_DEVICES",
            ),
    );
    ok(
        &s,
        &["pool", "apply", "-p", "p", "pool.yaml", "--target", "slurm"],
    );
    wait_pool(&s, "p", "a ready worker", |p| ready_workers(p) == 1);
    // Both at once on the one worker: one GPU each.
    let ids = submit(&s, "job.yaml", 2, &["--env", "WAIT=1"]);
    wait_file(&s, "started-0");
    wait_file(&s, "started-1");
    std::fs::write(s.dir.join("release-0"), "").unwrap();
    std::fs::write(s.dir.join("release-1"), "").unwrap();
    for job in wait_jobs(&s, &ids) {
        assert_eq!(job["status"], "SUCCEEDED", "{job:#}");
    }
    let ran = s.read("ran");
    let mut gpus: Vec<&str> = ran.lines().filter_map(|l| l.split(' ').nth(7)).collect();
    gpus.sort_unstable();
    assert_eq!(gpus, ["gpu=0", "gpu=1"], "{ran}");
    assert!(
        ran.lines().all(|l| l.split(' ').nth(6) == Some("1")),
        "{ran}"
    );
}
