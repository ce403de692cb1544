//! Buckets in `file_mounts`, copied (`DST: s3://bucket/path`, or a
//! storage spec with `mode: COPY`) and mounted: read from the S3
//! stand-in (moto's server, `SKYC_MOTO_ENDPOINT`) and the GCS stand-in
//! (gcp-storage-emulator, `SKYC_GCS_EMULATOR`), which scripts/test
//! starts, and found byte for byte where every node's code reads them,
//! on this machine and on the real Slurm cluster. Skipped, loudly,
//! without the stand-ins (failed under scripts/test, which provides
//! them).
//!
//! moto stands in for S3's API (listing, objects, errors); it is not
//! S3's consistency, throttling or regions. The GCS emulator stands in
//! for the JSON API's buckets and objects; it takes no credentials (so
//! the token exchange is tested on its own, in the runtime's unit
//! tests), and is not GCS's consistency, IAM or locations.

use crate::files::Target;
use crate::slurm_e2e::cluster;
use crate::support;
use crate::support::scratch::{Scratch, text};
use skyc_runtime::aws::s3::S3;
use skyc_runtime::gcp::gcs::Gcs;
use skyc_runtime::storage::Reach;
use std::collections::BTreeMap;
use std::process::Command;

/// A store's stand-in: S3's (moto) at its endpoint, GCS's (the emulator)
/// at its `host:port`.
#[derive(Clone, Debug)]
enum Stand {
    S3(String),
    Gcs(String),
}

impl Stand {
    /// Its URL scheme.
    fn scheme(&self) -> &'static str {
        match self {
            Stand::S3(_) => "s3",
            Stand::Gcs(_) => "gs",
        }
    }

    /// What a storage spec that names a bucket alone says of its store
    /// (S3 is the default).
    fn store_line(&self, indent: &str) -> String {
        match self {
            Stand::S3(_) => String::new(),
            Stand::Gcs(_) => format!("\n{indent}store: gcs"),
        }
    }
}

/// The S3 stand-in, or `None` (after a loud message).
fn moto() -> Option<Stand> {
    stand(
        "SKYC_MOTO_ENDPOINT",
        "SKYC_MOTO_REQUIRED",
        "the S3 stand-in",
    )
    .map(Stand::S3)
}

/// The GCS stand-in, or `None` (after a loud message).
fn gcs() -> Option<Stand> {
    stand("SKYC_GCS_EMULATOR", "SKYC_GCS_REQUIRED", "the GCS stand-in").map(Stand::Gcs)
}

fn stand(var: &str, required: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(e) if !e.is_empty() => Some(e),
        _ => {
            assert!(
                std::env::var_os(required).is_none(),
                "{required} is set but {var} is not"
            );
            eprintln!("!!! SKIPPED: buckets need {what} ({var})");
            None
        }
    }
}

/// What the state directory's snapshots hold (staged copies too).
fn files_left(s: &Scratch) -> Vec<String> {
    std::fs::read_dir(s.state().join("files"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".lock")
        .collect()
}

/// The test's own client of a stand-in.
struct Bucket {
    name: String,
    client: Client,
    rt: tokio::runtime::Runtime,
}

enum Client {
    S3(S3),
    Gcs(Gcs),
}

impl Bucket {
    /// `name`, made (or found) on the stand-in, emptied.
    fn new(stand: &Stand, name: &str) -> Bucket {
        let b = Bucket::at(stand, name);
        let store = b.store();
        b.rt.block_on(async {
            store.create_bucket(name).await.expect("CreateBucket");
            for o in store
                .list_under(name, "", 10)
                .await
                .expect("list")
                .unwrap_or_default()
            {
                store
                    .delete_object(name, &o.key)
                    .await
                    .expect("DeleteObject");
            }
        });
        b
    }

    /// `name` on the stand-in, whether it is there or not.
    fn at(stand: &Stand, name: &str) -> Bucket {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let client = match stand {
            Stand::S3(endpoint) => Client::S3(support::stand_in_s3(endpoint, "us-east-1")),
            Stand::Gcs(host) => {
                let access = skyc_runtime::gcp::credentials::Access {
                    how: skyc_runtime::gcp::credentials::How::Emulator(format!("http://{host}")),
                    project: Some("skyc-test".into()),
                };
                Client::Gcs(
                    rt.block_on(Gcs::connect(
                        access,
                        skyc_runtime::aws::ec2::client::Tuning::default(),
                    ))
                    .expect("GCS client"),
                )
            }
        };
        Bucket {
            name: name.to_owned(),
            client,
            rt,
        }
    }

    fn store(&self) -> Reach<'_> {
        match &self.client {
            Client::S3(s3) => Reach::S3(s3),
            Client::Gcs(gcs) => Reach::Gcs(gcs),
        }
    }

    fn put(&self, key: &str, bytes: &[u8]) {
        let sha = skyc_runtime::files::tar::sha256(bytes);
        let data = bytes.to_vec();
        let source: skyc_runtime::aws::s3::Source =
            std::sync::Arc::new(move |w: &mut dyn std::io::Write| w.write_all(&data));
        self.rt
            .block_on(
                self.store()
                    .put_object(&self.name, key, bytes.len() as u64, &sha, source),
            )
            .expect("PutObject");
    }

    /// Removes the bucket with what it holds; whether it was there.
    fn remove(self) -> bool {
        let store = self.store();
        self.rt.block_on(async {
            let Some(objects) = store.list_under(&self.name, "", 10).await.expect("list") else {
                return false;
            };
            for o in objects {
                store
                    .delete_object(&self.name, &o.key)
                    .await
                    .expect("DeleteObject");
            }
            store.delete_bucket(&self.name).await.expect("DeleteBucket");
            true
        })
    }

    fn get(&self, key: &str) -> Vec<u8> {
        let to = std::env::temp_dir().join(format!(
            "skyc-get-{}-{}",
            std::process::id(),
            key.replace('/', "_")
        ));
        let object = self
            .rt
            .block_on(self.store().list_under(&self.name, key, 1))
            .expect("list")
            .unwrap_or_default()
            .into_iter()
            .find(|o| o.key == key)
            .unwrap_or_else(|| panic!("no object {key} in {}", self.name));
        std::fs::write(&to, b"").expect("the file to fill");
        self.rt
            .block_on(self.store().get_object(&self.name, &object, &to))
            .expect("GetObject");
        let bytes = std::fs::read(&to).expect("read");
        let _ = std::fs::remove_file(&to);
        bytes
    }

    fn keys(&self) -> Vec<String> {
        let listed = self
            .rt
            .block_on(self.store().list_under(&self.name, "", 10))
            .expect("list");
        listed
            .unwrap_or_default()
            .into_iter()
            .map(|o| o.key)
            .collect()
    }
}

