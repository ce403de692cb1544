//! A run's snapshots as tar streams ([`super::tar`]), as the cluster
//! and cloud targets carry them: each stream's SHA-256 and length, which
//! the plan records and every node checks.

use crate::files::Snapshots;
use serde::{Deserialize, Serialize};
use skyc_targets::files::{Files, Mount, Pack};
use std::io;

/// One snapshot's stream, as the plan records it. Kept as a `files` list
/// of `digest`s, which is how the state directory finds the snapshots a
/// stored plan holds on to (`files::take::digests_in`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Packed {
    pub digest: String,
    pub sha256: String,
    pub bytes: u64,
}

/// The targets' view of `tasks`' files: each snapshot's stream
/// digested from `snapshots` (with its bytes when `with_data`, for the
/// manifests' ConfigMap).
pub fn packs(tasks: &[Vec<Mount>], snapshots: &Snapshots, with_data: bool) -> io::Result<Files> {
    let mut files = Files {
        tasks: tasks.to_vec(),
        ..Files::default()
    };
    for m in tasks.iter().flatten() {
        if files.packs.contains_key(&m.taken.digest) {
            continue;
        }
        let path = snapshots.path(&m.taken.digest);
        let pack = if with_data {
            let data = crate::files::tar::bytes(&path)?;
            Pack {
                sha256: crate::files::tar::sha256(&data),
                bytes: data.len() as u64,
                data: Some(data),
            }
        } else {
            let (sha256, bytes) = crate::files::tar::digest(&path)?;
            Pack {
                sha256,
                bytes,
                data: None,
            }
        };
        files.packs.insert(m.taken.digest.clone(), pack);
    }
    Ok(files)
}

/// The streams of `files`, as the plan keeps them.
pub fn packed(files: &Files) -> Vec<Packed> {
    files
        .packs
        .iter()
        .map(|(digest, p)| Packed {
            digest: digest.clone(),
            sha256: p.sha256.clone(),
            bytes: p.bytes,
        })
        .collect()
}
