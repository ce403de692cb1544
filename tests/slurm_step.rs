//! The Slurm step wrapper (`step.sh`) without a cluster: run by bash as
//! srun runs it (a process group of its own), it records the user's exit
//! code and leaves nothing of the task running, in a PID namespace and,
//! where none can be made, by the task's marker and process group.

use crate::slurm::tmp_dir;
use crate::support::leftovers::{leave_leftovers, lock_is_free, processes_named};
use skyc_targets::slurm::STEP;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A run directory holding the wrapper and task 0's `run`.
struct Step {
    dir: PathBuf,
    token: String,
}

impl Step {
    /// `run` is task 0's script; it may call `leave` and sees the name
    /// its leftovers carry as `$TOKEN`.
    fn new(name: &str, run: &str) -> Self {
        let dir = tmp_dir(&format!("step-{name}"));
        let token = format!("skyc-leftover-step-{name}-{}", std::process::id());
        let leave = leave_leftovers(&token, "$SKYC_RUN_DIR", "$1");
        std::fs::write(dir.join("step.sh"), STEP).unwrap();
        std::fs::write(
            dir.join("0.run"),
            format!("export TOKEN={token}\n{leave}\n{run}"),
        )
        .unwrap();
        Self { dir, token }
    }

    /// `bash step.sh 0 ATTEMPT`, as srun starts it; `in_ns` says the
    /// namespaces were already entered (or could not be made).
    fn spawn(&self, attempt: u32, in_ns: bool) -> Child {
        let mut cmd = Command::new("bash");
        cmd.arg(self.dir.join("step.sh"))
            .args(["0", &attempt.to_string()])
            .env("SKYC_RUN_DIR", &self.dir)
            .env("SKYC_HOSTNAMES", "off")
            .env("SKYPILOT_NODE_IPS", "127.0.0.1")
            .env("SKYPILOT_NUM_GPUS_PER_NODE", "0")
            .env("SKYC_ATTEMPT", attempt.to_string())
            .env_remove("SLURM_PROCID")
            .process_group(0);
        if in_ns {
            cmd.env("SKYC_IN_NS", "1");
        } else {
            cmd.env_remove("SKYC_IN_NS");
        }
        cmd.spawn().unwrap()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// Waits until the file `name` exists.
    fn wait_for(&self, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.dir.join(name).exists() {
            assert!(Instant::now() < deadline, "no {name}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The task left processes while it ran, and none is left now.
    fn assert_nothing_left(&self, lock: &str) {
        assert_eq!(self.read(&format!("held-{lock}")).trim(), "held");
        assert!(lock_is_free(&self.dir.join(format!("lock-{lock}"))));
        assert_eq!(processes_named(&self.token), Vec::<String>::new());
    }
}

/// Whether this machine lets the wrapper make a PID namespace.
fn pid_namespaces() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let mut probe = Command::new("unshare");
    if !root {
        probe.args(["--user", "--map-root-user"]);
    }
    let ok = probe
        .args([
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "true",
        ])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("!!! SKIPPED: no PID namespace can be made here (not root, no user namespaces)");
    }
    ok
}

fn exit_record(dir: &Path, attempt: u32) -> String {
    std::fs::read_to_string(dir.join(format!("exit.0.{attempt}.0"))).unwrap_or_default()
}

#[test]
fn in_a_pid_namespace_nothing_outlives_the_script_and_its_code_is_kept() {
    if !pid_namespaces() {
        return;
    }
    let step = Step::new("ns", "leave ns\nexit 3\n");
    let status = step.spawn(0, false).wait().unwrap();
    assert_eq!(status.code(), Some(3));
    assert_eq!(exit_record(&step.dir, 0), "run 3\n");
    step.assert_nothing_left("ns-0");
}

#[test]
fn sigterm_reaches_the_script_once_and_its_leftovers_are_killed() {
    if !pid_namespaces() {
        return;
    }
    // Slurm's SIGTERM reaches the step's process group (every proctrack
    // plugin signals at least that), wrapper included.
    let step = Step::new(
        "term",
        "leave term\n\
         trap 'echo term >> \"$SKYC_RUN_DIR/terms\"; exit 0' TERM\n\
         touch \"$SKYC_RUN_DIR/ready\"\n\
         while :; do sleep 0.1; done\n",
    );
    let mut child = step.spawn(0, false);
    step.wait_for("ready");
    let pgid = child.id().to_string();
    let sent = Command::new("kill")
        .args(["-TERM", "--", &format!("-{pgid}")])
        .status();
    assert!(sent.is_ok_and(|s| s.success()));
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert_eq!(exit_record(&step.dir, 0), "run 0\n");
    assert_eq!(
        step.read("terms"),
        "term\n",
        "one SIGTERM, not forwarded twice"
    );
    step.assert_nothing_left("term-0");
}

#[test]
fn without_namespaces_the_marker_and_process_group_find_the_leftovers() {
    // A background child, a daemon in a session of its own that keeps its
    // environment (the marker), and an orphan that cleared its environment
    // but stays in the process group.
    let step = Step::new(
        "bare",
        r#"(exec -a "$TOKEN" sleep 300) &
setsid bash -c '(exec -a "$TOKEN" sleep 301 &)'
(env -i bash -c "exec -a $TOKEN sleep 302" &)
sleep 0.3
exit 5
"#,
    );
    let status = step.spawn(0, true).wait().unwrap();
    assert_eq!(status.code(), Some(5));
    assert_eq!(exit_record(&step.dir, 0), "run 5\n");
    assert_eq!(processes_named(&step.token), Vec::<String>::new());
}

#[test]
fn without_namespaces_an_attempt_first_ends_what_a_killed_one_left() {
    // Attempt 0 is SIGKILLed with its process group (as Slurm kills a
    // step) before it could clean up: its daemon, in a session of its own,
    // survives; attempt 1 ends it before the task runs.
    let step = Step::new(
        "killed",
        r#"lock=$SKYC_RUN_DIR/lock
if [ "$SKYC_ATTEMPT" = 0 ]; then
  exec 9>>"$lock" && flock 9
  setsid bash -c '(exec -a "$TOKEN" sleep 301 &)'
  exec 9>&-
  touch "$SKYC_RUN_DIR/ready"
  sleep 60
fi
if flock -n "$lock" true; then echo free; else echo held; fi > "$SKYC_RUN_DIR/saw"
"#,
    );
    let mut first = step.spawn(0, true);
    step.wait_for("ready");
    let pgid = format!("-{}", first.id());
    assert!(
        Command::new("kill")
            .args(["-KILL", "--", &pgid])
            .status()
            .is_ok_and(|s| s.success())
    );
    first.wait().unwrap();
    // The daemon execs its name asynchronously: wait for it to show.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while processes_named(&step.token).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(processes_named(&step.token).len(), 1, "the daemon survived");
    let status = step.spawn(1, true).wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(exit_record(&step.dir, 1), "run 0\n");
    assert_eq!(step.read("saw").trim(), "free");
    assert_eq!(processes_named(&step.token), Vec::<String>::new());
}
