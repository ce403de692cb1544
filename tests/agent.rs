//! The node agent on its own (`skyc-agent`, no supervisor): its files, its
//! log capture and index, signals, and what it does with leftovers.

use skyc_runtime::local::logindex::{self, Record};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The agent's executable, installed as a supervisor installs it, in a
/// state directory of these tests' own.
fn agent() -> PathBuf {
    let state = Path::new(env!("CARGO_TARGET_TMPDIR")).join("agent-tests");
    skyc_runtime::local::agent::install(&state).expect("the agent installed")
}

/// The agent of one node: its directory and log in a scratch directory,
/// removed on drop.
struct Node {
    scratch: PathBuf,
}

impl Node {
    fn new(name: &str) -> Self {
        let scratch =
            std::env::temp_dir().join(format!("skyc-agent-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(scratch.join("a0-run")).expect("attempt dir");
        Node { scratch }
    }

    fn dir(&self) -> PathBuf {
        self.scratch.join("a0-run")
    }

    fn log(&self) -> PathBuf {
        self.scratch.join("t-0.log")
    }

    fn spawn(&self, program: &str, argv: &[&str]) -> Child {
        Command::new(agent())
            .arg(self.dir())
            .arg(self.log())
            .arg(logindex::index_path(&self.log()))
            .arg(program)
            .arg("--")
            .args(argv)
            .current_dir(&self.scratch)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("skyc-agent")
    }

    /// Runs `script` with bash under the agent; the status it recorded.
    fn run(&self, script: &str) -> i32 {
        let out = self
            .spawn("/bin/bash", &["bash", "-c", script])
            .wait_with_output()
            .expect("wait");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.exit().expect("exit recorded")
    }

    fn exit(&self) -> Option<i32> {
        std::fs::read_to_string(self.dir().join("exit"))
            .ok()
            .map(|s| s.trim().parse().expect("a number"))
    }

    fn log_bytes(&self) -> Vec<u8> {
        std::fs::read(self.log()).expect("log")
    }

    fn index(&self) -> Vec<Record> {
        logindex::read_index(&logindex::index_path(&self.log())).expect("index")
    }

    fn wait_for_file(&self, name: &str) {
        let start = Instant::now();
        while !self.dir().join(name).exists() {
            assert!(start.elapsed() < Duration::from_secs(10), "no {name}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.scratch);
        }
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Offsets rise, end at the log's length, and times do not go back.
fn assert_index_covers(index: &[Record], log_len: usize, after_us: u64) {
    assert!(!index.is_empty());
    for pair in index.windows(2) {
        assert!(pair[0].end_offset < pair[1].end_offset, "{index:?}");
        assert!(pair[0].unix_time_us <= pair[1].unix_time_us, "{index:?}");
    }
    assert_eq!(index.last().map(|r| r.end_offset), Some(log_len as u64));
    assert!(index[0].unix_time_us >= after_us && index[index.len() - 1].unix_time_us <= now_us());
}

fn kill(pid: u32, signal: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{signal} {pid}");
}

#[test]
fn output_is_kept_byte_for_byte_and_indexed_per_chunk() {
    let node = Node::new("capture");
    let t0 = now_us();
    // Two writes far apart, stderr with stdout, bytes that are not UTF-8,
    // and a last line without a newline.
    let code = node.run(
        r"echo one; echo two >&2; printf '\001\377 raw\n'; sleep 0.3; printf 'last, no newline'; exit 3",
    );
    assert_eq!(code, 3);
    let log = node.log_bytes();
    assert_eq!(log, b"one\ntwo\n\x01\xff raw\nlast, no newline");
    let index = node.index();
    assert!(index.len() >= 2, "the pause splits the output: {index:?}");
    assert_index_covers(&index, log.len(), t0);
    let pause = index
        .windows(2)
        .map(|p| p[1].unix_time_us - p[0].unix_time_us)
        .max();
    assert!(
        pause >= Some(250_000),
        "chunks are stamped when read: {index:?}"
    );
    for name in ["agent.pid", "pgid", "exit"] {
        assert!(node.dir().join(name).is_file(), "{name}");
    }
}

#[test]
fn attempts_append_to_the_same_log_and_index() {
    let node = Node::new("append");
    let t0 = now_us();
    assert_eq!(node.run("echo first"), 0);
    std::fs::remove_file(node.dir().join("exit")).expect("rm exit");
    assert_eq!(node.run("printf second"), 0);
    let log = node.log_bytes();
    assert_eq!(log, b"first\nsecond");
    assert_index_covers(&node.index(), log.len(), t0);
}

#[test]
fn leftovers_are_killed_and_their_output_kept() {
    let node = Node::new("leftovers");
    let start = Instant::now();
    // One background process writes, then outlives the script (and holds
    // the pipe); another escapes the process group.
    let code = node.run(
        "(echo from-background; sleep 30; echo never) & \
         setsid sh -c 'sleep 30; echo never' & \
         sleep 0.2; echo done",
    );
    assert_eq!(code, 0);
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "the agent does not wait for leftovers"
    );
    let log = String::from_utf8(node.log_bytes()).expect("text");
    assert_eq!(log, "from-background\ndone\n");
    let pgid: i32 = std::fs::read_to_string(node.dir().join("pgid"))
        .expect("pgid")
        .trim()
        .parse()
        .expect("number");
    let group_alive = Command::new("kill")
        .args(["-0", "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(!group_alive, "the process group is gone");
}

#[test]
fn sigterm_is_passed_on_and_sigusr1_kills() {
    let node = Node::new("signals");
    let script = "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done";
    let child = node.spawn("/bin/bash", &["bash", "-c", script]);
    node.wait_for_file("pgid");
    while !String::from_utf8_lossy(&node.log_bytes()).contains("ready") {
        std::thread::sleep(Duration::from_millis(10));
    }
    kill(child.id(), "TERM");
    assert!(child.wait_with_output().expect("wait").status.success());
    assert_eq!(node.exit(), Some(7));
    // (bash also reports the `sleep` that the signal ended.)
    let log = String::from_utf8(node.log_bytes()).expect("text");
    assert!(
        log.starts_with("ready\n") && log.ends_with("got-term\n"),
        "{log}"
    );

    std::fs::remove_file(node.dir().join("exit")).expect("rm exit");
    let child = node.spawn("/bin/bash", &["bash", "-c", "trap '' TERM; sleep 30"]);
    node.wait_for_file("pgid");
    kill(child.id(), "USR1");
    assert!(child.wait_with_output().expect("wait").status.success());
    assert_eq!(node.exit(), Some(128 + 9));
}

#[test]
fn a_command_that_cannot_start_exits_127_and_says_why() {
    let node = Node::new("nostart");
    let out = node
        .spawn("/nonexistent/bash", &["bash", "-c", "true"])
        .wait_with_output()
        .expect("wait");
    assert!(out.status.success());
    assert_eq!(node.exit(), Some(127));
    let log = String::from_utf8(node.log_bytes()).expect("text");
    assert_eq!(
        log,
        "skyc: cannot start `/nonexistent/bash`: No such file or directory\n"
    );
    assert_index_covers(&node.index(), log.len(), 0);
}

#[test]
fn bad_arguments_are_a_usage_error() {
    let out = Command::new(agent())
        .args(["dir", "log"])
        .output()
        .expect("skyc-agent");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("usage: skyc-agent"));
}

/// An agent that can no longer follow its node (here: it cannot record
/// the node's process group) kills the node and records 126, a failure,
/// rather than vanishing as a lost node does.
#[test]
fn an_agent_that_cannot_follow_its_node_ends_it_with_126() {
    let node = Node::new("cannot-follow");
    // `pgid` cannot be written: a non-empty directory stands in its place.
    std::fs::create_dir_all(node.dir().join("pgid/keep")).unwrap();
    let marker = node.scratch.join("still-running");
    let script = format!("sleep 0.5; touch {}", marker.display());
    let out = node
        .spawn("/bin/bash", &["bash", "-c", &script])
        .wait_with_output()
        .expect("wait");
    assert!(!out.status.success(), "the agent reports its own failure");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pgid"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(node.exit(), Some(126));
    std::thread::sleep(Duration::from_millis(800));
    assert!(!marker.exists(), "the node's command was killed");
}
