//! A whole group on stand-in machines: the control plane against moto
//! (scripts/moto), and for each instance moto reports a machine at its
//! private address (scripts/standin: namespaces on this host) that runs
//! the instance's user data as cloud-init would and serves SSH; the data
//! plane delivers hosts and reads exits and logs over SSH. The engine runs
//! around it as the supervisor runs it, timers fired when they fall due.
//!
//! Needs the stand-in EC2 (SKYC_MOTO_ENDPOINT), root, sshd and iproute2;
//! skips loudly otherwise (fails under scripts/test, which provides them).
//! docs/targets/cloud.md and scripts/standin say what differs from a VM.

use super::Driven;
use crate::aws::control::ops;
use crate::aws::control::provider::Ec2Run;
use crate::aws::ec2::client::{Ec2, Tuning};
use crate::aws::ec2::config::Settings;
use crate::aws::ec2::query;
use crate::aws::ec2::response::State;
use crate::aws::ec2::sigv4::Credentials;
use crate::aws::plan::Plan;
use crate::backend::Report;
use crate::cloud::control::pass::pass;
use crate::cloud::data::plane::DataPlane;
use crate::cloud::data::remote::Ssh;
use crate::cloud::world::{NodeKey, World};
use crate::policy::{Event, Status, Timer};
use crate::reconciler::Told;
use crate::reconciler::goal::Goal;
use base64::Engine as _;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const STANDIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/standin");

struct Machines {
    dir: PathBuf,
}

impl Drop for Machines {
    fn drop(&mut self) {
        let _ = Command::new(STANDIN).arg("stop").arg(&self.dir).status();
    }
}

fn ready() -> Option<String> {
    let endpoint = std::env::var("SKYC_MOTO_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty());
    let root = rustix::process::geteuid().is_root();
    let tools = Path::new("/usr/sbin/sshd").exists()
        && Command::new("ip")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
    match endpoint {
        Some(e) if root && tools => Some(e),
        _ => {
            assert!(
                std::env::var_os("SKYC_MOTO_REQUIRED").is_none()
                    || std::env::var_os("SKYC_SSHD_REQUIRED").is_none(),
                "scripts/test provides the EC2 stand-in, root and sshd, yet one is missing"
            );
            eprintln!(
                "!!! SKIPPED: stand-in machines need the EC2 stand-in (SKYC_MOTO_ENDPOINT), root, sshd and ip"
            );
            None
        }
    }
}

async fn user_data(ec2: &Ec2, id: &str) -> String {
    let mut q = query::action("DescribeInstanceAttribute");
    q.push(("InstanceId".into(), id.to_owned()));
    q.push(("Attribute".into(), "userData".into()));
    let body = ec2.call(&q).await.unwrap();
    let doc = roxmltree::Document::parse(&body).unwrap();
    let b64 = doc
        .descendants()
        .find(|n| n.tag_name().name() == "value")
        .and_then(|n| n.text())
        .unwrap();
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .unwrap(),
    )
    .unwrap()
}

/// The supervisor's loop around a group on stand-in machines, one step at
/// a time, with what it needs to start again as a new supervisor would.
struct Harness {
    /// Held while the harness lives: machines share one bridge, so the
    /// tests that make them (each its own process) run one at a time.
    _serial: std::fs::File,
    p: Plan,
    dir: PathBuf,
    machines: Machines,
    key: PathBuf,
    settings: Settings,
    ec2: Ec2,
    data: DataPlane,
    d: Driven,
    /// Machine name (instance id) to its address.
    up: BTreeMap<String, String>,
    due: Vec<(Instant, Timer)>,
    seen_timers: usize,
    errors: BTreeSet<String>,
    settled: bool,
    rt: tokio::runtime::Runtime,
}

