//! Plays the supervisor around the Kubernetes backend: the engine, its
//! timers (fired by the script), and the backend's reports fed to it,
//! exactly as the supervisor does through [`Backend`].

use super::fake::{Fake, NS, World};
use crate::backend::{Backend, Report};
use crate::k8s::client::Cluster;
use crate::k8s::exec::PodExec;
use crate::k8s::{Connect, Kubernetes, Lowering, Plan, Tuning};
use crate::policy::{Action, Engine, Event, Status, Timer};
use crate::reconciler::backoff::Backoff;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) const GID: i64 = 7;

/// A group compiled and lowered as `skyc build --target k8s` would.
pub(super) fn plan(yaml: &str) -> Plan {
    let c = skyc_compiler::compile(
        "group.yaml",
        yaml.as_bytes(),
        &skyc_compiler::Options::default(),
    );
    let group = c
        .group
        .unwrap_or_else(|| panic!("invalid group: {:?}", c.diagnostics));
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
            token: "run-1".into(),
        },
    )
    .unwrap_or_else(|d| panic!("lowering failed: {d:?}"))
}

pub(super) fn connect(fake: &Fake) -> Connect {
    connect_with(fake, None)
}

/// The fake cluster, its commands in pods run by `exec` (else by the
/// scripted [`super::exec::FakeExec`]).
pub(super) fn connect_with(fake: &Fake, exec: Option<Arc<dyn PodExec>>) -> Connect {
    let fake = fake.clone();
    Arc::new(move |_: &Plan| {
        let fake = fake.clone();
        let exec = exec.clone();
        Box::pin(async move {
            Ok(Cluster {
                exec: exec.unwrap_or_else(|| Arc::new(super::exec::FakeExec(fake.clone()))),
                client: kube::Client::new(fake, NS),
                server: "https://api.test:6443".into(),
                namespace: NS.into(),
            })
        })
    })
}

/// The fake cluster, through a client fenced by a controller replica's
/// Lease.
pub(super) fn fenced(fake: &Fake, fence: crate::k8s::lease::Fence) -> Connect {
    let fake = fake.clone();
    Arc::new(move |_: &Plan| {
        let (fake, fence) = (fake.clone(), fence.clone());
        Box::pin(async move {
            Ok(Cluster {
                exec: Arc::new(super::exec::FakeExec(fake.clone())),
                client: kube::Client::new(crate::k8s::lease::Fenced::new(fake, fence), NS),
                server: "https://api.test:6443".into(),
                namespace: NS.into(),
            })
        })
    })
}

