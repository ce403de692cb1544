//! A `file_mounts` entry that names a bucket, as SkyPilot reads it: the
//! string form (`DST: s3://bucket/path`, copied to every node) and the
//! storage form (`DST: {name, source, store, mode, persistent}`). Pure:
//! what a run does with each is the runtime's (`skyc_runtime::storage`).

use serde::{Deserialize, Serialize};
use skyc_compiler::ir::FileMount;

/// The object stores a bucket URL names, by its scheme. skyc reaches S3
/// (and what speaks its API) and Google Cloud Storage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Store {
    #[default]
    S3,
    Gcs,
    R2,
    /// Azure Blob, IBM COS, OCI, Nebius, CoreWeave: named, not reached.
    Other,
}

impl Store {
    /// The store a storage spec's `store` names (SkyPilot's `StoreType`
    /// values, any case); S3 when it names none, as SkyPilot's default.
    pub fn of_spec(spec: &serde_json::Value) -> Store {
        match spec
            .get("store")
            .and_then(|s| s.as_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("s3") => Store::S3,
            Some("gcs") => Store::Gcs,
            Some("r2") => Store::R2,
            Some(_) => Store::Other,
        }
    }

    /// Whether skyc reads, writes and mounts this store's buckets.
    pub fn reached(self) -> bool {
        matches!(self, Store::S3 | Store::Gcs)
    }

    /// Its URL scheme (`s3`, `gs`).
    pub fn scheme(self) -> &'static str {
        match self {
            Store::S3 => "s3",
            Store::Gcs => "gs",
            Store::R2 => "r2",
            Store::Other => "other",
        }
    }

    /// As the store records it and `skyc storage ls` shows it.
    pub fn name(self) -> &'static str {
        match self {
            Store::S3 => "s3",
            Store::Gcs => "gcs",
            Store::R2 => "r2",
            Store::Other => "other",
        }
    }

    /// The store recorded as `name`.
    pub fn named(name: &str) -> Store {
        match name {
            "s3" => Store::S3,
            "gcs" => Store::Gcs,
            "r2" => Store::R2,
            _ => Store::Other,
        }
    }

    /// `scheme://bucket`.
    pub fn url(self, bucket: &str) -> BucketUrl {
        BucketUrl {
            store: self,
            scheme: self.scheme().to_owned(),
            bucket: bucket.to_owned(),
            path: String::new(),
        }
    }

    fn of_scheme(scheme: &str) -> Option<Store> {
        Some(match scheme {
            "s3" => Store::S3,
            "gs" => Store::Gcs,
            "r2" => Store::R2,
            "cos" | "oci" | "nebius" | "cw" | "https" => Store::Other,
            _ => return None,
        })
    }
}

/// `scheme://bucket/path`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketUrl {
    pub store: Store,
    /// As written (`s3`, `gs`, `cos`, ...).
    pub scheme: String,
    pub bucket: String,
    /// The key or prefix after the bucket, without leading or trailing
    /// `/` (`""`: the whole bucket).
    pub path: String,
}

impl BucketUrl {
    /// A bucket URL, or `None` for anything else (a local path).
    pub fn parse(url: &str) -> Option<BucketUrl> {
        let (scheme, rest) = url.split_once("://")?;
        let store = Store::of_scheme(scheme)?;
        let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
        Some(BucketUrl {
            store,
            scheme: scheme.to_owned(),
            bucket: bucket.to_owned(),
            path: path.trim_matches('/').to_owned(),
        })
    }
}

impl std::fmt::Display for BucketUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme, self.bucket)?;
        if !self.path.is_empty() {
            write!(f, "/{}", self.path)?;
        }
        Ok(())
    }
}

/// How a node sees a bucket (SkyPilot's `StorageMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Copied to the node before setup.
    Copy,
    /// A filesystem of the bucket: reads and writes go to it.
    Mount,
    /// Mounted with a local cache, writes uploaded behind.
    MountCached,
}

impl Mode {
    /// As a storage spec writes it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Copy => "COPY",
            Mode::Mount => "MOUNT",
            Mode::MountCached => "MOUNT_CACHED",
        }
    }
}

