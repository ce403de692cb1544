//! Buckets a task mounts (`mode: MOUNT`, `MOUNT_CACHED`) in its pods.
//!
//! A FUSE mount needs `/dev/fuse` and `CAP_SYS_ADMIN`, which a pod's
//! containers do not have unless the cluster admits privileged pods. So
//! a mount is lowered only when the user allows it (`--bucket-mounts
//! sidecar`); otherwise it is a located error saying how, rather than a
//! pod that starts without its data.
//!
//! With the sidecar, each mounted bucket gets a native sidecar (an init
//! container with `restartPolicy: Always`, Kubernetes 1.29 and later):
//! rclone, privileged, mounts the bucket at the root of an `emptyDir`
//! with `Bidirectional` propagation; the task's container mounts that
//! `emptyDir` at the destination with `HostToContainer` propagation, so
//! it sees rclone's mount. The sidecar's startup probe holds the task's
//! container back until the mount is there. rclone runs with the same
//! settings as on this machine and Slurm ([`crate::storage::rclone_settings`]);
//! at the pod's end a MOUNT_CACHED sidecar waits until rclone says
//! nothing is left to upload before it unmounts (the pod's grace period
//! is raised for it). rclone reads the pod's own identity: for S3 its
//! AWS configuration (`env_auth`: its environment, a web identity token
//! such as EKS's IRSA, or the node's instance role); for GCS its
//! Application Default Credentials (GKE's Workload Identity, a key file
//! the pod is given).

use super::names::SCRIPTS_DIR;
use super::pod::literal_env_value;
use super::{Lowerer, names};
use crate::storage::{self, Mounted, RCLONE_FLUSHED, ToMount};
use serde_json::{Value, json};
use skyc_compiler::Rule;
use skyc_compiler::ir::Task;

/// How tasks' mounted buckets reach their pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BucketMounts {
    /// Not at all: a mounted bucket is an error (the default: a pod
    /// cannot mount one without privileges).
    #[default]
    Refused,
    /// A privileged rclone sidecar per bucket, of this image.
    Sidecar { image: String },
}

/// rclone's official image, pinned.
pub const DEFAULT_RCLONE_IMAGE: &str = "rclone/rclone:1.69.1";

/// The grace period of a pod whose sidecar waits for cached writes (the
/// same bound as a node's wait on this machine and Slurm).
pub const UPLOAD_GRACE_SECONDS: u32 = 600;

/// Where the sidecar mounts the bucket (its `emptyDir`'s root; not under the scripts' directory, which would cover it).
const AT: &str = "/mnt/skyc-bucket";

/// rclone's log and cache, in the sidecar's own filesystem.
const LOG: &str = "/tmp/rclone.log";
const CACHE: &str = "/tmp/rclone-cache";

/// The sidecar's program ([`storage::MOUNT_SCRIPT`], shared with cloud
/// nodes).
pub const SCRIPT: &str = storage::MOUNT_SCRIPT;

/// The sidecar's program in the group's scripts ConfigMap.
pub(super) const SCRIPT_KEY: &str = "bucket-mount.sh";

/// What a task's mounted buckets add to its pods.
#[derive(Default)]
pub(super) struct BucketParts {
    pub sidecars: Vec<Value>,
    pub mounts: Vec<Value>,
    pub volumes: Vec<Value>,
    /// A MOUNT_CACHED bucket: the pod's grace period covers its uploads.
    pub cached: bool,
}

