//! A task's code and data as the targets are given them: what a
//! submission took of each `workdir` and local file mount (read by
//! `skyc_runtime::files`, which does the I/O), and the view a node is
//! given of them (what `skyc __node-files` mounts before the node's
//! commands start).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a task's `workdir` lands on its nodes, and where they start.
pub const WORKDIR: &str = "~/sky_workdir";

/// Where a destination is under the node's home, if it is there: `~` is
/// the home itself (`""`), `~/x` and a relative `x` (rsync's remote path,
/// as SkyPilot copies it) are `x`; an absolute path is not. Trailing
/// slashes name the same place.
pub fn under_home(destination: &str) -> Option<&str> {
    let d = destination.trim_end_matches('/');
    if d.is_empty() && destination.starts_with('/') {
        return None;
    }
    match d.strip_prefix('~') {
        Some("") => Some(""),
        Some(rest) if rest.starts_with('/') => Some(rest.trim_start_matches('/')),
        _ if d.starts_with('/') => None,
        _ => Some(d),
    }
}

/// The one entry of a file snapshot's tar stream (a directory snapshot's
/// entries are its tree's).
pub const TAR_FILE_ENTRY: &str = "file";

/// Whether a run delivers a file mount with the task's files: a local
/// source, a bucket copied through them ([`crate::storage::copied`]), or
/// a local source uploaded to a bucket and copied
/// ([`crate::storage::uploaded`], the same bytes); mounted buckets are
/// the nodes' own.
pub fn delivered(mount: &skyc_compiler::ir::FileMount) -> bool {
    local(mount)
        || crate::storage::copied(mount).is_some()
        || crate::storage::uploaded(mount).is_some_and(|u| u.mode == crate::storage::Mode::Copy)
}

/// Whether `mounts` (a task's, as a submission took them) carry `mount`:
/// a run delivers it.
pub fn carries(mounts: &[Mount], mount: &skyc_compiler::ir::FileMount) -> bool {
    mounts
        .iter()
        .any(|m| !m.workdir && m.destination == mount.destination)
}

/// Whether a file mount's source is a local path.
pub fn local(mount: &skyc_compiler::ir::FileMount) -> bool {
    mount.storage.is_none()
        && mount
            .source
            .as_deref()
            .is_some_and(|s| !s.contains("://") && !s.starts_with("skypilot:"))
}

/// A run's files as the Kubernetes and cloud targets are given them:
/// each task's mounts, and each snapshot's tar stream
/// (`skyc_runtime::files::tar`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Files {
    /// Each task's mounts, by task index.
    pub tasks: Vec<Vec<Mount>>,
    /// Each snapshot's stream, by the snapshot's digest.
    pub packs: BTreeMap<String, Pack>,
    /// Each task's mounted buckets, as the submission found them (for a
    /// target whose nodes mount them).
    pub buckets: Vec<Vec<crate::storage::Mounted>>,
}

/// One snapshot as a tar stream.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pack {
    /// The stream's SHA-256, hex.
    pub sha256: String,
    pub bytes: u64,
    /// The stream itself, for the manifests' ConfigMap (`skyc build`).
    #[serde(skip)]
    pub data: Option<Vec<u8>>,
}

impl std::fmt::Debug for Pack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pack")
            .field("sha256", &self.sha256)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl Files {
    pub fn of(&self, task: usize) -> &[Mount] {
        self.tasks.get(task).map_or(&[], Vec::as_slice)
    }

    /// Task `task`'s mounted buckets, as the submission found them.
    pub fn buckets_of(&self, task: usize) -> &[crate::storage::Mounted] {
        self.buckets.get(task).map_or(&[], Vec::as_slice)
    }

    /// The snapshots task `task`'s nodes fetch: each digest once, sorted.
    pub fn digests_of(&self, task: usize) -> Vec<&str> {
        let mut digests: Vec<&str> = self
            .of(task)
            .iter()
            .map(|m| m.taken.digest.as_str())
            .collect();
        digests.sort_unstable();
        digests.dedup();
        digests
    }

    /// Whether any task has files.
    pub fn any(&self) -> bool {
        self.tasks.iter().any(|t| !t.is_empty())
    }
}

/// What a source held when it was read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taken {
    /// SHA-256 of the tree (paths, kinds, modes, bytes, link targets), hex:
    /// the snapshot's name.
    pub digest: String,
    /// A directory (else one regular file).
    pub dir: bool,
    /// Regular files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// One source, delivered to a destination on every node of its task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// Absolute, or `~/...` (the node's home).
    pub destination: String,
    /// The source as resolved on the submitting machine.
    pub source: String,
    /// The task's `workdir` (its nodes start in it).
    pub workdir: bool,
    #[serde(flatten)]
    pub taken: Taken,
}

/// A volume a task mounts, as the target keeps it: a directory, bound
/// read-write and shared by every node that mounts it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    /// Absolute, or `~/...`.
    pub destination: String,
    pub name: String,
    /// Where the target keeps it.
    pub dir: PathBuf,
}