/// A bucket a task's `file_mounts` entry names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// The bucket read from (a URL source); `None` for a storage spec
    /// with only a `name` (or a local `source` uploaded to it).
    pub url: Option<BucketUrl>,
    pub name: Option<String>,
    pub mode: Mode,
    /// SkyPilot's default: kept after the job.
    pub persistent: bool,
}

/// The bucket `mount` names, or `None` for a local source.
pub fn bucket(mount: &FileMount) -> Option<Bucket> {
    let url = mount.source.as_deref().and_then(BucketUrl::parse);
    let Some(spec) = &mount.storage else {
        // The string form is copied, as SkyPilot's `cloud_stores` syncs it.
        return url.map(|url| Bucket {
            url: Some(url),
            name: None,
            mode: Mode::Copy,
            persistent: true,
        });
    };
    let mode = match spec.get("mode").and_then(|m| m.as_str()) {
        Some(m) if m.eq_ignore_ascii_case("COPY") => Mode::Copy,
        Some(m) if m.eq_ignore_ascii_case("MOUNT_CACHED") => Mode::MountCached,
        _ => Mode::Mount,
    };
    Some(Bucket {
        url,
        name: spec.get("name").and_then(|n| n.as_str()).map(str::to_owned),
        mode,
        persistent: spec
            .get("persistent")
            .and_then(|p| p.as_bool())
            .unwrap_or(true),
    })
}

/// A bucket mounted on a node (MOUNT, MOUNT_CACHED), as the node's files
/// helper is given it: resolved at submission (the bucket found, or made
/// for a `name`), read and written by a FUSE client on the node with the
/// node's own AWS configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mounted {
    /// Absolute, or `~/...` (the node's home).
    pub destination: String,
    /// S3 in plans stored before other stores were mounted.
    #[serde(default)]
    pub store: Store,
    pub bucket: String,
    /// The prefix mounted (`""`: the whole bucket).
    pub path: String,
    /// MOUNT_CACHED: a local cache, writes uploaded behind (and waited
    /// for before the node ends).
    pub cached: bool,
    /// The endpoint the submission used (S3's configured one, the GCS
    /// emulator's); `None` is the store's own.
    pub endpoint: Option<String>,
    /// S3's region, GCS's location.
    pub region: String,
}

/// Where a finding about mount `m` of `task` points: the mount, else (a
/// mount without a place in the file) the task's name.
pub fn mount_span(task: &skyc_compiler::ir::Task, m: &FileMount) -> skyc_compiler::Span {
    if m.at.0.is_empty() {
        task.name_span
    } else {
        m.at.0
    }
}

/// How long a directory listing is trusted before the bucket is asked
/// again (SkyPilot's goofys mounts trust a stat 5 s).
pub const DIR_CACHE: &str = "5s";

