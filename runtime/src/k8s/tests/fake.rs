//! A fake API server inside the test: kube's client talks to it through
//! its `Service` seam (no sockets), as kube-rs's own mock tests do, but
//! with state, so a scenario reads as a script of what the cluster does.
//!
//! It keeps objects with resource versions, answers get, list, watch
//! (streamed, replaying from the requested version, `410 Gone` on
//! demand), server-side apply, merge patch (with the uid check), delete
//! (uid preconditions, foreground), update (resource-version
//! preconditions: a Lease's), discovery and the authorization
//! reviews; it records every request; it fails requests on demand
//! (codes, or no answer at all). The controllers (JobSet, Job, kubelet)
//! are script steps that write what the real ones write (labels,
//! owner references, conditions, container states): see
//! `shared/spec/kubernetes.md`, Part C, and the JobSet controller.

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use tokio::sync::mpsc;

pub(super) const NS: &str = "team";

/// A response body: whole, or streamed (a watch).
pub(super) enum FakeBody {
    Full(Option<Bytes>),
    /// Lines as they are sent, and the count of lines read (shared).
    Stream(mpsc::UnboundedReceiver<Bytes>, Arc<AtomicU64>),
}

impl http_body::Body for FakeBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            FakeBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(http_body::Frame::data(b)))),
            FakeBody::Stream(rx, read) => rx.poll_recv(cx).map(|b| {
                b.map(|b| {
                    read.fetch_add(1, Ordering::SeqCst);
                    Ok(http_body::Frame::data(b))
                })
            }),
        }
    }
}

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub(super) struct Seen {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) query: String,
    pub(super) content_type: String,
    pub(super) body: Option<Value>,
    /// When it arrived (the benchmark's clock).
    #[allow(dead_code)]
    pub(super) at: std::time::Instant,
}

impl Seen {
    fn is_write(&self) -> bool {
        self.method != "GET"
    }

    /// The request in one line: method, path, and the body's essentials.
    pub(super) fn line(&self) -> String {
        let body = self.body.clone().unwrap_or(Value::Null);
        let essentials = match self.method.as_str() {
            "PATCH" if self.content_type.contains("apply-patch") => format!(
                "apply {} {} manager={}",
                body["kind"].as_str().unwrap_or("?"),
                body["metadata"]["name"].as_str().unwrap_or("?"),
                query_value(&self.query, "fieldManager").unwrap_or_default(),
            ),
            "PATCH" => {
                let mut b = body.clone();
                let uid = b["metadata"]["uid"].as_str().unwrap_or("").to_owned();
                if let Some(m) = b["metadata"].as_object_mut() {
                    m.remove("uid");
                    if m.is_empty() {
                        b.as_object_mut().map(|o| o.remove("metadata"));
                    }
                }
                format!("{b} uid={uid}")
            }
            "DELETE" => {
                let mut parts = Vec::new();
                if let Some(p) = body["propagationPolicy"].as_str() {
                    parts.push(p.to_owned());
                }
                if let Some(g) = body["gracePeriodSeconds"].as_u64() {
                    parts.push(format!("grace={g}"));
                }
                if let Some(u) = body["preconditions"]["uid"].as_str() {
                    parts.push(format!("uid={u}"));
                }
                parts.join(" ")
            }
            "POST" => body["kind"].as_str().unwrap_or("?").to_owned(),
            _ => String::new(),
        };
        format!("{} {} {essentials}", self.method, self.path)
            .trim_end()
            .to_owned()
    }
}

/// A pod's log as the API server answers it: each line written at its
/// own instant (line `i` at [`LOG_EPOCH`] + `i` × 300 ms, so lines share
/// seconds, as a busy pod's do), with its time first when
/// `timestamps=true`, from `sinceTime` on when given (the kubelet's `>=`,
/// of a whole second). What is there is answered and the answer ends,
/// followed or not: a follower asks again, from its mark. A last line
/// without its newline is one still being written.
fn log_answer(text: &str, query: &str) -> String {
    let since = query_value(query, "sinceTime")
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
    let stamps = query_value(query, "timestamps").as_deref() == Some("true");
    let mut out = String::new();
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let at = k8s_openapi::jiff::Timestamp::from_millisecond(LOG_EPOCH * 1000 + i as i64 * 300)
            .expect("a time");
        if since.is_some_and(|since| at < since) {
            continue;
        }
        if stamps {
            out.push_str(&format!("{at} "));
        }
        out.push_str(line);
    }
    out
}

