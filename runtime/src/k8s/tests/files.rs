//! A group's files on Kubernetes: the files pod made, filled over
//! `pods/exec` once, and every node's pod made only then; each pod's
//! init container fetching and checking its task's snapshots, so its
//! commands read the submitted bytes at their destinations. The bytes are
//! asserted in the pods of a kubelet that runs them
//! ([`super::kubelet`]); the requests of a 1,000-node group's delivery
//! are counted against the scripted cluster.

use super::driver::{self, Driver, GID};
use super::fake::Fake;
use super::kubelet::{self, Kubelet};
use super::{P, created};
use crate::backend::Report;
use crate::files::Snapshots;
use crate::files::take::{self, Taking};
use crate::k8s::{Lowering, Plan};
use crate::policy::Status;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The group of `yaml`, its files taken from `cwd` into `state`'s
/// snapshots, lowered as `skyc run --target k8s` lowers it.
fn plan_with_files(yaml: &str, cwd: &Path, state: &Path) -> Plan {
    let c = skyc_compiler::compile(
        "group.yaml",
        yaml.as_bytes(),
        &skyc_compiler::Options::default(),
    );
    let group = c
        .group
        .unwrap_or_else(|| panic!("invalid group: {:?}", c.diagnostics));
    let options = skyc_targets::k8s::Options {
        namespace: Some(super::fake::NS.to_owned()),
        files: Some(taken(&group, cwd, state)),
        ..Default::default()
    };
    Plan::new(
        &group,
        &Lowering {
            options: &options,
            namespace: super::fake::NS,
            context: None,
            grace: Duration::from_secs(2),
            secrets: &[],
            token: "run-1".into(),
        },
    )
    .unwrap_or_else(|d| panic!("lowering failed: {d:?}"))
}

