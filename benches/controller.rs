//! skyc's controller, measured against the fake API server on a loopback
//! port (`skyc_runtime::k8s::FakeCluster`, the runtime's `fake-cluster`
//! feature), in processes of its own so that the fake's copies of the
//! objects are not counted:
//!
//! - **memory per supervised node**: a replica of the controller (a child
//!   process running `controller::serve_in_cluster`, the code
//!   `skyc controller serve` runs, its client speaking HTTP to the fake)
//!   leads, then supervises a group of 1,000 nodes (999 trainers and an
//!   evaluator) until every node runs; its resident memory (and PSS)
//!   before and after, per node. Goal: ≤ 20 KiB per node;
//! - **`status` of 1,000 groups through the API**: `skyc status
//!   --state-dir k8s://team`, the whole client process (its kubeconfig,
//!   the Lease, the exec in the controller's pod, the controller's skyc
//!   listing 1,000 groups of 2 tasks, the table streamed back), beside
//!   `skyc status` of the same state directory on this machine. Goal:
//!   ≤ 50 ms.
//!
//! `cargo bench --bench controller [-- ROUNDS]` (default 20 rounds).

use skyc_runtime::k8s::{FakeCluster, Lowering, Plan};
use skyc_runtime::store::{Backend, NewGroup, NewTask, Store};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NODES: u32 = 1000;
const GROUPS: usize = 1000;
const POD: &str = "skyc-controller-0";

fn skyc() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_skyc"))
}

/// A group of a primary task of `nodes` nodes and an evaluator of one,
/// planned as `skyc run --target k8s` plans it.
fn plan(name: &str, nodes: u32) -> Plan {
    let yaml = format!(
        "name: {name}\nexecution: parallel\nprimary_tasks: [trainer]\ntermination_delay: 30s\n---\n\
         name: trainer\nnum_nodes: {nodes}\nrun: train\n---\nname: evaluator\nrun: evaluate\n"
    );
    let c = skyc_compiler::compile(
        "g.yaml",
        yaml.as_bytes(),
        &skyc_compiler::Options::default(),
    );
    let group = c.group.expect("a valid group");
    let options = skyc_targets::k8s::Options {
        namespace: Some("team".to_owned()),
        ..Default::default()
    };
    Plan::new(
        &group,
        &Lowering {
            options: &options,
            namespace: "team",
            context: None,
            grace: Duration::from_secs(5),
            secrets: &[],
            token: format!("run-{name}"),
        },
    )
    .expect("lowers")
}

fn insert(store: &mut Store, name: &str, plan: &Plan) -> i64 {
    store
        .insert_group(&NewGroup {
            name,
            source: "g.yaml",
            submitted_at_ms: skyc_runtime::store::now_ms(),
            plan: &serde_json::to_string(plan).expect("a plan"),
            backend: Backend::Kubernetes,
            snapshots: &[],
            buckets: &[],
            tasks: plan
                .spec
                .tasks
                .iter()
                .map(|t| NewTask {
                    name: &t.name,
                    primary: t.primary,
                    num_nodes: t.num_nodes,
                })
                .collect(),
        })
        .expect("recorded")
}

