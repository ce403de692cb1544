//! The command line as the controller's client (`--state-dir k8s://NS`):
//! the skyc binary under test, against the fake API server on a loopback
//! port (`skyc_runtime::k8s::FakeCluster`, the `fake-cluster` feature),
//! whose controller replica runs in this test process, fenced by its
//! Lease, and whose controller pod's `pods/exec` runs the same binary on
//! the controller's state directory. The group's pods are the fake's:
//! they run until the test ends them, as the cluster's would.
//!
//! What is asserted is what the user sees (each command's output and exit
//! status) and what the controller ends up with: the group recorded
//! there, its workdir's bytes in the controller's state, the group ended
//! as the engine decides with no client left running, no pod made twice.
//!
//! Not covered: TLS, the API server's authentication and its exec proxy
//! through a kubelet (the front runs the command itself), the controller
//! as a pod of its own.

use crate::support::scratch::{Scratch, text};
use serde_json::Value;
use skyc_runtime::k8s::FakeCluster;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const STATE: &str = "k8s://team";

const GROUP: &str = "\
name: g
execution: parallel
primary_tasks: [trainer]
termination_delay: 1s
---
name: trainer
workdir: ./work
run: python train.py
---
name: buffer
run: sleep 1000
";

struct Client {
    scratch: Scratch,
    kubeconfig: PathBuf,
    cluster: FakeCluster,
    /// The controller's claim.
    state: PathBuf,
}

impl Client {
    fn new(name: &str) -> Self {
        let scratch = Scratch::new(name);
        let mut cluster = FakeCluster::start();
        let kubeconfig = scratch.write("kubeconfig", &cluster.kubeconfig());
        let state = scratch.dir.join("controller-state");
        std::fs::create_dir_all(&state).unwrap();
        cluster.controller(
            "skyc-controller-0",
            Path::new(env!("CARGO_BIN_EXE_skyc")),
            &state,
        );
        Self {
            scratch,
            kubeconfig,
            cluster,
            state,
        }
    }

    /// `skyc ARGS --state-dir k8s://team`, as the user's machine runs it.
    fn skyc(&self, args: &[&str]) -> Command {
        let mut cmd = crate::support::skyc();
        cmd.args(args)
            .args(["--state-dir", STATE])
            .current_dir(&self.scratch.dir)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("XDG_STATE_HOME", self.scratch.dir.join("laptop"))
            .env_remove("SKYC_STATE_DIR");
        cmd
    }

    fn output(&self, args: &[&str]) -> Output {
        self.skyc(args).output().expect("skyc")
    }

