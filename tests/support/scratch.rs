//! A scratch directory with its own state directory, and `skyc` run in
//! it: the runtime end-to-end tests' harness.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A scratch directory with a state directory inside; removed on drop
/// after cancelling whatever still runs.
pub(crate) struct Scratch {
    pub(crate) dir: PathBuf,
}

impl Scratch {
    pub(crate) fn new(name: &str) -> Self {
        Self::under(&std::env::temp_dir(), name)
    }

    /// In `base`: for a cluster's nodes, which see only some directories.
    pub(crate) fn under(base: &Path, name: &str) -> Self {
        let dir = base.join(format!("skyc-e2e-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self { dir }
    }

    pub(crate) fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    pub(crate) fn skyc(&self, args: &[&str]) -> Command {
        let mut cmd = super::skyc();
        cmd.args(args)
            .arg("--state-dir")
            .arg(self.state())
            .current_dir(&self.dir)
            .env("SCRATCH", &self.dir)
            // EC2 here is moto on loopback: a supervisor may ask it far
            // more often than a real account allows.
            .env("SKYC_AWS_POLL_MS", "300");
        cmd
    }

    pub(crate) fn run(&self, file: &str, extra: &[&str]) -> Output {
        let mut args = vec!["run", file];
        args.extend_from_slice(extra);
        self.skyc(&args).output().expect("skyc run")
    }

    pub(crate) fn detach(&self, file: &str) -> i64 {
        let out = self.run(file, &["-d"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout).trim().parse().expect("group id")
    }

    pub(crate) fn status(&self, id: i64) -> Value {
        let status = self.try_status(id);
        assert!(!status.is_null(), "no status of group {id}");
        status
    }

    /// The status, or `Null` while the group is not yet submitted.
    pub(crate) fn try_status(&self, id: i64) -> Value {
        let out = self
            .skyc(&["status", &id.to_string(), "--json"])
            .output()
            .expect("skyc status");
        // One group's status is the first (only) element of the list.
        serde_json::from_slice::<Value>(&out.stdout)
            .ok()
            .and_then(|v| v.get(0).cloned())
            .unwrap_or(Value::Null)
    }

    /// Polls the group until `done` holds, or fails after `limit`.
    pub(crate) fn wait_for(
        &self,
        id: i64,
        limit: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let start = Instant::now();
        loop {
            let status = self.try_status(id);
            if !status.is_null() && done(&status) {
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "timed out; last status: {status:#}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub(crate) fn wait_finished(&self, id: i64) -> Value {
        self.wait_for(id, Duration::from_secs(60), |s| {
            !s["finished_at_ms"].is_null()
        })
    }

    pub(crate) fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = self.skyc(&["cancel", "--all"]).output();
        let _ = self.skyc(&["pool", "down", "--all"]).output();
        let start = Instant::now();
        // Wait for the supervisor to finish the groups (and free their
        // addresses) before the directory goes.
        while self.state().join("supervisor.sock").exists() && start.elapsed().as_secs() < 15 {
            std::thread::sleep(Duration::from_millis(100));
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub(crate) fn task<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["tasks"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["name"] == name))
        .unwrap_or_else(|| panic!("no task {name} in {status:#}"))
}

/// Processes anywhere on the machine started for a node of `state`.
/// SIGKILLs the supervisor `status` names; its pid.
pub(crate) fn kill_supervisor(status: &Value) -> i64 {
    let pid = status["supervisor_pid"].as_i64().expect("supervisor pid");
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success())
    );
    pid
}

pub(crate) fn node_processes(state: &Path) -> Vec<i32> {
    let marker = format!("SKYC_NODE_DIR={}", state.display());
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let environ = std::fs::read(e.path().join("environ")).ok()?;
            environ
                .split(|&b| b == 0)
                .any(|v| v.starts_with(marker.as_bytes()))
                .then_some(pid)
        })
        .collect()
}