/// `group`'s files, taken from `cwd` (also the home) into `state`'s
/// snapshots, as the Kubernetes target is given them.
fn taken(
    group: &skyc_compiler::ir::Group,
    cwd: &Path,
    state: &Path,
) -> skyc_targets::k8s::files::Files {
    let snapshots = Snapshots::of(state);
    let writing = snapshots.writing().unwrap();
    let mut quiet = |_, _| {};
    let (files, diagnostics) = take::take(
        group,
        &mut Taking {
            cwd,
            home: Some(cwd),
            into: Some((&snapshots, &writing)),
            limit_bytes: 1 << 30,
            progress: &mut quiet,
            mount_buckets: crate::files::take::Mounting::No,
            submitting: false,
        },
    );
    assert!(diagnostics.is_empty(), "{diagnostics:?}");
    crate::k8s::files::packs(&files.tasks, &snapshots, false).unwrap()
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn sha256(text: &str) -> String {
    crate::files::tar::sha256(text.as_bytes())
}

/// The user's sources, in `dir`.
fn sources(dir: &Path) {
    write(&dir.join("code/data.txt"), "the training data\n");
    write(&dir.join("code/lib/model.py"), "WEIGHTS = 3\n");
    write(&dir.join("settings.yaml"), "lr: 0.1\n");
    write(&dir.join("work/run.sh"), "echo from the workdir\n");
}

/// One task reading one mounted file.
const ONE_TASK: &str = "\
name: g
execution: parallel
---
name: trainer
file_mounts:
  /code: ./code
run: cat /code/data.txt
";

const GROUP: &str = "\
name: g
execution: parallel
---
name: trainer
num_nodes: 2
workdir: ./work
file_mounts:
  /code: ./code
  ~/conf/settings.yaml: ./settings.yaml
run: |
  set -e
  echo \"at $(pwd)\"
  sha256sum /code/data.txt /code/lib/model.py ~/conf/settings.yaml run.sh
  bash run.sh
  echo mine > /code/written-by-$SKYPILOT_NODE_RANK
  echo \"sees $(ls /code | tr '\\n' ' ')\"
---
name: evaluator
file_mounts:
  /code: ./code
run: |
  cat /code/data.txt
";

/// A group with files on the fake cluster, under a kubelet that runs its
/// pods; the kubelet stops when the test ends (its pods' threads hold it,
/// so its end is said, not left to `Drop`).
struct Scene {
    dir: PathBuf,
    kubelet: Arc<Kubelet>,
    d: Driver,
}

impl Drop for Scene {
    fn drop(&mut self) {
        self.kubelet.stop();
    }
}

impl Scene {
    /// One turn of the cluster: its controllers, the kubelet starting
    /// what waits, the supervisor hearing the backend.
    fn turn(&mut self) {
        self.d.fake.world().reconcile_cluster();
        self.kubelet.start_pending();
        self.d.pump();
        std::thread::sleep(Duration::from_millis(20));
    }

    /// Turns until `done`, at most `limit`.
    fn until(&mut self, limit: Duration, done: impl Fn(&Driver) -> bool) {
        let deadline = Instant::now() + limit;
        while !done(&self.d) {
            assert!(
                Instant::now() < deadline,
                "not within {limit:?}: statuses {:?}, errors {:?}, pods {:?}, output {:#?}",
                self.d.statuses(),
                self.d
                    .reports
                    .iter()
                    .filter(|r| matches!(r, Report::Error(_)))
                    .collect::<Vec<_>>(),
                self.d.fake.world().names("pods"),
                self.kubelet.output.lock().unwrap()
            );
            self.turn();
        }
    }
}

fn scene(yaml: &str) -> Option<Scene> {
    if let Some(why) = kubelet::available() {
        assert!(
            std::env::var_os("SKYC_PODS_REQUIRED").is_none(),
            "pods cannot run here: {why}"
        );
        eprintln!("!!! SKIPPED: {why}");
        return None;
    }
    let dir = driver::state_dir();
    let src = dir.join("src");
    sources(&src);
    let plan = plan_with_files(yaml, &src, &dir);
    let fake = Fake::default();
    let kubelet = Arc::new(Kubelet::new(&fake, &dir));
    let tuning = driver::tuning();
    let d = Driver::start_in(dir.clone(), fake, plan, tuning, Some(kubelet.exec()));
    Some(Scene { dir, kubelet, d })
}

#[test]
fn every_pod_reads_the_submitted_bytes_at_their_destinations_from_a_copy_of_its_own() {
    let Some(mut s) = scene(GROUP) else {
        return;
    };
    let dir = s.dir.clone();
    // Edited once submitted: the pods still see what was submitted.
    write(&dir.join("src/code/data.txt"), "edited after submission\n");
    s.until(Duration::from_secs(60), Driver::settled);
    let (d, k) = (&s.d, &s.kubelet);
    assert_eq!(d.statuses(), [Status::Succeeded, Status::Succeeded]);
    let output = k.output.lock().unwrap().clone();
    for rank in 0..2 {
        let out = &output[&format!("g-trainer-{rank}-0")];
        for (text, path) in [
            ("the training data\n", "/code/data.txt"),
            ("WEIGHTS = 3\n", "/code/lib/model.py"),
            ("lr: 0.1\n", "/root/conf/settings.yaml"),
            ("echo from the workdir\n", "run.sh"),
        ] {
            assert!(
                out.contains(&format!("{}  {path}", sha256(text))),
                "trainer-{rank} read other bytes at {path}:\n{out}"
            );
        }
        assert!(out.contains("at /root/sky_workdir"), "{out}");
        assert!(out.contains("from the workdir"), "{out}");
        // Its own write, not the other node's.
        assert!(
            out.contains(&format!("sees data.txt lib written-by-{rank} ")),
            "{out}"
        );
    }
    assert!(
        output["g-evaluator-0-0"].contains("the training data"),
        "{output:#?}"
    );
    // Nothing written to the user's files.
    assert!(!dir.join("src/code/written-by-0").exists());
    // The files pod was made before any node, and is gone with the group.
    let pods = d.fake.world().created_pods();
    assert_eq!(pods.first().map(String::as_str), Some("g-skyc-files"));
    assert!(d.fake.world().get("pods", "g-skyc-files").is_none());
    // No request carried the files: each is a few KiB at most.
    let largest = d
        .fake
        .world()
        .requests
        .iter()
        .map(|r| r.body.as_ref().map_or(0, |b| b.to_string().len()))
        .max()
        .unwrap_or(0);
    assert!(largest < 16 << 10, "a request of {largest} bytes");
}

#[test]
fn a_restart_runs_the_submitted_bytes_and_volumes_are_claims_the_nodes_share() {
    let yaml = "\
name: g
execution: parallel
---
name: trainer
file_mounts:
  /code: ./code
volumes:
  /ckpt: ckpt
resources:
  job_recovery:
    max_restarts_on_errors: 1
run: |
  cat /code/data.txt
  if [ ! -e /ckpt/tried ]; then echo once > /ckpt/tried; exit 3; fi
  echo restarted
";
    let Some(mut s) = scene(yaml) else {
        return;
    };
    write(
        &s.dir.join("src/code/data.txt"),
        "edited after submission\n",
    );
    s.until(Duration::from_secs(60), Driver::settled);
    let (d, k) = (&s.d, &s.kubelet);
    assert_eq!(d.statuses(), [Status::Succeeded]);
    let output = k.output.lock().unwrap().clone();
    assert_eq!(
        created(d),
        ["g-skyc-files", "g-trainer-0-0", "g-trainer-0-1"]
    );
    for attempt in 0..2 {
        let out = &output[&format!("g-trainer-0-{attempt}")];
        assert!(out.contains("the training data"), "{out}");
        assert!(!out.contains("edited"), "{out}");
    }
    assert!(output["g-trainer-0-1"].contains("restarted"));
}

#[test]
fn files_that_are_not_the_submitted_bytes_fail_the_nodes_setup() {
    let Some(mut s) = scene(ONE_TASK) else {
        return;
    };
    // The snapshot kept by the state directory changes under the run:
    // the stream sent is not the one the plan recorded.
    let digest = &s.d.plan.files[0].digest;
    write(
        &s.dir.join("files").join(digest).join("data.txt"),
        "tampered\n",
    );
    s.until(Duration::from_secs(30), |d| {
        d.statuses() == [Status::FailedSetup]
    });
    let d = &s.d;
    // The files pod refused the stream: no node ever ran.
    let errors: Vec<&Report> = d
        .reports
        .iter()
        .filter(|r| matches!(r, Report::Error(_)))
        .collect();
    assert!(
        errors
            .iter()
            .any(|r| format!("{r:?}").contains("is no longer what was submitted")),
        "{errors:?}"
    );
    assert!(created(d).iter().all(|p| p == "g-skyc-files"));
}

/// A 1,000-node group on the scripted cluster: its files cross the API
/// server once, in parts, whatever the number of nodes.
#[test]
fn a_thousand_nodes_files_cross_the_api_server_once() {
    let dir = driver::state_dir();
    let src = dir.join("src");
    // 20 MiB: three parts.
    write(&src.join("code/big.bin"), &"x".repeat(20 << 20));
    let plan = plan_with_files(
        "\
name: g
execution: parallel
---
name: trainer
num_nodes: 1000
file_mounts:
  /code: ./code
run: python train.py
",
        &src,
        &dir,
    );
    let stream = plan.files[0].bytes as usize;
    let mut d = Driver::start_in(dir, Fake::default(), plan, driver::tuning(), None);
    // No node before the files pod is filled.
    assert_eq!(created(&d), ["g-skyc-files"]);
    d.cluster(|w| w.run("g-skyc-files"));
    let fills = d.fake.world().kubelet_exec.fills.clone();
    let parts: Vec<_> = fills.iter().filter(|f| f.1 == "part").collect();
    assert_eq!(parts.len(), stream.div_ceil(crate::k8s::files::PART_BYTES));
    assert_eq!(parts.iter().map(|f| f.4).sum::<usize>(), stream);
    assert_eq!(
        parts.iter().map(|f| f.3.as_str()).collect::<Vec<_>>(),
        ["0", "8", "16"]
    );
    assert_eq!(fills.iter().filter(|f| f.1 == "done").count(), 1);
    let uid = d.uid("pods", "g-skyc-files");
    let filled = d.fake.world().get("jobsets", "g").unwrap()["metadata"]["annotations"]
        ["skyc.io/files-filled"]
        .clone();
    assert!(
        filled
            .as_str()
            .is_some_and(|f| f.ends_with(&format!("/{uid}"))),
        "{filled}"
    );
    let pods = created(&d);
    assert_eq!(pods.len(), 1001);
    let w = d.fake.world();
    let creates: Vec<usize> = w
        .requests
        .iter()
        .filter(|r| r.method == "POST" && r.path == P)
        .map(|r| r.body.as_ref().map_or(0, |b| b.to_string().len()))
        .collect();
    assert_eq!(creates.len(), 1001);
    // Each node's pod names its files; none carries them.
    let largest = creates.iter().max().copied().unwrap_or(0);
    assert!(largest < 16 << 10, "a pod of {largest} bytes");
    let total: usize = w
        .requests
        .iter()
        .map(|r| r.body.as_ref().map_or(0, |b| b.to_string().len()))
        .sum();
    assert!(total < 1001 * (16 << 10), "{total} bytes of requests");
    drop(w);
    assert_eq!(GID, 7);
}

/// A fill cut short (a part's exec reset) is tried again from the first
/// part the pod lacks: no part crosses the API server twice, and the
/// stream is served once.
#[test]
fn a_fill_cut_short_goes_on_where_it_was() {
    let dir = driver::state_dir();
    let src = dir.join("src");
    // 20 MiB: three parts.
    write(&src.join("code/big.bin"), &"y".repeat(20 << 20));
    let plan = plan_with_files(
        "name: g\nexecution: parallel\n---\nname: a\nfile_mounts:\n  /code: ./code\nrun: \"true\"\n",
        &src,
        &dir,
    );
    let fake = Fake::default();
    fake.world().kubelet_exec.parts_cut_after = Some(1);
    let mut d = Driver::start_in(dir, fake, plan, driver::tuning(), None);
    d.cluster(|w| w.run("g-skyc-files"));
    // The fill is tried again after its backoff.
    let start = Instant::now();
    while created(&d).len() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            created(&d)
        );
        d.settle();
    }
    let fills = d.fake.world().kubelet_exec.fills.clone();
    let parts: Vec<&str> = fills
        .iter()
        .filter(|f| f.1 == "part")
        .map(|f| f.3.as_str())
        .collect();
    assert_eq!(parts, ["0", "8", "16"], "{fills:?}");
    assert_eq!(fills.iter().filter(|f| f.1 == "done").count(), 1);
}