impl Lowerer<'_> {
    /// The sidecars' program, for the scripts ConfigMap, when a task
    /// mounts a bucket through one.
    pub(super) fn bucket_script(&self) -> Option<&'static str> {
        let sidecar = matches!(self.options.bucket_mounts, BucketMounts::Sidecar { .. });
        let mounts = self
            .group
            .tasks
            .iter()
            .any(|t| t.file_mounts.iter().any(|m| storage::to_mount(m).is_some()));
        (sidecar && mounts).then_some(SCRIPT)
    }

    /// Task `index`'s mounted buckets, as the options allow; a located
    /// error at each that cannot be mounted.
    pub(super) fn bucket_parts(&mut self, task: &Task, index: usize) -> BucketParts {
        let mut parts = BucketParts::default();
        let mounted: Vec<(&skyc_compiler::ir::FileMount, ToMount)> = task
            .file_mounts
            .iter()
            .filter_map(|m| Some((m, storage::to_mount(m)?)))
            .collect();
        let image = match &self.options.bucket_mounts {
            BucketMounts::Sidecar { image } => image.clone(),
            BucketMounts::Refused => {
                for (m, to) in &mounted {
                    self.push(
                        skyc_compiler::Diagnostic::new(
                            Rule::K8sBucketMount,
                            storage::mount_span(task, m),
                            format!(
                                "`{}`: bucket `{}` cannot be mounted at `{}`: a pod mounts a \
                                 bucket only with privileges, which skyc uses only when allowed",
                                task.name, to.bucket, m.destination
                            ),
                        )
                        .label("mounted here")
                        .help(
                            "allow skyc's privileged rclone sidecar with `--bucket-mounts \
                             sidecar` (the namespace must admit privileged pods), or copy the \
                             bucket to the pods instead (`mode: COPY`)",
                        ),
                    );
                }
                return parts;
            }
        };
        let resolved: &[Mounted] = self
            .options
            .buckets
            .as_ref()
            .and_then(|b| b.get(index))
            .map_or(&[], Vec::as_slice);
        for (n, (m, to)) in mounted.iter().enumerate() {
            if !m.destination.starts_with('/') {
                self.push(
                    skyc_compiler::Diagnostic::new(
                        Rule::K8sBucketMount,
                        storage::mount_span(task, m),
                        format!(
                            "`{}`: bucket `{}` is mounted at `{}`, which a pod's volume cannot be \
                             (its home is the image's)",
                            task.name, to.bucket, m.destination
                        ),
                    )
                    .label("mounted here")
                    .help("mount it at an absolute path"),
                );
                continue;
            }
            // The region and endpoint the submission found; a build
            // leaves them to the pod's own configuration.
            let found = resolved.iter().find(|r| r.destination == m.destination);
            let volume = format!("skyc-bucket-{n}");
            let mut env: Vec<Value> = storage::rclone_settings(
                to.store,
                to.cached,
                found.map(|f| f.region.as_str()),
                found.and_then(|f| f.endpoint.as_deref()),
            )
            .into_iter()
            .map(|(k, v)| json!({"name": k, "value": literal_env_value(&v)}))
            .collect();
            for (k, v) in [
                (
                    "SKYC_REMOTE",
                    storage::rclone_remote(to.store, &to.bucket, &to.path),
                ),
                ("SKYC_AT", AT.to_owned()),
                ("SKYC_LOG", LOG.to_owned()),
                ("SKYC_CACHE", CACHE.to_owned()),
                ("SKYC_CACHED", if to.cached { "1" } else { "0" }.to_owned()),
                ("SKYC_FLUSHED", RCLONE_FLUSHED.to_owned()),
            ] {
                env.push(json!({"name": k, "value": literal_env_value(&v)}));
            }
            parts.sidecars.push(json!({
                "name": names::bucket_sidecar(n),
                "image": image,
                "restartPolicy": "Always",
                "command": ["/bin/sh", format!("{SCRIPTS_DIR}/{SCRIPT_KEY}")],
                "env": env,
                "securityContext": {"privileged": true},
                "volumeMounts": [
                    {
                        "name": volume,
                        "mountPath": AT,
                        "mountPropagation": "Bidirectional",
                    },
                    {"name": "skyc-scripts", "mountPath": SCRIPTS_DIR, "readOnly": true},
                ],
                "startupProbe": {
                    "exec": {"command": [
                        "/bin/sh", "-c",
                        format!("grep -qs ' {AT} fuse' /proc/mounts"),
                    ]},
                    "periodSeconds": 1,
                    "failureThreshold": 120,
                },
            }));
            parts.volumes.push(json!({"name": volume, "emptyDir": {}}));
            parts.mounts.push(json!({
                "name": volume,
                "mountPath": m.destination,
                "mountPropagation": "HostToContainer",
            }));
            parts.cached |= to.cached;
        }
        parts
    }
}
