//! The agent's work, from its arguments to its exit.
//!
//! `skyc-agent DIR LOG INDEX PROGRAM -- ARGV0 ARGS...` runs PROGRAM (a path)
//! with ARGV0 ARGS... and the agent's own environment, and:
//! - writes, each atomically (write, then rename) in DIR: `agent.pid` (its
//!   own pid, first), `pgid` (the command's process group), and `exit` (the
//!   command's exit status, 128 + signal when a signal ended it) last;
//! - passes SIGTERM on to the command's process group, and turns SIGUSR1
//!   into SIGKILL for it (a SIGKILL sent to the agent itself would lose the
//!   exit status);
//! - appends the command's standard output and error, as read from one
//!   pipe, to LOG as they are, and one 16-byte record per chunk to INDEX
//!   (see [`Output`]);
//! - is a child subreaper: when the command ends it kills whatever the
//!   command left running, reads the pipe to its end, and only then
//!   writes `exit`.

use crate::sys::{self, Errno, Fd, PollFd};
use core::ffi::CStr;

const MODE: u32 = 0o666;

pub fn main(args: &sys::Args) -> i32 {
    let (Some(dir), Some(log), Some(index), Some(program), Some(sep)) = (
        args.get(1),
        args.get(2),
        args.get(3),
        args.get(4),
        args.get(5),
    ) else {
        return usage();
    };
    if sep.to_bytes() != b"--" || args.len() < 7 {
        return usage();
    }
    match run(args, dir, log, index, program) {
        Ok(()) => 0,
        Err((what, e)) => {
            for part in [
                b"skyc-agent (" as &[u8],
                dir.to_bytes(),
                b"): ",
                what.as_bytes(),
                b": ",
                e.message().as_bytes(),
                b"\n",
            ] {
                sys::write_stderr(part);
            }
            1
        }
    }
}

fn usage() -> i32 {
    sys::write_stderr(b"usage: skyc-agent DIR LOG INDEX PROGRAM -- ARGV0 [ARGS...]\n");
    2
}

/// How long the agent keeps reading output after the command and all it
/// left behind were killed: the pipe can then only be held open by a
/// process outside the node (one the descriptor was passed to).
const DRAIN_LIMIT_MS: u64 = 5_000;

type Failed = (&'static str, Errno);

fn run(
    args: &sys::Args,
    dir: &CStr,
    log: &CStr,
    index: &CStr,
    program: &CStr,
) -> Result<(), Failed> {
    // First: a signal that arrives later is passed on, not fatal.
    let signals = sys::signalfd(&[sys::SIGTERM, sys::SIGUSR1]).map_err(|e| ("signals", e))?;
    let dir = sys::open(dir, sys::O_PATH, 0).map_err(|e| ("directory", e))?;
    let mut num = Decimal::new();
    write_atomic(&dir, c"agent.pid", num.of(sys::getpid() as u64)).map_err(|e| ("agent.pid", e))?;
    let started = start(args, log, index, program);
    let (output, pipe, child) = match started {
        Ok(started) => started,
        Err(e) => {
            // The node could not start: its exit status says so, as a
            // shell's does for a command it cannot run.
            let _ = write_atomic(&dir, c"exit", b"127");
            return Err(e);
        }
    };
    match follow(&dir, child, &signals, &output, pipe) {
        Ok(code) => write_atomic(&dir, c"exit", num.of(code.into())).map_err(|e| ("exit", e)),
        Err(e) => {
            // The agent cannot follow its node any more (a full disk, say):
            // the node ends with 126, a failure the restart budget counts,
            // rather than as a lost node that restarts for free forever.
            let _ = sys::kill(-child, sys::SIGKILL);
            reap_leftovers(child);
            let _ = write_atomic(&dir, c"exit", b"126");
            Err(e)
        }
    }
}

/// Follows the started command: passes signals on, copies its output,
/// and once it ended, kills what it left and drains the pipe; its exit
/// status.
fn follow(dir: &Fd, child: i32, signals: &Fd, output: &Output, pipe: Fd) -> Result<u32, Failed> {
    let mut num = Decimal::new();
    write_atomic(dir, c"pgid", num.of(child as u64)).map_err(|e| ("pgid", e))?;
    let exited = sys::pidfd_open(child).map_err(|e| ("pidfd", e))?;

    // One page: each agent pays for every page of its stack it touches,
    // and a chunk of at most a page costs only its index record more.
    let mut buf = [0u8; 4096];
    let mut pipe = Some(pipe);
    let status = loop {
        let mut fds = [
            PollFd::readable(signals),
            PollFd::readable(&exited),
            PollFd::readable(pipe.as_ref().unwrap_or(&exited)),
        ];
        let n = if pipe.is_some() { 3 } else { 2 };
        match sys::poll(&mut fds[..n], None) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => return Err(("poll", e)),
        }
        let [sig, ended, out] = fds.map(|fd| fd.ready());
        if sig {
            while let Some(signal) = sys::read_signal(signals) {
                let to = if signal == sys::SIGUSR1 {
                    sys::SIGKILL
                } else {
                    sys::SIGTERM
                };
                let _ = sys::kill(-child, to);
            }
        }
        if n == 3 && out && !pass_on(&mut pipe, output, &mut buf) {
            pipe = None;
        }
        if ended && let Ok(Some((_, status))) = sys::wait(child, true) {
            break status;
        }
    };
    reap_leftovers(child);
    if let Some(pipe) = pipe {
        drain(pipe, output, &mut buf);
    }
    Ok(exit_code(status))
}