/// The files pod lost while the group runs (its node gone): made and
/// filled again before a node is launched again.
#[test]
fn a_lost_files_pod_is_made_and_filled_again_before_a_restart() {
    let mut d = scripted();
    d.cluster(|w| w.run("g-skyc-files"));
    assert_eq!(created(&d), ["g-skyc-files", "g-trainer-0-0"]);
    // The files pod is evicted: deleted, then made again.
    d.cluster(|w| {
        w.disrupt("g-skyc-files", "EvictionByEvictionAPI");
        w.reconcile_cluster();
    });
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(
        created(&d),
        ["g-skyc-files", "g-skyc-files", "g-trainer-0-0"]
    );
    // The node is preempted: its restart waits for the files.
    d.cluster(|w| {
        w.run("g-trainer-0-0");
        w.disrupt("g-trainer-0-0", "PreemptionByScheduler");
        w.reconcile_cluster();
    });
    d.cluster(|w| w.reconcile_cluster());
    assert_eq!(
        created(&d),
        ["g-skyc-files", "g-skyc-files", "g-trainer-0-0"]
    );
    let fills_before = d.fake.world().kubelet_exec.fills.len();
    d.cluster(|w| w.run("g-skyc-files"));
    assert!(d.fake.world().kubelet_exec.fills.len() > fills_before);
    assert_eq!(
        created(&d),
        [
            "g-skyc-files",
            "g-skyc-files",
            "g-trainer-0-0",
            "g-trainer-0-1"
        ]
    );
}

