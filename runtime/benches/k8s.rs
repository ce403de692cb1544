//! The Kubernetes backend against the tests' fake API server (in this
//! process, no sockets), with the runtime creating one pod per node
//! attempt (`g-{task}-{rank}-{attempt}`):
//!
//! - latency: from a watch event to the first API request it causes,
//!   through the engine: a node's pod fails, and the other node's pod is
//!   deleted; the old attempt's pods are gone, and the restart is
//!   launched (the JobSet's `skyc.io/launched-{task}` annotation);
//! - scale: a group of 1,000 nodes (a task of 999 and one of 1): the
//!   time to create every pod, then, every pod running, the API requests
//!   per node per minute and the resident memory per node;
//! - memory: resident memory per supervised group, with N groups running;
//! - files: a 1,000-node group with a 64 MiB workdir: what crosses the
//!   API server (execs and their bytes, requests and their bytes per
//!   node) and the time from the start to the files pod filled and to
//!   every pod created.
//!
//! Each part runs in a process of its own, so that one's freed memory
//! does not hide the next one's. The fake API server runs in the same
//! process: resident memory counts its copies of the objects too.
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
use skyc_runtime::backend::{Backend, Report, Role};
use skyc_runtime::k8s::client::Cluster;
use skyc_runtime::k8s::exec::{Command as ExecCommand, ExecError, PodExec};
use skyc_runtime::k8s::{Connect, Kubernetes, LAUNCHED_ANNOTATION, Lowering, Plan, Tuning};
use skyc_runtime::policy::{Engine, Status};
use skyc_runtime::reconciler::backoff::Backoff;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A group of a primary task of `nodes` nodes and an evaluator of one.
fn plan(name: &str, nodes: u32) -> Plan {
    let yaml = format!(
        "name: {name}\nexecution: parallel\nprimary_tasks: [trainer]\ntermination_delay: 30s\n---\n\
         name: trainer\nnum_nodes: {nodes}\nresources:\n  job_recovery:\n    max_restarts_on_errors: 100000\nrun: train\n---\n\
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
        &Lowering {
            options: &options,
            namespace: NS,
            context: None,
            grace: Duration::from_secs(5),
            secrets: &[],
            token: format!("run-{name}"),
        },
    )
    .expect("lowers")
}

