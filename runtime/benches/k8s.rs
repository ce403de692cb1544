//! The Kubernetes backend against the tests' fake API server (in this
//! process, no sockets):
//!
//! - latency: from a watch event to the first API request it causes,
//!   through the engine (a pod fails: the restart's DELETE) and through
//!   the reconciler alone (JobSet makes a Job: its attempt annotation);
//! - memory: resident memory per supervised group, with N groups running.
//!
//! `cargo bench -p skyc-runtime --bench k8s [-- ROUNDS GROUPS]`.

#[path = "../src/k8s/tests/controllers.rs"]
#[allow(dead_code)]
mod controllers;
#[path = "../src/k8s/tests/fake.rs"]
#[allow(dead_code)]
mod fake;

use fake::{Fake, NS, World};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use skyc_runtime::backend::{Backend, Report};
use skyc_runtime::k8s::client::Cluster;
use skyc_runtime::k8s::retry::Backoff;
use skyc_runtime::k8s::{ATTEMPT_ANNOTATION, Connect, Kubernetes, Plan, Tuning, apply};
use skyc_runtime::policy::{Engine, Status};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn plan(name: &str) -> Plan {
    let yaml = format!(
        "name: {name}\nexecution: parallel\nprimary_tasks: [trainer]\ntermination_delay: 30s\n---\n\
         name: trainer\nnum_nodes: 2\nresources:\n  job_recovery:\n    max_restarts_on_errors: 100000\nrun: train\n---\n\
         name: evaluator\nrun: evaluate\n"
    );
    let c = skyc_compiler::compile(
        "g.yaml",
        yaml.as_bytes(),
        &skyc_compiler::Options::default(),
    );
    let group = c.group.expect("a valid group");
    let options = skyc_targets::k8s::Options {
        namespace: Some(NS.to_owned()),
        ..Default::default()
    };
    Plan::new(
        &group,
        &options,
        NS,
        None,
        Duration::from_secs(5),
        &[],
        format!("run-{name}"),
    )
    .expect("lowers")
}

fn connect(fake: &Fake) -> Connect {
    let fake = fake.clone();
    Arc::new(move |_: &Plan| {
        let fake = fake.clone();
        Box::pin(async move {
            Ok(Cluster {
                client: kube::Client::new(fake, NS),
                server: "https://api.bench:6443".into(),
                namespace: NS.into(),
            })
        })
    })
}

fn tuning() -> Tuning {
    Tuning {
        backoff: Backoff {
            first: Duration::from_millis(5),
            max: Duration::from_millis(200),
            tries: 4,
        },
        logs: false,
    }
}

/// The supervisor's part: reports to engines, actions to the backend.
struct Supervisor {
    backend: Kubernetes,
    engines: BTreeMap<i64, Engine>,
}

impl Supervisor {
    /// Waits up to `wait` for the backend's fd, then hands over what it
    /// reported.
    fn turn(&mut self, wait: Duration) -> usize {
        let ready = {
            let fd = self.backend.wake_fd().expect("a wake fd");
            let mut fds = [PollFd::new(&fd, PollFlags::IN)];
            let timeout = Timespec {
                tv_sec: 0,
                tv_nsec: wait.as_nanos().min(999_999_999) as i64,
            };
            poll(&mut fds, Some(&timeout)).unwrap_or(0)
        };
        if ready == 0 {
            return 0;
        }
        let reports = self.backend.drain(0);
        let n = reports.len();
        for (gid, report) in reports {
            if let Report::Event { event, .. } = report {
                let engine = self.engines.get_mut(&gid).expect("a group");
                let actions = engine.handle(event);
                self.backend.execute(gid, engine, &actions);
            }
        }
        n
    }

    /// Turns until `done` or the time is up.
    fn until(&mut self, fake: &Fake, limit: Duration, done: impl Fn(&World, &Self) -> bool) {
        let end = Instant::now() + limit;
        while !done(&fake.world(), self) {
            assert!(Instant::now() < end, "timed out");
            self.turn(Duration::from_millis(2));
        }
    }
}

fn last_write(w: &World, since: usize, what: &str) -> Option<Instant> {
    w.requests[since..]
        .iter()
        .find(|r| r.method != "GET" && r.line().contains(what))
        .map(|r| r.at)
}

fn stats(name: &str, mut v: Vec<Duration>) {
    v.sort();
    let pick = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{name}: n={} median={:.2?} p90={:.2?} max={:.2?}",
        v.len(),
        pick(0.5),
        pick(0.9),
        v[v.len() - 1]
    );
}

