//! The cluster's exec ([`KubeExec`]: kube's WebSocket client) against a
//! loopback server that speaks the API server's exec protocol: the
//! upgrade of `GET .../pods/NAME/exec?command=...`, the subprotocol
//! (`v4.channel.k8s.io`, or `v5` with its stdin close), frames tagged by
//! channel (0 stdin, 1 stdout, 3 the JSON `Status`), and the command run
//! in bash as the kubelet would run it in the container, with
//! `/tmp/skyc` moved to a directory of the test. So the job scripts go
//! through kube's real client and the same bytes a cluster would carry.
//!
//! Not covered: an API server's authentication, the kubelet's
//! streaming proxy and its timeouts, and proxies that refuse upgrades.

use crate::k8s::exec::{Command, ExecError, KubeExec, PodExec, Timed};
use crate::k8s::job_scripts::{self, Started, State};
use futures::{SinkExt, StreamExt};
use std::path::{Path, PathBuf};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};

/// What the server answers an upgrade with.
#[derive(Clone, Copy)]
enum Answer {
    /// Upgrades with this subprotocol and runs the command.
    Run(&'static str),
    /// Refuses the upgrade with this HTTP status.
    Refuse(u16),
}

/// The `command` parameters of an exec request, in order.
fn command_of(request: &Request) -> Vec<String> {
    request
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k == "command")
        .map(|(_, v)| super::front::unescape(v))
        .collect()
}

/// Serves execs on a loopback port until the test ends; answers the
/// server's URL. Every request's path and query is kept in `seen`.
async fn serve(
    root: PathBuf,
    answer: Answer,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let root = root.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut argv = Vec::new();
                // tungstenite's callback type: its error is an HTTP response.
                #[allow(clippy::result_large_err)]
                let callback = |request: &Request, mut response: Response| {
                    seen.lock().unwrap().push(request.uri().to_string());
                    argv = command_of(request);
                    match answer {
                        Answer::Refuse(code) => {
                            let mut refused = ErrorResponse::new(Some(format!(
                                r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"refused","code":{code}}}"#
                            )));
                            *refused.status_mut() = http::StatusCode::from_u16(code).unwrap();
                            Err(refused)
                        }
                        Answer::Run(protocol) => {
                            response.headers_mut().insert(
                                "Sec-WebSocket-Protocol",
                                http::HeaderValue::from_static(protocol),
                            );
                            Ok(response)
                        }
                    }
                };
                let Ok(ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
                    return;
                };
                let Answer::Run(protocol) = answer else {
                    return;
                };
                run(ws, argv, &root, protocol == "v5.channel.k8s.io").await;
            });
        }
    });
    url
}

/// Runs `argv` as the kubelet would, its stdin and stdout on the
/// session's channels, then sends its `Status` and closes.
async fn run(
    ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    argv: Vec<String>,
    root: &Path,
    v5: bool,
) {
    let (mut tx, mut rx) = ws.split();
    let mut args = argv.clone();
    if args.len() > 2 {
        args[2] = args[2].replace("/tmp/skyc", &root.display().to_string());
    }
    let mut child = tokio::process::Command::new(&args[0])
        .args(&args[1..])
        .env("HOME", root)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take().unwrap();
    let mut buf = vec![0u8; 8192];
    let mut out_open = true;
    loop {
        tokio::select! {
            n = stdout.read(&mut buf), if out_open => {
                match n {
                    Ok(0) | Err(_) => out_open = false,
                    Ok(n) => {
                        let mut frame = vec![1u8];
                        frame.extend_from_slice(&buf[..n]);
                        if tx.send(Message::binary(frame)).await.is_err() {
                            break;
                        }
                    }
                }
            }
            msg = rx.next() => match msg {
                Some(Ok(Message::Binary(data))) if data.first() == Some(&0) => {
                    if let Some(w) = stdin.as_mut() {
                        let _ = w.write_all(&data[1..]).await;
                    }
                }
                // v5: the client closed its stdin.
                Some(Ok(Message::Binary(data))) if v5 && data.first() == Some(&255) => {
                    stdin = None;
                }
                // The API server ends the session on the client's close
                // (why the client keeps stdin open on v4).
                Some(Ok(Message::Close(_))) => break,
                Some(Ok(_)) => {}
                // The session is gone: so is the command's stdin.
                None | Some(Err(_)) => {
                    stdin = None;
                    if !out_open {
                        break;
                    }
                }
            },
            status = child.wait(), if !out_open => {
                let code = status.ok().and_then(|s| s.code()).unwrap_or(137);
                let status = if code == 0 {
                    r#"{"metadata":{},"status":"Success"}"#.to_owned()
                } else {
                    format!(
                        r#"{{"metadata":{{}},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [...], exit code {code}","reason":"NonZeroExitCode","details":{{"causes":[{{"reason":"ExitCode","message":"{code}"}}]}}}}"#
                    )
                };
                let mut frame = vec![3u8];
                frame.extend_from_slice(status.as_bytes());
                let _ = tx.send(Message::binary(frame)).await;
                let _ = tx.close().await;
                break;
            }
        }
    }
}

