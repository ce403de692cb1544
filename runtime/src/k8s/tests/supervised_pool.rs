//! A pool through the real supervisor, on a thread of the test, with the
//! Kubernetes backend talking to the fake API server: its workers made
//! and ready, two ranked jobs placed on them and run once each, `pool
//! down` leaving nothing on the cluster, and a worker that keeps ending
//! replaced after growing pauses until the pool fails.

use super::driver::{connect, tuning};
use super::fake::Fake;
use super::pools::pool_plan;
use crate::k8s::job_scripts::attempt_dir;
use crate::pool::JobSpec;
use crate::store::{Backend, Member, NewGroup, Store};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const POOL: &str = "\
name: trainers
num_nodes: 2
setup: pip install torch
pool:
  workers: 2
";

const JOB: &str = "name: train\nnum_nodes: 2\nrun: echo train\n";

fn job_group() -> skyc_compiler::ir::Group {
    let c = skyc_compiler::compile("job.yaml", JOB.as_bytes(), &Default::default());
    c.group.unwrap()
}

/// `num_jobs` jobs of [`JOB`] on the pool whose workers are made from
/// `worker`, as `skyc run --pool` plans them.
fn pool_jobs(worker: &crate::k8s::Plan, num_jobs: u32) -> Vec<crate::k8s::Plan> {
    let group = job_group();
    let job = |rank| JobSpec {
        room: None,
        rank,
        num_jobs,
    };
    let secrets = &[];
    let grace = Duration::from_secs(5);
    let (plans, _) = worker.pool_jobs(&group, grace, secrets, "run-2".into(), num_jobs, job);
    plans.unwrap()
}

struct Scene {
    fake: Fake,
    dir: PathBuf,
    /// Pods end (exit 1) as soon as they run, as with an image whose
    /// hold exits, instead of becoming ready.
    holds_exit: std::cell::Cell<bool>,
}

