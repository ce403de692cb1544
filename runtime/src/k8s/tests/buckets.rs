//! Buckets mounted in pods (`--bucket-mounts sidecar`): each task's pods
//! run the rclone sidecar the target lowers, under the kubelet stand-in
//! ([`super::kubelet`]: the sidecar is this machine's rclone with FUSE,
//! the mount reaches the task's container by the kernel's propagation).
//! The bytes are asserted where the tasks read them and in the bucket.
//!
//! S3 is moto's server (`SKYC_MOTO_ENDPOINT`, which scripts/test starts),
//! reached from the cluster's network through a relay listening there on
//! moto's own address; the node's instance role is the kubelet's AWS
//! variables. Skipped, loudly, without moto, rclone, FUSE or root.

use super::driver::{self, Driver};
use super::fake::Fake;
use super::kubelet::{self, Kubelet};
use crate::aws::s3::{S3, Source};
use crate::k8s::{Lowering, Plan};
use crate::policy::Status;
use skyc_targets::storage::Mounted;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The stand-in's endpoint, or why the test cannot run.
fn ready() -> Result<String, String> {
    if let Some(why) = kubelet::available() {
        return Err(why);
    }
    if crate::storage::mount::client().is_err() {
        return Err("rclone or /dev/fuse is missing".into());
    }
    match std::env::var("SKYC_MOTO_ENDPOINT") {
        Ok(e) if !e.is_empty() => Ok(e),
        _ => Err("buckets need the S3 stand-in (SKYC_MOTO_ENDPOINT)".into()),
    }
}

