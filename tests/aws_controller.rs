//! skyc's controller on AWS, through the command line, against the EC2
//! and IAM stand-in (moto's server, `SKYC_MOTO_ENDPOINT`) and stand-in
//! machines (scripts/standin): `controller up` makes the role, instance
//! profile, security group, key pair and instance, and the test boots a
//! machine for every running instance, as EC2 would (its user data run,
//! SSH served with the key its launch named, its `/var/lib` kept while
//! it is stopped, as a volume is). Every AWS call of the client and of
//! the controller goes to moto through a relay on the machines' bridge;
//! the controller's credentials come from an instance metadata service
//! on the bridge (scripts/standin imds: IMDSv2, the role's credentials),
//! as an instance profile's do from EC2's.
//!
//! What the stand-ins do not show: IAM's evaluation of the role's policy
//! (moto grants any credentials everything), a real
//! boot (systemd, cloud-init once), public addresses and security groups
//! (every machine reaches every other), and the instance's own stop at
//! an OS shutdown (the controller asks EC2 to stop it, as here).

use crate::aws_run::{Machines, STANDIN, follow_machines, ready, relay, stand_in_client};
use crate::support::scratch::{Scratch, text};
use serde_json::Value;
use skyc_runtime::aws::Ec2;
use skyc_runtime::aws::ec2::query;
use skyc_runtime::aws::ec2::response::{self, Instance, State};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

const REGION: &str = "us-east-1";

/// The controller's world: the scratch directory (the user's home), the
/// machines that follow moto's instances, and the endpoints.
struct World {
    s: Scratch,
    moto: String,
    relay: String,
    /// The instance metadata service the controller's machine is told
    /// of (scripts/standin imds): its instance profile's credentials.
    imds: String,
    ec2: Ec2,
    rt: tokio::runtime::Runtime,
    machines: PathBuf,
    /// Instance id to its address, for the machines up.
    up: BTreeMap<String, String>,
    _serial: std::fs::File,
}

impl World {
    fn new(name: &str) -> Option<World> {
        let moto = ready()?;
        let serial = std::fs::File::create("/tmp/skyc-standin.lock").expect("lock file");
        rustix::fs::flock(&serial, rustix::fs::FlockOperation::LockExclusive).expect("flock");
        let s = Scratch::new(name);
        let machines = s.dir.join("m");
        let relay = relay(&machines, &moto);
        let ok = Command::new(STANDIN)
            .arg("imds")
            .arg(&machines)
            .arg("skyc-controller")
            .status()
            .expect("scripts/standin imds")
            .success();
        assert!(ok, "scripts/standin imds");
        let port = std::fs::read_to_string(machines.join("relay-imds.port")).expect("its port");
        let imds = format!("http://169.254.77.1:{}", port.trim());
        Some(World {
            imds,
            ec2: stand_in_client(&moto, REGION),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            s,
            moto,
            relay,
            machines,
            up: BTreeMap::new(),
            _serial: serial,
        })
    }

    /// `skyc ARGS` as the user runs it: its home the scratch directory,
    /// AWS reached through the relay (the controller is given the same
    /// endpoints), keys of its own in the environment.
    fn skyc(&self, args: &[&str]) -> Command {
        let mut cmd = crate::support::skyc();
        cmd.args(args)
            .current_dir(&self.s.dir)
            .env("HOME", &self.s.dir)
            .env_remove("XDG_STATE_HOME")
            .env_remove("SKYC_STATE_DIR")
            .env("AWS_ENDPOINT_URL", &self.relay)
            .env("AWS_EC2_METADATA_SERVICE_ENDPOINT", &self.imds)
            .env("AWS_ACCESS_KEY_ID", "AKIDSKYCUSER")
            .env("AWS_SECRET_ACCESS_KEY", "skyc-user-secret")
            .env("AWS_REGION", REGION)
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_CONFIG_FILE")
            .env_remove("AWS_SHARED_CREDENTIALS_FILE")
            .env_remove("AWS_EC2_METADATA_DISABLED")
            .env_remove("AWS_ENDPOINT_URL_EC2")
            .env_remove("AWS_ENDPOINT_URL_S3")
            .env_remove("SKYPILOT_CONFIG");
        cmd
    }