/// When the fake's pods write their first line.
const LOG_EPOCH: i64 = 1_780_000_000;

fn query_value(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A request to fail.
struct Fault {
    method: String,
    path_contains: String,
    /// `None`: no answer at all (the connection fails).
    code: Option<u16>,
    left: u32,
}

struct Watcher {
    resource: String,
    selector: String,
    tx: mpsc::UnboundedSender<Bytes>,
    /// Lines sent, and read by the client.
    sent: u64,
    read: Arc<AtomicU64>,
}

/// The cluster's state and the server's record.
pub(super) struct World {
    rv: u64,
    uid: u64,
    clock: u64,
    /// By (resource, name).
    objects: BTreeMap<(String, String), Value>,
    history: Vec<(u64, String, &'static str, Value)>,
    watchers: Vec<Watcher>,
    pub(super) requests: Vec<Seen>,
    faults: Vec<Fault>,
    /// The API server does not answer anything.
    pub(super) down: bool,
    /// The API server takes requests and never answers them (a stalled
    /// connection).
    pub(super) hang: bool,
    pub(super) crd: bool,
    /// Timestamps are the real time (see [`World::now`]).
    pub(super) wall_clock: bool,
    /// `resourceRules` of the rules review.
    pub(super) rules: Value,
    pub(super) incomplete: bool,
    /// Pod logs, by pod name.
    pub(super) logs: BTreeMap<String, String>,
    /// Requests already returned by `take_writes`.
    taken: usize,
    /// Every pod the API server created, in order.
    created: Vec<String>,
    /// Pods whose node no longer answers: the kubelet never ends them.
    pub(super) unreachable: std::collections::BTreeSet<String>,
    /// What runs in pods' containers, started through `pods/exec`.
    pub(super) kubelet_exec: Processes,
    /// Kueue, queueing every JobSet of the namespace.
    pub(super) kueue: Option<Kueue>,
    /// No node fits a pod: the scheduler leaves every pending pod
    /// unschedulable, with this message.
    pub(super) no_node: Option<String>,
}

/// What Kueue would answer a JobSet's Workload now, as a namespace
/// whose Kueue manages every JobSet (`manageJobsWithoutQueueName`).
#[derive(Clone, Debug, Default)]
pub(super) struct Kueue {
    /// Why no quota is reserved (the flavor assigner's message); `None`:
    /// reserved.
    pub(super) no_quota: Option<String>,
    /// An admission check not ready yet: its name and message.
    pub(super) check: Option<(String, String)>,
}

impl Default for World {
    fn default() -> Self {
        Self {
            rv: 100,
            uid: 0,
            clock: 0,
            objects: BTreeMap::new(),
            history: Vec::new(),
            watchers: Vec::new(),
            requests: Vec::new(),
            faults: Vec::new(),
            down: false,
            hang: false,
            crd: true,
            wall_clock: false,
            rules: json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
            incomplete: false,
            logs: BTreeMap::new(),
            taken: 0,
            created: Vec::new(),
            unreachable: std::collections::BTreeSet::new(),
            kubelet_exec: Processes::default(),
            kueue: None,
            no_node: None,
        }
    }
}

/// The fake server, shared by the client and the script.
#[derive(Clone, Default)]
pub(super) struct Fake(pub Arc<Mutex<World>>);

impl Fake {
    pub(super) fn world(&self) -> MutexGuard<'_, World> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<Request<Body>> for Fake {
    type Response = Response<FakeBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let fake = self.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let body = if bytes.is_empty() {
                None
            } else {
                serde_json::from_slice(&bytes).ok()
            };
            let seen = Seen {
                method: parts.method.to_string(),
                path: parts.uri.path().to_owned(),
                query: parts.uri.query().unwrap_or("").to_owned(),
                content_type: parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned(),
                body,
                at: std::time::Instant::now(),
            };
            let hang = {
                let mut w = fake.world();
                w.requests.push(seen.clone());
                if w.down {
                    return Err("connection refused".into());
                }
                w.hang
            };
            if hang {
                return std::future::pending().await;
            }
            let mut w = fake.world();
            if let Some(f) = w.faults.iter_mut().find(|f| {
                f.left > 0 && f.method == seen.method && seen.path.contains(&f.path_contains)
            }) {
                f.left -= 1;
                match f.code {
                    None => return Err("connection reset by peer".into()),
                    Some(code) => return Ok(status(code, "Injected", "injected failure")),
                }
            }
            Ok(w.handle(&parts.method, &seen))
        })
    }
}

