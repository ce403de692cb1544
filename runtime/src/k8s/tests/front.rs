//! The fake API server ([`super::fake`]) on a loopback port, for clients
//! that are processes of their own: the command line's tests of a
//! controller (`tests/k8s/client.rs`, through the `fake-cluster`
//! feature). Every request is the fake's, as kube's client sends it over
//! HTTP, but `pods/exec` in a controller's pod: the front upgrades it as
//! the API server does (WebSocket, `v4.channel.k8s.io`: stdin on channel
//! 0, stdout 1, stderr 2, the `Status` on 3) and runs the command as a
//! process of this machine, `skyc` being the binary under test and the
//! pod's `/var/lib/skyc` (its claim) a directory of the test; the
//! process's input closes when the session does, as a container's does.
//!
//! The controller's replica runs on a thread of the test process, as in
//! [`super::controller`], fenced by its Lease on the fake; a thread plays
//! the cluster's controllers every 20 ms ([`super::driver::turn`]): a
//! group's pods run until the test ends them ([`FakeCluster::exit`]).
//!
//! Not covered: TLS and authentication (the client's kubeconfig names an
//! `http://` server and a token nobody checks), the API server's proxy
//! of exec through the kubelet, and a controller in a pod of its own
//! (its in-cluster configuration is tested apart:
//! `k8s::client::in_cluster`).

use super::fake::{Fake, FakeBody, NS};
use crate::controller::{self, Ended, Replica};
use crate::k8s::lease::Timing;
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;
use skyc_targets::k8s::controller::NAME;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tower_service::Service;

/// Faults of requests through the port: method, path, code, how many.
type Faults = Arc<Mutex<Vec<(String, String, u16, u32)>>>;

type Halts = Arc<Mutex<Vec<(String, Arc<AtomicBool>)>>>;

/// Every exec in a controller's pod: its argv, and the input it was sent.
type Execs = Arc<Mutex<Vec<(Vec<String>, Vec<u8>)>>>;

/// What a controller's pod runs its commands as.
#[derive(Clone)]
struct Pod {
    skyc: PathBuf,
    state_dir: PathBuf,
}

/// The fake cluster behind a loopback port, with a controller.
pub struct FakeCluster {
    fake: Fake,
    url: String,
    pods: Arc<Mutex<BTreeMap<String, Pod>>>,
    execs: Execs,
    faults: Faults,
    /// Each replica's pod and what stops it.
    halts: Halts,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    replica: Option<(Arc<AtomicBool>, JoinHandle<std::io::Result<Ended>>)>,
}

