//! A pool's jobs on the cluster: started in their worker's pods through
//! `pods/exec`, once per attempt whatever the supervisor does, with
//! their rank; lost with their worker and run again where the pool
//! places them next.

use super::driver::{connect, tuning};
use super::fake::{Fake, NS, Process};
use super::pools::worker;
use crate::backend::{Backend, Report};
use crate::k8s::job_scripts::{self, attempt_dir};
use crate::k8s::{Kubernetes, Plan};
use crate::policy::{Action, Engine, Event, Status, Timer};
use crate::pool::{JobSpec, Placement};
use crate::reconciler::goal::Goal;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A 2-node job, as `skyc run --pool` plans it.
const JOB: &str = "\
name: train
num_nodes: 2
envs:
  LR: '0.1 $x'
setup: pip install torch
run: echo train
";

/// Job `rank` of `num_jobs`, as `skyc run --pool` plans it.
fn job(rank: u32, num_jobs: u32) -> Plan {
    job_of(JOB, &[], rank, num_jobs)
}

/// Job `rank` of `num_jobs` of the job file `text`, with `secrets` given
/// to `skyc run`.
fn job_of(text: &str, secrets: &[(String, String)], rank: u32, num_jobs: u32) -> Plan {
    let (plans, diagnostics) = plan_jobs(text, secrets, num_jobs);
    let plans = plans.unwrap_or_else(|| panic!("lowered: {diagnostics:?}"));
    assert_eq!(plans.len(), num_jobs as usize);
    let plan = plans[rank as usize].clone();
    assert_eq!(plan.namespace, NS, "where the workers are");
    assert_eq!(plan.pool_job.as_ref().map(|j| j.rank), Some(rank));
    plan
}

fn plan_jobs(
    text: &str,
    secrets: &[(String, String)],
    num_jobs: u32,
) -> (Option<Vec<Plan>>, Vec<skyc_compiler::Diagnostic>) {
    let c = skyc_compiler::compile("job.yaml", text.as_bytes(), &Default::default());
    let group = c.group.expect("a valid job");
    worker(0).pool_jobs(
        &group,
        Duration::from_secs(5),
        secrets,
        "run-2".into(),
        num_jobs,
        |rank| JobSpec {
            room: None,
            rank,
            num_jobs,
        },
    )
}

/// A job's secrets: `skyc run`'s values over the file's, in the job's
/// environment, and in no exec's arguments (the request's URL, which API
/// servers log). A secret with no value is the job's error, as for a
/// group. What the target does not apply is said, as for a group.
#[test]
fn a_jobs_secrets_reach_its_environment_and_never_an_exec_url() {
    let text = format!("{JOB}secrets:\n  TOKEN: null\n  REGION: eu-1\nworkdir: .\n");
    let (plans, diagnostics) = plan_jobs(&text, &[], 1);
    assert!(plans.is_none());
    assert!(
        diagnostics
            .iter()
            .any(|d| d.is_error() && d.message.contains("TOKEN")),
        "{diagnostics:?}"
    );
    let given = [
        ("TOKEN".to_owned(), "tok-'$(rm -rf /)'".to_owned()),
        ("REGION".to_owned(), "eu-1".to_owned()),
    ];
    let token = &given[0];
    let (_, diagnostics) = plan_jobs(&text, &given, 1);
    assert!(!diagnostics.iter().any(|d| d.is_error()), "{diagnostics:?}");
    assert!(
        diagnostics.iter().any(|d| d.message.contains("workdir")),
        "{diagnostics:?}"
    );
    let mut p = Pool::new();
    p.ready_worker(1, 0);
    p.add(10, job_of(&text, &given, 0, 1));
    p.place(10, 1);
    let procs = p.processes();
    assert_eq!(procs.len(), 2);
    for proc in &procs {
        assert_eq!(env(proc, "TOKEN").as_deref(), Some(token.1.as_str()));
        assert_eq!(env(proc, "REGION").as_deref(), Some("eu-1"));
        assert_eq!(env(proc, "LR").as_deref(), Some("0.1 $x"));
    }
    let urls = p.fake.world().kubelet_exec.urls.clone();
    assert!(urls.iter().any(|u| u.contains("skyc-start")));
    assert!(
        urls.iter()
            .all(|u| !u.contains("tok-") && !u.contains("echo train")),
        "{urls:?}"
    );
    // The job applies nothing of its own: no Secret is created.
    assert!(
        p.fake
            .world()
            .take_writes()
            .iter()
            .all(|w| !w.contains("secrets")),
    );
}