    /// Runs `skyc ARGS` while the machines follow the instances (a
    /// command that starts an instance waits for its SSH).
    fn following(&mut self, args: &[&str]) -> Output {
        let child: Child = self
            .skyc(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("skyc");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait_with_output()));
        let start = Instant::now();
        loop {
            if let Ok(out) = rx.recv_timeout(Duration::from_millis(300)) {
                return out.expect("skyc");
            }
            self.follow();
            assert!(
                start.elapsed() < Duration::from_secs(300),
                "skyc {args:?} did not end"
            );
        }
    }

    /// The test's client of the IAM stand-in.
    fn iam(&self) -> Ec2 {
        let settings = skyc_runtime::aws::Settings {
            profile: "default".into(),
            credentials: skyc_runtime::aws::ec2::sigv4::Credentials {
                access_key_id: "AKIDSKYCTEST".into(),
                secret_access_key: "skyc-test-secret".into(),
                session_token: None,
            },
            credentials_source: "the test".into(),
            region: None,
            endpoint: None,
        };
        Ec2::iam(
            &settings,
            REGION,
            Some(&self.moto),
            skyc_runtime::aws::Tuning::default(),
        )
        .expect("IAM client")
    }

    fn instances(&self) -> Vec<Instance> {
        let body = self
            .rt
            .block_on(self.ec2.call(&query::action("DescribeInstances")))
            .expect("DescribeInstances");
        response::instances(&body).expect("instances").0
    }

    fn controller(&self) -> Option<Instance> {
        self.instances().into_iter().find(|i| {
            i.tags.get("skyc-controller").map(String::as_str) == Some(REGION)
                && !i.state.is_some_and(State::is_ending)
        })
    }

    /// The public half of the key an instance's launch named: the
    /// controller's is this machine's; a run's is the controller's (made
    /// on its volume).
    fn authorized_key(&self, i: &Instance) -> PathBuf {
        if i.tags.contains_key("skyc-controller") {
            return self
                .s
                .dir
                .join(".local/state/skyc/controllers")
                .join(format!("aws-{REGION}"))
                .join("id_ed25519.pub");
        }
        let controller = self.controller().expect("the controller");
        let run = i.tags.get("skyc-run").expect("a run's tag");
        let disk = self.machines.join(&controller.id).join("disk/skyc");
        // A pool's worker makes its own, in its group's directory.
        if let Some((_, gid)) = run.rsplit_once("-w")
            && i.tags.contains_key("skyc-pool")
        {
            return disk.join("groups").join(gid).join("key/id_ed25519.pub");
        }
        disk.join("aws").join(run).join("id_ed25519.pub")
    }

    /// Machines follow the instances: one boots for each instance that
    /// runs, and goes when it stops or ends.
    fn follow(&mut self) {
        let instances = self.instances();
        let keys: BTreeMap<String, PathBuf> = instances
            .iter()
            .filter(|i| i.state == Some(State::Running) && !self.up.contains_key(&i.id))
            .map(|i| (i.id.clone(), self.authorized_key(i)))
            .collect();
        follow_machines(
            &Machines {
                rt: &self.rt,
                ec2: &self.ec2,
                scratch: &self.s.dir,
                dir: &self.machines,
            },
            &mut self.up,
            instances,
            |i| keys[&i.id].clone(),
        );
    }

    /// The controller's statuses, through the controller.
    fn statuses(&mut self) -> Value {
        let state = format!("aws://{REGION}");
        let out = self.following(&["status", "--json", "--state-dir", &state]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("status JSON")
    }

    /// `skyc run FILE --target aws -d` to the controller, its nodes
    /// reached as stand-in machines are (root, private addresses).
    fn submit(&mut self, file: &std::path::Path) -> Output {
        let state = format!("aws://{REGION}");
        self.following(&[
            "run",
            &file.to_string_lossy(),
            "--target",
            "aws",
            "-d",
            "--state-dir",
            &state,
            "--ssh-user",
            "root",
            "--ssh-via",
            "private",
            "--grace",
            "2",
        ])
    }

    /// The statuses once group `gid` has finished (within `within`),
    /// `each` asked of every look before.
    fn until_finished(
        &mut self,
        gid: i64,
        within: Duration,
        each: impl Fn(&Self, &Value),
    ) -> Value {
        let start = Instant::now();
        loop {
            self.follow();
            let statuses = self.statuses();
            let g = group_of(&statuses, gid);
            each(self, &g);
            if !g["finished_at_ms"].is_null() {
                return statuses;
            }
            assert!(start.elapsed() < within, "not finished: {g:#}");
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// `skyc controller down --target aws` of the test's region.
    fn down(&mut self) -> Output {
        self.following(&[
            "controller",
            "down",
            "--target",
            "aws",
            "--controller-region",
            REGION,
        ])
    }

    /// A file on the controller's volume.
    fn on_controller(&self, path: &str) -> PathBuf {
        let controller = self.controller().expect("the controller");
        self.machines.join(controller.id).join("disk").join(path)
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = Command::new(STANDIN)
            .arg("stop")
            .arg(&self.machines)
            .status();
        // Whatever a failed test left on the stand-in (its own: other
        // tests share it).
        let group = group_name();
        let ids: Vec<String> = self
            .instances()
            .into_iter()
            .filter(|i| !i.state.is_some_and(State::is_ending))
            .filter(|i| {
                i.tags.contains_key("skyc-controller") || i.tags.get("skyc-group") == Some(&group)
            })
            .map(|i| i.id)
            .collect();
        let _ = self
            .rt
            .block_on(skyc_runtime::aws::control::ops::terminate(&self.ec2, &ids));
    }
}

/// The group's name: this test's own.
fn group_name() -> String {
    format!("ctl{}", std::process::id())
}

/// A group of one task in the test's region, of the test's name, that
/// runs `run`, written to `file`.
fn one_task(w: &World, file: &str, run: &str) -> PathBuf {
    w.s.write(
        file,
        &format!(
            "name: {}\nresources: {{infra: aws/{REGION}}}\nrun: {run}\n",
            group_name()
        ),
    )
}

fn group_of(statuses: &Value, gid: i64) -> Value {
    statuses
        .as_array()
        .expect("a list")
        .iter()
        .find(|g| g["id"] == gid)
        .cloned()
        .unwrap_or(Value::Null)
}

/// The whole life of a controller: made, given a group whose client is
/// gone at once, which it supervises to its end (the auxiliary stopped
/// after the primary, every instance terminated); stopped when idle,
/// started again by the next command with its state; then removed.
#[test]
fn the_controller_supervises_a_group_stops_when_idle_and_comes_back_with_its_state() {
    let Some(mut w) = World::new("aws-controller") else {
        return;
    };
    let up = w.following(&[
        "controller",
        "up",
        "--target",
        "aws",
        "--controller-region",
        REGION,
        "--ssh-user",
        "root",
        "--ssh-private",
        "--controller-idle",
        "15s",
    ]);
    assert!(up.status.success(), "{}", text(&up.stderr));
    // What it made (moto may hold some from an earlier run: `up` keeps
    // what is there).
    for (action, name, value) in [
        ("GetRole", "RoleName", "skyc-controller"),
        ("GetRolePolicy", "PolicyName", "skyc-controller"),
        (
            "GetInstanceProfile",
            "InstanceProfileName",
            "skyc-controller",
        ),
    ] {
        let mut p = vec![
            ("Action".to_owned(), action.to_owned()),
            ("Version".to_owned(), "2010-05-08".to_owned()),
            (name.to_owned(), value.to_owned()),
        ];
        if action == "GetRolePolicy" {
            p.push(("RoleName".into(), "skyc-controller".into()));
        }
        let body = w.rt.block_on(w.iam().call(&p));
        assert!(body.is_ok(), "{action}: {body:?}");
        if action == "GetInstanceProfile" {
            assert!(
                body.unwrap()
                    .contains("<RoleName>skyc-controller</RoleName>")
            );
        }
    }
    let controller = w.controller().expect("the controller's instance");
    // skyc arrived, and runs there.
    let delivered = w.on_controller("skyc/bin/skyc");
    assert_eq!(
        std::fs::read(&delivered)
            .expect("skyc on the controller")
            .len() as u64,
        std::fs::metadata(env!("CARGO_BIN_EXE_skyc")).unwrap().len()
    );
    // `up` again makes nothing and keeps the instance.
    let again = w.following(&[
        "controller",
        "up",
        "--target",
        "aws",
        "--ssh-user",
        "root",
        "--ssh-private",
        "--controller-idle",
        "15s",
    ]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        !text(&again.stderr).contains("made "),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(w.controller().map(|i| i.id), Some(controller.id.clone()));

    // The trainer's code travels with the group: from this machine to
    // the controller (once), then to its node through the run's bucket.
    std::fs::create_dir_all(w.s.dir.join("code")).expect("code");
    let data = format!("weights of run {}\n", std::process::id());
    w.s.write("code/data.txt", &data);
    let group = w.s.write(
        "group.yaml",
        &format!(
            "name: {}\nexecution: parallel\nprimary_tasks: [trainer]\ntermination_delay: 2s\n\
             ---\nname: trainer\nresources: {{infra: aws/{REGION}}}\nworkdir: code\n\
             run: |\n  cat data.txt\n  sleep 20\n  echo trained\n\
             ---\nname: server\nresources: {{infra: aws/{REGION}}}\nrun: |\n  echo serving\n  sleep 600\n",
            group_name()
        ),
    );
    let state = format!("aws://{REGION}");
    let submitted = w.submit(&group);
    assert!(submitted.status.success(), "{}", text(&submitted.stderr));
    let gid: i64 = text(&submitted.stdout).trim().parse().expect("group id");
    // Nothing of the group is on this machine: no supervisor, no key.
    let here = w.s.dir.join(".local/state/skyc");
    assert!(!here.join("supervisor.pid").exists());
    assert!(
        !here.join("aws").exists()
            || std::fs::read_dir(here.join("aws"))
                .unwrap()
                .next()
                .is_none()
    );

    // `down` refuses while it is live, and names it.
    let refused = w.down();
    assert_eq!(
        refused.status.code(),
        Some(100),
        "{}",
        text(&refused.stderr)
    );
    assert!(
        text(&refused.stderr).contains(&group_name()),
        "{}",
        text(&refused.stderr)
    );

    // The plan there is the controller's: its credentials its instance
    // profile's (the instance metadata service), not this machine's keys.
    let plan: Value = serde_json::from_str(
        &skyc_runtime::store::Store::open(&w.on_controller("skyc"))
            .and_then(|store| store.plan(gid))
            .expect("the group's plan on the controller"),
    )
    .expect("plan JSON");
    assert!(
        plan["access"]["source"]
            .to_string()
            .contains("instance-metadata"),
        "{}",
        plan["access"]
    );

    // The controller supervises it to its end, running all along (the
    // primary outlasts the idle time: a live group keeps it up).
    let statuses = w.until_finished(gid, Duration::from_secs(180), |w, g| {
        assert_eq!(
            w.controller().and_then(|i| i.state),
            Some(State::Running),
            "stopped while {g:#}"
        );
    });
    let finished = group_of(&statuses, gid);
    assert_eq!(finished["status"], "SUCCEEDED", "{finished:#}");
    let log = w.following(&["logs", &gid.to_string(), "--state-dir", &state]);
    let log = text(&log.stdout);
    assert!(log.contains("trained") && log.contains("serving"), "{log}");
    assert!(
        log.contains(data.trim()),
        "the workdir's bytes on the node: {log}"
    );
    // Its own log is the supervisor's there.
    let own = w.following(&["logs", "--controller", "--state-dir", &state]);
    assert!(own.status.success(), "{}", text(&own.stderr));
    assert!(
        text(&own.stdout).contains(&format!(
            "serving /var/lib/skyc as instance {}",
            controller.id
        )),
        "{}",
        text(&own.stdout)
    );
    // Every instance of the group is terminated; the controller runs.
    let start = Instant::now();
    loop {
        let left: Vec<Instance> = w
            .instances()
            .into_iter()
            .filter(|i| i.tags.get("skyc-group") == Some(&group_name()))
            .filter(|i| i.state != Some(State::Terminated))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{left:?}");
        w.follow();
        std::thread::sleep(Duration::from_millis(500));
    }

    // Idle (nothing live, no client) for 15 s: it stops its instance.
    let start = Instant::now();
    while w.controller().and_then(|i| i.state) != Some(State::Stopped) {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "not stopped: {:?}; its log:\n{}",
            w.controller(),
            std::fs::read_to_string(w.on_controller("skyc/supervisor.log")).unwrap_or_default()
        );
        w.follow();
        std::thread::sleep(Duration::from_millis(500));
    }
    w.follow();
    assert!(
        !w.up.contains_key(&controller.id),
        "its machine went with it"
    );

    // The next submission starts it again, and its state is there.
    let second = one_task(&w, "second.yaml", "echo again");
    let out = w.submit(&second);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("started it again"),
        "{}",
        text(&out.stderr)
    );
    let again: i64 = text(&out.stdout).trim().parse().expect("group id");
    let statuses = w.until_finished(again, Duration::from_secs(120), |_, _| {});
    assert_eq!(group_of(&statuses, again)["status"], "SUCCEEDED");
    assert_eq!(group_of(&statuses, gid)["status"], "SUCCEEDED");
    assert_eq!(w.controller().and_then(|i| i.state), Some(State::Running));

    // Down removes all of it, and this machine's key.
    let down = w.down();
    assert!(down.status.success(), "{}", text(&down.stderr));
    assert!(w.controller().is_none());
    let keys =
        w.rt.block_on(w.ec2.call(&query::action("DescribeKeyPairs")));
    assert!(
        !keys
            .as_deref()
            .unwrap_or_default()
            .contains("<keyName>skyc-controller<"),
        "{keys:?}"
    );
    assert!(
        !w.s.dir
            .join(".local/state/skyc/controllers")
            .join(format!("aws-{REGION}"))
            .exists()
    );
    let body = w.rt.block_on(async {
        let mut p = query::action("DescribeSecurityGroups");
        query::filters(&mut p, &[("group-name", &["skyc-controller"])]);
        w.ec2.call(&p).await
    });
    assert!(
        !body.as_deref().unwrap_or_default().contains("<groupId>"),
        "{body:?}"
    );
    for (action, name) in [
        ("GetRole", "RoleName"),
        ("GetInstanceProfile", "InstanceProfileName"),
    ] {
        let p = vec![
            ("Action".to_owned(), action.to_owned()),
            ("Version".to_owned(), "2010-05-08".to_owned()),
            (name.to_owned(), "skyc-controller".to_owned()),
        ];
        let gone = w.rt.block_on(w.iam().call(&p));
        assert_eq!(
            gone.as_ref().err().and_then(|e| e.code()),
            Some("NoSuchEntity"),
            "{action}: {gone:?}"
        );
    }
}

/// A run to a region with no controller: refused, saying how to make
/// one; with SkyPilot's `jobs.controller` configured, the run makes the
/// controller that configuration describes, which then runs the group,
/// and a pool and its job.
#[test]
fn a_run_makes_the_controller_skypilots_configuration_asks_for() {
    let Some(mut w) = World::new("aws-controller-auto") else {
        return;
    };
    let group = one_task(&w, "one.yaml", "echo made");
    let refused = w.submit(&group);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("skyc controller up --target aws"),
        "{}",
        text(&refused.stderr)
    );
    assert!(w.controller().is_none());

    std::fs::create_dir_all(w.s.dir.join(".sky")).expect(".sky");
    w.s.write(
        ".sky/config.yaml",
        "jobs:\n  controller:\n    resources:\n      instance_type: m6id.large\n      \
         disk_size: 60\n    autostop:\n      idle_minutes: 5\n",
    );
    let made = w.submit(&group);
    assert!(made.status.success(), "{}", text(&made.stderr));
    assert!(
        text(&made.stderr).contains("making the one"),
        "{}",
        text(&made.stderr)
    );
    let gid: i64 = text(&made.stdout).trim().parse().expect("group id");
    let controller = w.controller().expect("the controller's instance");
    assert_eq!(controller.instance_type, "m6id.large");
    let env = std::fs::read_to_string(w.on_controller("skyc/controller.env")).expect("its env");
    assert!(env.contains("SKYC_CONTROLLER_IDLE_SECONDS=300\n"), "{env}");
    let statuses = w.until_finished(gid, Duration::from_secs(120), |_, _| {});
    assert_eq!(
        group_of(&statuses, gid)["status"],
        "SUCCEEDED",
        "{statuses:#}"
    );
    pool_through_the_controller(&mut w);
    let down = w.down();
    assert!(down.status.success(), "{}", text(&down.stderr));
    assert!(w.controller().is_none());
}

