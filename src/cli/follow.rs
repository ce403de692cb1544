//! Reading a group's node logs as one stream, each line prefixed
//! `(task-rank)`, lines of all nodes in the order they were written.
//!
//! The order comes from each log's index (`<log>.idx`, written by the node
//! agent beside the log: per chunk of output, the offset where it ends and
//! when it was read). A line takes the time of the chunk its first byte
//! arrived in. A log without an index (a Slurm job's, written by srun)
//! keeps its own order and joins the others as its lines are read.
//! skyc's own lines ([`History`]) join them at the time they were
//! recorded.

use super::history::History;
use skyc_runtime::local::logindex;
use skyc_runtime::paths;
use skyc_runtime::registry::{LogPlaces, LogQuery};
use skyc_runtime::store::{GroupRow, Store, TaskRow};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

/// The most read of one log (or index) at a time.
const READ_LIMIT: u64 = 1 << 20;
/// The most history events read at a time.
const HISTORY_READ_LIMIT: usize = 1000;
/// A line longer than this is shown in pieces.
const MAX_LINE: usize = 64 << 10;

pub(crate) struct Follower {
    logs: Vec<Log>,
    /// Each followed group's history; its lines are numbered after the
    /// logs' (`Line::log` of `logs.len() + i`).
    histories: Vec<History>,
    /// The number of the last history event read (numbers are shared by
    /// every group).
    history_read: i64,
    /// History lines read but not written: a log read in rounds may still
    /// hold earlier lines.
    held: Vec<Line>,
}

struct Log {
    prefix: String,
    path: PathBuf,
    /// Bytes of the log read so far.
    offset: u64,
    /// The unfinished last line, and the offset where it starts.
    partial: Vec<u8>,
    partial_start: u64,
    index: Index,
}

/// A log's index as far as it was read: chunk end offsets and times (µs).
#[derive(Default)]
struct Index {
    read: u64,
    chunks: Vec<(u64, u64)>,
}

/// A line ready to print: when it was written (None: not known), and
/// which log it came from, for a stable order.
struct Line {
    time: Option<u64>,
    log: usize,
    text: Vec<u8>,
}

/// Where a group's logs are (its backend says: see
/// [`skyc_runtime::registry::Descriptor::logs`]).
pub(crate) fn log_places(
    store: &Store,
    state: &std::path::Path,
    group: &GroupRow,
    tasks: &[TaskRow],
) -> Result<LogPlaces, String> {
    let names: Vec<String> = tasks.iter().map(|t| t.name.clone()).collect();
    (group.backend.descriptor().logs)(&LogQuery {
        store,
        state,
        group,
        tasks: &names,
    })
}

impl Follower {
    /// The logs of a group's nodes, or of one task's (`task`, or its index)
    /// or one node's (`task-rank`).
    pub(crate) fn new(
        store: &Store,
        state: &std::path::Path,
        gid: i64,
        only: Option<&str>,
    ) -> Result<Self, String> {
        let tasks = store.tasks(gid).map_err(|e| e.to_string())?;
        let group = store
            .group(gid)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no group {gid}"))?;
        // A task index, as `sky jobs logs 42 0` takes one.
        let only = only.map(|o| match o.parse::<usize>() {
            Ok(i) if i < tasks.len() => tasks[i].name.clone(),
            _ => o.to_owned(),
        });
        let only = only.as_deref();
        let mut logs = Vec::new();
        let places = log_places(store, state, &group, &tasks)?;
        // The backend's own logs (Slurm's batch output: why a script could
        // not run the group) go with the whole group's.
        if only.is_none() {
            for (name, path) in places.extra {
                logs.push(Log::new(format!("({name}) "), path));
            }
        }
        let dirs = places.task_dirs;
        for (task, dir) in tasks.iter().zip(&dirs) {
            let nodes = u32::try_from(task.num_nodes).unwrap_or(1);
            for rank in 0..nodes {
                let prefix = format!("{}-{rank}", task.name);
                if only.is_some_and(|o| o != task.name && o != prefix) {
                    continue;
                }
                logs.push(Log::new(
                    format!("({prefix}) "),
                    paths::log(dir, &task.name, rank),
                ));
            }
        }
        if logs.is_empty() {
            let names: Vec<_> = tasks
                .iter()
                .enumerate()
                .map(|(i, t)| format!("{i}: {}", t.name))
                .collect();
            return Err(format!(
                "group {gid} has no task or node `{}`; its tasks are {}",
                only.unwrap_or_default(),
                names.join(", ")
            ));
        }
        let names = tasks.iter().map(|t| t.name.clone()).collect();
        Ok(Self {
            logs,
            histories: vec![History::new(gid, names, only)],
            history_read: 0,
            held: Vec::new(),
        })
    }