fn response(code: u16, body: &Value) -> Response<FakeBody> {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::OK))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(FakeBody::Full(Some(Bytes::from(body.to_string()))))
        .expect("a response")
}

fn status(code: u16, reason: &str, message: &str) -> Response<FakeBody> {
    response(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code}),
    )
}

/// RFC 7386 merge patch.
pub(super) fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let t = target.as_object_mut().expect("an object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn api_version(resource: &str) -> &'static str {
    match resource {
        "jobsets" => "jobset.x-k8s.io/v1alpha2",
        "jobs" => "batch/v1",
        "workloads" => "kueue.x-k8s.io/v1beta1",
        "leases" => "coordination.k8s.io/v1",
        "deployments" => "apps/v1",
        "roles" | "rolebindings" => "rbac.authorization.k8s.io/v1",
        _ => "v1",
    }
}

fn kind(resource: &str) -> &'static str {
    match resource {
        "jobsets" => "JobSet",
        "jobs" => "Job",
        "pods" => "Pod",
        "configmaps" => "ConfigMap",
        "secrets" => "Secret",
        "services" => "Service",
        "workloads" => "Workload",
        "persistentvolumeclaims" => "PersistentVolumeClaim",
        "leases" => "Lease",
        "deployments" => "Deployment",
        "serviceaccounts" => "ServiceAccount",
        "roles" => "Role",
        "rolebindings" => "RoleBinding",
        _ => "Unknown",
    }
}

/// A finalizer other than the garbage collector's own.
pub(super) fn has_foreign_finalizer(obj: &Value) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f != "foregroundDeletion"))
}

/// Whether `obj` matches a label selector `k=v[,k=v]` or a field
/// selector `metadata.name=x`.
fn selects(obj: &Value, selector: &str) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|term| {
        let Some((k, v)) = term.split_once('=') else {
            return true;
        };
        if k == "metadata.name" {
            obj["metadata"]["name"] == v
        } else {
            obj["metadata"]["labels"][k] == v
        }
    })
}

impl World {
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// Every watch line sent has been read by the client (or its watch
    /// was closed).
    pub(super) fn delivered(&self) -> bool {
        self.watchers
            .iter()
            .all(|w| w.tx.is_closed() || w.read.load(Ordering::SeqCst) >= w.sent)
    }

    /// The last resource version written.
    pub(super) fn version(&self) -> u64 {
        self.rv
    }

    pub(super) fn new_uid(&mut self) -> String {
        self.uid += 1;
        format!("uid-{}", self.uid)
    }

    /// A timestamp that only goes up: this machine's time (to the second,
    /// as the API server writes it) with `wall_clock`, else a counter.
    pub(super) fn now(&mut self) -> String {
        if self.wall_clock {
            return k8s_openapi::jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string();
        }
        self.clock += 1;
        format!(
            "2026-11-23T10:{:02}:{:02}Z",
            (self.clock / 60) % 60,
            self.clock % 60
        )
    }

