//! The control plane against moto's server on loopback: an EC2 stand-in
//! (PyPI `moto[server]`), not EC2. scripts/test starts it (scripts/moto)
//! and exports SKYC_MOTO_ENDPOINT and SKYC_MOTO_REQUIRED=1: there a
//! missing server fails these tests; a bare `cargo test` without one skips
//! them with a loud message.
//!
//! What moto does not do as EC2 does, and so what these tests do not
//! show: it records a `RunInstances` `ClientToken` but does not
//! deduplicate by it (moto 5.2.5; here a launch is kept single by the
//! reconciler finding the attempt's instance first, on EC2 by the token
//! too); it has no placement groups, no spot interruptions (an instance
//! is terminated out of band instead), no eventual consistency, and it
//! runs no VM.
//!
//! Each test is its own run (its own `skyc-run` tag), so they share one
//! server.

use super::{Driven, GROUP, plan};
use crate::aws::client::{Ec2, Error, Tuning};
use crate::aws::config::Settings;
use crate::aws::node::Outcomes;
use crate::aws::observe::observe;
use crate::aws::ops;
use crate::aws::plan::{Plan, client_token};
use crate::aws::query;
use crate::aws::reconcile::{reconcile, settled};
use crate::aws::response::State;
use crate::aws::retry::Backoff;
use crate::aws::sigv4::Credentials;
use crate::aws::world::{NodeKey, World};
use crate::backend::Report;
use crate::k8s::goal::Goal;
use crate::policy::{Event, Phase, Status, Timer};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const TRAINER: usize = 0;
const BUFFER: usize = 1;

/// The stand-in's endpoint, or `None` (after a loud message) when there
/// is none and none is required.
fn endpoint() -> Option<String> {
    match std::env::var("SKYC_MOTO_ENDPOINT") {
        Ok(e) if !e.is_empty() => Some(e),
        _ => {
            assert!(
                std::env::var_os("SKYC_MOTO_REQUIRED").is_none(),
                "SKYC_MOTO_REQUIRED is set but SKYC_MOTO_ENDPOINT is not"
            );
            eprintln!(
                "!!! SKIPPED: no EC2 stand-in (SKYC_MOTO_ENDPOINT unset); scripts/test starts one (scripts/moto)"
            );
            None
        }
    }
}

fn settings(endpoint: &str) -> Settings {
    // moto takes any credentials; these could sign nothing on AWS.
    Settings {
        profile: "default".into(),
        credentials: Credentials {
            access_key_id: "AKIDSKYCTEST".into(),
            secret_access_key: "skyc-test-secret".into(),
            session_token: None,
        },
        credentials_source: "the test".into(),
        region: None,
        endpoint: Some(endpoint.to_owned()),
    }
}

fn client(endpoint: &str, plan: &Plan) -> Ec2 {
    Ec2::new(&settings(endpoint), Some(&plan.region), Tuning::default()).unwrap()
}

