//! A command run in a pod's `main` container through the `pods/exec`
//! subresource: how a pool job is started in its worker's pod and read
//! from ([`super::job_scripts`]).
//!
//! A seam ([`PodExec`]), as the client is one: the cluster's client
//! speaks the API server's WebSocket exec protocol (kube's `ws` feature);
//! the scripted-API tests answer with what the scripts would do in the
//! pod.

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams};
use kube::client::UpgradeConnectionError;
use skyc_targets::k8s::names::CONTAINER;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A command to run in a pod: its argv (sent in the request's URL, so
/// never a secret and never large) and what it reads on its standard
/// input (sent over the exec's stream).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Command {
    pub argv: Vec<String>,
    pub stdin: Option<Vec<u8>>,
}

/// The input carries secrets: only its size is shown.
impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Command")
            .field("argv", &self.argv)
            .field("stdin_bytes", &self.stdin.as_ref().map(Vec::len))
            .finish()
    }
}

/// Why an exec did not answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExecError {
    /// The pod or its container is not there or not running: what ran in
    /// it is gone with it.
    Gone(String),
    /// The API server refuses it (403: RBAC; 413/414/431: too large):
    /// asking again will not help, the user must act.
    Denied(String),
    /// Anything else (the API server, the network, a refusal): asked
    /// again later.
    Failed(String),
}

/// Runs a command in the `main` container of a pod; answers its stdout
/// once it has ended with code 0.
pub trait PodExec: Send + Sync {
    fn exec(
        &self,
        namespace: &str,
        pod: &str,
        command: Command,
    ) -> BoxFuture<'static, Result<String, ExecError>>;
}

/// How long an exec may take: a start and a poll end at once in the
/// pod, so one that has not answered by then is stuck (a network or an
/// API server that stopped answering) and is asked again later.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(30);

/// An exec given at most a time to answer: past it, [`ExecError::Failed`].
pub struct Timed<E>(pub E, pub Duration);

impl<E: PodExec> PodExec for Timed<E> {
    fn exec(
        &self,
        namespace: &str,
        pod: &str,
        command: Command,
    ) -> BoxFuture<'static, Result<String, ExecError>> {
        let limit = self.1;
        let answer = self.0.exec(namespace, pod, command);
        let pod = pod.to_owned();
        Box::pin(async move {
            tokio::time::timeout(limit, answer)
                .await
                .unwrap_or_else(|_| {
                    Err(ExecError::Failed(format!(
                        "an exec in pod {pod} did not answer within {limit:?}"
                    )))
                })
        })
    }
}

/// How many bytes of input kube's pipe holds ahead of the session (its
/// frames are 4 KiB whatever this is).
const STDIN_BUFFER: usize = 64 << 10;

/// How long the output may go quiet once the command's `Status` came.
const OUTPUT_AFTER_STATUS: Duration = Duration::from_secs(1);

/// The API server's exec, through the cluster's client.
pub struct KubeExec(pub kube::Client);

impl PodExec for KubeExec {
    fn exec(
        &self,
        namespace: &str,
        pod: &str,
        command: Command,
    ) -> BoxFuture<'static, Result<String, ExecError>> {
        let api: Api<Pod> = Api::namespaced(self.0.clone(), namespace);
        let pod = pod.to_owned();
        Box::pin(async move {
            let params = AttachParams::default()
                .container(CONTAINER)
                .stdin(command.stdin.is_some())
                .stdout(true)
                .stderr(false)
                .max_stdin_buf_size(STDIN_BUFFER);
            let mut attached = api
                .exec(&pod, command.argv, &params)
                .await
                .map_err(classify)?;
            let status = attached.take_status();
            let mut stdin = attached.stdin();
            let mut stdout = attached.stdout();
            let mut out = Vec::new();
            // The input is written while the output is read (neither
            // waits on the other), and never shut down: on a session
            // without the v5 protocol, kube ends the whole session at the
            // end of stdin. The scripts read what they need and no more,
            // so no end of input is ever waited for.
            let status = {
                let mut write = std::pin::pin!(async {
                    if let (Some(w), Some(bytes)) = (stdin.as_mut(), command.stdin.as_deref()) {
                        let _ = w.write_all(bytes).await;
                        let _ = w.flush().await;
                    }
                });
                let mut status = std::pin::pin!(async move {
                    match status {
                        Some(s) => s.await,
                        None => None,
                    }
                });
                let mut written = command.stdin.is_none();
                // The `Status` ends the command: the output before it is
                // in kube's pipe, read to its end or until it goes quiet
                // (a session that failed after the command ended, such as
                // a command that did not read all its input, never ends
                // the output). The input left is dropped.
                let mut ended = None;
                while let Some(reader) = stdout.as_mut() {
                    let quiet = ended.is_some();
                    tokio::select! {
                        () = &mut write, if !written && !quiet => written = true,
                        s = &mut status, if !quiet => ended = Some(s),
                        n = async {
                            if quiet {
                                tokio::time::timeout(OUTPUT_AFTER_STATUS, reader.read_buf(&mut out))
                                    .await
                                    .unwrap_or(Ok(0))
                            } else {
                                reader.read_buf(&mut out).await
                            }
                        } => match n {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(e) => {
                                return Err(ExecError::Failed(format!("reading exec output: {e}")));
                            }
                        },
                    }
                }
                match ended {
                    Some(s) => s,
                    None => status.await,
                }
            };
            drop(stdin);
            // The session's own end; its error matters only without a
            // `Status` (a session failed after one ended the command).
            let joined = tokio::time::timeout(OUTPUT_AFTER_STATUS, attached.join()).await;
            if status.is_none()
                && let Ok(Err(e)) = joined
            {
                return Err(ExecError::Failed(e.to_string()));
            }
            match status {
                Some(s) if s.status.as_deref() == Some("Success") => {
                    Ok(String::from_utf8_lossy(&out).into_owned())
                }
                Some(s) => Err(ExecError::Failed(format!(
                    "the command in pod {pod} failed: {}",
                    s.message.unwrap_or_default()
                ))),
                None => Err(ExecError::Failed(format!(
                    "the exec in pod {pod} ended without a status"
                ))),
            }
        })
    }
}

/// A pod that is gone (404) or whose container does not run (400: the
/// API server's "container not found" or "pod is not running") took what
/// ran in it along; anything else may pass.
fn classify(e: kube::Error) -> ExecError {
    let code = match &e {
        kube::Error::Api(s) => Some(s.code),
        kube::Error::UpgradeConnection(UpgradeConnectionError::ProtocolSwitch(code)) => {
            Some(code.as_u16())
        }
        _ => None,
    };
    match code {
        Some(404 | 400) => ExecError::Gone(e.to_string()),
        Some(403 | 413 | 414 | 431) => ExecError::Denied(e.to_string()),
        _ => ExecError::Failed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An exec that never answers.
    struct Stuck;

    impl PodExec for Stuck {
        fn exec(
            &self,
            _namespace: &str,
            _pod: &str,
            _command: Command,
        ) -> BoxFuture<'static, Result<String, ExecError>> {
            Box::pin(futures::future::pending())
        }
    }

    #[tokio::test]
    async fn an_exec_that_does_not_answer_fails_at_its_timeout() {
        let timed = Timed(Stuck, Duration::from_millis(20));
        match timed.exec("ns", "pod-0", Command::default()).await {
            Err(ExecError::Failed(why)) => assert!(why.contains("pod-0"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
