//! What the cloud runtime reads of a run's plan, whichever provider
//! runs it: the group, the run's own name, the group's spec, and the
//! bucket its files go through; and the tags every instance of a run
//! carries, by which each node's attempt is found again.

use crate::policy::GroupSpec;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Unique to a run (skyc's controller on AWS may act on what carries
/// it: its role's policy names it).
pub const RUN_TAG: &str = skyc_targets::cloud::controller::RUN_TAG;
pub const TASK_TAG: &str = "skyc-task";
pub const RANK_TAG: &str = "skyc-rank";
pub const ATTEMPT_TAG: &str = "skyc-attempt";
pub const GROUP_TAG: &str = "skyc-group";
/// On a pool worker's instances: the pool's name.
pub const POOL_TAG: &str = "skyc-pool";

/// A run, as its provider's plan gives it (AWS: [`crate::aws::Plan::as_run`]).
#[derive(Clone, Copy, Debug)]
pub struct Run<'a> {
    pub group: &'a str,
    /// Unique to this run: every instance's [`RUN_TAG`].
    pub run: &'a str,
    pub spec: &'a GroupSpec,
    pub bucket: Option<&'a Bucket>,
}

/// The bucket made for one run: every snapshot's stream uploaded once
/// (as `{digest}.tar`) before any instance is launched, fetched by each
/// node, deleted with everything in it once the group has ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    /// `skyc-{group}-{random}`: bucket names are global to a store.
    pub name: String,
    /// Kept as a `files` list of `digest`s, which is how the state
    /// directory finds the snapshots a stored plan holds on to.
    pub files: Vec<crate::files::pack::Packed>,
    /// Per task (by index), the digests its nodes fetch, each once.
    pub tasks: Vec<Vec<String>>,
}

/// The object a snapshot's stream is kept as.
pub fn key(digest: &str) -> String {
    format!("{digest}.tar")
}

impl Bucket {
    /// Whether `keys` (the bucket as listed) hold every stream.
    pub fn complete(&self, keys: Option<&[String]>) -> bool {
        let Some(keys) = keys else {
            return false;
        };
        let have: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
        self.files
            .iter()
            .all(|p| have.contains(key(&p.digest).as_str()))
    }
}