    /// Follows nothing yet ([`extend`](Self::extend) adds).
    pub(crate) fn empty() -> Self {
        Self {
            logs: Vec::new(),
            histories: Vec::new(),
            history_read: 0,
            held: Vec::new(),
        }
    }

    /// Follows `other`'s logs too, in one stream with these (before the
    /// first poll: the histories are read from one point on).
    pub(crate) fn extend(&mut self, other: Self) {
        self.logs.extend(other.logs);
        self.histories.extend(other.histories);
    }

    /// Prefixes every line with `label`: `(label) ` for a one-node job,
    /// `(label, task-rank) ` otherwise.
    pub(crate) fn relabel(mut self, label: &str) -> Self {
        let one = self.logs.len() == 1;
        for log in &mut self.logs {
            let inner = log
                .prefix
                .trim_end()
                .trim_start_matches('(')
                .trim_end_matches(')');
            log.prefix = if one {
                format!("({label}) ")
            } else {
                format!("({label}, {inner}) ")
            };
        }
        for history in &mut self.histories {
            history.prefix = format!("({label}, skyc) ");
        }
        self
    }

    /// Writes the complete lines written since the last call, in the order
    /// they were written.
    /// Reads in rounds of at most `READ_LIMIT` per log, each written out
    /// before the next is read, so a huge log costs no more memory than a
    /// small one.
    pub(crate) fn poll(&mut self, store: &Store, out: &mut impl Write) -> io::Result<()> {
        loop {
            let mut lines = Vec::new();
            let mut more = false;
            let history_left = self.read_histories(store)?;
            // A log with more to read may still hold lines written before
            // a history line: such a line waits until they are read.
            let mut until = Some(u64::MAX);
            for (i, log) in self.logs.iter_mut().enumerate() {
                let from = lines.len();
                if log.read(i, &mut lines)? {
                    more = true;
                    let last = lines[from..].iter().filter_map(|l| l.time).max();
                    until = until.zip(last).map(|(u, l)| u.min(l));
                }
            }
            let (due, held): (Vec<Line>, Vec<Line>) = std::mem::take(&mut self.held)
                .into_iter()
                .partition(|l| until.is_some_and(|u| l.time.is_some_and(|t| t <= u)));
            self.held = held;
            lines.extend(due);
            more |= history_left;
            write_ordered(lines, &self.prefixes(), out)?;
            if !more {
                return Ok(());
            }
        }
    }

    /// Writes what is left, unfinished lines included.
    pub(crate) fn finish(&mut self, store: &Store, out: &mut impl Write) -> io::Result<()> {
        self.poll(store, out)?;
        let mut lines = Vec::new();
        for (i, log) in self.logs.iter_mut().enumerate() {
            lines.extend(log.end_partial(i));
        }
        write_ordered(lines, &self.prefixes(), out)
    }

    /// Holds the lines of the history events recorded since the last read,
    /// of every followed group in one query; whether there are more.
    fn read_histories(&mut self, store: &Store) -> io::Result<bool> {
        if self.histories.is_empty() {
            return Ok(false);
        }
        let of: BTreeMap<i64, usize> = (0..)
            .zip(&self.histories)
            .map(|(i, h)| (h.gid, i))
            .collect();
        let gids: Vec<i64> = of.keys().copied().collect();
        let events = store
            .events_after(&gids, self.history_read, HISTORY_READ_LIMIT)
            .map_err(io::Error::other)?;
        let more = events.len() == HISTORY_READ_LIMIT;
        for (seq, gid, at_ms, event) in events {
            self.history_read = seq;
            let Some(&i) = of.get(&gid) else {
                continue;
            };
            if let Some(text) = self.histories[i].line(&event) {
                self.held.push(Line {
                    time: Some(u64::try_from(at_ms).unwrap_or(0).saturating_mul(1000)),
                    log: self.logs.len() + i,
                    text: text.into_bytes(),
                });
            }
        }
        Ok(more)
    }

    /// Each source's prefix: the logs', then the histories'.
    fn prefixes(&self) -> Vec<&str> {
        self.logs
            .iter()
            .map(|l| l.prefix.as_str())
            .chain(self.histories.iter().map(|h| h.prefix.as_str()))
            .collect()
    }
}