impl Scene {
    /// Runs the cluster (pods start, their probes succeed) until `done`.
    fn until(&self, what: &str, done: impl Fn(&Fake, &Store) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let store = Store::open(&self.dir).unwrap();
        while !done(&self.fake, &store) {
            if Instant::now() >= deadline {
                let (pods, execs) = {
                    let w = self.fake.world();
                    (w.names("pods"), w.kubelet_exec.execs.clone())
                };
                panic!("{what}: not reached; pods {pods:?}, execs {execs:?}");
            }
            {
                let mut w = self.fake.world();
                w.reconcile_cluster();
                w.run_pending();
                for pod in w.names("pods") {
                    let running = w
                        .get("pods", &pod)
                        .is_some_and(|p| p["status"]["phase"] == "Running");
                    if running && self.holds_exit.get() {
                        w.exit(&pod, 1);
                    } else if running {
                        w.probe_succeeds(&pod);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Scene {
    /// `skyc pool down`, until the pool is down.
    fn pool_down(&self, pool: i64) {
        Store::open(&self.dir)
            .unwrap()
            .request_cancel(pool)
            .unwrap();
        crate::supervisor::wake(&self.dir).unwrap();
        self.until("the pool down", |_, st| {
            st.group(pool)
                .unwrap()
                .is_some_and(|g| g.finished_at_ms.is_some())
        });
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// With nothing left to run, the supervisor exits, well.
fn exits(supervisor: std::thread::JoinHandle<std::io::Result<()>>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !supervisor.is_finished() {
        assert!(Instant::now() < deadline, "the supervisor did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(supervisor.join().unwrap().is_ok());
}

/// The pool recorded in a new state directory and a supervisor serving
/// it on the fake cluster, until both workers' pods are made.
#[allow(clippy::type_complexity)]
fn started(
    name: &str,
) -> (
    Scene,
    Fake,
    Store,
    crate::k8s::PoolPlan,
    i64,
    std::thread::JoinHandle<std::io::Result<()>>,
) {
    started_with(name, POOL, false, 4, tuning())
}

/// [`started`] for the pool file `pool`, until `pods` pods are made.
#[allow(clippy::type_complexity)]
fn started_with(
    name: &str,
    pool: &str,
    holds_exit: bool,
    pods: usize,
    tuning: crate::k8s::Tuning,
) -> (
    Scene,
    Fake,
    Store,
    crate::k8s::PoolPlan,
    i64,
    std::thread::JoinHandle<std::io::Result<()>>,
) {
    let dir = std::env::temp_dir().join(format!("skyc-supervised-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let plan = pool_plan(pool);
    let mut store = Store::open(&dir).unwrap();
    let pool = store
        .insert_pool(&NewGroup {
            name: "pool",
            source: "pool.yaml",
            submitted_at_ms: crate::store::now_ms(),
            plan: &serde_json::to_string(&plan).unwrap(),
            backend: Backend::Kubernetes,
            snapshots: &[],
            buckets: &[],
            tasks: Vec::new(),
        })
        .unwrap()
        .unwrap();
    let fake = Fake::default();
    fake.world().wall_clock = true;
    let s = Scene {
        fake: fake.clone(),
        dir: dir.clone(),
        holds_exit: std::cell::Cell::new(holds_exit),
    };
    let supervisor = {
        let (dir, connect) = (dir.clone(), connect(&fake));
        std::thread::spawn(move || crate::supervisor::serve(&dir, (connect, tuning)))
    };
    s.until("the workers' pods", |f, _| {
        f.world().names("pods").len() == pods
    });
    (s, fake, store, plan, pool, supervisor)
}

#[test]
fn a_pool_runs_ranked_jobs_and_goes_down_through_the_supervisor() {
    let (s, fake, mut store, plan, pool, supervisor) = started("pool");
    let mut pods = fake.world().names("pods");
    pods.sort();
    assert_eq!(
        pods,
        [
            "pool-1-trainers-0-0",
            "pool-1-trainers-1-0",
            "pool-2-trainers-0-0",
            "pool-2-trainers-1-0"
        ]
    );
    // Two jobs, as `skyc run --pool pool --num-jobs 2` records them.
    let group = job_group();
    let jobs = pool_jobs(&plan.worker, 2);
    let texts: Vec<String> = jobs
        .iter()
        .map(|p| serde_json::to_string(p).unwrap())
        .collect();
    let rows: Vec<(NewGroup<'_>, Option<Member>)> = texts
        .iter()
        .zip(0..)
        .map(|(plan, rank)| {
            (
                NewGroup {
                    name: "train",
                    source: "job.yaml",
                    submitted_at_ms: crate::store::now_ms(),
                    plan,
                    backend: Backend::Kubernetes,
                    snapshots: &[],
                    buckets: &[],
                    tasks: crate::store::NewTask::of(&group),
                },
                Some(Member {
                    pool: Some(pool),
                    rank,
                    num_jobs: 2,
                }),
            )
        })
        .collect();
    let ids = store.insert_jobs(&rows).unwrap();
    crate::supervisor::wake(&s.dir).unwrap();
    s.until("both jobs started in their workers' pods", |f, _| {
        f.world().job_processes().len() == 4
    });
    let procs = fake.world().job_processes();
    let mut ranks: Vec<(String, String)> = procs
        .iter()
        .map(|p| {
            let rank = p
                .env
                .iter()
                .find(|(k, _)| k == "SKYPILOT_JOB_RANK")
                .unwrap();
            (p.pod.clone(), rank.1.clone())
        })
        .collect();
    ranks.sort();
    // Each job on a worker of its own, each node of it once.
    let on = |worker: &str| -> Vec<String> {
        ranks
            .iter()
            .filter(|(pod, _)| pod.starts_with(worker))
            .map(|(_, r)| r.clone())
            .collect()
    };
    let (a, b) = (on("pool-1-"), on("pool-2-"));
    assert_eq!(a.len(), 2);
    assert_eq!(b.len(), 2);
    assert!(a[0] == a[1] && b[0] == b[1] && a[0] != b[0], "{ranks:?}");
    {
        let mut w = fake.world();
        let placed: Vec<(String, i64)> = procs
            .iter()
            .map(|p| {
                let rank: i64 = p
                    .env
                    .iter()
                    .find(|(k, _)| k == "SKYPILOT_JOB_RANK")
                    .unwrap()
                    .1
                    .parse()
                    .unwrap();
                (p.pod.clone(), ids[rank as usize])
            })
            .collect();
        for (pod, id) in placed {
            w.job_exits(&pod, &attempt_dir(id, 0), 0);
        }
    }
    s.until("both jobs succeeded", |_, st| {
        ids.iter().all(|id| {
            st.group(*id)
                .unwrap()
                .is_some_and(|g| g.status == "SUCCEEDED")
        })
    });
    assert_eq!(
        fake.world().job_processes().len(),
        4,
        "nothing started twice"
    );
    // `skyc pool down`.
    store.request_cancel(pool).unwrap();
    crate::supervisor::wake(&s.dir).unwrap();
    s.until("every worker gone", |f, _| {
        let w = f.world();
        w.names("pods").is_empty() && w.names("jobsets").is_empty()
    });
    fake.world().reconcile_cluster();
    assert_eq!(
        fake.world().everything(),
        Vec::<String>::new(),
        "no JobSet, Job, pod, Service, ConfigMap or Secret of the pool is left"
    );
    s.until("the pool down", |_, st| {
        st.group(pool)
            .unwrap()
            .is_some_and(|g| g.finished_at_ms.is_some())
    });
    exits(supervisor);
}

#[test]
fn a_lost_worker_is_made_again_and_its_job_runs_again_through_the_supervisor() {
    let (s, fake, mut store, plan, pool, supervisor) = started("pool-lost");
    let group = job_group();
    let job = pool_jobs(&plan.worker, 1).remove(0);
    let text = serde_json::to_string(&job).unwrap();
    let ids = store
        .insert_jobs(&[(
            NewGroup {
                name: "train",
                source: "job.yaml",
                submitted_at_ms: crate::store::now_ms(),
                plan: &text,
                backend: Backend::Kubernetes,
                snapshots: &[],
                buckets: &[],
                tasks: crate::store::NewTask::of(&group),
            },
            Some(Member {
                pool: Some(pool),
                rank: 0,
                num_jobs: 1,
            }),
        )])
        .unwrap();
    crate::supervisor::wake(&s.dir).unwrap();
    s.until("the job started", |f, _| {
        f.world().job_processes().len() == 2
    });
    let first = fake.world().job_processes()[0].pod.clone();
    let (lost, kept) = if first.starts_with("pool-1-") {
        ("pool-1", "pool-2")
    } else {
        ("pool-2", "pool-1")
    };
    // The worker's node 1 is evicted.
    fake.world()
        .disrupt(&format!("{lost}-trainers-1-0"), "EvictionByEvictionAPI");
    // Its job is lost with it and runs again, attempt 1, on a ready
    // worker; the lost worker is set up again (its pods of attempt 1).
    let lost_pods = |attempt: u32| -> Vec<String> {
        (0..2)
            .map(|node| format!("{lost}-trainers-{node}-{attempt}"))
            .collect()
    };
    let again = move |p: &super::fake::Process| !lost_pods(0).contains(&p.pod);
    s.until(
        "the job started again, and the worker made again",
        |f, _| {
            let w = f.world();
            let names = w.names("pods");
            w.job_processes().iter().filter(|p| again(p)).count() == 2
                && lost_pods(1).iter().all(|p| names.contains(p))
                && !lost_pods(0).iter().any(|p| names.contains(p))
        },
    );
    let procs = fake.world().job_processes();
    assert_eq!(
        procs.len(),
        4,
        "attempt 0 on the lost worker, attempt 1 once on another"
    );
    let rerun: Vec<String> = procs
        .iter()
        .filter(|p| again(p))
        .map(|p| p.pod.clone())
        .collect();
    assert!(
        rerun
            .iter()
            .all(|p| p.starts_with(kept) || p.ends_with("-1")),
        "{rerun:?}"
    );
    {
        let mut w = fake.world();
        for pod in &rerun {
            w.job_exits(pod, &attempt_dir(ids[0], 1), 0);
        }
    }
    s.until("the job succeeded", |_, st| {
        st.group(ids[0])
            .unwrap()
            .is_some_and(|g| g.status == "SUCCEEDED")
    });
    store.request_cancel(pool).unwrap();
    crate::supervisor::wake(&s.dir).unwrap();
    s.until("every worker gone", |f, _| {
        let w = f.world();
        w.names("pods").is_empty() && w.names("jobsets").is_empty()
    });
    fake.world().reconcile_cluster();
    assert_eq!(
        fake.world().everything(),
        Vec::<String>::new(),
        "nothing of the pool is left, the lost worker's first pods included"
    );
    exits(supervisor);
}

#[test]
fn a_worker_that_keeps_ending_is_replaced_after_growing_pauses_then_fails_the_pool() {
    let one = POOL.replace("workers: 2", "workers: 1");
    let (s, fake, store, _, pool, supervisor) =
        started_with("pool-ending", &one, true, 2, tuning());
    // When each worker's JobSet was first seen, and when it was seen gone.
    let seen = std::cell::RefCell::new(std::collections::BTreeMap::<
        String,
        (Instant, Option<Instant>),
    >::new());
    s.until("the pool FAILED", |f, st| {
        let names = f.world().names("jobsets");
        let mut seen = seen.borrow_mut();
        for n in &names {
            seen.entry(n.clone()).or_insert((Instant::now(), None));
        }
        for (n, (_, gone)) in seen.iter_mut() {
            if gone.is_none() && !names.contains(n) {
                *gone = Some(Instant::now());
            }
        }
        st.group(pool)
            .unwrap()
            .is_some_and(|g| g.status == "FAILED")
    });
    let row = store.group(pool).unwrap().unwrap();
    let error = row.error.unwrap_or_default();
    assert!(
        error.starts_with(
            "3 workers in a row failed before they were ready (the last one ended by itself before it was ready; its log: `skyc logs "
        ),
        "{error}"
    );
    // No further worker comes once the pool failed (the next pause would
    // be 4 s).
    std::thread::sleep(Duration::from_secs(6));
    let workers = store
        .members(pool, crate::store::Kind::Worker, true)
        .unwrap();
    assert_eq!(workers.len(), 3, "three workers, then none");
    s.until("every ended worker's objects deleted", |f, _| {
        f.world().everything().is_empty()
    });
    let seen = seen.into_inner();
    assert_eq!(
        seen.keys().cloned().collect::<Vec<_>>(),
        ["pool-1", "pool-2", "pool-3"],
        "three workers, then none"
    );
    // Each replacement waited, longer each time, from its predecessor's
    // end (its JobSet seen gone, within a poll of it).
    let made = |w: &str| seen[w].0;
    let gone = |w: &str| seen[w].1.expect("seen gone");
    let slop = Duration::from_millis(200);
    let first = made("pool-2").saturating_duration_since(gone("pool-1"));
    let second = made("pool-3").saturating_duration_since(gone("pool-2"));
    assert!(first + slop >= Duration::from_secs(1), "{first:?}");
    assert!(second + slop >= Duration::from_secs(2), "{second:?}");
    drop(store);
    s.pool_down(pool);
    assert!(fake.world().everything().is_empty());
    exits(supervisor);
}

#[test]
fn a_worker_whose_jobset_is_kept_by_a_finalizer_still_ends_and_is_replaced() {
    let one = POOL.replace("workers: 2", "workers: 1");
    let mut tuning = tuning();
    tuning.settle_limit = Duration::from_secs(2);
    let (s, fake, store, _, pool, supervisor) = started_with("pool-kept", &one, false, 2, tuning);
    s.until("worker 1 ready", |_, st| {
        st.group(pool).unwrap().is_some_and(|g| g.status == "READY")
    });
    // Someone else's finalizer on the worker's JobSet: it cannot go.
    fake.world().update("jobsets", "pool-1", |j| {
        j["metadata"]["finalizers"] = serde_json::json!(["example.com/keep"]);
    });
    // The worker's hold ends by itself.
    s.holds_exit.set(true);
    s.until("a new worker made", |f, _| {
        f.world().get("jobsets", "pool-2").is_some()
    });
    let w = fake.world();
    let kept = w.get("jobsets", "pool-1").expect("kept by its finalizer");
    assert!(
        !kept["metadata"]["deletionTimestamp"].is_null(),
        "deleted: {kept:#}"
    );
    drop(w);
    let first = store
        .members(pool, crate::store::Kind::Worker, true)
        .unwrap()
        .into_iter()
        .find(|w| w.rank == Some(1))
        .expect("worker 1");
    assert!(first.finished_at_ms.is_some(), "worker 1 ended");
    let error = first.error.unwrap_or_default();
    assert!(error.contains("was not deleted within 2 s"), "{error}");
    // Its finalizer removed, it goes with all it owns.
    fake.world().update("jobsets", "pool-1", |j| {
        j["metadata"]["finalizers"] = serde_json::json!([]);
    });
    drop(store);
    s.pool_down(pool);
    s.until("nothing left", |f, _| f.world().everything().is_empty());
    exits(supervisor);
}