    fn status(&self, gid: i64) -> Value {
        let out = self.output(&["status", &gid.to_string(), "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).expect("status JSON")[0].clone()
    }

    fn wait(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "{what}: not reached");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Group [`GROUP`], named `name`, submitted detached.
    fn submit(&self, extra: &[&str], name: &str) -> i64 {
        let file = self.scratch.write(
            &format!("{name}.yaml"),
            &GROUP.replacen("name: g\n", &format!("name: {name}\n"), 1),
        );
        let mut args = vec!["run", file.to_str().unwrap(), "--target", "k8s", "-d"];
        args.extend_from_slice(extra);
        let out = self.output(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().parse().expect("a group id")
    }

    /// The snapshots the controller holds.
    fn snapshots(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.state.join("files"))
            .unwrap()
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .collect()
    }

    /// The processes that run a client's command on the controller.
    fn answering(&self) -> usize {
        let me = env!("CARGO_BIN_EXE_skyc");
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| {
                std::fs::read(e.ok()?.path().join("cmdline"))
                    .ok()
                    .filter(|c| c.starts_with(me.as_bytes()))
            })
            .filter(|c| {
                let c = String::from_utf8_lossy(c);
                c.contains("answer") && c.contains(&*self.state.to_string_lossy())
            })
            .count()
    }
}

#[test]
fn a_group_submitted_through_the_controller_ends_as_the_engine_decides_without_its_client() {
    let c = Client::new("k8s-client");
    std::fs::create_dir_all(c.scratch.dir.join("work")).unwrap();
    c.scratch
        .write("work/train.py", "print('bytes from the laptop')\n");
    let gid = c.submit(&[], "g");
    // The client has exited: nothing of the submitting side runs. The
    // controller recorded the group, and holds the workdir's bytes.
    let status = c.status(gid);
    assert_eq!(status["name"], "g", "{status:#}");
    let files = c.snapshots();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(
        std::fs::read_to_string(files[0].join("train.py")).unwrap(),
        "print('bytes from the laptop')\n"
    );
    // Another group from the same workdir while the first is live: the
    // snapshot is not sent again (the controller holds it).
    let again = c.submit(&["-n", "again"], "g2");
    let sent: Vec<String> = c
        .cluster
        .execs()
        .into_iter()
        .filter(|(argv, _)| argv.iter().any(|a| a == "accept"))
        .map(|(_, input)| String::from_utf8_lossy(&input).into_owned())
        .collect();
    assert_eq!(sent.len(), 2, "two submissions");
    assert!(sent[0].contains("\nsnapshot "), "the first sends it");
    assert!(
        !sent[1].contains("\nsnapshot ") && sent[1].ends_with("\nend\n"),
        "the second does not: {}",
        sent[1]
    );
    let out = c.output(&["cancel", &again.to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait("every task running", || {
        c.cluster.running("g-trainer-0-0") && c.cluster.running("g-buffer-0-0")
    });
    // `skyc logs` follows the group through the controller until it ends.
    let follower = c
        .skyc(&["logs", &gid.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.cluster
        .exit("g-trainer-0-0", "trained on the cluster\n", 0);
    // The primary ended: the auxiliary is stopped after its delay.
    c.wait("the group ended", || {
        !c.status(gid)["finished_at_ms"].is_null()
    });
    let status = c.status(gid);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    let tasks: Vec<&str> = status["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["SUCCEEDED", "CANCELLED"], "{status:#}");
    let followed = follower.wait_with_output().unwrap();
    assert_eq!(
        followed.status.code(),
        Some(0),
        "{}",
        text(&followed.stderr)
    );
    assert!(
        text(&followed.stdout).contains("(trainer-0) trained on the cluster"),
        "{}",
        text(&followed.stdout)
    );
    assert!(
        !c.cluster.running("g-buffer-0-0"),
        "the auxiliary was stopped"
    );
    let created: Vec<String> = c
        .cluster
        .created_pods()
        .into_iter()
        .filter(|p| p.starts_with("g-"))
        .collect();
    assert_eq!(
        created,
        ["g-skyc-files", "g-trainer-0-0", "g-buffer-0-0"],
        "no pod made twice"
    );
    let again = c.status(again);
    assert_eq!(again["status"], "CANCELLED", "{again:#}");
    // The same table as a local state directory prints.
    let table = c.output(&["status"]);
    assert!(table.status.success(), "{}", text(&table.stderr));
    let table = text(&table.stdout);
    assert!(
        table.lines().next().unwrap_or("").starts_with("ID"),
        "{table}"
    );
    assert!(table.contains("SUCCEEDED"), "{table}");
}

#[test]
fn cancel_and_a_client_gone_leave_nothing_running_on_the_controller() {
    let c = Client::new("k8s-client-cancel");
    let file = c.scratch.write(
        "sleepy.yaml",
        "name: s\nexecution: parallel\n---\nname: a\nrun: sleep 1000\n",
    );
    // Followed, then the client killed: the group goes on, and the
    // command the controller ran for it ends with its session.
    let mut run = c
        .skyc(&["run", file.to_str().unwrap(), "--target", "k8s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.wait("the pod running", || c.cluster.running("s-a-0-0"));
    c.wait("the client following", || c.answering() == 1);
    run.kill().unwrap();
    let _ = run.wait();
    c.wait("the answer ended with its client", || c.answering() == 0);
    let listed = c.output(&["status", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let gid = listed[0]["id"].as_i64().expect("the group listed");
    assert_eq!(listed[0]["status"], "RUNNING", "{listed:#}");
    // A user who may not read the Lease (`skyc-runner` does not grant
    // it) reaches a running pod of the controller all the same.
    c.cluster.fail("GET", "/leases/", 403, 2);
    let out = c.output(&["status", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let again: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again[0]["id"], gid);
    let out = c.output(&["logs", "--controller"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The dashboard served here reads the controller's state: the group
    // listed, its nodes, its log; its cancel button cancels there.
    c.cluster.log("s-a-0-0", "a line from the pod\n");
    let d = crate::dashboard::Dashboard::spawned(c.skyc(&["dashboard", "--port", "0"]));
    let list = d.json("/api/groups");
    assert_eq!(list["groups"][0]["id"], gid, "{list:#}");
    assert_eq!(list["groups"][0]["status"], "RUNNING", "{list:#}");
    let one = d.json(&format!("/api/groups/{gid}"));
    assert_eq!(one["group"]["tasks"][0]["name"], "a", "{one:#}");
    assert_eq!(d.json("/api/pools")["pools"], Value::Array(vec![]));
    let page = d.request("GET", &format!("/?token={}", d.token), &[]);
    assert_eq!(page.status, 200);
    let csp = page
        .headers
        .iter()
        .find(|(k, _)| k == "content-security-policy")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let nonce = csp
        .split("'nonce-")
        .nth(1)
        .and_then(|n| n.split('\'').next())
        .expect("a nonce");
    assert!(
        text(&page.body).contains(&format!("nonce=\"{nonce}\"")),
        "the page's scripts carry the nonce its policy names"
    );
    assert_eq!(d.get("/api/groups").status, 200);
    assert_eq!(
        d.request("GET", "/api/groups", &[]).status,
        401,
        "the token is still this machine's"
    );
    c.wait("the pod's log through the controller", || {
        let log = d.get(&format!("/api/groups/{gid}/log?task=0&rank=0"));
        log.status == 200 && text(&log.body).contains("a line from the pod")
    });
    assert_eq!(d.get("/api/groups/999/log?task=0&rank=0").status, 404);
    // Cancelled through the controller, by the page's button.
    let origin = format!("http://{}", d.addr);
    let cancel = d.request(
        "POST",
        &format!("/api/groups/{gid}/cancel"),
        &[("X-Skyc-Token", &d.token), ("Origin", &origin)],
    );
    assert_eq!(cancel.status, 202, "{}", text(&cancel.body));
    // The page's token is this machine's: never in what the controller ran.
    let execs = c.cluster.execs();
    assert!(
        execs
            .iter()
            .any(|(argv, _)| argv.iter().any(|a| a == "--answer")),
        "the page's requests were answered there"
    );
    assert!(
        execs
            .iter()
            .all(|(argv, input)| !argv.iter().any(|a| a.contains(&d.token))
                && !String::from_utf8_lossy(input).contains(&d.token)),
        "the token stays here"
    );
    c.wait("the group ended", || {
        !c.status(gid)["finished_at_ms"].is_null()
    });
    assert_eq!(c.status(gid)["status"], "CANCELLED");
    c.wait("its pod gone", || !c.cluster.running("s-a-0-0"));
    // The controller's own log: its leading pod's.
    c.cluster
        .log("skyc-controller-0", "[1] leading as skyc-controller-0\n");
    let out = c.output(&["logs", "--controller"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "[1] leading as skyc-controller-0\n");
    // What does not go through a controller says so.
    let out = c.output(&[
        "run",
        file.to_str().unwrap(),
        "--target",
        "k8s",
        "--num-jobs",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("without `--pool` runs its jobs on this machine"),
        "{}",
        text(&out.stderr)
    );
    let out = c.output(&["run", file.to_str().unwrap(), "--target", "local"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("runs groups of --target k8s"),
        "{}",
        text(&out.stderr)
    );
    let out = c.output(&["volume", "ls"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("does not act through a controller"),
        "{}",
        text(&out.stderr)
    );
}

const POOL: &str = "\
name: w
workdir: ./pooled
setup: pip install -r requirements.txt
pool:
  workers: 2
";

const JOB: &str = "name: train\nrun: echo rank $SKYPILOT_JOB_RANK\n";

impl Client {
    /// The pool's workers' pods, made ready as their setup ends, until
    /// `n` run ready; their names.
    fn ready_workers(&self, n: usize) -> Vec<String> {
        let mut ready = Vec::new();
        self.wait("the workers ready", || {
            ready = self
                .cluster
                .pods()
                .into_iter()
                .filter(|p| {
                    p.starts_with("trainers-") && !p.contains("-skyc-") && self.cluster.running(p)
                })
                .collect();
            for pod in &ready {
                self.cluster.ready(pod);
            }
            let out = self.output(&["pool", "status", "--json"]);
            let pools: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            pools[0]["workers"]
                .as_array()
                .is_some_and(|w| w.iter().filter(|w| w["status"] == "READY").count() == n)
        });
        ready
    }

    /// The group ids `out` printed, a line each.
    fn ids(out: &Output) -> Vec<i64> {
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
            .lines()
            .map(|l| l.trim().parse().expect("an id"))
            .collect()
    }
}

/// A pool applied through the controller (its workdir's bytes sent to
/// it), ranked jobs submitted to it, detached and followed, each run
/// once in a worker, and the pool taken down: every command the client's,
/// the pool and its jobs the controller's.
#[test]
fn a_pool_and_its_jobs_go_through_the_controller() {
    let c = Client::new("k8s-client-pool");
    std::fs::create_dir_all(c.scratch.dir.join("pooled")).unwrap();
    c.scratch.write("pooled/requirements.txt", "torch==2.4.0\n");
    let pool = c.scratch.write("pool.yaml", POOL);
    let job = c.scratch.write("job.yaml", JOB);
    let out = c.output(&[
        "pool",
        "apply",
        "-p",
        "trainers",
        pool.to_str().unwrap(),
        "--target",
        "k8s",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("pool `trainers` created"),
        "{}",
        text(&out.stderr)
    );
    // The pool's files are the controller's: its workdir's very bytes.
    let held = c.snapshots();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(
        std::fs::read_to_string(held[0].join("requirements.txt")).unwrap(),
        "torch==2.4.0\n"
    );
    let workers = c.ready_workers(2);
    assert_eq!(workers.len(), 2, "{workers:?}");
    // Jobs are planned here against the pool the controller holds.
    let out = c.output(&["run", "--pool", "nope", job.to_str().unwrap(), "-d"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no pool named `nope`"),
        "{}",
        text(&out.stderr)
    );
    let ids = Client::ids(&c.output(&[
        "run",
        "--pool",
        "trainers",
        "--num-jobs",
        "2",
        job.to_str().unwrap(),
        "-d",
    ]));
    assert_eq!(ids.len(), 2);
    let mut running = Vec::new();
    c.wait("both jobs running in the workers", || {
        running = c.cluster.running_jobs();
        running.len() == 2
    });
    let ranks: Vec<&str> = running.iter().map(|(_, r)| r.as_str()).collect();
    let mut sorted = ranks.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["0", "1"], "{running:?}");
    assert_ne!(running[0].0, running[1].0, "a worker each: {running:?}");
    for (pod, rank) in &running {
        let id = ids[rank.parse::<usize>().unwrap()];
        c.cluster.job_exits(pod, id, 0);
    }
    for id in &ids {
        c.wait("the job ended", || {
            !c.status(*id)["finished_at_ms"].is_null()
        });
        assert_eq!(c.status(*id)["status"], "SUCCEEDED");
    }
    // Followed through the controller until it ends: its status as it
    // goes, its exit status the job's.
    let follower = c
        .skyc(&["run", "--pool", "trainers", job.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    c.wait("the third job running", || {
        c.cluster.running_jobs().len() == 1
    });
    let (pod, rank) = c.cluster.running_jobs().remove(0);
    assert_eq!(rank, "0");
    let listed = c.output(&["status", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let third = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["id"].as_i64())
        .max()
        .unwrap();
    assert!(!ids.contains(&third));
    c.cluster.job_exits(&pod, third, 0);
    let followed = follower.wait_with_output().unwrap();
    let err = text(&followed.stderr);
    assert_eq!(followed.status.code(), Some(0), "{err}");
    assert!(err.contains("1 job submitted to pool `trainers`"), "{err}");
    assert!(err.contains("SUCCEEDED"), "{err}");
    assert_eq!(c.cluster.started_jobs(), 3, "no job started twice");
    // Resized and taken down through it.
    let out = c.output(&["pool", "apply", "-p", "trainers", "--workers", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait("the pool resized", || {
        let out = c.output(&["pool", "status", "--json"]);
        let pools: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        pools[0]["target_workers"] == 1
    });
    let out = c.output(&["pool", "down", "trainers"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    c.wait("the workers gone", || {
        c.cluster.pods().iter().all(|p| !p.starts_with("trainers-"))
    });
    c.wait("the pool down", || {
        let out = c.output(&["pool", "status", "--json"]);
        text(&out.stdout).trim() == "[]"
    });
    let made: Vec<String> = c
        .cluster
        .created_pods()
        .into_iter()
        .filter(|p| p.starts_with("trainers-"))
        .collect();
    let unique: std::collections::BTreeSet<&String> = made.iter().collect();
    assert_eq!(made.len(), unique.len(), "no pod made twice: {made:?}");
}

#[test]
fn a_state_dir_that_names_no_controller_is_refused() {
    let s = Scratch::new("k8s-client-none");
    let out = crate::support::skyc()
        .args(["status", "--state-dir", "k8s://Not_A_Namespace"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("k8s://NAMESPACE[@CONTEXT]"),
        "{}",
        text(&out.stderr)
    );
    // A cluster without a controller: said, and how to make one.
    let cluster = FakeCluster::start();
    let kubeconfig = s.write("kubeconfig", &cluster.kubeconfig());
    let out = crate::support::skyc()
        .args(["status", "--state-dir", STATE])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("no replica leads"),
        "{}",
        text(&out.stderr)
    );
}

/// Once the controller's Deployment is applied, its pod `pod` starts (as
/// the cluster's Deployment controller would start it), its claim a
/// directory of the test: answered.
fn start_when_deployed(cluster: &mut FakeCluster, scratch: &Scratch, pod: &str) -> PathBuf {
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.object("deployments", "skyc-controller").is_none() {
        assert!(Instant::now() < deadline, "no Deployment applied");
        std::thread::sleep(Duration::from_millis(50));
    }
    let state = scratch.dir.join("controller-state");
    std::fs::create_dir_all(&state).unwrap();
    cluster.controller(pod, Path::new(env!("CARGO_BIN_EXE_skyc")), &state);
    state
}

/// A run to a namespace with no controller: refused, saying how to make
/// one, when SkyPilot's `jobs.controller` is not configured; with it, the
/// run makes the controller it describes (its pod's CPU and memory, its
/// claim's size and class), waits for it to lead, and submits there.
#[test]
fn a_run_makes_the_controller_skypilots_configuration_asks_for() {
    let scratch = Scratch::new("k8s-client-auto");
    let mut cluster = FakeCluster::start();
    let kubeconfig = scratch.write("kubeconfig", &cluster.kubeconfig());
    let file = scratch.write(
        "g.yaml",
        "name: auto\nexecution: parallel\n---\nname: a\nrun: echo made\n",
    );
    let skyc = || {
        let mut cmd = crate::support::skyc();
        cmd.args([
            "run",
            file.to_str().unwrap(),
            "--target",
            "k8s",
            "-d",
            "--state-dir",
            STATE,
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("HOME", &scratch.dir)
        .env("XDG_STATE_HOME", scratch.dir.join("laptop"))
        .env_remove("SKYC_STATE_DIR")
        .env_remove("SKYPILOT_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        cmd
    };
    let refused = skyc().output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused.stderr).contains("no replica leads"),
        "{}",
        text(&refused.stderr)
    );
    assert!(cluster.object("deployments", "skyc-controller").is_none());

    std::fs::create_dir_all(scratch.dir.join(".sky")).unwrap();
    scratch.write(
        ".sky/config.yaml",
        "jobs:\n  controller:\n    high_availability: true\n    resources:\n      \
         cpus: 1\n      memory: 2\n      disk_size: 5\n\
         kubernetes:\n  high_availability:\n    storage_class_name: fast\n",
    );
    let run = skyc().spawn().unwrap();
    let state = start_when_deployed(&mut cluster, &scratch, "skyc-controller-5d8b-xkq2p");
    let run = run.wait_with_output().unwrap();
    let said = text(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{said}");
    assert!(said.contains("making the one"), "{said}");
    assert!(
        said.contains("leads as skyc-controller-5d8b-xkq2p"),
        "{said}"
    );
    let gid: i64 = text(&run.stdout).trim().parse().expect("a group id");
    let deployment = cluster.object("deployments", "skyc-controller").unwrap();
    let resources = &deployment["spec"]["template"]["spec"]["containers"][0]["resources"];
    assert_eq!(resources["requests"]["cpu"], "1", "{resources:#}");
    assert_eq!(resources["limits"]["memory"], "2Gi", "{resources:#}");
    let claim = cluster
        .object("persistentvolumeclaims", "skyc-controller-state")
        .unwrap();
    assert_eq!(claim["spec"]["storageClassName"], "fast", "{claim:#}");
    assert_eq!(
        claim["spec"]["resources"]["requests"]["storage"], "5Gi",
        "{claim:#}"
    );
    // The group is the controller's; the next run finds it there and
    // makes nothing.
    let store = skyc_runtime::store::Store::open(&state).unwrap();
    assert_eq!(store.group(gid).unwrap().unwrap().name, "auto");
    let again = skyc().output().unwrap();
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        !text(&again.stderr).contains("making"),
        "{}",
        text(&again.stderr)
    );
}

/// `controller up` applies the objects with the user's credentials and
/// returns once a replica leads; `down` refuses while a group is live,
/// then removes what is the controller's and keeps its state and the
/// users' Role.
#[test]
fn up_waits_for_a_leader_and_down_refuses_while_a_group_is_live() {
    let scratch = Scratch::new("k8s-client-up");
    let mut cluster = FakeCluster::start();
    let kubeconfig = scratch.write("kubeconfig", &cluster.kubeconfig());
    let skyc = |args: &[&str]| {
        let mut cmd = crate::support::skyc();
        cmd.args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("XDG_STATE_HOME", scratch.dir.join("laptop"))
            .env_remove("SKYC_STATE_DIR");
        cmd
    };
    let up = skyc(&[
        "controller",
        "up",
        "--controller-image",
        "registry.example/skyc:test",
        "--wait",
        "30",
    ])
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let state = start_when_deployed(&mut cluster, &scratch, "skyc-controller-7f9c-abcde");
    let up = up.wait_with_output().unwrap();
    let said = text(&up.stderr);
    assert_eq!(up.status.code(), Some(0), "{said}");
    assert!(
        said.contains("leads as skyc-controller-7f9c-abcde")
            && said.contains("--state-dir k8s://team"),
        "{said}"
    );
    for (resource, name) in [
        ("serviceaccounts", "skyc-controller"),
        ("roles", "skyc-runner"),
        ("roles", "skyc-controller"),
        ("rolebindings", "skyc-controller-runner"),
        ("rolebindings", "skyc-controller"),
        ("persistentvolumeclaims", "skyc-controller-state"),
    ] {
        assert!(
            cluster.object(resource, name).is_some(),
            "{resource}/{name}"
        );
    }
    let deployment = cluster.object("deployments", "skyc-controller").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/skyc:test"
    );
    // Applied again with only more replicas: the pods stay, and so does
    // the leader, at once.
    let again = skyc(&[
        "controller",
        "up",
        "--controller-image",
        "registry.example/skyc:test",
        "--controller-replicas",
        "2",
        "--controller-storage-class",
        "shared",
        "--wait",
        "5",
    ])
    .output()
    .unwrap();
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert!(
        text(&again.stderr).contains("leads as skyc-controller-7f9c-abcde"),
        "{}",
        text(&again.stderr)
    );
    // A new image: up waits until a replica of the update leads.
    let update = skyc(&[
        "controller",
        "up",
        "--controller-image",
        "registry.example/skyc:v2",
        "--wait",
        "30",
    ])
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let image = |cluster: &FakeCluster| {
        cluster.object("deployments", "skyc-controller").unwrap()["spec"]["template"]["spec"]
            ["containers"][0]["image"]
            .clone()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while image(&cluster) != "registry.example/skyc:v2" {
        assert!(Instant::now() < deadline, "the update not applied");
        std::thread::sleep(Duration::from_millis(50));
    }
    cluster.replace_controller(
        "skyc-controller-8a1d-fghij",
        Path::new(env!("CARGO_BIN_EXE_skyc")),
        &state,
    );
    let update = update.wait_with_output().unwrap();
    assert_eq!(update.status.code(), Some(0), "{}", text(&update.stderr));
    assert!(
        text(&update.stderr).contains("leads as skyc-controller-8a1d-fghij"),
        "{}",
        text(&update.stderr)
    );
    // A live group: down refuses, names it, and removes nothing.
    let file = scratch.write(
        "sleepy.yaml",
        "name: s\nexecution: parallel\n---\nname: a\nrun: sleep 1000\n",
    );
    let out = skyc(&[
        "run",
        file.to_str().unwrap(),
        "--target",
        "k8s",
        "-d",
        "--state-dir",
        STATE,
    ])
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let gid = text(&out.stdout).trim().to_owned();
    let out = skyc(&["controller", "down"]).output().unwrap();
    assert_eq!(out.status.code(), Some(100), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("group {gid} (s)")),
        "{}",
        text(&out.stderr)
    );
    assert!(cluster.object("deployments", "skyc-controller").is_some());
    // Cancelled and ended: down removes the controller.
    let out = skyc(&["cancel", &gid, "--state-dir", STATE])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = skyc(&["controller", "down"]).output().unwrap();
        if out.status.code() == Some(0) {
            break;
        }
        assert_eq!(out.status.code(), Some(100), "{}", text(&out.stderr));
        assert!(Instant::now() < deadline, "the group did not end");
        std::thread::sleep(Duration::from_millis(200));
    }
    for (resource, name) in [
        ("deployments", "skyc-controller"),
        ("serviceaccounts", "skyc-controller"),
        ("roles", "skyc-controller"),
        ("rolebindings", "skyc-controller-runner"),
        ("rolebindings", "skyc-controller"),
    ] {
        assert!(
            cluster.object(resource, name).is_none(),
            "{resource}/{name}"
        );
    }
    assert!(cluster.object("roles", "skyc-runner").is_some(), "kept");
    assert!(
        cluster
            .object("persistentvolumeclaims", "skyc-controller-state")
            .is_some(),
        "kept"
    );
    // Nothing leads any more: down says it cannot ask, and `--force`
    // finds nothing left to remove.
    let out = skyc(&["controller", "down"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--force"),
        "{}",
        text(&out.stderr)
    );
    let out = skyc(&["controller", "down", "--force", "--purge"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        cluster
            .object("persistentvolumeclaims", "skyc-controller-state")
            .is_none(),
        "purged"
    );
}

/// A controller whose state cannot keep snapshots refuses before any is
/// sent (a refusal in the middle of a stream may lose its answer with
/// the connection, as an API server closes it): the client, with 32 MiB
/// to send, says why at once and exits, with nothing recorded.
#[test]
fn a_controller_that_cannot_keep_snapshots_refuses_before_they_are_sent() {
    let c = Client::new("k8s-client-refused");
    let _ = std::fs::remove_dir_all(c.state.join("files"));
    std::fs::write(c.state.join("files"), "not a directory").unwrap();
    std::fs::create_dir_all(c.scratch.dir.join("work")).unwrap();
    // Larger than every buffer between the two sides.
    let big: Vec<u8> = (0..32u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(c.scratch.dir.join("work/weights.bin"), &big).unwrap();
    let file = c.scratch.write("g.yaml", GROUP);
    let mut run = c
        .skyc(&["run", file.to_str().unwrap(), "--target", "k8s", "-d"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while run.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = run.kill();
            panic!("the client is still sending to a controller that refused");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("files"),
        "the controller's reason: {}",
        text(&out.stderr)
    );
    let listed = c.output(&["status", "--json"]);
    assert_eq!(text(&listed.stdout).trim(), "[]", "nothing recorded");
}

/// Replicas that are processes of their own (`skyc controller serve`,
/// run out of the cluster with the fake's kubeconfig), killed on drop.
struct Replicas(Vec<std::process::Child>);

impl Drop for Replicas {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Two replicas of the controller as processes sharing the state claim;
/// the leader SIGKILLed mid-group while the primary ends: the other leads
/// within the Lease's time (15 s, and its 2 s of retry), adopts the group,
/// stops the auxiliary after its delay and closes it SUCCEEDED, no pod
/// made twice; the client reaches whichever leads.
#[test]
fn the_leader_killed_mid_group_is_replaced_within_the_lease_time() {
    let scratch = Scratch::new("k8s-client-failover");
    let cluster = FakeCluster::start();
    let kubeconfig = scratch.write("kubeconfig", &cluster.kubeconfig());
    let state = scratch.dir.join("controller-state");
    std::fs::create_dir_all(&state).unwrap();
    let serve = |me: &str| {
        cluster.controller_pod(me, Path::new(env!("CARGO_BIN_EXE_skyc")), &state);
        crate::support::skyc()
            .args(["controller", "serve", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg("--state-dir")
            .arg(&state)
            .env("SKYC_CONTROLLER_ID", me)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let wait = |what: &str, limit: Duration, mut done: Box<dyn FnMut() -> bool + '_>| {
        let deadline = Instant::now() + limit;
        while !done() {
            assert!(Instant::now() < deadline, "{what}: not reached");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let mut replicas = Replicas(vec![serve("pod-a")]);
    wait(
        "pod-a leads",
        Duration::from_secs(30),
        Box::new(|| cluster.leader().as_deref() == Some("pod-a")),
    );
    replicas.0.push(serve("pod-b"));
    let skyc = |args: &[&str]| {
        let mut cmd = crate::support::skyc();
        cmd.args(args)
            .args(["--state-dir", STATE])
            .env("KUBECONFIG", &kubeconfig)
            .env("XDG_STATE_HOME", scratch.dir.join("laptop"))
            .env_remove("SKYC_STATE_DIR");
        cmd
    };
    let file = scratch.write("g.yaml", &GROUP.replace("workdir: ./work\n", ""));
    let out = skyc(&["run", file.to_str().unwrap(), "--target", "k8s", "-d"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let gid: i64 = text(&out.stdout).trim().parse().unwrap();
    wait(
        "every task running",
        Duration::from_secs(60),
        Box::new(|| cluster.running("g-trainer-0-0") && cluster.running("g-buffer-0-0")),
    );
    // The leader is killed; the primary ends while nobody leads.
    replicas.0[0].kill().unwrap();
    let _ = replicas.0[0].wait();
    let killed = Instant::now();
    cluster.exit("g-trainer-0-0", "trained\n", 0);
    wait(
        "pod-b leads",
        Duration::from_secs(30),
        Box::new(|| cluster.leader().as_deref() == Some("pod-b")),
    );
    let took = killed.elapsed();
    // The Lease's 15 s, counted from a renewal the follower may have
    // seen a retry (2 s) late, and its next retry; with room for a
    // loaded machine.
    assert!(took <= Duration::from_secs(25), "taken over after {took:?}");
    let status = |gid: i64| -> Value {
        let out = skyc(&["status", &gid.to_string(), "--json"])
            .output()
            .unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null)[0].clone()
    };
    wait(
        "the group ended",
        Duration::from_secs(60),
        Box::new(|| !status(gid)["finished_at_ms"].is_null()),
    );
    let ended = status(gid);
    assert_eq!(ended["status"], "SUCCEEDED", "{ended:#}");
    let tasks: Vec<&str> = ended["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["SUCCEEDED", "CANCELLED"], "{ended:#}");
    assert_eq!(
        cluster.created_pods(),
        ["g-trainer-0-0", "g-buffer-0-0"],
        "no pod made twice"
    );
}