/// `cmd` reading buckets from the stand-in with the test's credentials,
/// and no other AWS or Google configuration of this machine.
fn with_aws(mut cmd: Command, stand: &Stand, home: &std::path::Path) -> Command {
    let endpoint = match stand {
        Stand::S3(endpoint) => endpoint.as_str(),
        Stand::Gcs(host) => {
            cmd.env("STORAGE_EMULATOR_HOST", host);
            "http://127.0.0.1:9"
        }
    };
    cmd.env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ACCESS_KEY_ID", "AKIDSKYCTEST")
        .env("AWS_SECRET_ACCESS_KEY", "skyc-test-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", home.join("no-config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", home.join("no-credentials"))
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("GOOGLE_APPLICATION_CREDENTIALS")
        .env("HOME", home);
    if let Stand::S3(_) = stand {
        cmd.env_remove("STORAGE_EMULATOR_HOST");
    }
    cmd
}

/// Every node sums each file it finds where the task reads its data.
const GROUP: &str = "\
name: copied
execution: parallel
---
name: trainer
num_nodes: 2
file_mounts:
  /data: s3://BUCKET/train
  ~/cfg.json: s3://BUCKET/config.json
run: |
  cd /data && find . -type f | LC_ALL=C sort | while read -r f; do
    echo \"sum $(sha256sum \"$f\" | cut -c1-16) $f\"
  done
  test -d /data/empty && echo 'marker dir'
  echo \"cfg $(cat ~/cfg.json)\"
  echo written-by-a-node > /data/new.txt
---
name: eval
file_mounts:
  /eval:
    source: s3://BUCKET/train
    mode: COPY
run: |
  cd /eval && echo \"eval sees $(find . -type f | wc -l) files, $(cat 'sub dir/ü+x.bin')\"
";

#[test]
fn a_copied_bucket_reaches_every_node() {
    copy(Target::Local, moto());
}

#[test]
fn a_copied_bucket_reaches_every_node_on_slurm() {
    let Some(_cluster) = cluster() else { return };
    copy(Target::Slurm, moto());
}

#[test]
fn a_copied_gcs_bucket_reaches_every_node() {
    copy(Target::Local, gcs());
}

#[test]
fn a_copied_gcs_bucket_reaches_every_node_on_slurm() {
    let Some(_cluster) = cluster() else { return };
    copy(Target::Slurm, gcs());
}

fn copy(target: Target, stand: Option<Stand>) {
    let Some(endpoint) = stand else { return };
    let s = target.scratch("storage-copy");
    let name = format!(
        "skyc-copy-{}-{}-{}",
        std::process::id(),
        endpoint.scheme(),
        if target == Target::Local {
            "local"
        } else {
            "slurm"
        }
    );
    let bucket = Bucket::new(&endpoint, &name);
    let mut want = BTreeMap::new();
    // 40 objects, some over one streamed chunk, in nested prefixes.
    for i in 0..40u32 {
        let len = if i % 10 == 0 {
            (1 << 20) + i as usize
        } else {
            100 + i as usize
        };
        let bytes: Vec<u8> = (0..len).map(|j| (j as u32 * 31 + i) as u8).collect();
        let key = format!("shard-{:02}/part-{i}.bin", i % 4);
        bucket.put(&format!("train/{key}"), &bytes);
        want.insert(format!("./{key}"), bytes);
    }
    // A key with a space, a `+` and a non-ASCII letter, and a folder
    // marker (an empty directory in the bucket's consoles).
    bucket.put("train/sub dir/ü+x.bin", b"odd key");
    want.insert("./sub dir/ü+x.bin".into(), b"odd key".to_vec());
    bucket.put("train/empty/", b"");
    bucket.put("config.json", b"{\"lr\": 0.5}");
    // Beside the prefix, not under it.
    bucket.put("train-old/stale.bin", b"stale");
    let keys_before = bucket.keys();
    s.write(
        "g.yaml",
        &GROUP
            .replace("s3://", &format!("{}://", endpoint.scheme()))
            .replace("BUCKET", &name),
    );
    let home = s.dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let out = with_aws(target.run(&s, "g.yaml"), &endpoint, &home)
        .output()
        .expect("run");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for rank in 0..2 {
        for (path, bytes) in &want {
            let sum = &skyc_runtime::files::tar::sha256(bytes)[..16];
            let line = format!("(trainer-{rank}) sum {sum} {path}");
            assert!(stdout.contains(&line), "missing {line:?} in\n{stdout}");
        }
        let sums = stdout
            .lines()
            .filter(|l| l.starts_with(&format!("(trainer-{rank}) sum ")))
            .count();
        assert_eq!(sums, want.len(), "node {rank} found other files:\n{stdout}");
        for line in ["marker dir", "cfg {\"lr\": 0.5}"] {
            let line = format!("(trainer-{rank}) {line}");
            assert!(stdout.contains(&line), "missing {line:?} in\n{stdout}");
        }
    }
    // The storage form, the same prefix: read once, given to both tasks.
    assert!(
        stdout.contains(&format!("(eval-0) eval sees {} files, odd key", want.len())),
        "{stdout}"
    );
    // A copy: what the nodes wrote is theirs, not the bucket's.
    assert_eq!(bucket.keys(), keys_before);
}

/// A prefix with more objects than one listing page (1,000) is copied
/// whole: every object, once.
#[test]
fn a_prefix_of_more_than_a_page_of_objects_is_copied() {
    let Some(endpoint) = moto() else { return };
    let s = Scratch::new("storage-page");
    let bucket = Bucket::new(&endpoint, &format!("skyc-copy-page-{}", std::process::id()));
    for i in 0..1001 {
        bucket.put(&format!("shards/{i:04}.txt"), format!("{i}\n").as_bytes());
    }
    s.write(
        "g.yaml",
        &format!(
            "name: t\nfile_mounts:\n  /data: s3://{}/shards\nrun: |\n               echo \"found $(ls /data | wc -l) files, sum $(cat /data/* | awk '{{s += $1}} END {{print s}}')\"\n",
            bucket.name
        ),
    );
    let home = s.dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    // And mounted, where this machine can: one key asked of the prefix
    // at submission, however many it holds.
    let mounts = fuse();
    if mounts {
        let copied = std::fs::read_to_string(s.dir.join("g.yaml")).expect("group");
        s.write(
            "g.yaml",
            &format!(
                "name: page\nexecution: parallel\n---\n{}---\nname: m\nfile_mounts:\n  /m:\n    \
                 source: s3://{}/shards\n    mode: MOUNT\nrun: echo \"mounted $(ls /m | wc -l) files\"\n",
                copied,
                bucket.name
            ),
        );
    }
    let out = with_aws(s.skyc(&["run", "g.yaml"]), &endpoint, &home)
        .output()
        .expect("run");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(stdout.contains("found 1001 files, sum 500500"), "{stdout}");
    if mounts {
        assert!(stdout.contains("(m-0) mounted 1001 files"), "{stdout}");
    }
}

/// A bucket that is not there, or a path in it that names nothing: a
/// located error before anything starts, and nothing left behind.
#[test]
fn buckets_that_cannot_be_copied_are_located_errors() {
    let Some(endpoint) = moto() else { return };
    let s = Scratch::new("storage-errors");
    let bucket = Bucket::new(&endpoint, "skyc-copy-errors");
    bucket.put("train/a.bin", b"a");
    s.write(
        "g.yaml",
        "name: t\nfile_mounts:\n  /data: s3://skyc-no-such-bucket/train\n  /d2: \
         s3://skyc-copy-errors/trian\n  /d3:\n    source: s3://skyc-copy-errors/train\n    \
         mode: MOUNT\nrun: echo\n",
    );
    let home = s.dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let out = with_aws(s.skyc(&["run", "g.yaml"]), &endpoint, &home)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    support::snapshots("local/storage")
        .bind(|| insta::assert_snapshot!("copy_errors", text(&out.stderr)));
    assert!(
        !s.state().join("groups").exists() || {
            std::fs::read_dir(s.state().join("groups"))
                .map(|d| d.count())
                .unwrap_or(0)
                == 0
        }
    );
    let left = files_left(&s);
    assert_eq!(left, Vec::<String>::new(), "half-taken files left");
    // Keys that would be one path: refused once listed, before a byte
    // is fetched, and what was staged is removed.
    bucket.put("clash/a", b"file");
    bucket.put("clash/a/b", b"under the file");
    s.write(
        "clash.yaml",
        "name: t\nfile_mounts:\n  /data: s3://skyc-copy-errors/clash\nrun: echo\n",
    );
    let out = with_aws(s.skyc(&["run", "clash.yaml"]), &endpoint, &home)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    support::snapshots("local/storage")
        .bind(|| insta::assert_snapshot!("copy_collision", text(&out.stderr)));
    let left = files_left(&s);
    assert_eq!(left, Vec::<String>::new(), "a staged copy left");
    // Without credentials: said at the bucket, with where skyc looked.
    let out = s
        .skyc(&["run", "g.yaml"])
        .env("HOME", &home)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", home.join("no-config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", home.join("no-credentials"))
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_PROFILE")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("error[unreadable-bucket-source]: cannot copy `s3://skyc-no-such-bucket/train`: no AWS credentials"),
        "{stderr}"
    );
}

