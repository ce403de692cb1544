//! A kubelet that runs pods, for the scenarios that must see what a
//! pod's commands find (its files): beside the scripted controllers of
//! [`super::controllers`], it starts each pod the fake API server holds,
//! runs its init containers, then its container, each command in bash as
//! its spec says, and writes what a kubelet writes (phase, container
//! states, exit codes, the termination message, the log).
//!
//! Each container runs in a root of its own: a mount namespace whose `/`
//! is an overlay over this machine's (what a container writes stays in
//! it), a `/dev` of its own with the termination-log file, and the pod's
//! volumes bound at their `mountPath` (`subPath` too): `emptyDir` is a
//! directory per pod, `configMap` the ConfigMap's keys written out, a
//! PersistentVolumeClaim a directory per claim, shared. An image named
//! `busybox:*` runs BusyBox's applets (this machine's `busybox`), as the
//! files pod and the init containers do on a cluster; any other image is
//! this machine's own programs. `pods/exec` ([`RealExec`]) runs in the
//! same root, with the container's environment.
//!
//! Every pod of one cluster shares one network namespace of its own, its
//! loopback up, and every pod's `{hostname}.{subdomain}` resolves to it
//! through an `/etc/hosts` the kubelet keeps: the cluster network and its
//! DNS, played on one address. A container whose Secret (or key) is not
//! there waits with `CreateContainerConfigError`, as a kubelet's does;
//! an exec's input is kept open, as the API server keeps it.
//!
//! Native sidecars (init containers with `restartPolicy: Always`) start
//! in order, are waited for until their startup probe passes (run in the
//! sidecar's own namespaces), run beside the pod's container, and get
//! SIGTERM once it has ended, the pod's grace period to end. Mount
//! propagation is the kernel's: an `emptyDir` a container mounts with
//! `Bidirectional` is a shared mount, its bind a peer (what the container
//! mounts there shows in the volume); `HostToContainer` is a recursive
//! bind made a slave. A privileged container gets `/dev/fuse`. The
//! node's instance role is played by the AWS variables the kubelet is
//! given ([`Kubelet::instance_role`]), in every container's environment.
//! Not covered: pods' own addresses, network policies, image pulls,
//! resource limits, readiness and liveness probes (a pod is ready once
//! its container starts), sidecar restarts.

use super::fake::Fake;
use crate::k8s::exec::{Command as ExecCommand, ExecError, PodExec};
use base64::Engine as _;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The applets the BusyBox image is used for here.
const APPLETS: &[&str] = &[
    "head",
    "sh",
    "wget",
    "tar",
    "sha256sum",
    "chmod",
    "mkdir",
    "rm",
    "mv",
    "dd",
    "cat",
    "echo",
    "sleep",
    "httpd",
    "ls",
    "test",
    "[",
];

/// Whether this machine can run pods: root (namespaces, mounts) and
/// BusyBox.
pub(super) fn available() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("not root: pods cannot get roots of their own".into());
    }
    if !Path::new("/usr/bin/busybox").exists() && !Path::new("/bin/busybox").exists() {
        return Some("busybox is not installed (apt-get install busybox)".into());
    }
    None
}

pub(super) struct Kubelet {
    fake: Fake,
    dir: PathBuf,
    /// Holds the cluster's network namespace.
    net: Child,
    busybox: PathBuf,
    hosts: PathBuf,
    /// Found on this machine's `PATH` (a container's is its own).
    nsenter: PathBuf,
    unshare: PathBuf,
    bash: PathBuf,
    started: Mutex<BTreeSet<String>>,
    /// Every container process, for the end of the test.
    running: Arc<Mutex<BTreeSet<i32>>>,
    /// Once stopped, no container starts.
    stopped: std::sync::atomic::AtomicBool,
    /// What each pod's container printed, by pod name.
    pub(super) output: Arc<Mutex<BTreeMap<String, String>>>,
    /// The running sidecars' `unshare` processes, by pod and container.
    sidecars: Mutex<BTreeMap<(String, String), i32>>,
    /// The volumes made shared mounts (`Bidirectional`), unmounted at the
    /// end.
    shared: Mutex<Vec<PathBuf>>,
    /// The AWS variables every container is given, as a node's instance
    /// role gives them.
    pub(super) instance_role: Mutex<Vec<(String, String)>>,
}

