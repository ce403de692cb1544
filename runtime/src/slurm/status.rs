//! `$SKYC_OUT/status`: one line per decision of the batch script.
//!
//! `EPOCH r<RESTART> WHAT ...`, appended by the batch script only (the
//! step wrappers write their own files under `.skyc/r<RESTART>/`):
//!
//! - `job START <leader> components=<ids>`: the script (re)started;
//! - `job SIGTERM`: Slurm is cancelling, preempting or requeueing the job;
//! - `task <name> <attempt> RUNNING|CANCELLING|SIGKILL|SUCCEEDED|FAILED|FAILED_SETUP|CANCELLED`;
//! - `task <name> <attempt> RECOVERING <why...>`: restarted as attempt + 1;
//! - `node <name> <attempt> <rank> setup|run|lost <code>`;
//! - `error <message...>`, `group <STATUS>`: the end.

use serde::Serialize;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatusLine {
    /// Seconds since the epoch, from bash's `$EPOCHREALTIME`.
    pub time: f64,
    /// `SLURM_RESTART_COUNT` of the run that wrote it.
    pub restart: u32,
    pub what: What,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum What {
    JobStart {
        leader: String,
    },
    JobSigterm,
    Task {
        name: String,
        attempt: u32,
        status: String,
        note: String,
    },
    Node {
        name: String,
        attempt: u32,
        rank: u32,
        phase: String,
        code: i32,
    },
    Error(String),
    Group(String),
}

impl StatusLine {
    /// One line; `None` for a line this version does not know (or a torn
    /// last line while the script is writing).
    pub fn parse(line: &str) -> Option<Self> {
        let mut f = line.split(' ');
        let time = f.next()?.parse().ok()?;
        let restart = f.next()?.strip_prefix('r')?.parse().ok()?;
        let what = match f.next()? {
            "job" => match f.next()? {
                "START" => What::JobStart {
                    leader: f.next()?.to_owned(),
                },
                "SIGTERM" => What::JobSigterm,
                _ => return None,
            },
            "task" => What::Task {
                name: f.next()?.to_owned(),
                attempt: f.next()?.parse().ok()?,
                status: f.next()?.to_owned(),
                note: f.collect::<Vec<_>>().join(" "),
            },
            "node" => What::Node {
                name: f.next()?.to_owned(),
                attempt: f.next()?.parse().ok()?,
                rank: f.next()?.parse().ok()?,
                phase: f.next()?.to_owned(),
                code: f.next()?.parse().ok()?,
            },
            "error" => What::Error(f.collect::<Vec<_>>().join(" ")),
            "group" => What::Group(f.next()?.to_owned()),
            _ => return None,
        };
        Some(Self {
            time,
            restart,
            what,
        })
    }
}

/// The status file under a job directory, read as it grows: each
/// [`refresh`](Self::refresh) reads only what was appended since the last.
#[derive(Debug)]
pub struct StatusFile {
    path: PathBuf,
    /// Bytes consumed: up to the end of the last complete line.
    offset: u64,
    lines: Vec<StatusLine>,
}

impl StatusFile {
    pub fn new(out_dir: &Path) -> Self {
        Self {
            path: out_dir.join("status"),
            offset: 0,
            lines: Vec::new(),
        }
    }

    /// Reads the complete lines appended since the last call (a torn last
    /// line waits for its newline); returns how many were new.
    pub fn refresh(&mut self) -> usize {
        let Ok(mut file) = File::open(&self.path) else {
            return 0;
        };
        let mut buf = Vec::new();
        if file.seek(SeekFrom::Start(self.offset)).is_err() || file.read_to_end(&mut buf).is_err() {
            return 0;
        }
        let Some(end) = buf.iter().rposition(|&b| b == b'\n') else {
            return 0;
        };
        self.offset += end as u64 + 1;
        let before = self.lines.len();
        self.lines.extend(
            String::from_utf8_lossy(&buf[..end])
                .lines()
                .filter_map(StatusLine::parse),
        );
        self.lines.len() - before
    }

    /// Every complete line read so far.
    pub fn lines(&self) -> &[StatusLine] {
        &self.lines
    }
}

/// Every complete line of the status file under `out_dir`; empty when the
/// job has not started yet.
pub fn read_status(out_dir: &Path) -> Vec<StatusLine> {
    let mut file = StatusFile::new(out_dir);
    file.refresh();
    file.lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind() {
        let l = StatusLine::parse("1795259983.611058 r0 node trainer 0 1 run 3").unwrap();
        assert_eq!(l.restart, 0);
        assert_eq!(
            l.what,
            What::Node {
                name: "trainer".into(),
                attempt: 0,
                rank: 1,
                phase: "run".into(),
                code: 3
            }
        );
        let l = StatusLine::parse("1.5 r2 task ps 1 RECOVERING restart 1 of 2").unwrap();
        assert!(matches!(l.what, What::Task { ref note, .. } if note == "restart 1 of 2"));
        assert!(StatusLine::parse("1.5 r0 job START 7 components=7,8").is_some());
        assert!(StatusLine::parse("1.5 r0 group SUCCEEDED").is_some());
        assert!(StatusLine::parse("1.5 r0 node trainer").is_none());
    }

    #[test]
    fn the_file_is_read_as_it_grows_and_torn_lines_wait() {
        let dir = std::env::temp_dir().join(format!("skyc-status-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("status");
        std::fs::write(&path, "1 r0 job START 7 components=7\n1 r0 task a 0 RUN").unwrap();
        let mut f = StatusFile::new(&dir);
        assert_eq!(f.refresh(), 1);
        assert_eq!(f.refresh(), 0, "the torn line waits");
        let mut w = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut w, b"NING\n1 r0 group SUCCEEDED\n").unwrap();
        assert_eq!(f.refresh(), 2);
        assert_eq!(f.lines(), read_status(&dir).as_slice());
        assert_eq!(f.lines()[2].what, What::Group("SUCCEEDED".into()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
