//! The real supervisor, on a thread of the test, with the Kubernetes
//! backend talking to the fake API server: what the scenarios check
//! around the backend, end to end through the store as `skyc status`
//! reads it (adoption, reports recorded, timers, the group closed).

use super::driver::{connect, insert, plan, tuning, turn};
use super::fake::{Fake, World};
use crate::store::Store;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A primary and an auxiliary that outlives it by 2 s.
const GROUP: &str = "\
name: g
execution: parallel
primary_tasks: [trainer]
termination_delay: 2s
---
name: trainer
num_nodes: 2
run: echo train
---
name: buffer
run: sleep 1000
";

/// The first group of a new store.
const GID: i64 = 1;

struct Scene {
    fake: Fake,
    dir: PathBuf,
    supervisor: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    tuning: crate::k8s::Tuning,
}

impl Scene {
    fn new(name: &str) -> Self {
        Self::with(name, |_| {})
    }

    /// A scene whose cluster `setup` prepares before the supervisor starts.
    fn with(name: &str, setup: impl FnOnce(&mut World)) -> Self {
        Self::of(name, GROUP, setup)
    }

    /// A scene of the group `yaml`.
    fn of(name: &str, yaml: &str, setup: impl FnOnce(&mut World)) -> Self {
        Self::tuned(name, yaml, setup, tuning())
    }

