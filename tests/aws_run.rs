//! `skyc run --target aws`, through the command line.
//!
//! Without an EC2 endpoint: what the client refuses before anything is
//! recorded (no credentials, an endpoint that does not answer, secrets).
//!
//! With the EC2 stand-in (moto's server, `SKYC_MOTO_ENDPOINT`, which
//! scripts/test starts) and stand-in machines (scripts/standin: root,
//! sshd, iproute2): the supervisor launches the group's instances on the
//! stand-in, and the test starts a machine at each running instance's
//! address that boots its user data, as EC2 would; the supervisor
//! reaches them over SSH as it would reach VMs. docs/targets/cloud.md
//! says what differs from a VM. Skipped, loudly, without them (failed
//! under scripts/test, which provides them).

use crate::support::ec2_refusal::Ec2Refusal;
use crate::support::root;
use crate::support::scratch::{Scratch, task, text};
use base64::Engine as _;
use serde_json::Value;
use skyc_runtime::aws::control::ops;
use skyc_runtime::aws::ec2::query;
use skyc_runtime::aws::ec2::response::State;
use skyc_runtime::aws::{Ec2, Settings, Tuning};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub(crate) const STANDIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/standin");

/// How long the test profile's credentials last: less than the
/// runtime's margin, so a supervisor asks for new ones on every pass.
const CREDENTIALS_LAST_S: u64 = 8;

/// `skyc` with the stand-in's endpoint and the test profile `skyc-test`
/// in the scratch directory's `~/.aws/config`: a `credential_process`
/// that gives new short-lived credentials each time (`AKPROC1`,
/// `AKPROC2`...), counts its runs in `cred-count`, logs each secret it
/// gives in `cred-secrets` and fails while `cred-broken` exists. No keys
/// in the environment, no instance metadata service.
fn aws_skyc(s: &Scratch, endpoint: &str, args: &[&str]) -> Command {
    let script = s.dir.join("creds.sh");
    if !script.exists() {
        s.write(
            "creds.sh",
            &format!(
                r#"#!/bin/sh
set -e
d={dir}
if [ -e "$d/cred-broken" ]; then echo "the identity broker says: session revoked" >&2; exit 3; fi
n=$(( $(cat "$d/cred-count" 2>/dev/null || echo 0) + 1 ))
echo $n > "$d/cred-count"
exp=$(date -u -d "@$(( $(date +%s) + {CREDENTIALS_LAST_S} ))" +%Y-%m-%dT%H:%M:%SZ)
echo "skyc-test-secret-$n-$$" >> "$d/cred-secrets"
echo "skyc-test-token-$n-$$" >> "$d/cred-secrets"
printf '{{"Version": 1, "AccessKeyId": "AKPROC%s", "SecretAccessKey": "skyc-test-secret-%s-%s", "SessionToken": "skyc-test-token-%s-%s", "Expiration": "%s"}}\n' $n $n $$ $n $$ "$exp"
"#,
                dir = s.dir.display()
            ),
        );
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::create_dir_all(s.dir.join(".aws")).expect("~/.aws");
        s.write(
            ".aws/config",
            &format!(
                "[profile skyc-test]\ncredential_process = {}\n\
                 [profile skyc-keys]\naws_access_key_id = AKIDSKYCKEYS\n\
                 aws_secret_access_key = skyc-keys-secret\n",
                script.display()
            ),
        );
    }
    let mut cmd = s.skyc(args);
    cmd.env("HOME", &s.dir)
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_PROFILE", "skyc-test")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_CONFIG_FILE")
        .env_remove("AWS_SHARED_CREDENTIALS_FILE")
        .env_remove("AWS_ENDPOINT_URL_EC2");
    cmd
}

fn statuses(s: &Scratch) -> Value {
    let out = s.skyc(&["status", "--json"]).output().expect("status");
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
fn an_endpoint_that_does_not_answer_is_named_and_nothing_is_recorded() {
    let s = Scratch::new("aws-unreachable");
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let example = root().join("examples/train-eval.yaml");
    let out = aws_skyc(
        &s,
        &endpoint,
        &["run", &example.to_string_lossy(), "--target", "aws"],
    )
    .output()
    .expect("skyc run");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains(&endpoint),
        "{stderr}"
    );
    assert_eq!(statuses(&s), Value::Array(Vec::new()), "no group recorded");
}

#[test]
fn no_credentials_is_a_clear_error_and_nothing_is_recorded() {
    let s = Scratch::new("aws-nocreds");
    let example = root().join("examples/train-eval.yaml");
    let out = s
        .skyc(&["run", &example.to_string_lossy(), "--target", "aws"])
        .env("HOME", &s.dir)
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SHARED_CREDENTIALS_FILE")
        .env_remove("AWS_CONFIG_FILE")
        .env_remove("AWS_WEB_IDENTITY_TOKEN_FILE")
        .env_remove("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        .env_remove("AWS_CONTAINER_CREDENTIALS_FULL_URI")
        // Not on EC2: the metadata service is not asked.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .expect("skyc run");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with("error: no AWS credentials: "),
        "{stderr}"
    );
    assert_eq!(statuses(&s), Value::Array(Vec::new()));
}

#[test]
fn a_secret_without_a_value_is_a_located_error_on_aws() {
    let s = Scratch::new("aws-secrets");
    let file = s.write(
        "g.yaml",
        "name: g\nexecution: parallel\n---\nname: a\nsecrets: {TOKEN: null}\nrun: echo hi\n",
    );
    let out = aws_skyc(
        &s,
        "http://127.0.0.1:1",
        &["run", &file.to_string_lossy(), "--target", "aws"],
    )
    .env_remove("TOKEN")
    .output()
    .expect("skyc run");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error[missing-secret-value]") && stderr.contains("g.yaml:4:7"),
        "{stderr}"
    );
    assert_eq!(statuses(&s), Value::Array(Vec::new()));
}

#[test]
fn secrets_reach_their_tasks_nodes_on_aws() {
    let s = Scratch::new("aws-secret-file");
    let file = s.write(
        "g.yaml",
        "name: sg\nexecution: parallel\n---\nname: a\nsecrets: {TOKEN: null}\n\
         run: printf 'token=%s\\n' \"$TOKEN\"\n",
    );
    let Some(mut r) = Run::start_with("aws-secret", &file, &["--secret", "TOKEN=a b$c'd"]) else {
        return;
    };
    let status = r.until("finished", finished);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    let log = r.logs("a-0");
    assert!(log.contains("token=a b$c'd"), "{log}");
    r.assert_nothing_left();
}

/// The stand-in's endpoint when it and the stand-in machines' tools are
/// here; `None` (after a loud message) otherwise.
pub(crate) fn ready() -> Option<String> {
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
                "!!! SKIPPED: `skyc run --target aws` on stand-in machines needs the EC2 \
                 stand-in (SKYC_MOTO_ENDPOINT), root, sshd and ip"
            );
            None
        }
    }
}

/// The test's client of the EC2 stand-in, in `region`.
pub(crate) fn stand_in_client(endpoint: &str, region: &str) -> Ec2 {
    let settings = Settings {
        profile: "default".into(),
        credentials: skyc_runtime::aws::ec2::sigv4::Credentials {
            access_key_id: "AKIDSKYCTEST".into(),
            secret_access_key: "skyc-test-secret".into(),
            session_token: None,
        },
        credentials_source: "the test".into(),
        region: None,
        endpoint: Some(endpoint.to_owned()),
    };
    Ec2::new(&settings, Some(region), Tuning::default()).expect("client")
}

/// An instance's user data, as the stand-in keeps it.
pub(crate) fn user_data(rt: &tokio::runtime::Runtime, ec2: &Ec2, id: &str) -> String {
    let mut q = query::action("DescribeInstanceAttribute");
    q.push(("InstanceId".into(), id.to_owned()));
    q.push(("Attribute".into(), "userData".into()));
    let body = rt.block_on(ec2.call(&q)).expect("user data");
    let start = body.find("<value>").expect("a value") + "<value>".len();
    let end = body[start..].find("</value>").expect("its end") + start;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(body[start..end].trim())
        .expect("base64");
    String::from_utf8(bytes).expect("UTF-8")
}

/// Where stand-in machines of a test are made, and whom they ask.
pub(crate) struct Machines<'a> {
    pub(crate) rt: &'a tokio::runtime::Runtime,
    pub(crate) ec2: &'a Ec2,
    /// Where the instances' user data is written for scripts/standin.
    pub(crate) scratch: &'a Path,
    /// scripts/standin's directory of machines.
    pub(crate) dir: &'a Path,
}

