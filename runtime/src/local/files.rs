//! How a node on this machine is given its task's files: its command runs
//! through skyc's node-files helper ([`crate::files::node`]), inside the
//! namespace its network identity gives it.

use crate::files::node;
use crate::files::{Mount, Snapshots};
use skyc_targets::files::{Layers, View, Volume};
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
        env: &[(String, String)],
        scratch: &Path,
        argv: Vec<String>,
    ) -> Vec<String> {
        if mounts.is_empty() && volumes.is_empty() {
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
        );
        view.host_ns = Some(self.host_ns.clone());
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
/// layers), once the group has ended: the snapshots themselves go when no
/// live group is given them.
pub fn discard_layers(group_dir: &Path, plan: &super::plan::Plan) {
    for (task, t) in plan.tasks.iter().enumerate() {
        if t.files.is_empty() && t.volumes.is_empty() {
            continue;
        }
        for rank in 0..t.num_nodes {
            let node = crate::paths::node_dir(group_dir, task, rank);
            for entry in std::fs::read_dir(&node).into_iter().flatten().flatten() {
                if entry.file_name().to_string_lossy().ends_with("-files") {
                    crate::files::store::remove(&entry.path());
                }
            }
        }
    }
}