    /// [`Scene::of`], the backend tuned so.
    fn tuned(
        name: &str,
        yaml: &str,
        setup: impl FnOnce(&mut World),
        tuning: crate::k8s::Tuning,
    ) -> Self {
        let dir =
            std::env::temp_dir().join(format!("skyc-supervised-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        insert(&dir, &plan(yaml));
        let fake = Fake::default();
        fake.world().wall_clock = true;
        setup(&mut fake.world());
        let mut scene = Self {
            fake,
            dir,
            supervisor: None,
            tuning,
        };
        scene.start();
        scene
    }

    fn start(&mut self) {
        let (dir, connect, tuning) = (self.dir.clone(), connect(&self.fake), self.tuning);
        self.supervisor = Some(std::thread::spawn(move || {
            crate::supervisor::serve(&dir, (connect, tuning))
        }));
    }

    fn store(&self) -> Store {
        Store::open(&self.dir).unwrap()
    }

    /// Runs the cluster's controllers until `done` holds of the store.
    fn until(&self, what: &str, done: impl Fn(&Store) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let store = self.store();
        while !done(&store) {
            assert!(
                Instant::now() < deadline,
                "{what}: not reached; requests: {:#?}",
                self.fake
                    .world()
                    .requests
                    .iter()
                    .map(|r| r.line())
                    .collect::<Vec<_>>()
            );
            turn(&mut self.fake.world());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn statuses(store: &Store) -> Vec<String> {
        store
            .tasks(GID)
            .unwrap()
            .into_iter()
            .map(|t| t.status)
            .collect()
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_group_runs_to_its_end_through_the_supervisor() {
    let mut s = Scene::new("clean");
    let gid = GID;
    s.until("every task running", |st| {
        Scene::statuses(st) == ["RUNNING", "RUNNING"]
    });
    let group = s.store().group(gid).unwrap().unwrap();
    assert!(
        group
            .job
            .as_deref()
            .is_some_and(|j| j.starts_with("team/g uid-")),
        "{:?}",
        group.job
    );
    // Where each node runs, as `skyc status` shows it.
    let nodes = s.store().nodes(gid).unwrap();
    assert_eq!(nodes.len(), 3, "{nodes:?}");
    for n in &nodes {
        assert!(n.handle.starts_with("g-"), "{n:?}");
        assert!(n.machine.starts_with("node-"), "{n:?}");
        assert!(n.ip.starts_with("10.0.0."), "{n:?}");
        assert!(n.hostname.ends_with(".g"), "{n:?}");
    }
    // Both trainer nodes end well; the buffer is stopped 2 s after their
    // recorded end (whole seconds, so up to 1 s earlier than now), the
    // gate opens, the JobSet completes, and the group is closed.
    let ended = Instant::now();
    {
        let mut w = s.fake.world();
        for pod in ["g-trainer-0-0", "g-trainer-1-0"] {
            w.exit(pod, 0);
        }
    }
    s.until("the group closed", |st| {
        st.group(gid)
            .unwrap()
            .is_some_and(|g| g.finished_at_ms.is_some())
    });
    assert!(
        ended.elapsed() >= Duration::from_millis(1_000),
        "the auxiliary's delay was kept: closed {:?} after the primary",
        ended.elapsed()
    );
    let group = s.store().group(gid).unwrap().unwrap();
    assert_eq!(group.status, "SUCCEEDED");
    assert_eq!(Scene::statuses(&s.store()), ["SUCCEEDED", "CANCELLED"]);
    assert_eq!(group.outage, None);
    assert_eq!(
        s.fake.world().get("jobsets", "g").unwrap()["status"]["terminalState"],
        "Completed"
    );
    assert!(s.store().timers(gid).unwrap().is_empty());
    // With nothing left to run, the supervisor exits.
    let supervisor = s.supervisor.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !supervisor.is_finished() {
        assert!(Instant::now() < deadline, "the supervisor did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
    supervisor.join().unwrap().unwrap();
}

/// A supervisor that may follow one log at once: rank 0's is followed,
/// the others are read in turns (a minute apart); each node's log holds
/// every line it wrote, once and whole, when the group has ended: the
/// last lines read as soon as the pods ended (not at their next turn), a
/// line still being written read when whole, though the API server
/// answered the same lines again and again and from whole seconds.
#[test]
fn logs_beyond_the_streams_budget_are_read_in_turns_each_line_once() {
    let yaml = "name: g\nexecution: parallel\n---\nname: trainer\nnum_nodes: 3\nrun: echo train\n";
    let pods = ["g-trainer-0-0", "g-trainer-1-0", "g-trainer-2-0"];
    let tuning = crate::k8s::Tuning {
        logs: true,
        log_streams: 1,
        log_turn: Duration::from_secs(60),
        ..tuning()
    };
    let s = Scene::tuned(
        "logs-in-turns",
        yaml,
        |w| {
            for (rank, pod) in pods.iter().enumerate() {
                // A line still being written (but rank 0's, followed: a
                // follower writes what it has when its answer ends).
                let half = if rank == 0 { "" } else { "half" };
                w.logs.insert(
                    (*pod).to_owned(),
                    format!("zero\none\nfirst of {rank}\n{half}"),
                );
            }
        },
        tuning,
    );
    let log = |rank: u32| {
        std::fs::read_to_string(crate::paths::log(
            &crate::paths::group_dir(&s.dir, GID),
            "trainer",
            rank,
        ))
        .unwrap_or_default()
    };
    s.until("every node's first line read", |_| {
        (0..3).all(|r| log(r) == format!("zero\none\nfirst of {r}\n"))
    });
    // Past the turns' pace: the reader waits for the next turn, a minute
    // away, when the pods end. The mark is now at 0.6 s past a second
    // (the fake's lines come 300 ms apart), the next line in the same
    // second.
    std::thread::sleep(Duration::from_millis(600));
    {
        let mut w = s.fake.world();
        for (rank, pod) in pods.iter().enumerate() {
            w.logs.insert(
                (*pod).to_owned(),
                format!("zero\none\nfirst of {rank}\nhalf and whole\nlast of {rank}\n"),
            );
            w.exit(pod, 0);
        }
    }
    s.until("the group closed", |st| {
        st.group(GID)
            .unwrap()
            .is_some_and(|g| g.finished_at_ms.is_some())
    });
    for rank in 0..3 {
        assert_eq!(
            log(rank),
            format!("zero\none\nfirst of {rank}\nhalf and whole\nlast of {rank}\n")
        );
    }
    // Only rank 0's log was followed; the others were read, never held.
    let w = s.fake.world();
    let followed: BTreeSet<String> = w
        .requests
        .iter()
        .filter(|r| r.path.ends_with("/log") && r.query.contains("follow=true"))
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(
        followed.into_iter().collect::<Vec<_>>(),
        ["/api/v1/namespaces/team/pods/g-trainer-0-0/log"]
    );
    let read = w
        .requests
        .iter()
        .filter(|r| r.path.ends_with("/log") && !r.query.contains("follow=true"))
        .count();
    assert!(read >= 4, "two pods, read at least twice each: {read}");
}

#[test]
fn a_refused_group_ends_failed_setup_with_the_reason() {
    let s = Scene::with("refused", |w| w.crd = false);
    s.until("the group closed", |st| {
        st.group(GID)
            .unwrap()
            .is_some_and(|g| g.finished_at_ms.is_some())
    });
    let group = s.store().group(GID).unwrap().unwrap();
    assert_eq!(group.status, "FAILED_SETUP");
    assert!(
        group
            .error
            .as_deref()
            .is_some_and(|e| e.contains("jobsets.jobset.x-k8s.io")),
        "{:?}",
        group.error
    );
    assert_eq!(
        Scene::statuses(&s.store()),
        ["FAILED_SETUP", "FAILED_SETUP"]
    );
    assert!(
        s.fake.world().names("jobsets").is_empty(),
        "nothing created"
    );
}

#[test]
fn an_outage_is_recorded_and_cleared() {
    let s = Scene::new("outage");
    s.until("every task running", |st| {
        Scene::statuses(st) == ["RUNNING", "RUNNING"]
    });
    {
        let mut w = s.fake.world();
        w.down = true;
        w.close_watches();
    }
    s.until("the outage recorded", |st| {
        st.group(GID).unwrap().is_some_and(|g| g.outage.is_some())
    });
    let group = s.store().group(GID).unwrap().unwrap();
    assert!(
        group
            .outage
            .as_deref()
            .is_some_and(|o| o.contains("https://api.test:6443")),
        "{:?}",
        group.outage
    );
    assert_eq!(group.status, "RUNNING", "the last known status stays");
    s.fake.world().down = false;
    s.until("the outage cleared", |st| {
        st.group(GID).unwrap().is_some_and(|g| g.outage.is_none())
    });
}

#[test]
fn a_pipeline_runs_its_steps_in_order_through_the_supervisor() {
    let s = Scene::of(
        "pipeline",
        "\
name: g
execution: serial
---
name: train
num_nodes: 2
run: train
---
name: eval
run: eval
",
        |_| {},
    );
    s.until("the first step running", |st| {
        Scene::statuses(st) == ["RUNNING", "PENDING"]
    });
    // Only the first step's pods exist; the second's are made once the
    // first succeeded.
    assert_eq!(s.fake.world().created_pods().len(), 2);
    let nodes = s.store().nodes(GID).unwrap();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    for n in &nodes {
        assert_eq!(n.hostname, format!("train-{}.g", n.rank), "{n:?}");
        assert_eq!(n.handle, format!("g-train-{}-0", n.rank), "{n:?}");
    }
    {
        let mut w = s.fake.world();
        for i in 0..2 {
            w.exit(&format!("g-train-{i}-0"), 0);
        }
    }
    s.until("the second step running", |st| {
        Scene::statuses(st) == ["SUCCEEDED", "RUNNING"]
    });
    {
        let mut w = s.fake.world();
        w.exit("g-eval-0-0", 0);
    }
    s.until("the group closed", |st| {
        st.group(GID)
            .unwrap()
            .is_some_and(|g| g.finished_at_ms.is_some())
    });
    let group = s.store().group(GID).unwrap().unwrap();
    assert_eq!(group.status, "SUCCEEDED");
    assert_eq!(Scene::statuses(&s.store()), ["SUCCEEDED", "SUCCEEDED"]);
    assert_eq!(
        s.fake.world().get("jobsets", "g").unwrap()["status"]["terminalState"],
        "Completed"
    );
}

fn waiting(store: &Store) -> Vec<Option<String>> {
    store
        .tasks(GID)
        .unwrap()
        .into_iter()
        .map(|t| t.waiting)
        .collect()
}

/// The reasons the group's history recorded, in order.
fn reasons(store: &Store) -> Vec<(u64, Option<String>)> {
    store
        .events(GID)
        .unwrap()
        .into_iter()
        .filter_map(|(_, e)| {
            let e: serde_json::Value = serde_json::from_str(&e).ok()?;
            let w = e.get("waiting")?;
            Some((w["task"].as_u64()?, w["why"].as_str().map(str::to_owned)))
        })
        .collect()
}

#[test]
fn kueue_says_why_it_holds_the_group_until_it_admits_it() {
    let no_quota = "couldn't assign flavors to pod set trainer: insufficient unused quota for \
                    cpu in flavor default, 2 more needed";
    let s = Scene::with("kueue", |w| {
        w.kueue = Some(super::fake::Kueue {
            no_quota: Some(no_quota.into()),
            check: None,
        });
    });
    let quota = format!("Kueue: waiting for quota: {no_quota}");
    s.until("Kueue's reason", |st| {
        waiting(st) == [Some(quota.clone()), Some(quota.clone())]
    });
    assert_eq!(Scene::statuses(&s.store()), ["PENDING", "PENDING"]);
    assert!(s.fake.world().created_pods().is_empty(), "held by Kueue");
    // Quota reserved; a provisioning check still pending.
    s.fake.world().kueue = Some(super::fake::Kueue {
        no_quota: None,
        check: Some(("dws".into(), "Waiting for capacity".into())),
    });
    let check = "Kueue: quota reserved, waiting for admission check dws Pending: Waiting for \
                 capacity";
    s.until("the admission check's reason", |st| {
        waiting(st) == [Some(check.into()), Some(check.into())]
    });
    // Admitted: the JobSet resumes, the pods run, nothing waits.
    s.fake.world().kueue = Some(super::fake::Kueue::default());
    s.until("every task running", |st| {
        Scene::statuses(st) == ["RUNNING", "RUNNING"]
    });
    assert_eq!(waiting(&s.store()), [None, None]);
    // The history holds each reason once, in order, per task: the
    // suspension seen before Kueue's Workloads were read, then Kueue's
    // words.
    let trainer: Vec<Option<String>> = reasons(&s.store())
        .into_iter()
        .filter(|(task, _)| *task == 0)
        .map(|(_, why)| why)
        .filter(|why| !why.as_deref().is_some_and(|w| w.contains("is suspended")))
        .collect();
    assert_eq!(
        trainer,
        [Some(quota.clone()), Some(check.to_owned()), None],
        "{trainer:?}"
    );
}

#[test]
fn unschedulable_pods_say_the_schedulers_words_through_the_supervisor() {
    let full = "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are \
                available: 3 No preemption victims found for incoming pod.";
    let s = Scene::with("unschedulable", |w| w.no_node = Some(full.into()));
    let why = format!("Kubernetes: {full}");
    s.until("the scheduler's reason", |st| {
        waiting(st) == [Some(why.clone()), Some(why.clone())]
    });
    assert_eq!(Scene::statuses(&s.store()), ["PENDING", "PENDING"]);
    let since = s.store().tasks(GID).unwrap()[0].waiting_since_ms;
    assert!(since.is_some());
    // A node frees: the pods run, and the reason goes.
    s.fake.world().no_node = None;
    s.until("every task running", |st| {
        Scene::statuses(st) == ["RUNNING", "RUNNING"]
    });
    let tasks = s.store().tasks(GID).unwrap();
    assert!(
        tasks
            .iter()
            .all(|t| t.waiting.is_none() && t.waiting_since_ms.is_none()),
        "{tasks:?}"
    );
}

#[test]
fn workloads_refused_end_their_watch_and_the_suspension_is_said() {
    let s = Scene::with("kueue-refused", |w| {
        w.kueue = Some(super::fake::Kueue {
            no_quota: Some("no quota".into()),
            check: None,
        });
        w.fail("GET", "/workloads", Some(403), 1000);
    });
    let suspended = |st: &Store| {
        waiting(st).iter().all(|w| {
            w.as_deref()
                .is_some_and(|w| w.contains("the JobSet is suspended"))
        })
    };
    s.until("the suspension said", suspended);
    // Asked once, refused: not asked again, however long the group waits.
    std::thread::sleep(Duration::from_millis(1500));
    let asked = s
        .fake
        .world()
        .requests
        .iter()
        .filter(|r| r.path.contains("/workloads"))
        .count();
    assert_eq!(asked, 1);
    assert!(suspended(&s.store()));
}