    /// Fails the next `times` requests of `method` whose path contains
    /// `path`: with `code`, or with no answer when `None`.
    pub(super) fn fail(&mut self, method: &str, path: &str, code: Option<u16>, times: u32) {
        self.faults.push(Fault {
            method: method.into(),
            path_contains: path.into(),
            code,
            left: times,
        });
    }

    /// Every pod the API server created (answered 201), in order: what
    /// ran on the cluster, whatever was deleted since.
    pub(super) fn created_pods(&self) -> Vec<String> {
        self.created.clone()
    }

    /// Every write request since the last call, one line each.
    pub(super) fn take_writes(&mut self) -> Vec<String> {
        let new: Vec<String> = self.requests[self.taken..]
            .iter()
            .filter(|r| r.is_write())
            .map(Seen::line)
            .collect();
        self.taken = self.requests.len();
        new
    }

    pub(super) fn get(&self, resource: &str, name: &str) -> Option<&Value> {
        self.objects.get(&(resource.into(), name.into()))
    }

    /// Every object of the namespace, as `resource/name`.
    pub(super) fn everything(&self) -> Vec<String> {
        self.objects
            .keys()
            .map(|(r, n)| format!("{r}/{n}"))
            .collect()
    }

    pub(super) fn names(&self, resource: &str) -> Vec<String> {
        self.objects
            .keys()
            .filter(|(r, _)| r == resource)
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// Stores an object (new version), and tells the watches.
    pub(super) fn put(&mut self, resource: &str, mut obj: Value) -> Value {
        let rv = self.next_rv();
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let existed = self.objects.contains_key(&(resource.into(), name.clone()));
        obj["apiVersion"] = json!(api_version(resource));
        obj["kind"] = json!(kind(resource));
        obj["metadata"]["namespace"] = json!(NS);
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = json!(self.new_uid());
        }
        if obj["metadata"]["creationTimestamp"].is_null() {
            obj["metadata"]["creationTimestamp"] = json!(self.now());
        }
        // Kueue's webhook: a JobSet it manages is created suspended.
        if resource == "jobsets" && !existed && self.kueue.is_some() {
            obj["spec"]["suspend"] = json!(true);
        }
        self.objects.insert((resource.into(), name), obj.clone());
        self.event(
            rv,
            resource,
            if existed { "MODIFIED" } else { "ADDED" },
            &obj,
        );
        obj
    }

    /// Removes an object, and tells the watches.
    pub(super) fn remove(&mut self, resource: &str, name: &str) {
        if let Some(mut obj) = self.objects.remove(&(resource.into(), name.into())) {
            let rv = self.next_rv();
            obj["metadata"]["resourceVersion"] = json!(rv.to_string());
            self.event(rv, resource, "DELETED", &obj);
        }
    }

    /// Changes an object in place.
    pub(super) fn update(&mut self, resource: &str, name: &str, f: impl FnOnce(&mut Value)) {
        if let Some(mut obj) = self.get(resource, name).cloned() {
            f(&mut obj);
            self.put(resource, obj);
        }
    }

    fn event(&mut self, rv: u64, resource: &str, type_: &'static str, obj: &Value) {
        self.history.push((rv, resource.into(), type_, obj.clone()));
        let line = Bytes::from(format!("{}\n", json!({"type": type_, "object": obj})));
        self.watchers.retain_mut(|w| {
            if w.resource == resource && selects(obj, &w.selector) {
                let ok = w.tx.send(line.clone()).is_ok();
                w.sent += u64::from(ok);
                ok
            } else {
                !w.tx.is_closed()
            }
        });
    }