/// A run id no other test (or earlier run of the suite) uses.
fn run_id(name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{name}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One pass of the supervisor's loop: read the run's world, tell the
/// engine what it shows, then carry out the reconciler's operations.
/// Returns the reports it gave the engine.
async fn pass(ec2: &Ec2, p: &Plan, d: &mut Driven) -> Vec<Report> {
    let world = ops::world(ec2, p).await.unwrap();
    let reports = observe(p, &world, &Goal::from_engine(&d.engine), &Outcomes::new());
    for r in &reports {
        if let Report::Event { event, .. } = r {
            d.handle(event.clone());
        }
    }
    let world = ops::world(ec2, p).await.unwrap();
    for op in reconcile(p, &world, &Goal::from_engine(&d.engine)) {
        ops::apply(ec2, p, &world, &op).await.unwrap();
    }
    reports
}

/// Passes until `done` holds (at most 30).
async fn until(ec2: &Ec2, p: &Plan, d: &mut Driven, done: impl Fn(&Driven, &World) -> bool) {
    for _ in 0..30 {
        pass(ec2, p, d).await;
        let world = ops::world(ec2, p).await.unwrap();
        if done(d, &world) {
            return;
        }
    }
    panic!(
        "not converged: {:?}",
        ops::world(ec2, p).await.unwrap().instances
    );
}

fn state_of(world: &World, p: &Plan, task: usize, rank: u32, attempt: u32) -> Option<State> {
    world
        .instance(
            p,
            NodeKey {
                task,
                rank,
                attempt,
            },
        )
        .and_then(|i| i.state)
}

/// Instances not shutting down or terminated.
fn live_ids(world: &World) -> Vec<String> {
    let mut ids: Vec<String> = world
        .instances
        .iter()
        .filter(|i| !i.state.is_some_and(State::is_ending))
        .map(|i| i.id.clone())
        .collect();
    ids.sort();
    ids
}

async fn running_group(ec2: &Ec2, p: &Plan) -> Driven {
    let mut d = Driven::start(p);
    until(ec2, p, &mut d, |d, _| {
        d.engine.task_status(TRAINER) == Status::Running
            && d.engine.task_status(BUFFER) == Status::Running
    })
    .await;
    d
}

#[test]
fn launches_a_groups_instances_from_the_build() {
    let Some(endpoint) = endpoint() else { return };
    let p = plan(GROUP, &run_id("launch"));
    rt().block_on(async {
        let ec2 = client(&endpoint, &p);
        let d = running_group(&ec2, &p).await;
        let world = ops::world(&ec2, &p).await.unwrap();
        let sg = world.network.clone().expect("the run's security group");
        assert_eq!(world.instances.len(), 3);
        for (task, rank) in [(TRAINER, 0), (TRAINER, 1), (BUFFER, 0)] {
            let i = world
                .instance(
                    &p,
                    NodeKey {
                        task,
                        rank,
                        attempt: 0,
                    },
                )
                .unwrap();
            assert_eq!(i.state, Some(State::Running));
            assert_eq!(i.tags["skyc-group"], "g");
            assert_eq!(
                i.tags["Name"],
                format!("g-{}-{rank}", p.spec.tasks[task].name)
            );
            assert_eq!(
                i.client_token.as_deref(),
                Some(client_token(&p.run, &p.spec.tasks[task].name, rank, 0).as_str())
            );
            assert!(i.private_ip.is_some());
        }
        // In the run's security group, and with the boot script as the
        // build wrote it (sent base64-encoded, as the SDKs do).
        let mut q = query::action("DescribeInstances");
        query::filters(
            &mut q,
            &[("instance.group-id", &[&sg]), ("tag:skyc-run", &[&p.run])],
        );
        let body = ec2.call(&q).await.unwrap();
        assert_eq!(crate::aws::response::instances(&body).unwrap().0.len(), 3);
        let id = &world.instances[0].id;
        let mut q = query::action("DescribeInstanceAttribute");
        q.push(("InstanceId".into(), id.clone()));
        q.push(("Attribute".into(), "userData".into()));
        let body = ec2.call(&q).await.unwrap();
        let doc = roxmltree::Document::parse(&body).unwrap();
        let b64 = doc
            .descendants()
            .find(|n| n.tag_name().name() == "value")
            .and_then(|n| n.text())
            .unwrap();
        use base64::Engine as _;
        let text = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(b64.trim())
                .unwrap(),
        )
        .unwrap();
        let key = crate::aws::world::World::key(&p, &world.instances[0]).unwrap();
        assert_eq!(
            text,
            p.nodes[key.task][key.rank as usize]["UserData"]
                .as_str()
                .unwrap()
        );
        drop(d);
        cleanup(&ec2, &p).await;
    });
}

/// Terminates whatever a test left and deletes its security group.
async fn cleanup(ec2: &Ec2, p: &Plan) {
    let world = ops::world(ec2, p).await.unwrap();
    let ids: Vec<String> = live_ids(&world);
    ops::terminate(ec2, &ids).await.unwrap();
    if let Some(sg) = &world.network {
        ops::delete_network(ec2, p, sg).await.unwrap();
    }
}

#[test]
fn a_launch_repeated_is_one_instance() {
    let Some(endpoint) = endpoint() else { return };
    let p = plan(GROUP, &run_id("twice"));
    rt().block_on(async {
        let ec2 = client(&endpoint, &p);
        let d = Driven::start(&p);
        let goal = Goal::from_engine(&d.engine);
        let sg = ops::ensure_network(&ec2, &p).await.unwrap();
        // The network is made once, however often it is asked for.
        assert_eq!(ops::ensure_network(&ec2, &p).await.unwrap(), sg);
        // A supervisor that launched, died before it recorded anything,
        // and came back: it reads the world and launches only what is
        // missing.
        let first = ops::launch(&ec2, &p, TRAINER, 0, 0, &sg).await.unwrap();
        let world = ops::world(&ec2, &p).await.unwrap();
        let ops_now = reconcile(&p, &world, &goal);
        for op in &ops_now {
            ops::apply(&ec2, &p, &world, op).await.unwrap();
        }
        let world = ops::world(&ec2, &p).await.unwrap();
        assert_eq!(world.instances.len(), 3);
        assert_eq!(
            world
                .instance(
                    &p,
                    NodeKey {
                        task: TRAINER,
                        rank: 0,
                        attempt: 0
                    }
                )
                .unwrap()
                .id,
            first.id
        );
        assert!(reconcile(&p, &world, &goal).is_empty());
        cleanup(&ec2, &p).await;
    });
}