/// GCS buckets that cannot be read are located errors too, each said in
/// GCS's terms: a bucket that is not there, a path that names nothing; a
/// credentials file that cannot be read, at every bucket.
#[test]
fn gcs_buckets_that_cannot_be_copied_are_located_errors() {
    let Some(stand) = gcs() else { return };
    let s = Scratch::new("storage-gcs-errors");
    let bucket = Bucket::new(&stand, "skyc-gcs-errors");
    bucket.put("train/a.bin", b"a");
    s.write(
        "g.yaml",
        "name: t\nfile_mounts:\n  /data: gs://skyc-no-such-bucket/train\n  /d2: \
         gs://skyc-gcs-errors/trian\nrun: echo\n",
    );
    let home = s.dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let out = with_aws(s.skyc(&["run", "g.yaml"]), &stand, &home)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    support::snapshots("local/storage")
        .bind(|| insta::assert_snapshot!("gcs_copy_errors", text(&out.stderr)));
    assert_eq!(
        files_left(&s),
        Vec::<String>::new(),
        "half-taken files left"
    );
    // Google's own service, with a credentials file that is not there:
    // said at each bucket, before anything is asked of the network.
    let out = s
        .skyc(&["run", "g.yaml"])
        .env("HOME", &home)
        .env_remove("STORAGE_EMULATOR_HOST")
        .env(
            "GOOGLE_APPLICATION_CREDENTIALS",
            home.join("no-such-key.json"),
        )
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr).replace(&home.display().to_string(), "HOME");
    support::snapshots("local/storage")
        .bind(|| insta::assert_snapshot!("gcs_no_credentials", stderr));
    assert!(bucket.remove());
}