/// A node whose init container could not put its files in place failed
/// its setup: its main container never ran.
#[test]
fn a_node_that_cannot_fetch_its_files_failed_its_setup() {
    let mut d = scripted();
    d.cluster(|w| w.run("g-skyc-files"));
    init_fails(&mut d, 1);
    assert!(d.reports.iter().any(|r| matches!(
        r,
        Report::Event {
            event: crate::policy::Event::NodeExited {
                phase: crate::policy::Phase::Setup,
                code: 1,
                ..
            },
            ..
        }
    )));
    // Its budget allows one restart: the task recovers.
    assert_eq!(d.statuses(), [Status::Recovering]);
}

/// The init container of the trainer's first pod ends with `code`: its
/// main container never starts.
fn init_fails(d: &mut Driver, code: i32) {
    d.cluster(|w| {
        w.update("pods", "g-trainer-0-0", |p| {
            p["spec"]["nodeName"] = serde_json::json!("node-1");
            p["status"] = serde_json::json!({
                "phase": "Failed",
                "containerStatuses": [{
                    "name": "main", "ready": false, "restartCount": 0, "image": "", "imageID": "",
                    "state": {"waiting": {"reason": "PodInitializing"}},
                }],
                "initContainerStatuses": [{
                    "name": "skyc-files", "ready": false, "restartCount": 0, "image": "",
                    "imageID": "",
                    "state": {"terminated": {"exitCode": code, "reason": "Error"}},
                }],
            });
        });
    });
}