impl Harness {
    fn new(name: &str, yaml: &str) -> Option<Harness> {
        let endpoint = ready()?;
        let serial = std::fs::File::create("/tmp/skyc-standin.lock").unwrap();
        rustix::fs::flock(&serial, rustix::fs::FlockOperation::LockExclusive).unwrap();
        let p = super::plan(yaml, &format!("{name}-{}", std::process::id()));
        // Short: the SSH connection sockets live here.
        let dir = PathBuf::from(format!("/tmp/skyc-si-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("key");
        assert!(
            Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(&key)
                .status()
                .unwrap()
                .success()
        );
        let settings = Settings {
            profile: "default".into(),
            credentials: Credentials {
                access_key_id: "AKIDSKYCTEST".into(),
                secret_access_key: "skyc-test-secret".into(),
                session_token: None,
            },
            credentials_source: "the test".into(),
            region: None,
            endpoint: Some(endpoint),
        };
        let ec2 = Ec2::new(&settings, Some(&p.region), Tuning::default()).unwrap();
        let data = data_plane(&dir, &key);
        let d = Driven::start(&p);
        Some(Harness {
            _serial: serial,
            machines: Machines { dir: dir.join("m") },
            p,
            dir,
            key,
            settings,
            ec2,
            data,
            d,
            up: BTreeMap::new(),
            due: Vec::new(),
            seen_timers: 0,
            errors: BTreeSet::new(),
            settled: false,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        })
    }

    fn world(&self) -> World {
        self.rt.block_on(ops::world(&self.ec2, &self.p)).unwrap()
    }

    fn instance_id(&self, task: usize, rank: u32, attempt: u32) -> Option<String> {
        self.world()
            .instance(
                &self.p.as_run(),
                NodeKey {
                    task,
                    rank,
                    attempt,
                },
            )
            .map(|i| i.id.clone())
    }

    /// One pass: timers due, machines following the instances, the data
    /// plane, the control plane, the engine hearing what they report.
    fn step(&mut self) {
        for timer in &self.d.timers[self.seen_timers..] {
            let after = match timer {
                Timer::AuxiliaryDelay(task) => self.p.spec.tasks[*task].termination_delay,
                Timer::Kill { .. } => self.p.spec.grace,
            };
            self.due.push((Instant::now() + after, *timer));
        }
        self.seen_timers = self.d.timers.len();
        let now = Instant::now();
        let fired: Vec<Timer> = self
            .due
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, t)| *t)
            .collect();
        for timer in fired {
            self.d.handle(Event::TimerFired(timer));
        }
        self.due.retain(|(at, _)| *at > now);

        let goal = Goal::from_engine(&self.d.engine);
        let world = self.world();
        for i in &world.instances {
            let running = i.state == Some(State::Running);
            if running && !self.up.contains_key(&i.id) {
                let ud = self.dir.join(format!("{}.user-data", i.id));
                std::fs::write(&ud, self.rt.block_on(user_data(&self.ec2, &i.id))).unwrap();
                let ip = i.private_ip.clone().unwrap();
                let ok = Command::new(STANDIN)
                    .arg("up")
                    .arg(&self.machines.dir)
                    .arg(&i.id)
                    .arg(&ip)
                    .arg(&ud)
                    .arg(self.key.with_extension("pub"))
                    .status()
                    .unwrap()
                    .success();
                assert!(ok, "scripts/standin up {}", i.id);
                self.up.insert(i.id.clone(), ip);
            } else if !running && let Some(ip) = self.up.remove(&i.id) {
                self.data.ssh.close(&i.id, &ip);
                Command::new(STANDIN)
                    .arg("down")
                    .arg(&self.machines.dir)
                    .arg(&i.id)
                    .status()
                    .unwrap();
            }
        }
        let (outcomes, errs) = self.data.step(&self.p.as_run(), &world, &goal);
        self.errors.extend(errs);
        let passed = self.rt.block_on(pass(
            &Ec2Run {
                ec2: &self.ec2,
                files: None,
                plan: &self.p,
            },
            &goal,
            outcomes,
            &mut Told::default(),
        ));
        self.settled = false;
        for r in passed.reports {
            match r {
                Report::Event { event, .. } => self.d.handle(event),
                Report::Settled => self.settled = true,
                Report::Error(e) if !e.contains("out of band") => {
                    self.errors.insert(e);
                }
                _ => {}
            }
        }
    }