/// Machines follow `instances`, as EC2 runs them: one boots (its user
/// data run, SSH served with the public key `key` names) for each
/// running instance not up, and one goes for each up whose instance no
/// longer runs. `up`: instance id to address, of the machines up.
pub(crate) fn follow_machines(
    m: &Machines<'_>,
    up: &mut BTreeMap<String, String>,
    instances: Vec<skyc_runtime::aws::ec2::response::Instance>,
    key: impl Fn(&skyc_runtime::aws::ec2::response::Instance) -> PathBuf,
) {
    for i in instances {
        let running = i.state == Some(State::Running);
        if running && !up.contains_key(&i.id) {
            let ud = m.scratch.join(format!("{}.user-data", i.id));
            std::fs::write(&ud, user_data(m.rt, m.ec2, &i.id)).expect("user data");
            let ip = i.private_ip.clone().expect("an address");
            let ok = Command::new(STANDIN)
                .arg("up")
                .arg(m.dir)
                .arg(&i.id)
                .arg(&ip)
                .arg(&ud)
                .arg(key(&i))
                .status()
                .expect("scripts/standin")
                .success();
            assert!(ok, "scripts/standin up {}", i.id);
            up.insert(i.id.clone(), ip);
        } else if !running && up.remove(&i.id).is_some() {
            let _ = Command::new(STANDIN)
                .arg("down")
                .arg(m.dir)
                .arg(&i.id)
                .status();
        }
    }
}

/// A group run through `skyc run --target aws -d`, with a stand-in
/// machine for each of its running instances.
struct Run {
    s: Scratch,
    endpoint: String,
    gid: i64,
    /// The run id (the `skyc-run` tag), from the run's key directory.
    run: String,
    ec2: Ec2,
    rt: tokio::runtime::Runtime,
    /// Machine (instance id) to its address.
    up: BTreeMap<String, String>,
    machines: PathBuf,
    /// Machines share one bridge and host routes: one run at a time, here
    /// and in the runtime's own stand-in tests.
    _serial: std::fs::File,
}

impl Run {
    fn start(name: &str, file: &Path) -> Option<Run> {
        Self::start_with(name, file, &[])
    }

    fn start_with(name: &str, file: &Path, extra: &[&str]) -> Option<Run> {
        Self::start_at(name, file, extra, None, false)
    }

    /// A run whose skyc talks to EC2 through the endpoint `through` makes
    /// of the stand-in's (the test's own client still asks the stand-in).
    fn start_at(
        name: &str,
        file: &Path,
        extra: &[&str],
        through: Option<&dyn Fn(&str) -> String>,
        s3: bool,
    ) -> Option<Run> {
        Self::launch(name, file, extra, through, s3, "skyc-test")
    }

    /// A run with S3 whose credentials are profile `profile`'s
    /// (`skyc-keys`: an IAM user's keys).
    fn start_as(name: &str, file: &Path, profile: &str) -> Option<Run> {
        Self::launch(name, file, &[], None, true, profile)
    }

    fn launch(
        name: &str,
        file: &Path,
        extra: &[&str],
        through: Option<&dyn Fn(&str) -> String>,
        s3: bool,
        profile: &str,
    ) -> Option<Run> {
        let moto = ready()?;
        let endpoint = through.map_or_else(|| moto.clone(), |f| f(&moto));
        let serial = std::fs::File::create("/tmp/skyc-standin.lock").expect("lock file");
        rustix::fs::flock(&serial, rustix::fs::FlockOperation::LockExclusive).expect("flock");
        let s = Scratch::new(name);
        let machines = s.dir.join("m");
        // S3 as the nodes and the runtime reach it; stopped with the
        // machines.
        let relay = s3.then(|| relay(&machines, &moto));
        let file = file.to_string_lossy();
        let mut args = vec![
            "run",
            &file,
            "--target",
            "aws",
            "-d",
            "--ssh-user",
            "root",
            // Stand-in machines have only their private address.
            "--ssh-via",
            "private",
            "--grace",
            "2",
        ];
        args.extend_from_slice(extra);
        let mut cmd = aws_skyc(&s, &endpoint, &args);
        cmd.env("AWS_PROFILE", profile);
        if let Some(relay) = &relay {
            cmd.env("AWS_ENDPOINT_URL_S3", relay);
        }
        let out = cmd.output().expect("skyc run");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let gid: i64 = text(&out.stdout).trim().parse().expect("group id");
        // The run and its region (the spec's), as the group's plan has them.
        let plan: Value = serde_json::from_str(
            &skyc_runtime::store::Store::open(&s.state())
                .and_then(|store| store.plan(gid))
                .expect("the group's plan"),
        )
        .expect("plan JSON");
        let run = plan["run"].as_str().expect("a run").to_owned();
        let region = plan["region"].as_str().expect("a region").to_owned();
        let ec2 = stand_in_client(&moto, &region);
        Some(Run {
            s,
            endpoint,
            gid,
            run,
            ec2,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            up: BTreeMap::new(),
            machines,
            _serial: serial,
        })
    }

    fn key(&self) -> PathBuf {
        self.s
            .state()
            .join("aws")
            .join(&self.run)
            .join("id_ed25519.pub")
    }

    fn instances(&self) -> Vec<skyc_runtime::aws::ec2::response::Instance> {
        self.rt
            .block_on(ops::instances(&self.ec2, &self.run))
            .expect("DescribeInstances")
    }

    /// Machines follow the instances: one boots for each instance that
    /// runs, and goes when its instance does.
    fn follow(&mut self) {
        let (key, instances) = (self.key(), self.instances());
        follow_machines(
            &Machines {
                rt: &self.rt,
                ec2: &self.ec2,
                scratch: &self.s.dir,
                dir: &self.machines,
            },
            &mut self.up,
            instances,
            |_| key.clone(),
        );
    }

    fn status(&self) -> Value {
        self.s.try_status(self.gid)
    }