#[test]
fn a_new_client_finds_the_run_again() {
    let Some(endpoint) = endpoint() else { return };
    let p = plan(GROUP, &run_id("again"));
    rt().block_on(async {
        let ec2 = client(&endpoint, &p);
        let d = running_group(&ec2, &p).await;
        let before = ops::world(&ec2, &p).await.unwrap();
        // A restarted supervisor: a new client, the plan and engine as
        // stored.
        let stored: Plan = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        let again = client(&endpoint, &stored);
        let after = ops::world(&again, &stored).await.unwrap();
        assert_eq!(after.network, before.network);
        assert_eq!(live_ids(&after), live_ids(&before));
        assert!(reconcile(&stored, &after, &Goal::from_engine(&d.engine)).is_empty());
        // Another run of the same group sees none of it.
        let other = plan(GROUP, &run_id("other"));
        let theirs = ops::world(&again, &other).await.unwrap();
        assert!(theirs.instances.is_empty() && theirs.network.is_none());
        cleanup(&ec2, &p).await;
    });
}

#[test]
fn auxiliaries_end_after_the_primaries_and_the_network_last() {
    let Some(endpoint) = endpoint() else { return };
    let p = plan(GROUP, &run_id("aux"));
    rt().block_on(async {
        let ec2 = client(&endpoint, &p);
        let mut d = running_group(&ec2, &p).await;
        let buffer = ops::world(&ec2, &p)
            .await
            .unwrap()
            .instance(
                &p,
                NodeKey {
                    task: BUFFER,
                    rank: 0,
                    attempt: 0,
                },
            )
            .unwrap()
            .id
            .clone();
        // The trainer's nodes end well (what the data plane will report).
        for node in 0..2 {
            d.handle(Event::NodeExited {
                task: TRAINER,
                attempt: 0,
                node,
                phase: Phase::Run,
                code: 0,
            });
        }
        pass(&ec2, &p, &mut d).await;
        let world = ops::world(&ec2, &p).await.unwrap();
        assert_eq!(
            live_ids(&world),
            vec![buffer.clone()],
            "only the buffer runs on"
        );
        assert_eq!(d.timers, vec![Timer::AuxiliaryDelay(BUFFER)]);
        d.handle(Event::TimerFired(Timer::AuxiliaryDelay(BUFFER)));
        until(&ec2, &p, &mut d, |d, w| {
            settled(w, &Goal::from_engine(&d.engine))
        })
        .await;
        assert_eq!(d.engine.group_status(), Status::Succeeded);
        assert_eq!(d.engine.task_status(BUFFER), Status::Cancelled);
        let world = ops::world(&ec2, &p).await.unwrap();
        assert!(world.network.is_none(), "the security group is deleted");
        assert!(
            world
                .instances
                .iter()
                .all(|i| i.state == Some(State::Terminated))
        );
    });
}

#[test]
fn cancel_terminates_every_instance() {
    let Some(endpoint) = endpoint() else { return };
    let p = plan(GROUP, &run_id("cancel"));
    rt().block_on(async {
        let ec2 = client(&endpoint, &p);
        let mut d = running_group(&ec2, &p).await;
        d.handle(Event::CancelRequested);
        until(&ec2, &p, &mut d, |d, w| {
            settled(w, &Goal::from_engine(&d.engine))
        })
        .await;
        assert_eq!(d.engine.group_status(), Status::Cancelled);
        let world = ops::world(&ec2, &p).await.unwrap();
        assert_eq!(world.instances.len(), 3);
        assert!(live_ids(&world).is_empty());
        assert!(world.network.is_none());
    });
}