impl Kubelet {
    pub(super) fn new(fake: &Fake, dir: &Path) -> Self {
        let dir = dir.join("kubelet");
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let busybox = ["/usr/bin/busybox", "/bin/busybox"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("busybox");
        for applet in APPLETS {
            let _ = std::os::unix::fs::symlink(busybox, dir.join("bin").join(applet));
        }
        let net = Command::new("unshare")
            .args(["-n", "sh", "-c", "ip link set lo up && exec sleep 86400"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("a network namespace");
        let hosts = dir.join("hosts");
        std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
        // The namespace's loopback is up before anything runs in it.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let up = Command::new("nsenter")
                .arg(format!("--net=/proc/{}/ns/net", net.id()))
                .args(["ip", "-o", "link", "show", "lo", "up"])
                .output()
                .is_ok_and(|o| !o.stdout.is_empty());
            if up {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let found = |program: &str| {
            std::env::var("PATH")
                .unwrap_or_default()
                .split(':')
                .map(|d| Path::new(d).join(program))
                .find(|p| p.exists())
                .unwrap_or_else(|| panic!("{program} is not on PATH"))
        };
        Self {
            nsenter: found("nsenter"),
            unshare: found("unshare"),
            bash: found("bash"),
            fake: fake.clone(),
            busybox: dir.join("bin"),
            dir,
            net,
            hosts,
            started: Mutex::new(BTreeSet::new()),
            stopped: std::sync::atomic::AtomicBool::new(false),
            running: Arc::new(Mutex::new(BTreeSet::new())),
            output: Arc::new(Mutex::new(BTreeMap::new())),
            sidecars: Mutex::new(BTreeMap::new()),
            shared: Mutex::new(Vec::new()),
            instance_role: Mutex::new(Vec::new()),
        }
    }

    /// The cluster's network namespace.
    pub(super) fn net_ns(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.net.id()))
    }

    /// What runs `pods/exec` in this kubelet's pods.
    pub(super) fn exec(self: &Arc<Self>) -> Arc<dyn PodExec> {
        Arc::new(RealExec(self.clone()))
    }

    /// Starts every pod not started yet (each on a thread of its own).
    pub(super) fn start_pending(self: &Arc<Self>) {
        let pods: Vec<Value> = {
            let w = self.fake.world();
            w.names("pods")
                .iter()
                .filter_map(|n| w.get("pods", n).cloned())
                .filter(|p| p["status"]["phase"].is_null() || p["status"]["phase"] == "Pending")
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .collect()
        };
        self.write_hosts();
        for pod in pods {
            let uid = pod["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if !self.started.lock().unwrap().insert(uid) {
                continue;
            }
            let me = self.clone();
            std::thread::spawn(move || me.run_pod(&pod));
        }
    }

    /// Every pod's name under its subdomain, at the cluster's address.
    fn write_hosts(&self) {
        let mut text = String::from("127.0.0.1 localhost\n");
        let w = self.fake.world();
        for name in w.names("pods") {
            let Some(p) = w.get("pods", &name) else {
                continue;
            };
            if let (Some(h), Some(s)) = (
                p["spec"]["hostname"].as_str(),
                p["spec"]["subdomain"].as_str(),
            ) {
                text.push_str(&format!(
                    "127.0.0.1 {h}.{s} {h}.{s}.team.svc.cluster.local\n"
                ));
            }
        }
        drop(w);
        // In place: containers bind this very file.
        if let Ok(mut f) = std::fs::File::options()
            .write(true)
            .truncate(true)
            .open(&self.hosts)
        {
            let _ = f.write_all(text.as_bytes());
        }
    }

    fn pod_dir(&self, pod: &Value) -> PathBuf {
        self.dir
            .join("pods")
            .join(pod["metadata"]["uid"].as_str().unwrap_or("none"))
    }

    fn run_pod(self: &Arc<Self>, pod: &Value) {
        let name = pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let dir = self.pod_dir(pod);
        if let Err(e) = self.volumes(pod, &dir) {
            self.fail(&name, &format!("volumes: {e}"));
            return;
        }
        self.fake.world().update("pods", &name, |p| {
            p["spec"]["nodeName"] = json!("node-0");
            p["status"] = json!({"phase": "Pending"});
        });
        let inits = pod["spec"]["initContainers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut statuses = Vec::new();
        let mut sidecars = Vec::new();
        for c in &inits {
            if c["restartPolicy"] == "Always" {
                match self.start_sidecar(pod, c, &dir, &name) {
                    Ok(running) => {
                        sidecars.push(running);
                        continue;
                    }
                    Err(why) => {
                        self.end_sidecars(sidecars, 1);
                        self.fail(&name, &why);
                        return;
                    }
                }
            }
            let ended = self.run_container(pod, c, &dir, None, None, &name);
            let Ok((code, out, message)) = ended else {
                self.fail(&name, "an init container could not start");
                return;
            };
            self.append_output(&name, &out);
            statuses.push(json!({
                "name": c["name"], "ready": code == 0, "restartCount": 0,
                "image": c["image"], "imageID": "",
                "state": {"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }, "message": message}},
            }));
            if code != 0 {
                self.fake.world().update("pods", &name, |p| {
                    p["status"] = json!({
                        "phase": "Failed",
                        "initContainerStatuses": statuses,
                        "containerStatuses": [{
                            "name": "main", "ready": false, "restartCount": 0, "image": "",
                            "imageID": "", "state": {"waiting": {"reason": "PodInitializing"}},
                        }],
                    });
                });
                return;
            }
        }
        {
            let mut w = self.fake.world();
            if w.get("pods", &name)
                .is_none_or(|p| !p["metadata"]["deletionTimestamp"].is_null())
            {
                return;
            }
            w.run(&name);
            w.update("pods", &name, |p| {
                if !statuses.is_empty() {
                    p["status"]["initContainerStatuses"] = json!(statuses);
                }
            });
        }
        let main = pod["spec"]["containers"][0].clone();
        let ended = self.run_container(pod, &main, &dir, None, None, &name);
        let (code, out, message) = ended.unwrap_or((128, Vec::new(), String::new()));
        self.append_output(&name, &out);
        // The pod ends once its sidecars have.
        let grace = pod["spec"]["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap_or(30);
        self.end_sidecars(sidecars, grace);
        self.unshare_volumes(&dir);
        let mut w = self.fake.world();
        let log = self
            .output
            .lock()
            .unwrap()
            .get(&name)
            .cloned()
            .unwrap_or_default();
        w.logs.insert(name.clone(), log);
        let running = w
            .get("pods", &name)
            .is_some_and(|p| p["status"]["phase"] == "Running");
        if running {
            let message = (!message.is_empty()).then_some(message);
            w.exit_with(&name, code, message.as_deref());
        }
    }

    fn append_output(&self, pod: &str, out: &[u8]) {
        self.output
            .lock()
            .unwrap()
            .entry(pod.to_owned())
            .or_default()
            .push_str(&String::from_utf8_lossy(out));
    }

    fn fail(&self, pod: &str, why: &str) {
        self.append_output(pod, format!("kubelet: {why}\n").as_bytes());
        self.fake.world().update("pods", pod, |p| {
            p["status"] = json!({"phase": "Failed", "reason": "KubeletError", "message": why});
        });
    }

    /// Makes the pod's volumes: `emptyDir` and `configMap` in the pod's
    /// directory, a claim in the kubelet's.
    fn volumes(&self, pod: &Value, dir: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
            let name = v["name"].as_str().unwrap_or_default();
            let at = dir.join("volumes").join(name);
            if v.get("persistentVolumeClaim").is_some() {
                continue;
            }
            std::fs::create_dir_all(&at)?;
            std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o777))?;
            if v.get("emptyDir").is_some() && propagated(pod, name) {
                // A mount point of its own, shared: a container's bind of
                // it is a peer.
                let status = Command::new("sh")
                    .args([
                        "-c",
                        "mount --bind \"$1\" \"$1\" && mount --make-shared \"$1\"",
                        "sh",
                    ])
                    .arg(&at)
                    .status()?;
                if !status.success() {
                    return Err(std::io::Error::other(
                        "cannot make the volume a shared mount",
                    ));
                }
                self.shared.lock().unwrap().push(at.clone());
            }
            if let Some(cm) = v.get("configMap") {
                let object = self
                    .fake
                    .world()
                    .get("configmaps", cm["name"].as_str().unwrap_or_default())
                    .cloned()
                    .unwrap_or(Value::Null);
                let mode = cm["defaultMode"].as_u64().unwrap_or(0o644) as u32;
                for (key, value) in object["data"].as_object().into_iter().flatten() {
                    let path = at.join(key);
                    std::fs::write(&path, value.as_str().unwrap_or_default())?;
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
                }
                for (key, value) in object["binaryData"].as_object().into_iter().flatten() {
                    let path = at.join(key);
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(value.as_str().unwrap_or_default())
                        .unwrap_or_default();
                    std::fs::write(&path, bytes)?;
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
                }
            }
        }
        Ok(())
    }

    /// Where volume `name` of `pod` is on this machine.
    fn volume_path(&self, pod: &Value, dir: &Path, name: &str) -> PathBuf {
        let spec = pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == name)
            .cloned()
            .unwrap_or(Value::Null);
        match spec["persistentVolumeClaim"]["claimName"].as_str() {
            Some(claim) => {
                let at = self.dir.join("claims").join(claim);
                let _ = std::fs::create_dir_all(&at);
                at
            }
            None => dir.join("volumes").join(name),
        }
    }

    /// The container's environment, as the kubelet resolves it; a Secret
    /// or key that is not there is `CreateContainerConfigError`.
    fn env(&self, pod: &Value, container: &Value) -> Result<Vec<(String, String)>, String> {
        let w = self.fake.world();
        let mut out = Vec::new();
        for e in container["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap_or_default().to_owned();
            let value = if let Some(v) = e["value"].as_str() {
                // `$$` is Kubernetes' escape of `$`.
                v.replace("$$", "$")
            } else if let Some(r) = e["valueFrom"].get("secretKeyRef") {
                let name = r["name"].as_str().unwrap_or_default();
                let secret = w.get("secrets", name);
                let key = r["key"].as_str().unwrap_or_default();
                let value = secret.and_then(|s| {
                    s["stringData"][key]
                        .as_str()
                        .map(str::to_owned)
                        .or_else(|| {
                            let b = s["data"][key].as_str()?;
                            let bytes = base64::engine::general_purpose::STANDARD.decode(b).ok()?;
                            String::from_utf8(bytes).ok()
                        })
                });
                match value {
                    Some(v) => v,
                    None => {
                        return Err(format!(
                            "CreateContainerConfigError: couldn't find key {key} in Secret team/{name}"
                        ));
                    }
                }
            } else if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                let current = w.get("pods", pod["metadata"]["name"].as_str().unwrap_or_default());
                let p = current.unwrap_or(pod);
                field(p, path)
            } else {
                String::new()
            };
            out.push((name, value));
        }
        Ok(out)
    }