    /// Follows until `done` holds of the group's status (at most 120 s).
    fn until(&mut self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        loop {
            self.follow();
            let status = self.status();
            if done(&status) {
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "not {what} after 120 s: {status:#}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Follows until `node`'s log holds `text` (at most 120 s).
    fn until_logged(&mut self, node: &str, text: &str) {
        let start = Instant::now();
        while !self.logs(node).contains(text) {
            assert!(start.elapsed() < Duration::from_secs(120), "never started");
            self.follow();
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn logs(&self, node: &str) -> String {
        std::fs::read_to_string(
            self.s
                .state()
                .join("groups")
                .join(self.gid.to_string())
                .join("logs")
                .join(format!("{node}.log")),
        )
        .unwrap_or_default()
    }

    /// Every instance of the run is terminated, and its security group
    /// gone (waiting for the supervisor to settle the group, 60 s at most).
    fn assert_nothing_left(&mut self) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60)
            && !self
                .instances()
                .iter()
                .all(|i| i.state == Some(State::Terminated))
        {
            self.follow();
            std::thread::sleep(Duration::from_millis(300));
        }
        let instances = self.instances();
        assert!(
            instances.iter().all(|i| i.state == Some(State::Terminated)),
            "{instances:?}"
        );
        let network = self.rt.block_on(async {
            let mut p = query::action("DescribeSecurityGroups");
            query::filters(&mut p, &[("tag:skyc-run", &[self.run.as_str()])]);
            self.ec2.call(&p).await
        });
        let body = network.expect("DescribeSecurityGroups");
        assert!(!body.contains("<groupId>"), "{body}");
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = aws_skyc(&self.s, &self.endpoint, &["cancel", "--all"]).output();
        let _ = Command::new(STANDIN)
            .arg("stop")
            .arg(&self.machines)
            .status();
        // Whatever a failed test left on the stand-in.
        if let Ok(instances) = self.rt.block_on(ops::instances(&self.ec2, &self.run)) {
            let ids: Vec<String> = instances.into_iter().map(|i| i.id).collect();
            let _ = self.rt.block_on(ops::terminate(&self.ec2, &ids));
        }
    }
}

fn finished(s: &Value) -> bool {
    !s["finished_at_ms"].is_null()
}

#[test]
fn the_example_group_succeeds_on_aws_stand_in_machines() {
    let Some(mut r) = Run::start("aws-example", &root().join("examples/train-eval.yaml")) else {
        return;
    };
    // While it runs, `status` names each node's instance and machine.
    let running = r.until("running", |s| task(s, "trainer")["status"] == "RUNNING");
    let table = text(
        &r.s.skyc(&["status", &r.gid.to_string()])
            .output()
            .expect("status")
            .stdout,
    );
    assert!(
        table.contains("INSTANCE") && table.contains("MACHINE") && table.contains(" i-"),
        "{table}\n{running:#}"
    );
    let status = r.until("finished", finished);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(task(&status, "trainer")["status"], "SUCCEEDED");
    assert_eq!(task(&status, "evaluator")["status"], "CANCELLED");
    for rank in 0..2 {
        let log = r.logs(&format!("trainer-{rank}"));
        assert!(
            log.contains(&format!("trainer rank {rank}/2 in train-eval"))
                && log.contains("training done"),
            "{log}"
        );
    }
    // The evaluator found the trainer by its group hostname, at the
    // trainer's instance address, and read its checkpoints.
    let trainer0 = r
        .instances()
        .into_iter()
        .find(|i| {
            i.tags.get("skyc-task").map(String::as_str) == Some("trainer")
                && i.tags.get("skyc-rank").map(String::as_str) == Some("0")
        })
        .and_then(|i| i.private_ip)
        .expect("trainer-0's address");
    let log = r.logs("evaluator-0");
    assert!(
        log.contains(&format!("evaluator: trainer-0.train-eval is at {trainer0}"))
            && log.contains("latest checkpoint:"),
        "{log}"
    );
    // `skyc logs` reads them.
    let logs = text(
        &r.s.skyc(&["logs", &r.gid.to_string()])
            .output()
            .expect("logs")
            .stdout,
    );
    assert!(logs.contains("training done"), "{logs}");
    r.assert_nothing_left();
}

#[test]
fn a_failed_primary_stops_the_auxiliary_at_once_on_aws() {
    let s = Scratch::new("aws-primary-file");
    let file = s.write(
        "fail.yaml",
        "name: pf\nexecution: parallel\nprimary_tasks: [main]\ntermination_delay: 600s\n\
         ---\nname: main\nrun: |\n  sleep 5\n  echo failing\n  exit 7\n---\nname: helper\n\
         run: sleep 600\n",
    );
    let Some(mut r) = Run::start("aws-primary", &file) else {
        return;
    };
    let status = r.until("finished", finished);
    // The 600 s delay is not waited: a failed primary stops the others.
    assert_eq!(status["status"], "FAILED", "{status:#}");
    assert_eq!(task(&status, "main")["status"], "FAILED");
    assert_eq!(task(&status, "main")["nodes"][0]["exit_code"], 7);
    assert_eq!(task(&status, "helper")["status"], "CANCELLED");
    assert!(r.logs("main-0").contains("failing"));
    r.assert_nothing_left();
}

#[test]
fn ec2_out_of_capacity_holds_the_task_saying_why_until_a_launch_succeeds() {
    let s = Scratch::new("aws-capacity-file");
    let file = s.write("one.yaml", "name: cap\nrun: echo launched\n");
    let refusal = std::cell::OnceCell::new();
    let through = |moto: &str| {
        refusal
            .get_or_init(|| Ec2Refusal::start(moto))
            .endpoint
            .clone()
    };
    let Some(mut r) = Run::start_at("aws-capacity", &file, &[], Some(&through), false) else {
        return;
    };
    let refusal = refusal.get().expect("started");
    let status = r.until("waiting for EC2", |s| {
        task(s, "cap")["waiting"]["why"]
            .as_str()
            .is_some_and(|w| w.contains("InsufficientInstanceCapacity"))
    });
    assert_eq!(task(&status, "cap")["status"], "PENDING", "{status:#}");
    let why = task(&status, "cap")["waiting"]["why"].as_str().unwrap();
    assert!(
        why.starts_with("cap-0 waits for EC2: ") && why.ends_with("; asked again"),
        "{why}"
    );
    assert!(task(&status, "cap")["waiting"]["since_ms"].is_i64());
    assert!(r.instances().is_empty(), "nothing launched while refused");
    // EC2 has room again: the launch asked again succeeds, and the task
    // runs to its end, waiting no more.
    assert!(refusal.refused() >= 1);
    refusal.stop_refusing();
    let status = r.until("finished", finished);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert!(task(&status, "cap")["waiting"].is_null(), "{status:#}");
    assert!(r.logs("cap-0").contains("launched"));
    // `skyc logs` tells when it waited, and why, before the node's output.
    let out = aws_skyc(
        &r.s,
        &refusal.endpoint,
        &["logs", &r.gid.to_string(), "--no-follow"],
    )
    .output()
    .expect("skyc logs");
    let logs = text(&out.stdout);
    let said = logs
        .lines()
        .position(|l| l.starts_with("(skyc) cap: waiting: cap-0 waits for EC2: "))
        .unwrap_or_else(|| panic!("{logs}"));
    let ran = logs
        .lines()
        .position(|l| l == "(cap-0) launched")
        .unwrap_or_else(|| panic!("{logs}"));
    assert!(said < ran, "{logs}");
    r.assert_nothing_left();
}

#[test]
fn cancel_terminates_every_instance_on_aws() {
    let s = Scratch::new("aws-cancel-file");
    let file = s.write(
        "long.yaml",
        "name: lg\nexecution: parallel\nprimary_tasks: [trainer]\n---\nname: trainer\n\
         num_nodes: 2\nrun: |\n  echo started\n  sleep 600\n---\nname: helper\nrun: sleep 600\n",
    );
    let Some(mut r) = Run::start("aws-cancel", &file) else {
        return;
    };
    r.until_logged("trainer-0", "started");
    let out =
        r.s.skyc(&["cancel", &r.gid.to_string()])
            .output()
            .expect("cancel");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status = r.until("finished", finished);
    assert_eq!(status["status"], "CANCELLED", "{status:#}");
    r.assert_nothing_left();
}

/// A pipeline of three steps; the middle one on two nodes.
const PIPELINE: &str = "name: pl\n\
---\nname: prep\nrun: |\n  echo \"prep group=${SKYPILOT_JOBGROUP_NAME-none}\"\n\
---\nname: train\nnum_nodes: 2\nrun: |\n  echo \"rank $SKYPILOT_NODE_RANK ips $(echo $SKYPILOT_NODE_IPS)\"\n  sleep 3\n  echo trained\n\
---\nname: report\nrun: |\n  echo reported\n";

/// The instances of the run tagged with `step`, every state.
fn step_instances(r: &Run, step: &str) -> Vec<skyc_runtime::aws::ec2::response::Instance> {
    r.instances()
        .into_iter()
        .filter(|i| i.tags.get("skyc-task").map(String::as_str) == Some(step))
        .collect()
}

/// Follows a pipeline to its end, checking on every pass that no step
/// has instances before it starts (PENDING, or CANCELLED for good) and
/// that an ended step's instances are not left running once a later step
/// has instances. Returns the group's last status.
fn follow_pipeline(r: &mut Run, steps: &[&str]) -> Value {
    let start = Instant::now();
    loop {
        r.follow();
        let status = r.status();
        let mut later_launched = false;
        for step in steps.iter().rev() {
            let t = task(&status, step);
            let instances = step_instances(r, step);
            // A step not started has nothing (a CANCELLED one may be the
            // step that was running, its instances being terminated).
            if t["status"] == "PENDING" {
                assert!(instances.is_empty(), "{step} launched early: {status:#}");
            }
            if later_launched && t["status"] == "SUCCEEDED" {
                assert!(
                    instances.iter().all(|i| i.state != Some(State::Running)),
                    "{step} still runs while a later step has instances"
                );
            }
            later_launched |= !instances.is_empty();
        }
        if finished(&status) {
            return status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "not finished after 180 s: {status:#}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn a_pipeline_runs_step_by_step_on_aws_stand_in_machines() {
    let s = Scratch::new("aws-pipeline-file");
    let file = s.write("pipeline.yaml", PIPELINE);
    let Some(mut r) = Run::start("aws-pipeline", &file) else {
        return;
    };
    let status = follow_pipeline(&mut r, &["prep", "train", "report"]);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    for step in ["prep", "train", "report"] {
        assert_eq!(task(&status, step)["status"], "SUCCEEDED", "{step}");
    }
    // Each step on instances of its own: one per node, all distinct.
    let mut ids: Vec<String> = r.instances().into_iter().map(|i| i.id).collect();
    assert_eq!(ids.len(), 4, "{ids:?}");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4);
    assert!(r.logs("prep-0").contains("prep group=none"));
    let ips: Vec<String> = {
        let mut train = step_instances(&r, "train");
        train.sort_by_key(|i| i.tags["skyc-rank"].clone());
        train.into_iter().filter_map(|i| i.private_ip).collect()
    };
    for rank in 0..2 {
        let log = r.logs(&format!("train-{rank}"));
        assert!(
            log.contains(&format!("rank {rank} ips {} {}", ips[0], ips[1]))
                && log.contains("trained"),
            "{log}"
        );
    }
    assert!(r.logs("report-0").contains("reported"));
    r.assert_nothing_left();
}

#[test]
fn a_failed_pipeline_step_cancels_the_later_ones_on_aws() {
    let s = Scratch::new("aws-pipefail-file");
    let file = s.write(
        "pipeline.yaml",
        &PIPELINE.replace("  sleep 3\n", "  exit 4\n"),
    );
    let Some(mut r) = Run::start("aws-pipefail", &file) else {
        return;
    };
    let status = follow_pipeline(&mut r, &["prep", "train", "report"]);
    assert_eq!(status["status"], "FAILED", "{status:#}");
    assert_eq!(task(&status, "prep")["status"], "SUCCEEDED");
    assert_eq!(task(&status, "train")["status"], "FAILED");
    assert_eq!(task(&status, "report")["status"], "CANCELLED");
    assert!(step_instances(&r, "report").is_empty(), "never launched");
    assert!(!r.logs("train-0").contains("trained"));
    r.assert_nothing_left();
}

#[test]
fn cancel_mid_pipeline_terminates_the_running_step_on_aws() {
    let s = Scratch::new("aws-pipecancel-file");
    let file = s.write(
        "pipeline.yaml",
        &PIPELINE.replace("  sleep 3\n", "  sleep 600\n"),
    );
    let Some(mut r) = Run::start("aws-pipecancel", &file) else {
        return;
    };
    r.until_logged("train-1", "rank 1");
    let out =
        r.s.skyc(&["cancel", &r.gid.to_string()])
            .output()
            .expect("cancel");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let status = follow_pipeline(&mut r, &["prep", "train", "report"]);
    assert_eq!(status["status"], "CANCELLED", "{status:#}");
    assert_eq!(task(&status, "prep")["status"], "SUCCEEDED");
    assert_eq!(task(&status, "train")["status"], "CANCELLED");
    assert_eq!(task(&status, "report")["status"], "CANCELLED");
    assert!(step_instances(&r, "report").is_empty(), "never launched");
    r.assert_nothing_left();
}

/// Every file under `dir`, read whole.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => out.extend(files_under(&path)),
            Ok(t) if t.is_file() => {
                if let Ok(bytes) = std::fs::read(&path) {
                    out.push((path, bytes));
                }
            }
            _ => {}
        }
    }
    out
}

#[test]
fn credentials_are_renewed_while_a_run_lasts_and_never_stored_on_aws() {
    let s = Scratch::new("aws-cred-file");
    let file = s.write(
        "long.yaml",
        &format!(
            "name: cr\nexecution: parallel\n---\nname: main\nrun: |\n  echo started\n  \
             until [ -e {release} ]; do sleep 0.1; done\n  echo done\n",
            release = s.dir.join("release").display()
        ),
    );
    let Some(mut r) = Run::start("aws-cred", &file) else {
        return;
    };
    let dir = r.s.dir.clone();
    let count = move || -> u32 {
        std::fs::read_to_string(dir.join("cred-count"))
            .ok()
            .and_then(|c| c.trim().parse().ok())
            .unwrap_or(0)
    };
    r.until_logged("main-0", "started");
    // Each lasts less than the runtime's margin: the supervisor asks the
    // profile's credential_process again while the run goes on.
    let before = count();
    r.until("renewed twice", |_| count() >= before + 2);
    // The process fails: once the credentials held expire, the run is in
    // an outage that names the source, its error and what to renew.
    std::fs::write(r.s.dir.join("cred-broken"), "").expect("break");
    let status = r.until("unreachable", |s| {
        s["unreachable"]
            .as_str()
            .is_some_and(|u| u.contains("session revoked"))
    });
    let outage = status["unreachable"].as_str().unwrap_or_default();
    assert!(
        outage.starts_with(
            "cannot get the run's AWS credentials from profile `skyc-test`'s credential_process"
        ) && outage.contains(
            "To renew: make profile `skyc-test`'s credential_process give credentials again"
        ),
        "{outage}"
    );
    // Renewed: the run goes on to its end.
    std::fs::remove_file(r.s.dir.join("cred-broken")).expect("mend");
    r.until("no longer unreachable", |s| s["unreachable"].is_null());
    std::fs::write(s.dir.join("release"), "").expect("release");
    let status = r.until("finished", finished);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert!(r.logs("main-0").contains("done"));
    r.assert_nothing_left();
    // No secret the source gave is anywhere in the state directory (its
    // database, logs, the run's files).
    let secrets = std::fs::read_to_string(r.s.dir.join("cred-secrets")).expect("secrets");
    let secrets: Vec<&str> = secrets.lines().collect();
    assert!(secrets.len() >= 6, "{secrets:?}");
    let stored = files_under(&r.s.state());
    assert!(
        stored.iter().any(|(p, _)| p.ends_with("state.db")),
        "{stored:?}"
    );
    for (path, bytes) in &stored {
        for secret in &secrets {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds {secret}",
                path.display()
            );
        }
    }
}