/// A one-task group with files, on the scripted cluster.
fn scripted() -> Driver {
    let dir = driver::state_dir();
    let src = dir.join("src");
    sources(&src);
    let plan = plan_with_files(
        "\
name: g
execution: parallel
---
name: trainer
file_mounts:
  /code: ./code
resources:
  job_recovery:
    max_restarts_on_errors: 1
run: python train.py
",
        &src,
        &dir,
    );
    Driver::start_in(dir, Fake::default(), plan, driver::tuning(), None)
}

/// A pool's workers get the pool's files as a group does: each worker
/// its files pod, filled before its nodes' pods, under the worker's own
/// names (its files host, its key's Secret).
#[test]
fn a_pool_worker_gets_the_pools_files_under_its_own_names() {
    let dir = driver::state_dir();
    let src = dir.join("src");
    sources(&src);
    let c = skyc_compiler::compile(
        "pool.yaml",
        "name: trainers\nworkdir: ./work\nsetup: bash run.sh\npool:\n  workers: 2\n".as_bytes(),
        &skyc_compiler::Options::default(),
    );
    let group = c.group.expect("a pool file");
    let options = skyc_targets::k8s::Options {
        namespace: Some(super::fake::NS.to_owned()),
        files: Some(taken(&group, &src, &dir)),
        ..Default::default()
    };
    let pool = crate::k8s::PoolPlan::new(
        &group,
        group.pool.as_ref().unwrap(),
        "pool",
        &Lowering {
            options: &options,
            namespace: super::fake::NS,
            context: None,
            grace: Duration::from_secs(2),
            secrets: &[],
            token: "run-1".into(),
        },
    )
    .unwrap();
    // As the backend adopts a worker: named after its row, holding.
    let mut worker = pool.worker.named("pool-3");
    worker.hold = true;
    let init = worker.templates[0]["spec"]["initContainers"][0].to_string();
    assert!(init.contains("skyc-files.pool-3:8080"), "{init}");
    assert!(init.contains("pool-3-skyc-files"), "{init}");
    assert!(
        worker
            .object("Secret")
            .is_some_and(|s| s["metadata"]["name"] == "pool-3-skyc-files")
    );
    let mut d = Driver::start_in(dir, Fake::default(), worker, driver::tuning(), None);
    assert_eq!(created(&d), ["pool-3-skyc-files"]);
    d.cluster(|w| w.run("pool-3-skyc-files"));
    assert_eq!(created(&d), ["pool-3-skyc-files", "pool-3-trainers-0-0"]);
}

