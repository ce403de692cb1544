//! How a node on this machine is given its task's files: its command runs
//! through skyc's node-files helper ([`crate::files::node`]), inside the
//! namespace its network identity gives it.

use crate::files::node;
use crate::files::{Mount, Snapshots};
use skyc_targets::files::{Layers, View, Volume};
use skyc_targets::storage::Mounted;
use std::path::{Path, PathBuf};

pub struct NodeFiles {
    exe: PathBuf,
    /// The supervisor's mount namespace, where nothing is mounted.
    host_ns: String,
    snapshots: Snapshots,
}

impl NodeFiles {
    pub fn new(state_dir: &Path, exe: PathBuf) -> Self {
        Self {
            exe,
            host_ns: node::namespace(),
            snapshots: Snapshots::of(state_dir),
        }
    }

    /// `argv`, run with `mounts` in place and from the workdir when one
    /// is among them; `scratch` holds the node's writable layers. The
    /// command then starts where the helper leaves it: the agent starts
    /// it in `scratch`, which exists on the machine.
    pub fn wrap(
        &self,
        mounts: &[Mount],
        volumes: &[Volume],
        buckets: &[Mounted],
        env: &[(String, String)],
        scratch: &Path,
        argv: Vec<String>,
    ) -> Vec<String> {
        if mounts.is_empty() && volumes.is_empty() && buckets.is_empty() {
            return argv;
        }
        let home = env
            .iter()
            .rev()
            .find(|(k, _)| k == "HOME")
            .map_or_else(|| PathBuf::from("/"), |(_, v)| PathBuf::from(v));
        let mut view = View::of(
            mounts,
            volumes,
            self.snapshots.dir(),
            Layers::Disk(scratch.to_owned()),
        )
        .with_buckets(buckets);
        view.host_ns = Some(self.host_ns.clone());
        // A namespaced node reaches only this machine: its buckets'
        // clients use the supervisor's network.
        view.host_net = Some(PathBuf::from(format!(
            "/proc/{}/ns/net",
            std::process::id()
        )));
        view.home = Some(home);
        let view = view.to_json();
        [
            self.exe.display().to_string(),
            node::ARG.to_owned(),
            view,
            "--".to_owned(),
        ]
        .into_iter()
        .chain(argv)
        .collect()
    }
}

/// Removes what a group's nodes wrote over their files (their writable
/// layers, `nodes/<task>/<rank>/a<attempt>-files`), once the group has
/// ended: the snapshots themselves go when no live group is given them.
/// Found by name, so a supervisor sweeping a group that ended while none
/// ran needs no plan.
pub fn discard_layers(group_dir: &Path) {
    let dirs = |dir: &Path| {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect::<Vec<_>>()
    };
    for task in dirs(&group_dir.join("nodes")) {
        for node in dirs(&task) {
            for entry in dirs(&node) {
                if entry.to_string_lossy().ends_with("-files") {
                    crate::files::store::remove(&entry);
                }
            }
        }
    }
}