/// `build --target k8s` reads a copied bucket as a run would: its bytes
/// are in the manifests' files ConfigMap (the stream a pod unpacks); the
/// mounted bucket is refused unless its sidecar is allowed, and is then
/// the pods' sidecar.
#[test]
fn a_copied_bucket_is_in_the_kubernetes_manifests() {
    let Some(endpoint) = moto() else { return };
    let s = Scratch::new("storage-k8s");
    let bucket = Bucket::new(&endpoint, "skyc-copy-k8s");
    bucket.put("eval/set.jsonl", b"{\"q\": 1}\n");
    s.write(
        "g.yaml",
        "name: g\nexecution: parallel\n---\nname: a\n\
         file_mounts:\n  /data: s3://skyc-copy-k8s/eval\n  /policy:\n    name: policy\n    \
         mode: MOUNT\nrun: cat /data/set.jsonl\n",
    );
    let home = s.dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let mut cmd = support::skyc();
    cmd.args(["build", "g.yaml", "--target", "k8s", "-o", "json"])
        .current_dir(&s.dir);
    let out = with_aws(cmd, &endpoint, &home).output().expect("build");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("error[k8s-bucket-mount]"), "{stderr}");
    let mut cmd = support::skyc();
    cmd.args(["build", "g.yaml", "--target", "k8s", "-o", "json"])
        .args(["--bucket-mounts", "sidecar"])
        .current_dir(&s.dir);
    let out = with_aws(cmd, &endpoint, &home).output().expect("build");
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("`/data`"), "{stderr}");
    assert!(!stderr.contains("`/policy`"), "{stderr}");
    assert!(
        text(&out.stdout).contains("\"skyc-bucket-0\""),
        "no sidecar for /policy"
    );
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let streams: Vec<Vec<u8>> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|o| o["kind"] == "ConfigMap")
        .filter_map(|o| o["binaryData"].as_object())
        .flat_map(|d| d.values())
        .map(|v| {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(v.as_str().expect("base64"))
                .expect("base64")
        })
        .collect();
    assert_eq!(streams.len(), 1, "one stream: the bucket's");
    // The stream is a tar holding the object under its name.
    let stream = s.dir.join("stream.tar");
    std::fs::write(&stream, &streams[0]).expect("stream");
    let unpacked = s.dir.join("unpacked");
    std::fs::create_dir_all(&unpacked).expect("mkdir");
    let tar = Command::new("tar")
        .arg("-xf")
        .arg(&stream)
        .arg("-C")
        .arg(&unpacked)
        .status()
        .expect("tar");
    assert!(tar.success());
    assert_eq!(
        std::fs::read(unpacked.join("set.jsonl")).expect("the object"),
        b"{\"q\": 1}\n"
    );
}

/// rclone and FUSE, which mounting needs, or `false` (after a loud
/// message) when this machine has none and none is required.
fn fuse() -> bool {
    if skyc_runtime::storage::mount::client().is_ok() && rustix::process::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("SKYC_FUSE_REQUIRED").is_none(),
        "SKYC_FUSE_REQUIRED is set but rclone, /dev/fuse or root is missing"
    );
    eprintln!(
        "!!! SKIPPED: mounting buckets needs rclone, /dev/fuse and root (scripts/test installs them)"
    );
    false
}

/// Tasks that mount one bucket see each other's writes (SkyPilot's RLHF
/// example shares its policy so): the trainer publishes weights, the
/// rollout server reads them and answers in the same bucket. A bucket
/// named alone is made, and kept after the group; a MOUNT_CACHED
/// checkpoint written just before the node ends is in the bucket when
/// the group has ended.
#[test]
fn tasks_that_mount_a_bucket_see_each_others_writes() {
    mount(Target::Local, moto());
}

#[test]
fn tasks_that_mount_a_bucket_see_each_others_writes_on_slurm() {
    let Some(_cluster) = cluster() else { return };
    mount(Target::Slurm, moto());
}

#[test]
fn tasks_that_mount_a_gcs_bucket_see_each_others_writes() {
    mount(Target::Local, gcs());
}

#[test]
fn tasks_that_mount_a_gcs_bucket_see_each_others_writes_on_slurm() {
    let Some(_cluster) = cluster() else { return };
    mount(Target::Slurm, gcs());
}

