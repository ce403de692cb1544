//! The plan of a group run on Slurm: what the supervisor needs to submit
//! it and watch it, made by the submitting client and stored with the
//! group.

use super::Slurm;
use crate::policy::GroupSpec;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub group: String,
    pub spec: GroupSpec,
    /// Per task (in `spec` order), its number of nodes.
    pub num_nodes: Vec<u32>,
    /// The batch script, as `skyc build --target slurm` writes it.
    pub script: String,
    /// The job's directory: the script, its status file and the node
    /// logs; compute nodes must see it at the same path. `None`: the
    /// group's directory in the state directory.
    pub out_dir: Option<PathBuf>,
    /// sbatch's whole environment, which it exports to the job: the
    /// submitting client's, then the tasks' secrets.
    pub env: Vec<(String, String)>,
    /// sbatch's `--comment`: how a job whose id was never recorded (the
    /// supervisor died inside sbatch) is found again.
    pub token: String,
}

impl Plan {
    /// The cluster of the submitting client's environment, whose Slurm
    /// commands (its `PATH`, its `SLURM_CONF`) every command uses.
    pub fn cluster(&self) -> Slurm {
        Slurm::with_env(self.env.clone())
    }

    /// The job's directory, absolute (it reaches the job as `SKYC_OUT`).
    pub fn out_dir(&self, state: &Path, gid: i64) -> PathBuf {
        let dir = self
            .out_dir
            .clone()
            .unwrap_or_else(|| crate::local::paths::group_dir(state, gid));
        std::path::absolute(&dir).unwrap_or(dir)
    }
}
