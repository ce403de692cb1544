//! A command in the controller's pod on Kubernetes (docs/controller.md,
//! "The command line as its client"): the pod of the replica that holds
//! the Lease (else a running one, for a user who may not read it), and
//! `pods/exec` there, its input streamed in and its output streamed
//! back, the session ended with the command or the connection.

use super::remote::{CLOSED_OUTPUT, Input, STDIN_BUFFER, Session};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, LogParams};
use skyc_targets::k8s::controller::{CONTAINER, LEASE};
use std::io::Write;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How a state directory names a controller on Kubernetes.
pub const SCHEME: &str = "k8s://";

/// How long the output may still come once the command's status has.
const OUTPUT_AFTER_STATUS: std::time::Duration = std::time::Duration::from_secs(1);

/// The controller in a namespace, reached with a kubeconfig context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct K8s {
    pub namespace: String,
    /// The kubeconfig context; the current one when `None`.
    pub context: Option<String>,
}

impl K8s {
    /// `NAMESPACE[@CONTEXT]`, what follows [`SCHEME`] in `s`.
    pub(super) fn parse(s: &str, rest: &str) -> Result<Self, String> {
        let (namespace, context) = match rest.split_once('@') {
            Some((ns, ctx)) => (ns, Some(ctx)),
            None => (rest, None),
        };
        let label = !namespace.is_empty()
            && namespace.len() <= 63
            && namespace
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !namespace.starts_with('-')
            && !namespace.ends_with('-');
        if !label {
            Err(format!(
                "`{s}`: a controller's state is `k8s://NAMESPACE[@CONTEXT]`, NAMESPACE a \
                 Kubernetes namespace's name"
            ))
        } else if context == Some("") {
            Err(format!("`{s}`: no context after `@`"))
        } else {
            Ok(Self {
                namespace: namespace.to_owned(),
                context: context.map(str::to_owned),
            })
        }
    }

    /// A session with the leading replica's pod, through the user's
    /// kubeconfig.
    pub(super) fn session(&self) -> Result<PodSession, String> {
        let failed = |e: String| format!("the controller in {}: {e}", self.namespace);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| failed(format!("cannot start the Kubernetes client: {e}")))?;
        let (client, pod) = rt
            .block_on(async {
                let cluster = crate::k8s::client::connect(None, self.context.as_deref()).await?;
                let server = cluster.server.clone();
                let pod = leader(&cluster.client, &self.namespace)
                    .await
                    .map_err(|e| format!("the Kubernetes API server {server}: {e}"))?;
                Ok::<_, String>((cluster.client, pod))
            })
            .map_err(failed)?;
        Ok(PodSession {
            rt,
            client,
            namespace: self.namespace.clone(),
            pod,
        })
    }
}

/// The leading replica's pod, and the runtime its client lives in.
pub(super) struct PodSession {
    rt: tokio::runtime::Runtime,
    client: kube::Client,
    namespace: String,
    pod: String,
}

impl Session for PodSession {
    fn exec(
        &mut self,
        argv: Vec<String>,
        input: Option<Input>,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Result<i32, String> {
        self.rt.block_on(exec(
            &self.client,
            &self.namespace,
            &self.pod,
            argv,
            input,
            stdout,
            stderr,
        ))
    }

    fn name(&self) -> String {
        format!("pod {}", self.pod)
    }

    /// The container's own log, followed while it runs when `follow`.
    fn controller_log(&mut self, follow: bool, out: &mut dyn Write) -> Result<(), String> {
        let pod = self.pod.clone();
        self.rt.block_on(async {
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
            let params = LogParams {
                container: Some(CONTAINER.into()),
                follow,
                ..LogParams::default()
            };
            let failed = |e: kube::Error| {
                format!("the log of pod {pod}: {}", crate::k8s::retry::describe(&e))
            };
            let mut stream = pods.log_stream(&pod, &params).await.map_err(failed)?;
            let mut buf = vec![0; 64 << 10];
            loop {
                let n = futures::AsyncReadExt::read(&mut stream, &mut buf)
                    .await
                    .map_err(|e| format!("the log of pod {pod}: {e}"))?;
                if n == 0 {
                    return Ok(());
                }
                out.write_all(&buf[..n])
                    .and_then(|()| out.flush())
                    .map_err(|e| format!("writing the log: {e}"))?;
            }
        })
    }
}

/// As the command line names it: `k8s://NAMESPACE[@CONTEXT]`.
impl std::fmt::Display for K8s {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}", self.namespace)?;
        match &self.context {
            Some(context) => write!(f, "@{context}"),
            None => Ok(()),
        }
    }
}