/// rclone's settings for a mount of `m`, as environment variables (rclone
/// reads every flag and remote option from `RCLONE_*`), the same on every
/// target: MOUNT without a cache, as SkyPilot's MOUNT (a file is written
/// front to back and is in the bucket when closed); MOUNT_CACHED with
/// rclone's full cache, writes uploaded a second after they are closed.
/// Nothing a bucket or path holds is parsed as an option.
///
/// - S3: the remote `:s3:` with the node's own AWS configuration
///   (`env_auth`), and the region and endpoint the submission used when
///   it is known.
/// - GCS: the remote `:gcs:` with the node's Application Default
///   Credentials (rclone's fallback when given none: the file
///   `GOOGLE_APPLICATION_CREDENTIALS` names, `gcloud`'s, the instance's
///   service account); objects written without ACLs, as a bucket with
///   uniform access asks. An endpoint is the emulator the submission
///   used (`STORAGE_EMULATOR_HOST`), reached without credentials as
///   Google's libraries reach it.
pub fn rclone_settings(
    store: Store,
    cached: bool,
    region: Option<&str>,
    endpoint: Option<&str>,
) -> Vec<(&'static str, String)> {
    // The store's own settings first: where the bucket is, and how the
    // node proves who it is.
    let mut out = match store {
        Store::Gcs => vec![
            ("RCLONE_GCS_BUCKET_POLICY_ONLY", "true".to_owned()),
            ("RCLONE_GCS_NO_CHECK_BUCKET", "true".to_owned()),
        ],
        _ => vec![
            ("RCLONE_S3_ENV_AUTH", "true".to_owned()),
            ("RCLONE_S3_NO_CHECK_BUCKET", "true".to_owned()),
        ],
    };
    out.extend([
        ("RCLONE_DIR_CACHE_TIME", DIR_CACHE.to_owned()),
        ("RCLONE_ALLOW_OTHER", "true".to_owned()),
        // The destination may hold files, or be a mount already.
        ("RCLONE_ALLOW_NON_EMPTY", "true".to_owned()),
        ("RCLONE_LOG_LEVEL", "INFO".to_owned()),
    ]);
    if cached {
        out.extend([
            ("RCLONE_VFS_CACHE_MODE", "full".to_owned()),
            ("RCLONE_VFS_WRITE_BACK", "1s".to_owned()),
            ("RCLONE_VFS_CACHE_POLL_INTERVAL", "1s".to_owned()),
        ]);
    } else {
        out.push(("RCLONE_VFS_CACHE_MODE", "off".to_owned()));
    }
    if store == Store::Gcs {
        if let Some(e) = endpoint {
            out.extend([
                // The JSON API's base path, as Google's Go client wants
                // an endpoint (without it, it asks for `/b/...`).
                (
                    "RCLONE_GCS_ENDPOINT",
                    format!("{}/storage/v1/", e.trim_end_matches('/')),
                ),
                ("RCLONE_GCS_ANONYMOUS", "true".to_owned()),
            ]);
        }
        return out;
    }
    if let Some(r) = region {
        out.push(("RCLONE_S3_REGION", r.to_owned()));
    }
    match endpoint {
        Some(e) => out.extend([
            ("RCLONE_S3_PROVIDER", "Other".to_owned()),
            ("RCLONE_S3_ENDPOINT", e.to_owned()),
        ]),
        None => out.push(("RCLONE_S3_PROVIDER", "AWS".to_owned())),
    }
    out
}

/// rclone's remote for `bucket` and `path` of `store`
/// (`:s3:bucket/path`, `:gcs:bucket/path`).
pub fn rclone_remote(store: Store, bucket: &str, path: &str) -> String {
    let backend = if store == Store::Gcs { "gcs" } else { "s3" };
    if path.is_empty() {
        format!(":{backend}:{bucket}")
    } else {
        format!(":{backend}:{bucket}/{path}")
    }
}

/// The program that serves one mounted bucket on a node that is not this
/// machine's (a Kubernetes sidecar, a cloud instance): rclone in the
/// background; on SIGTERM (the task has ended), for a cached mount, the
/// wait for its uploads, then rclone's end (it unmounts). POSIX sh
/// (rclone's image has no bash). Everything it is given comes from its
/// environment, quoted: nothing of a bucket's name is shell.
pub const MOUNT_SCRIPT: &str = r#"#!/bin/sh
set -u
# rclone's AWS SDK refuses AWS_CA_BUNDLE with rclone's own transport: the
# bundle is rclone's flag instead.
if [ -n "${AWS_CA_BUNDLE:-}" ]; then
  RCLONE_CA_CERT=$AWS_CA_BUNDLE
  export RCLONE_CA_CERT
  unset AWS_CA_BUNDLE
fi
rclone mount "$SKYC_REMOTE" "$SKYC_AT" --config /dev/null --log-file "$SKYC_LOG" --cache-dir "$SKYC_CACHE" &
pid=$!
# shellcheck disable=SC2317 # called by the trap below
finish() {
  if [ "$SKYC_CACHED" = 1 ]; then
    from=$(wc -c < "$SKYC_LOG")
    sleep 2
    until tail -c +"$((from + 1))" "$SKYC_LOG" | grep 'vfs cache: cleaned:' | tail -n 1 | grep -q "$SKYC_FLUSHED"; do
      kill -0 "$pid" 2>/dev/null || break
      sleep 1
    done
  fi
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
  exit 0
}
trap finish TERM INT
wait "$pid"
status=$?
tail -n 20 "$SKYC_LOG" >&2
exit "$status"
"#;

