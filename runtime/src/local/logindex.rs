//! A node log's index: `<log>.idx` beside each `groups/<id>/logs/*.log`,
//! one 16-byte record per chunk appended to the log: the byte offset in the
//! log just after the chunk, then when it was written (the node agent: when
//! it read the chunk from the node's output), in microseconds since the
//! Unix epoch (`CLOCK_REALTIME`), both little-endian `u64`. With it, the
//! lines of several logs can be merged in the order they were written.
//!
//! The node agent writes most records (agent/src/agent.rs, `index_record`);
//! [`append`] writes the supervisor's own lines. Records are appended after
//! their chunk, so a crash between the two leaves log bytes no record
//! covers, and a crash during a record's write leaves a truncated last
//! record, which [`read_index`] ignores.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// One chunk of a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The byte offset in the log just after the chunk.
    pub end_offset: u64,
    /// When the chunk was written, in microseconds since the Unix epoch.
    pub unix_time_us: u64,
}

const RECORD_LEN: usize = 16;

/// The index of the log at `log`.
pub fn index_path(log: &Path) -> PathBuf {
    let mut path = OsString::from(log.as_os_str());
    path.push(".idx");
    PathBuf::from(path)
}

/// The records of the index at `path`, in the order they were written; a
/// missing index has none, and a truncated last record is left out.
pub fn read_index(path: &Path) -> io::Result<Vec<Record>> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(records(&bytes))
}

/// The whole records in `bytes` (a part of an index read from a record
/// boundary); a cut-short last record is left for a later read.
pub fn records(bytes: &[u8]) -> Vec<Record> {
    bytes
        .chunks_exact(RECORD_LEN)
        .map(|r| {
            let (end, time) = r.split_at(8);
            Record {
                end_offset: u64::from_le_bytes(end.try_into().unwrap_or_default()),
                unix_time_us: u64::from_le_bytes(time.try_into().unwrap_or_default()),
            }
        })
        .collect()
}

/// The length of a record, for readers that read an index piecewise.
pub const RECORD_BYTES: u64 = RECORD_LEN as u64;

/// Appends `text` to the log at `log` as one chunk, and its record to the
/// log's index.
pub fn append(log: &Path, text: &[u8]) -> io::Result<()> {
    let open = |path: &Path| fs::OpenOptions::new().create(true).append(true).open(path);
    let mut file = open(log)?;
    file.write_all(text)?;
    // After an append, the offset is the end of what this write appended
    // (even if another writer appended since).
    let end = io::Seek::stream_position(&mut file)?;
    let time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let mut record = [0u8; RECORD_LEN];
    record[..8].copy_from_slice(&end.to_le_bytes());
    record[8..].copy_from_slice(&time.to_le_bytes());
    open(&index_path(log))?.write_all(&record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("skyc-logindex-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn records_are_read_in_order_and_a_truncated_last_one_is_left_out() {
        let dir = scratch("read");
        let idx = dir.join("a.log.idx");
        let mut bytes = Vec::new();
        for (end, time) in [(6u64, 1_000u64), (10, 2_000), (300, u64::MAX)] {
            bytes.extend_from_slice(&end.to_le_bytes());
            bytes.extend_from_slice(&time.to_le_bytes());
        }
        bytes.extend_from_slice(&[7, 0, 0]);
        fs::write(&idx, &bytes).expect("write");
        let records = read_index(&idx).expect("read");
        let pairs: Vec<_> = records
            .iter()
            .map(|r| (r.end_offset, r.unix_time_us))
            .collect();
        assert_eq!(pairs, [(6, 1_000), (10, 2_000), (300, u64::MAX)]);
        fs::remove_dir_all(dir).expect("clean up");
    }

    #[test]
    fn a_missing_index_has_no_records() {
        let dir = scratch("missing");
        assert_eq!(read_index(&dir.join("none.idx")).expect("read"), []);
        fs::remove_dir_all(dir).expect("clean up");
    }

    #[test]
    fn appended_chunks_are_indexed_at_their_ends() {
        let dir = scratch("append");
        let log = dir.join("t-0.log");
        assert_eq!(index_path(&log), dir.join("t-0.log.idx"));
        append(&log, b"first line\n").expect("append");
        append(&log, b"no newline").expect("append");
        assert_eq!(fs::read(&log).expect("log"), b"first line\nno newline");
        let records = read_index(&index_path(&log)).expect("index");
        let ends: Vec<_> = records.iter().map(|r| r.end_offset).collect();
        assert_eq!(ends, [11, 21]);
        assert!(records[0].unix_time_us <= records[1].unix_time_us);
        assert!(
            records[0].unix_time_us > 1_600_000_000_000_000,
            "microseconds"
        );
        fs::remove_dir_all(dir).expect("clean up");
    }
}