/// Opens the log and its index and starts the command, its output on a
/// pipe; the log, the pipe's read end and the command's pid.
fn start(
    args: &sys::Args,
    log: &CStr,
    index: &CStr,
    program: &CStr,
) -> Result<(Output, Fd, i32), Failed> {
    sys::set_child_subreaper().map_err(|e| ("subreaper", e))?;
    let append = sys::O_WRONLY | sys::O_APPEND | sys::O_CREAT;
    let output = Output {
        log: sys::open(log, append, MODE).map_err(|e| ("log", e))?,
        index: sys::open(index, append, MODE).map_err(|e| ("log index", e))?,
    };
    let (pipe, pipe_in) = sys::pipe().map_err(|e| ("pipe", e))?;
    match args.spawn(program, 6, &pipe_in) {
        Ok(child) => Ok((output, pipe, child)),
        Err(e) => {
            let mut line = Line::new();
            for part in [
                b"skyc: cannot start the node's command: " as &[u8],
                e.message().as_bytes(),
                b"\n",
            ] {
                line.push(part);
            }
            let _ = output.append(line.bytes());
            Err(("start", e))
        }
    }
}

/// Reads what is in the pipe and appends it; false at its end (or when it
/// cannot be read).
fn pass_on(pipe: &mut Option<Fd>, output: &Output, buf: &mut [u8]) -> bool {
    let Some(fd) = pipe else { return false };
    match sys::read(fd, buf) {
        Ok(0) => false,
        Ok(n) => {
            if output.append(&buf[..n]).is_err() {
                // The log cannot take more (disk full): keep reading, so
                // the node is not blocked on a full pipe.
            }
            true
        }
        Err(Errno::INTR | Errno::AGAIN) => true,
        Err(_) => false,
    }
}

/// Reads the pipe to its end once every process of the node is gone.
fn drain(pipe: Fd, output: &Output, buf: &mut [u8]) {
    let deadline = sys::monotonic_us() + DRAIN_LIMIT_MS * 1000;
    let mut pipe = Some(pipe);
    while let Some(fd) = &pipe {
        let now = sys::monotonic_us();
        if now >= deadline {
            let _ = output.append(
                b"\nskyc: the node's output is held open by a process outside the node; it is no longer read\n",
            );
            return;
        }
        let mut fds = [PollFd::readable(fd)];
        match sys::poll(&mut fds, Some((deadline - now).div_ceil(1000))) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(_) => return,
        }
        if fds[0].ready() && !pass_on(&mut pipe, output, buf) {
            return;
        }
    }
}

/// Kills what the command left running: its process group, then every
/// process that was re-parented to the agent, until none is left.
fn reap_leftovers(pgid: i32) {
    let _ = sys::kill(-pgid, sys::SIGKILL);
    let mut buf = [0u8; 4096];
    loop {
        if let Ok(list) = sys::open(c"/proc/thread-self/children", sys::O_RDONLY, 0) {
            let n = sys::read(&list, &mut buf).unwrap_or(0);
            for pid in buf[..n].split(|&b| b == b' ').filter_map(parse_pid) {
                let _ = sys::kill(pid, sys::SIGKILL);
            }
        }
        match sys::wait(-1, false) {
            Ok(_) | Err(Errno::INTR) => {}
            // No child left (ECHILD), or nothing more to learn.
            Err(_) => break,
        }
    }
}