    /// Ends every open watch of `resource` with `410 Gone`, and forgets
    /// the history (as etcd compacts it).
    pub(super) fn expire_watches(&mut self, resource: &str) {
        let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
            "metadata": {}, "status": "Failure", "message": "too old resource version",
            "reason": "Expired", "code": 410}});
        let line = Bytes::from(format!("{gone}\n"));
        self.watchers.retain(|w| {
            if w.resource == resource {
                let _ = w.tx.send(line.clone());
                false
            } else {
                true
            }
        });
        self.history.clear();
    }

    /// Ends every open watch (the server restarted), without an error.
    pub(super) fn close_watches(&mut self) {
        self.watchers.clear();
    }

    fn handle(&mut self, method: &Method, seen: &Seen) -> Response<FakeBody> {
        let path = seen.path.as_str();
        if path == "/version" {
            return response(
                200,
                &json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0"}),
            );
        }
        if path == "/apis/jobset.x-k8s.io/v1alpha2" {
            if !self.crd {
                return status(
                    404,
                    "NotFound",
                    "the server could not find the requested resource",
                );
            }
            return response(
                200,
                &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "jobset.x-k8s.io/v1alpha2",
                        "resources": [{"name": "jobsets", "singularName": "jobset", "namespaced": true,
                                       "kind": "JobSet", "verbs": ["create","delete","get","list","patch","update","watch"]},
                                      {"name": "jobsets/status", "singularName": "", "namespaced": true,
                                       "kind": "JobSet", "verbs": ["get","patch","update"]}]}),
            );
        }
        if path.ends_with("/selfsubjectrulesreviews") {
            let mut review = seen.body.clone().unwrap_or(json!({}));
            review["status"] = json!({"resourceRules": self.rules, "nonResourceRules": [],
                                      "incomplete": self.incomplete});
            return response(201, &review);
        }
        if path.ends_with("/selfsubjectaccessreviews") {
            let mut review = seen.body.clone().unwrap_or(json!({}));
            review["status"] = json!({"allowed": false});
            return response(201, &review);
        }
        let parts: Vec<&str> = path.split('/').collect();
        let Some(at) = parts.iter().position(|p| *p == "namespaces") else {
            return status(404, "NotFound", "no such path");
        };
        let resource = parts.get(at + 2).copied().unwrap_or_default().to_owned();
        let name = parts.get(at + 3).map(|s| (*s).to_owned());
        let sub = parts.get(at + 4).copied();
        let not_found =
            |r: &str, n: &str| status(404, "NotFound", &format!("{r} \"{n}\" not found"));
        match (method.as_str(), name, sub) {
            ("GET", None, _) => {
                let selector = query_value(&seen.query, "labelSelector")
                    .or_else(|| query_value(&seen.query, "fieldSelector"))
                    .unwrap_or_default();
                if query_value(&seen.query, "watch").as_deref() == Some("true") {
                    let from: u64 = query_value(&seen.query, "resourceVersion")
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let (tx, rx) = mpsc::unbounded_channel();
                    if self.history.first().is_some_and(|h| h.0 > from + 1) && from < self.rv {
                        // Compacted past the version asked for.
                        return status(410, "Expired", "too old resource version");
                    }
                    let mut replayed = 0;
                    for (rv, r, type_, obj) in &self.history {
                        if *rv > from && *r == resource && selects(obj, &selector) {
                            let _ = tx.send(Bytes::from(format!(
                                "{}\n",
                                json!({"type": type_, "object": obj})
                            )));
                            replayed += 1;
                        }
                    }
                    let read = Arc::new(AtomicU64::new(0));
                    self.watchers.push(Watcher {
                        resource,
                        selector,
                        tx,
                        sent: replayed,
                        read: read.clone(),
                    });
                    return Response::builder()
                        .status(200)
                        .header(http::header::CONTENT_TYPE, "application/json")
                        .body(FakeBody::Stream(rx, read))
                        .expect("a response");
                }
                let items: Vec<Value> = self
                    .objects
                    .iter()
                    .filter(|((r, _), o)| *r == resource && selects(o, &selector))
                    .map(|(_, o)| o.clone())
                    .collect();
                response(
                    200,
                    &json!({"apiVersion": api_version(&resource), "kind": format!("{}List", kind(&resource)),
                            "metadata": {"resourceVersion": self.rv.to_string()}, "items": items}),
                )
            }
            ("GET", Some(name), Some("log")) => match self.logs.get(&name) {
                Some(text) => Response::builder()
                    .status(200)
                    .body(FakeBody::Full(Some(Bytes::from(log_answer(
                        text,
                        &seen.query,
                    )))))
                    .expect("a response"),
                None if self.get("pods", &name).is_some() => Response::builder()
                    .status(200)
                    .body(FakeBody::Full(None))
                    .expect("a response"),
                None => not_found("pods", &name),
            },
            ("GET", Some(name), _) => match self.get(&resource, &name) {
                Some(o) => response(200, o),
                None => not_found(&resource, &name),
            },
            ("POST", None, _) => {
                let body = seen.body.clone().unwrap_or(json!({}));
                let name = body["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if self.get(&resource, &name).is_some() {
                    return status(
                        409,
                        "AlreadyExists",
                        &format!("{resource} \"{name}\" already exists"),
                    );
                }
                let mut obj = body;
                if resource == "pods" && obj["status"].is_null() {
                    obj["status"] = json!({"phase": "Pending"});
                }
                let obj = self.put(&resource, obj);
                if resource == "pods" {
                    self.created.push(name);
                }
                response(201, &obj)
            }
            ("PATCH", Some(name), _) if seen.content_type.contains("apply-patch") => {
                let body = seen.body.clone().unwrap_or(json!({}));
                let obj = match self.get(&resource, &name).cloned() {
                    Some(mut existing) => {
                        merge(&mut existing, &body);
                        existing
                    }
                    None => body,
                };
                let obj = self.put(&resource, obj);
                if resource == "jobsets" && obj["status"].is_null() {
                    // The CRD's status subresource starts empty.
                }
                response(200, &obj)
            }
            ("PATCH", Some(name), _) => {
                let Some(mut obj) = self.get(&resource, &name).cloned() else {
                    return not_found(&resource, &name);
                };
                let patch = seen.body.clone().unwrap_or(json!({}));
                if let Some(uid) = patch["metadata"]["uid"].as_str()
                    && obj["metadata"]["uid"] != uid
                {
                    return status(
                        422,
                        "Invalid",
                        &format!(
                            "{} \"{name}\" is invalid: metadata.uid: Invalid value: \"{uid}\": field is immutable",
                            kind(&resource)
                        ),
                    );
                }
                merge(&mut obj, &patch);
                let obj = self.put(&resource, obj);
                response(200, &obj)
            }
            // An update: refused when the object changed since the
            // version it names (optimistic concurrency).
            ("PUT", Some(name), _) => {
                let Some(current) = self.get(&resource, &name).cloned() else {
                    return not_found(&resource, &name);
                };
                let body = seen.body.clone().unwrap_or(json!({}));
                let asked = &body["metadata"]["resourceVersion"];
                if !asked.is_null() && *asked != current["metadata"]["resourceVersion"] {
                    return status(
                        409,
                        "Conflict",
                        &format!(
                            "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                        ),
                    );
                }
                let mut obj = body;
                obj["metadata"]["uid"] = current["metadata"]["uid"].clone();
                obj["metadata"]["creationTimestamp"] =
                    current["metadata"]["creationTimestamp"].clone();
                let obj = self.put(&resource, obj);
                response(200, &obj)
            }
            ("DELETE", Some(name), _) => {
                let Some(mut obj) = self.get(&resource, &name).cloned() else {
                    return not_found(&resource, &name);
                };
                let opts = seen.body.clone().unwrap_or(json!({}));
                if let Some(uid) = opts["preconditions"]["uid"].as_str()
                    && obj["metadata"]["uid"] != uid
                {
                    return status(
                        409,
                        "Conflict",
                        &format!(
                            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                            obj["metadata"]["uid"].as_str().unwrap_or("")
                        ),
                    );
                }
                let foreground = opts["propagationPolicy"] == "Foreground";
                // Someone else's finalizer keeps the object, marked, until
                // its owner removes it.
                if has_foreign_finalizer(&obj) {
                    if obj["metadata"]["deletionTimestamp"].is_null() {
                        obj["metadata"]["deletionTimestamp"] = json!(self.now());
                    }
                    let obj = self.put(&resource, obj);
                    return response(200, &obj);
                }
                if resource == "pods" {
                    // Grace 0 removes the object at once (a forced
                    // deletion), whatever its node says.
                    if opts["gracePeriodSeconds"] == 0 && self.unreachable.contains(&name) {
                        self.remove("pods", &name);
                        return response(200, &obj);
                    }
                    if obj["metadata"]["deletionTimestamp"].is_null() {
                        obj["metadata"]["deletionTimestamp"] = json!(self.now());
                    }
                    obj["metadata"]["deletionGracePeriodSeconds"] =
                        opts["gracePeriodSeconds"].clone();
                    let obj = self.put("pods", obj);
                    return response(200, &obj);
                }
                if foreground {
                    if obj["metadata"]["deletionTimestamp"].is_null() {
                        obj["metadata"]["deletionTimestamp"] = json!(self.now());
                        obj["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
                    }
                    let obj = self.put(&resource, obj);
                    return response(200, &obj);
                }
                self.remove(&resource, &name);
                response(
                    200,
                    &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
                )
            }
            _ => status(405, "MethodNotAllowed", "not supported by the fake"),
        }
    }
}