/// A `run` far over what a URL carries starts: it travels on the
/// start's standard input.
#[test]
fn a_large_run_starts() {
    let big = format!("echo {}", "x".repeat(300 * 1024));
    let text = JOB.replace("run: echo train", &format!("run: {big}"));
    let mut p = Pool::new();
    p.ready_worker(1, 0);
    p.add(10, job_of(&text, &[], 0, 1));
    p.place(10, 1);
    let procs = p.processes();
    assert_eq!(procs.len(), 2);
    assert!(procs.iter().all(|x| x.run == big));
    assert!(
        p.fake
            .world()
            .kubelet_exec
            .urls
            .iter()
            .all(|u| u.len() < 4096)
    );
}

/// One supervisor, played: one backend, an engine per group.
struct Pool {
    fake: Fake,
    backend: Option<Kubernetes>,
    plans: BTreeMap<i64, Plan>,
    engines: BTreeMap<i64, Engine>,
    timers: Vec<(i64, Timer)>,
    reports: Vec<(i64, Report)>,
    /// Where each job's current attempt is placed.
    placed: BTreeMap<i64, (u32, i64)>,
    dir: PathBuf,
}

impl Pool {
    fn new() -> Self {
        static DIRS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "skyc-k8s-pool-{}-{}",
            std::process::id(),
            DIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let fake = Fake::default();
        let backend = Kubernetes::start(dir.clone(), connect(&fake), tuning()).unwrap();
        Self {
            fake,
            backend: Some(backend),
            plans: BTreeMap::new(),
            engines: BTreeMap::new(),
            timers: Vec::new(),
            reports: Vec::new(),
            placed: BTreeMap::new(),
            dir,
        }
    }

    fn backend(&mut self) -> &mut Kubernetes {
        self.backend.as_mut().unwrap()
    }

    fn add(&mut self, gid: i64, plan: Plan) {
        let mut engine = Engine::new(plan.spec.clone());
        self.backend()
            .adopt_plan(gid, super::role(&plan), plan.clone(), &engine, None);
        let actions = engine.start();
        self.engines.insert(gid, engine);
        self.plans.insert(gid, plan);
        self.execute(gid, &actions);
        self.settle();
    }

    /// A worker, made ready: its pods run and their probes succeed.
    fn ready_worker(&mut self, gid: i64, n: u32) {
        self.add(gid, worker(n));
        let prefix = format!("pool-{n}-");
        {
            let mut w = self.fake.world();
            w.reconcile_cluster();
            w.run_pending();
            let pods: Vec<String> = w
                .names("pods")
                .into_iter()
                .filter(|p| p.starts_with(&prefix))
                .collect();
            for p in pods {
                w.probe_succeeds(&p);
            }
        }
        self.settle();
        assert!(
            self.reports.contains(&(
                gid,
                Report::Ready {
                    task: 0,
                    attempt: 0
                }
            )),
            "worker {n} is ready"
        );
    }

    fn execute(&mut self, gid: i64, actions: &[Action]) {
        for a in actions {
            if let Action::SetTimer { timer, .. } = a {
                self.timers.push((gid, *timer));
            }
        }
        let engine = self.engines[&gid].clone();
        self.backend().execute(gid, &engine, actions);
    }

    fn attempt(&self, gid: i64) -> u32 {
        Goal::from_engine(&self.engines[&gid]).tasks[0].attempt
    }

    /// The pool places the job's current attempt on a worker.
    fn place(&mut self, job: i64, worker: i64) {
        let attempt = self.attempt(job);
        self.placed.insert(job, (attempt, worker));
        let placement = Placement {
            gpus: vec![Vec::new(); 2],
        };
        self.backend().place(job, attempt, worker, &placement);
        self.settle();
    }