#[test]
fn a_supervisor_killed_mid_run_is_replaced_and_launches_nothing_twice() {
    let s = Scratch::new("aws-kill-file");
    let file = s.write(
        "long.yaml",
        &format!(
            "name: lg\nexecution: parallel\nprimary_tasks: [trainer]\n---\nname: trainer\n\
             num_nodes: 2\nrun: |\n  echo started\n  until [ -e {release} ]; do sleep 0.1; done\n  \
             echo done\n---\nname: helper\nrun: sleep 600\n",
            release = s.dir.join("release").display()
        ),
    );
    let Some(mut r) = Run::start("aws-kill", &file) else {
        return;
    };
    r.until_logged("trainer-0", "started");
    // `status` starts a new supervisor for the live group (Run::until
    // asks it every pass), from an environment without AWS settings; the
    // trainer ends once it has.
    r.replace_supervisor();
    std::fs::write(s.dir.join("release"), "").expect("release");
    let status = r.until("finished", finished);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(task(&status, "trainer")["restarts"], 0);
    assert_eq!(r.instances().len(), 3, "one instance per node");
    // The new supervisor went on where the log copy stopped.
    for rank in 0..2 {
        let log = r.logs(&format!("trainer-{rank}"));
        assert_eq!(
            (log.matches("started").count(), log.matches("done").count()),
            (1, 1),
            "trainer-{rank}: {log}"
        );
    }
    r.assert_nothing_left();
}

#[test]
fn aws_flags_are_refused_on_other_targets() {
    let s = Scratch::new("aws-flags");
    let example = root().join("examples/train-eval.yaml");
    let out = s
        .skyc(&["run", &example.to_string_lossy(), "--catalog", "x"])
        .output()
        .expect("skyc run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--catalog and --ssh-from are for the aws target"),
        "{}",
        text(&out.stderr)
    );
    // The login user reaches `ssh`: only a login name is taken.
    for user in ["-oProxyCommand=touch /tmp/x", "Ubuntu", "a b", ""] {
        let out = s
            .skyc(&[
                "run",
                "--target",
                "aws",
                &format!("--ssh-user={user}"),
                &example.to_string_lossy(),
            ])
            .output()
            .expect("skyc run");
        assert_eq!(out.status.code(), Some(2), "{user:?}");
        assert!(
            text(&out.stderr).contains("not a login name"),
            "{user:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn a_lost_instance_is_replaced_and_the_other_task_untouched_on_aws() {
    let s = Scratch::new("aws-lost-file");
    let file = s.write(
        "long.yaml",
        // Each rank's first run outlasts the test (it ends only if it is
        // stopped), the next is short: the stand-in machines see this
        // host's files, so a first run leaves a mark.
        &format!(
            "name: lg\nexecution: parallel\nprimary_tasks: [trainer]\n---\nname: trainer\n\
             num_nodes: 2\nrun: |\n  echo \"rank ${{SKYPILOT_NODE_RANK}}\"\n  \
             if mkdir {marks}/rank-$SKYPILOT_NODE_RANK; then sleep 600; fi\n  echo done\n\
             ---\nname: helper\nrun: sleep 600\n",
            marks = s.dir.display()
        ),
    );
    let Some(mut r) = Run::start("aws-lost", &file) else {
        return;
    };
    r.until_logged("trainer-1", "rank 1");
    let of = |r: &Run, t: &str| -> Vec<String> {
        r.instances()
            .into_iter()
            .filter(|i| i.tags.get("skyc-task").map(String::as_str) == Some(t))
            .map(|i| i.id)
            .collect()
    };
    let helper = of(&r, "helper");
    let victim = r
        .instances()
        .into_iter()
        .find(|i| {
            i.tags.get("skyc-task").map(String::as_str) == Some("trainer")
                && i.tags.get("skyc-rank").map(String::as_str) == Some("1")
        })
        .expect("trainer-1")
        .id;
    // Out of band, as EC2 reclaiming a spot instance.
    r.rt.block_on(ops::terminate(&r.ec2, std::slice::from_ref(&victim)))
        .expect("TerminateInstances");
    let status = r.until("finished", finished);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(task(&status, "trainer")["restarts"], 1, "{status:#}");
    assert_eq!(task(&status, "trainer")["restarts_on_errors"], 0);
    assert_eq!(task(&status, "helper")["restarts"], 0);
    assert_eq!(of(&r, "helper"), helper, "the helper ran on one instance");
    assert_eq!(of(&r, "trainer").len(), 4, "two attempts of two nodes");
    assert_eq!(r.logs("trainer-1").matches("rank 1").count(), 2);
    r.assert_nothing_left();
}

/// The README's example group on AWS itself, through `skyc run --target
/// aws`, with the credentials and region of this environment; only with
/// `SKYC_AWS_E2E=1` (it launches instances and costs money), skipped
/// loudly otherwise. Nothing of the run may be left afterwards.
#[test]
fn e2e_the_example_group_on_aws_itself() {
    if std::env::var("SKYC_AWS_E2E").as_deref() != Ok("1") {
        eprintln!(
            "!!! SKIPPED: `skyc run --target aws` against AWS itself (set SKYC_AWS_E2E=1 and AWS \
             credentials; it launches instances)"
        );
        return;
    }
    let s = Scratch::new("aws-e2e-example");
    let example = root().join("examples/train-eval.yaml");
    let mut args = vec!["run", "--target", "aws"];
    let from = std::env::var("SKYC_AWS_E2E_SSH_FROM").unwrap_or_default();
    if !from.is_empty() {
        args.extend(["--ssh-from", &from]);
    }
    let example = example.to_string_lossy();
    args.insert(1, &example);
    let out = s.skyc(&args).output().expect("skyc run");
    let logs = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}\n{logs}", text(&out.stderr));
    assert!(logs.contains("latest checkpoint:"), "{logs}");
    let status = s.status(1);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(task(&status, "evaluator")["status"], "CANCELLED");
    // Every instance of the run terminated.
    let plan: Value = serde_json::from_str(
        &skyc_runtime::store::Store::open(&s.state())
            .and_then(|store| store.plan(1))
            .expect("the group's plan"),
    )
    .expect("plan JSON");
    let run = plan["run"].as_str().expect("a run").to_owned();
    let region = plan["region"].as_str().expect("a region").to_owned();
    let settings = Settings::from_env(&region).expect("AWS settings");
    let ec2 = Ec2::new(&settings, Some(&region), Tuning::default()).expect("client");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let instances = rt
        .block_on(ops::instances(&ec2, &run))
        .expect("DescribeInstances");
    assert!(
        instances
            .iter()
            .all(|i| matches!(i.state, Some(State::Terminated | State::ShuttingDown))),
        "{instances:?}"
    );
}