/// While the files pod does not start, the tasks say why they wait.
#[test]
fn a_files_pod_that_does_not_start_is_why_the_tasks_wait() {
    let mut d = scripted();
    d.cluster(|w| {
        w.update("pods", "g-skyc-files", |p| {
            p["status"] = serde_json::json!({
                "phase": "Pending",
                "containerStatuses": [{
                    "name": "main", "ready": false, "restartCount": 0, "image": "busybox:1.36",
                    "imageID": "",
                    "state": {"waiting": {"reason": "ImagePullBackOff",
                        "message": "Back-off pulling image \"busybox:1.36\""}},
                }],
            });
        });
    });
    let why: Vec<Option<String>> = d
        .reports
        .iter()
        .filter_map(|r| match r {
            Report::Waiting { why, .. } => Some(why.clone()),
            _ => None,
        })
        .collect();
    assert!(
        why.iter().flatten().any(|w| w
            == "Kubernetes: the files pod g-skyc-files does not start: ImagePullBackOff: Back-off pulling image \"busybox:1.36\""),
        "{why:?}"
    );
    assert_eq!(created(&d), ["g-skyc-files"]);
}

/// An exec that never answers: a fill that takes its time.
struct Stuck;

impl crate::k8s::exec::PodExec for Stuck {
    fn exec(
        &self,
        _namespace: &str,
        _pod: &str,
        _command: crate::k8s::exec::Command,
    ) -> futures::future::BoxFuture<'static, Result<String, crate::k8s::exec::ExecError>> {
        Box::pin(std::future::pending())
    }
}

/// The fill runs beside the group's loop: a cancel during a long fill is
/// carried out at once.
#[test]
fn a_cancel_is_carried_out_while_the_files_are_sent() {
    let dir = driver::state_dir();
    let src = dir.join("src");
    sources(&src);
    let plan = plan_with_files(
        "name: g\nexecution: parallel\n---\nname: trainer\nfile_mounts:\n  /code: ./code\nrun: x\n",
        &src,
        &dir,
    );
    let mut d = Driver::start_in(
        dir,
        Fake::default(),
        plan,
        driver::tuning(),
        Some(Arc::new(Stuck)),
    );
    d.cluster(|w| w.run("g-skyc-files"));
    assert_eq!(created(&d), ["g-skyc-files"]);
    d.cancel();
    let js = d.fake.world().get("jobsets", "g").cloned();
    assert!(
        js.is_none_or(|j| !j["metadata"]["deletionTimestamp"].is_null()),
        "the JobSet is not being deleted"
    );
    assert_eq!(d.statuses(), [Status::Cancelled]);
}

/// A node whose init container could not reach the files pod for five
/// minutes is lost, not failed: it uses none of the task's budget.
#[test]
fn a_node_that_cannot_reach_the_files_pod_is_lost() {
    let mut d = scripted();
    d.cluster(|w| w.run("g-skyc-files"));
    init_fails(&mut d, 75);
    assert!(d.reports.iter().any(|r| matches!(
        r,
        Report::Event {
            event: crate::policy::Event::NodeLost { .. },
            ..
        }
    )));
    assert!(!d.reports.iter().any(|r| matches!(
        r,
        Report::Event {
            event: crate::policy::Event::NodeExited { .. },
            ..
        }
    )));
}

/// Without the key's Secret (deleted from outside), the files pod does
/// not start, as a kubelet refuses it, and the tasks say why they wait.
#[test]
fn without_its_secret_the_files_pod_waits_and_the_tasks_say_why() {
    let Some(mut s) = scene(ONE_TASK) else {
        return;
    };
    s.d.fake.world().remove("secrets", "g-skyc-files");
    s.until(Duration::from_secs(20), |d| {
        d.reports.iter().any(|r| {
            matches!(r, Report::Waiting { why: Some(w), .. }
                if w.contains("CreateContainerConfigError: couldn't find key key in Secret team/g-skyc-files"))
        })
    });
    let d = &s.d;
    assert_eq!(created(d), ["g-skyc-files"]);
}