/// The pod of the replica that holds the Lease in `namespace`. A user
/// who may not read the Lease (the Role `skyc-runner` does not grant it)
/// is given a running pod of the controller instead: every replica reads
/// the same state, and a group one records is taken on by the leader.
pub async fn leader(client: &kube::Client, namespace: &str) -> Result<String, String> {
    let timed = |_| {
        format!(
            "the API server did not answer within {} s",
            crate::k8s::client::PROBE_TIMEOUT.as_secs()
        )
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lease = tokio::time::timeout(crate::k8s::client::PROBE_TIMEOUT, leases.get_opt(LEASE))
        .await
        .map_err(timed)?;
    let lease = match lease {
        Ok(lease) => lease,
        Err(kube::Error::Api(e)) if e.code == 403 => {
            return running_pod(client, namespace).await;
        }
        Err(e) => return Err(format!("its Lease: {}", crate::k8s::retry::describe(&e))),
    };
    lease
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
        .ok_or_else(no_leader)
}

fn no_leader() -> String {
    "no replica leads (`skyc controller status` shows why; \
     `skyc controller up` starts one)"
        .to_owned()
}

/// A running pod of the controller, by its label.
async fn running_pod(client: &kube::Client, namespace: &str) -> Result<String, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let selector = format!(
        "app.kubernetes.io/name={}",
        skyc_targets::k8s::controller::NAME
    );
    let listed = tokio::time::timeout(
        crate::k8s::client::PROBE_TIMEOUT,
        pods.list(&kube::api::ListParams::default().labels(&selector)),
    )
    .await
    .map_err(|_| {
        format!(
            "the API server did not answer within {} s",
            crate::k8s::client::PROBE_TIMEOUT.as_secs()
        )
    })?
    .map_err(|e| format!("its pods: {}", crate::k8s::retry::describe(&e)))?;
    let mut running: Vec<String> = listed
        .items
        .into_iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect();
    running.sort();
    running.into_iter().next().ok_or_else(no_leader)
}

/// Runs `argv` in `pod`'s controller container: `stdin` is written and
/// the session's input then held open until the command ends (closing it
/// ends a command run through [`ANSWER`]); stdout and stderr are copied
/// as they come. Answers the exit status. The session ends with the
/// command's status, or when the connection does, whatever is still
/// being written: a command that stopped reading its input, or a network
/// gone, never leaves the client waiting.
pub async fn exec(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
    argv: Vec<String>,
    mut stdin: Option<Input>,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> Result<i32, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let params = AttachParams::default()
        .container(CONTAINER)
        .stdin(true)
        .stdout(true)
        .stderr(true)
        .max_stdin_buf_size(STDIN_BUFFER);
    let mut attached = pods.exec(pod, argv, &params).await.map_err(|e| match &e {
        kube::Error::Api(s) if s.code == 404 => {
            format!("pod {pod} is not there: no replica leads (`skyc controller status` shows why)")
        }
        _ => format!("exec in pod {pod}: {}", crate::k8s::retry::describe(&e)),
    })?;
    let status = attached.take_status();
    let mut input = attached.stdin();
    let mut out = attached.stdout();
    let mut err = attached.stderr();
    // The input is written while the output is read: neither waits on
    // the other. It is never shut down (on a session without the v5
    // protocol kube ends the whole session there): the commands fed input
    // read what they need and no more.
    let write = async {
        if let (Some(w), Some(chunks)) = (input.as_mut(), stdin.as_mut()) {
            while let Some(chunk) = chunks.recv().await {
                let chunk = chunk.map_err(Sent::Unread)?;
                w.write_all(&chunk).await.map_err(Sent::Failed)?;
            }
            w.flush().await.map_err(Sent::Failed)?;
        }
        Ok(())
    };
    let copy = async {
        let (mut out_buf, mut err_buf) = (vec![0u8; 16 << 10], vec![0u8; 16 << 10]);
        let (mut out_open, mut err_open) = (out.is_some(), err.is_some());
        while out_open || err_open {
            tokio::select! {
                n = read(out.as_mut(), &mut out_buf), if out_open => match n {
                    0 => out_open = false,
                    n => stdout.write_all(&out_buf[..n]).and_then(|()| stdout.flush())?,
                },
                n = read(err.as_mut(), &mut err_buf), if err_open => match n {
                    0 => err_open = false,
                    n => stderr.write_all(&err_buf[..n]).and_then(|()| stderr.flush())?,
                },
            }
        }
        std::io::Result::Ok(())
    };
    // Resolves with the command's status, or `None` once kube's session
    // has ended without one.
    let status = async move {
        match status {
            Some(status) => status.await,
            None => None,
        }
    };
    tokio::pin!(write, copy, status);
    let (mut written, mut copied) = (None, false);
    let status = loop {
        tokio::select! {
            w = &mut write, if written.is_none() => match w {
                // The rest of the input cannot be had: the session is
                // dropped, so the command sees its input end.
                Err(Sent::Unread(e)) => return Err(e),
                w => written = Some(w),
            },
            c = &mut copy, if !copied => match c {
                Ok(()) => copied = true,
                // Nobody reads what it prints here: the session is
                // dropped, and the command with it.
                Err(_) => return Ok(CLOSED_OUTPUT),
            },
            s = &mut status => break s,
        }
    };
    if !copied
        && tokio::time::timeout(OUTPUT_AFTER_STATUS, &mut copy)
            .await
            .is_ok_and(|c| c.is_err())
    {
        return Ok(CLOSED_OUTPUT);
    }
    match exit_code(status.as_ref()) {
        Some(code) => code,
        None => Err(match written {
            Some(Err(Sent::Failed(e))) => format!("sending to pod {pod}: {e}"),
            _ => format!("pod {pod} ended the session without the command's status"),
        }),
    }
}