fn mount(target: Target, stand: Option<Stand>) {
    let Some(endpoint) = stand else { return };
    if !fuse() {
        return;
    }
    let s = target.scratch("storage-mount");
    let on = format!(
        "{}-{}",
        endpoint.scheme(),
        if target == Target::Local {
            "local"
        } else {
            "slurm"
        }
    );
    let policy = format!("skyc-policy-{}-{on}", std::process::id());
    let ckpt = Bucket::new(&endpoint, &format!("skyc-ckpt-{}-{on}", std::process::id()));
    ckpt.put("run/.keep", b"");
    let weights: Vec<u8> = (0..(3u32 << 20)).map(|i| (i * 13 % 241) as u8).collect();
    std::fs::write(s.dir.join("weights.bin"), &weights).expect("weights");
    let checkpoint: Vec<u8> = (0..(5u32 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(s.dir.join("ckpt.bin"), &checkpoint).expect("checkpoint");
    let group = format!(
        "name: shared\nexecution: parallel\nprimary_tasks: [trainer, rollout]\n---\n\
         name: trainer\nfile_mounts:\n  /policy:\n    name: {policy}{store}\n    mode: MOUNT\n  \
         /ckpt:\n    source: {scheme}://{ckpt}/run\n    mode: MOUNT_CACHED\n\
         run: |\n  cp {dir}/weights.bin /policy/v1.bin\n  \
         for i in $(seq 120); do test -f /policy/ack && break; sleep 0.5; done\n  \
         echo \"trainer sees $(cat /policy/ack)\"\n  cp {dir}/ckpt.bin /ckpt/step-1.bin\n\
         ---\nname: rollout\nfile_mounts:\n  /policy:\n    name: {policy}{store}\n    mode: MOUNT\n\
         run: |\n  for i in $(seq 120); do test -f /policy/v1.bin && break; sleep 0.5; done\n  \
         echo \"rollout reads $(sha256sum < /policy/v1.bin | cut -c1-16)\"\n  \
         echo served-v1 > /policy/ack\n  \
         echo \"pid 1 is $(tr '\\0' ' ' < /proc/1/cmdline)\"\n  \
         (sleep 0.2 &)\n  sleep 1.5\n  \
         echo \"zombies $(awk '$3 == \"Z\"' /proc/[0-9]*/stat 2>/dev/null | wc -l)\"\n",
        ckpt = ckpt.name,
        dir = s.dir.display(),
        scheme = endpoint.scheme(),
        store = endpoint.store_line("    "),
    );
    s.write("g.yaml", &group);
    let home = s.dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let out = with_aws(target.run(&s, "g.yaml"), &endpoint, &home)
        .output()
        .expect("run");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let sum = &skyc_runtime::files::tar::sha256(&weights)[..16];
    assert!(
        stdout.contains(&format!("(rollout-0) rollout reads {sum}")),
        "{stdout}"
    );
    assert!(
        stdout.contains("(trainer-0) trainer sees served-v1"),
        "{stdout}"
    );
    // On Slurm the files helper is the first process of the step's PID
    // namespace, so the parent of what the task leaves behind: an orphan
    // that has ended is reaped while the task runs.
    if target == Target::Slurm {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("(rollout-0) pid 1 is ") && l.contains(" __node-files ")),
            "the files helper is not the step's first process:\n{stdout}"
        );
        assert!(stdout.contains("(rollout-0) zombies 0"), "{stdout}");
    }
    // Made for its name, and kept with what both tasks wrote.
    let made = Bucket::at(&endpoint, &policy);
    assert_eq!(made.keys(), ["ack", "v1.bin"]);
    assert_eq!(made.get("v1.bin"), weights);
    // Written just before the trainer ended, through the cache: uploaded
    // before the node was let end.
    assert_eq!(ckpt.get("run/step-1.bin"), checkpoint);
}

/// What cannot be mounted is refused before anything starts, at the
/// mount: a bucket that is not there; no rclone on this machine. A bucket
/// skyc did not make is kept whatever `persistent` says: a warning.
#[test]
fn buckets_that_cannot_be_mounted_are_located_errors() {
    let Some(endpoint) = moto() else { return };
    if !fuse() {
        return;
    }
    let s = Scratch::new("storage-mount-errors");
    Bucket::at(&endpoint, "skyc-kept-bucket").remove();
    Bucket::new(&endpoint, "skyc-theirs");
    s.write(
        "g.yaml",
        "name: t\nfile_mounts:\n  /data:\n    source: s3://skyc-no-such-bucket/x\n    mode: \
         MOUNT\n  /kept:\n    name: skyc-kept-bucket\n    persistent: false\n  /theirs:\n    \
         source: s3://skyc-theirs\n    persistent: false\nrun: echo\n",
    );
    let home = s.dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let out = with_aws(s.skyc(&["run", "g.yaml"]), &endpoint, &home)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    support::snapshots("local/storage")
        .bind(|| insta::assert_snapshot!("mount_errors", text(&out.stderr)));
    // Refused: the bucket its name would have made is not made.
    assert!(
        !Bucket::at(&endpoint, "skyc-kept-bucket").remove(),
        "a refused submission made a bucket"
    );
    // Refused once planned (more than this machine has): the bucket its
    // name would make is not made, nor recorded.
    Bucket::at(&endpoint, "skyc-after-plan").remove();
    s.write(
        "big.yaml",
        "name: t\nresources:\n  cpus: 100000\nfile_mounts:\n  /p:\n    name: skyc-after-plan\n\
         run: echo\n",
    );
    let out = with_aws(s.skyc(&["run", "big.yaml"]), &endpoint, &home)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("exceeds-local-capacity"));
    assert!(
        !Bucket::at(&endpoint, "skyc-after-plan").remove(),
        "a submission refused by its plan made a bucket"
    );
    assert_eq!(
        storage_ls(&s, &endpoint, &home),
        Vec::<serde_json::Value>::new()
    );
    // Without rclone on the PATH.
    let out = with_aws(s.skyc(&["run", "g.yaml"]), &endpoint, &home)
        .env("PATH", "/nonexistent")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    support::snapshots("local/storage")
        .bind(|| insta::assert_snapshot!("mount_without_rclone", text(&out.stderr)));
    Bucket::at(&endpoint, "skyc-theirs").remove();
}