struct Scene {
    root: PathBuf,
    exec: Timed<KubeExec>,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

async fn scene(name: &str, answer: Answer) -> Scene {
    let root = std::env::temp_dir().join(format!("skyc-ws-exec-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let seen = std::sync::Arc::default();
    let url = serve(root.clone(), answer, std::sync::Arc::clone(&seen)).await;
    let config = kube::Config::new(url.parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    Scene {
        root,
        exec: Timed(KubeExec(client), std::time::Duration::from_secs(20)),
        seen,
    }
}

impl Scene {
    async fn exec(&self, command: Command) -> Result<String, ExecError> {
        self.exec.exec("team", "pool-1-trainers-0-0", command).await
    }

    /// Polls until the attempt in `dir` has ended.
    async fn wait_exit(&self, dir: &str) -> (State, Vec<u8>) {
        for _ in 0..200 {
            let out = self.exec(job_scripts::poll(dir, 0)).await.unwrap();
            let (state, log) = job_scripts::parse_poll(&out).unwrap();
            if matches!(state, State::Exited(_)) {
                return (state, log);
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("the job did not end");
    }
}

/// A job started, read and signalled through kube's WebSocket exec, on
/// each protocol: started once, its secret in its environment and not
/// in any request's URL, its `run` larger than a URL carries, its exit
/// and log read back.
#[tokio::test]
async fn a_job_starts_once_and_is_read_through_the_websocket_exec() {
    for protocol in ["v4.channel.k8s.io", "v5.channel.k8s.io"] {
        let s = scene(&protocol[..2], Answer::Run(protocol)).await;
        std::fs::write(s.root.join("ready"), "").unwrap();
        std::fs::write(s.root.join("env"), "declare -x FROM_SETUP=\"yes\"\n").unwrap();
        let dir = format!("{}/jobs/4.0", s.root.display());
        let filler = format!("# {}\n", "x".repeat(1000)).repeat(200);
        let run = format!("{filler}echo \"$FROM_SETUP $TOKEN $SKYPILOT_JOB_RANK\"; exit 3");
        let env = vec![
            ("TOKEN".to_owned(), "s3cr3t-'\"$(x)".to_owned()),
            ("SKYPILOT_JOB_RANK".to_owned(), "1".to_owned()),
        ];
        let out = s.exec(job_scripts::start(&dir, &run, &env)).await.unwrap();
        assert_eq!(
            job_scripts::parse_start(&out),
            Some(Started::Yes),
            "{protocol}"
        );
        // Given again: nothing more starts.
        let out = s.exec(job_scripts::start(&dir, &run, &env)).await.unwrap();
        assert_eq!(out.trim(), "already", "{protocol}");
        let (state, log) = s.wait_exit(&dir).await;
        assert_eq!(state, State::Exited(3), "{protocol}");
        assert_eq!(
            String::from_utf8(log).unwrap(),
            "yes s3cr3t-'\"$(x) 1\n",
            "{protocol}"
        );
        let seen = s.seen.lock().unwrap().clone();
        assert!(seen.iter().any(|u| u.contains("skyc-start")), "{seen:?}");
        assert!(
            seen.iter().all(|u| !u.contains("s3cr3t") && u.len() < 8192),
            "{protocol}: {seen:?}"
        );
    }
}

/// A job that runs is stopped by SIGTERM sent through the exec.
#[tokio::test]
async fn a_job_is_signalled_through_the_websocket_exec() {
    let s = scene("signal", Answer::Run("v4.channel.k8s.io")).await;
    std::fs::write(s.root.join("ready"), "").unwrap();
    std::fs::write(s.root.join("env"), "").unwrap();
    let dir = format!("{}/jobs/5.0", s.root.display());
    s.exec(job_scripts::start(&dir, "sleep 30", &[]))
        .await
        .unwrap();
    s.exec(job_scripts::signal(&dir, false)).await.unwrap();
    let (state, _) = s.wait_exit(&dir).await;
    assert_eq!(state, State::Exited(143));
}

/// A command that fails is the exec's failure (the `Status` on channel
/// 3), asked again later; one that ends without reading its input
/// answers; an upgrade refused is told by its status:
/// 404 the pod gone, 403 denied.
#[tokio::test]
async fn failures_and_refusals_are_told_apart() {
    let s = scene("fail", Answer::Run("v4.channel.k8s.io")).await;
    let failed = s
        .exec(Command {
            argv: vec!["bash".into(), "-c".into(), "exit 2".into()],
            stdin: None,
        })
        .await;
    match failed {
        Err(ExecError::Failed(why)) => assert!(why.contains("exit code 2"), "{why}"),
        other => panic!("{other:?}"),
    }
    // A command that ends without reading its input: an answer at once,
    // never a writer left waiting on a session that has ended. (The
    // answer itself may be lost: a server closing a connection with
    // input unread resets it, and the status with it.)
    let asked = std::time::Instant::now();
    let unread = s
        .exec(Command {
            argv: vec!["bash".into(), "-c".into(), "echo early".into()],
            stdin: Some(vec![b'x'; 1 << 20]),
        })
        .await;
    assert!(asked.elapsed() < std::time::Duration::from_secs(10));
    match unread {
        Ok(out) => assert_eq!(out, "early\n"),
        Err(ExecError::Failed(why)) => assert!(!why.contains("did not answer"), "{why}"),
        other => panic!("{other:?}"),
    }
    for (code, gone, denied) in [(404, true, false), (403, false, true)] {
        let s = scene(&format!("refuse{code}"), Answer::Refuse(code)).await;
        let answer = s.exec(job_scripts::poll("/tmp/skyc/jobs/1.0", 0)).await;
        assert_eq!(
            (
                matches!(answer, Err(ExecError::Gone(_))),
                matches!(answer, Err(ExecError::Denied(_)))
            ),
            (gone, denied),
            "{code}: {answer:?}"
        );
    }
}