/// A pool applied through `skyc pool apply --target aws`, with a stand-in
/// machine for each running instance of its workers (found by the pool's
/// tag, `skyc-pool`).
struct PoolRun {
    s: Scratch,
    endpoint: String,
    name: String,
    /// The pool's run: each worker's is `{run}-w{group}`.
    run: String,
    ec2: Ec2,
    rt: tokio::runtime::Runtime,
    up: BTreeMap<String, String>,
    machines: PathBuf,
    _serial: std::fs::File,
}

impl PoolRun {
    fn apply(test: &str, file: &Path) -> Option<PoolRun> {
        let endpoint = ready()?;
        let serial = std::fs::File::create("/tmp/skyc-standin.lock").expect("lock file");
        rustix::fs::flock(&serial, rustix::fs::FlockOperation::LockExclusive).expect("flock");
        let s = Scratch::new(test);
        let machines = s.dir.join("m");
        // S3 for the pool's files, stopped with the machines.
        let s3 = relay(&machines, &endpoint);
        // Unique on the stand-in, which outlives test runs.
        let name = format!(
            "awspool{}x{}",
            std::process::id(),
            s.dir.display().to_string().len()
        );
        let file = file.to_string_lossy();
        let out = aws_skyc(
            &s,
            &endpoint,
            &[
                "pool",
                "apply",
                "-p",
                &name,
                &file,
                "--target",
                "aws",
                "--ssh-user",
                "root",
                "--ssh-via",
                "private",
            ],
        )
        .env("AWS_ENDPOINT_URL_S3", &s3)
        .output()
        .expect("skyc pool apply");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let store = skyc_runtime::store::Store::open(&s.state()).expect("store");
        let pool = store.live_pool(&name).expect("pools").expect("the pool");
        let plan: Value = serde_json::from_str(&store.plan(pool.id).expect("plan")).expect("JSON");
        let run = plan["worker"]["run"].as_str().expect("a run").to_owned();
        let region = plan["worker"]["region"]
            .as_str()
            .expect("a region")
            .to_owned();
        let ec2 = stand_in_client(&endpoint, &region);
        Some(PoolRun {
            s,
            endpoint,
            name,
            run,
            ec2,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            up: BTreeMap::new(),
            machines,
            _serial: serial,
        })
    }

    fn skyc(&self, args: &[&str]) -> std::process::Output {
        let out = aws_skyc(&self.s, &self.endpoint, args)
            .output()
            .expect("skyc");
        assert!(out.status.success(), "skyc {args:?}: {}", text(&out.stderr));
        out
    }

    fn instances(&self) -> Vec<skyc_runtime::aws::ec2::response::Instance> {
        self.rt
            .block_on(ops::instances_tagged(
                &self.ec2,
                skyc_runtime::aws::POOL_TAG,
                &self.name,
            ))
            .expect("DescribeInstances")
    }

    /// Machines follow the workers' instances, each authorising its
    /// worker's key (`groups/{worker}/key/`).
    fn follow(&mut self) {
        let (state, instances) = (self.s.state(), self.instances());
        follow_machines(
            &Machines {
                rt: &self.rt,
                ec2: &self.ec2,
                scratch: &self.s.dir,
                dir: &self.machines,
            },
            &mut self.up,
            instances,
            |i| {
                let worker = i.tags["skyc-run"]
                    .rsplit_once("-w")
                    .map(|(_, gid)| gid.to_owned())
                    .expect("a worker's run");
                state
                    .join("groups")
                    .join(worker)
                    .join("key")
                    .join("id_ed25519.pub")
            },
        );
    }

    fn pool(&self) -> Value {
        let out = self.skyc(&["pool", "status", "--all", "--json"]);
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .find(|p| p["name"] == self.name.as_str())
            .unwrap_or(Value::Null)
    }

    /// Follows until `done` holds of `value()` (at most 180 s).
    fn until<T: std::fmt::Debug>(
        &mut self,
        what: &str,
        value: impl Fn(&Self) -> T,
        done: impl Fn(&T) -> bool,
    ) -> T {
        let start = Instant::now();
        loop {
            self.follow();
            let v = value(self);
            if done(&v) {
                return v;
            }
            assert!(
                start.elapsed() < Duration::from_secs(180),
                "not {what} after 180 s: {v:#?}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn ready_workers(pool: &Value) -> Vec<Value> {
        pool["workers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|w| w["status"] == "READY")
            .collect()
    }

    fn submit(&self, file: &Path, n: u32) -> Vec<i64> {
        let n = n.to_string();
        let file = file.to_string_lossy();
        let out = self.skyc(&["run", "--pool", &self.name, "--num-jobs", &n, "-d", &file]);
        text(&out.stdout)
            .lines()
            .map(|l| l.trim().parse().expect("job id"))
            .collect()
    }

    fn job_log(&self, job: i64) -> String {
        std::fs::read_to_string(
            self.s
                .state()
                .join("groups")
                .join(job.to_string())
                .join("logs")
                .join("job-0.log"),
        )
        .unwrap_or_default()
    }

    fn worker_log(&self, group: i64) -> String {
        std::fs::read_to_string(
            self.s
                .state()
                .join("groups")
                .join(group.to_string())
                .join("logs")
                .join("work-0.log"),
        )
        .unwrap_or_default()
    }
}

impl Drop for PoolRun {
    fn drop(&mut self) {
        let _ = aws_skyc(&self.s, &self.endpoint, &["pool", "down", "--all"]).output();
        let _ = aws_skyc(&self.s, &self.endpoint, &["cancel", "--all"]).output();
        let _ = Command::new(STANDIN)
            .arg("stop")
            .arg(&self.machines)
            .status();
        if let Ok(instances) = self.rt.block_on(ops::instances_tagged(
            &self.ec2,
            skyc_runtime::aws::POOL_TAG,
            &self.name,
        )) {
            let ids: Vec<String> = instances.into_iter().map(|i| i.id).collect();
            let _ = self.rt.block_on(ops::terminate(&self.ec2, &ids));
        }
    }
}

#[test]
fn a_pool_runs_ranked_jobs_on_aws_workers_and_replaces_a_lost_one() {
    let dir = Scratch::new("aws-pool-files");
    // The pool's workdir reaches every worker before its setup, and its
    // jobs start in it.
    std::fs::create_dir_all(dir.dir.join("code")).expect("workdir");
    dir.write("code/tool.txt", "from-the-workdir\n");
    let pool_file = dir.write(
        "pool.yaml",
        &format!(
            "name: work\n\
             resources:\n  cpus: 2\n  infra: aws\n\
             workdir: {}/code\n\
             envs:\n  POOL_ENV: from-the-pool\n\
             pool:\n  workers: 2\n\
             setup: |\n  echo setup ran on $(hostname)\n  echo prepared $(cat tool.txt) > prepared.txt\n",
            dir.dir.display()
        ),
    );
    let Some(mut p) = PoolRun::apply("aws-pool", &pool_file) else {
        return;
    };
    let pool = p.until("2 ready workers", PoolRun::pool, |pool| {
        PoolRun::ready_workers(pool).len() == 2
    });
    assert_eq!(pool["status"], "READY", "{pool:#}");
    // Jobs record what they do on the machine itself (the stand-ins share
    // the host's filesystem outside /var/lib), not only in their logs.
    let marks = dir.dir.join("marks");
    std::fs::create_dir_all(&marks).expect("marks");
    let marks = marks.display().to_string();
    let job_file = dir.write(
        "job.yaml",
        &format!(
            "name: job\n\
             envs:\n  JOB_ENV: mine\n  MARKS: {marks}\n\
             run: |\n  echo $SKYPILOT_JOB_RANK >> \"$MARKS/ran\"\n  echo rank $SKYPILOT_JOB_RANK of $SKYPILOT_NUM_JOBS $POOL_ENV $JOB_ENV $(cat prepared.txt)\n  echo started at $(date +%s%3N)\n  sleep 3\n"
        ),
    );
    let lines = |file: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_to_string(Path::new(&marks).join(file))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        v.sort();
        v
    };
    let submitted = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    let ids = p.submit(&job_file, 4);
    assert_eq!(ids.len(), 4);
    // The supervisor SIGKILLed while the jobs are handed over and run:
    // the next command starts a new one, and no job runs twice.
    let mut kills = 0;
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(1500));
        p.follow();
        let pid = std::fs::read_to_string(p.s.state().join("supervisor.pid"))
            .ok()
            .and_then(|pid| pid.trim().parse::<i32>().ok());
        if let Some(pid) = pid
            && Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .is_ok_and(|s| s.success())
        {
            kills += 1;
        }
        p.skyc(&["status"]);
    }
    assert!(kills >= 2, "the supervisor was killed {kills} times");
    for (rank, &id) in ids.iter().enumerate() {
        let status = p.until(
            "the job finished",
            |p| p.s.try_status(id),
            |s| !s["finished_at_ms"].is_null(),
        );
        assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
        assert_eq!(status["rank"], rank, "{status:#}");
        let log = p.job_log(id);
        assert!(
            log.contains(&format!(
                "rank {rank} of 4 from-the-pool mine prepared from-the-workdir"
            )),
            "job {id}: {log}"
        );
    }
    // Each rank ran once, as the machines saw it.
    assert_eq!(lines("ran"), ["0", "1", "2", "3"], "each job runs once");
    // How soon a warm worker started the first job (a figure for
    // docs/pools.md, not a limit: the machine is shared).
    let first = ids
        .iter()
        .filter_map(|&id| {
            let log = p.job_log(id);
            let at = log.split("started at ").nth(1)?.split_whitespace().next()?;
            at.parse::<u128>().ok()
        })
        .min()
        .expect("a start time");
    eprintln!(
        "submission to the first job's start on a warm worker: {} ms",
        first.saturating_sub(submitted)
    );
    // Each worker ran its setup once, and only its setup.
    let workers = PoolRun::ready_workers(&p.pool());
    assert_eq!(workers.len(), 2);
    for w in &workers {
        let log = p.worker_log(w["group"].as_i64().expect("a group"));
        assert_eq!(log.matches("setup ran on").count(), 1, "{log}");
    }

