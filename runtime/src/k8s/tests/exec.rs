//! `pods/exec` in the fake cluster: the API server's checks (the pod is
//! there and its container runs) and what the job scripts do in the
//! container, as `job_scripts`' own tests run them in bash: a start
//! makes the attempt's directory once, a poll reads its state and log, a
//! signal ends it. A container's processes and files die with it: they
//! are kept by the pod's uid, so a new pod of the same name has none.

use super::fake::{Fake, Process, World};
use crate::k8s::exec::{Command, ExecError, PodExec};
use crate::k8s::job_scripts;
use base64::Engine as _;
use futures::future::BoxFuture;
use serde_json::Value;

pub(super) struct FakeExec(pub(super) Fake);

impl PodExec for FakeExec {
    fn exec(
        &self,
        _namespace: &str,
        pod: &str,
        command: Command,
    ) -> BoxFuture<'static, Result<String, ExecError>> {
        let answer = self.0.world().exec(pod, &command);
        Box::pin(async move { answer })
    }
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

impl World {
    fn exec(&mut self, name: &str, command: &Command) -> Result<String, ExecError> {
        let argv = &command.argv;
        // The files pod's filling: its bytes land in its emptyDir.
        let fill = match argv.get(2).map(String::as_str) {
            Some(skyc_targets::k8s::files::FILL_HAVE) => Some("have"),
            Some(skyc_targets::k8s::files::FILL_PART) => Some("part"),
            Some(skyc_targets::k8s::files::FILL_DONE) => Some("done"),
            _ => None,
        };
        if let Some(script) = fill {
            if self
                .get("pods", name)
                .is_none_or(|p| p["status"]["phase"] != "Running")
            {
                return Err(ExecError::Gone(format!("pod {name} is not running")));
            }
            let digest = argv.get(4).cloned().unwrap_or_default();
            // A pod's files are its own: a new pod of the name has none.
            let uid = self
                .get("pods", name)
                .and_then(|p| p["metadata"]["uid"].as_str())
                .unwrap_or_default()
                .to_owned();
            if script == "have" {
                return Ok(self.kubelet_exec.have(&uid, &digest));
            }
            if script == "part" && self.kubelet_exec.parts_cut_after == Some(0) {
                self.kubelet_exec.parts_cut_after = None;
                return Err(ExecError::Failed("the exec's connection was reset".into()));
            }
            if script == "part"
                && let Some(n) = &mut self.kubelet_exec.parts_cut_after
            {
                *n -= 1;
            }
            // A part says how many bytes to read: the input never ends.
            let given = command.stdin.as_ref().map_or(0, Vec::len).to_string();
            if script == "part" && argv.get(6) != Some(&given) {
                return Err(ExecError::Failed(format!(
                    "a part of {given} bytes announced as {:?}: the command would wait for more",
                    argv.get(6)
                )));
            }
            self.kubelet_exec.fills.push((
                uid,
                script,
                digest,
                argv.get(5).cloned().unwrap_or_default(),
                command.stdin.as_ref().map_or(0, Vec::len),
            ));
            return Ok(String::new());
        }
        let op = argv.get(3).cloned().unwrap_or_default();
        let dir = argv.get(4).cloned().unwrap_or_default();
        self.kubelet_exec.execs.push(format!("{name} {op} {dir}"));
        // The request's URL: the API server's audit log and any proxy see
        // it whole.
        self.kubelet_exec.urls.push(argv.join(" "));
        if self.kubelet_exec.failing {
            return Err(ExecError::Failed("the exec proxy is down".into()));
        }
        if self.kubelet_exec.denied {
            return Err(ExecError::Denied(format!(
                "pods \"{name}\" is forbidden: cannot get resource \"pods/exec\" (403)"
            )));
        }
        if self.kubelet_exec.failing_polls && op == "skyc-poll" {
            return Err(ExecError::Failed("the exec proxy is down".into()));
        }
        if self.kubelet_exec.stray_404 {
            return Err(ExecError::Gone(
                "the server could not find the requested resource (404)".into(),
            ));
        }
        let Some(pod) = self.get("pods", name).cloned() else {
            return Err(ExecError::Gone(format!("pods \"{name}\" not found")));
        };
        if pod["status"]["phase"] != "Running" {
            return Err(ExecError::Gone(format!("pod {name} is not running (400)")));
        }
        let uid = pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let key = (uid, dir);
        let procs = &mut self.kubelet_exec.by_dir;
        match op.as_str() {
            "skyc-start" => {
                // Read first, whatever the answer.
                let Some((run, env)) = command.stdin.as_deref().and_then(job_scripts::start_input)
                else {
                    return Err(ExecError::Failed("the job's input was cut short".into()));
                };
                if !ready(&pod) {
                    return Ok("unready\n".into());
                }
                let lost = self.kubelet_exec.start_answers_lost;
                if procs.contains_key(&key) {
                    if lost {
                        return Err(ExecError::Failed("the exec session dropped".into()));
                    }
                    return Ok("already\n".into());
                }
                procs.insert(
                    key,
                    Process {
                        pod: name.to_owned(),
                        run,
                        env,
                        exit: None,
                        vanished: false,
                        ignores_term: self.kubelet_exec.jobs_ignore_term,
                        log: Vec::new(),
                    },
                );
                if lost {
                    return Err(ExecError::Failed("the exec session dropped".into()));
                }
                Ok("started\n".into())
            }
            "skyc-poll" => {
                let Some(p) = procs.get(&key) else {
                    return Ok("absent\n\n".into());
                };
                let offset: usize = argv.get(5).and_then(|o| o.parse().ok()).unwrap_or(0);
                let state = match (p.exit, p.vanished) {
                    (Some(code), _) => format!("exit {code}"),
                    (None, true) => "vanished".into(),
                    (None, false) => "running".into(),
                };
                // At most the chunk asked for (`head -c`).
                let chunk: usize = argv.get(6).and_then(|c| c.parse().ok()).unwrap_or(0);
                let log = p.log.get(offset..).unwrap_or_default();
                let log = &log[..log.len().min(chunk)];
                Ok(format!(
                    "{state}\n{}\n",
                    base64::engine::general_purpose::STANDARD.encode(log)
                ))
            }
            "skyc-signal" => {
                if let Some(p) = procs.get_mut(&key).filter(|p| p.exit.is_none()) {
                    match argv.get(5).map(String::as_str) {
                        Some("KILL") => p.vanished = true,
                        _ if p.ignores_term => {}
                        _ => p.exit = Some(143),
                    }
                }
                Ok("signalled\n".into())
            }
            other => Err(ExecError::Failed(format!("not a skyc script: {other}"))),
        }
    }

    /// The job's node started in `dir` of pod `pod` prints `text`.
    pub(super) fn job_prints(&mut self, pod: &str, dir: &str, text: &str) {
        if let Some(p) = self.job_mut(pod, dir) {
            p.log.extend_from_slice(text.as_bytes());
        }
    }

    /// The job's node started in `dir` of pod `pod` ends with `code`.
    pub(super) fn job_exits(&mut self, pod: &str, dir: &str, code: i32) {
        if let Some(p) = self.job_mut(pod, dir) {
            p.exit = Some(code);
        }
    }

    fn job_mut(&mut self, pod: &str, dir: &str) -> Option<&mut Process> {
        let uid = self.get("pods", pod)?["metadata"]["uid"]
            .as_str()?
            .to_owned();
        self.kubelet_exec.by_dir.get_mut(&(uid, dir.to_owned()))
    }

    /// Every job node ever started, in the order of their keys.
    pub(super) fn job_processes(&self) -> Vec<Process> {
        self.kubelet_exec.by_dir.values().cloned().collect()
    }
}