fn parse_pid(s: &[u8]) -> Option<i32> {
    let s = s.trim_ascii();
    if s.is_empty() || s.len() > 9 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0, |n, d| n * 10 + i32::from(d - b'0')))
}

/// A wait status as a shell reports it: the exit code, or 128 + the
/// signal that ended the process.
pub fn exit_code(status: i32) -> u32 {
    let signal = status & 0x7f;
    if signal == 0 {
        ((status >> 8) & 0xff) as u32
    } else {
        128 + signal as u32
    }
}

/// The node's log and its index.
struct Output {
    log: Fd,
    index: Fd,
}

impl Output {
    /// Appends `chunk` to the log as it is, then its index record.
    fn append(&self, chunk: &[u8]) -> sys::Result<()> {
        sys::write_all(&self.log, chunk)?;
        let end = sys::offset(&self.log)?;
        sys::write_all(&self.index, &index_record(end, sys::now_us()))
    }
}

/// One chunk's record in a log's index: the byte offset in the log just
/// after the chunk, and when it was read (microseconds since the Unix
/// epoch), both little-endian `u64`. The reader is
/// `skyc_runtime::local::logindex`.
pub fn index_record(end_offset: u64, unix_time_us: u64) -> [u8; 16] {
    let mut record = [0u8; 16];
    record[..8].copy_from_slice(&end_offset.to_le_bytes());
    record[8..].copy_from_slice(&unix_time_us.to_le_bytes());
    record
}

/// Writes `name` in `dir` so that readers see all of it or nothing.
fn write_atomic(dir: &Fd, name: &CStr, content: &[u8]) -> sys::Result<()> {
    let tmp = c".tmp";
    let file = sys::open_at(dir, tmp, sys::O_WRONLY | sys::O_CREAT | sys::O_TRUNC, 0o644)?;
    sys::write_all(&file, content)?;
    drop(file);
    sys::rename_at(dir, tmp, name)
}

/// A short line put together without an allocator (cut at 256 bytes).
struct Line {
    buf: [u8; 256],
    len: usize,
}

impl Line {
    fn new() -> Line {
        Line {
            buf: [0; 256],
            len: 0,
        }
    }

    fn push(&mut self, part: &[u8]) {
        let n = part.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&part[..n]);
        self.len += n;
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// A number's decimal digits, without an allocator.
pub struct Decimal([u8; 20]);

impl Decimal {
    pub fn new() -> Decimal {
        Decimal([0; 20])
    }

    pub fn of(&mut self, mut n: u64) -> &[u8] {
        let mut i = self.0.len();
        loop {
            i -= 1;
            self.0[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                return &self.0[i..];
            }
        }
    }
}

impl Default for Decimal {
    fn default() -> Self {
        Decimal::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal() {
        let mut d = Decimal::new();
        assert_eq!(d.of(0), b"0");
        assert_eq!(d.of(127), b"127");
        assert_eq!(d.of(u64::MAX), b"18446744073709551615");
    }

    #[test]
    fn lines_are_cut_at_their_capacity() {
        let mut line = Line::new();
        line.push(b"ab");
        line.push(b"c");
        assert_eq!(line.bytes(), b"abc");
        line.push(&[b'x'; 300]);
        assert_eq!(line.bytes().len(), 256);
    }

    #[test]
    fn exit_codes_as_a_shell_reports_them() {
        assert_eq!(exit_code(0), 0);
        assert_eq!(exit_code(3 << 8), 3);
        assert_eq!(exit_code(255 << 8), 255);
        assert_eq!(exit_code(9), 137);
        assert_eq!(
            exit_code(15 | 0x80),
            143,
            "a core dump flag is not the signal"
        );
    }

    #[test]
    fn pids_from_the_children_list() {
        assert_eq!(parse_pid(b"123"), Some(123));
        assert_eq!(parse_pid(b"42\n"), Some(42));
        assert_eq!(parse_pid(b""), None);
        assert_eq!(parse_pid(b"12a"), None);
        assert_eq!(parse_pid(b"12345678901"), None);
    }

    #[test]
    fn index_records_are_little_endian() {
        let r = index_record(0x0102, 0x0a0b);
        assert_eq!(&r[..8], &[2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&r[8..], &[0x0b, 0x0a, 0, 0, 0, 0, 0, 0]);
    }
}