    // A long job marks its start and its end on the machine, by batch
    // size and rank; it ends once its batch is released (a file).
    let long = dir.write(
        "long.yaml",
        &format!(
            "name: job\nenvs:\n  MARKS: {marks}\nrun: |\n  at=\"$MARKS/$SKYPILOT_NUM_JOBS-$SKYPILOT_JOB_RANK\"\n  echo start >> \"$at.start\"\n  echo attempt start\n  until [ -e \"$MARKS/release-$SKYPILOT_NUM_JOBS\" ]; do sleep 0.1; done\n  echo done >> \"$at.done\"\n  echo attempt done\n"
        ),
    );
    let release = |batch: usize| {
        std::fs::write(Path::new(&marks).join(format!("release-{batch}")), "").expect("release");
    };
    // Three long jobs on two workers (each takes a whole one): one waits.
    // Cancelled, the waiting one ends at once and never runs; a running
    // one is stopped on its worker, which goes on.
    let three = p.submit(&long, 3);
    let started = |p: &PoolRun| {
        three
            .iter()
            .filter(|&&id| p.job_log(id).contains("attempt start"))
            .count()
    };
    p.until("two long jobs running", started, |n| *n == 2);
    let waiting = *three
        .iter()
        .find(|&&id| !p.job_log(id).contains("attempt start"))
        .expect("a waiting job");
    let running: Vec<i64> = three.iter().copied().filter(|&id| id != waiting).collect();
    p.skyc(&["cancel", &waiting.to_string()]);
    let status = p.until(
        "the waiting job cancelled",
        |p| p.s.try_status(waiting),
        |s| !s["finished_at_ms"].is_null(),
    );
    assert_eq!(status["status"], "CANCELLED", "{status:#}");
    for &id in &running {
        p.skyc(&["cancel", &id.to_string()]);
    }
    for &id in &running {
        let status = p.until(
            "a running job cancelled",
            |p| p.s.try_status(id),
            |s| !s["finished_at_ms"].is_null(),
        );
        assert_eq!(status["status"], "CANCELLED", "{status:#}");
    }
    // Both workers free (no job on either, as the pool engine has it):
    // a pool that placed the cancelled waiting job would have by then.
    p.until(
        "both workers free",
        |p| p.pool(),
        |pool| {
            pool["workers"].as_array().is_some_and(|ws| {
                ws.len() == 2
                    && ws.iter().all(|w| {
                        w["status"] == "READY" && w["jobs"].as_array().is_some_and(Vec::is_empty)
                    })
            })
        },
    );
    // Released, a job still running would finish within a tenth of a
    // second: a cancelled job never finished, and the waiting one never
    // started, as the machines saw it, over a few passes.
    release(3);
    std::thread::sleep(Duration::from_secs(5));
    p.follow();
    let rank_of = |id: i64| three.iter().position(|&j| j == id).expect("one of three");
    for &id in &running {
        let at = format!("3-{}", rank_of(id));
        assert_eq!(
            lines(&format!("{at}.start")),
            ["start"],
            "job {id} started once"
        );
        assert!(
            lines(&format!("{at}.done")).is_empty(),
            "job {id} finished though cancelled"
        );
        assert!(!p.job_log(id).contains("attempt done"));
    }
    let at = format!("3-{}", rank_of(waiting));
    assert!(
        lines(&format!("{at}.start")).is_empty(),
        "the waiting job ran"
    );
    assert!(!p.job_log(waiting).contains("attempt start"));

    // A worker's instance terminated out of band: its job runs again on
    // the other worker, which is untouched, and the lost worker is made
    // again.
    let id = p.submit(&long, 1)[0];
    p.until(
        "the long job started",
        |p| p.job_log(id),
        |l| l.contains("attempt start"),
    );
    let pool = p.pool();
    let on = |w: &Value| {
        w["jobs"]
            .as_array()
            .is_some_and(|j| j.iter().any(|j| j.as_i64() == Some(id)))
    };
    let workers = PoolRun::ready_workers(&pool);
    let lost = workers.iter().find(|w| on(w)).expect("its worker").clone();
    let kept = workers.iter().find(|w| !on(w)).expect("the other").clone();
    let lost_run = format!("{}-w{}", p.run, lost["group"]);
    let ids: Vec<String> =
        p.rt.block_on(ops::instances(&p.ec2, &lost_run))
            .expect("its instances")
            .into_iter()
            .map(|i| i.id)
            .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    p.rt.block_on(ops::terminate(&p.ec2, &ids))
        .expect("terminate");
    p.until(
        "the long job started again",
        |_| lines("1-0.start").len(),
        |n| *n == 2,
    );
    release(1);
    let status = p.until(
        "the long job finished",
        |p| p.s.try_status(id),
        |s| !s["finished_at_ms"].is_null(),
    );
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(status["tasks"][0]["restarts_on_errors"], 0, "{status:#}");
    assert_eq!(
        lines("1-0.start"),
        ["start", "start"],
        "lost once, run again"
    );
    assert_eq!(lines("1-0.done"), ["done"], "finished once");
    // The lost worker is launched again on a new instance, set up anew.
    let lost_group = lost["group"].as_i64().expect("a group");
    p.until(
        "the lost worker set up again",
        |p| p.worker_log(lost_group),
        |log| log.matches("setup ran on").count() == 2,
    );
    let pool = p.until("2 ready workers again", PoolRun::pool, |pool| {
        PoolRun::ready_workers(pool).len() == 2
    });
    let now = PoolRun::ready_workers(&pool);
    assert!(now.iter().any(|w| w["group"] == kept["group"]), "{pool:#}");
    let instances =
        p.rt.block_on(ops::instances(&p.ec2, &lost_run))
            .expect("its instances");
    assert_eq!(instances.len(), 2, "{instances:?}");
    assert_eq!(
        p.worker_log(kept["group"].as_i64().expect("a group"))
            .matches("setup ran on")
            .count(),
        1
    );

    // Down terminates every worker.
    p.skyc(&["pool", "down", &p.name.clone()]);
    p.until("every worker terminated", PoolRun::instances, |all| {
        all.iter().all(|i| i.state == Some(State::Terminated))
    });
    // Once the pool is down, no worker's SSH key is left behind.
    p.until("the pool down", PoolRun::pool, |pool| {
        !pool["finished_at_ms"].is_null()
    });
    let keys: Vec<PathBuf> = std::fs::read_dir(p.s.state().join("groups"))
        .expect("groups")
        .flatten()
        .map(|e| e.path().join("key"))
        .filter(|k| k.exists())
        .collect();
    assert!(keys.is_empty(), "{keys:?}");
    assert!(!p.s.state().join("aws").join(&p.run).exists());
}