/// What one node sees: the files helper's input. What only the node
/// knows is left `None` and read from its environment.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct View {
    /// The mount namespace nothing may be mounted in (the supervisor's,
    /// or the step's outside its namespaces); else `$SKYC_HOST_NS`.
    pub host_ns: Option<String>,
    /// The home `~/` names; else `$HOME`.
    pub home: Option<PathBuf>,
    pub places: Vec<Place>,
    /// Where the command starts (a destination), if not where it was
    /// started.
    pub cwd: Option<String>,
    /// Where the node's writable layers are.
    pub layers: Layers,
    /// Buckets mounted, after the places.
    #[serde(default)]
    pub buckets: Vec<crate::storage::Mounted>,
    /// The network the buckets' clients reach S3 from, when the node's
    /// own does not reach beyond this machine: a namespace's path
    /// (`/proc/PID/ns/net` of the supervisor).
    #[serde(default)]
    pub host_net: Option<PathBuf>,
}

/// One snapshot, or a volume, at its destination.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Place {
    pub destination: String,
    pub snapshot: PathBuf,
    pub dir: bool,
    /// A volume: `snapshot` bound as it is, read-write, shared.
    #[serde(default)]
    pub shared: bool,
}

/// Where what a node writes over its files is kept.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layers {
    /// In this directory on disk, made fresh for the attempt; removed
    /// with the group.
    Disk(PathBuf),
    /// In memory: a filesystem of the node's own mounted over this
    /// (existing) directory (else `$SKYC_FILES_LAYERS`), gone with the
    /// node's namespace. For nodes whose disks skyc does not tend (a
    /// cluster's).
    Memory(Option<PathBuf>),
}

/// A run's files, as a cluster target is given them: each task's mounts
/// (by index in the group), and where the compute nodes find the
/// snapshots and skyc's files helper.
#[derive(Clone, Debug, Default)]
pub struct Delivery {
    pub tasks: Vec<Vec<Mount>>,
    /// Each task's volumes.
    pub volumes: Vec<Vec<Volume>>,
    /// Each task's mounted buckets.
    pub buckets: Vec<Vec<crate::storage::Mounted>>,
    pub snapshots: PathBuf,
    pub helper: PathBuf,
}

impl Delivery {
    /// Task `index`'s mounts.
    pub fn of(&self, index: usize) -> &[Mount] {
        self.tasks.get(index).map_or(&[], Vec::as_slice)
    }

    /// Task `index`'s volumes.
    pub fn volumes_of(&self, index: usize) -> &[Volume] {
        self.volumes.get(index).map_or(&[], Vec::as_slice)
    }

    /// Task `index`'s mounted buckets.
    pub fn buckets_of(&self, index: usize) -> &[crate::storage::Mounted] {
        self.buckets.get(index).map_or(&[], Vec::as_slice)
    }

    /// Whether task `index`'s nodes need the files helper.
    pub fn gives(&self, index: usize) -> bool {
        !self.of(index).is_empty()
            || !self.volumes_of(index).is_empty()
            || !self.buckets_of(index).is_empty()
    }

    /// Task `index`'s view.
    pub fn view(&self, index: usize, layers: Layers) -> View {
        View::of(
            self.of(index),
            self.volumes_of(index),
            &self.snapshots,
            layers,
        )
        .with_buckets(self.buckets_of(index))
    }
}

impl View {
    /// The view of `mounts`, whose snapshots are in `snapshots`, and of
    /// `volumes`.
    pub fn of(mounts: &[Mount], volumes: &[Volume], snapshots: &Path, layers: Layers) -> Self {
        Self {
            host_ns: None,
            home: None,
            places: mounts
                .iter()
                .map(|m| Place {
                    destination: m.destination.clone(),
                    snapshot: snapshots.join(&m.taken.digest),
                    dir: m.taken.dir,
                    shared: false,
                })
                .chain(volumes.iter().map(|v| Place {
                    destination: v.destination.clone(),
                    snapshot: v.dir.clone(),
                    dir: true,
                    shared: true,
                }))
                .collect(),
            cwd: mounts.iter().any(|m| m.workdir).then(|| WORKDIR.to_owned()),
            layers,
            buckets: Vec::new(),
            host_net: None,
        }
    }

    /// The same view, with `buckets` mounted too.
    pub fn with_buckets(mut self, buckets: &[crate::storage::Mounted]) -> Self {
        self.buckets = buckets.to_vec();
        self
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::under_home;

    #[test]
    fn destinations_under_the_home() {
        assert_eq!(under_home("~"), Some(""));
        assert_eq!(under_home("~/"), Some(""));
        assert_eq!(under_home("~/sky_workdir"), Some("sky_workdir"));
        assert_eq!(under_home("~/a/b/"), Some("a/b"));
        assert_eq!(under_home("data"), Some("data"));
        assert_eq!(under_home("/code"), None);
        assert_eq!(under_home("/code/"), None);
        assert_eq!(under_home("/"), None);
    }
}