    /// Runs `container` of `pod` (or `argv` in it, with `stdin`): its exit
    /// code, its output (stdout and stderr), its termination message. The
    /// process ends when the pod is deleted: SIGTERM, then SIGKILL after
    /// the pod's grace.
    fn run_container(
        &self,
        pod: &Value,
        container: &Value,
        dir: &Path,
        argv: Option<&[String]>,
        stdin: Option<Vec<u8>>,
        name: &str,
    ) -> std::io::Result<(i32, Vec<u8>, String)> {
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::other("the kubelet is stopped"));
        }
        let run = dir.join(format!(
            "run-{}-{}",
            container["name"].as_str().unwrap_or("c"),
            RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&run)?;
        let termination = run.join("termination-log");
        std::fs::write(&termination, "")?;
        let mut mounts = String::new();
        for m in container["volumeMounts"].as_array().into_iter().flatten() {
            let volume = m["name"].as_str().unwrap_or_default();
            let mut src = self.volume_path(pod, dir, volume);
            if let Some(sub) = m["subPath"].as_str() {
                src = src.join(sub);
                if !src.exists() {
                    std::fs::create_dir_all(&src)?;
                }
            }
            let how = match m["mountPropagation"].as_str() {
                Some("Bidirectional") => "shared",
                Some("HostToContainer") => "slave",
                _ => "bind",
            };
            mounts.push_str(&format!(
                "{}\t{}\t{how}\n",
                src.display(),
                m["mountPath"].as_str().unwrap_or_default()
            ));
        }
        let propagates = mounts.contains("\tshared\n") || mounts.contains("\tslave\n");
        let privileged = container["securityContext"]["privileged"] == true;
        std::fs::write(run.join("mounts"), mounts)?;
        let busybox = container["image"]
            .as_str()
            .is_some_and(|i| i.starts_with("busybox"));
        let path = if busybox {
            self.busybox.display().to_string()
        } else {
            std::env::var("PATH").unwrap_or_default()
        };
        // As a kubelet: a container whose Secret is not there waits for
        // it, saying why (an exec fails at once).
        let env = loop {
            match self.env(pod, container) {
                Ok(env) => break env,
                Err(why) if argv.is_some() => return Err(std::io::Error::other(why)),
                Err(why) => {
                    let gone = {
                        let mut w = self.fake.world();
                        let gone = w
                            .get("pods", name)
                            .is_none_or(|p| !p["metadata"]["deletionTimestamp"].is_null());
                        let (reason, message) = why.split_once(": ").unwrap_or((&why, ""));
                        w.update("pods", name, |p| {
                            p["status"]["containerStatuses"] = json!([{
                                "name": container["name"], "ready": false, "restartCount": 0,
                                "image": container["image"], "imageID": "",
                                "state": {"waiting": {"reason": reason, "message": message}},
                            }]);
                        });
                        gone
                    };
                    if gone || self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
                        return Err(std::io::Error::other(why));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        let mut command: Vec<String> = match argv {
            Some(argv) => argv.to_vec(),
            None => container["command"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(container["args"].as_array().into_iter().flatten())
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
        };
        if busybox
            && let Some(first) = command.first_mut()
            && !first.contains('/')
        {
            *first = self.busybox.join(&*first).display().to_string();
        }
        let mut cmd = Command::new(&self.nsenter);
        cmd.arg(format!("--net=/proc/{}/ns/net", self.net.id()))
            .arg(&self.unshare)
            .args([
                "--mount",
                "--pid",
                "--fork",
                "--kill-child=KILL",
                "--propagation",
                // Unchanged where a volume propagates (its shared mount
                // must stay a peer); the wrapper keeps the container's
                // own mounts private either way.
                if propagates { "unchanged" } else { "private" },
            ])
            .arg(&self.bash)
            .args(["-c", WRAPPER, "kubelet"])
            .args(&command)
            .env_clear()
            .envs(self.instance_role.lock().unwrap().clone())
            .envs(env)
            .env("PATH", &path)
            .env("HOME", "/root")
            .env("HOSTNAME", pod["spec"]["hostname"].as_str().unwrap_or(name))
            .env("SKYC_KUBELET_RUN", &run)
            .env("SKYC_KUBELET_HOSTS", &self.hosts)
            .env("SKYC_KUBELET_TERMLOG", &termination)
            .env(
                "SKYC_KUBELET_PRIVILEGED",
                if privileged { "1" } else { "0" },
            )
            .env(
                "SKYC_KUBELET_PATH",
                std::env::var("PATH").unwrap_or_default(),
            )
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn()?;
        let pid = child.id() as i32;
        self.running.lock().unwrap().insert(pid);
        if container["restartPolicy"] == "Always" && argv.is_none() {
            let key = (
                name.to_owned(),
                container["name"].as_str().unwrap_or_default().to_owned(),
            );
            self.sidecars.lock().unwrap().insert(key, pid);
        }
        // As the API server's exec: the input is written, and its end
        // never comes while the command runs (the command reads what it
        // needs, no more).
        let _open = match stdin {
            Some(bytes) => {
                let input = child.stdin.take().expect("piped");
                let mut writer =
                    std::fs::File::from(std::os::fd::AsFd::as_fd(&input).try_clone_to_owned()?);
                std::thread::spawn(move || {
                    let _ = writer.write_all(&bytes);
                });
                Some(input)
            }
            None => None,
        };
        let mut out = child.stdout.take().expect("piped");
        let mut err = child.stderr.take().expect("piped");
        let reading = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = out.read_to_end(&mut bytes);
            bytes
        });
        let reading_err = std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = err.read_to_end(&mut bytes);
            bytes
        });
        let mut termed: Option<Instant> = None;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            // A deleted pod's container: SIGTERM, then SIGKILL.
            if argv.is_none() {
                let (gone, grace) = {
                    let w = self.fake.world();
                    match w.get("pods", name) {
                        None => (true, 0),
                        Some(p) => (
                            !p["metadata"]["deletionTimestamp"].is_null(),
                            p["metadata"]["deletionGracePeriodSeconds"]
                                .as_u64()
                                .unwrap_or(1),
                        ),
                    }
                };
                if gone {
                    match termed {
                        None => {
                            // To the container's first process, as the
                            // runtime sends it.
                            if let Some(init) = first_child(pid) {
                                let _ = rustix::process::kill_process(
                                    init,
                                    rustix::process::Signal::TERM,
                                );
                            }
                            termed = Some(Instant::now());
                        }
                        Some(at) if at.elapsed() >= Duration::from_secs(grace) => {
                            kill_group(pid);
                        }
                        Some(_) => {}
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // What the container started lives no longer than it.
        kill_group(pid);
        self.running.lock().unwrap().remove(&pid);
        let mut output = reading.join().unwrap_or_default();
        output.extend(reading_err.join().unwrap_or_default());
        let message = std::fs::read_to_string(&termination).unwrap_or_default();
        use std::os::unix::process::ExitStatusExt;
        let code = status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(9));
        Ok((code, output, message.trim().to_owned()))
    }
}

static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The container's first process: `unshare`'s child, the first of its
/// PID namespace.
fn first_child(pid: i32) -> Option<rustix::process::Pid> {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    let first = children.split_whitespace().next()?.parse().ok()?;
    rustix::process::Pid::from_raw(first)
}

/// Ends a container: its `unshare` killed, which kills the first process
/// of its PID namespace, and so every process in it.
fn kill_group(pid: i32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

impl Kubelet {
    /// The machine goes down: every container is killed, the cluster's
    /// network with them. The pods' threads hold the kubelet, so its end
    /// is said, not left to `Drop`.
    pub(super) fn stop(&self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        for pid in std::mem::take(&mut *self.running.lock().unwrap()) {
            kill_group(pid);
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.net.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
        self.unshare_volumes(Path::new("/"));
        // And whatever else is still mounted under the kubelet's
        // directory, deepest first.
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut under: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(1))
            .filter(|at| Path::new(at).starts_with(&self.dir))
            .collect();
        under.sort_by_key(|at| std::cmp::Reverse(at.len()));
        for at in under {
            let _ = Command::new("umount").arg("-l").arg(at).status();
        }
    }

    /// Unmounts the shared volumes under `dir` (a pod's, or all).
    fn unshare_volumes(&self, dir: &Path) {
        let mut shared = self.shared.lock().unwrap();
        for at in shared.iter().filter(|at| at.starts_with(dir)) {
            let _ = Command::new("umount").args(["-R", "-l"]).arg(at).status();
        }
        shared.retain(|at| !at.starts_with(dir));
    }

    /// Starts sidecar `c` of `pod` and waits until its startup probe
    /// passes (in its own namespaces and root); why it did not.
    fn start_sidecar(
        self: &Arc<Self>,
        pod: &Value,
        c: &Value,
        dir: &Path,
        name: &str,
    ) -> Result<Sidecar, String> {
        let container = c["name"].as_str().unwrap_or_default().to_owned();
        let key = (name.to_owned(), container.clone());
        let (pod_, c_, dir_, name_) = (pod.clone(), c.clone(), dir.to_owned(), name.to_owned());
        let me = self.clone();
        let thread =
            std::thread::spawn(move || me.run_container(&pod_, &c_, &dir_, None, None, &name_));
        let probe: Vec<String> = c["startupProbe"]["exec"]["command"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
        let period = c["startupProbe"]["periodSeconds"].as_u64().unwrap_or(10);
        let tries = c["startupProbe"]["failureThreshold"].as_u64().unwrap_or(3);
        let running = Sidecar {
            key: key.clone(),
            thread,
        };
        if probe.is_empty() {
            return Ok(running);
        }
        for _ in 0..tries.max(1) {
            std::thread::sleep(Duration::from_secs(period.max(1)));
            if running.thread.is_finished() {
                let ended = running.thread.join();
                let out = match ended {
                    Ok(Ok((code, out, _))) => {
                        format!("exit {code}: {}", String::from_utf8_lossy(&out))
                    }
                    _ => "did not start".into(),
                };
                self.append_output(name, out.as_bytes());
                return Err(format!(
                    "sidecar {container} ended before it started: {out}"
                ));
            }
            let pid = self.sidecars.lock().unwrap().get(&key).copied();
            let Some(inner) = pid.and_then(first_child) else {
                continue;
            };
            let passed = Command::new(&self.nsenter)
                .arg(format!("--target={}", inner.as_raw_nonzero()))
                .args(["--mount", "--pid", "--root", "--wd", "--"])
                .args(&probe)
                .status()
                .is_ok_and(|s| s.success());
            if passed {
                return Ok(running);
            }
        }
        self.end_sidecars(vec![running], 1);
        Err(format!(
            "sidecar {container} did not pass its startup probe"
        ))
    }

    /// Ends the pod's sidecars, last started first: SIGTERM, then SIGKILL
    /// past `grace` seconds; what each printed is the pod's output.
    fn end_sidecars(&self, sidecars: Vec<Sidecar>, grace: u64) {
        for s in sidecars.into_iter().rev() {
            let pid = self.sidecars.lock().unwrap().remove(&s.key);
            if let Some(inner) = pid.and_then(first_child) {
                let _ = rustix::process::kill_process(inner, rustix::process::Signal::TERM);
            }
            let deadline = Instant::now() + Duration::from_secs(grace);
            while !s.thread.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if let Some(pid) = pid
                && !s.thread.is_finished()
            {
                kill_group(pid);
            }
            if let Ok(Ok((_, out, _))) = s.thread.join() {
                self.append_output(&s.key.0, &out);
            }
        }
    }
}

/// A running sidecar: its key in [`Kubelet::sidecars`], and the thread
/// that runs it (returning as `run_container` does).
struct Sidecar {
    key: (String, String),
    thread: std::thread::JoinHandle<std::io::Result<(i32, Vec<u8>, String)>>,
}

/// Whether a container of `pod` mounts volume `name` with propagation.
fn propagated(pod: &Value, name: &str) -> bool {
    let spec = &pod["spec"];
    spec["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(spec["containers"].as_array().into_iter().flatten())
        .flat_map(|c| c["volumeMounts"].as_array().into_iter().flatten())
        .any(|m| m["name"] == name && m["mountPropagation"].is_string())
}

/// A pod's field, as `fieldRef` names it.
fn field(pod: &Value, path: &str) -> String {
    let (map, key) = if let Some(k) = path.strip_prefix("metadata.labels['") {
        ("labels", k.trim_end_matches("']"))
    } else if let Some(k) = path.strip_prefix("metadata.annotations['") {
        ("annotations", k.trim_end_matches("']"))
    } else {
        return match path {
            "metadata.name" => pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            "metadata.namespace" => "team".to_owned(),
            "status.podIP" => "127.0.0.1".to_owned(),
            _ => String::new(),
        };
    };
    pod["metadata"][map][key]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `pods/exec` in this kubelet's pods: the command in the container's
/// root, with its environment; its standard output once it exits 0.
pub(super) struct RealExec(Arc<Kubelet>);

impl PodExec for RealExec {
    fn exec(
        &self,
        _namespace: &str,
        pod: &str,
        command: ExecCommand,
    ) -> BoxFuture<'static, Result<String, ExecError>> {
        let kubelet = self.0.clone();
        let name = pod.to_owned();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let pod = kubelet.fake.world().get("pods", &name).cloned();
                let Some(pod) = pod.filter(|p| p["status"]["phase"] == "Running") else {
                    return Err(ExecError::Gone(format!("pod {name} is not running")));
                };
                let container = pod["spec"]["containers"][0].clone();
                let dir = kubelet.pod_dir(&pod);
                let ran = kubelet.run_container(
                    &pod,
                    &container,
                    &dir,
                    Some(&command.argv),
                    command.stdin,
                    &name,
                );
                match ran {
                    Ok((0, out, _)) => Ok(String::from_utf8_lossy(&out).into_owned()),
                    Ok((code, out, _)) => Err(ExecError::Failed(format!(
                        "exit {code}: {}",
                        String::from_utf8_lossy(&out)
                    ))),
                    Err(e) => Err(ExecError::Failed(e.to_string())),
                }
            })
            .await
            .unwrap_or_else(|e| Err(ExecError::Failed(e.to_string())))
        })
    }
}