/// The setup timestamps a pool's workers left on the machine, in order.
fn setup_times(marks: &Path) -> Vec<f64> {
    let mut v: Vec<f64> = std::fs::read_to_string(marks.join("setups"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

#[test]
fn a_pool_whose_setup_keeps_failing_waits_longer_between_workers_then_fails_on_aws() {
    let dir = Scratch::new("aws-pool-failing-files");
    let marks = dir.dir.join("marks");
    std::fs::create_dir_all(&marks).expect("marks");
    let pool_file = dir.write(
        "pool.yaml",
        &format!(
            "name: work\n\
             resources:\n  cpus: 2\n  infra: aws\n\
             pool:\n  workers: 1\n\
             setup: |\n  date +%s.%N >> {}/setups\n  exit 3\n",
            marks.display()
        ),
    );
    let Some(mut p) = PoolRun::apply("aws-pool-failing", &pool_file) else {
        return;
    };
    let pool = p.until("the pool FAILED", PoolRun::pool, |pool| {
        pool["status"] == "FAILED"
    });
    let error = pool["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("3 workers in a row failed before they were ready (the last one's setup failed; its log: `skyc logs "),
        "{pool:#}"
    );
    // No fourth worker comes (the next pause would be 4 s); each failed
    // worker's instance is gone.
    std::thread::sleep(Duration::from_secs(6));
    let all = p.until(
        "every worker's instance terminated",
        PoolRun::instances,
        |all| all.iter().all(|i| i.state == Some(State::Terminated)),
    );
    assert_eq!(
        all.len(),
        3,
        "one instance per worker, three workers: {all:?}"
    );
    // Nor its security group, nor its SSH key in the state directory.
    for i in &all {
        let run = i.tags[skyc_runtime::aws::RUN_TAG].clone();
        let tag = format!("tag:{}", skyc_runtime::aws::RUN_TAG);
        let groups = p.until(
            "the worker's security group deleted",
            |p| {
                let mut q = query::action("DescribeSecurityGroups");
                query::filters(&mut q, &[(&tag, &[&run])]);
                let body =
                    p.rt.block_on(p.ec2.call(&q))
                        .expect("DescribeSecurityGroups");
                skyc_runtime::aws::ec2::response::security_groups(&body)
                    .expect("readable")
                    .0
                    .len()
            },
            |n| *n == 0,
        );
        assert_eq!(groups, 0);
        let worker = run.rsplit_once("-w").expect("a worker's run").1;
        let key = p.s.state().join("groups").join(worker).join("key");
        assert!(!key.exists(), "{} left", key.display());
    }
    // As the machines saw it: three setups, each replacement after a
    // longer pause than the one before (1 s, then 2 s, at least).
    let times = setup_times(&marks);
    assert_eq!(times.len(), 3, "{times:?}");
    let (first, second) = (times[1] - times[0], times[2] - times[1]);
    assert!(first >= 1.0, "{times:?}");
    assert!(second >= 2.0, "{times:?}");
}

/// The SHA-256 of a file, as `sha256sum` prints it.
fn sha256sum(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    text(&out.stdout)
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_owned()
}

/// Starts a TCP relay from the stand-in machines' bridge to moto on
/// loopback (scripts/standin relay, stopped with the machines of `dir`):
/// S3's endpoint as the nodes and the runtime both reach it.
pub(crate) fn relay(dir: &Path, moto: &str) -> String {
    let port = moto.rsplit(':').next().expect("moto's port");
    let ok = Command::new(STANDIN)
        .arg("relay")
        .arg(dir)
        .arg(port)
        .status()
        .expect("scripts/standin relay")
        .success();
    assert!(ok, "scripts/standin relay");
    let relay_port =
        std::fs::read_to_string(dir.join(format!("relay-{port}.port"))).expect("the relay's port");
    format!("http://169.254.77.1:{}", relay_port.trim())
}

impl Run {
    /// SIGKILLs the supervisor, and follows until `status` has started
    /// another (from an environment without AWS settings).
    fn replace_supervisor(&mut self) {
        let pid: i32 = std::fs::read_to_string(self.s.state().join("supervisor.pid"))
            .expect("supervisor.pid")
            .trim()
            .parse()
            .expect("a pid");
        let pid = rustix::process::Pid::from_raw(pid).expect("a pid");
        rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("SIGKILL");
        let killed = pid.as_raw_nonzero().get().to_string();
        let state = self.s.state();
        self.until("a new supervisor", |_| {
            std::fs::read_to_string(state.join("supervisor.pid"))
                .is_ok_and(|p| !p.trim().is_empty() && p.trim() != killed)
        });
    }

    /// The run's bucket (from its plan) and a client of the S3 stand-in.
    fn bucket(&self) -> (String, skyc_runtime::aws::s3::S3) {
        let plan: Value = serde_json::from_str(
            &skyc_runtime::store::Store::open(&self.s.state())
                .and_then(|store| store.plan(self.gid))
                .expect("the group's plan"),
        )
        .expect("plan JSON");
        let bucket = plan["bucket"]["name"]
            .as_str()
            .expect("a bucket")
            .to_owned();
        let region = plan["region"].as_str().expect("a region");
        let moto = std::env::var("SKYC_MOTO_ENDPOINT").expect("the stand-in");
        (bucket, crate::support::stand_in_s3(&moto, region))
    }

    /// Waits (60 s at most) until the run's bucket is gone.
    fn assert_bucket_gone(&self) {
        let (bucket, s3) = self.bucket();
        let start = Instant::now();
        loop {
            let listed = self.rt.block_on(s3.list(&bucket)).expect("ListObjectsV2");
            if listed.is_none() {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{bucket} is left: {listed:?}"
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

/// The workdir and local file mounts of two tasks reach each of their
/// nodes (three stand-in machines) through the run's S3 bucket: each
/// node prints the SHA-256 of what it reads at each destination, which
/// must be the submitted bytes (the sources are changed as soon as the
/// run is submitted). The bucket is gone once the group is.
#[test]
fn code_and_data_reach_every_node_on_aws_and_their_bucket_goes_with_the_group() {
    if ready().is_none() {
        return;
    }
    let src = std::env::temp_dir().join(format!("skyc-src-aws-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(src.join("code/sub")).expect("sources");
    std::fs::write(src.join("code/train.py"), "print('train')\n").expect("train.py");
    std::fs::write(src.join("code/sub/cfg.json"), "{\"lr\": 0.1}\n").expect("cfg");
    let blob: Vec<u8> = (0..3_000_000u32).map(|i| (i * 31 % 253) as u8).collect();
    std::fs::write(src.join("data.bin"), &blob).expect("data.bin");
    let want = [
        ("train.py", sha256sum(&src.join("code/train.py"))),
        ("sub/cfg.json", sha256sum(&src.join("code/sub/cfg.json"))),
        ("blob", sha256sum(&src.join("data.bin"))),
    ];
    // A dataset in a bucket of the user's, copied to the reader.
    let dataset = format!("skyc-aws-dataset-{}", std::process::id());
    let objects: [(&str, Vec<u8>); 2] = [
        (
            "train/a.bin",
            (0..2_000_000u32).map(|i| (i % 249) as u8).collect(),
        ),
        ("train/sub/b c.bin", b"second shard".to_vec()),
    ];
    put_objects(&dataset, &objects);
    let yaml = format!(
        "name: files\nexecution: parallel\n---\nname: trainer\nnum_nodes: 2\n\
         workdir: {src}/code\n\
         file_mounts:\n  /var/lib/code: {src}/code\n  ~/data/blob.bin: {src}/data.bin\n\
         run: |\n  echo \"pwd=$(pwd)\"\n  sha256sum train.py sub/cfg.json ~/sky_workdir/train.py\n\
         \x20 sha256sum /var/lib/code/train.py ~/data/blob.bin\n  echo written > train.py\n\
         ---\nname: reader\nfile_mounts:\n  /var/lib/in/blob.bin: {src}/data.bin\n\
         \x20 /var/lib/ds: s3://{dataset}/train\n\
         run: sha256sum /var/lib/in/blob.bin /var/lib/ds/a.bin '/var/lib/ds/sub/b c.bin'\n",
        src = src.display()
    );
    let file = src.join("files.yaml");
    std::fs::write(&file, yaml).expect("group file");
    let Some(mut r) = Run::start_at("aws-files", &file, &[], None, true) else {
        return;
    };
    // Taken at submission: what changes now reaches no node.
    std::fs::write(src.join("code/train.py"), "print('edited')\n").expect("edit");
    std::fs::write(src.join("data.bin"), b"edited").expect("edit");
    let status = r.until("finished", finished);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    for rank in 0..2 {
        let log = r.logs(&format!("trainer-{rank}"));
        assert!(log.contains("pwd=/var/lib/skyc/workdir"), "{log}");
        for (name, sha) in &want[..2] {
            assert!(log.contains(&format!("{sha}  {name}")), "{name}: {log}");
        }
        for path in ["/root/sky_workdir/train.py", "/var/lib/code/train.py"] {
            assert!(
                log.contains(&format!("{}  {path}", want[0].1)),
                "{path}: {log}"
            );
        }
        assert!(
            log.contains(&format!("{}  /root/data/blob.bin", want[2].1)),
            "{log}"
        );
    }
    let log = r.logs("reader-0");
    assert!(
        log.contains(&format!("{}  /var/lib/in/blob.bin", want[2].1)),
        "{log}"
    );
    for (key, bytes) in &objects {
        let path = format!("/var/lib/ds/{}", key.trim_start_matches("train/"));
        let sum = skyc_runtime::files::tar::sha256(bytes);
        assert!(log.contains(&format!("{sum}  {path}")), "{path}: {log}");
    }
    r.assert_nothing_left();
    // The bucket, and everything in it, went with the group; the user's
    // dataset stays as it was.
    r.assert_bucket_gone();
    assert_eq!(
        r.rt.block_on(r.bucket().1.list(&dataset))
            .expect("ListObjectsV2")
            .map(|l| l.len()),
        Some(objects.len())
    );
    drop(r);
    let _ = std::fs::remove_dir_all(&src);
}

/// Makes `bucket` on the S3 stand-in holding `objects`: a user's own.
fn put_objects(bucket: &str, objects: &[(&str, Vec<u8>)]) {
    let moto = std::env::var("SKYC_MOTO_ENDPOINT").expect("the stand-in");
    let s3 = crate::support::stand_in_s3(&moto, "us-east-1");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        s3.create_bucket(bucket).await.expect("CreateBucket");
        for (key, bytes) in objects {
            let sha = skyc_runtime::files::tar::sha256(bytes);
            let data = bytes.clone();
            let source: skyc_runtime::aws::s3::Source =
                std::sync::Arc::new(move |w: &mut dyn std::io::Write| w.write_all(&data));
            s3.put_object(bucket, key, bytes.len() as u64, &sha, source)
                .await
                .expect("PutObject");
        }
    });
}

/// A supervisor killed while a group with files runs: the one that takes
/// the group over (started by `status`, from an environment without AWS
/// settings) carries on with the stored S3 endpoint, and deletes the
/// run's bucket once the group has ended.
#[test]
fn a_supervisor_that_takes_a_group_over_deletes_its_bucket_on_aws() {
    if ready().is_none() {
        return;
    }
    let src = std::env::temp_dir().join(format!("skyc-src-aws-files-kill-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(&src).expect("sources");
    std::fs::write(src.join("input.txt"), "the submitted input\n").expect("input");
    let yaml = format!(
        "name: fk\nexecution: parallel\n---\nname: a\n\
         file_mounts:\n  /var/lib/in.txt: {src}/input.txt\n\
         run: |\n  cat /var/lib/in.txt\n  until [ -e {src}/release ]; do sleep 0.1; done\n  echo done\n",
        src = src.display()
    );
    let file = src.join("fk.yaml");
    std::fs::write(&file, yaml).expect("group file");
    let Some(mut r) = Run::start_at("aws-files-kill", &file, &[], None, true) else {
        return;
    };
    r.until_logged("a-0", "the submitted input");
    let (bucket, s3) = r.bucket();
    let listed = r.rt.block_on(s3.list(&bucket)).expect("ListObjectsV2");
    assert_eq!(
        listed.map(|l| l.len()),
        Some(1),
        "the run's stream is in its bucket"
    );
    r.replace_supervisor();
    std::fs::write(src.join("release"), "").expect("release");
    let status = r.until("finished", finished);
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    let log = r.logs("a-0");
    assert_eq!(log.matches("the submitted input").count(), 1, "{log}");
    r.assert_nothing_left();
    r.assert_bucket_gone();
    drop(r);
    let _ = std::fs::remove_dir_all(&src);
}

/// Buckets mounted on the instances (`mode: MOUNT`, `MOUNT_CACHED`): each
/// stand-in machine mounts them with rclone before setup, reading the
/// run's credentials, which the runtime delivers (and the boot script
/// never carries). The node reads an object through the mount and
/// writes one; a MOUNT_CACHED checkpoint written just before the node
/// ends is in the bucket, byte for byte, once the group has ended.
#[test]
fn buckets_are_mounted_on_aws_instances_with_the_runs_credentials() {
    if ready().is_none() || skyc_runtime::storage::mount::client().is_err() {
        assert!(
            std::env::var_os("SKYC_FUSE_REQUIRED").is_none() || ready().is_none(),
            "SKYC_FUSE_REQUIRED is set but rclone or /dev/fuse is missing"
        );
        return;
    }
    let bucket = format!("skyc-aws-mount-{}", std::process::id());
    let weights: Vec<u8> = (0..1_500_000u32).map(|i| (i * 13 % 241) as u8).collect();
    put_objects(&bucket, &[("policy/weights.bin", weights.clone())]);
    let dir = std::env::temp_dir().join(format!("skyc-aws-mount-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let yaml = format!(
        "name: mnt\nexecution: parallel\n---\nname: trainer\n\
         file_mounts:\n  /var/lib/policy:\n    source: s3://{bucket}/policy\n    mode: MOUNT\n  \
         ~/ckpt:\n    source: s3://{bucket}/ckpt\n    mode: MOUNT_CACHED\n\
         run: |\n  sha256sum /var/lib/policy/weights.bin\n  \
         python3 -c 'import json; print(\"key\", json.load(open(\"/var/lib/skyc/aws/credentials.json\"))[\"AccessKeyId\"])'\n  \
         sleep 4\n  \
         python3 -c 'import json; print(\"key\", json.load(open(\"/var/lib/skyc/aws/credentials.json\"))[\"AccessKeyId\"])'\n  \
         echo from-the-node > /var/lib/policy/ack.txt\n  \
         python3 -c 'import sys; sys.stdout.buffer.write(bytes(i * 7 % 251 for i in range(3000000)))' \
         > ~/ckpt/step-1.bin\n  echo written\n"
    );
    let file = dir.join("mnt.yaml");
    std::fs::write(&file, yaml).expect("group file");
    let Some(mut r) = Run::start_at("aws-mount", &file, &[], None, true) else {
        return;
    };
    let status = r.until("finished", finished);
    let log = r.logs("trainer-0");
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}\n{log}");
    let sum = skyc_runtime::files::tar::sha256(&weights);
    assert!(
        log.contains(&format!("{sum}  /var/lib/policy/weights.bin")),
        "{log}"
    );
    assert!(log.contains("written"), "{log}");
    // What rclone reads: the run's credentials (the test profile's, which
    // last 8 s), delivered by the runtime and delivered again as they
    // are renewed, while the bucket stays mounted.
    let keys: Vec<&str> = log.lines().filter_map(|l| l.strip_prefix("key ")).collect();
    assert_eq!(keys.len(), 2, "{log}");
    assert!(keys.iter().all(|k| k.starts_with("AKPROC")), "{log}");
    // STS cannot narrow a credential_process's, and `status` says so.
    assert_eq!(
        status["tasks"][0]["credentials"],
        format!(
            "the run's own AWS credentials (a credential_process's: STS cannot narrow them to \
             s3://{bucket}), renewed with them"
        ),
        "{status:#}"
    );
    assert_ne!(
        keys[0], keys[1],
        "the credentials were not delivered again:\n{log}"
    );
    let moto = std::env::var("SKYC_MOTO_ENDPOINT").expect("the stand-in");
    let s3 = crate::support::stand_in_s3(&moto, "us-east-1");
    let get = |key: &str| {
        let listed =
            r.rt.block_on(s3.list_under(&bucket, key, 1))
                .expect("ListObjectsV2")
                .unwrap_or_default();
        let object = listed
            .into_iter()
            .find(|o| o.key == key)
            .unwrap_or_else(|| panic!("no {key} in {bucket}"));
        let to = dir.join(key.replace('/', "_"));
        std::fs::write(&to, b"").expect("file");
        r.rt.block_on(s3.get_object(&bucket, &object, &to))
            .expect("GetObject");
        std::fs::read(&to).expect("read")
    };
    assert_eq!(get("policy/ack.txt"), b"from-the-node\n");
    let want: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(get("ckpt/step-1.bin"), want);
    r.assert_nothing_left();
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

/// On an IAM user's keys, the nodes mount their bucket with credentials
/// STS narrowed to it (`GetFederationToken`, with the spec's session
/// policy), never the keys, and `status` says so. moto answers every
/// federation token with its one example key and enforces no policy:
/// what the policy allows is shown in `runtime/src/aws/tests` (against
/// moto's IAM), not here.
#[test]
fn aws_nodes_mount_with_credentials_narrowed_to_their_buckets() {
    if ready().is_none() || skyc_runtime::storage::mount::client().is_err() {
        return;
    }
    let bucket = format!("skyc-aws-narrow-{}", std::process::id());
    let weights: Vec<u8> = (0..200_000u32).map(|i| (i * 31 % 239) as u8).collect();
    put_objects(&bucket, &[("w.bin", weights.clone())]);
    let dir = std::env::temp_dir().join(format!("skyc-aws-narrow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let yaml = format!(
        "name: narrow\nexecution: parallel\n---\nname: trainer\n\
         file_mounts:\n  /data:\n    source: s3://{bucket}\n    mode: MOUNT\n\
         run: |\n  sha256sum /data/w.bin\n  \
         python3 -c 'import json; print(\"key\", json.load(open(\"/var/lib/skyc/aws/credentials.json\"))[\"AccessKeyId\"])'\n  \
         sleep 3\n"
    );
    let file = dir.join("narrow.yaml");
    std::fs::write(&file, yaml).expect("group file");
    let Some(mut r) = Run::start_as("aws-narrow", &file, "skyc-keys") else {
        return;
    };
    // While it runs, `status ID` says what the nodes hold.
    r.until_logged("trainer-0", "key ");
    let out =
        r.s.skyc(&["status", &r.gid.to_string()])
            .output()
            .expect("status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "credentials of trainer's nodes: AWS credentials narrowed to s3://{bucket} \
             (STS GetFederationToken), short-lived"
        )),
        "{text}"
    );
    let status = r.until("finished", finished);
    let log = r.logs("trainer-0");
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}\n{log}");
    let sum = skyc_runtime::files::tar::sha256(&weights);
    assert!(log.contains(&format!("{sum}  /data/w.bin")), "{log}");
    let keys: Vec<&str> = log.lines().filter_map(|l| l.strip_prefix("key ")).collect();
    assert_eq!(keys, ["AKIAIOSFODNN7EXAMPLE"], "{log}");
    assert_eq!(
        status["tasks"][0]["credentials"],
        format!("AWS credentials narrowed to s3://{bucket} (STS GetFederationToken), short-lived"),
        "{status:#}"
    );
    r.assert_nothing_left();
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