/// Group `g` of `plan` recorded in the store of `dir`, as `skyc run
/// --target k8s` records it; its id.
pub(super) fn insert(dir: &std::path::Path, plan: &Plan) -> i64 {
    use crate::store::{Backend, NewGroup, NewTask, Store};
    Store::open(dir)
        .unwrap()
        .insert_group(&NewGroup {
            name: "g",
            source: "g.yaml",
            submitted_at_ms: crate::store::now_ms(),
            plan: &serde_json::to_string(&plan).unwrap(),
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
        .unwrap()
}

/// One turn of the cluster's controllers; a gate's pod does nothing but
/// end well.
pub(super) fn turn(w: &mut World) {
    w.reconcile_cluster();
    w.run_pending();
    for pod in w.names("pods") {
        let gate = w
            .get("pods", &pod)
            .is_some_and(|p| pod.starts_with("g-skyc-gate-") && p["status"]["phase"] == "Running");
        if gate {
            w.exit(&pod, 0);
        }
    }
}

pub(super) fn tuning() -> Tuning {
    Tuning {
        backoff: Backoff {
            first: Duration::from_millis(5),
            max: Duration::from_millis(200),
            tries: 4,
        },
        logs: false,
        log_streams: crate::k8s::log_readers::STREAMS,
        log_turn: crate::k8s::log_readers::TURN,
        force_after: Duration::from_millis(100),
        job_poll: Duration::from_millis(20),
        settle_limit: Duration::from_secs(120),
    }
}

pub(super) struct Driver {
    pub(super) fake: Fake,
    pub(super) plan: Plan,
    pub(super) engine: Engine,
    pub(super) backend: Option<Kubernetes>,
    /// Every report, in order.
    pub(super) reports: Vec<Report>,
    /// Timers the engine set, not yet fired.
    pub(super) timers: Vec<(Timer, Duration)>,
    /// `at_ms` of each event, as reported.
    pub(super) event_times: Vec<(Event, Option<i64>)>,
    pub(super) job: Option<String>,
    pub(super) dir: PathBuf,
    tuning: Tuning,
    /// The supervisor commits the engine's decisions but dies before
    /// handing them to the backend.
    pub(super) dies_before_executing: bool,
    /// What runs commands in pods, when not the scripted exec.
    exec: Option<Arc<dyn PodExec>>,
}

impl Driver {
    /// A new group: the engine starts, the backend takes it on.
    pub(super) fn start(yaml: &str) -> Self {
        Self::start_with(Fake::default(), plan(yaml), tuning())
    }

    pub(super) fn start_with(fake: Fake, plan: Plan, tuning: Tuning) -> Self {
        Self::start_in(state_dir(), fake, plan, tuning, None)
    }

    /// A new group whose supervisor's state directory is `dir`, its
    /// commands in pods run by `exec`.
    pub(super) fn start_in(
        dir: PathBuf,
        fake: Fake,
        plan: Plan,
        tuning: Tuning,
        exec: Option<Arc<dyn PodExec>>,
    ) -> Self {
        let engine = Engine::new(plan.spec.clone());
        let mut d = Self {
            fake,
            plan,
            engine,
            backend: None,
            reports: Vec::new(),
            timers: Vec::new(),
            event_times: Vec::new(),
            job: None,
            dir,
            tuning,
            dies_before_executing: false,
            exec,
        };
        d.adopt();
        let actions = d.engine.start();
        d.execute(&actions);
        d.settle();
        d
    }

    /// A supervisor killed now: the backend is gone; the engine is what
    /// was committed (every event handled so far).
    pub(super) fn kill_supervisor(&mut self) {
        self.backend = None;
    }

    /// A new supervisor adopts the group from the committed engine.
    pub(super) fn restart_supervisor(&mut self) {
        self.dies_before_executing = false;
        self.adopt();
        self.settle();
    }

    fn adopt(&mut self) {
        let connect = connect_with(&self.fake, self.exec.clone());
        let mut backend =
            Kubernetes::start(self.dir.clone(), connect, self.tuning).expect("the backend starts");
        backend.adopt_plan(
            GID,
            super::role(&self.plan),
            self.plan.clone(),
            &self.engine,
            self.job.clone(),
        );
        self.backend = Some(backend);
    }

    fn execute(&mut self, actions: &[Action]) {
        for a in actions {
            if let Action::SetTimer { timer, after } = a {
                self.timers.retain(|t| t.0 != *timer);
                self.timers.push((*timer, *after));
            }
        }
        if self.dies_before_executing {
            return;
        }
        if let Some(b) = self.backend.as_mut() {
            b.execute(GID, &self.engine, actions);
        }
    }

    /// Hands reports to the engine; returns whether there were any.
    pub(super) fn pump(&mut self) -> bool {
        let Some(b) = self.backend.as_mut() else {
            return false;
        };
        let reports = b.drain(0);
        let any = !reports.is_empty();
        for (gid, report) in reports {
            assert_eq!(gid, GID);
            self.reports.push(report.clone());
            match report {
                Report::Event { event, at_ms } => {
                    self.event_times.push((event.clone(), at_ms));
                    let actions = self.engine.handle(event);
                    self.execute(&actions);
                }
                Report::Job(id) => self.job = Some(id),
                _ => {}
            }
        }
        any
    }

    /// Waits until the backend has done all it will do for now: no
    /// request and no report for a while.
    pub(super) fn settle(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut quiet = 0;
        let mut last = usize::MAX;
        while quiet < 10 {
            assert!(
                Instant::now() < deadline,
                "the backend did not settle; requests: {:#?}",
                self.fake
                    .world()
                    .requests
                    .iter()
                    .map(|r| r.line())
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(15));
            let reported = self.pump();
            let (n, delivered) = {
                let w = self.fake.world();
                (w.requests.len(), w.delivered())
            };
            if reported || n != last || !delivered {
                quiet = 0;
                last = n;
            } else {
                quiet += 1;
            }
        }
    }

    /// Changes the cluster (a controller, the kubelet, an outage), then
    /// lets the backend react.
    pub(super) fn cluster(&mut self, f: impl FnOnce(&mut World)) {
        f(&mut self.fake.world());
        self.settle();
    }

    /// Fires a timer the engine set.
    pub(super) fn fire(&mut self, timer: Timer) {
        assert!(
            self.timers.iter().any(|t| t.0 == timer),
            "{timer:?} was not set: {:?}",
            self.timers
        );
        self.timers.retain(|t| t.0 != timer);
        let actions = self.engine.handle(Event::TimerFired(timer));
        self.execute(&actions);
        self.settle();
    }

    pub(super) fn cancel(&mut self) {
        if let Some(b) = self.backend.as_mut() {
            b.cancel(GID);
        }
        let actions = self.engine.handle(Event::CancelRequested);
        self.execute(&actions);
        self.settle();
    }

    /// Write requests since the last call.
    pub(super) fn writes(&mut self) -> Vec<String> {
        self.fake.world().take_writes()
    }

    pub(super) fn statuses(&self) -> Vec<Status> {
        (0..self.plan.spec.tasks.len())
            .map(|t| self.engine.task_status(t))
            .collect()
    }

    pub(super) fn settled(&self) -> bool {
        self.reports.contains(&Report::Settled)
    }

    /// `uid` of a Job, for expected requests.
    pub(super) fn uid(&self, resource: &str, name: &str) -> String {
        self.fake.world().uid(resource, name)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.backend = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new state directory for a test's supervisor.
pub(super) fn state_dir() -> PathBuf {
    std::env::temp_dir().join(format!(
        "skyc-k8s-test-{}-{}",
        std::process::id(),
        DIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ))
}

static DIRS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
