//! Pod logs into the group's directory, as the other targets keep them:
//! `groups/<id>/logs/<task>-<rank>.log`, every attempt appended, so
//! `skyc logs` reads a Kubernetes group like a local one, and a pod's
//! output outlives the pod.
//!
//! Each pod's log is read from its start, with timestamps: followed,
//! or read in turns ([`super::log_readers`]). The timestamp of the last line written is kept per pod
//! (`logs/.k8s/<pod uid>`), so a new supervisor resumes after it
//! (`sinceTime`, then skipping lines up to that instant) instead of
//! writing the pod's output twice.

use futures::AsyncBufReadExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, LogParams};
use skyc_targets::k8s::names::CONTAINER;
use std::fs;
use std::io::{self, Write};
use std::path::PathBuf;

/// Where one node's output goes, and where its progress is kept.
#[derive(Clone, Debug)]
pub struct NodeLog {
    /// The group's directory in the state directory.
    pub group_dir: PathBuf,
    pub task: String,
    pub rank: u32,
    pub attempt: u32,
    pub pod: String,
    pub uid: String,
}

impl NodeLog {
    fn log_path(&self) -> PathBuf {
        crate::paths::log(&self.group_dir, &self.task, self.rank)
    }

    fn mark_path(&self) -> PathBuf {
        let safe: String = self
            .uid
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        self.group_dir.join("logs").join(".k8s").join(safe)
    }

    /// The instant of the last line written from this pod, if any.
    pub fn mark(&self) -> Option<Timestamp> {
        fs::read_to_string(self.mark_path())
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn set_mark(&self, at: Timestamp) -> io::Result<()> {
        let path = self.mark_path();
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(io::Error::other("a mark path without a directory"));
        };
        crate::paths::write_atomic(dir, &name.to_string_lossy(), &at.to_string())
    }

    /// Appends lines of the pod's log (each `TIMESTAMP TEXT`) after the
    /// mark; returns how many were written.
    pub fn append(&self, lines: &[String]) -> io::Result<usize> {
        let mark = self.mark();
        let mut out = Vec::new();
        let mut last = None;
        for line in lines {
            let (at, text) = split(line);
            if let (Some(at), Some(mark)) = (at, mark)
                && at <= mark
            {
                continue;
            }
            out.extend_from_slice(text.as_bytes());
            out.push(b'\n');
            last = at.or(last);
        }
        if out.is_empty() {
            return Ok(0);
        }
        if let Some(dir) = self.log_path().parent() {
            fs::create_dir_all(dir)?;
        }
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        if mark.is_none() && self.attempt > 0 && !self.started() {
            writeln!(
                f,
                "skyc: restarting {} (attempt {})",
                self.task, self.attempt
            )?;
        }
        f.write_all(&out)?;
        // Written after the lines: a crash between the two repeats lines,
        // never loses them.
        if let Some(at) = last {
            self.set_mark(at)?;
        } else if mark.is_none() {
            self.set_mark(Timestamp::UNIX_EPOCH)?;
        }
        Ok(out.iter().filter(|&&b| b == b'\n').count())
    }

    fn started(&self) -> bool {
        self.mark_path().exists()
    }
}

/// `2026-11-23T10:00:00.123456789Z text` into its instant and text.
fn split(line: &str) -> (Option<Timestamp>, &str) {
    match line.split_once(' ') {
        Some((ts, text)) => match ts.parse() {
            Ok(at) => (Some(at), text),
            Err(_) => (None, line),
        },
        None => match line.parse() {
            Ok(at) => (Some(at), ""),
            Err(_) => (None, line),
        },
    }
}

/// The most a line may grow before it is written as it is.
const MAX_LINE: usize = 1 << 20;

/// How a log is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// Followed until it ends (the container ended, or the pod is gone).
    Follow,
    /// What it holds now, but a line still being written: the next read
    /// has it whole.
    Now,
    /// What it holds now, to its last byte: the pod has ended.
    Last,
}

/// Reads one pod's log after its mark, as `how` says. What arrived is
/// written as it arrives, whole lines at a time. Errors are the caller's
/// to retry; what was written stays.
pub async fn read(api: &Api<Pod>, node: &NodeLog, how: Reading) -> Result<(), kube::Error> {
    let params = LogParams {
        container: Some(CONTAINER.to_owned()),
        follow: how == Reading::Follow,
        timestamps: true,
        // kube sends whole seconds, rounded: from the mark's own second,
        // whose lines up to the mark are not written again.
        since_time: node
            .mark()
            .and_then(|m| Timestamp::from_second(m.as_second()).ok()),
        ..LogParams::default()
    };
    let reader = api.log_stream(&node.pod, &params).await?;
    let mut reader = std::pin::pin!(reader);
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let chunk = reader.fill_buf().await.map_err(kube::Error::ReadEvents)?;
        if chunk.is_empty() {
            if how == Reading::Now {
                let whole = pending
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |p| p + 1);
                pending.truncate(whole);
            }
            if !pending.is_empty() && pending.last() != Some(&b'\n') {
                pending.push(b'\n');
            }
            let all = pending.len();
            write_lines(node, &mut pending, all).map_err(kube::Error::ReadEvents)?;
            return Ok(());
        }
        pending.extend_from_slice(chunk);
        let n = chunk.len();
        reader.consume_unpin(n);
        let upto = match pending.iter().rposition(|&b| b == b'\n') {
            Some(pos) => pos + 1,
            None if pending.len() > MAX_LINE => {
                pending.push(b'\n');
                pending.len()
            }
            None => continue,
        };
        write_lines(node, &mut pending, upto).map_err(kube::Error::ReadEvents)?;
    }
}

fn write_lines(node: &NodeLog, pending: &mut Vec<u8>, upto: usize) -> io::Result<()> {
    let complete: Vec<u8> = pending.drain(..upto).collect();
    let lines: Vec<String> = String::from_utf8_lossy(&complete)
        .lines()
        .map(str::to_owned)
        .collect();
    node.append(&lines).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_after_the_mark_are_written_once() {
        let dir = std::env::temp_dir().join(format!("skyc-k8s-logs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let node = NodeLog {
            group_dir: dir.clone(),
            task: "trainer".into(),
            rank: 1,
            attempt: 1,
            pod: "g-trainer-1-0-abcde".into(),
            uid: "u-1".into(),
        };
        let first = vec![
            "2026-11-23T10:00:00.000000001Z hello".to_owned(),
            "2026-11-23T10:00:01Z world".to_owned(),
        ];
        assert_eq!(node.append(&first).unwrap(), 2);
        // A new supervisor reads the log again from the same second.
        let again = vec![
            "2026-11-23T10:00:01Z world".to_owned(),
            "2026-11-23T10:00:02Z more".to_owned(),
        ];
        assert_eq!(node.append(&again).unwrap(), 1);
        let text = fs::read_to_string(crate::paths::log(&dir, "trainer", 1)).unwrap();
        assert_eq!(
            text,
            "skyc: restarting trainer (attempt 1)\nhello\nworld\nmore\n"
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
