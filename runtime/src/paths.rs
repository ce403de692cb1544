//! Where a group's files live in the state directory, for every backend
//! and the supervisor, and how they are written.
//!
//! ```text
//! groups/<id>/hosts                         the group's hosts file
//! groups/<id>/scripts/<task>.{setup,run}.sh
//! groups/<id>/logs/<task name>-<rank>.log   setup and run output, all attempts
//! groups/<id>/logs/<task name>-<rank>.log.idx   its index (`logindex`)
//! groups/<id>/nodes/<task>/grant-<attempt>.json
//! groups/<id>/nodes/<task>/<rank>/work/     the node's working directory
//! groups/<id>/nodes/<task>/<rank>/a<attempt>-<phase>/   one agent's files
//! ```

use crate::policy::{Attempt, Phase, TaskId};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub fn group_dir(state: &Path, gid: i64) -> PathBuf {
    state.join("groups").join(gid.to_string())
}

pub fn task_dir(group: &Path, task: TaskId) -> PathBuf {
    group.join("nodes").join(task.to_string())
}

pub fn node_dir(group: &Path, task: TaskId, rank: u32) -> PathBuf {
    task_dir(group, task).join(rank.to_string())
}

pub fn attempt_dir(node: &Path, attempt: Attempt, phase: Phase) -> PathBuf {
    node.join(format!("a{attempt}-{}", phase_name(phase)))
}

/// What a node's attempt writes over its files (the local target): one
/// directory for the attempt's phases, so what setup wrote is there for
/// run.
pub fn layers(node: &Path, attempt: Attempt) -> PathBuf {
    node.join(format!("a{attempt}-files"))
}

pub fn script(group: &Path, task: TaskId, phase: Phase) -> PathBuf {
    group
        .join("scripts")
        .join(format!("{task}.{}.sh", phase_name(phase)))
}

/// A node's log, `logs/{task}-{rank}.log` in its group's directory.
pub fn log(group: &Path, task_name: &str, rank: u32) -> PathBuf {
    group.join("logs").join(log_name(task_name, rank))
}

/// A node's log's file name.
pub fn log_name(task_name: &str, rank: u32) -> String {
    // Task names are checked by the compiler; keep the path safe anyway.
    let safe: String = task_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}-{rank}.log")
}

pub fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Setup => "setup",
        Phase::Run => "run",
    }
}

/// Writes `name` in `dir` (made when missing) so that readers see all of
/// it or nothing.
pub fn write_atomic(dir: &Path, name: &str, content: &str) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{name}.tmp"));
    fs::write(&tmp, content)?;
    fs::rename(&tmp, dir.join(name))
}