/// `VmRSS` and `Pss` of process `pid`, in KiB.
fn memory_kb(pid: u32) -> (u64, u64) {
    let field = |file: &str, name: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/{file}"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with(name))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            })
            .unwrap_or(0)
    };
    (field("status", "VmRSS:"), field("smaps_rollup", "Pss:"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("skyc-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

fn wait(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not reached");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The child: a replica of the controller of `dir`, its client the
/// fake's at `url`, its pods' logs read when `logs`, until SIGTERM.
fn replica(url: &str, dir: &Path, logs: bool) {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    let mut config = kube::Config::new(url.parse().expect("a URL"));
    config.default_namespace = "team".into();
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&stop)).expect("SIGTERM");
    let replica = skyc_runtime::controller::Replica {
        identity: POD.into(),
        lease: skyc_targets::k8s::controller::LEASE.into(),
        timing: skyc_runtime::k8s::lease::Timing::default(),
    };
    let tuning = skyc_runtime::k8s::Tuning {
        logs,
        ..skyc_runtime::k8s::Tuning::default()
    };
    skyc_runtime::controller::serve_in_cluster(dir, config, &replica, tuning, stop)
        .expect("served");
}

/// `logs`: the pods' logs read into the state directory (as the
/// controller does); else not, to tell their part.
fn memory(logs: bool) {
    let cluster = FakeCluster::start();
    let dir = scratch("controller-memory");
    cluster.controller_pod(POD, skyc(), &dir);
    let mut child = Command::new(std::env::current_exe().expect("this bench"))
        .args(["--part=replica", cluster.url()])
        .arg(&dir)
        .arg(if logs { "logs" } else { "no-logs" })
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the replica");
    wait("the replica leads", Duration::from_secs(60), || {
        cluster.leader().as_deref() == Some(POD)
    });
    std::thread::sleep(Duration::from_secs(2));
    let (rss0, pss0) = memory_kb(child.id());
    let mut store = Store::open(&dir).expect("the store");
    let gid = insert(&mut store, "big", &plan("big", NODES - 1));
    let _ = skyc_runtime::supervisor::poke(&dir);
    let t0 = Instant::now();
    wait("every pod running", Duration::from_secs(600), || {
        cluster.running_pods() >= NODES as usize
    });
    let running = t0.elapsed();
    wait("every task running", Duration::from_secs(300), || {
        store
            .tasks(gid)
            .is_ok_and(|t| t.iter().all(|t| t.status == "RUNNING"))
    });
    // Settled: its caches filled, nothing happening.
    std::thread::sleep(Duration::from_secs(5));
    let (rss1, pss1) = memory_kb(child.id());
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    );
    let _ = child.wait();
    let how = if logs {
        "their logs read"
    } else {
        "no logs read"
    };
    println!("memory ({how}): {NODES} nodes running {running:.1?} after the group was recorded");
    println!(
        "memory ({how}): the controller's replica: {rss0} KiB resident leading idle, {rss1} KiB \
         supervising {NODES} nodes: {:.1} KiB per node (PSS {pss0} -> {pss1} KiB: {:.1} KiB per node)",
        rss1.saturating_sub(rss0) as f64 / f64::from(NODES),
        pss1.saturating_sub(pss0) as f64 / f64::from(NODES),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn status(rounds: usize) {
    let cluster = FakeCluster::start();
    let dir = scratch("controller-status");
    {
        let mut store = Store::open(&dir).expect("the store");
        let small = plan("g", 2);
        for i in 0..GROUPS {
            let gid = insert(&mut store, &format!("g{i}"), &small);
            store
                .transaction(|tx| {
                    tx.set_group_status(gid, "SUCCEEDED")?;
                    tx.finish_group(gid, skyc_runtime::store::now_ms())
                })
                .expect("finished");
        }
    }
    cluster.controller_pod(POD, skyc(), &dir);
    cluster.hold_lease(POD);
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, cluster.kubeconfig()).expect("a kubeconfig");
    let time = |state: &str| -> Vec<Duration> {
        (0..rounds)
            .map(|_| {
                let t0 = Instant::now();
                let out = Command::new(skyc())
                    .args(["status", "--all", "--state-dir", state])
                    .env("KUBECONFIG", &kubeconfig)
                    .output()
                    .expect("skyc status");
                let took = t0.elapsed();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let lines = out.stdout.iter().filter(|b| **b == b'\n').count();
                assert!(lines > GROUPS, "{lines} lines: not every group listed");
                took
            })
            .collect()
    };
    let remote = time("k8s://team");
    let local = time(&dir.to_string_lossy());
    stats(
        &format!(
            "status: {GROUPS} groups through the controller (skyc status --state-dir k8s://team)"
        ),
        remote,
    );
    stats(
        &format!("status: {GROUPS} groups of a local state directory"),
        local,
    );
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

fn stats(what: &str, mut times: Vec<Duration>) {
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    println!(
        "{what}: median {:.1?}, p90 {:.1?}, min {:.1?}, max {:.1?} ({} rounds)",
        at(0.5),
        at(0.9),
        times[0],
        times[times.len() - 1],
        times.len()
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--part=replica") {
        replica(&args[1], Path::new(&args[2]), args[3] == "logs");
        return;
    }
    // `cargo bench` passes `--bench`; a number is the rounds.
    let rounds = args.iter().find_map(|a| a.parse().ok()).unwrap_or(20usize);
    status(rounds);
    memory(true);
    memory(false);
}
