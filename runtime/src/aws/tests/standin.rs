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
use crate::aws::client::{Ec2, Tuning};
use crate::aws::config::Settings;
use crate::aws::data::DataPlane;
use crate::aws::ops;
use crate::aws::pass::pass;
use crate::aws::plan::Plan;
use crate::aws::query;
use crate::aws::remote::Ssh;
use crate::aws::response::State;
use crate::aws::sigv4::Credentials;
use crate::backend::Report;
use crate::k8s::goal::Goal;
use crate::policy::{Event, Status, Timer};
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

fn plan(run: &str) -> Plan {
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/train-eval.yaml"
    ))
    .unwrap();
    super::plan(&yaml, run)
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

#[test]
fn the_example_group_succeeds_on_stand_in_machines() {
    let Some(endpoint) = ready() else { return };
    let run = format!("standin-{}", std::process::id());
    let p = plan(&run);
    // Short: the SSH connection sockets live here.
    let dir = PathBuf::from(format!("/tmp/skyc-si-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let machines = Machines { dir: dir.join("m") };
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut d = Driven::start(&p);
    let mut up: BTreeMap<String, String> = BTreeMap::new();
    let mut due: Vec<(Instant, Timer)> = Vec::new();
    let mut seen_timers = 0;
    let mut errors = BTreeSet::new();
    let start = Instant::now();
    rt.block_on(async {
        loop {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the group did not end: {:?}; errors {errors:?}",
                d.engine
            );
            // Timers, as the supervisor fires them (the engine's delays).
            for timer in &d.timers[seen_timers..] {
                let after = match timer {
                    Timer::AuxiliaryDelay(task) => p.spec.tasks[*task].termination_delay,
                    Timer::Kill { .. } => p.spec.grace,
                };
                due.push((Instant::now() + after, *timer));
            }
            seen_timers = d.timers.len();
            let now = Instant::now();
            for (_, timer) in due.iter().filter(|(at, _)| *at <= now) {
                d.handle(Event::TimerFired(*timer));
            }
            due.retain(|(at, _)| *at > now);

            let goal = Goal::from_engine(&d.engine);
            let world = ops::world(&ec2, &p).await.unwrap();
            // The machines follow the instances.
            for i in &world.instances {
                let running = i.state == Some(State::Running);
                if running && !up.contains_key(&i.id) {
                    let ud = dir.join(format!("{}.user-data", i.id));
                    std::fs::write(&ud, user_data(&ec2, &i.id).await).unwrap();
                    let ip = i.private_ip.clone().unwrap();
                    let ok = Command::new(STANDIN)
                        .arg("up")
                        .arg(&machines.dir)
                        .arg(&i.id)
                        .arg(&ip)
                        .arg(&ud)
                        .arg(key.with_extension("pub"))
                        .status()
                        .unwrap()
                        .success();
                    assert!(ok, "scripts/standin up {}", i.id);
                    up.insert(i.id.clone(), ip);
                } else if !running && up.contains_key(&i.id) {
                    data.ssh.close(&up[&i.id]);
                    Command::new(STANDIN)
                        .arg("down")
                        .arg(&machines.dir)
                        .arg(&i.id)
                        .status()
                        .unwrap();
                    up.remove(&i.id);
                }
            }
            let (outcomes, errs) = data.step(&p, &world, &goal);
            errors.extend(errs);
            let passed = pass(&ec2, &p, &goal, outcomes).await;
            let mut settled = false;
            for r in passed.reports {
                match r {
                    Report::Event { event, .. } => d.handle(event),
                    Report::Settled => settled = true,
                    Report::Error(e) => {
                        errors.insert(e);
                    }
                    _ => {}
                }
            }
            if d.engine.is_finished() && settled {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    assert_eq!(d.engine.group_status(), Status::Succeeded, "{errors:?}");
    assert_eq!(d.engine.task_status(0), Status::Succeeded);
    assert_eq!(d.engine.task_status(1), Status::Cancelled);
    assert!(errors.is_empty(), "{errors:?}");
    let log = |name: &str| std::fs::read_to_string(dir.join("logs").join(name)).unwrap();
    for rank in 0..2 {
        let trainer = log(&format!("trainer-{rank}.log"));
        assert!(
            trainer.contains(&format!("trainer rank {rank}/2 in train-eval"))
                && trainer.contains("training done"),
            "{trainer}"
        );
    }
    // The evaluator found the trainer by its group hostname, at the
    // trainer's instance address, and read its checkpoints.
    let evaluator = log("evaluator-0.log");
    let world = rt.block_on(ops::world(&ec2, &p)).unwrap();
    let trainer0 = world
        .instance(
            &p,
            crate::aws::world::NodeKey {
                task: 0,
                rank: 0,
                attempt: 0,
            },
        )
        .unwrap();
    assert!(
        evaluator.contains(&format!(
            "evaluator: trainer-0.train-eval is at {}",
            trainer0.private_ip.as_deref().unwrap()
        )) && evaluator.contains("latest checkpoint:"),
        "{evaluator}"
    );
    // Nothing outlives the group: every instance terminated, every
    // machine stopped, the security group deleted.
    assert!(
        world
            .instances
            .iter()
            .all(|i| i.state == Some(State::Terminated))
    );
    assert!(world.network.is_none());
    assert!(up.is_empty(), "machines still up: {up:?}");
    drop(machines);
    let _ = std::fs::remove_dir_all(&dir);
}