/// `skyc storage ls --json`, run as `cmd` would run skyc.
fn storage_ls(s: &Scratch, endpoint: &Stand, home: &std::path::Path) -> Vec<serde_json::Value> {
    let out = with_aws(s.skyc(&["storage", "ls", "--json"]), endpoint, home)
        .output()
        .expect("storage ls");
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Waits (`secs` at most) until `done`, or fails saying `what`.
fn until(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !done() {
        assert!(
            start.elapsed().as_secs() < secs,
            "{what}: not within {secs} s"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

fn status_of(s: &Scratch, gid: i64) -> String {
    skyc_runtime::store::Store::open_read_only(&s.state())
        .ok()
        .flatten()
        .and_then(|store| store.group(gid).ok().flatten())
        .map(|g| g.status)
        .unwrap_or_default()
}

fn finished(s: &Scratch, gid: i64) -> bool {
    skyc_runtime::store::Store::open_read_only(&s.state())
        .ok()
        .flatten()
        .and_then(|store| store.group(gid).ok().flatten())
        .is_some_and(|g| g.finished_at_ms.is_some())
}

/// Whether bucket `name` is on the stand-in.
fn exists(stand: &Stand, name: &str) -> bool {
    let b = Bucket::at(stand, name);
    b.rt.block_on(b.store().first_under(name, ""))
        .expect("list")
        .is_some()
}

/// The group of the lifecycle tests: a trainer that mounts a bucket kept
/// after it (SkyPilot's default) and one that is not (`persistent:
/// false`), writes to both, says so, then waits for the test's word.
fn lifecycle_group(
    dir: &std::path::Path,
    stand: &Stand,
    kept: &str,
    gone: &str,
    theirs: &str,
) -> String {
    format!(
        "name: lifecycle\nfile_mounts:\n  /policy:\n    name: {kept}{store}\n  \
         /scratch:\n    name: {gone}{store}\n    persistent: false\n  /theirs:\n    \
         name: {theirs}{store}\n    persistent: false\n\
         run: |\n  for i in $(seq 40); do echo \"part $i\" > /scratch/part-$i; done\n  \
         echo v1 > /policy/v1\n  echo ok > /theirs/ok\n  touch {dir}/written\n  \
         for i in $(seq 1200); do test -f {dir}/go && break; sleep 0.1; done\n",
        dir = dir.display(),
        store = stand.store_line("    "),
    )
}

/// Buckets skyc made for a `name` alone are listed with the groups that
/// mount them. The one kept outlives its group, with what the group wrote,
/// until `skyc storage delete`, which is refused while a group mounts
/// it; the one not kept is deleted, with every object, when its group
/// ends.
#[test]
fn buckets_skyc_made_are_kept_or_deleted_after_their_group() {
    lifecycle(Target::Local, moto());
}

#[test]
fn buckets_skyc_made_are_kept_or_deleted_after_their_group_on_slurm() {
    let Some(_cluster) = cluster() else { return };
    lifecycle(Target::Slurm, moto());
}

#[test]
fn gcs_buckets_skyc_made_are_kept_or_deleted_after_their_group() {
    lifecycle(Target::Local, gcs());
}

fn lifecycle(target: Target, stand: Option<Stand>) {
    let Some(endpoint) = stand else { return };
    if !fuse() {
        return;
    }
    let s = target.scratch("storage-lifecycle");
    let on = format!(
        "{}-{}",
        endpoint.scheme(),
        if target == Target::Local {
            "local"
        } else {
            "slurm"
        }
    );
    let kept = format!("skyc-kept-{}-{on}", std::process::id());
    let gone = format!("skyc-gone-{}-{on}", std::process::id());
    // The user's own bucket, which no spec can have skyc delete.
    let theirs = Bucket::new(
        &endpoint,
        &format!("skyc-theirs-{}-{on}", std::process::id()),
    );
    Bucket::at(&endpoint, &kept).remove();
    Bucket::at(&endpoint, &gone).remove();
    s.write(
        "g.yaml",
        &lifecycle_group(&s.dir, &endpoint, &kept, &gone, &theirs.name),
    );
    let home = s.dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let out = with_aws(target.run(&s, "g.yaml"), &endpoint, &home)
        .arg("-d")
        .output()
        .expect("run -d");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!(
            "warning[bucket-kept]: bucket `{}` was not made by skyc",
            theirs.name
        )),
        "{}",
        text(&out.stderr)
    );
    let gid: i64 = text(&out.stdout).trim().parse().expect("group id");
    until("the trainer's writes", 120, || {
        s.dir.join("written").exists()
    });
    // Not deleted under its group.
    assert_eq!(Bucket::at(&endpoint, &gone).keys().len(), 40);

    let listed = storage_ls(&s, &endpoint, &home);
    let names: Vec<_> = listed.iter().map(|b| b["name"].as_str().unwrap()).collect();
    assert_eq!(names, [gone.as_str(), kept.as_str()]);
    for b in &listed {
        assert_eq!(b["used_by"], serde_json::json!([gid]), "{b}");
        assert_eq!(b["persistent"], b["name"] == kept.as_str(), "{b}");
        assert_eq!(
            b["url"],
            format!("{}://{}", endpoint.scheme(), b["name"].as_str().unwrap())
        );
    }
    // Mounted: not deleted under its group.
    let out = with_aws(s.skyc(&["storage", "delete", &kept]), &endpoint, &home)
        .output()
        .expect("storage delete");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!(
            "bucket `{kept}` is mounted by live groups: {gid} (lifecycle)"
        )),
        "{}",
        text(&out.stderr)
    );
    assert!(exists(&endpoint, &kept));

    std::fs::write(s.dir.join("go"), "").expect("go");
    until("the group's end", 120, || finished(&s, gid));
    assert_eq!(status_of(&s, gid), "SUCCEEDED");
    until("the deletion of the bucket not kept", 60, || {
        !exists(&endpoint, &gone)
    });
    // The user's bucket stays, with what the group wrote.
    assert_eq!(theirs.keys(), ["ok"]);
    assert!(theirs.remove());
    let listed = storage_ls(&s, &endpoint, &home);
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(listed[0]["name"], kept.as_str());
    assert_eq!(listed[0]["used_by"], serde_json::json!([]));
    // Kept, with what the group wrote.
    assert_eq!(Bucket::at(&endpoint, &kept).get("v1"), b"v1\n");

    let out = with_aws(s.skyc(&["storage", "delete", &kept]), &endpoint, &home)
        .output()
        .expect("storage delete");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        !exists(&endpoint, &kept),
        "`storage delete` left the bucket"
    );
    assert_eq!(
        storage_ls(&s, &endpoint, &home),
        Vec::<serde_json::Value>::new()
    );
    let out = with_aws(s.skyc(&["storage", "delete", &kept]), &endpoint, &home)
        .output()
        .expect("storage delete");
    assert_eq!(out.status.code(), Some(102), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(&format!("no bucket named `{kept}` was made by skyc")));
}