/// Why an exec's input was not all sent.
enum Sent {
    /// Not to be had here (a snapshot that cannot be read).
    Unread(String),
    /// The session would not take it.
    Failed(std::io::Error),
}

async fn read(stream: Option<&mut (impl tokio::io::AsyncRead + Unpin)>, buf: &mut [u8]) -> usize {
    match stream {
        Some(s) => s.read(buf).await.unwrap_or(0),
        None => 0,
    }
}

/// The exit status an exec's `Status` carries: `Success` is 0, a
/// command that exited otherwise is its code (`NonZeroExitCode`, the
/// code in its causes); any other failure (the container gone, the
/// command not found) is an error.
fn exit_code(
    status: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Status>,
) -> Option<Result<i32, String>> {
    let status = status?;
    if status.status.as_deref() == Some("Success") {
        return Some(Ok(0));
    }
    let code = status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.reason.as_deref() == Some("ExitCode"))
        .and_then(|c| c.message.as_deref()?.parse().ok());
    Some(match (status.reason.as_deref(), code) {
        (Some("NonZeroExitCode"), Some(code)) => Ok(code),
        _ => Err(status
            .message
            .clone()
            .unwrap_or_else(|| "the command failed".into())),
    })
}

/// The exec against the fake API server on a loopback port, its command
/// a process of this machine.
#[cfg(test)]
mod exec_tests {
    use super::*;
    use crate::k8s::FakeCluster;
    use std::time::{Duration, Instant};

    fn client(cluster: &FakeCluster) -> kube::Client {
        let mut config = kube::Config::new(cluster.url().parse().unwrap());
        config.default_namespace = "team".into();
        kube::Client::try_from(config).unwrap()
    }

    /// Input that cannot be had whole ends the session at once, though the
    /// command still waits for the rest of it (`cat`): the client is not
    /// left waiting, nor the command.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn input_that_cannot_be_read_ends_the_session() {
        let cluster = FakeCluster::start();
        let dir = std::env::temp_dir().join(format!("skyc-exec-{}", std::process::id()));
        cluster.controller_pod("pod-0", std::path::Path::new("/nonexistent"), &dir);
        let (to, input) = tokio::sync::mpsc::channel(4);
        to.send(Ok(vec![b'x'; 100_000])).await.unwrap();
        to.send(Err("reading the snapshots to send: gone".into()))
            .await
            .unwrap();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let asked = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(20),
            exec(
                &client(&cluster),
                "team",
                "pod-0",
                vec!["cat".into()],
                Some(input),
                &mut out,
                &mut err,
            ),
        )
        .await
        .expect("the exec ended");
        assert_eq!(answer, Err("reading the snapshots to send: gone".into()));
        assert!(asked.elapsed() < Duration::from_secs(10));
    }

    /// A command's output, its errors and its exit status come back; a
    /// command that stops reading its input in the middle answers all
    /// the same (its status, or the session's end: never a wait).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_command_that_stops_reading_ends_the_session() {
        let cluster = FakeCluster::start();
        let dir = std::env::temp_dir().join(format!("skyc-exec2-{}", std::process::id()));
        cluster.controller_pod("pod-0", std::path::Path::new("/nonexistent"), &dir);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = exec(
            &client(&cluster),
            "team",
            "pod-0",
            ["sh", "-c", "echo out; echo err >&2; exit 3"]
                .map(str::to_owned)
                .to_vec(),
            None,
            &mut out,
            &mut err,
        )
        .await;
        assert_eq!(code, Ok(3));
        assert_eq!((&out[..], &err[..]), (&b"out\n"[..], &b"err\n"[..]));
        let (to, input) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            for _ in 0..512 {
                if to.send(Ok(vec![b'x'; 64 << 10])).await.is_err() {
                    return;
                }
            }
        });
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let answer = tokio::time::timeout(
            Duration::from_secs(20),
            exec(
                &client(&cluster),
                "team",
                "pod-0",
                ["head", "-c", "10"].map(str::to_owned).to_vec(),
                Some(input),
                &mut out,
                &mut err,
            ),
        )
        .await
        .expect("the exec ended");
        match answer {
            Ok(code) => assert_eq!(code, 0),
            Err(e) => assert!(e.contains("without the command's status"), "{e}"),
        }
    }
}