/// What rclone logs, each cache poll, once nothing is open or left to
/// upload: the end of a MOUNT_CACHED node waits for it, as SkyPilot's
/// job waits for its uploads.
pub const RCLONE_FLUSHED: &str = "in use 0, to upload 0, uploading 0";

/// A bucket a task mounts (MOUNT, MOUNT_CACHED), before it is found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToMount {
    pub store: Store,
    pub bucket: String,
    pub path: String,
    pub cached: bool,
    /// Named without a source: made when it does not exist, as SkyPilot
    /// makes a Storage's bucket.
    pub create: bool,
    pub persistent: bool,
}

/// The bucket `mount` mounts, in a store skyc reaches: a bucket URL
/// source, or a `name` alone (in the spec's `store`, S3 by default), in
/// MOUNT or MOUNT_CACHED mode.
pub fn to_mount(mount: &FileMount) -> Option<ToMount> {
    let b = bucket(mount)?;
    let cached = match b.mode {
        Mode::Copy => return None,
        Mode::Mount => false,
        Mode::MountCached => true,
    };
    let named_store = mount.storage.as_ref().map_or(Store::S3, Store::of_spec);
    // A local source is uploaded to the named bucket first ([`uploaded`]).
    let local = mount.source.is_some() && b.url.is_none();
    match (b.url, b.name, mount.source.is_some() && !local) {
        (Some(url), _, _) if url.store.reached() => Some(ToMount {
            store: url.store,
            bucket: url.bucket,
            path: url.path,
            cached,
            create: false,
            persistent: b.persistent,
        }),
        (None, Some(name), false) if named_store.reached() => Some(ToMount {
            store: named_store,
            bucket: name,
            path: String::new(),
            cached,
            create: true,
            persistent: b.persistent,
        }),
        _ => None,
    }
}

/// A storage spec's local `source` (a directory) with a `name`: uploaded
/// to that bucket of its `store` (made when it is not there) when the
/// group is submitted, as SkyPilot syncs it there before the job, then
/// copied to the nodes or mounted on them as `mode` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uploaded {
    /// As written.
    pub source: String,
    pub store: Store,
    pub bucket: String,
    pub mode: Mode,
    pub persistent: bool,
}

/// The upload `mount` asks for, or `None`.
pub fn uploaded(mount: &FileMount) -> Option<Uploaded> {
    let spec = mount.storage.as_ref()?;
    let store = Store::of_spec(spec);
    if !store.reached() {
        return None;
    }
    let b = bucket(mount)?;
    let source = mount.source.as_ref()?;
    if b.url.is_some() || source.contains("://") {
        return None;
    }
    Some(Uploaded {
        source: source.clone(),
        store,
        bucket: b.name?,
        mode: b.mode,
        persistent: b.persistent,
    })
}