    fn fire(&mut self, gid: i64, timer: Timer) {
        assert!(
            self.timers.contains(&(gid, timer)),
            "{timer:?}: {:?}",
            self.timers
        );
        self.timers.retain(|t| *t != (gid, timer));
        let actions = self
            .engines
            .get_mut(&gid)
            .unwrap()
            .handle(Event::TimerFired(timer));
        self.execute(gid, &actions);
        self.settle();
    }

    fn pump(&mut self) -> bool {
        let reports = self.backend().drain(0);
        let any = !reports.is_empty();
        for (gid, report) in reports {
            self.reports.push((gid, report.clone()));
            if let Report::Event { event, .. } = report {
                let actions = self.engines.get_mut(&gid).unwrap().handle(event);
                self.execute(gid, &actions);
            }
        }
        any
    }

    fn settle(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut quiet = 0;
        let mut last = (usize::MAX, usize::MAX);
        while quiet < 10 {
            assert!(Instant::now() < deadline, "the backend did not settle");
            std::thread::sleep(Duration::from_millis(15));
            let reported = self.pump();
            let now = {
                let w = self.fake.world();
                (w.requests.len(), w.kubelet_exec.by_dir.len())
            };
            if reported || now != last {
                quiet = 0;
                last = now;
            } else {
                quiet += 1;
            }
        }
    }