/// A job's node in a pod.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Process {
    pub(super) pod: String,
    pub(super) run: String,
    pub(super) env: Vec<(String, String)>,
    /// `None` while it runs.
    pub(super) exit: Option<i32>,
    /// Killed without an exit code.
    pub(super) vanished: bool,
    /// Traps SIGTERM: only SIGKILL ends it.
    pub(super) ignores_term: bool,
    pub(super) log: Vec<u8>,
}

/// What job scripts left in pods' containers (`exec.rs`).
#[derive(Default)]
pub(super) struct Processes {
    /// By (pod uid, attempt directory).
    pub(super) by_dir: BTreeMap<(String, String), Process>,
    /// Every exec, as `POD OP DIR`.
    pub(super) execs: Vec<String>,
    /// Execs fail (the API server's exec proxy is down).
    pub(super) failing: bool,
    /// Execs are forbidden (403: the Role lacks `pods/exec`).
    pub(super) denied: bool,
    /// Every exec's arguments, as the request's URL carries them.
    pub(super) urls: Vec<String>,
    /// The jobs started from now on trap SIGTERM.
    pub(super) jobs_ignore_term: bool,
    /// Starts run, but their answers are lost (a session dropped).
    pub(super) start_answers_lost: bool,
    /// Polls fail (the exec proxy down), other execs answer.
    pub(super) failing_polls: bool,
    /// Execs answer 404 though the pods run (a proxy's, a misrouted
    /// request's).
    pub(super) stray_404: bool,
    /// The files pod's fills: pod uid, script (`part` or `done`), the
    /// stream's digest, its argument (the part's MiB, or the SHA-256),
    /// and the input's bytes.
    pub(super) fills: Vec<(String, &'static str, String, String, usize)>,
    /// After this many more parts, one part's exec fails (a connection
    /// reset), once.
    pub(super) parts_cut_after: Option<usize>,
}

impl Processes {
    /// What `FILL_HAVE` answers for a stream in the pod of uid `pod`:
    /// `done` once it is served, else the bytes its parts so far hold
    /// from the start.
    pub(super) fn have(&self, pod: &str, digest: &str) -> String {
        let mine = |f: &&(String, &str, String, String, usize)| f.0 == pod && f.2 == digest;
        if self.fills.iter().filter(mine).any(|f| f.1 == "done") {
            return "done".into();
        }
        let mut parts: Vec<(usize, usize)> = self
            .fills
            .iter()
            .filter(mine)
            .filter(|f| f.1 == "part")
            .map(|f| (f.3.parse::<usize>().unwrap_or(0) << 20, f.4))
            .collect();
        parts.sort_unstable();
        let mut end = 0;
        for (at, len) in parts {
            if at <= end {
                end = end.max(at + len);
            }
        }
        end.to_string()
    }
}