/// A bucket every target copies to its nodes through the run's files
/// (read at submission, like a local source): an existing bucket or path
/// of a store skyc reaches, in COPY mode.
pub fn copied(mount: &FileMount) -> Option<BucketUrl> {
    match bucket(mount)? {
        Bucket {
            url: Some(url),
            mode: Mode::Copy,
            ..
        } if url.store.reached() => Some(url),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(source: Option<&str>, storage: Option<serde_json::Value>) -> FileMount {
        FileMount {
            destination: "/data".into(),
            source: source.map(str::to_owned),
            storage,
            at: Default::default(),
        }
    }

    #[test]
    fn urls_split_into_store_bucket_and_path() {
        let u = BucketUrl::parse("s3://my-data/train/shards/").unwrap();
        assert_eq!(
            (u.store, u.bucket.as_str(), u.path.as_str()),
            (Store::S3, "my-data", "train/shards")
        );
        assert_eq!(u.to_string(), "s3://my-data/train/shards");
        let whole = BucketUrl::parse("gs://b").unwrap();
        assert_eq!((whole.store, whole.path.as_str()), (Store::Gcs, ""));
        assert_eq!(
            BucketUrl::parse("cos://b/x").unwrap().to_string(),
            "cos://b/x"
        );
        assert_eq!(BucketUrl::parse("./data"), None);
        assert_eq!(BucketUrl::parse("ftp://x/y"), None);
    }

    #[test]
    fn the_string_form_is_copied_and_the_storage_form_mounted_by_default() {
        let s = mount(Some("s3://d/x"), None);
        assert_eq!(bucket(&s).unwrap().mode, Mode::Copy);
        assert_eq!(copied(&s).unwrap().path, "x");
        let spec = mount(
            Some("s3://d"),
            Some(serde_json::json!({"source": "s3://d"})),
        );
        assert_eq!(bucket(&spec).unwrap().mode, Mode::Mount);
        assert_eq!(copied(&spec), None);
        let copy = mount(
            Some("s3://d"),
            Some(serde_json::json!({"source": "s3://d", "mode": "COPY"})),
        );
        assert!(copied(&copy).is_some());
        let named = mount(
            None,
            Some(serde_json::json!({"name": "p", "persistent": false})),
        );
        let b = bucket(&named).unwrap();
        assert_eq!(
            (b.name.as_deref(), b.persistent, b.url),
            (Some("p"), false, None)
        );
        assert_eq!(bucket(&mount(Some("./code"), None)), None);
        // Google Cloud Storage is reached; other stores are not yet.
        assert_eq!(
            copied(&mount(Some("gs://d/x"), None)).unwrap().store,
            Store::Gcs
        );
        assert_eq!(copied(&mount(Some("cos://d/x"), None)), None);
        // Mounted: a URL, or a name alone; not a local source uploaded.
        let m = to_mount(&spec).unwrap();
        assert_eq!((m.bucket.as_str(), m.create, m.cached), ("d", false, false));
        let n = to_mount(&named).unwrap();
        assert_eq!(
            (n.bucket.as_str(), n.create, n.persistent),
            ("p", true, false)
        );
        let cached = mount(
            Some("s3://d/sub"),
            Some(serde_json::json!({"source": "s3://d/sub", "mode": "MOUNT_CACHED"})),
        );
        assert_eq!(to_mount(&cached).unwrap().path, "sub");
        assert!(to_mount(&cached).unwrap().cached);
        // A local source with a name: uploaded to the bucket, then
        // mounted (or copied, as the mode says).
        let up = mount(
            Some("./local"),
            Some(serde_json::json!({"name": "p", "source": "./local"})),
        );
        let m = to_mount(&up).unwrap();
        assert_eq!(
            (m.bucket.as_str(), m.path.as_str(), m.create),
            ("p", "", true)
        );
        let u = uploaded(&up).unwrap();
        assert_eq!(
            (u.bucket.as_str(), u.source.as_str(), u.mode),
            ("p", "./local", Mode::Mount)
        );
        let copy_up = mount(
            Some("./local"),
            Some(serde_json::json!({"name": "p", "source": "./local", "mode": "COPY"})),
        );
        assert_eq!(to_mount(&copy_up), None);
        assert_eq!(uploaded(&copy_up).unwrap().mode, Mode::Copy);
        assert_eq!(copied(&copy_up), None);
        // No name: nowhere to upload to.
        assert_eq!(
            uploaded(&mount(
                Some("./l"),
                Some(serde_json::json!({"source": "./l"}))
            )),
            None
        );
        assert_eq!(uploaded(&spec), None);
        assert_eq!(uploaded(&named), None);
        let gcs = mount(None, Some(serde_json::json!({"name": "p", "store": "GCS"})));
        assert_eq!(to_mount(&gcs).unwrap().store, Store::Gcs);
        let gcs_up = mount(
            Some("./l"),
            Some(serde_json::json!({"name": "p", "source": "./l", "store": "gcs"})),
        );
        assert_eq!(uploaded(&gcs_up).unwrap().store, Store::Gcs);
        let gs_url = mount(
            Some("gs://g/sub"),
            Some(serde_json::json!({"source": "gs://g/sub"})),
        );
        assert_eq!(
            (
                to_mount(&gs_url).unwrap().store,
                rclone_remote(Store::Gcs, "g", "sub")
            ),
            (Store::Gcs, ":gcs:g/sub".to_owned())
        );
        let azure = mount(
            None,
            Some(serde_json::json!({"name": "p", "store": "azure"})),
        );
        assert_eq!(to_mount(&azure), None);
        assert_eq!(to_mount(&s), None);
    }
}