/// Lines of several logs by time; a log's own lines keep their order, and
/// lines of unknown time follow the timed ones of the same read.
fn write_ordered(mut lines: Vec<Line>, prefixes: &[&str], out: &mut impl Write) -> io::Result<()> {
    lines.sort_by_key(|l| (l.time.unwrap_or(u64::MAX), l.log));
    for line in &lines {
        out.write_all(prefixes[line.log].as_bytes())?;
        out.write_all(&line.text)?;
    }
    out.flush()
}

impl Log {
    fn new(prefix: String, path: PathBuf) -> Self {
        Self {
            prefix,
            path,
            offset: 0,
            partial: Vec::new(),
            partial_start: 0,
            index: Index::default(),
        }
    }

    /// The unfinished line as a line of its own, if there is one.
    fn end_partial(&mut self, me: usize) -> Option<Line> {
        if self.partial.is_empty() {
            return None;
        }
        let mut text = std::mem::take(&mut self.partial);
        text.push(b'\n');
        Some(Line {
            time: self.index.time_of(self.partial_start),
            log: me,
            text,
        })
    }

    /// Reads what was appended (at most `READ_LIMIT`), and pushes its
    /// complete lines; whether the log holds more. The index is read after
    /// the log, so a line lacks a time only when the agent had not yet
    /// written the record of its chunk.
    fn read(&mut self, me: usize, lines: &mut Vec<Line>) -> io::Result<bool> {
        let Ok(mut file) = File::open(&self.path) else {
            return Ok(false);
        };
        file.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        file.take(READ_LIMIT).read_to_end(&mut buf)?;
        let more = buf.len() as u64 == READ_LIMIT;
        self.index.refresh(&logindex::index_path(&self.path));
        let mut start = self.offset;
        self.offset += buf.len() as u64;
        let mut rest = &buf[..];
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let (line, tail) = rest.split_at(nl + 1);
            let line_start = if self.partial.is_empty() {
                start
            } else {
                self.partial_start
            };
            let mut text = std::mem::take(&mut self.partial);
            text.extend_from_slice(line);
            lines.push(Line {
                time: self.index.time_of(line_start),
                log: me,
                text,
            });
            start += line.len() as u64;
            rest = tail;
        }
        if !rest.is_empty() {
            if self.partial.is_empty() {
                self.partial_start = start;
            }
            self.partial.extend_from_slice(rest);
            // Output that never ends a line is shown in pieces.
            if self.partial.len() >= MAX_LINE {
                lines.extend(self.end_partial(me));
            }
        }
        let unread = if self.partial.is_empty() {
            self.offset
        } else {
            self.partial_start
        };
        self.index.forget_before(unread);
        Ok(more)
    }
}