    /// Pumps until `done` holds (10 s at most): for what a loaded
    /// machine may bring after [`Pool::settle`] found the backend quiet.
    fn until(&mut self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "never {what}: {:?}",
                self.reports
            );
            std::thread::sleep(Duration::from_millis(15));
            self.pump();
        }
    }

    /// `skyc cancel` of a job: the backend told, then the engine.
    fn cancel(&mut self, gid: i64) {
        self.backend().cancel(gid);
        let actions = self
            .engines
            .get_mut(&gid)
            .unwrap()
            .handle(Event::CancelRequested);
        self.execute(gid, &actions);
        self.settle();
    }

    fn cluster(&mut self, f: impl FnOnce(&mut super::fake::World)) {
        f(&mut self.fake.world());
        self.settle();
    }

    /// The supervisor dies and a new one adopts every group from its
    /// committed engine, and gives every placement again.
    fn restart(&mut self) {
        self.backend = None;
        let mut backend =
            Kubernetes::start(self.dir.clone(), connect(&self.fake), tuning()).unwrap();
        for (gid, plan) in &self.plans {
            backend.adopt_plan(
                *gid,
                super::role(plan),
                plan.clone(),
                &self.engines[gid],
                Some(String::new()),
            );
        }
        for (job, (attempt, worker)) in &self.placed {
            let placement = Placement {
                gpus: vec![Vec::new(); 2],
            };
            backend.place(*job, *attempt, *worker, &placement);
        }
        self.backend = Some(backend);
        self.settle();
    }

    fn status(&self, gid: i64) -> Status {
        self.engines[&gid].group_status()
    }

    fn processes(&self) -> Vec<Process> {
        self.fake.world().job_processes()
    }

    fn log(&self, gid: i64, rank: u32) -> String {
        let dir = crate::paths::group_dir(&self.dir, gid);
        std::fs::read_to_string(crate::paths::log(&dir, "train", rank)).unwrap_or_default()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.backend = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn env(p: &Process, name: &str) -> Option<String> {
    p.env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

/// Two ready workers (groups 1 and 2, `pool-0` and `pool-1`) and two
/// ranked jobs (groups 10 and 11), each placed on one.
fn two_jobs_placed() -> Pool {
    let mut p = Pool::new();
    p.ready_worker(1, 0);
    p.ready_worker(2, 1);
    p.add(10, job(0, 2));
    p.add(11, job(1, 2));
    // Nothing runs before the pool places a job.
    assert!(p.processes().is_empty());
    p.place(10, 1);
    p.place(11, 2);
    p
}

#[test]
fn ranked_jobs_start_once_each_in_their_workers_pods() {
    let mut p = two_jobs_placed();
    let procs = p.processes();
    assert_eq!(procs.len(), 4, "{procs:#?}");
    for (job, worker, rank) in [(10, 0, 0), (11, 1, 1)] {
        for node in 0..2 {
            let pod = format!("pool-{worker}-trainers-{node}-0");
            let proc = procs.iter().find(|x| x.pod == pod).unwrap();
            assert_eq!(proc.run, "echo train");
            assert_eq!(env(proc, "SKYPILOT_JOB_RANK"), Some(rank.to_string()));
            assert_eq!(env(proc, "SKYPILOT_NUM_JOBS").as_deref(), Some("2"));
            assert_eq!(env(proc, "SKYPILOT_NODE_RANK"), Some(node.to_string()));
            assert_eq!(env(proc, "SKYPILOT_NUM_NODES").as_deref(), Some("2"));
            // The job's own task id, not its worker's.
            assert_eq!(
                env(proc, "SKYPILOT_TASK_ID"),
                Some(format!("skyc-job-{job}_train-0"))
            );
            // The job's own envs, exactly as written.
            assert_eq!(env(proc, "LR").as_deref(), Some("0.1 $x"));
            let dir = attempt_dir(job, 0);
            p.fake
                .world()
                .job_prints(&pod, &dir, &format!("node {node}\n"));
        }
        assert_eq!(p.status(job), Status::Running);
    }
    // Jobs bring no setup: the workers ran the pool's.
    assert!(
        p.plans[&10].object("ConfigMap").unwrap()["data"]
            .get("train.setup.sh")
            .is_none()
    );
    // Exactly one start asked per node of each attempt.
    let starts = p
        .fake
        .world()
        .kubelet_exec
        .execs
        .iter()
        .filter(|e| e.contains(" skyc-start "))
        .count();
    assert_eq!(starts, 4);
    p.cluster(|w| {
        for (worker, job) in [(0, 10), (1, 11)] {
            for node in 0..2 {
                w.job_exits(
                    &format!("pool-{worker}-trainers-{node}-0"),
                    &attempt_dir(job, 0),
                    0,
                );
            }
        }
    });
    assert_eq!(p.status(10), Status::Succeeded);
    assert_eq!(p.status(11), Status::Succeeded);
    assert!(p.reports.contains(&(10, Report::Settled)));
    assert_eq!(p.log(10, 0), "node 0\n");
    assert_eq!(p.log(11, 1), "node 1\n");
    // The workers hold on, nothing of them touched.
    assert_eq!(p.status(1), Status::Running);
    assert!(
        p.fake
            .world()
            .take_writes()
            .iter()
            .all(|w| !w.contains("DELETE"))
    );
    assert_eq!(p.fake.world().names("pods").len(), 4);
}

#[test]
fn a_restarted_supervisor_starts_nothing_twice_and_repeats_no_log() {
    let mut p = two_jobs_placed();
    let pod = "pool-0-trainers-0-0";
    let dir = attempt_dir(10, 0);
    p.cluster(|w| w.job_prints(pod, &dir, "before\n"));
    assert_eq!(p.log(10, 0), "before\n");
    let starts = |p: &Pool| {
        p.fake
            .world()
            .kubelet_exec
            .execs
            .iter()
            .filter(|e| e.contains(" skyc-start "))
            .count()
    };
    assert_eq!(starts(&p), 4, "one start per node of each job");
    p.restart();
    assert_eq!(starts(&p), 4, "no start asked again");
    assert_eq!(p.processes().len(), 4, "no second start");
    p.cluster(|w| w.job_prints(pod, &dir, "after\n"));
    assert_eq!(p.log(10, 0), "before\nafter\n");
    p.cluster(|w| {
        w.job_exits(pod, &dir, 3);
    });
    assert_eq!(p.status(10), Status::Failed);
    assert_eq!(p.status(11), Status::Running);
}

#[test]
fn a_lost_worker_loses_its_job_which_runs_again_on_another_worker() {
    let mut p = two_jobs_placed();
    // Worker 0's node 1 is evicted: the job on it is lost with it.
    p.cluster(|w| {
        w.disrupt("pool-0-trainers-1-0", "EvictionByEvictionAPI");
        w.reconcile_cluster();
    });
    assert!(p.reports.iter().any(|(g, r)| *g == 1
        && matches!(
            r,
            Report::Event {
                event: Event::NodeLost { node: 1, .. },
                ..
            }
        )));
    assert!(p.reports.iter().any(|(g, r)| *g == 10
        && matches!(
            r,
            Report::Event {
                event: Event::NodeLost {
                    attempt: 0,
                    node: 1,
                    ..
                },
                ..
            }
        )));
    // Its engine restarts it without its budget; the pool makes a new
    // worker and places the job's next attempt there.
    while p.attempt(10) == 0 {
        let timer = p
            .timers
            .iter()
            .find(|(g, _)| *g == 10)
            .map(|(_, t)| *t)
            .expect("the lost job waits for its nodes or a timer");
        p.fire(10, timer);
    }
    assert_eq!(p.attempt(10), 1);
    p.ready_worker(3, 2);
    p.place(10, 3);
    let started_on = |p: &Pool, prefix: &str| {
        p.processes()
            .iter()
            .filter(|x| x.pod.starts_with(prefix))
            .count()
    };
    p.until("started on the new worker", |p| {
        started_on(p, "pool-2-") >= 2
    });
    // Settled, so that a second start would be counted below.
    p.settle();
    let procs = p.processes();
    let on = |prefix: &str| procs.iter().filter(|x| x.pod.starts_with(prefix)).count();
    assert_eq!(on("pool-2-"), 2, "attempt 1 started once per node");
    assert_eq!(on("pool-1-"), 2, "the other worker's job untouched");
    assert!(
        procs
            .iter()
            .filter(|x| x.pod.starts_with("pool-1-"))
            .all(|x| x.exit.is_none())
    );
    assert_eq!(p.status(11), Status::Running);
    p.cluster(|w| {
        for node in 0..2 {
            w.job_exits(&format!("pool-2-trainers-{node}-0"), &attempt_dir(10, 1), 0);
        }
    });
    assert_eq!(p.status(10), Status::Succeeded);
}

#[test]
fn a_job_placed_on_a_worker_that_is_not_there_is_lost() {
    let mut p = Pool::new();
    p.add(10, job(0, 1));
    p.place(10, 99);
    assert!(p.reports.iter().any(|(g, r)| *g == 10
        && matches!(
            r,
            Report::Event {
                event: Event::NodeLost { attempt: 0, .. },
                ..
            }
        )));
    assert!(p.processes().is_empty());
}

#[test]
fn a_cancelled_job_is_stopped_in_its_pods_and_the_worker_holds() {
    let mut p = two_jobs_placed();
    let on = |p: &Pool, worker: &str| -> Vec<Option<i32>> {
        p.processes()
            .iter()
            .filter(|x| x.pod.starts_with(worker))
            .map(|x| x.exit)
            .collect()
    };
    // Each job runs on its worker's two nodes.
    assert_eq!(on(&p, "pool-0-"), [None, None]);
    assert_eq!(on(&p, "pool-1-"), [None, None]);
    p.cancel(10);
    assert_eq!(p.status(10), Status::Cancelled);
    assert!(p.reports.contains(&(10, Report::Settled)));
    assert_eq!(on(&p, "pool-0-"), [Some(143), Some(143)], "job 10 stopped");
    assert_eq!(on(&p, "pool-1-"), [None, None], "job 11 runs on");
    assert_eq!(p.fake.world().names("pods").len(), 4);
    let _ = NS;
}

#[test]
fn a_job_cancelled_before_it_is_placed_ends_with_nothing_started() {
    let mut p = Pool::new();
    p.ready_worker(1, 0);
    p.add(10, job(0, 1));
    p.cancel(10);
    assert_eq!(p.status(10), Status::Cancelled);
    assert!(p.reports.contains(&(10, Report::Settled)));
    assert!(p.processes().is_empty());
    assert!(p.fake.world().kubelet_exec.execs.is_empty());
}

#[test]
fn an_exec_the_api_server_forbids_is_an_error_not_an_outage() {
    let mut p = Pool::new();
    p.ready_worker(1, 0);
    p.add(10, job(0, 1));
    p.fake.world().kubelet_exec.denied = true;
    p.place(10, 1);
    let errors: Vec<&String> = p
        .reports
        .iter()
        .filter_map(|(g, r)| match r {
            Report::Error(e) if *g == 10 => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("pods/exec"), "{errors:?}");
    assert!(
        !p.reports
            .iter()
            .any(|(g, r)| *g == 10 && matches!(r, Report::Outage(Some(_)))),
        "{:?}",
        p.reports
    );
    assert!(p.processes().is_empty());
    // Granted: the job starts.
    p.cluster(|w| w.kubelet_exec.denied = false);
    assert_eq!(p.processes().len(), 2);
}

/// A node that printed more than a poll reads and then exited: its whole
/// log is read before its end is reported.
#[test]
fn a_long_log_is_read_to_its_end_before_the_exit() {
    let mut p = two_jobs_placed();
    let big = "x".repeat(2 * job_scripts::LOG_CHUNK_BYTES as usize + 100) + "\nend\n";
    p.cluster(|w| {
        for node in 0..2 {
            let pod = format!("pool-0-trainers-{node}-0");
            let dir = attempt_dir(10, 0);
            w.job_prints(&pod, &dir, &big);
            w.job_exits(&pod, &dir, 0);
        }
    });
    assert_eq!(p.status(10), Status::Succeeded);
    for node in 0..2 {
        let log = p.log(10, node);
        assert_eq!(log.len(), big.len(), "node {node}");
        assert!(log.ends_with("\nend\n"));
    }
}

/// The job is cancelled while no supervisor runs: the new one, before
/// any placement is given again, signals the running nodes (it does not
/// answer them lost and leave them running).
#[test]
fn a_cancel_heard_by_a_restarted_supervisor_signals_the_running_job() {
    let mut p = two_jobs_placed();
    p.backend = None;
    let actions = p
        .engines
        .get_mut(&10)
        .unwrap()
        .handle(Event::CancelRequested);
    for a in &actions {
        if let Action::SetTimer { timer, .. } = a {
            p.timers.push((10, *timer));
        }
    }
    p.placed.remove(&10);
    p.restart();
    assert_eq!(p.status(10), Status::Cancelled);
    let procs = p.processes();
    let job: Vec<&Process> = procs
        .iter()
        .filter(|x| x.pod.starts_with("pool-0-"))
        .collect();
    assert_eq!(job.len(), 2);
    assert!(job.iter().all(|x| x.exit == Some(143)), "{job:#?}");
}

/// An attempt given again on other pods (its worker made again while no
/// supervisor ran) is not started a second time: its pods are the ones
/// it was started in.
#[test]
fn an_attempt_given_again_elsewhere_after_a_restart_does_not_run_twice() {
    let mut p = two_jobs_placed();
    p.backend = None;
    // The old pods' containers are gone with what ran in them.
    p.fake
        .world()
        .kubelet_exec
        .by_dir
        .retain(|_, x| !x.pod.starts_with("pool-0-"));
    p.placed.insert(10, (0, 2));
    p.restart();
    let procs = p.processes();
    assert_eq!(
        procs
            .iter()
            .filter(|x| x.pod.starts_with("pool-1-"))
            .count(),
        2,
        "only job 11 runs on worker 2: {procs:#?}"
    );
    assert!(p.reports.iter().any(|(g, r)| *g == 10
        && matches!(
            r,
            Report::Event {
                event: Event::NodeLost { attempt: 0, .. },
                ..
            }
        )));
}

/// A job that ignores SIGTERM, cancelled: the grace passes while no
/// supervisor runs, and the new one sends SIGKILL (the engine's timer
/// is committed); its polls fail until a third supervisor, which reads
/// the processes gone as killed (137, the SIGKILL recorded), not lost:
/// the job ends CANCELLED.
#[test]
fn a_kill_after_the_grace_survives_supervisor_restarts() {
    let mut p = Pool::new();
    p.ready_worker(1, 0);
    p.fake.world().kubelet_exec.jobs_ignore_term = true;
    p.add(10, job(0, 1));
    p.place(10, 1);
    p.cancel(10);
    let procs = p.processes();
    assert_eq!(procs.len(), 2);
    assert!(
        procs.iter().all(|x| x.exit.is_none() && !x.vanished),
        "TERM ignored"
    );
    assert_eq!(p.status(10), Status::Cancelling);
    p.restart();
    let kill = p
        .timers
        .iter()
        .find_map(|(g, t)| (*g == 10 && matches!(t, Timer::Kill { .. })).then_some(*t))
        .expect("the engine's SIGKILL timer");
    // The SIGKILL goes out; the polls after it fail, and the supervisor
    // dies before one answers: the next one reads the processes gone.
    p.fake.world().kubelet_exec.failing_polls = true;
    p.fire(10, kill);
    // Sent from the backend's thread: waited for, then what else it does.
    p.until("SIGKILL sent", |p| p.processes().iter().all(|x| x.vanished));
    p.settle();
    assert_eq!(p.status(10), Status::Cancelling);
    p.fake.world().kubelet_exec.failing_polls = false;
    p.restart();
    assert_eq!(p.status(10), Status::Cancelled);
    assert!(
        !p.reports.iter().any(|(g, r)| *g == 10
            && matches!(
                r,
                Report::Event {
                    event: Event::NodeLost { .. },
                    ..
                }
            )),
        "killed, not lost: {:?}",
        p.reports
    );
}

/// An exec answered 404 while the worker's pod runs (a proxy's answer):
/// the pod, read, is there, so nothing is lost; the job is read again
/// once execs answer, and runs to its end once.
#[test]
fn an_exec_404_for_a_pod_that_runs_loses_nothing() {
    let mut p = two_jobs_placed();
    p.fake.world().kubelet_exec.stray_404 = true;
    // Not settled: the pods are read on every pass while it lasts.
    let outage = |p: &Pool| {
        p.reports.iter().any(|(g, r)| {
            *g == 10 && matches!(r, Report::Outage(Some(why)) if why.contains("the pod runs"))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !outage(&p) {
        assert!(Instant::now() < deadline, "{:?}", p.reports);
        std::thread::sleep(Duration::from_millis(15));
        p.pump();
    }
    assert!(
        !p.reports.iter().any(|(_, r)| matches!(
            r,
            Report::Event {
                event: Event::NodeLost { .. },
                ..
            }
        )),
        "{:?}",
        p.reports
    );
    assert_eq!(p.status(10), Status::Running);
    p.cluster(|w| {
        w.kubelet_exec.stray_404 = false;
        for node in 0..2 {
            w.job_exits(&format!("pool-0-trainers-{node}-0"), &attempt_dir(10, 0), 0);
        }
    });
    assert_eq!(p.status(10), Status::Succeeded);
    assert_eq!(p.processes().len(), 4, "nothing started twice");
}

/// A start that ran but whose answer was lost, then a cancel: the node
/// is signalled and read as started (CANCELLED, its process ended), not
/// ended unseen while it runs on the worker.
#[test]
fn a_job_whose_start_answer_was_lost_is_stopped_when_cancelled() {
    let mut p = Pool::new();
    p.ready_worker(1, 0);
    p.fake.world().kubelet_exec.start_answers_lost = true;
    p.add(10, job(0, 1));
    p.place(10, 1);
    assert_eq!(p.processes().len(), 2, "started, unanswered");
    p.cancel(10);
    p.until("cancelled", |p| p.status(10) == Status::Cancelled);
    let procs = p.processes();
    assert!(procs.iter().all(|x| x.exit == Some(143)), "{procs:#?}");
}

/// A start the API server refuses ran nothing: a cancel then ends the
/// job at once, refusals and all.
#[test]
fn a_job_whose_start_was_refused_ends_when_cancelled() {
    let mut p = Pool::new();
    p.ready_worker(1, 0);
    p.fake.world().kubelet_exec.denied = true;
    p.add(10, job(0, 1));
    p.place(10, 1);
    p.cancel(10);
    assert_eq!(p.status(10), Status::Cancelled);
    assert!(p.processes().is_empty());
}