fn latency(rounds: usize) {
    let fake = Fake::default();
    let p = plan("g");
    let mut s = Supervisor {
        backend: Kubernetes::start(std::env::temp_dir(), connect(&fake), tuning()).expect("starts"),
        engines: BTreeMap::new(),
    };
    let mut engine = Engine::new(p.spec.clone());
    let actions = engine.start();
    s.backend.adopt_plan(1, p.clone(), &engine, None);
    s.backend.execute(1, &engine, &actions);
    s.engines.insert(1, engine);
    s.until(&fake, Duration::from_secs(10), |w, _| {
        w.get("jobsets", "g").is_some()
    });
    let mut through_engine = Vec::new();
    let mut reconciler_only = Vec::new();
    for _ in 0..rounds {
        // JobSet makes the trainer's Jobs (again): how soon is the first
        // one annotated with its attempt?
        // (The old Jobs' deletion finishes first, so that this pass of the
        // JobSet controller only creates.)
        for _ in 0..10 {
            let mut w = fake.world();
            w.job_controller();
            w.kubelet();
        }
        let since = fake.world().requests.len();
        let t0 = Instant::now();
        fake.world().jobset_controller();
        s.until(&fake, Duration::from_secs(10), |w, _| {
            last_write(w, since, "g-trainer-1-0").is_some()
        });
        reconciler_only
            .push(last_write(&fake.world(), since, "skyc.io/attempt").expect("a bind") - t0);
        {
            let mut w = fake.world();
            w.reconcile_cluster();
            w.run_pending();
        }
        s.until(&fake, Duration::from_secs(10), |_, s| {
            s.engines[&1].task_status(0) == Status::Running
        });
        // A trainer pod fails: how soon is the other node stopped?
        let since = fake.world().requests.len();
        let t0 = Instant::now();
        {
            let mut w = fake.world();
            let pod = w.pod_of("g-trainer-0-0");
            w.exit(&pod, 1);
        }
        s.until(&fake, Duration::from_secs(10), |w, _| {
            last_write(w, since, "parallelism\":0").is_some()
        });
        through_engine
            .push(last_write(&fake.world(), since, "parallelism\":0").expect("a stop") - t0);
        s.until(&fake, Duration::from_secs(10), |w, _| {
            w.requests[since..]
                .iter()
                .filter(|r| r.line().contains("parallelism\":0"))
                .count()
                == 2
        });
        // The restart: pods go, then both Jobs are deleted.
        {
            let mut w = fake.world();
            w.job_controller();
            w.kubelet();
        }
        s.until(&fake, Duration::from_secs(10), |w, _| {
            w.requests[since..]
                .iter()
                .filter(|r| r.method == "DELETE")
                .count()
                == 2
        });
    }
    stats(
        "watch event -> request (through the engine: a failed pod, the stop)",
        through_engine,
    );
    stats(
        "watch event -> request (reconciler only: a new Job, its attempt)",
        reconciler_only,
    );
}

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn memory(groups: usize) {
    let fake = Fake::default();
    let plans: Vec<Plan> = (0..groups).map(|i| plan(&format!("g{i}"))).collect();
    {
        let mut w = fake.world();
        for p in &plans {
            for o in apply::prepare(p) {
                let resource = if o["kind"] == "JobSet" {
                    "jobsets"
                } else {
                    "configmaps"
                };
                w.put(resource, o);
            }
        }
        w.reconcile_cluster();
        for job in w.names("jobs") {
            w.update("jobs", &job, |j| {
                j["metadata"]["annotations"][ATTEMPT_ANNOTATION] = serde_json::json!("0");
            });
        }
        w.run_pending();
        w.requests.clear();
    }
    let before = rss_kb();
    let mut s = Supervisor {
        backend: Kubernetes::start(std::env::temp_dir(), connect(&fake), tuning()).expect("starts"),
        engines: BTreeMap::new(),
    };
    for (i, p) in plans.iter().enumerate() {
        let gid = i as i64 + 1;
        let mut engine = Engine::new(p.spec.clone());
        let actions = engine.start();
        s.backend.adopt_plan(gid, p.clone(), &engine, None);
        s.backend.execute(gid, &engine, &actions);
        s.engines.insert(gid, engine);
    }
    s.until(&fake, Duration::from_secs(120), |_, s| {
        s.engines
            .values()
            .all(|e| e.group_status() == Status::Running)
    });
    // Quiet for a while: every watch open, nothing in flight.
    let mut quiet = 0;
    while quiet < 20 {
        quiet = if s.turn(Duration::from_millis(10)) == 0 {
            quiet + 1
        } else {
            0
        };
    }
    fake.world().requests.clear();
    let after = rss_kb();
    println!(
        "memory: {groups} groups running (3 nodes each), {} KiB more resident, {:.0} KiB per group",
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / groups as f64
    );
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let rounds = args.first().copied().unwrap_or(30);
    let groups = args.get(1).copied().unwrap_or(200);
    latency(rounds);
    memory(groups);
}