#[test]
fn an_instance_terminated_out_of_band_is_a_lost_node() {
    let Some(endpoint) = endpoint() else { return };
    let p = plan(GROUP, &run_id("lost"));
    rt().block_on(async {
        let ec2 = client(&endpoint, &p);
        let mut d = running_group(&ec2, &p).await;
        let world = ops::world(&ec2, &p).await.unwrap();
        let victim = world
            .instance(
                &p,
                NodeKey {
                    task: TRAINER,
                    rank: 1,
                    attempt: 0,
                },
            )
            .unwrap()
            .id
            .clone();
        let buffer = world
            .instance(
                &p,
                NodeKey {
                    task: BUFFER,
                    rank: 0,
                    attempt: 0,
                },
            )
            .unwrap()
            .id
            .clone();
        // Out of band: as a user, or EC2 reclaiming a spot instance.
        let mut q = query::action("TerminateInstances");
        query::list(&mut q, "InstanceId", &[&victim]);
        ec2.call(&q).await.unwrap();
        let reports = pass(&ec2, &p, &mut d).await;
        assert!(reports.contains(&Report::Event {
            event: Event::NodeLost {
                task: TRAINER,
                attempt: 0,
                node: 1
            },
            at_ms: None
        }));
        let message = reports
            .iter()
            .find_map(|r| match r {
                Report::Error(m) => Some(m.clone()),
                _ => None,
            })
            .unwrap();
        assert!(
            message.contains(&format!("trainer-1 ({victim})"))
                && message.contains("Client.UserInitiatedShutdown"),
            "{message}"
        );
        until(&ec2, &p, &mut d, |d, w| {
            d.engine.attempt(TRAINER) == 1
                && state_of(w, &p, TRAINER, 0, 1) == Some(State::Running)
                && state_of(w, &p, TRAINER, 1, 1) == Some(State::Running)
                && d.engine.task_status(TRAINER) == Status::Running
        })
        .await;
        assert_eq!(d.engine.restarts(TRAINER), (1, 0), "no budget used");
        let world = ops::world(&ec2, &p).await.unwrap();
        // The buffer was not touched; the trainer's old instances are gone.
        assert_eq!(state_of(&world, &p, BUFFER, 0, 0), Some(State::Running));
        assert_eq!(
            world
                .instance(
                    &p,
                    NodeKey {
                        task: BUFFER,
                        rank: 0,
                        attempt: 0
                    }
                )
                .unwrap()
                .id,
            buffer
        );
        assert!(state_of(&world, &p, TRAINER, 0, 0).is_some_and(State::is_ending));
        assert_eq!(d.engine.task_status(BUFFER), Status::Running);
        cleanup(&ec2, &p).await;
    });
}

#[test]
fn an_instance_stopped_out_of_band_is_a_lost_node() {
    let Some(endpoint) = endpoint() else { return };
    let p = plan(GROUP, &run_id("stopped"));
    rt().block_on(async {
        let ec2 = client(&endpoint, &p);
        let mut d = running_group(&ec2, &p).await;
        let world = ops::world(&ec2, &p).await.unwrap();
        let buffer = world
            .instance(
                &p,
                NodeKey {
                    task: BUFFER,
                    rank: 0,
                    attempt: 0,
                },
            )
            .unwrap()
            .id
            .clone();
        let mut q = query::action("StopInstances");
        query::list(&mut q, "InstanceId", &[&buffer]);
        ec2.call(&q).await.unwrap();
        until(&ec2, &p, &mut d, |d, w| {
            d.engine.attempt(BUFFER) == 1 && state_of(w, &p, BUFFER, 0, 1) == Some(State::Running)
        })
        .await;
        // The stopped instance is terminated: nothing of an old attempt
        // stays, not even stopped.
        let world = ops::world(&ec2, &p).await.unwrap();
        assert!(state_of(&world, &p, BUFFER, 0, 0).is_some_and(State::is_ending));
        assert_eq!(state_of(&world, &p, TRAINER, 0, 0), Some(State::Running));
        assert_eq!(d.engine.attempt(TRAINER), 0);
        cleanup(&ec2, &p).await;
    });
}

#[test]
fn an_unreachable_endpoint_fails_in_bounded_time() {
    // A port nothing listens on: no stand-in needed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let p = plan(GROUP, "unreachable");
    let tuning = Tuning {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(2),
        backoff: Backoff {
            first: Duration::from_millis(10),
            max: Duration::from_millis(50),
            tries: 3,
        },
    };
    let ec2 = Ec2::new(
        &settings(&format!("http://127.0.0.1:{port}")),
        Some(&p.region),
        tuning,
    )
    .unwrap();
    let started = Instant::now();
    let e = rt().block_on(ops::world(&ec2, &p)).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with(&format!(
            "cannot reach the EC2 endpoint http://127.0.0.1:{port}: "
        )),
        "{e}"
    );
}

#[test]
fn refusals_are_clear() {
    let Some(endpoint) = endpoint() else { return };
    let p = plan(GROUP, &run_id("refused"));
    rt().block_on(async {
        let ec2 = client(&endpoint, &p);
        let mut q = query::action("TerminateInstances");
        query::list(&mut q, "InstanceId", &["i-00000000000000000"]);
        let e = ec2.call(&q).await.unwrap_err();
        assert_eq!(e.code(), Some("InvalidInstanceID.NotFound"));
        assert!(
            e.to_string()
                .starts_with("EC2 refused TerminateInstances: InvalidInstanceID.NotFound"),
            "{e}"
        );
        // Terminating what is gone is done.
        ops::terminate(&ec2, &["i-00000000000000000".to_owned()])
            .await
            .unwrap();
    });
}
