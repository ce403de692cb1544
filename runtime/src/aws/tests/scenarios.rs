//! The control plane's scenarios, run against an EC2 endpoint: moto's
//! server on loopback (`moto.rs`, every test run) or AWS itself
//! (`e2e.rs`, only when asked). Each scenario is its own run (its own
//! `skyc-run` tag), so they share an endpoint, and whatever a scenario
//! leaves, even when it fails, is terminated and deleted after it.
//!
//! The loop is the supervisor's: read the run's world, tell the engine
//! what it shows, carry out the reconciler's operations; on AWS, which is
//! eventually consistent and slow to change states, it polls every few
//! seconds until a deadline.

use super::{Driven, PREP, REPORT, TRAIN, exited, plan};
use crate::aws::control::ops;
use crate::aws::control::provider::Ec2Run;
use crate::aws::ec2::client::{Ec2, Tuning};
use crate::aws::ec2::config::Settings;
use crate::aws::ec2::query;
use crate::aws::ec2::response::State;
use crate::aws::plan::{Plan, client_token};
use crate::backend::Report;
use crate::cloud::control::reconcile::{reconcile, settled};
use crate::cloud::data::node::Outcomes;
use crate::cloud::world::{NodeKey, World};
use crate::policy::{Event, Phase, Status, Timer};
use crate::reconciler::Told;
use crate::reconciler::goal::Goal;
use futures::FutureExt as _;
use futures::future::BoxFuture;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const TRAINER: usize = 0;
const BUFFER: usize = 1;

/// An EC2 endpoint to run scenarios against.
pub(super) struct Target {
    pub(super) settings: Settings,
    /// The group every scenario runs: a primary of two nodes, an
    /// auxiliary with a delay (`super::GROUP`, or a cheaper one on AWS).
    pub(super) group: &'static str,
    /// Between two passes of the loop.
    pub(super) poll: Duration,
    /// How long a scenario waits for EC2 to get somewhere.
    pub(super) deadline: Duration,
    /// Whether a failed call fails the scenario at once (the stand-in
    /// answers everything at once) or is tried again on the next pass
    /// (EC2 is eventually consistent: a security group just made may not
    /// be found yet).
    pub(super) strict: bool,
}

impl Target {
    pub(super) fn client(&self, plan: &Plan) -> Ec2 {
        Ec2::new(&self.settings, Some(&plan.region), Tuning::default())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs one scenario as its own run, then terminates and deletes
    /// whatever the run left, whether the scenario passed or not.
    pub(super) fn run<F>(&self, name: &str, scenario: F)
    where
        F: for<'a> FnOnce(&'a Target, &'a Plan, &'a Ec2) -> BoxFuture<'a, ()>,
    {
        self.run_group(name, self.group, scenario);
    }

    /// [`Target::run`] with another group (a pipeline).
    pub(super) fn run_group<F>(&self, name: &str, group: &str, scenario: F)
    where
        F: for<'a> FnOnce(&'a Target, &'a Plan, &'a Ec2) -> BoxFuture<'a, ()>,
    {
        let plan = plan(group, &run_id(name));
        let ec2 = self.client(&plan);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let outcome = rt.block_on(AssertUnwindSafe(scenario(self, &plan, &ec2)).catch_unwind());
        rt.block_on(cleanup(self, &ec2, &plan));
        if let Err(panic) = outcome {
            std::panic::resume_unwind(panic);
        }
    }
}

