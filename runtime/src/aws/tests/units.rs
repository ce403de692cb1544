//! The plan's rewrites, and the reconciler and observer driven by the
//! engine over made-up instance lists.

use super::{Driven, GROUP, PREP, REPORT, TRAIN, exited, plan};
use crate::aws::ec2::query;
use crate::aws::ec2::response::{Instance, State};
use crate::aws::plan::{Plan, client_token};
use crate::backend::Report;
use crate::cloud::control::observe::observe;
use crate::cloud::control::reconcile::{Op, reconcile, settled};
use crate::cloud::data::node::Outcomes;
use crate::cloud::run::{ATTEMPT_TAG, RANK_TAG, RUN_TAG, TASK_TAG};
use crate::cloud::world::{Network, World};
use crate::policy::{Event, Phase, Status, Timer};
use crate::reconciler::goal::Goal;
use serde_json::json;

const TRAINER: usize = 0;
const BUFFER: usize = 1;

fn instance(plan: &Plan, task: usize, rank: u32, attempt: u32, state: State) -> Instance {
    let mut i = Instance {
        id: format!("i-{task}{rank}{attempt}"),
        state: Some(state),
        instance_type: "m6i.2xlarge".into(),
        zone: Some("us-east-1a".into()),
        private_ip: Some(format!("10.0.{task}.{}", rank + 10 * attempt)),
        ..Instance::default()
    };
    for (k, v) in [
        (RUN_TAG, plan.run.clone()),
        (TASK_TAG, plan.spec.tasks[task].name.clone()),
        (RANK_TAG, rank.to_string()),
        (ATTEMPT_TAG, attempt.to_string()),
    ] {
        i.tags.insert(k.to_owned(), v);
    }
    i
}

fn net(id: &str) -> Network {
    Network {
        id: id.into(),
        ready: true,
    }
}

fn set(world: &mut World, id: &str, state: State, reason: Option<&str>) {
    let i = world.instances.iter_mut().find(|i| i.id == id).unwrap();
    i.state = Some(state);
    i.reason_code = reason.map(str::to_owned);
}

fn events(reports: &[Report]) -> Vec<Event> {
    reports
        .iter()
        .filter_map(|r| match r {
            Report::Event { event, .. } => Some(event.clone()),
            _ => None,
        })
        .collect()
}

/// Observes `world` and tells the engine.
fn step(p: &Plan, world: &World, d: &mut Driven) {
    let reports = observe(
        &p.as_run(),
        world,
        &Goal::from_engine(&d.engine),
        &Outcomes::new(),
    );
    feed(d, &reports);
}

fn feed(d: &mut Driven, reports: &[Report]) {
    for e in events(reports) {
        d.handle(e);
    }
}

/// The losses among the events (a running task's `TaskStarted` repeats
/// at every observation; the engine ignores it).
fn losses(reports: &[Report]) -> Vec<Event> {
    events(reports)
        .into_iter()
        .filter(|e| matches!(e, Event::NodeLost { .. }))
        .collect()
}

fn launches(ops: &[Op]) -> Vec<(usize, u32, u32)> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Launch {
                task,
                rank,
                attempt,
            } => Some((*task, *rank, *attempt)),
            _ => None,
        })
        .collect()
}

/// Applies launches to the world as EC2 would (a pending instance each).
fn launch_all(plan: &Plan, world: &mut World, ops: &[Op]) {
    for (task, rank, attempt) in launches(ops) {
        world
            .instances
            .push(instance(plan, task, rank, attempt, State::Pending));
    }
}

fn terminated(ops: &[Op]) -> Vec<String> {
    ops.iter()
        .flat_map(|op| match op {
            Op::Terminate { ids } => ids.clone(),
            _ => Vec::new(),
        })
        .collect()
}

fn running(plan: &Plan) -> (Driven, World) {
    let d = Driven::start(plan);
    let mut world = World {
        network: Some(net("sg-1")),
        ..World::default()
    };
    let ops = reconcile(&plan.as_run(), &world, &Goal::from_engine(&d.engine));
    launch_all(plan, &mut world, &ops);
    for i in &mut world.instances {
        i.state = Some(State::Running);
    }
    let mut d = d;
    step(plan, &world, &mut d);
    assert_eq!(d.engine.task_status(TRAINER), Status::Running);
    assert_eq!(d.engine.task_status(BUFFER), Status::Running);
    (d, world)
}

