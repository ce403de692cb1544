//! A pool's members against a fake Slurm (sbatch, squeue, scancel and
//! srun as small bash scripts on the plans' `PATH`): a worker submitted
//! once across a crash, ready from its nodes' files, and its loss taking
//! its jobs with it. What a real cluster does is `tests/slurm_pools.rs`'s.

use crate::backend::{Adoption, Backend as _, Report, Role};
use crate::policy::{Engine, Event, Execution, GroupSpec, TaskSpec};
use crate::pool::{JobSpec, Placement};
use crate::slurm::pool::{JobPlan, TaskRun, WorkerPlan};
use crate::slurm::{Plan, SlurmBackend};
use crate::store::{Store, now_ms};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

/// `sbatch` appends `ID|COMMENT|SKYC_OUT` to `sbatch.log` and `ID|COMMENT`
/// to `queue` (then fails with `sbatch.fail`'s text, when there is one); `squeue -j ID` answers `state.ID` (else PENDING) for a job
/// in `queue`, `squeue -s` the file `steps`, `squeue` alone the queue;
/// `scancel` appends its arguments to `scancel.log`; `srun` appends its
/// arguments to `srun.log`, then runs as a step does while `srun.block`
/// is there (a minute at most), then waits a second (then fails with `srun.fail`'s text, when
/// there is one).
const FAKES: [(&str, &str); 4] = [
    (
        "sbatch",
        r#"#!/bin/bash
d=${0%/*} comment=""
for a; do
    case $a in
    --comment=*) comment=${a#*=} ;;
    esac
done
n=$(cat "$d/next")
echo $((n + 1)) >"$d/next"
echo "$n|$comment|$SKYC_OUT" >>"$d/sbatch.log"
echo "$n|$comment" >>"$d/queue"
if [ -f "$d/sbatch.fail" ]; then
    cat "$d/sbatch.fail" >&2
    exit 1
fi
echo "$n"
"#,
    ),
    (
        "squeue",
        r#"#!/bin/bash
d=${0%/*} job="" steps=""
while [ $# -gt 0 ]; do
    case $1 in
    -j) job=$2 ;;
    -s) steps=1 ;;
    esac
    shift
done
if [ -n "$steps" ]; then
    cat "$d/steps" 2>/dev/null
    exit 0
elif [ -z "$job" ]; then
    cat "$d/queue"
elif grep -qs "^$job|" "$d/queue"; then
    echo "$job|$job|$(cat "$d/state.$job" 2>/dev/null || echo PENDING)|None|"
else
    echo "slurm_load_jobs error: Invalid job id specified" >&2
    exit 1
fi
"#,
    ),
    (
        "scancel",
        "#!/bin/bash\necho \"$*\" >>\"${0%/*}/scancel.log\"\n",
    ),
    (
        "srun",
        r#"#!/bin/bash
d=${0%/*}
echo "$*" >>"$d/srun.log"
for _ in $(seq 1200); do
    [ -f "$d/srun.block" ] || break
    sleep 0.05
done
sleep 1
if [ -f "$d/srun.fail" ]; then
    cat "$d/srun.fail" >&2
    exit 2
fi
"#,
    ),
];

struct Fake {
    dir: PathBuf,
    /// The plans' token: each test's own, so that no test's sbatch looks
    /// like another's to its lookup.
    token: String,
    state: PathBuf,
    store: Store,
    backend: SlurmBackend,
    env: Vec<(String, String)>,
}

fn spec(name: &str) -> GroupSpec {
    GroupSpec {
        tasks: vec![TaskSpec {
            name: name.into(),
            primary: true,
            num_nodes: 1,
            termination_delay: Duration::ZERO,
            max_restarts_on_errors: 0,
            recover_on_exit_codes: Vec::new(),
        }],
        grace: Duration::from_secs(1),
        execution: Execution::Parallel,
    }
}

impl Fake {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("skyc-fake-pool-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let bin = dir.join("bin");
        fs::create_dir_all(&bin).unwrap();
        for (name, text) in FAKES {
            let path = bin.join(name);
            fs::write(&path, text).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        fs::write(bin.join("next"), "101").unwrap();
        fs::write(bin.join("queue"), "").unwrap();
        let state = dir.join("state");
        fs::create_dir_all(&state).unwrap();
        Self {
            store: Store::open(&state).unwrap(),
            backend: SlurmBackend::new(&state),
            env: vec![("PATH".into(), format!("{}:/usr/bin:/bin", bin.display()))],
            state,
            dir,
            token: name.to_owned(),
        }
    }

    fn plan(&self, name: &str) -> Plan {
        Plan {
            group: name.into(),
            spec: spec(name),
            num_nodes: vec![1],
            script: "#!/bin/bash\n# a worker\n".into(),
            steps: Vec::new(),
            out_dir: None,
            env: self.env.clone(),
            token: self.token.clone(),
        }
    }

    fn worker(&self) -> Member {
        let plan = WorkerPlan {
            plan: self.plan("w"),
            task: TaskRun {
                name: "w".into(),
                envs: vec![("FROM_POOL".into(), "1".into())],
                ..TaskRun::default()
            },
            files: Vec::new(),
            volumes: Vec::new(),
            buckets: Vec::new(),
            files_at: None,
        };
        Member {
            role: Role::Worker,
            plan: serde_json::to_string(&plan).unwrap(),
        }
    }

    fn job(&self) -> Member {
        let mut plan = self.plan("j");
        plan.script = String::new();
        let plan = JobPlan {
            plan,
            pool_job: Some(JobSpec {
                room: None,
                rank: 0,
                num_jobs: 1,
            }),
            task: TaskRun {
                name: "j".into(),
                run: Some("true".into()),
                ..TaskRun::default()
            },
        };
        Member {
            role: Role::Job,
            plan: serde_json::to_string(&plan).unwrap(),
        }
    }

    fn adopt(&mut self, gid: i64, member: &Member, engine: &Engine, fresh: bool) {
        self.backend
            .adopt(
                gid,
                &Adoption {
                    plan: &member.plan,
                    role: member.role,
                    name: "member",
                    engine,
                    fresh,
                    job: None,
                    kept: None,
                    marker: None,
                    cancel_requested: false,
                    store: &self.store,
                },
            )
            .unwrap();
    }

    /// Drains until `done` holds for a report (a few seconds at most);
    /// every report on the way.
    fn drain_until(&mut self, done: impl Fn(&(i64, Report)) -> bool) -> Vec<(i64, Report)> {
        let mut all = Vec::new();
        for _ in 0..100 {
            let reports = self.backend.drain(now_ms());
            let stop = reports.iter().any(&done);
            all.extend(reports);
            if stop {
                return all;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("not seen in {all:?}");
    }

    fn bin(&self, file: &str) -> String {
        fs::read_to_string(self.dir.join("bin").join(file)).unwrap_or_default()
    }

    fn group(&self, gid: i64) -> PathBuf {
        crate::paths::group_dir(&self.state, gid)
    }
}

/// A pool member's plan, with its role as the store would say it.
struct Member {
    role: Role,
    plan: String,
}

impl Drop for Fake {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

fn event(r: &(i64, Report)) -> Option<(i64, &Event)> {
    match &r.1 {
        Report::Event { event, .. } => Some((r.0, event)),
        _ => None,
    }
}

#[test]
fn a_worker_found_submitting_after_a_crash_is_looked_up_not_submitted_again() {
    let mut f = Fake::new("lookup");
    // The dead supervisor's sbatch went through; its id was not recorded.
    fs::write(f.dir.join("bin/queue"), "77|lookup-w1-a0\n").unwrap();
    fs::create_dir_all(f.group(1)).unwrap();
    fs::write(f.group(1).join("submitting.0"), "").unwrap();
    let mut engine = Engine::new(spec("w"));
    engine.start();
    let worker = f.worker();
    f.adopt(1, &worker, &engine, false);
    let recorded = f.group(1).join("jobid.0");
    for _ in 0..100 {
        f.backend.drain(now_ms());
        if recorded.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        fs::read_to_string(f.group(1).join("jobid.0")).unwrap(),
        "77"
    );
    assert_eq!(f.bin("sbatch.log"), "", "not submitted again");
}

#[test]
fn a_worker_is_ready_from_its_nodes_files_and_its_end_loses_its_jobs() {
    let mut f = Fake::new("lost");
    let mut engine = Engine::new(spec("w"));
    let worker = f.worker();
    f.adopt(1, &worker, &engine, true);
    let actions = engine.start();
    f.backend.execute(1, &engine, &actions);
    // Submitted once, tagged, from the worker's directory.
    f.drain_until(|r| matches!(event(r), Some((1, Event::TaskQueued { .. }))));
    let out = f.group(1).canonicalize().unwrap().join("a0");
    assert_eq!(
        f.bin("sbatch.log"),
        format!("101|lost-w1-a0|{}\n", out.display())
    );
    // Running, its node past setup: ready.
    fs::write(f.dir.join("bin/state.101"), "RUNNING").unwrap();
    let run = out.join(".skyc/r0");
    fs::create_dir_all(&run).unwrap();
    fs::write(run.join("hosts"), "10.0.0.7 w-0.w\n").unwrap();
    fs::write(run.join("ready.0"), "").unwrap();
    f.drain_until(|r| {
        matches!(
            r,
            (
                1,
                Report::Ready {
                    task: 0,
                    attempt: 0
                }
            )
        )
    });
    // A job placed on it runs as a step of job 101, which goes on (its
    // srun does not end) until something ends it.
    fs::write(f.dir.join("bin/srun.block"), "").unwrap();
    let mut job_engine = Engine::new(spec("j"));
    let job = f.job();
    f.adopt(2, &job, &job_engine, true);
    let actions = job_engine.start();
    f.backend.execute(2, &job_engine, &actions);
    f.backend.place(2, 0, 1, &Placement::default());
    let reports = f.drain_until(|r| matches!(event(r), Some((2, Event::TaskStarted { .. }))));
    assert!(
        reports
            .iter()
            .any(|r| matches!(&r.1, Report::Node(n) if n.ip == "10.0.0.7")),
        "{reports:?}"
    );
    let adir = f.group(2).canonicalize().unwrap().join(".skyc/a0");
    let run_script = fs::read_to_string(adir.join("0.run")).unwrap();
    assert_eq!(run_script, "export FROM_POOL=1\ntrue\n");
    assert!(adir.join("started").exists());
    // Placed again (a crash): not launched twice.
    f.backend.place(2, 0, 1, &Placement::default());
    // The worker's job is cancelled from outside: the worker's node and
    // the job's are lost.
    fs::write(f.dir.join("bin/state.101"), "CANCELLED").unwrap();
    let reports = f.drain_until(|r| matches!(event(r), Some((1, Event::NodeLost { .. }))));
    assert!(
        reports
            .iter()
            .any(|r| matches!(event(r), Some((2, Event::NodeLost { .. })))),
        "{reports:?}"
    );
    let started = reports
        .iter()
        .filter(|r| matches!(event(r), Some((2, Event::TaskStarted { .. }))))
        .count();
    assert_eq!(started, 0, "no second launch: {reports:?}");
    // The step still runs: the job was lost with its worker, not by its
    // srun's end; and srun ran once.
    assert_eq!(
        f.bin("srun.log").lines().count(),
        1,
        "{}",
        f.bin("srun.log")
    );
    let log = fs::read_to_string(crate::paths::log(&f.group(2), "j", 0)).unwrap_or_default();
    assert!(log.contains("skyc: its worker was lost"), "{log:?}");
    fs::remove_file(f.dir.join("bin/srun.block")).unwrap();
}

#[test]
fn a_job_placed_on_a_worker_not_ready_is_lost_not_started() {
    let mut f = Fake::new("unready");
    let worker_engine = Engine::new(spec("w"));
    let worker = f.worker();
    f.adopt(1, &worker, &worker_engine, true);
    let mut job_engine = Engine::new(spec("j"));
    let job = f.job();
    f.adopt(2, &job, &job_engine, true);
    let actions = job_engine.start();
    f.backend.execute(2, &job_engine, &actions);
    f.backend.place(2, 0, 1, &Placement::default());
    let reports = f.drain_until(|r| matches!(event(r), Some((2, Event::NodeLost { .. }))));
    assert!(
        !reports
            .iter()
            .any(|r| matches!(event(r), Some((2, Event::TaskStarted { .. })))),
        "{reports:?}"
    );
    assert!(!f.group(2).join(".skyc/a0/started").exists());
}

/// Worker 1 submitted (job 101), running, its node past setup: ready.
fn ready_worker(f: &mut Fake) -> Engine {
    let mut engine = Engine::new(spec("w"));
    let worker = f.worker();
    f.adopt(1, &worker, &engine, true);
    let actions = engine.start();
    f.backend.execute(1, &engine, &actions);
    f.drain_until(|r| matches!(event(r), Some((1, Event::TaskQueued { .. }))));
    fs::write(f.dir.join("bin/state.101"), "RUNNING").unwrap();
    let run = f.group(1).join("a0/.skyc/r0");
    fs::create_dir_all(&run).unwrap();
    fs::write(run.join("hosts"), "10.0.0.7 w-0.w\n").unwrap();
    fs::write(run.join("ready.0"), "").unwrap();
    f.drain_until(|r| matches!(r, (1, Report::Ready { .. })));
    engine
}

/// Every report of the polls of the next `ms` milliseconds.
fn drain_for(f: &mut Fake, ms: u64) -> Vec<(i64, Report)> {
    let mut all = Vec::new();
    let end = std::time::Instant::now() + Duration::from_millis(ms);
    while std::time::Instant::now() < end {
        all.extend(f.backend.drain(now_ms()));
        std::thread::sleep(Duration::from_millis(50));
    }
    all
}

#[test]
fn a_worker_in_a_passing_state_is_watched_on_and_a_suspended_one_cancelled() {
    let mut f = Fake::new("states");
    let _engine = ready_worker(&mut f);
    // SIGNALING, RESIZING: not an end; the worker is watched on.
    fs::write(f.dir.join("bin/state.101"), "SIGNALING").unwrap();
    let reports = drain_for(&mut f, 2_500);
    assert!(!reports.iter().any(|r| event(r).is_some()), "{reports:?}");
    assert_eq!(f.bin("scancel.log"), "", "nothing cancelled");
    // Suspended (it could resume later, in its hold): lost, and cancelled
    // so that no allocation outlives it.
    fs::write(f.dir.join("bin/state.101"), "SUSPENDED").unwrap();
    f.drain_until(|r| matches!(event(r), Some((1, Event::NodeLost { .. }))));
    assert_eq!(f.bin("scancel.log"), "101\n");
}

#[test]
fn a_worker_whose_sbatch_failed_after_slurm_took_it_is_found_not_failed() {
    let mut f = Fake::new("timeout");
    fs::write(
        f.dir.join("bin/sbatch.fail"),
        "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation",
    )
    .unwrap();
    let mut engine = Engine::new(spec("w"));
    let worker = f.worker();
    f.adopt(1, &worker, &engine, true);
    let actions = engine.start();
    f.backend.execute(1, &engine, &actions);
    let reports = f.drain_until(|r| matches!(event(r), Some((1, Event::TaskQueued { .. }))));
    assert!(
        !reports
            .iter()
            .any(|r| matches!(event(r), Some((_, Event::NodeExited { .. })))),
        "{reports:?}"
    );
    assert_eq!(
        fs::read_to_string(f.group(1).join("jobid.0")).unwrap(),
        "101"
    );
    assert_eq!(f.bin("sbatch.log").lines().count(), 1, "submitted once");
}

#[test]
fn a_worker_is_not_submitted_while_a_dead_supervisors_sbatch_runs() {
    let mut f = Fake::new("sbatchrun");
    fs::create_dir_all(f.group(9)).unwrap();
    fs::write(f.group(9).join("submitting.0"), "").unwrap();
    // The dead supervisor's sbatch, still waiting for slurmctld.
    let sbatch = Lingering::start("--comment=sbatchrun-w9-a0");
    let mut engine = Engine::new(spec("w"));
    engine.start();
    let worker = f.worker();
    f.adopt(9, &worker, &engine, false);
    drain_for(&mut f, 1_500);
    // Read while it still runs: once it is killed, a poll may submit.
    assert_eq!(f.bin("sbatch.log"), "", "no second sbatch beside it");
    drop(sbatch);
    // Gone, and its job never made: submitted at the next try.
    f.drain_until(|r| matches!(event(r), Some((9, Event::TaskQueued { .. }))));
    assert_eq!(f.bin("sbatch.log").lines().count(), 1);
}

/// A process named `sbatch` carrying `comment`, as a dead supervisor's
/// child would be; killed when dropped, also when the test fails, so that
/// it cannot stand in for the next run's.
struct Lingering(std::process::Child);

impl Lingering {
    fn start(comment: &str) -> Self {
        let child = std::process::Command::new("bash")
            .args(["-c", "sleep 30; true", "sbatch", comment])
            .spawn()
            .unwrap();
        // spawn returns once the exec has begun, before the kernel has
        // laid out the new argv: until then /proc shows an empty cmdline.
        let cmdline = format!("/proc/{}/cmdline", child.id());
        let mut seen = false;
        for _ in 0..200 {
            seen = fs::read(&cmdline)
                .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == comment.as_bytes()));
            if seen {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let lingering = Self(child);
        assert!(seen, "{cmdline} never showed {comment}");
        lingering
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Job 2 adopted, started and placed on worker 1.
fn placed_job(f: &mut Fake) -> Engine {
    let mut engine = Engine::new(spec("j"));
    let job = f.job();
    f.adopt(2, &job, &engine, true);
    let actions = engine.start();
    f.backend.execute(2, &engine, &actions);
    f.backend.place(2, 0, 1, &Placement::default());
    engine
}

#[test]
fn a_step_that_cannot_start_on_a_holding_worker_is_the_jobs_failure() {
    let mut f = Fake::new("srunfail");
    let _worker = ready_worker(&mut f);
    fs::write(
        f.dir.join("bin/srun.fail"),
        "srun: error: chdir to /nowhere failed\n",
    )
    .unwrap();
    let _job = placed_job(&mut f);
    let reports = f.drain_until(|r| {
        event(r).is_some_and(|(g, e)| {
            g == 2 && !matches!(e, Event::TaskStarted { .. } | Event::TaskQueued { .. })
        })
    });
    let ended = reports.iter().filter_map(event).rfind(|(g, _)| *g == 2);
    assert!(
        matches!(
            ended,
            Some((
                2,
                Event::NodeExited {
                    code: 2,
                    phase: crate::policy::Phase::Run,
                    ..
                }
            ))
        ),
        "{reports:?}"
    );
    let log = fs::read_to_string(crate::paths::log(&f.group(2), "j", 0)).unwrap();
    assert!(log.contains("srun exited 2"), "{log}");
    assert!(log.contains("chdir to /nowhere failed"), "{log}");
}

#[test]
fn a_step_lost_is_cancelled_by_name_before_its_loss_is_told() {
    let mut f = Fake::new("steplost");
    let _worker = ready_worker(&mut f);
    // srun ends with no node's exit file (its step left behind, say).
    fs::write(
        f.dir.join("bin/steps"),
        "101.0|skyc-j2-a0\n101.1|skyc-j3-a0\n",
    )
    .unwrap();
    let _job = placed_job(&mut f);
    f.drain_until(|r| matches!(event(r), Some((2, Event::NodeLost { .. }))));
    assert_eq!(f.bin("scancel.log"), "101.0\n");
}

#[test]
fn a_step_that_failed_while_the_supervisor_was_down_is_a_failure_not_a_loss() {
    let mut f = Fake::new("downfail");
    let worker = ready_worker(&mut f);
    let job = placed_job(&mut f);
    // The supervisor dies; the step fails meanwhile.
    f.backend = crate::slurm::SlurmBackend::new(&f.state);
    let adir = f.group(2).join(".skyc/a0");
    fs::write(adir.join("exit.0.0.0"), "run 3\n").unwrap();
    let plan = f.worker();
    f.adopt(1, &plan, &worker, false);
    let plan = f.job();
    f.adopt(2, &plan, &job, false);
    let reports = f.drain_until(|r| {
        matches!(
            event(r),
            Some((2, Event::NodeExited { .. } | Event::NodeLost { .. }))
        )
    });
    assert!(
        reports
            .iter()
            .any(|r| matches!(event(r), Some((2, Event::NodeExited { code: 3, .. })))),
        "{reports:?}"
    );
}

#[test]
fn a_worker_retired_before_its_submission_is_not_submitted_after_a_crash() {
    let mut f = Fake::new("retired");
    let mut engine = Engine::new(spec("w"));
    engine.start();
    // Retired (the pool scaled down) before the dead supervisor ran sbatch.
    engine.handle(Event::CancelRequested);
    assert!(engine.stopping(0));
    let worker = f.worker();
    f.adopt(1, &worker, &engine, false);
    let reports = f.drain_until(|r| matches!(event(r), Some((1, Event::NodeLost { .. }))));
    assert!(
        !reports
            .iter()
            .any(|r| matches!(event(r), Some((1, Event::TaskQueued { .. })))),
        "{reports:?}"
    );
    drain_for(&mut f, 1_500);
    assert_eq!(f.bin("sbatch.log"), "", "never submitted");
}

/// Worker 1 (ready, job 101) lost: its job cancelled from outside. Its
/// engine's next attempt is started, and submitted (job 102).
fn restarted_worker(f: &mut Fake, engine: &mut Engine) {
    fs::write(f.dir.join("bin/state.101"), "CANCELLED").unwrap();
    let reports = f.drain_until(|r| matches!(event(r), Some((1, Event::NodeLost { .. }))));
    for (_, e) in reports.iter().filter_map(event).filter(|(g, _)| *g == 1) {
        let actions = engine.handle(e.clone());
        f.backend.execute(1, engine, &actions);
    }
    assert_eq!(engine.attempt(0), 1, "restarted");
    f.drain_until(|r| matches!(event(r), Some((1, Event::TaskQueued { attempt: 1, .. }))));
    assert_eq!(
        fs::read_to_string(f.group(1).join("jobid.1")).unwrap(),
        "102"
    );
}

#[test]
fn a_ready_file_of_the_previous_attempts_job_does_not_make_the_next_ready() {
    let mut f = Fake::new("stale");
    let mut engine = ready_worker(&mut f);
    restarted_worker(&mut f, &mut engine);
    let out = f.group(1).canonicalize().unwrap();
    assert_eq!(
        f.bin("sbatch.log").lines().nth(1),
        Some(format!("102|stale-w1-a1|{}", out.join("a1").display()).as_str()),
        "the attempt's own SKYC_OUT"
    );
    fs::write(f.dir.join("bin/state.102"), "RUNNING").unwrap();
    // Job 101, still ending, writes its node's ready file (again) in its
    // own directory: attempt 1 has not run its setup.
    fs::create_dir_all(out.join("a0/.skyc/r0")).unwrap();
    fs::write(out.join("a0/.skyc/r0/ready.0"), "").unwrap();
    let reports = drain_for(&mut f, 2_500);
    assert!(
        !reports
            .iter()
            .any(|r| matches!(r, (1, Report::Ready { .. }))),
        "{reports:?}"
    );
    // Its own node past setup: ready.
    let run = out.join("a1/.skyc/r0");
    fs::create_dir_all(&run).unwrap();
    fs::write(run.join("hosts"), "10.0.0.8 w-0.w\n").unwrap();
    fs::write(run.join("ready.0"), "").unwrap();
    f.drain_until(|r| {
        matches!(
            r,
            (
                1,
                Report::Ready {
                    task: 0,
                    attempt: 1
                }
            )
        )
    });
}

#[test]
fn a_restarted_worker_keeps_the_earlier_attempts_setup_log_and_status() {
    let mut f = Fake::new("keeplog");
    let mut engine = ready_worker(&mut f);
    // What job 101 wrote under its SKYC_OUT: its setup's output (srun's
    // --output=$SKYC_OUT/logs/w-%t.log) and its status.
    let a0 = f.group(1).join("a0");
    fs::write(a0.join("logs/w-0.log"), "setting up 0\n").unwrap();
    fs::write(a0.join("status"), "1.0 r0 job START 101 components=101\n").unwrap();
    restarted_worker(&mut f, &mut engine);
    // Job 102 appends its setup's output the same way.
    let a1 = f.group(1).join("a1");
    let mut log = fs::OpenOptions::new()
        .append(true)
        .open(a1.join("logs/w-0.log"))
        .unwrap();
    std::io::Write::write_all(&mut log, b"setting up 1\n").unwrap();
    // One log per node across attempts, where `skyc logs` reads it.
    assert_eq!(
        fs::read_to_string(crate::paths::log(&f.group(1), "w", 0)).unwrap(),
        "setting up 0\nskyc: restarting w (attempt 1)\nsetting up 1\n"
    );
    assert_eq!(
        fs::read_to_string(a0.join("status")).unwrap(),
        "1.0 r0 job START 101 components=101\n",
        "attempt 0's status kept"
    );
    assert!(
        a0.join(".skyc/r0/ready.0").exists(),
        "and its run directory"
    );
}

/// A worker submitted by a build that kept its job's files in the group
/// directory (no `a0/`), adopted by this one: ready from its files
/// where its job wrote them, and not submitted again.
#[test]
fn a_worker_of_the_earlier_layout_is_ready_from_where_its_job_writes() {
    let mut f = Fake::new("layout");
    fs::write(f.dir.join("bin/state.55"), "RUNNING").unwrap();
    fs::write(f.dir.join("bin/queue"), "55|layout-w1-a0\n").unwrap();
    let group = f.group(1);
    let run = group.join(".skyc/r0");
    fs::create_dir_all(&run).unwrap();
    fs::write(group.join("jobid.0"), "55").unwrap();
    fs::write(run.join("hosts"), "10.0.0.7 w-0.w\n").unwrap();
    fs::write(run.join("ready.0"), "").unwrap();
    let mut engine = Engine::new(spec("w"));
    engine.start();
    engine.handle(Event::TaskStarted {
        task: 0,
        attempt: 0,
    });
    let worker = f.worker();
    f.adopt(1, &worker, &engine, false);
    f.drain_until(|r| matches!(r, (1, Report::Ready { .. })));
    assert_eq!(f.bin("sbatch.log"), "", "not submitted again");
    assert!(!group.join("a0").exists());
}