/// A run id no other test (or earlier run of the suite) uses.
fn run_id(name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    // The scenario's initials: `a_new_client` is `anc`.
    let initials: String = name
        .split(['_', '-'])
        .filter_map(|w| w.chars().next())
        .filter(char::is_ascii_alphanumeric)
        .take(10)
        .collect();
    format!(
        "{initials}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One pass of the supervisor's loop ([`crate::cloud::control::pass`]), with
/// the engine hearing what it reports. Returns the reports.
async fn pass(t: &Target, ec2: &Ec2, p: &Plan, d: &mut Driven) -> Vec<Report> {
    let passed = crate::cloud::control::pass::pass(
        &Ec2Run {
            ec2,
            files: None,
            plan: p,
        },
        &Goal::from_engine(&d.engine),
        &Outcomes::new(),
        // Each pass's reports whole, as the engine ignores a repeat.
        &mut Told::default(),
    )
    .await;
    let errors: Vec<&Report> = passed
        .reports
        .iter()
        .filter(|r| matches!(r, Report::Error(m) if !m.contains("out of band")))
        .collect();
    if t.strict {
        assert_eq!(passed.outage, None);
        assert!(errors.is_empty(), "{errors:?}");
    } else if passed.outage.is_some() || !errors.is_empty() {
        eprintln!("pass: {:?} {errors:?}", passed.outage);
    }
    for r in &passed.reports {
        if let Report::Event { event, .. } = r {
            d.handle(event.clone());
        }
    }
    passed.reports
}

/// Passes until `done` holds, or the target's deadline.
async fn until(
    t: &Target,
    ec2: &Ec2,
    p: &Plan,
    d: &mut Driven,
    done: impl Fn(&Driven, &World) -> bool,
) {
    let start = Instant::now();
    loop {
        pass(t, ec2, p, d).await;
        if let Ok(world) = ops::world(ec2, p).await
            && done(d, &world)
        {
            return;
        }
        if start.elapsed() > t.deadline {
            panic!(
                "not there after {:?}: {:?}",
                t.deadline,
                ops::world(ec2, p).await.map(|w| w.instances)
            );
        }
        tokio::time::sleep(t.poll).await;
    }
}

/// The run's world, once `done` holds of it (EC2 shows changes late).
async fn world_when(t: &Target, ec2: &Ec2, p: &Plan, done: impl Fn(&World) -> bool) -> World {
    let start = Instant::now();
    loop {
        let world = ops::world(ec2, p).await.unwrap();
        if done(&world) {
            return world;
        }
        if start.elapsed() > t.deadline {
            panic!("not there after {:?}: {:?}", t.deadline, world.instances);
        }
        tokio::time::sleep(t.poll).await;
    }
}

fn state_of(world: &World, p: &Plan, task: usize, rank: u32, attempt: u32) -> Option<State> {
    world
        .instance(
            &p.as_run(),
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

async fn running_group(t: &Target, ec2: &Ec2, p: &Plan) -> Driven {
    let mut d = Driven::start(p);
    until(t, ec2, p, &mut d, |d, _| {
        d.engine.task_status(TRAINER) == Status::Running
            && d.engine.task_status(BUFFER) == Status::Running
    })
    .await;
    d
}

pub(super) async fn launches_a_groups_instances_from_the_build(t: &Target, p: &Plan, ec2: &Ec2) {
    let d = running_group(t, ec2, p).await;
    let world = ops::world(ec2, p).await.unwrap();
    let sg = world.network.clone().expect("the run's security group");
    assert!(sg.ready);
    let sg = sg.id;
    assert_eq!(world.instances.len(), 3);
    for (task, rank) in [(TRAINER, 0), (TRAINER, 1), (BUFFER, 0)] {
        let i = world
            .instance(
                &p.as_run(),
                NodeKey {
                    task,
                    rank,
                    attempt: 0,
                },
            )
            .unwrap();
        assert_eq!(i.state, Some(State::Running));
        assert_eq!(i.tags["skyc-group"], p.group);
        assert_eq!(
            i.tags["Name"],
            format!("{}-{}-{rank}", p.group, p.spec.tasks[task].name)
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
    assert_eq!(
        crate::aws::ec2::response::instances(&body).unwrap().0.len(),
        3
    );
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
    let key = crate::cloud::world::World::key(&p.as_run(), &world.instances[0]).unwrap();
    assert_eq!(
        text,
        p.nodes[key.task][key.rank as usize]["UserData"]
            .as_str()
            .unwrap()
    );
    drop(d);
}

/// Terminates whatever a run left and deletes its security group and key
/// pair, waiting for EC2 to let it go (a group in use cannot be deleted).
async fn cleanup(t: &Target, ec2: &Ec2, p: &Plan) {
    let mut q = query::action("DeleteKeyPair");
    q.push(("KeyName".into(), p.key_pair()));
    let _ = ec2.call(&q).await;
    let start = Instant::now();
    loop {
        match ops::world(ec2, p).await {
            Ok(world) => {
                let ids = live_ids(&world);
                let gone = match (&world.network, ids.is_empty()) {
                    (None, true) => return,
                    (Some(sg), true) if world.remaining().next().is_none() => {
                        ops::delete_network(ec2, p, &sg.id).await.unwrap_or(false)
                    }
                    _ => false,
                };
                if gone {
                    return;
                }
                if let Err(e) = ops::terminate(ec2, &ids).await {
                    eprintln!("cleanup: {e}");
                }
            }
            Err(e) => eprintln!("cleanup: {e}"),
        }
        if start.elapsed() > t.deadline * 2 {
            panic!("run {} left instances or its security group behind", p.run);
        }
        tokio::time::sleep(t.poll.max(Duration::from_millis(100))).await;
    }
}

pub(super) async fn a_launch_repeated_is_one_instance(t: &Target, p: &Plan, ec2: &Ec2) {
    let d = Driven::start(p);
    let goal = Goal::from_engine(&d.engine);
    let sg = ops::ensure_network(ec2, p).await.unwrap();
    // The network is made once, however often it is asked for.
    assert_eq!(ops::ensure_network(ec2, p).await.unwrap(), sg);
    // A supervisor that launched, died before it recorded anything,
    // and came back: it reads the world and launches only what is
    // missing.
    let first = ops::launch(ec2, p, TRAINER, 0, 0, &sg).await.unwrap();
    let world = world_when(t, ec2, p, |w| {
        w.network.is_some() && !w.instances.is_empty()
    })
    .await;
    let ops_now = reconcile(&p.as_run(), &world, &goal);
    assert_eq!(ops_now.len(), 2, "{ops_now:?}");
    for op in &ops_now {
        ops::apply(ec2, None, p, &world, op).await.unwrap();
    }
    let world = world_when(t, ec2, p, |w| w.instances.len() >= 3).await;
    assert_eq!(world.instances.len(), 3);
    assert_eq!(
        world
            .instance(
                &p.as_run(),
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
    assert!(reconcile(&p.as_run(), &world, &goal).is_empty());
}

pub(super) async fn a_new_client_finds_the_run_again(t: &Target, p: &Plan, ec2: &Ec2) {
    let d = running_group(t, ec2, p).await;
    let before = ops::world(ec2, p).await.unwrap();
    // A restarted supervisor: a new client, the plan and engine as
    // stored.
    let stored: Plan = serde_json::from_str(&serde_json::to_string(p).unwrap()).unwrap();
    let again = t.client(&stored);
    let after = ops::world(&again, &stored).await.unwrap();
    assert_eq!(after.network, before.network);
    assert_eq!(live_ids(&after), live_ids(&before));
    assert!(reconcile(&stored.as_run(), &after, &Goal::from_engine(&d.engine)).is_empty());
    // Another run of the same group sees none of it.
    let other = plan(t.group, &run_id("other"));
    let theirs = ops::world(&again, &other).await.unwrap();
    assert!(theirs.instances.is_empty() && theirs.network.is_none());
}

pub(super) async fn auxiliaries_end_after_the_primaries_and_the_network_last(
    t: &Target,
    p: &Plan,
    ec2: &Ec2,
) {
    let mut d = running_group(t, ec2, p).await;
    let buffer = ops::world(ec2, p)
        .await
        .unwrap()
        .instance(
            &p.as_run(),
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
    pass(t, ec2, p, &mut d).await;
    let world = world_when(t, ec2, p, |w| live_ids(w).len() == 1).await;
    assert_eq!(
        live_ids(&world),
        vec![buffer.clone()],
        "only the buffer runs on"
    );
    assert_eq!(d.timers, vec![Timer::AuxiliaryDelay(BUFFER)]);
    d.handle(Event::TimerFired(Timer::AuxiliaryDelay(BUFFER)));
    until(t, ec2, p, &mut d, |d, w| {
        settled(w, &Goal::from_engine(&d.engine))
    })
    .await;
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    assert_eq!(d.engine.task_status(BUFFER), Status::Cancelled);
    let world = ops::world(ec2, p).await.unwrap();
    assert!(world.network.is_none(), "the security group is deleted");
    assert!(
        world
            .instances
            .iter()
            .all(|i| i.state == Some(State::Terminated))
    );
}

pub(super) async fn cancel_terminates_every_instance(t: &Target, p: &Plan, ec2: &Ec2) {
    let mut d = running_group(t, ec2, p).await;
    d.handle(Event::CancelRequested);
    until(t, ec2, p, &mut d, |d, w| {
        settled(w, &Goal::from_engine(&d.engine))
    })
    .await;
    assert_eq!(d.engine.group_status(), Status::Cancelled);
    let world = ops::world(ec2, p).await.unwrap();
    assert_eq!(world.instances.len(), 3);
    assert!(live_ids(&world).is_empty());
    assert!(world.network.is_none());
    // And the backend hears that nothing is left.
    let last = pass(t, ec2, p, &mut d).await;
    assert!(last.contains(&Report::Settled), "{last:?}");
}

pub(super) async fn an_instance_terminated_out_of_band_is_a_lost_node(
    t: &Target,
    p: &Plan,
    ec2: &Ec2,
) {
    let mut d = running_group(t, ec2, p).await;
    let world = ops::world(ec2, p).await.unwrap();
    let victim = world
        .instance(
            &p.as_run(),
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
            &p.as_run(),
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
    let start = Instant::now();
    let reports = loop {
        let reports = pass(t, ec2, p, &mut d).await;
        if reports.iter().any(|r| {
            matches!(
                r,
                Report::Event {
                    event: Event::NodeLost { .. },
                    ..
                }
            )
        }) || start.elapsed() > t.deadline
        {
            break reports;
        }
        tokio::time::sleep(t.poll).await;
    };
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
    until(t, ec2, p, &mut d, |d, w| {
        d.engine.attempt(TRAINER) == 1
            && state_of(w, p, TRAINER, 0, 1) == Some(State::Running)
            && state_of(w, p, TRAINER, 1, 1) == Some(State::Running)
            && d.engine.task_status(TRAINER) == Status::Running
    })
    .await;
    assert_eq!(d.engine.restarts(TRAINER), (1, 0), "no budget used");
    let world = ops::world(ec2, p).await.unwrap();
    // The buffer was not touched; the trainer's old instances are gone.
    assert_eq!(state_of(&world, p, BUFFER, 0, 0), Some(State::Running));
    assert_eq!(
        world
            .instance(
                &p.as_run(),
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
    assert!(state_of(&world, p, TRAINER, 0, 0).is_some_and(State::is_ending));
    assert_eq!(d.engine.task_status(BUFFER), Status::Running);
}

pub(super) async fn an_instance_stopped_out_of_band_is_a_lost_node(
    t: &Target,
    p: &Plan,
    ec2: &Ec2,
) {
    let mut d = running_group(t, ec2, p).await;
    let world = ops::world(ec2, p).await.unwrap();
    let buffer = world
        .instance(
            &p.as_run(),
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
    until(t, ec2, p, &mut d, |d, w| {
        d.engine.attempt(BUFFER) == 1 && state_of(w, p, BUFFER, 0, 1) == Some(State::Running)
    })
    .await;
    // The stopped instance is terminated: nothing of an old attempt
    // stays, not even stopped.
    let world = ops::world(ec2, p).await.unwrap();
    assert!(state_of(&world, p, BUFFER, 0, 0).is_some_and(State::is_ending));
    assert_eq!(state_of(&world, p, TRAINER, 0, 0), Some(State::Running));
    assert_eq!(d.engine.attempt(TRAINER), 0);
}

pub(super) async fn refusals_are_clear(_: &Target, _: &Plan, ec2: &Ec2) {
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
    ops::terminate(ec2, &["i-00000000000000000".to_owned()])
        .await
        .unwrap();
}

/// A supervisor died between making the security group and giving it its
/// rules: the next one completes it before launching anything.
pub(super) async fn a_network_left_incomplete_is_completed(t: &Target, p: &Plan, ec2: &Ec2) {
    let params = query::serialize("CreateSecurityGroup", &p.create_security_group()).unwrap();
    let body = ec2.call(&params).await.unwrap();
    let sg = crate::aws::ec2::response::group_id(&body).unwrap();
    let world = world_when(t, ec2, p, |w| w.network.is_some()).await;
    assert_eq!(
        world.network,
        Some(crate::cloud::world::Network {
            id: sg.clone(),
            ready: false
        })
    );
    running_group(t, ec2, p).await;
    let world = ops::world(ec2, p).await.unwrap();
    assert_eq!(
        world.network.as_ref().map(|n| (n.id.as_str(), n.ready)),
        Some((sg.as_str(), true))
    );
    // Its rule lets the group's nodes reach each other.
    let mut q = query::action("DescribeSecurityGroups");
    query::list(&mut q, "GroupId", &[&sg]);
    let body = ec2.call(&q).await.unwrap();
    let doc = roxmltree::Document::parse(&body).unwrap();
    let perms = doc
        .descendants()
        .find(|n| n.tag_name().name() == "ipPermissions")
        .unwrap();
    assert!(
        perms
            .descendants()
            .any(|n| n.tag_name().name() == "groupId" && n.text() == Some(sg.as_str())),
        "{body}"
    );
}

/// With SSH access, the run imports its key pair, names it in every
/// launch, opens `tcp/22` to the runtime, and deletes the key pair with
/// the security group.
pub(super) async fn ssh_access_is_the_runs(t: &Target, p: &Plan, ec2: &Ec2) {
    let dir = std::env::temp_dir().join(format!("skyc-key-{}", p.run));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("key");
    assert!(
        std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key)
            .status()
            .unwrap()
            .success()
    );
    let mut p = p.clone();
    p.ssh = Some(crate::aws::plan::SshAccess {
        public_key: std::fs::read_to_string(key.with_extension("pub")).unwrap(),
        from: "203.0.113.7/32".into(),
    });
    let _ = std::fs::remove_dir_all(&dir);
    let p = &p;
    let mut d = running_group(t, ec2, p).await;
    let world = ops::world(ec2, p).await.unwrap();
    assert!(
        world
            .instances
            .iter()
            .all(|i| i.key_name.as_deref() == Some(p.key_pair().as_str())),
        "{:?}",
        world.instances
    );
    let sg = world.network.unwrap().id;
    let mut q = query::action("DescribeSecurityGroups");
    query::list(&mut q, "GroupId", &[&sg]);
    let body = ec2.call(&q).await.unwrap();
    assert!(body.contains("<cidrIp>203.0.113.7/32</cidrIp>"), "{body}");
    let key_pairs = || async {
        let mut q = query::action("DescribeKeyPairs");
        query::filters(&mut q, &[("key-name", &[&p.key_pair()])]);
        ec2.call(&q).await.unwrap()
    };
    assert!(key_pairs().await.contains(&p.key_pair()));
    d.handle(Event::CancelRequested);
    until(t, ec2, p, &mut d, |d, w| {
        settled(w, &Goal::from_engine(&d.engine))
    })
    .await;
    assert!(!key_pairs().await.contains(&p.key_pair()));
}

/// The ids of a step's instances, in rank order.
fn step_ids(world: &World, p: &Plan, task: usize) -> Vec<String> {
    (0..p.spec.tasks[task].num_nodes)
        .filter_map(|rank| {
            world
                .instance(
                    &p.as_run(),
                    NodeKey {
                        task,
                        rank,
                        attempt: 0,
                    },
                )
                .map(|i| i.id.clone())
        })
        .collect()
}

/// Whether any instance of the run was ever launched for `task`.
fn launched(world: &World, p: &Plan, task: usize) -> bool {
    world
        .instances
        .iter()
        .any(|i| World::key(&p.as_run(), i).is_some_and(|k| k.task == task))
}

/// Passes until `task` runs; on every pass, no step but the ones up to
/// `task` has an instance, and the earlier steps' are going or gone.
async fn step_running(t: &Target, ec2: &Ec2, p: &Plan, d: &mut Driven, task: usize) -> World {
    until(t, ec2, p, d, |d, w| {
        for later in task + 1..p.spec.tasks.len() {
            assert!(!launched(w, p, later), "step {later} launched early");
        }
        for earlier in 0..task {
            for id in step_ids(w, p, earlier) {
                let i = w.instances.iter().find(|i| i.id == id).unwrap();
                assert!(
                    i.state.is_some_and(State::is_ending),
                    "step {earlier}'s {id} runs on in step {task}"
                );
            }
        }
        d.engine.task_status(task) == Status::Running
    })
    .await;
    ops::world(ec2, p).await.unwrap()
}

pub(super) async fn a_pipelines_steps_run_one_after_another_on_their_own_instances(
    t: &Target,
    p: &Plan,
    ec2: &Ec2,
) {
    let mut d = Driven::start(p);
    let world = step_running(t, ec2, p, &mut d, PREP).await;
    assert_eq!(world.instances.len(), 1, "the first step only");
    let prep = step_ids(&world, p, PREP);
    assert_eq!(d.engine.task_status(TRAIN), Status::Pending);
    d.handle(exited(PREP, 0, 0));
    let world = step_running(t, ec2, p, &mut d, TRAIN).await;
    let train = step_ids(&world, p, TRAIN);
    assert_eq!(train.len(), 2);
    for i in &world.instances {
        if World::key(&p.as_run(), i).is_some_and(|k| k.task == TRAIN) {
            assert_eq!(i.tags["Name"], format!("p-train-{}", i.tags["skyc-rank"]));
        }
    }
    d.handle(exited(TRAIN, 0, 0));
    d.handle(exited(TRAIN, 1, 0));
    let world = step_running(t, ec2, p, &mut d, REPORT).await;
    let report = step_ids(&world, p, REPORT);
    d.handle(exited(REPORT, 0, 0));
    until(t, ec2, p, &mut d, |d, w| {
        settled(w, &Goal::from_engine(&d.engine))
    })
    .await;
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    let world = ops::world(ec2, p).await.unwrap();
    // One instance per node of each step, all distinct, all terminated.
    let mut all: Vec<String> = [prep, train, report].concat();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 4);
    assert_eq!(world.instances.len(), 4);
    assert!(
        world
            .instances
            .iter()
            .all(|i| i.state == Some(State::Terminated))
    );
    assert!(world.network.is_none());
}

/// The pipeline driven to its train step, running (prep succeeded).
async fn train_running(t: &Target, ec2: &Ec2, p: &Plan) -> Driven {
    let mut d = Driven::start(p);
    step_running(t, ec2, p, &mut d, PREP).await;
    d.handle(exited(PREP, 0, 0));
    step_running(t, ec2, p, &mut d, TRAIN).await;
    d
}

pub(super) async fn a_failed_step_cancels_the_later_steps_unlaunched(
    t: &Target,
    p: &Plan,
    ec2: &Ec2,
) {
    let mut d = train_running(t, ec2, p).await;
    d.handle(exited(TRAIN, 1, 1));
    until(t, ec2, p, &mut d, |d, w| {
        assert!(!launched(w, p, REPORT), "a cancelled step launched");
        settled(w, &Goal::from_engine(&d.engine))
    })
    .await;
    assert_eq!(d.engine.task_status(PREP), Status::Succeeded);
    assert_eq!(d.engine.task_status(TRAIN), Status::Failed);
    assert_eq!(d.engine.task_status(REPORT), Status::Cancelled);
    assert_eq!(d.engine.group_status(), Status::Failed);
    let world = ops::world(ec2, p).await.unwrap();
    assert_eq!(world.instances.len(), 3);
    assert!(live_ids(&world).is_empty());
    assert!(world.network.is_none());
}

pub(super) async fn cancel_mid_pipeline_terminates_the_running_step(
    t: &Target,
    p: &Plan,
    ec2: &Ec2,
) {
    let mut d = train_running(t, ec2, p).await;
    d.handle(Event::CancelRequested);
    until(t, ec2, p, &mut d, |d, w| {
        settled(w, &Goal::from_engine(&d.engine))
    })
    .await;
    assert_eq!(d.engine.group_status(), Status::Cancelled);
    assert_eq!(d.engine.task_status(TRAIN), Status::Cancelled);
    assert_eq!(d.engine.task_status(REPORT), Status::Cancelled);
    let world = ops::world(ec2, p).await.unwrap();
    assert_eq!(world.instances.len(), 3);
    assert!(!launched(&world, p, REPORT));
    assert!(live_ids(&world).is_empty());
    assert!(world.network.is_none());
}