/// Listens on `endpoint`'s address inside the network namespace `ns`,
/// and passes each connection to `endpoint` on this machine's network.
fn relay_into(ns: &Path, endpoint: &str) {
    let addr = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, a)| a)
        .trim_end_matches('/')
        .to_owned();
    let ns = std::fs::File::open(ns).expect("the cluster's network");
    let (tx, rx) = std::sync::mpsc::channel::<TcpStream>();
    let listening = std::sync::mpsc::channel::<()>();
    let at = addr.clone();
    // Namespaces are a thread's: this one listens in the cluster's.
    std::thread::spawn(move || {
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&ns),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .expect("setns");
        let listener = TcpListener::bind(&at).expect("listen in the cluster's network");
        let _ = listening.0.send(());
        for c in listener.incoming().flatten() {
            if tx.send(c).is_err() {
                break;
            }
        }
    });
    listening.1.recv().expect("the relay listens");
    std::thread::spawn(move || {
        for client in rx {
            let Ok(server) = TcpStream::connect(&addr) else {
                continue;
            };
            for (mut from, mut to) in [
                (client.try_clone(), server.try_clone()),
                (server.try_clone(), client.try_clone()),
            ]
            .into_iter()
            .filter_map(|(a, b)| Some((a.ok()?, b.ok()?)))
            {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0 || to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
}

struct Bucket {
    s3: S3,
    rt: tokio::runtime::Runtime,
    name: String,
}

impl Bucket {
    fn new(endpoint: &str, name: &str) -> Bucket {
        let s3 = S3::new(
            Some(endpoint),
            "us-east-1",
            crate::aws::ec2::sigv4::Credentials {
                access_key_id: "AKIDSKYCTEST".into(),
                secret_access_key: "skyc-test-secret".into(),
                session_token: None,
            },
            crate::aws::ec2::client::Tuning::default(),
        )
        .expect("client");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(s3.create_bucket(name)).expect("CreateBucket");
        Bucket {
            s3,
            rt,
            name: name.to_owned(),
        }
    }

    fn put(&self, key: &str, bytes: &[u8]) {
        let sha = crate::files::tar::sha256(bytes);
        let data = bytes.to_vec();
        let source: Source = Arc::new(move |w: &mut dyn Write| w.write_all(&data));
        self.rt
            .block_on(
                self.s3
                    .put_object(&self.name, key, bytes.len() as u64, &sha, source),
            )
            .expect("PutObject");
    }

    fn get(&self, key: &str) -> Option<Vec<u8>> {
        let objects = self
            .rt
            .block_on(self.s3.list_under(&self.name, key, 1))
            .ok()??;
        let object = objects.into_iter().find(|o| o.key == key)?;
        let to = std::env::temp_dir().join(format!(
            "skyc-k8s-get-{}-{}",
            std::process::id(),
            key.replace('/', "_")
        ));
        std::fs::write(&to, b"").ok()?;
        self.rt
            .block_on(self.s3.get_object(&self.name, &object, &to))
            .ok()?;
        let bytes = std::fs::read(&to).ok();
        let _ = std::fs::remove_file(&to);
        bytes
    }
}

/// SkyPilot's RLHF sharing on Kubernetes: a trainer and a rollout server
/// mount one bucket (MOUNT) and see each other's writes; the trainer's
/// MOUNT_CACHED checkpoint, written just before its container ends, is in
/// the bucket once the pod has ended (its sidecar waited for the upload).
#[test]
fn pods_mount_buckets_through_their_sidecars() {
    let endpoint = match ready() {
        Ok(e) => e,
        Err(why) => {
            assert!(
                std::env::var_os("SKYC_PODS_REQUIRED").is_none()
                    || std::env::var_os("SKYC_FUSE_REQUIRED").is_none(),
                "bucket mounts cannot run here: {why}"
            );
            eprintln!("!!! SKIPPED: {why}");
            return;
        }
    };
    let id = std::process::id();
    let policy = Bucket::new(&endpoint, &format!("skyc-k8s-policy-{id}"));
    let ckpt = Bucket::new(&endpoint, &format!("skyc-k8s-ckpt-{id}"));
    ckpt.put("run/.keep", b"");
    let yaml = format!(
        "name: g\nexecution: parallel\n---\nname: trainer\nfile_mounts:\n  /policy:\n    \
         source: s3://{p}\n    mode: MOUNT\n  /ckpt:\n    source: s3://{c}/run\n    mode: \
         MOUNT_CACHED\nrun: |\n  head -c 3000000 /dev/urandom > /tmp/w && cp /tmp/w /policy/v1.bin\n  \
         echo \"trainer wrote $(sha256sum < /tmp/w | cut -c1-16)\"\n  \
         for i in $(seq 200); do test -f /policy/ack && break; sleep 0.2; done\n  \
         echo \"trainer sees $(cat /policy/ack)\"\n  \
         head -c 5000000 /dev/urandom > /tmp/c && cp /tmp/c /ckpt/step-1.bin\n  \
         echo \"checkpoint $(sha256sum < /tmp/c | cut -c1-16)\"\n\
         ---\nname: rollout\nfile_mounts:\n  /policy:\n    source: s3://{p}\n    mode: MOUNT\n\
         run: |\n  for i in $(seq 200); do test -f /policy/v1.bin && break; sleep 0.2; done\n  \
         echo \"rollout reads $(sha256sum < /policy/v1.bin | cut -c1-16)\"\n  \
         echo served-v1 > /policy/ack\n",
        p = policy.name,
        c = ckpt.name,
    );
    let c = skyc_compiler::compile(
        "group.yaml",
        yaml.as_bytes(),
        &skyc_compiler::Options::default(),
    );
    let group = c.group.expect("a group");
    // As the submission found them.
    let found = |destination: &str, bucket: &str, path: &str, cached: bool| Mounted {
        destination: destination.into(),
        store: skyc_targets::storage::Store::S3,
        bucket: bucket.into(),
        path: path.into(),
        cached,
        endpoint: Some(endpoint.clone()),
        region: "us-east-1".into(),
    };
    let options = skyc_targets::k8s::Options {
        namespace: Some(super::fake::NS.to_owned()),
        bucket_mounts: skyc_targets::k8s::BucketMounts::Sidecar {
            image: "rclone/rclone:test".into(),
        },
        buckets: Some(vec![
            vec![
                found("/policy", &policy.name, "", false),
                found("/ckpt", &ckpt.name, "run", true),
            ],
            vec![found("/policy", &policy.name, "", false)],
        ]),
        ..Default::default()
    };
    let plan = Plan::new(
        &group,
        &Lowering {
            options: &options,
            namespace: super::fake::NS,
            context: None,
            grace: Duration::from_secs(2),
            secrets: &[],
            token: "run-1".into(),
        },
    )
    .unwrap_or_else(|d| panic!("lowering failed: {d:?}"));
    let dir = driver::state_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let fake = Fake::default();
    let kubelet = Arc::new(Kubelet::new(&fake, &dir));
    // Its containers and mounts end with the test, passed or not.
    struct Stop(Arc<Kubelet>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.stop();
        }
    }
    let _stop = Stop(kubelet.clone());
    *kubelet.instance_role.lock().unwrap() = vec![
        ("AWS_ACCESS_KEY_ID".into(), "AKIDSKYCTEST".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "skyc-test-secret".into()),
    ];
    relay_into(&kubelet.net_ns(), &endpoint);
    let mut d = Driver::start_in(dir, fake, plan, driver::tuning(), Some(kubelet.exec()));
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !d.settled() {
        assert!(
            std::time::Instant::now() < deadline,
            "not settled: {:?}\n{:#?}",
            d.statuses(),
            kubelet.output.lock().unwrap()
        );
        d.fake.world().reconcile_cluster();
        kubelet.start_pending();
        d.pump();
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = kubelet.output.lock().unwrap().clone();
    assert_eq!(
        d.statuses(),
        [Status::Succeeded, Status::Succeeded],
        "{output:#?}"
    );
    let trainer = &output["g-trainer-0-0"];
    let rollout = &output["g-rollout-0-0"];
    let wrote = trainer
        .lines()
        .find_map(|l| l.strip_prefix("trainer wrote "))
        .expect("the trainer's sum");
    assert!(
        rollout.contains(&format!("rollout reads {wrote}")),
        "{output:#?}"
    );
    assert!(trainer.contains("trainer sees served-v1"), "{output:#?}");
    // Both writes are the bucket's, byte for byte.
    let v1 = policy.get("v1.bin").expect("v1.bin in the bucket");
    assert_eq!(&crate::files::tar::sha256(&v1)[..16], wrote);
    assert_eq!(policy.get("ack").as_deref(), Some(&b"served-v1\n"[..]));
    let sum = trainer
        .lines()
        .find_map(|l| l.strip_prefix("checkpoint "))
        .expect("the checkpoint's sum");
    let step = ckpt
        .get("run/step-1.bin")
        .expect("the checkpoint was uploaded before the pod ended");
    assert_eq!(&crate::files::tar::sha256(&step)[..16], sum);
}