#[test]
fn the_plan_makes_the_builds_requests_the_runs() {
    let p = plan(GROUP, "r1");
    assert_eq!(p.nodes.len(), 2);
    assert_eq!(p.nodes[TRAINER].len(), 2);
    assert_eq!(p.security_group(), "skyc-g-r1");
    let sg = p.create_security_group();
    assert_eq!(sg["GroupName"], "skyc-g-r1");
    let tags = &sg["TagSpecifications"][0]["Tags"];
    assert!(
        tags.as_array()
            .unwrap()
            .contains(&json!({"Key": "skyc-run", "Value": "r1"}))
    );
    assert!(
        tags.as_array()
            .unwrap()
            .contains(&json!({"Key": "skyc-group", "Value": "g"}))
    );
    let ingress = p.authorize_ingress("sg-9").unwrap();
    assert_eq!(ingress["GroupId"], "sg-9");
    assert!(ingress.get("GroupName").is_none());
    assert_eq!(
        ingress["IpPermissions"][0]["UserIdGroupPairs"][0]["GroupId"],
        "sg-9"
    );
    let run = p.run_instances(TRAINER, 1, 3, "sg-9");
    assert_eq!(run["SecurityGroupIds"], json!(["sg-9"]));
    assert!(run.get("SecurityGroups").is_none());
    assert_eq!(run["ClientToken"], client_token("r1", "trainer", 1, 3));
    let tags = run["TagSpecifications"][0]["Tags"].as_array().unwrap();
    for (k, v) in [
        ("skyc-run", "r1"),
        ("skyc-attempt", "3"),
        ("skyc-task", "trainer"),
        ("skyc-rank", "1"),
        ("skyc-group", "g"),
    ] {
        assert!(tags.contains(&json!({"Key": k, "Value": v})), "{k}");
    }
    // With SSH access: the run's key pair in every launch, port 22 open
    // to the runtime.
    let mut with_ssh = p.clone();
    with_ssh.ssh = Some(crate::aws::plan::SshAccess {
        public_key: "ssh-ed25519 AAAA k".into(),
        from: "203.0.113.7/32".into(),
    });
    assert_eq!(with_ssh.key_pair(), "skyc-g-r1");
    assert_eq!(
        with_ssh.run_instances(TRAINER, 0, 0, "sg-9")["KeyName"],
        "skyc-g-r1"
    );
    assert!(run.get("KeyName").is_none());
    let ssh_rule = with_ssh.authorize_ssh("sg-9").unwrap();
    assert_eq!(
        ssh_rule["IpPermissions"][0]["IpRanges"][0]["CidrIp"],
        "203.0.113.7/32"
    );
    assert_eq!(p.authorize_ssh("sg-9"), None);
    query::serialize("AuthorizeSecurityGroupIngress", &ssh_rule).unwrap();
    // Every request the runtime sends is one EC2 takes.
    for op in [
        ("CreateSecurityGroup", sg),
        ("AuthorizeSecurityGroupIngress", ingress),
        ("RunInstances", run),
    ] {
        query::serialize(op.0, &op.1).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn placement_groups_are_the_runs() {
    let p = plan(
        "name: g\nexecution: parallel\n---\nname: t\nnum_nodes: 2\nresources: {network_tier: best}\nrun: x\n",
        "r2",
    );
    let pgs = p.placement_groups();
    assert_eq!(pgs.len(), 1);
    assert_eq!(pgs[0].0, "skyc-g-t-r2");
    let run = p.run_instances(0, 0, 0, "sg-1");
    assert_eq!(run["Placement"]["GroupName"], "skyc-g-t-r2");
    query::serialize("CreatePlacementGroup", &pgs[0].1).unwrap();
}

#[test]
fn client_tokens_name_one_attempt_of_one_node() {
    let t = client_token("run", "trainer", 0, 0);
    assert_eq!(t, client_token("run", "trainer", 0, 0));
    assert!(t.len() <= 64 && t.is_ascii());
    for other in [
        client_token("run2", "trainer", 0, 0),
        client_token("run", "trainer2", 0, 0),
        client_token("run", "trainer", 1, 0),
        client_token("run", "trainer", 0, 1),
    ] {
        assert_ne!(t, other);
    }
}

#[test]
fn plans_refuse_what_they_cannot_run() {
    let p = plan(GROUP, "r1");
    let spec = p.spec.clone();
    let bad =
        |doc: serde_json::Value, run: &str| Plan::from_spec(&doc, spec.clone(), run).unwrap_err().0;
    assert!(bad(json!({}), "r1").contains("not an AWS instance spec"));
    assert!(bad(json!({}), "r 1").contains("not a run id"));
    let doc = json!({"kind": "CloudInstances", "cloud": "aws", "group": "g", "region": "us-east-1", "nodes": []});
    assert_eq!(bad(doc, "r1"), "the spec has no request for node trainer-0");
}

#[test]
fn a_new_group_gets_its_network_then_every_node() {
    let p = plan(GROUP, "r1");
    let d = Driven::start(&p);
    let goal = Goal::from_engine(&d.engine);
    let mut world = World::default();
    assert_eq!(
        reconcile(&p.as_run(), &world, &goal),
        vec![Op::EnsureNetwork]
    );
    // A security group without its rules yet (its maker died): made
    // complete before any launch.
    world.network = Some(Network {
        id: "sg-1".into(),
        ready: false,
    });
    assert_eq!(
        reconcile(&p.as_run(), &world, &goal),
        vec![Op::EnsureNetwork]
    );
    world.network = Some(net("sg-1"));
    let ops = reconcile(&p.as_run(), &world, &goal);
    assert_eq!(launches(&ops), vec![(0, 0, 0), (0, 1, 0), (1, 0, 0)]);
    // Idempotent: the same state, the same calls; once launched, none.
    assert_eq!(reconcile(&p.as_run(), &world, &goal), ops);
    launch_all(&p, &mut world, &ops);
    assert_eq!(reconcile(&p.as_run(), &world, &goal), vec![]);
    // Pending instances: nothing for the engine yet but where they run.
    let reports = observe(&p.as_run(), &world, &goal, &Outcomes::new());
    assert!(events(&reports).is_empty());
    assert_eq!(reports.len(), 3);
    // One running is not the task started; all are.
    set(&mut world, "i-000", State::Running, None);
    assert!(events(&observe(&p.as_run(), &world, &goal, &Outcomes::new())).is_empty());
    set(&mut world, "i-010", State::Running, None);
    assert_eq!(
        events(&observe(&p.as_run(), &world, &goal, &Outcomes::new())),
        vec![Event::TaskStarted {
            task: TRAINER,
            attempt: 0
        }]
    );
}

#[test]
fn a_node_lost_out_of_band_restarts_its_task_only() {
    let p = plan(GROUP, "r1");
    let (mut d, mut world) = running(&p);
    let buffer_instance = "i-100";
    world.instances[1].lifecycle = Some("spot".into());
    set(
        &mut world,
        "i-010",
        State::Terminated,
        Some("Server.SpotInstanceTermination"),
    );
    let reports = observe(
        &p.as_run(),
        &world,
        &Goal::from_engine(&d.engine),
        &Outcomes::new(),
    );
    assert_eq!(
        losses(&reports),
        vec![Event::NodeLost {
            task: TRAINER,
            attempt: 0,
            node: 1
        }]
    );
    let message = reports.iter().find_map(|r| match r {
        Report::Error(m) => Some(m.clone()),
        _ => None,
    });
    assert_eq!(
        message.as_deref(),
        Some(
            "trainer-1 (i-010, spot) was terminated out of band: \
             Server.SpotInstanceTermination (a spot interruption); \
             its task restarts on new instances"
        )
    );
    feed(&mut d, &reports);
    assert_eq!(d.engine.task_status(TRAINER), Status::Recovering);
    // The attempt ends: its other node is terminated, the buffer is not.
    let goal = Goal::from_engine(&d.engine);
    let ops = reconcile(&p.as_run(), &world, &goal);
    assert_eq!(
        ops,
        vec![Op::Terminate {
            ids: vec!["i-000".into()]
        }]
    );
    // Until it is down, the engine waits; then the task starts again.
    assert!(losses(&observe(&p.as_run(), &world, &goal, &Outcomes::new())).is_empty());
    set(&mut world, "i-000", State::ShuttingDown, None);
    feed(
        &mut d,
        &observe(&p.as_run(), &world, &goal, &Outcomes::new()),
    );
    assert_eq!(d.engine.attempt(TRAINER), 1);
    assert_eq!(d.engine.restarts(TRAINER), (1, 0), "no budget used");
    let ops = reconcile(&p.as_run(), &world, &Goal::from_engine(&d.engine));
    assert_eq!(launches(&ops), vec![(0, 0, 1), (0, 1, 1)]);
    assert!(terminated(&ops).is_empty());
    launch_all(&p, &mut world, &ops);
    for id in ["i-001", "i-011"] {
        set(&mut world, id, State::Running, None);
    }
    step(&p, &world, &mut d);
    assert_eq!(d.engine.task_status(TRAINER), Status::Running);
    assert_eq!(d.engine.task_status(BUFFER), Status::Running);
    assert_eq!(
        world
            .instance(
                &p.as_run(),
                crate::cloud::world::NodeKey {
                    task: BUFFER,
                    rank: 0,
                    attempt: 0
                }
            )
            .unwrap()
            .id,
        buffer_instance
    );
    assert_eq!(
        reconcile(&p.as_run(), &world, &Goal::from_engine(&d.engine)),
        vec![]
    );
}

#[test]
fn a_stopped_instance_is_lost_too() {
    let p = plan(GROUP, "r1");
    let (d, mut world) = running(&p);
    set(
        &mut world,
        "i-100",
        State::Stopped,
        Some("Client.UserInitiatedShutdown"),
    );
    assert_eq!(
        losses(&observe(
            &p.as_run(),
            &world,
            &Goal::from_engine(&d.engine),
            &Outcomes::new()
        )),
        vec![Event::NodeLost {
            task: BUFFER,
            attempt: 0,
            node: 0
        }]
    );
}

#[test]
fn auxiliaries_end_after_their_delay_and_the_network_last() {
    let p = plan(GROUP, "r1");
    let (mut d, mut world) = running(&p);
    for node in 0..2 {
        d.handle(Event::NodeExited {
            task: TRAINER,
            attempt: 0,
            node,
            phase: Phase::Run,
            code: 0,
        });
    }
    assert_eq!(d.engine.task_status(TRAINER), Status::Succeeded);
    // The trainer's instances are no longer needed; the buffer's is,
    // until its delay.
    let ops = reconcile(&p.as_run(), &world, &Goal::from_engine(&d.engine));
    assert_eq!(terminated(&ops), vec!["i-000", "i-010"]);
    for id in ["i-000", "i-010"] {
        set(&mut world, id, State::Terminated, None);
    }
    assert_eq!(
        reconcile(&p.as_run(), &world, &Goal::from_engine(&d.engine)),
        vec![]
    );
    assert_eq!(d.timers, vec![Timer::AuxiliaryDelay(BUFFER)]);
    d.handle(Event::TimerFired(Timer::AuxiliaryDelay(BUFFER)));
    let goal = Goal::from_engine(&d.engine);
    assert_eq!(
        terminated(&reconcile(&p.as_run(), &world, &goal)),
        vec!["i-100"]
    );
    set(&mut world, "i-100", State::ShuttingDown, None);
    feed(
        &mut d,
        &observe(&p.as_run(), &world, &goal, &Outcomes::new()),
    );
    assert_eq!(d.engine.task_status(BUFFER), Status::Cancelled);
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    let goal = Goal::from_engine(&d.engine);
    // The security group waits for the last instance to be terminated.
    assert_eq!(reconcile(&p.as_run(), &world, &goal), vec![]);
    assert!(!settled(&world, &goal));
    set(&mut world, "i-100", State::Terminated, None);
    assert_eq!(
        reconcile(&p.as_run(), &world, &goal),
        vec![Op::DeleteNetwork]
    );
    world.network = None;
    assert!(settled(&world, &goal));
}

#[test]
fn cancel_terminates_every_instance() {
    let p = plan(GROUP, "r1");
    let (mut d, mut world) = running(&p);
    // An instance of an older attempt, still shutting down, is left be.
    world
        .instances
        .push(instance(&p, TRAINER, 0, 7, State::ShuttingDown));
    d.handle(Event::CancelRequested);
    let goal = Goal::from_engine(&d.engine);
    let ops = reconcile(&p.as_run(), &world, &goal);
    assert_eq!(terminated(&ops), vec!["i-000", "i-010", "i-100"]);
    for id in ["i-000", "i-010", "i-100", "i-007"] {
        set(&mut world, id, State::Terminated, None);
    }
    feed(
        &mut d,
        &observe(&p.as_run(), &world, &goal, &Outcomes::new()),
    );
    assert_eq!(d.engine.group_status(), Status::Cancelled);
    let goal = Goal::from_engine(&d.engine);
    assert_eq!(
        reconcile(&p.as_run(), &world, &goal),
        vec![Op::DeleteNetwork]
    );
}

#[test]
fn cancel_before_launch_answers_every_node() {
    let p = plan(GROUP, "r1");
    let mut d = Driven::start(&p);
    d.handle(Event::CancelRequested);
    let world = World::default();
    let goal = Goal::from_engine(&d.engine);
    assert_eq!(reconcile(&p.as_run(), &world, &goal), vec![]);
    feed(
        &mut d,
        &observe(&p.as_run(), &world, &goal, &Outcomes::new()),
    );
    assert!(d.engine.is_finished());
    assert!(settled(&world, &Goal::from_engine(&d.engine)));
}

#[test]
fn instances_not_of_this_run_or_attempt_are_not_kept() {
    let p = plan(GROUP, "r1");
    let (d, mut world) = running(&p);
    let goal = Goal::from_engine(&d.engine);
    // Another run's instance is never seen (the run's tag finds only its
    // own); one of this run with tags it cannot place, or of a later
    // attempt than the engine's (a store older than EC2), is terminated.
    let mut stray = instance(&p, TRAINER, 0, 0, State::Running);
    stray.id = "i-stray".into();
    stray.tags.insert(TASK_TAG.into(), "nobody".into());
    world.instances.push(stray);
    world
        .instances
        .push(instance(&p, BUFFER, 0, 5, State::Running));
    assert_eq!(
        reconcile(&p.as_run(), &world, &goal),
        vec![Op::Terminate {
            ids: vec!["i-105".into(), "i-stray".into()]
        }]
    );
}

#[test]
fn a_restarted_supervisor_launches_nothing_twice() {
    // The engine as committed, the instances as EC2 shows them: whatever
    // was launched before the crash is found, not launched again.
    let p = plan(GROUP, "r1");
    let d = Driven::start(&p);
    let committed: crate::policy::Engine =
        serde_json::from_str(&serde_json::to_string(&d.engine).unwrap()).unwrap();
    let mut world = World {
        network: Some(net("sg-1")),
        ..World::default()
    };
    world
        .instances
        .push(instance(&p, TRAINER, 1, 0, State::Pending));
    let ops = reconcile(&p.as_run(), &world, &Goal::from_engine(&committed));
    assert_eq!(launches(&ops), vec![(0, 0, 0), (1, 0, 0)]);
}

#[test]
fn a_node_that_ended_is_not_lost_when_its_instance_goes() {
    use crate::cloud::data::node::Outcome;
    let p = plan(GROUP, "r1");
    let (mut d, mut world) = running(&p);
    // The buffer failed (its files say so), then its instance went.
    set(&mut world, "i-100", State::Terminated, None);
    let mut outcomes = Outcomes::new();
    outcomes.insert(
        crate::cloud::world::NodeKey {
            task: BUFFER,
            rank: 0,
            attempt: 0,
        },
        Outcome::Exited {
            phase: Phase::Setup,
            code: 3,
        },
    );
    let reports = observe(
        &p.as_run(),
        &world,
        &Goal::from_engine(&d.engine),
        &outcomes,
    );
    assert_eq!(
        events(&reports)
            .into_iter()
            .filter(|e| !matches!(e, Event::TaskStarted { .. }))
            .collect::<Vec<_>>(),
        vec![Event::NodeExited {
            task: BUFFER,
            attempt: 0,
            node: 0,
            phase: Phase::Setup,
            code: 3
        }]
    );
    assert!(
        reports
            .iter()
            .any(|r| matches!(r, Report::Node(n) if n.handle == "i-100" && n.exit_code == Some(3)))
    );
    feed(&mut d, &reports);
    assert_eq!(d.engine.task_status(BUFFER), Status::FailedSetup);
    assert_eq!(d.engine.task_status(TRAINER), Status::Running);
    // A node whose VM booted again is lost.
    outcomes.insert(
        crate::cloud::world::NodeKey {
            task: TRAINER,
            rank: 1,
            attempt: 0,
        },
        Outcome::Rebooted,
    );
    let reports = observe(
        &p.as_run(),
        &world,
        &Goal::from_engine(&d.engine),
        &outcomes,
    );
    assert_eq!(
        losses(&reports),
        vec![Event::NodeLost {
            task: TRAINER,
            attempt: 0,
            node: 1
        }]
    );
    // A node that answered and then went silent is lost too; its error
    // (what SSH said) comes from the data plane, so none is added.
    let rank1 = crate::cloud::world::NodeKey {
        task: TRAINER,
        rank: 1,
        attempt: 0,
    };
    outcomes.insert(rank1, Outcome::Silent { answered: true });
    let reports = observe(
        &p.as_run(),
        &world,
        &Goal::from_engine(&d.engine),
        &outcomes,
    );
    assert_eq!(losses(&reports).len(), 1);
    assert!(!reports.iter().any(|r| matches!(r, Report::Error(_))));
    // One never reached failed its setup, as ssh's status says.
    outcomes.insert(rank1, Outcome::Silent { answered: false });
    let reports = observe(
        &p.as_run(),
        &world,
        &Goal::from_engine(&d.engine),
        &outcomes,
    );
    assert!(losses(&reports).is_empty());
    assert!(events(&reports).contains(&Event::NodeExited {
        task: TRAINER,
        attempt: 0,
        node: 1,
        phase: Phase::Setup,
        code: 255
    }));
}

#[test]
fn every_node_gets_the_groups_hosts_once_all_have_addresses() {
    use crate::cloud::data::node::hosts;
    let p = plan(GROUP, "r1");
    let d = Driven::start(&p);
    let goal = Goal::from_engine(&d.engine);
    let mut world = World {
        network: Some(net("sg-1")),
        ..World::default()
    };
    assert_eq!(hosts(&p.as_run(), &world, &goal), None);
    let ops = reconcile(&p.as_run(), &world, &goal);
    launch_all(&p, &mut world, &ops);
    world.instances[2].private_ip = None;
    assert_eq!(
        hosts(&p.as_run(), &world, &goal),
        None,
        "an address is missing"
    );
    world.instances[2].private_ip = Some("10.0.9.9".into());
    assert_eq!(
        hosts(&p.as_run(), &world, &goal).unwrap(),
        "10.0.0.0 trainer-0.g\n10.0.0.1 trainer-1.g\n10.0.9.9 buffer-0.g\n"
    );
}

#[test]
fn a_launch_without_capacity_leaves_its_task_pending() {
    use crate::aws::control::provider::Ec2Run;
    use crate::aws::ec2::client::Error;
    use crate::cloud::control::pass::refused;
    let p = plan(GROUP, "r1");
    let mut d = Driven::start(&p);
    let launch = Op::Launch {
        task: BUFFER,
        rank: 0,
        attempt: 0,
    };
    let no_room = Error::Api {
        service: "EC2",
        action: "RunInstances".into(),
        status: 500,
        code: "InsufficientInstanceCapacity".into(),
        message: "We currently do not have sufficient m6i.2xlarge capacity".into(),
        request_id: None,
    };
    let reports = refused::<Ec2Run<'_>>(p.as_run(), &launch, &no_room);
    assert_eq!(
        reports[1],
        Report::Waiting {
            task: BUFFER,
            why: Some(
                "buffer-0 waits for EC2: EC2 refused RunInstances: InsufficientInstanceCapacity: \
                 We currently do not have sufficient m6i.2xlarge capacity (HTTP 500); asked again"
                    .into()
            )
        }
    );
    feed(&mut d, &reports);
    assert_eq!(d.engine.task_status(BUFFER), Status::Pending);
    assert_eq!(d.engine.task_status(TRAINER), Status::Starting);
    // Any other refusal is shown, and changes nothing.
    let bad = Error::Api {
        service: "EC2",
        action: "RunInstances".into(),
        status: 400,
        code: "InvalidAMIID.NotFound".into(),
        message: String::new(),
        request_id: None,
    };
    assert_eq!(
        refused::<Ec2Run<'_>>(p.as_run(), &launch, &bad),
        vec![Report::Error(
            "EC2 refused RunInstances: InvalidAMIID.NotFound (HTTP 400)".into()
        )]
    );
}

#[test]
fn an_ended_node_keeps_its_instance_until_its_task_ends() {
    let p = plan(GROUP, "r1");
    let (mut d, world) = running(&p);
    // Rank 0 (say, a server rank 1 still reads from) is done first.
    d.handle(Event::NodeExited {
        task: TRAINER,
        attempt: 0,
        node: 0,
        phase: Phase::Run,
        code: 0,
    });
    assert_eq!(
        reconcile(&p.as_run(), &world, &Goal::from_engine(&d.engine)),
        vec![]
    );
    d.handle(Event::NodeExited {
        task: TRAINER,
        attempt: 0,
        node: 1,
        phase: Phase::Run,
        code: 0,
    });
    assert_eq!(
        terminated(&reconcile(
            &p.as_run(),
            &world,
            &Goal::from_engine(&d.engine)
        )),
        vec!["i-000", "i-010"]
    );
}

#[test]
fn a_second_instance_of_one_attempt_is_terminated() {
    let p = plan(GROUP, "r1");
    let (d, mut world) = running(&p);
    let mut twin = instance(&p, BUFFER, 0, 0, State::Pending);
    twin.id = "i-twin".into();
    world.instances.push(twin);
    assert_eq!(
        reconcile(&p.as_run(), &world, &Goal::from_engine(&d.engine)),
        vec![Op::Terminate {
            ids: vec!["i-twin".into()]
        }]
    );
}

/// The data plane against nodes that do not answer (a closed port on
/// loopback): given up on when none ever answered, never while every
/// node is silent though some answered before (the runtime is cut off).
#[test]
fn silent_nodes_are_given_up_on_unless_the_runtime_is_cut_off() {
    use crate::cloud::data::node::Outcome;
    use crate::cloud::data::plane::DataPlane;
    use crate::cloud::data::remote::Ssh;
    if std::process::Command::new("ssh")
        .arg("-V")
        .output()
        .is_err()
    {
        eprintln!("!!! SKIPPED: no ssh client");
        return;
    }
    let p = plan(GROUP, "r1");
    let (d, mut world) = running(&p);
    for i in &mut world.instances {
        i.private_ip = Some("127.0.0.1".into());
    }
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("skyc-silent-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data = |logs: &str| {
        let mut data = DataPlane::new(
            Ssh {
                key: dir.join("no-key").display().to_string(),
                dir: dir.display().to_string(),
                user: "root".into(),
                port: Some(closed),
            },
            "/var/lib/skyc".into(),
            dir.join(logs),
            std::time::Duration::from_secs(5),
        );
        data.private = true;
        data.silence = std::time::Duration::ZERO;
        data
    };
    let goal = Goal::from_engine(&d.engine);
    let nodes = world.instances.len();

    let mut never = data("never");
    let (outcomes, errors) = never.step(&p.as_run(), &world, &goal);
    assert_eq!(outcomes.len(), nodes);
    assert!(
        outcomes
            .values()
            .all(|o| *o == Outcome::Silent { answered: false })
    );
    assert_eq!(errors.len(), nodes, "{errors:?}");

    // One node's log was copied before (by a supervisor before this one).
    let offsets = dir.join("once/.aws");
    std::fs::create_dir_all(&offsets).unwrap();
    let id = &world.instances[0].id;
    std::fs::write(offsets.join(format!("{id}.run.log.offset")), "12").unwrap();
    let mut once = data("once");
    let (outcomes, errors) = once.step(&p.as_run(), &world, &goal);
    assert!(outcomes.is_empty(), "{outcomes:?}");
    assert!(
        errors.len() == 1 && errors[0].starts_with("no node of the run answers over SSH"),
        "{errors:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Marks the instances of `task`'s `attempt` running.
fn run_task(world: &mut World, plan: &Plan, task: usize, attempt: u32) {
    for i in &mut world.instances {
        if World::key(&plan.as_run(), i).is_some_and(|k| k.task == task && k.attempt == attempt) {
            i.state = Some(State::Running);
        }
    }
}

/// The first step of a pipeline launched and running, the others not.
fn pipeline_running() -> (Plan, Driven, World) {
    let p = plan(super::PIPELINE, "r1");
    assert_eq!(p.spec.execution, crate::policy::Execution::Serial);
    let mut d = Driven::start(&p);
    let mut world = World::default();
    let goal = Goal::from_engine(&d.engine);
    assert_eq!(
        reconcile(&p.as_run(), &world, &goal),
        vec![Op::EnsureNetwork]
    );
    world.network = Some(net("sg-1"));
    let ops = reconcile(&p.as_run(), &world, &goal);
    assert_eq!(launches(&ops), vec![(PREP, 0, 0)], "the first step only");
    launch_all(&p, &mut world, &ops);
    run_task(&mut world, &p, PREP, 0);
    step(&p, &world, &mut d);
    assert_eq!(d.engine.task_status(PREP), Status::Running);
    assert_eq!(d.engine.task_status(TRAIN), Status::Pending);
    assert_eq!(d.engine.task_status(REPORT), Status::Pending);
    (p, d, world)
}

#[test]
fn a_pipeline_launches_each_step_as_it_starts_and_ends_it_as_the_next_starts() {
    use crate::cloud::data::node::hosts;
    let (p, mut d, mut world) = pipeline_running();
    // The later steps are wanted but not started: nothing of them is
    // launched, observed or listed.
    let goal = Goal::from_engine(&d.engine);
    assert!(!goal.tasks[TRAIN].awaits_nodes());
    assert_eq!(reconcile(&p.as_run(), &world, &goal), vec![]);
    assert_eq!(
        hosts(&p.as_run(), &world, &goal).unwrap(),
        "10.0.0.0 prep-0.p\n"
    );
    // The first step ends: its instance goes as the second's are launched.
    d.handle(exited(PREP, 0, 0));
    assert_eq!(d.engine.task_status(PREP), Status::Succeeded);
    assert_eq!(d.engine.task_status(TRAIN), Status::Starting);
    let goal = Goal::from_engine(&d.engine);
    let ops = reconcile(&p.as_run(), &world, &goal);
    assert_eq!(
        ops[0],
        Op::Terminate {
            ids: vec!["i-000".into()]
        }
    );
    assert_eq!(launches(&ops), vec![(TRAIN, 0, 0), (TRAIN, 1, 0)]);
    launch_all(&p, &mut world, &ops);
    set(&mut world, "i-000", State::Terminated, None);
    // The step's hosts are its own nodes'.
    assert_eq!(
        hosts(&p.as_run(), &world, &goal).unwrap(),
        "10.0.1.0 train-0.p\n10.0.1.1 train-1.p\n"
    );
    run_task(&mut world, &p, TRAIN, 0);
    step(&p, &world, &mut d);
    assert_eq!(d.engine.task_status(TRAIN), Status::Running);
    // The first node done keeps its instance until the step ends.
    d.handle(exited(TRAIN, 0, 0));
    assert_eq!(
        reconcile(&p.as_run(), &world, &Goal::from_engine(&d.engine)),
        vec![]
    );
    d.handle(exited(TRAIN, 1, 0));
    let ops = reconcile(&p.as_run(), &world, &Goal::from_engine(&d.engine));
    assert_eq!(terminated(&ops), vec!["i-100", "i-110"]);
    assert_eq!(launches(&ops), vec![(REPORT, 0, 0)]);
    launch_all(&p, &mut world, &ops);
    for id in ["i-100", "i-110"] {
        set(&mut world, id, State::Terminated, None);
    }
    run_task(&mut world, &p, REPORT, 0);
    step(&p, &world, &mut d);
    d.handle(exited(REPORT, 0, 0));
    assert_eq!(d.engine.group_status(), Status::Succeeded);
    let goal = Goal::from_engine(&d.engine);
    assert_eq!(
        terminated(&reconcile(&p.as_run(), &world, &goal)),
        vec!["i-200"]
    );
    set(&mut world, "i-200", State::Terminated, None);
    assert_eq!(
        reconcile(&p.as_run(), &world, &goal),
        vec![Op::DeleteNetwork]
    );
    world.network = None;
    assert!(settled(&world, &goal));
    // One instance per node of every step, each launched once.
    assert_eq!(world.instances.len(), 4);
}

#[test]
fn a_failed_step_cancels_the_later_ones_which_are_never_launched() {
    let (p, mut d, mut world) = pipeline_running();
    d.handle(exited(PREP, 0, 0));
    let ops = reconcile(&p.as_run(), &world, &Goal::from_engine(&d.engine));
    launch_all(&p, &mut world, &ops);
    set(&mut world, "i-000", State::Terminated, None);
    run_task(&mut world, &p, TRAIN, 0);
    step(&p, &world, &mut d);
    // A node of the middle step fails (no restarts): the attempt stops,
    // its other node's instance is terminated.
    d.handle(exited(TRAIN, 1, 1));
    let goal = Goal::from_engine(&d.engine);
    let ops = reconcile(&p.as_run(), &world, &goal);
    assert_eq!(
        ops,
        vec![Op::Terminate {
            ids: vec!["i-100".into(), "i-110".into()]
        }]
    );
    set(&mut world, "i-100", State::ShuttingDown, None);
    set(&mut world, "i-110", State::ShuttingDown, None);
    step(&p, &world, &mut d);
    assert_eq!(d.engine.task_status(TRAIN), Status::Failed);
    assert_eq!(d.engine.task_status(REPORT), Status::Cancelled);
    assert_eq!(d.engine.group_status(), Status::Failed);
    let goal = Goal::from_engine(&d.engine);
    assert!(launches(&reconcile(&p.as_run(), &world, &goal)).is_empty());
    for id in ["i-100", "i-110"] {
        set(&mut world, id, State::Terminated, None);
    }
    assert_eq!(
        reconcile(&p.as_run(), &world, &goal),
        vec![Op::DeleteNetwork]
    );
    assert!(
        !world
            .instances
            .iter()
            .any(|i| World::key(&p.as_run(), i).is_some_and(|k| k.task == REPORT)),
        "the cancelled step was never launched"
    );
}

#[test]
fn cancel_mid_pipeline_terminates_the_running_step_and_cancels_the_rest() {
    let (p, mut d, mut world) = pipeline_running();
    d.handle(Event::CancelRequested);
    let goal = Goal::from_engine(&d.engine);
    assert_eq!(
        reconcile(&p.as_run(), &world, &goal),
        vec![Op::Terminate {
            ids: vec!["i-000".into()]
        }]
    );
    set(&mut world, "i-000", State::Terminated, None);
    step(&p, &world, &mut d);
    assert!(d.engine.is_finished());
    assert_eq!(d.engine.group_status(), Status::Cancelled);
    for t in [TRAIN, REPORT] {
        assert_eq!(d.engine.task_status(t), Status::Cancelled);
    }
    let goal = Goal::from_engine(&d.engine);
    assert_eq!(
        reconcile(&p.as_run(), &world, &goal),
        vec![Op::DeleteNetwork]
    );
}

#[test]
fn a_restarted_supervisor_mid_pipeline_resumes_at_the_running_step() {
    // Committed: the first step SUCCEEDED and the second launched. EC2:
    // the first step's instance still runs (the supervisor died before
    // terminating it) and one of the second's was launched.
    let (p, mut d, mut world) = pipeline_running();
    d.handle(exited(PREP, 0, 0));
    let committed: crate::policy::Engine =
        serde_json::from_str(&serde_json::to_string(&d.engine).unwrap()).unwrap();
    world
        .instances
        .push(instance(&p, TRAIN, 0, 0, State::Pending));
    let ops = reconcile(&p.as_run(), &world, &Goal::from_engine(&committed));
    assert_eq!(terminated(&ops), vec!["i-000"]);
    assert_eq!(
        launches(&ops),
        vec![(TRAIN, 1, 0)],
        "nothing launched twice, no step again"
    );
}

#[test]
fn a_plan_refuses_a_spec_of_the_other_execution() {
    let group = plan(GROUP, "r1");
    let pipeline = plan(super::PIPELINE, "r1");
    let catalog = skyc_targets::cloud::Catalog::snapshot(skyc_targets::cloud::Cloud::Aws);
    let c = skyc_compiler::compile("p.yaml", super::PIPELINE.as_bytes(), &Default::default());
    let doc = skyc_targets::cloud::build(&c.group.unwrap(), &catalog)
        .document
        .unwrap();
    assert_eq!(doc["execution"], "serial");
    let mut as_group = pipeline.spec.clone();
    as_group.execution = crate::policy::Execution::Parallel;
    let err = Plan::from_spec(&doc, as_group, "r1").unwrap_err().0;
    assert!(err.contains("`execution`"), "{err}");
    assert_eq!(group.spec.execution, crate::policy::Execution::Parallel);
}

/// A run with files: launches wait for a complete bucket; a bucket S3
/// could not be read is neither filled, deleted nor taken for gone, and
/// EC2's part goes on (the network is made, instances terminated).
#[test]
fn launches_wait_for_the_files_and_an_unread_bucket_blocks_only_the_files() {
    use crate::cloud::run::Bucket;
    use crate::files::pack::Packed;
    let mut p = plan(GROUP, "r1");
    p.bucket = Some(Bucket {
        name: "skyc-g-0123456789abcdef".into(),
        files: vec![Packed {
            digest: "ab".into(),
            sha256: "cd".into(),
            bytes: 10240,
        }],
        tasks: vec![vec!["ab".into()]; p.spec.tasks.len()],
    });
    let mut d = Driven::start(&p);
    let ready = Some(Network {
        id: "sg-1".into(),
        ready: true,
    });
    let world = |bucket: Option<Vec<String>>, unread: Option<&str>| World {
        instances: Vec::new(),
        network: ready.clone(),
        bucket,
        bucket_unread: unread.map(str::to_owned),
    };
    let goal = Goal::from_engine(&d.engine);
    let launches = |ops: &[Op]| {
        ops.iter()
            .filter(|o| matches!(o, Op::Launch { .. }))
            .count()
    };
    // No bucket yet: uploaded first, nothing launched.
    let ops = reconcile(&p.as_run(), &world(None, None), &goal);
    assert_eq!(ops, [Op::UploadFiles]);
    // A part of it: the rest uploaded, nothing launched.
    let ops = reconcile(&p.as_run(), &world(Some(vec![]), None), &goal);
    assert_eq!(ops, [Op::UploadFiles]);
    // Unread: neither upload nor launch, until it is read.
    let ops = reconcile(
        &p.as_run(),
        &world(None, Some("S3 refused ListObjectsV2: AccessDenied")),
        &goal,
    );
    assert!(ops.is_empty(), "{ops:?}");
    // Complete: every node launched.
    let ops = reconcile(
        &p.as_run(),
        &world(Some(vec!["ab.tar".into()]), None),
        &goal,
    );
    assert_eq!(
        launches(&ops),
        goal.tasks.iter().map(|t| t.live.len()).sum::<usize>()
    );
    // Cancelled: the bucket deleted once read, and only then settled.
    d.handle(Event::CancelRequested);
    let goal = Goal::from_engine(&d.engine);
    let ops = reconcile(
        &p.as_run(),
        &world(Some(vec!["ab.tar".into()]), None),
        &goal,
    );
    assert!(ops.contains(&Op::DeleteFiles), "{ops:?}");
    let unread = world(None, Some("no answer"));
    assert!(!reconcile(&p.as_run(), &unread, &goal).contains(&Op::DeleteFiles));
    let mut gone = world(None, None);
    gone.network = None;
    let mut unread = unread;
    unread.network = None;
    // Once the group has ended, it settles only with the bucket seen gone.
    let mut ended = goal.clone();
    ended.end = Some(Status::Cancelled);
    assert!(settled(&gone, &ended));
    assert!(!settled(&unread, &ended));
}
