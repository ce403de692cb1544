//! How a node on this machine is given its task's files: its command runs
//! through skyc's node-files helper ([`crate::files::node`]), inside the
//! namespace its network identity gives it.

use crate::files::node::{self, Place, View};
use crate::files::take::WORKDIR;
use crate::files::{Mount, Snapshots};
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
        env: &[(String, String)],
        scratch: &Path,
        argv: Vec<String>,
    ) -> Vec<String> {
        if mounts.is_empty() {
            return argv;
        }
        let home = env
            .iter()
            .rev()
            .find(|(k, _)| k == "HOME")
            .map_or_else(|| PathBuf::from("/"), |(_, v)| PathBuf::from(v));
        let view = View {
            host_ns: self.host_ns.clone(),
            home,
            places: mounts
                .iter()
                .map(|m| Place {
                    destination: m.destination.clone(),
                    snapshot: self.snapshots.path(&m.taken.digest),
                    dir: m.taken.dir,
                })
                .collect(),
            cwd: mounts.iter().any(|m| m.workdir).then(|| WORKDIR.to_owned()),
            scratch: scratch.to_owned(),
        };
        let view = serde_json::to_string(&view).unwrap_or_default();
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
        if t.files.is_empty() {
            continue;
        }
        for rank in 0..t.num_nodes {
            let node = crate::paths::node_dir(group_dir, task, rank);
            for attempt in std::fs::read_dir(&node).into_iter().flatten().flatten() {
                crate::files::store::remove(&attempt.path().join("files"));
            }
        }
    }
}