fn connect(fake: &Fake) -> Connect {
    let fake = fake.clone();
    Arc::new(move |_: &Plan| {
        let fake = fake.clone();
        Box::pin(async move {
            let client = kube::Client::new(fake, NS);
            Ok(Cluster {
                exec: std::sync::Arc::new(skyc_runtime::k8s::exec::KubeExec(client.clone())),
                client,
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
        // The production value: no pod is deleted at once here.
        ..Tuning::default()
    }
}

/// The supervisor's part: reports to engines, actions to the backend.
struct Supervisor {
    backend: Kubernetes,
    engines: BTreeMap<i64, Engine>,
}

impl Supervisor {
    fn new(fake: &Fake) -> Self {
        Self {
            backend: Kubernetes::start(std::env::temp_dir(), connect(fake), tuning())
                .expect("starts"),
            engines: BTreeMap::new(),
        }
    }

    /// A supervisor of the state directory `dir`, its commands in pods
    /// answered by `exec`.
    fn with(fake: &Fake, dir: &std::path::Path, exec: Arc<dyn PodExec>) -> Self {
        let fake = fake.clone();
        let connect: Connect = Arc::new(move |_: &Plan| {
            let fake = fake.clone();
            let exec = exec.clone();
            Box::pin(async move {
                Ok(Cluster {
                    exec,
                    client: kube::Client::new(fake, NS),
                    server: "https://api.bench:6443".into(),
                    namespace: NS.into(),
                })
            })
        });
        Self {
            backend: Kubernetes::start(dir.to_owned(), connect, tuning()).expect("starts"),
            engines: BTreeMap::new(),
        }
    }

    /// Takes the group on and starts its engine.
    fn start(&mut self, gid: i64, plan: &Plan) {
        let mut engine = Engine::new(plan.spec.clone());
        let actions = engine.start();
        self.backend
            .adopt_plan(gid, Role::Group, plan.clone(), &engine, None);
        self.backend.execute(gid, &engine, &actions);
        self.engines.insert(gid, engine);
    }

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
            if Instant::now() >= end {
                let w = fake.world();
                let last: Vec<String> =
                    w.requests.iter().rev().take(12).map(|r| r.line()).collect();
                panic!("timed out; the last requests, newest first: {last:#?}");
            }
            self.turn(Duration::from_millis(2));
        }
    }

    /// Turns until nothing was reported for `turns` turns of 10 ms.
    fn quiet(&mut self, turns: u32) {
        let mut quiet = 0;
        while quiet < turns {
            quiet = if self.turn(Duration::from_millis(10)) == 0 {
                quiet + 1
            } else {
                0
            };
        }
    }
}

/// When the first write since `since` whose line contains `what` arrived.
fn first_write(w: &World, since: usize, what: &str) -> Option<Instant> {
    w.requests[since..]
        .iter()
        .find(|r| r.method != "GET" && r.line().contains(what))
        .map(|r| r.at)
}

fn count_writes(w: &World, since: usize, method: &str) -> usize {
    w.requests[since..]
        .iter()
        .filter(|r| r.method == method)
        .count()
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
    let p = plan("g", 2);
    let mut s = Supervisor::new(&fake);
    s.start(1, &p);
    let pods = |attempt: u32| [p.pod_of(0, 0, attempt), p.pod_of(0, 1, attempt)];
    s.until(&fake, Duration::from_secs(10), |w, _| {
        w.created_pods().len() == 3
    });
    {
        let mut w = fake.world();
        w.reconcile_cluster();
        w.run_pending();
    }
    s.until(&fake, Duration::from_secs(10), |_, s| {
        s.engines[&1].task_status(0) == Status::Running
    });
    let launch = format!("{LAUNCHED_ANNOTATION}0");
    let mut stop = Vec::new();
    let mut relaunch = Vec::new();
    for attempt in 0..rounds as u32 {
        let [failed, other] = pods(attempt);
        s.quiet(5);
        // A trainer pod fails: how soon is the other node's pod deleted?
        let since = fake.world().requests.len();
        let t0 = Instant::now();
        fake.world().exit(&failed, 1);
        let other_path = format!("/pods/{other}");
        s.until(&fake, Duration::from_secs(10), |w, _| {
            first_write(w, since, &other_path).is_some()
        });
        stop.push(first_write(&fake.world(), since, &other_path).expect("a stop") - t0);
        // The other node ends (SIGTERM); the restart then deletes the
        // failed pod too.
        fake.world().kubelet();
        s.until(&fake, Duration::from_secs(10), |w, _| {
            count_writes(w, since, "DELETE") == 2
        });
        s.quiet(5);
        // The last old pod goes: how soon is the restart launched?
        let since = fake.world().requests.len();
        let t0 = Instant::now();
        fake.world().kubelet();
        s.until(&fake, Duration::from_secs(10), |w, _| {
            first_write(w, since, &launch).is_some()
        });
        relaunch.push(first_write(&fake.world(), since, &launch).expect("a launch") - t0);
        let [a, b] = pods(attempt + 1);
        s.until(&fake, Duration::from_secs(10), |w, _| {
            w.get("pods", &a).is_some() && w.get("pods", &b).is_some()
        });
        fake.world().run_pending();
        s.until(&fake, Duration::from_secs(10), |_, s| {
            s.engines[&1].task_status(0) == Status::Running
        });
    }
    stats(
        "latency: pod failed event -> DELETE of the other node's pod",
        stop,
    );
    stats(
        "latency: last old pod gone event -> launch PATCH of the restart",
        relaunch,
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

const NODES: u32 = 1000;

fn scale() {
    // Creation: from nothing to every pod created.
    {
        let fake = Fake::default();
        let p = plan("big", NODES - 1);
        let mut s = Supervisor::new(&fake);
        let t0 = Instant::now();
        s.start(1, &p);
        s.until(&fake, Duration::from_secs(300), |w, _| {
            w.created_pods().len() == NODES as usize
        });
        let created = fake
            .world()
            .requests
            .iter()
            .rfind(|r| r.method == "POST" && r.path.ends_with("/pods"))
            .expect("a pod")
            .at
            - t0;
        println!("scale: {NODES} nodes, start -> every pod created: {created:.2?}");
    }
    // Steady state: every pod running, nothing happening. (The fake
    // API server is in this process: its copies of the objects are
    // counted too, so the memory is an upper bound.)
    let fake = Fake::default();
    let p = plan("big", NODES - 1);
    let before = rss_kb();
    let mut s = Supervisor::new(&fake);
    s.start(1, &p);
    s.until(&fake, Duration::from_secs(300), |w, _| {
        w.created_pods().len() == NODES as usize
    });
    {
        let mut w = fake.world();
        w.reconcile_cluster();
        w.run_pending();
    }
    s.until(&fake, Duration::from_secs(300), |_, s| {
        s.engines[&1].group_status() == Status::Running
    });
    s.quiet(50);
    let window = Duration::from_secs(5);
    let since = fake.world().requests.len();
    let end = Instant::now() + window;
    while Instant::now() < end {
        s.turn(Duration::from_millis(10));
    }
    let after = rss_kb();
    let (watches, other) = {
        let w = fake.world();
        let seen = &w.requests[since..];
        let watches = seen.iter().filter(|r| r.query.contains("watch=")).count();
        (watches, seen.len() - watches)
    };
    let per = |n: usize| n as f64 * 60.0 / window.as_secs_f64() / f64::from(NODES);
    println!(
        "scale: {NODES} nodes running, quiet {window:.0?}: {:.3} API requests per node per minute \
         ({watches} watch opens, {other} others)",
        per(watches + other)
    );
    println!(
        "scale: {NODES} nodes running: {} KiB more resident, {:.1} KiB per node",
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / f64::from(NODES)
    );
}

/// The files pod's execs, answered at once: counted, with their input.
#[derive(Default)]
struct Sink(std::sync::Mutex<(usize, usize)>);

impl PodExec for Sink {
    fn exec(
        &self,
        _namespace: &str,
        _pod: &str,
        command: ExecCommand,
    ) -> futures::future::BoxFuture<'static, Result<String, ExecError>> {
        let mut n = self.0.lock().unwrap();
        n.0 += 1;
        n.1 += command.stdin.as_ref().map_or(0, Vec::len);
        Box::pin(async { Ok(String::new()) })
    }
}

fn files() {
    let dir = std::env::temp_dir().join(format!("skyc-bench-k8s-files-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("work")).expect("src");
    // 64 files of 1 MiB, each different.
    for i in 0..64u32 {
        let bytes: Vec<u8> = (0..1u32 << 20)
            .map(|j| (j.wrapping_mul(2_654_435_761) ^ i) as u8)
            .collect();
        std::fs::write(src.join(format!("work/shard-{i}.bin")), bytes).expect("write");
    }
    let yaml = format!(
        "name: big\nexecution: parallel\n---\nname: trainer\nnum_nodes: {NODES}\nworkdir: ./work\nrun: train\n"
    );
    let c = skyc_compiler::compile(
        "g.yaml",
        yaml.as_bytes(),
        &skyc_compiler::Options::default(),
    );
    let group = c.group.expect("a valid group");
    let snapshots = skyc_runtime::files::Snapshots::of(&dir);
    let writing = snapshots.writing().expect("lock");
    let mut quiet = |_, _| {};
    let (taken, _) = skyc_runtime::files::take::take(
        &group,
        &mut skyc_runtime::files::take::Taking {
            cwd: &src,
            home: None,
            into: Some((&snapshots, &writing)),
            limit_bytes: 1 << 30,
            progress: &mut quiet,
            mount_buckets: skyc_runtime::files::take::Mounting::No,
            submitting: false,
        },
    );
    let t_pack = Instant::now();
    let packs = skyc_runtime::k8s::files::packs(&taken.tasks, &snapshots, false).expect("packs");
    let packing = t_pack.elapsed();
    let options = skyc_targets::k8s::Options {
        namespace: Some(NS.to_owned()),
        files: Some(packs),
        ..Default::default()
    };
    let p = Plan::new(
        &group,
        &Lowering {
            options: &options,
            namespace: NS,
            context: None,
            grace: Duration::from_secs(5),
            secrets: &[],
            token: "run-files".into(),
        },
    )
    .expect("lowers");
    let stream = p.files[0].bytes;
    let fake = Fake::default();
    let sink = Arc::new(Sink::default());
    let mut s = Supervisor::with(&fake, &dir, sink.clone());
    let t0 = Instant::now();
    s.start(1, &p);
    s.until(&fake, Duration::from_secs(300), |w, _| {
        w.get("pods", "big-skyc-files").is_some()
    });
    fake.world().run("big-skyc-files");
    s.until(&fake, Duration::from_secs(300), |w, _| {
        w.created_pods().len() == NODES as usize + 1
    });
    let w = fake.world();
    let filled = w
        .requests
        .iter()
        .find(|r| r.method == "PATCH" && r.path.ends_with("/pods/big-skyc-files"))
        .expect("the filled mark")
        .at
        - t0;
    let created = w
        .requests
        .iter()
        .rfind(|r| r.method == "POST" && r.path.ends_with("/pods"))
        .expect("a pod")
        .at
        - t0;
    let bytes: usize = w
        .requests
        .iter()
        .map(|r| r.body.as_ref().map_or(0, |b| b.to_string().len()))
        .sum();
    let (execs, exec_bytes) = *sink.0.lock().unwrap();
    println!(
        "files: {NODES} nodes, a {:.1} MiB stream (digested in {packing:.2?}): {execs} execs carrying {:.1} MiB, once; start -> files pod filled {filled:.2?}, -> every pod created {created:.2?}",
        stream as f64 / f64::from(1u32 << 20),
        exec_bytes as f64 / f64::from(1u32 << 20),
    );
    println!(
        "files: {:.2} API requests per node ({} in all), {:.1} KiB of request bodies per node",
        w.requests.len() as f64 / f64::from(NODES),
        w.requests.len(),
        bytes as f64 / 1024.0 / f64::from(NODES)
    );
    drop(w);
    let _ = std::fs::remove_dir_all(&dir);
}

fn memory(groups: usize) {
    let fake = Fake::default();
    let plans: Vec<Plan> = (0..groups).map(|i| plan(&format!("g{i}"), 2)).collect();
    // (The fake API server's copies of the objects are counted too: an
    // upper bound.)
    let before = rss_kb();
    let mut s = Supervisor::new(&fake);
    for (i, p) in plans.iter().enumerate() {
        s.start(i as i64 + 1, p);
    }
    s.until(&fake, Duration::from_secs(120), |w, _| {
        w.created_pods().len() == 3 * groups
    });
    {
        let mut w = fake.world();
        w.reconcile_cluster();
        w.run_pending();
    }
    s.until(&fake, Duration::from_secs(120), |_, s| {
        s.engines
            .values()
            .all(|e| e.group_status() == Status::Running)
    });
    // Quiet for a while: every watch open, nothing in flight.
    s.quiet(20);
    fake.world().requests.clear();
    let after = rss_kb();
    println!(
        "memory: {groups} groups running (3 nodes each), {} KiB more resident, {:.0} KiB per group",
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / groups as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let numbers: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let rounds = numbers.first().copied().unwrap_or(30);
    let groups = numbers.get(1).copied().unwrap_or(200);
    let part = args
        .iter()
        .find_map(|a| a.strip_prefix("--part="))
        .map(str::to_owned);
    match part.as_deref() {
        Some("latency") => latency(rounds),
        Some("scale") => scale(),
        Some("memory") => memory(groups),
        Some("files") => files(),
        Some(other) => panic!("no part {other}"),
        None => {
            let me = std::env::current_exe().expect("this program");
            for part in ["latency", "scale", "memory", "files"] {
                let status = std::process::Command::new(&me)
                    .arg(format!("--part={part}"))
                    .arg(rounds.to_string())
                    .arg(groups.to_string())
                    .status()
                    .expect("runs");
                assert!(status.success(), "{part} failed");
            }
        }
    }
}