/// A supervisor that dies after its group ended, while S3 does not answer
/// its deletion of a bucket not kept, leaves the bucket to the next
/// supervisor, which deletes it. The stand-in is reached through a relay
/// the test holds from the trainer's last write until the supervisor is
/// dead.
#[test]
fn a_bucket_not_kept_is_deleted_by_the_next_supervisor_after_a_crash() {
    let Some(moto) = moto() else { return };
    if !fuse() {
        return;
    }
    let s = Scratch::new("storage-crash");
    let Stand::S3(at) = &moto else {
        unreachable!("moto is S3's")
    };
    let relay = support::relay::Relay::to(at);
    let endpoint = Stand::S3(relay.endpoint());
    let kept = format!("skyc-kept-{}-crash", std::process::id());
    let gone = format!("skyc-gone-{}-crash", std::process::id());
    let theirs = Bucket::new(&moto, &format!("skyc-theirs-{}-crash", std::process::id()));
    Bucket::at(&moto, &kept).remove();
    Bucket::at(&moto, &gone).remove();
    s.write(
        "g.yaml",
        &lifecycle_group(&s.dir, &moto, &kept, &gone, &theirs.name),
    );
    let home = s.dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let out = with_aws(s.skyc(&["run", "g.yaml", "-d"]), &endpoint, &home)
        .output()
        .expect("run -d");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let gid: i64 = text(&out.stdout).trim().parse().expect("group id");
    until("the trainer's writes", 120, || {
        s.dir.join("written").exists()
    });

    relay.hold();
    std::fs::write(s.dir.join("go"), "").expect("go");
    until("the group's end", 120, || finished(&s, gid));
    // The deletion has begun, and waits on S3.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let pid: i32 = std::fs::read_to_string(s.state().join("supervisor.pid"))
        .expect("the supervisor waits on its deletion")
        .trim()
        .parse()
        .expect("a pid");
    let pid = rustix::process::Pid::from_raw(pid).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).expect("SIGKILL");
    until("the supervisor's death", 10, || {
        rustix::process::test_kill_process(pid).is_err()
    });
    assert_eq!(
        Bucket::at(&moto, &gone).keys().len(),
        40,
        "the bucket went before the supervisor died"
    );
    // Its deletion had begun: the bucket is marked, and a submission that
    // names it is refused rather than given a bucket about to go (it
    // reaches S3 directly: the relay is held).
    let out = with_aws(s.skyc(&["run", "g.yaml", "-d"]), &moto, &home)
        .output()
        .expect("run -d");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("bucket `{gone}` is being deleted")),
        "{}",
        text(&out.stderr)
    );
    relay.release();

    // Listed as being deleted; the listing starts a supervisor, which
    // finishes it.
    let listed = storage_ls(&s, &endpoint, &home);
    assert!(
        listed.iter().any(|b| b["name"] == gone.as_str()
            && b["persistent"] == false
            && b["deleting"] == true),
        "{listed:#?}"
    );
    until("the next supervisor's deletion", 60, || {
        !exists(&moto, &gone)
    });
    let listed = storage_ls(&s, &endpoint, &home);
    let names: Vec<_> = listed.iter().map(|b| b["name"].clone()).collect();
    assert_eq!(names, [kept.as_str()]);
    assert!(exists(&moto, &kept));
    Bucket::at(&moto, &kept).remove();
    assert!(theirs.remove(), "the user's bucket was deleted");
}

/// A name is one store's bucket in a state directory: a bucket skyc made
/// in S3 is not taken for the GCS bucket of that name, whose spec is
/// refused at the mount, and the S3 bucket's fate is unchanged.
#[test]
fn a_bucket_skyc_made_in_one_store_is_not_taken_for_the_other() {
    let (Some(s3), Some(gs)) = (moto(), gcs()) else {
        return;
    };
    let s = Scratch::new("storage-two-stores");
    let name = format!("skyc-twice-{}", std::process::id());
    Bucket::at(&s3, &name).remove();
    std::fs::create_dir_all(s.dir.join("src")).expect("src");
    s.write("src/a.txt", "a\n");
    let group = |store: &str| {
        format!(
            "name: t\nfile_mounts:\n  /data:\n    name: {name}\n    source: ./src\n    \
             mode: COPY{store}\nrun: cat /data/a.txt\n"
        )
    };
    s.write("s3.yaml", &group(""));
    s.write(
        "gcs.yaml",
        &group("\n    store: gcs\n    persistent: false"),
    );
    let home = s.dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    let out = with_aws(s.skyc(&["run", "s3.yaml"]), &s3, &home)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(Bucket::at(&s3, &name).keys(), ["a.txt"]);
    let out = with_aws(s.skyc(&["run", "gcs.yaml"]), &gs, &home)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "bucket `{name}` is named in gcs, and skyc made `s3://{name}` in s3"
        )) && stderr.contains("--> gcs.yaml:"),
        "{stderr}"
    );
    assert!(!exists(&gs, &name), "a GCS bucket was made");
    let listed = storage_ls(&s, &s3, &home);
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(
        (&listed[0]["store"], &listed[0]["persistent"]),
        (&serde_json::json!("s3"), &serde_json::json!(true))
    );
    assert!(Bucket::at(&s3, &name).remove());
    // Under a name of its own, the source is uploaded to GCS (the
    // bucket holds its bytes), the node reads it, and `skyc storage
    // delete` deletes the bucket skyc made.
    let other = format!("{name}-gs");
    s.write(
        "gcs.yaml",
        &group("\n    store: gcs").replace(&name, &other),
    );
    let out = with_aws(s.skyc(&["run", "gcs.yaml"]), &gs, &home)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("(t-0) a"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(Bucket::at(&gs, &other).get("a.txt"), b"a\n");
    let out = with_aws(s.skyc(&["storage", "delete", &other]), &gs, &home)
        .output()
        .expect("storage delete");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!exists(&gs, &other), "`storage delete` left the GCS bucket");
}