impl FakeCluster {
    /// Serves the fake on `127.0.0.1`, its controllers turning.
    pub fn start() -> Self {
        let fake = Fake::default();
        fake.world().wall_clock = true;
        let pods: Arc<Mutex<BTreeMap<String, Pod>>> = Arc::default();
        let execs: Execs = Arc::default();
        let faults: Faults = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        listener.set_nonblocking(true).expect("non-blocking");
        let serving = {
            let served = Served {
                fake: fake.clone(),
                pods: pods.clone(),
                execs: execs.clone(),
                faults: faults.clone(),
            };
            let stop = stop.clone();
            std::thread::spawn(move || serve(listener, served, stop))
        };
        let halts: Halts = Arc::default();
        let turning = {
            let (fake, stop, halts) = (fake.clone(), stop.clone(), halts.clone());
            std::thread::spawn(move || {
                let mut deployed = false;
                while !stop.load(Ordering::SeqCst) {
                    let mut w = fake.world();
                    super::driver::turn(&mut w);
                    // The Deployment controller and the garbage collector:
                    // the controller's pods end with their Deployment,
                    // which goes once they have.
                    let deployment = w.get("deployments", NAME).cloned();
                    let deleting = deployment
                        .as_ref()
                        .is_some_and(|d| !d["metadata"]["deletionTimestamp"].is_null());
                    if deleting || (deployed && deployment.is_none()) {
                        for (pod, halt) in std::mem::take(&mut *halts.lock().unwrap()) {
                            halt.store(true, Ordering::SeqCst);
                            w.remove("pods", &pod);
                        }
                        w.remove("deployments", NAME);
                    }
                    deployed = deployment.is_some() && !deleting;
                    drop(w);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        Self {
            fake,
            url,
            pods,
            execs,
            faults,
            halts,
            stop,
            threads: vec![serving, turning],
            replica: None,
        }
    }

    /// A kubeconfig whose current context is this cluster, in its
    /// namespace.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             contexts:\n- name: fake\n  context: {{cluster: fake, user: u, namespace: {NS}}}\n\
             current-context: fake\nusers:\n- name: u\n  user: {{token: t}}\n",
            self.url
        )
    }

    /// The namespace everything is in.
    pub fn namespace(&self) -> &'static str {
        NS
    }

    /// The server's URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Starts the controller: its pod `pod` (whose commands run `skyc`,
    /// its claim `state_dir`) and its replica, leading once this returns.
    pub fn controller(&mut self, pod: &str, skyc: &Path, state_dir: &Path) {
        self.controller_pod(pod, skyc, state_dir);
        self.replica(pod, state_dir);
    }

    /// The controller's pod `pod` (whose commands run `skyc`, its claim
    /// `state_dir`), running, and nothing else: its replica is the
    /// caller's (a process of its own, or [`Self::hold_lease`]).
    pub fn controller_pod(&self, pod: &str, skyc: &Path, state_dir: &Path) {
        self.fake.world().put(
            "pods",
            json!({
                "metadata": {"name": pod, "labels": {"app.kubernetes.io/name": "skyc-controller"}},
                "spec": {"containers": [{"name": skyc_targets::k8s::controller::CONTAINER, "image": "skyc"}]},
                "status": {"phase": "Running"}
            }),
        );
        self.pods.lock().unwrap().insert(
            pod.to_owned(),
            Pod {
                skyc: skyc.to_owned(),
                state_dir: state_dir.to_owned(),
            },
        );
    }

    /// Starts a replica of the controller for pod `pod` on a thread of
    /// this process; it leads once this returns.
    fn replica(&mut self, pod: &str, state_dir: &Path) {
        let halt = Arc::new(AtomicBool::new(false));
        let thread = {
            let (fake, dir, me, halt) = (
                self.fake.clone(),
                state_dir.to_owned(),
                pod.to_owned(),
                halt.clone(),
            );
            std::thread::spawn(move || {
                let leases = {
                    let fake = fake.clone();
                    move || Ok(kube::api::Api::namespaced(kube::Client::new(fake, NS), NS))
                };
                let replica = Replica {
                    identity: me,
                    lease: skyc_targets::k8s::controller::LEASE.into(),
                    timing: Timing {
                        duration: Duration::from_secs(3),
                        renew_deadline: Duration::from_secs(2),
                        retry: Duration::from_millis(200),
                    },
                };
                controller::serve(
                    &dir,
                    leases,
                    |fence| super::driver::fenced(&fake, fence),
                    &replica,
                    crate::k8s::Tuning {
                        logs: true,
                        ..super::driver::tuning()
                    },
                    halt,
                )
            })
        };
        self.halts
            .lock()
            .unwrap()
            .push((pod.to_owned(), halt.clone()));
        self.replica = Some((halt, thread));
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.leader().as_deref() != Some(pod) {
            assert!(Instant::now() < deadline, "the controller does not lead");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The controller's pod replaced by `pod`, as its Deployment does on
    /// a change of its template (`Recreate`): the running replica ends
    /// without releasing the Lease, its pod goes, the new one starts.
    pub fn replace_controller(&mut self, pod: &str, skyc: &Path, state_dir: &Path) {
        if let Some((halt, thread)) = self.replica.take() {
            halt.store(true, Ordering::SeqCst);
            let _ = thread.join();
        }
        for (old, _) in std::mem::take(&mut *self.halts.lock().unwrap()) {
            self.fake.world().remove("pods", &old);
            self.pods.lock().unwrap().remove(&old);
        }
        self.controller(pod, skyc, state_dir);
    }

    /// The Lease held by `pod`, renewed now: a leader as clients find it.
    pub fn hold_lease(&self, pod: &str) {
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string();
        self.fake.world().put(
            "leases",
            json!({
                "metadata": {"name": skyc_targets::k8s::controller::LEASE},
                "spec": {"holderIdentity": pod, "leaseDurationSeconds": 15,
                         "acquireTime": now, "renewTime": now}
            }),
        );
    }

    /// The Lease's holder.
    pub fn leader(&self) -> Option<String> {
        self.fake
            .world()
            .get("leases", skyc_targets::k8s::controller::LEASE)
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
    }

    /// Every exec in a controller's pod so far: its argv (as the pod
    /// runs it) and the input it was sent.
    pub fn execs(&self) -> Vec<(Vec<String>, Vec<u8>)> {
        self.execs.lock().unwrap().clone()
    }

    /// The next `times` requests `method` of a path containing `path`
    /// that come through the port (the command line's, not the
    /// replica's) are answered `code`.
    pub fn fail(&self, method: &str, path: &str, code: u16, times: u32) {
        self.faults
            .lock()
            .unwrap()
            .push((method.to_owned(), path.to_owned(), code, times));
    }

    /// The object `resource/name`, as the API server holds it.
    pub fn object(&self, resource: &str, name: &str) -> Option<serde_json::Value> {
        self.fake.world().get(resource, name).cloned()
    }

    /// The names of the pods there now.
    pub fn pods(&self) -> Vec<String> {
        self.fake.world().names("pods")
    }

    /// How many pods run.
    pub fn running_pods(&self) -> usize {
        let w = self.fake.world();
        w.names("pods")
            .iter()
            .filter(|p| {
                w.get("pods", p)
                    .is_some_and(|p| p["status"]["phase"] == "Running")
            })
            .count()
    }

    /// Whether pod `pod`'s container runs.
    pub fn running(&self, pod: &str) -> bool {
        self.fake
            .world()
            .get("pods", pod)
            .is_some_and(|p| p["status"]["phase"] == "Running")
    }

    /// Every pod the API server created, in order.
    pub fn created_pods(&self) -> Vec<String> {
        self.fake.world().created_pods()
    }

    /// What pod `pod`'s log holds.
    pub fn log(&self, pod: &str, log: &str) {
        self.fake
            .world()
            .logs
            .insert(pod.to_owned(), log.to_owned());
    }

    /// Pod `pod`'s container writes `log` and exits with `code`.
    pub fn exit(&self, pod: &str, log: &str, code: i32) {
        let mut w = self.fake.world();
        w.logs.insert(pod.to_owned(), log.to_owned());
        w.exit(pod, code);
    }

    /// Pod `pod`'s readiness probe succeeds: a pool's worker has run its
    /// setup.
    pub fn ready(&self, pod: &str) {
        self.fake.world().probe_succeeds(pod);
    }

    /// The jobs started in pods (a pool's, through `pods/exec`): each
    /// one's pod and `SKYPILOT_JOB_RANK`, while it runs.
    pub fn running_jobs(&self) -> Vec<(String, String)> {
        let mut jobs: Vec<(String, String)> = self
            .fake
            .world()
            .job_processes()
            .into_iter()
            .filter(|p| p.exit.is_none() && !p.vanished)
            .map(|p| {
                let rank = p
                    .env
                    .iter()
                    .find(|(k, _)| k == "SKYPILOT_JOB_RANK")
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                (p.pod, rank)
            })
            .collect();
        jobs.sort();
        jobs
    }

    /// How many jobs were ever started in pods.
    pub fn started_jobs(&self) -> usize {
        self.fake.world().job_processes().len()
    }

    /// The first attempt of job `job` (its group's id) in pod `pod` ends
    /// with `code`.
    pub fn job_exits(&self, pod: &str, job: i64, code: i32) {
        let dir = crate::k8s::job_scripts::attempt_dir(job, 0);
        self.fake.world().job_exits(pod, &dir, code);
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        if let Some((halt, thread)) = self.replica.take() {
            halt.store(true, Ordering::SeqCst);
            let _ = thread.join();
        }
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// What the port answers with.
#[derive(Clone)]
struct Served {
    fake: Fake,
    pods: Arc<Mutex<BTreeMap<String, Pod>>>,
    execs: Execs,
    faults: Faults,
}

/// Answers connections until `stop`.
fn serve(listener: std::net::TcpListener, served: Served, stop: Arc<AtomicBool>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("the front's runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
        while !stop.load(Ordering::SeqCst) {
            let Ok(Ok((stream, _))) =
                tokio::time::timeout(Duration::from_millis(100), listener.accept()).await
            else {
                continue;
            };
            // As Go's servers (the API server's) do.
            let _ = stream.set_nodelay(true);
            let served = served.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let served = served.clone();
                    async move { Ok::<_, std::convert::Infallible>(answer(req, served).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
}

async fn answer(req: Request<hyper::body::Incoming>, mut served: Served) -> Response<FakeBody> {
    let path = req.uri().path().to_owned();
    let fault = {
        let mut faults = served.faults.lock().unwrap();
        faults
            .iter_mut()
            .find(|(method, part, _, left)| {
                *left > 0 && req.method().as_str() == method && path.contains(part.as_str())
            })
            .map(|fault| {
                fault.3 -= 1;
                fault.2
            })
    };
    if let Some(code) = fault {
        return status(StatusCode::from_u16(code).expect("a status"), "refused");
    }
    if let Some(pod) = path
        .strip_prefix(&format!("/api/v1/namespaces/{NS}/pods/"))
        .and_then(|p| p.strip_suffix("/exec"))
    {
        let Some(pod) = served.pods.lock().unwrap().get(pod).cloned() else {
            return status(StatusCode::NOT_FOUND, "pods not found");
        };
        return upgrade(req, pod, served.execs);
    }
    let (parts, body) = req.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let req = Request::from_parts(parts, kube::client::Body::from(bytes.to_vec()));
    match served.fake.call(req).await {
        Ok(response) => response,
        Err(e) => status(StatusCode::SERVICE_UNAVAILABLE, &e.to_string()),
    }
}

fn status(code: StatusCode, message: &str) -> Response<FakeBody> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "message": message, "code": code.as_u16()});
    let mut response = Response::new(FakeBody::Full(Some(Bytes::from(body.to_string()))));
    *response.status_mut() = code;
    response
}

/// The exec's upgrade, and its command run once upgraded.
fn upgrade(req: Request<hyper::body::Incoming>, pod: Pod, execs: Execs) -> Response<FakeBody> {
    use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
    let Some(key) = req.headers().get("sec-websocket-key").cloned() else {
        return status(StatusCode::BAD_REQUEST, "not an upgrade");
    };
    let argv: Vec<String> = url_query(req.uri().query().unwrap_or_default());
    tokio::spawn(async move {
        let Ok(upgraded) = hyper::upgrade::on(req).await else {
            return;
        };
        let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            hyper_util::rt::TokioIo::new(upgraded),
            tokio_tungstenite::tungstenite::protocol::Role::Server,
            None,
        )
        .await;
        run(ws, argv, &pod, &execs).await;
    });
    let mut response = Response::new(FakeBody::Full(None));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert("connection", http::HeaderValue::from_static("Upgrade"));
    headers.insert("upgrade", http::HeaderValue::from_static("websocket"));
    headers.insert(
        "sec-websocket-accept",
        http::HeaderValue::from_str(&derive_accept_key(key.as_bytes())).expect("a header"),
    );
    headers.insert(
        "sec-websocket-protocol",
        http::HeaderValue::from_static("v4.channel.k8s.io"),
    );
    response
}

/// The `command` parameters of an exec's query, in order.
fn url_query(query: &str) -> Vec<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k == "command")
        .map(|(_, v)| unescape(v))
        .collect()
}

/// Runs `argv` as the controller's pod would: its output on the
/// session's channels, its input from it, closed when the session ends.
/// It is recorded in `execs` with the input it was sent before its
/// status is: a client that has its answer finds it there.
async fn run<S>(
    ws: tokio_tungstenite::WebSocketStream<S>,
    argv: Vec<String>,
    pod: &Pod,
    execs: &Execs,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut tx, mut rx) = ws.split();
    let in_pod = skyc_targets::k8s::controller::STATE_DIR;
    let args: Vec<String> = argv
        .iter()
        .skip(1)
        .map(|a| {
            if a == in_pod {
                pod.state_dir.display().to_string()
            } else {
                a.clone()
            }
        })
        .collect();
    let program = if argv.first().map(String::as_str) == Some("skyc") {
        pod.skyc.clone()
    } else {
        PathBuf::from(argv.first().cloned().unwrap_or_default())
    };
    let spawned = tokio::process::Command::new(&program)
        .args(&args)
        .env_remove("SKYC_STATE_DIR")
        .env_remove("KUBECONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let status = json!({"metadata": {}, "status": "Failure", "reason": "InternalError",
                                "message": format!("{}: {e}", program.display())});
            let mut frame = vec![3u8];
            frame.extend_from_slice(status.to_string().as_bytes());
            let _ = tx.send(Message::binary(frame)).await;
            let _ = tx.close().await;
            return;
        }
    };
    let mut input = Vec::new();
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let (mut out_buf, mut err_buf) = (vec![0u8; 8192], vec![0u8; 8192]);
    let (mut out_open, mut err_open) = (true, true);
    loop {
        tokio::select! {
            n = stdout.read(&mut out_buf), if out_open => match n {
                Ok(0) | Err(_) => out_open = false,
                Ok(n) => {
                    let mut frame = vec![1u8];
                    frame.extend_from_slice(&out_buf[..n]);
                    if tx.send(Message::binary(frame)).await.is_err() {
                        break;
                    }
                }
            },
            n = stderr.read(&mut err_buf), if err_open => match n {
                Ok(0) | Err(_) => err_open = false,
                Ok(n) => {
                    let mut frame = vec![2u8];
                    frame.extend_from_slice(&err_buf[..n]);
                    if tx.send(Message::binary(frame)).await.is_err() {
                        break;
                    }
                }
            },
            msg = rx.next() => match msg {
                Some(Ok(Message::Binary(data))) if data.first() == Some(&0) => {
                    input.extend_from_slice(&data[1..]);
                    if let Some(w) = stdin.as_mut() {
                        let _ = w.write_all(&data[1..]).await;
                        let _ = w.flush().await;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    // The session is gone: so is the command's input.
                    stdin = None;
                    break;
                }
                Some(Ok(_)) => {}
            },
            exited = child.wait(), if !out_open && !err_open => {
                let code = exited.ok().and_then(|s| s.code()).unwrap_or(137);
                let status = if code == 0 {
                    json!({"metadata": {}, "status": "Success"})
                } else {
                    json!({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                           "message": format!("command terminated with non-zero exit code: exit code {code}"),
                           "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
                };
                execs.lock().unwrap().push((argv, input));
                let mut frame = vec![3u8];
                frame.extend_from_slice(status.to_string().as_bytes());
                let _ = tx.send(Message::binary(frame)).await;
                let _ = tx.close().await;
                // As the API server does: closed once the status is sent,
                // whatever the client is still sending.
                return;
            }
        }
    }
    // The client went away: the command sees its input end, as in a pod,
    // and is left to end on its own (killed after two minutes, longer
    // than any test waits for it to end).
    drop(stdin);
    execs.lock().unwrap().push((argv, input));
    let _ = tokio::time::timeout(Duration::from_secs(120), child.wait()).await;
}

/// `+` and `%XX` decoded, as kube's query encoder writes them.
pub(super) fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
