//! A run's files on the cluster (`skyc_targets::k8s::files` has the
//! layout): the snapshots' streams as the plan records them, and the
//! filling of the group's files pod over `pods/exec`.
//!
//! The API server carries each stream once per group, in parts of
//! [`PART_BYTES`], whatever the number of nodes: every node's init
//! container fetches it from the files pod inside the cluster. Each part
//! is written at its offset, so a part sent again (an answer lost) changes
//! nothing; the stream is served once its SHA-256 is the submitted one;
//! the JobSet then records the pod filled ([`FILLED_ANNOTATION`]: what,
//! and the pod's uid), so a supervisor that adopts the group does not
//! fill it again. (The JobSet, since the runner's Role may patch it, not
//! pods.) The stream is made from the
//! snapshot as it is sent (one part in memory at a time).

use super::exec::{Command, ExecError, PodExec};
pub use crate::files::pack::{Packed, packed, packs};
use skyc_targets::k8s::files::{FILL_DONE, FILL_HAVE, FILL_PART};
use std::io::{self, Write};
use std::path::Path;

/// The JobSet's annotation of its filled files pod: `FILL/UID`, the
/// [`fill_id`] of what it serves and the pod's uid.
pub const FILLED_ANNOTATION: &str = "skyc.io/files-filled";

/// The bytes of one exec's input.
pub const PART_BYTES: usize = 8 << 20;

/// What a files pod filled with `packed` says it holds.
pub fn fill_id(packed: &[Packed]) -> String {
    let lines: String = packed
        .iter()
        .map(|p| format!("{} {}\n", p.digest, p.sha256))
        .collect();
    crate::files::tar::sha256(lines.as_bytes())[..16].to_owned()
}

/// Why a fill did not end.
#[derive(Debug)]
pub enum FillError {
    /// An exec did not answer as asked (see [`ExecError`]).
    Exec(ExecError),
    /// The snapshot is gone, or is not the one the plan recorded: no fill
    /// will ever give the nodes their files.
    Lost(String),
}

impl From<ExecError> for FillError {
    fn from(e: ExecError) -> Self {
        FillError::Exec(e)
    }
}

/// Whether `pod`, the group's files pod, is filled with what the plan
/// names: the JobSet records that pod so.
pub fn filled(
    plan: &super::Plan,
    objs: &super::objects::Objects,
    pod: &k8s_openapi::api::core::v1::Pod,
) -> bool {
    objs.jobset
        .as_ref()
        .is_some_and(|j| super::objects::filled(j, pod, &fill_id(&plan.files)))
}

/// Sends every stream of `packed` to the files pod `pod`, from the
/// snapshots in `snapshots`. A stream the pod already serves is not sent
/// again, and one it has whole parts of goes on from the first part it
/// lacks (a fill cut short, then tried again).
pub async fn fill(
    exec: &dyn PodExec,
    namespace: &str,
    pod: &str,
    snapshots: &Path,
    packed: &[Packed],
) -> Result<(), FillError> {
    for p in packed {
        let have = exec
            .exec(
                namespace,
                pod,
                Command {
                    argv: script(FILL_HAVE, &p.digest, ""),
                    stdin: None,
                },
            )
            .await?;
        let have = have.trim();
        if have == "done" {
            continue;
        }
        // Whole parts only: the one cut short is sent again.
        let first = have.parse::<u64>().unwrap_or(0) / PART_BYTES as u64;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(1);
        let path = snapshots.join(&p.digest);
        let maker = std::thread::spawn(move || -> io::Result<String> {
            let mut parts = Parts {
                part: Vec::with_capacity(PART_BYTES),
                tx,
                sha: ring::digest::Context::new(&ring::digest::SHA256),
            };
            crate::files::tar::write(&path, &mut parts)?;
            parts.send()?;
            Ok(parts
                .sha
                .finish()
                .as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect())
        });
        let mut index = 0;
        while let Some(part) = rx.recv().await {
            // The stream is made whole all the same: its SHA-256 is
            // checked against the plan's before it is served.
            if (index as u64) < first {
                index += 1;
                continue;
            }
            let mib = index * (PART_BYTES >> 20);
            let mut argv = script(FILL_PART, &p.digest, &mib.to_string());
            argv.push(part.len().to_string());
            exec.exec(
                namespace,
                pod,
                Command {
                    argv,
                    stdin: Some(part),
                },
            )
            .await?;
            index += 1;
        }
        match maker.join() {
            Ok(Ok(sha)) if sha == p.sha256 => {}
            Ok(Ok(_)) => {
                return Err(FillError::Lost(format!(
                    "the snapshot {} is no longer what was submitted",
                    p.digest
                )));
            }
            Ok(Err(e)) => {
                return Err(FillError::Lost(format!(
                    "the snapshot {} cannot be read: {e}",
                    p.digest
                )));
            }
            Err(_) => return Err(FillError::Lost("reading a snapshot failed".into())),
        }
        exec.exec(
            namespace,
            pod,
            Command {
                argv: script(FILL_DONE, &p.digest, &p.sha256),
                stdin: None,
            },
        )
        .await?;
    }
    Ok(())
}

fn script(body: &str, a: &str, b: &str) -> Vec<String> {
    ["sh", "-c", body, "sh", a, b]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
}

/// A stream cut into parts, each handed over once full, and its SHA-256.
struct Parts {
    part: Vec<u8>,
    tx: tokio::sync::mpsc::Sender<Vec<u8>>,
    sha: ring::digest::Context,
}

impl Parts {
    fn send(&mut self) -> io::Result<()> {
        if self.part.is_empty() {
            return Ok(());
        }
        let part = std::mem::replace(&mut self.part, Vec::with_capacity(PART_BYTES));
        self.tx
            .blocking_send(part)
            .map_err(|_| io::Error::other("the fill stopped"))
    }
}

impl Write for Parts {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let room = PART_BYTES - self.part.len();
        let n = buf.len().min(room);
        self.part.extend_from_slice(&buf[..n]);
        self.sha.update(&buf[..n]);
        if self.part.len() == PART_BYTES {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