    /// Steps until `done` holds (at most 90 s).
    fn until(&mut self, what: &str, done: impl Fn(&Harness) -> bool) {
        let start = Instant::now();
        while !done(self) {
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "not {what} after 90 s: {:?}; errors {:?}",
                self.d.engine,
                self.errors
            );
            self.step();
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Steps until the group has ended and nothing of it is left.
    fn run_to_the_end(&mut self) {
        self.until("ended and settled", |h| {
            h.d.engine.is_finished() && h.settled && h.up.is_empty()
        });
        let world = self.world();
        assert!(
            world
                .instances
                .iter()
                .all(|i| i.state == Some(State::Terminated)),
            "{:?}",
            world.instances
        );
        assert!(world.network.is_none());
    }

    fn log(&self, node: &str) -> String {
        std::fs::read_to_string(self.dir.join("logs").join(format!("{node}.log")))
            .unwrap_or_default()
    }

    /// A new supervisor: the engine as committed (through its stored
    /// form), a new client and data plane; nothing else is kept.
    fn restart(&mut self) {
        let stored = serde_json::to_string(&self.d.engine).unwrap();
        self.d.engine = serde_json::from_str(&stored).unwrap();
        self.ec2 = Ec2::new(&self.settings, Some(&self.p.region), Tuning::default()).unwrap();
        for (id, ip) in &self.up {
            self.data.ssh.close(id, ip);
        }
        self.data = data_plane(&self.dir, &self.key);
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        for (id, ip) in &self.up {
            self.data.ssh.close(id, ip);
        }
        // Whatever a failed test left: terminated and deleted.
        let world = self.rt.block_on(ops::world(&self.ec2, &self.p));
        if let Ok(world) = world {
            let ids: Vec<String> = world.instances.iter().map(|i| i.id.clone()).collect();
            let _ = self.rt.block_on(ops::terminate(&self.ec2, &ids));
            if let Some(n) = &world.network {
                let _ = self
                    .rt
                    .block_on(ops::delete_network(&self.ec2, &self.p, &n.id));
            }
        }
        let _ = Command::new(STANDIN)
            .arg("stop")
            .arg(&self.machines.dir)
            .status();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn data_plane(dir: &Path, key: &Path) -> DataPlane {
    let mut data = DataPlane::new(
        Ssh {
            key: key.display().to_string(),
            dir: dir.display().to_string(),
            user: "root".into(),
            port: None,
        },
        skyc_targets::cloud::NODE_DIR.to_owned(),
        dir.join("logs"),
        Duration::from_secs(20),
    );
    // Stand-in machines have only their private address.
    data.private = true;
    data
}

const TRAINER: usize = 0;

#[test]
fn the_example_group_succeeds_on_stand_in_machines() {
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/train-eval.yaml"
    ))
    .unwrap();
    let Some(mut h) = Harness::new("example", &yaml) else {
        return;
    };
    let trainer0_ip = {
        h.until("launched", |h| h.instance_id(TRAINER, 0, 0).is_some());
        let w = h.world();
        w.instance(
            &h.p.as_run(),
            NodeKey {
                task: TRAINER,
                rank: 0,
                attempt: 0,
            },
        )
        .unwrap()
        .private_ip
        .clone()
        .unwrap()
    };
    let mut trainer_done = None;
    h.until("trainer done", |h| {
        h.d.engine.task_status(TRAINER) == Status::Succeeded
    });
    trainer_done.get_or_insert(Instant::now());
    h.run_to_the_end();
    // The evaluator ran on for its termination delay (5 s), then ended.
    assert!(trainer_done.unwrap().elapsed() >= Duration::from_secs(5));
    assert_eq!(h.d.engine.group_status(), Status::Succeeded);
    assert_eq!(h.d.engine.task_status(1), Status::Cancelled);
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    for rank in 0..2 {
        let trainer = h.log(&format!("trainer-{rank}"));
        assert!(
            trainer.contains(&format!("trainer rank {rank}/2 in train-eval"))
                && trainer.contains("training done"),
            "{trainer}"
        );
    }
    // The evaluator found the trainer by its group hostname, at the
    // trainer's instance address, and read its checkpoints.
    let evaluator = h.log("evaluator-0");
    assert!(
        evaluator.contains(&format!(
            "evaluator: trainer-0.train-eval is at {trainer0_ip}"
        )) && evaluator.contains("latest checkpoint:"),
        "{evaluator}"
    );
}

/// A trainer whose nodes print where they and their peers are, then run
/// a while; a helper beside it until it ends.
const LONG: &str = "\
name: lg
execution: parallel
primary_tasks: [trainer]
---
name: trainer
num_nodes: 2
run: |
  echo \"rank ${SKYPILOT_NODE_RANK} ips $(echo ${SKYPILOT_NODE_IPS})\"
  echo \"peer $(getent hosts trainer-1.lg | cut -d' ' -f1)\"
  sleep 15
  echo done
---
name: helper
run: sleep 600
";

#[test]
fn a_lost_instance_is_replaced_and_the_other_task_untouched() {
    let Some(mut h) = Harness::new("lost", &first_runs_outlast("lost")) else {
        return;
    };
    h.until("running its run", |h| {
        h.log("trainer-1").contains("rank 1") && h.log("trainer-0").contains("rank 0")
    });
    let helper = h.instance_id(1, 0, 0).unwrap();
    let victim = h.instance_id(TRAINER, 1, 0).unwrap();
    // Out of band: as EC2 reclaiming a spot instance.
    let mut q = query::action("TerminateInstances");
    query::list(&mut q, "InstanceId", &[&victim]);
    h.rt.block_on(h.ec2.call(&q)).unwrap();
    h.until("replaced", |h| {
        h.d.engine.attempt(TRAINER) == 1 && h.log("trainer-1").matches("rank 1").count() == 2
    });
    h.run_to_the_end();
    assert_eq!(h.d.engine.group_status(), Status::Succeeded);
    assert_eq!(h.d.engine.restarts(TRAINER), (1, 0), "no budget used");
    assert_eq!(h.d.engine.restarts(1), (0, 0));
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    // The helper ran on one instance throughout.
    let world = h.world();
    let helpers: Vec<_> = world
        .instances
        .iter()
        .filter(|i| World::key(&h.p.as_run(), i).is_some_and(|k| k.task == 1))
        .map(|i| i.id.clone())
        .collect();
    assert_eq!(helpers, vec![helper]);
    // The new nodes have new addresses, and the hostnames follow them.
    let new1 = world
        .instance(
            &h.p.as_run(),
            NodeKey {
                task: TRAINER,
                rank: 1,
                attempt: 1,
            },
        )
        .unwrap()
        .private_ip
        .clone()
        .unwrap();
    let log0 = h.log("trainer-0");
    assert!(
        log0.contains(&format!(
            "peer {new1}
"
        )),
        "{log0}"
    );
    assert_eq!(
        log0.matches("done").count(),
        1,
        "attempt 0 was stopped: {log0}"
    );
}

#[test]
fn a_primary_failure_ends_the_group_failed() {
    let yaml = LONG.replace("  sleep 15\n", "  exit 3\n");
    let Some(mut h) = Harness::new("fail", &yaml) else {
        return;
    };
    h.run_to_the_end();
    assert_eq!(h.d.engine.group_status(), Status::Failed);
    assert_eq!(h.d.engine.task_status(TRAINER), Status::Failed);
    assert_eq!(h.d.engine.task_status(1), Status::Cancelled);
    assert!(h.errors.is_empty(), "{:?}", h.errors);
}

#[test]
fn cancel_terminates_every_instance() {
    let Some(mut h) = Harness::new("cancel", LONG) else {
        return;
    };
    h.until("running its run", |h| h.log("trainer-0").contains("rank 0"));
    h.d.handle(Event::CancelRequested);
    h.run_to_the_end();
    assert_eq!(h.d.engine.group_status(), Status::Cancelled);
    assert!(!h.log("trainer-0").contains("done"));
}

#[test]
fn a_new_supervisor_carries_on_and_launches_nothing_twice() {
    let Some(mut h) = Harness::new("crash", LONG) else {
        return;
    };
    h.until("running its run", |h| h.log("trainer-0").contains("rank 0"));
    h.restart();
    h.run_to_the_end();
    assert_eq!(h.d.engine.group_status(), Status::Succeeded);
    assert_eq!(h.d.engine.restarts(TRAINER), (0, 0));
    assert_eq!(h.world().instances.len(), 3, "one instance per node");
}

/// LONG, with each rank's first run outlasting the test (it ends only if
/// it is stopped) and its second short. Stand-in machines share this
/// host's /tmp: the first run of a rank leaves a mark in the directory
/// of the harness named `name`.
fn first_runs_outlast(name: &str) -> String {
    let marks = format!("/tmp/skyc-si-{name}-{}", std::process::id());
    LONG.replace(
        "  sleep 15\n",
        &format!("  if mkdir {marks}/rank-$SKYPILOT_NODE_RANK; then sleep 600; else sleep 2; fi\n"),
    )
}

#[test]
fn a_node_that_goes_silent_is_lost_and_its_task_restarts() {
    let Some(mut h) = Harness::new("silent", &first_runs_outlast("silent")) else {
        return;
    };
    h.data.silence = Duration::from_secs(5);
    h.until("running its run", |h| {
        h.log("trainer-1").contains("rank 1") && h.log("trainer-0").contains("rank 0")
    });
    // The machine stops answering while EC2 still reports it running,
    // as a hung host does.
    let victim = h.instance_id(TRAINER, 1, 0).unwrap();
    Command::new(STANDIN)
        .arg("down")
        .arg(&h.machines.dir)
        .arg(&victim)
        .status()
        .unwrap();
    h.until("replaced", |h| h.d.engine.attempt(TRAINER) == 1);
    h.run_to_the_end();
    assert_eq!(h.d.engine.group_status(), Status::Succeeded);
    assert_eq!(h.d.engine.restarts(TRAINER), (1, 0), "no budget used");
    assert_eq!(h.d.engine.restarts(1), (0, 0));
    let errors: Vec<_> = h.errors.iter().collect();
    assert!(
        errors.len() == 1
            && errors[0].starts_with(&format!("trainer-1 ({victim}): no usable SSH answer for"))
            && errors[0].contains("the node is lost"),
        "{errors:?}"
    );
}

#[test]
fn a_node_ssh_never_reaches_fails_its_setup_saying_why() {
    let Some(mut h) = Harness::new("never", LONG) else {
        return;
    };
    // A login user that cannot run the commands (no shell, no sudo), as
    // a wrong --ssh-user: they fail on every node.
    h.data.ssh.user = "nobody".into();
    h.data.silence = Duration::from_secs(5);
    h.run_to_the_end();
    assert_eq!(h.d.engine.group_status(), Status::FailedSetup);
    assert!(
        h.errors.iter().any(|e| e.starts_with("trainer-0 (")
            && e.contains("no usable SSH answer in 5 s")
            && e.contains("--ssh-user")),
        "{:?}",
        h.errors
    );
}

/// A pipeline whose steps say where they run: the first on one machine,
/// the second on two that find each other's addresses, the third on one.
const PIPELINE: &str = "\
name: pl
---
name: prep
run: |
  echo \"prep on $(hostname) group=${SKYPILOT_JOBGROUP_NAME-none} id=$SKYPILOT_TASK_ID\"
---
name: train
num_nodes: 2
run: |
  echo \"rank ${SKYPILOT_NODE_RANK} ips $(echo ${SKYPILOT_NODE_IPS})\"
  sleep 4
  echo done
---
name: report
run: |
  echo \"report on $(hostname)\"
";

/// The instance ids of a step, every attempt.
fn step_instances(h: &Harness, world: &World, task: usize) -> Vec<String> {
    world
        .instances
        .iter()
        .filter(|i| World::key(&h.p.as_run(), i).is_some_and(|k| k.task == task))
        .map(|i| i.id.clone())
        .collect()
}

/// Whether the instances of `task` and the steps after it are none, and
/// those of the steps before it all ending: what must hold while `task`
/// has not started.
fn only_steps_before(h: &Harness, task: usize) -> bool {
    let world = h.world();
    for later in task + 1..h.p.spec.tasks.len() {
        assert!(
            step_instances(h, &world, later).is_empty(),
            "step {later} launched while step {task} runs"
        );
    }
    let running = step_instances(h, &world, task);
    if running.is_empty() {
        return false;
    }
    for earlier in 0..task {
        for id in step_instances(h, &world, earlier) {
            let i = world.instances.iter().find(|i| i.id == id).unwrap();
            assert!(
                i.state.is_some_and(State::is_ending),
                "step {earlier}'s {id} still runs in step {task}"
            );
        }
    }
    true
}

#[test]
fn a_pipeline_runs_its_steps_one_after_another_on_their_own_machines() {
    let Some(mut h) = Harness::new("pipe", PIPELINE) else {
        return;
    };
    h.until("the first step running", |h| only_steps_before(h, 0));
    h.until("the second step running", |h| {
        only_steps_before(h, 1) && h.log("train-0").contains("rank 0")
    });
    // A new supervisor mid-pipeline: it resumes at the running step.
    h.restart();
    h.until("the last step launched", |h| only_steps_before(h, 2));
    h.run_to_the_end();
    assert_eq!(h.d.engine.group_status(), Status::Succeeded);
    for t in 0..3 {
        assert_eq!(h.d.engine.task_status(t), Status::Succeeded);
    }
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    let world = h.world();
    assert_eq!(
        world.instances.len(),
        4,
        "one instance per node of each step"
    );
    let ip = |task: usize, rank: u32| {
        world
            .instance(
                &h.p.as_run(),
                NodeKey {
                    task,
                    rank,
                    attempt: 0,
                },
            )
            .unwrap()
            .private_ip
            .clone()
            .unwrap()
    };
    // Each machine is named after its address (`ip-10-0-0-1`).
    let host = |task: usize| format!("ip-{}", ip(task, 0).replace('.', "-"));
    let prep = h.log("prep-0");
    assert!(
        prep.contains(&format!(
            "prep on {} group=none id=skyc-aws_pl_prep-0",
            host(0)
        )),
        "{prep}"
    );
    // The step's nodes have each other's addresses (its hosts file).
    let ips = format!("ips {} {}", ip(1, 0), ip(1, 1));
    for rank in 0..2 {
        let log = h.log(&format!("train-{rank}"));
        assert!(
            log.contains(&format!("rank {rank} {ips}")) && log.contains("done"),
            "{log}"
        );
    }
    let report = h.log("report-0");
    assert!(
        report.contains(&format!("report on {}", host(2))),
        "{report}"
    );
    assert_ne!(host(0), host(2));
}

#[test]
fn a_failed_pipeline_step_cancels_the_rest_unlaunched() {
    let yaml = PIPELINE.replace("  sleep 4\n", "  exit 3\n");
    let Some(mut h) = Harness::new("pipefail", &yaml) else {
        return;
    };
    h.until("the second step running", |h| only_steps_before(h, 1));
    h.run_to_the_end();
    assert_eq!(h.d.engine.task_status(0), Status::Succeeded);
    assert_eq!(h.d.engine.task_status(1), Status::Failed);
    assert_eq!(h.d.engine.task_status(2), Status::Cancelled);
    assert_eq!(h.d.engine.group_status(), Status::Failed);
    assert!(h.errors.is_empty(), "{:?}", h.errors);
    let world = h.world();
    assert!(step_instances(&h, &world, 2).is_empty(), "never launched");
    assert_eq!(world.instances.len(), 3);
    assert!(!h.log("train-0").contains("done"));
}