impl Index {
    /// Reads the records appended since the last read (a record cut short
    /// is read next time).
    fn refresh(&mut self, path: &std::path::Path) {
        let Ok(mut file) = File::open(path) else {
            return;
        };
        if file.seek(SeekFrom::Start(self.read)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        if file.take(READ_LIMIT).read_to_end(&mut buf).is_err() {
            return;
        }
        let records = logindex::records(&buf);
        self.read += records.len() as u64 * logindex::RECORD_BYTES;
        self.chunks
            .extend(records.iter().map(|r| (r.end_offset, r.unix_time_us)));
    }

    /// Drops the chunks that end before `offset`: nothing before it is
    /// asked about again.
    fn forget_before(&mut self, offset: u64) {
        let done = self.chunks.partition_point(|&(end, _)| end <= offset);
        self.chunks.drain(..done);
    }

    /// When the byte at `offset` was written: the time of the first chunk
    /// that ends past it.
    fn time_of(&self, offset: u64) -> Option<u64> {
        let i = self.chunks.partition_point(|&(end, _)| end <= offset);
        self.chunks.get(i).map(|&(_, time)| time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(chunks: &[(u64, u64)]) -> Index {
        Index {
            read: 0,
            chunks: chunks.to_vec(),
        }
    }

    #[test]
    fn a_byte_takes_the_time_of_its_chunk() {
        let i = index(&[(10, 100), (25, 200)]);
        assert_eq!(i.time_of(0), Some(100));
        assert_eq!(i.time_of(9), Some(100));
        assert_eq!(i.time_of(10), Some(200));
        assert_eq!(i.time_of(24), Some(200));
        assert_eq!(i.time_of(25), None);
    }

    #[test]
    fn lines_of_two_logs_interleave_by_time() {
        let dir = std::env::temp_dir().join(format!("skyc-follow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str, chunks: &[(u64, u64)]| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            let idx: Vec<u8> = chunks
                .iter()
                .flat_map(|(e, t)| e.to_le_bytes().into_iter().chain(t.to_le_bytes()))
                .collect();
            // A record cut short at the end is left for the next read.
            let mut idx_path = path.into_os_string();
            idx_path.push(".idx");
            std::fs::write(idx_path, [&idx[..], &[1, 2, 3][..]].concat()).unwrap();
            dir.join(name)
        };
        let a = write("a.log", "a1\na2\na3", &[(3, 10), (6, 30), (8, 50)]);
        let b = write("b.log", "b1\nb2\n", &[(3, 20), (6, 40)]);
        let mut f = Follower {
            logs: vec![Log::new("(a) ".into(), a), Log::new("(b) ".into(), b)],
            histories: Vec::new(),
            history_read: 0,
            held: Vec::new(),
        };
        let store = Store::open(&dir).unwrap();
        let mut out = Vec::new();
        f.poll(&store, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            "(a) a1\n(b) b1\n(a) a2\n(b) b2\n"
        );
        out.clear();
        f.finish(&store, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "(a) a3\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_history_line_waits_for_the_earlier_lines_of_a_log_read_in_rounds() {
        let dir = std::env::temp_dir().join(format!("skyc-follow-held-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut store = Store::open(&dir).unwrap();
        let gid = store
            .insert_group(&skyc_runtime::store::NewGroup {
                name: "g",
                source: "g.yaml",
                submitted_at_ms: 0,
                plan: "{}",
                backend: skyc_runtime::store::Backend::Local,
                snapshots: &[],
                buckets: &[],
                tasks: vec![skyc_runtime::store::NewTask {
                    name: "a",
                    primary: true,
                    num_nodes: 1,
                }],
            })
            .unwrap();
        // Waiting recorded at 2 s; the log's first 2 MiB written at 1 s,
        // its last 2 MiB at 3 s: more than one round of reading each.
        store
            .transaction(|tx| {
                tx.append_event(
                    gid,
                    2_000,
                    r#"{"waiting":{"task":0,"why":"Slurm: Priority"}}"#,
                )
            })
            .unwrap();
        let half = 1u64 << 21;
        let path = dir.join("a-0.log");
        std::fs::write(&path, "x\n".repeat(half as usize)).unwrap();
        let idx: Vec<u8> = [(half, 1_000_000u64), (2 * half, 3_000_000)]
            .iter()
            .flat_map(|(e, t)| e.to_le_bytes().into_iter().chain(t.to_le_bytes()))
            .collect();
        std::fs::write(logindex::index_path(&path), idx).unwrap();
        let mut f = Follower {
            logs: vec![Log::new("(a-0) ".into(), path)],
            histories: vec![History::new(gid, vec!["a".into()], None)],
            history_read: 0,
            held: Vec::new(),
        };
        let mut out = Vec::new();
        f.finish(&store, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let at = text
            .lines()
            .position(|l| l == "(skyc) a: waiting: Slurm: Priority")
            .expect("the history line");
        // Every line written at 1 s comes first (a line of 2 bytes).
        assert_eq!(at as u64, half / 2);
        assert_eq!(text.lines().count() as u64, half + 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_huge_log_is_read_in_bounded_rounds_and_long_lines_in_pieces() {
        let dir = std::env::temp_dir().join(format!("skyc-follow-big-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big.log");
        // 3 MiB of short lines, then 2.5 MiB with no newline at all.
        let mut text = "x\n".repeat(3 << 19).into_bytes();
        text.extend(std::iter::repeat_n(b'y', 5 << 19));
        std::fs::write(&path, &text).unwrap();
        let mut f = Follower {
            logs: vec![Log::new(String::new(), path)],
            histories: Vec::new(),
            history_read: 0,
            held: Vec::new(),
        };
        let store = Store::open(&dir).unwrap();
        let mut out = Vec::new();
        f.finish(&store, &mut out).unwrap();
        let lines: Vec<&[u8]> = out.split(|&b| b == b'\n').collect();
        assert_eq!(lines.iter().filter(|l| *l == b"x").count(), 3 << 19);
        let pieces: Vec<usize> = lines
            .iter()
            .filter(|l| l.first() == Some(&b'y'))
            .map(|l| l.len())
            .collect();
        assert_eq!(pieces.iter().sum::<usize>(), 5 << 19);
        assert!(pieces.iter().all(|&n| n <= MAX_LINE + READ_LIMIT as usize));
        assert!(pieces.len() >= 2, "{pieces:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