/// Gives the container its root, then runs its command there (`$@`).
const WRAPPER: &str = r#"set -eu
container_path=$PATH
PATH=$SKYC_KUBELET_PATH
chroot=$(command -v chroot)
run=$SKYC_KUBELET_RUN
r=$run/root
mkdir -p "$r" "$run/layer"
# What is mounted for the container stays its own, even where this
# machine's mounts are shared: only the volumes made shared propagate.
mount --bind "$run" "$run"
mount --make-private "$run"
mount -t tmpfs tmpfs "$run/layer"
mkdir "$run/layer/upper" "$run/layer/work"
mount -t overlay overlay -o "lowerdir=/,upperdir=$run/layer/upper,workdir=$run/layer/work" "$r"
mount -t proc proc "$r/proc"
mount -t tmpfs tmpfs "$r/dev"
for d in null zero random urandom full tty; do
  touch "$r/dev/$d"
  mount --bind "/dev/$d" "$r/dev/$d"
done
ln -s /proc/self/fd "$r/dev/fd"
ln -s /proc/self/fd/0 "$r/dev/stdin"
ln -s /proc/self/fd/1 "$r/dev/stdout"
ln -s /proc/self/fd/2 "$r/dev/stderr"
touch "$r/dev/termination-log"
mount --bind "$SKYC_KUBELET_TERMLOG" "$r/dev/termination-log"
mount --bind "$SKYC_KUBELET_HOSTS" "$r/etc/hosts"
if [ "$SKYC_KUBELET_PRIVILEGED" = 1 ] && [ -e /dev/fuse ]; then
  touch "$r/dev/fuse"
  mount --bind /dev/fuse "$r/dev/fuse"
fi
while IFS=$'\t' read -r src dst how; do
  if [ -d "$src" ]; then
    mkdir -p "$r$dst"
  else
    mkdir -p "$(dirname "$r$dst")"
    touch "$r$dst"
  fi
  case $how in
    shared) mount --bind "$src" "$r$dst" ;;
    slave) mount --rbind "$src" "$r$dst" && mount --make-rslave "$r$dst" ;;
    *) mount --bind "$src" "$r$dst" ;;
  esac
done <"$run/mounts"
unset SKYC_KUBELET_RUN SKYC_KUBELET_HOSTS SKYC_KUBELET_TERMLOG SKYC_KUBELET_PATH SKYC_KUBELET_PRIVILEGED
export PATH=$container_path
cd "$r"
exec "$chroot" "$r" "$@"
"#;