/// A pool applied through the controller: its worker made by the
/// controller (its key there, its SSH open to it), a job planned here
/// against it and run in the worker after the pool's setup, its log
/// back through the controller, the dashboard served here showing them;
/// then the pool down, its instance ended.
fn pool_through_the_controller(w: &mut World) {
    let state = format!("aws://{REGION}");
    let pool = w.s.write(
        "pool.yaml",
        &format!(
            "name: {}\nresources: {{infra: aws/{REGION}}}\n\
             setup: echo warmed > /var/lib/warm.txt\npool:\n  workers: 1\n",
            group_name()
        ),
    );
    let out = w.following(&[
        "pool",
        "apply",
        "-p",
        "ctlpool",
        &pool.to_string_lossy(),
        "--target",
        "aws",
        "--state-dir",
        &state,
        "--ssh-user",
        "root",
        "--ssh-via",
        "private",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("pool `ctlpool` created"),
        "{}",
        text(&out.stderr)
    );
    let job = w.s.write(
        "job.yaml",
        "name: job\nrun: echo rank $SKYPILOT_JOB_RANK $(cat /var/lib/warm.txt)\n",
    );
    let out = w.following(&[
        "run",
        "--pool",
        "ctlpool",
        &job.to_string_lossy(),
        "-d",
        "--state-dir",
        &state,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let id: i64 = text(&out.stdout).trim().parse().expect("the job's id");
    let statuses = w.until_finished(id, Duration::from_secs(180), |_, _| {});
    let job = group_of(&statuses, id);
    assert_eq!(job["status"], "SUCCEEDED", "{statuses:#}");
    let logs = w.following(&["logs", &id.to_string(), "--state-dir", &state]);
    assert!(
        text(&logs.stdout).contains("rank 0 warmed"),
        "{}{}",
        text(&logs.stdout),
        text(&logs.stderr)
    );
    // The dashboard served here shows the controller's pool and job.
    {
        let d = crate::dashboard::Dashboard::spawned(w.skyc(&[
            "dashboard",
            "--port",
            "0",
            "--state-dir",
            &state,
        ]));
        let pools = d.json("/api/pools");
        assert_eq!(pools["pools"][0]["name"], "ctlpool", "{pools:#}");
        let shown = d.json(&format!("/api/groups/{id}"));
        assert_eq!(shown["group"]["status"], "SUCCEEDED", "{shown:#}");
    }
    let out = w.following(&["pool", "down", "ctlpool", "--state-dir", &state]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let start = Instant::now();
    loop {
        w.follow();
        let out = w.following(&["pool", "status", "--json", "--state-dir", &state]);
        let workers_live = w
            .instances()
            .iter()
            .any(|i| i.tags.contains_key("skyc-pool") && !i.state.is_some_and(State::is_ending));
        if text(&out.stdout).trim() == "[]" && !workers_live {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the pool not down: {}",
            text(&out.stdout)
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}