/// A storage spec's local `source` is uploaded to its named bucket when
/// the group is submitted, as SkyPilot syncs it: made when it is not
/// there, every file at its path as the key, `.git` and what
/// `.skyignore` leaves out not uploaded. A MOUNT reads it from the
/// bucket; a COPY is given the same bytes with the task's files, and its
/// bucket, not kept, is deleted after the group. A source that is a file
/// is a located error, and nothing is uploaded.
#[test]
fn a_local_source_is_uploaded_to_its_bucket() {
    let Some(endpoint) = moto() else { return };
    if !fuse() {
        return;
    }
    let s = Scratch::new("storage-upload");
    let code = format!("skyc-code-{}", std::process::id());
    let data = format!("skyc-data-{}", std::process::id());
    Bucket::at(&endpoint, &code).remove();
    Bucket::at(&endpoint, &data).remove();
    let big: Vec<u8> = (0..(2u32 << 20)).map(|i| (i * 31 % 253) as u8).collect();
    let mut put = BTreeMap::new();
    put.insert("train.py", b"print('train')\n".to_vec());
    put.insert("conf/model.yaml", b"layers: 12\n".to_vec());
    put.insert("weights/init.bin", big);
    for (path, bytes) in &put {
        let at = s.dir.join("src").join(path);
        std::fs::create_dir_all(at.parent().unwrap()).expect("dir");
        std::fs::write(at, bytes).expect("file");
    }
    std::fs::create_dir_all(s.dir.join("src/.git")).expect(".git");
    s.write("src/.git/HEAD", "ref: refs/heads/main\n");
    s.write("src/scratch.log", "left out\n");
    s.write("src/.skyignore", "scratch.log\n");
    s.write("one-file.txt", "x\n");
    let sums = "cd \"$D\" && find . -type f | LC_ALL=C sort | while read -r f; do \
                echo \"sum $(sha256sum \"$f\" | cut -c1-16) $f\"; done";
    s.write(
        "g.yaml",
        &format!(
            "name: upload\nexecution: parallel\n---\nname: mounted\nfile_mounts:\n  /code:\n    \
             name: {code}\n    source: ./src\n    mode: MOUNT\nenvs:\n  D: /code\nrun: |\n  {sums}\n\
             ---\nname: copied\nfile_mounts:\n  /data:\n    name: {data}\n    source: ./src\n    \
             mode: COPY\n    persistent: false\nenvs:\n  D: /data\nrun: |\n  {sums}\n  \
             touch {dir}/copied\n  for i in $(seq 600); do test -f {dir}/go && break; sleep 0.1; \
             done\n",
            dir = s.dir.display()
        ),
    );
    let home = s.dir.join("home");
    std::fs::create_dir_all(&home).expect("home");
    // The review says what a run does, and uploads nothing.
    let mut build = support::skyc();
    build.args(["build", "g.yaml", "--target", "files", "-o", "json"]);
    let out = with_aws(build, &endpoint, &home)
        .current_dir(&s.dir)
        .output()
        .expect("build");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let review: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let runs: Vec<&str> = review["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["buckets"][0]["run"].as_str().expect("a bucket"))
        .collect();
    assert_eq!(
        runs,
        [
            "uploaded to the bucket when submitted, and mounted on the nodes on this machine and \
             Slurm, on Kubernetes with --bucket-mounts sidecar; refused on AWS",
            "uploaded to the bucket when submitted, and copied with the files"
        ]
    );
    assert!(!exists(&endpoint, &code) && !exists(&endpoint, &data));
    let run = with_aws(s.skyc(&["run", "g.yaml"]), &endpoint, &home)
        .current_dir(&s.dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run");
    // The copy's bucket, not kept, holds the upload while its group runs.
    until("the copied task", 120, || s.dir.join("copied").exists());
    let uploaded = Bucket::at(&endpoint, &data);
    assert_eq!(uploaded.keys().len(), put.len() + 1);
    assert_eq!(uploaded.get("weights/init.bin"), put["weights/init.bin"]);
    std::fs::write(s.dir.join("go"), "").expect("go");
    let out = run.wait_with_output().expect("run");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // What was uploaded, and only that (`.skyignore` kept scratch.log out
    // of the snapshot; `.git` is not uploaded).
    let mut keys: Vec<String> = put.keys().map(|k| k.to_string()).collect();
    keys.push(".skyignore".into());
    keys.sort();
    let bucket = Bucket::at(&endpoint, &code);
    assert_eq!(bucket.keys(), keys);
    for (key, bytes) in &put {
        assert_eq!(&bucket.get(key), bytes, "{key}");
    }
    // Both tasks read the bytes where their code looks.
    for task in ["mounted", "copied"] {
        let seen: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with(&format!("({task}-0) sum ")))
            .collect();
        for (path, bytes) in &put {
            let sum = &skyc_runtime::files::tar::sha256(bytes)[..16];
            assert!(
                seen.iter()
                    .any(|l| l.ends_with(&format!("sum {sum} ./{path}"))),
                "{task} did not read {path}: {stdout}"
            );
        }
        // What the bucket holds, the copy too: no `.git`, nothing ignored.
        assert_eq!(seen.len(), keys.len(), "{task}: {seen:#?}");
    }
    // The COPY's bucket, not kept, goes after the group; the MOUNT's is
    // listed, kept.
    until("the deletion of the bucket not kept", 60, || {
        !exists(&endpoint, &data)
    });
    let listed = storage_ls(&s, &endpoint, &home);
    let names: Vec<_> = listed.iter().map(|b| b["name"].clone()).collect();
    assert_eq!(names, [code.as_str()]);
    assert!(Bucket::at(&endpoint, &code).remove());

    // A file where a directory is uploaded: refused, nothing made.
    s.write(
        "f.yaml",
        &format!(
            "name: f\nfile_mounts:\n  /code:\n    name: {code}\n    source: ./one-file.txt\n\
             run: echo\n"
        ),
    );
    let out = with_aws(s.skyc(&["run", "f.yaml"]), &endpoint, &home)
        .current_dir(&s.dir)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr)
        .replace(&code, "[bucket]")
        .replace(&s.dir.display().to_string(), "[dir]");
    support::snapshots("local/storage")
        .bind(|| insta::assert_snapshot!("upload_not_a_directory", stderr));
    assert!(
        !exists(&endpoint, &code),
        "a refused submission made a bucket"
    );
}
