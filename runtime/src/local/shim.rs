//! The node shim: one small process per node and phase that outlives the
//! supervisor. It starts the node's command in a process group of its own,
//! forwards the supervisor's signals to that group, reaps everything the
//! command left behind (it is a child subreaper), and records the exit
//! status in its directory before it exits.
//!
//! Files in the directory, each written atomically (write, then rename):
//! - `shim.pid`: the shim's pid, written first;
//! - `pgid`: the node's process group;
//! - `exit`: the exit status (128 + signal when killed by a signal).
//!
//! A directory with `shim.pid` and neither a live shim nor `exit` is a lost
//! node: the shim itself was killed, as a machine is lost.

use rustix::event::{PollFd, PollFlags, poll};
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions};
use std::fs;
use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `argv` as the node's command; returns the shim's exit status.
pub fn main(dir: &Path, argv: &[String]) -> i32 {
    match run(dir, argv) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("skyc shim ({}): {e}", dir.display());
            1
        }
    }
}

/// SIGTERM is passed on; SIGUSR1 asks for SIGKILL (a SIGKILL sent to the
/// shim itself would lose the exit status).
pub const KILL_REQUEST: Signal = Signal::USR1;

fn run(dir: &Path, argv: &[String]) -> io::Result<()> {
    // Handlers first: a signal that arrives later is forwarded, not fatal.
    // One socket per signal: signal-hook writes a byte on each delivery.
    let term = signal_socket(signal_hook::consts::SIGTERM)?;
    let kill = signal_socket(signal_hook::consts::SIGUSR1)?;
    write_atomic(
        dir,
        "shim.pid",
        &rustix::process::getpid().as_raw_nonzero().to_string(),
    )?;
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;

    let (program, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::other("no command"))?;
    let child = Command::new(program)
        .args(args)
        .process_group(0)
        .stdin(Stdio::null())
        .spawn();
    let child = match child {
        Ok(child) => child,
        Err(e) => {
            eprintln!("skyc: cannot start `{program}`: {e}");
            write_atomic(dir, "exit", "127")?;
            return Ok(());
        }
    };
    let pid = Pid::from_child(&child);
    write_atomic(dir, "pgid", &pid.as_raw_nonzero().to_string())?;
    let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty())?;

    let status = loop {
        let mut fds = [
            PollFd::new(&term, PollFlags::IN),
            PollFd::new(&kill, PollFlags::IN),
            PollFd::new(&pidfd, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        let ready = fds.map(|fd| !fd.revents().is_empty());
        for (i, signal) in [(0, Signal::TERM), (1, Signal::KILL)] {
            if ready[i] && drain(if i == 0 { &term } else { &kill }) {
                let _ = rustix::process::kill_process_group(pid, signal);
            }
        }
        if ready[2]
            && let Some((_, status)) = rustix::process::waitpid(Some(pid), WaitOptions::NOHANG)?
        {
            break status;
        }
    };
    let code = match (status.exit_status(), status.terminating_signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 255,
    };
    reap_leftovers(pid);
    write_atomic(dir, "exit", &code.to_string())?;
    Ok(())
}

/// Kills what the command left running: its process group, then any
/// descendant that was re-parented to the shim, until none is left.
fn reap_leftovers(pgid: Pid) {
    let _ = rustix::process::kill_process_group(pgid, Signal::KILL);
    loop {
        for pid in children() {
            if let Some(pid) = Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, Signal::KILL);
            }
        }
        match rustix::process::wait(WaitOptions::empty()) {
            Ok(Some(_)) => {}
            // No child left (ECHILD), or nothing more to learn.
            Ok(None) | Err(_) => break,
        }
    }
}

fn children() -> Vec<i32> {
    let me = rustix::process::getpid().as_raw_nonzero();
    fs::read_to_string(format!("/proc/self/task/{me}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Writes `name` in `dir` so that readers see all of it or nothing.
pub fn write_atomic(dir: &Path, name: &str, content: &str) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    fs::write(&tmp, content)?;
    fs::rename(&tmp, dir.join(name))
}

/// The read end of a socket that receives a byte per delivery of `sig`.
fn signal_socket(sig: i32) -> io::Result<UnixStream> {
    let (read, write) = UnixStream::pair()?;
    read.set_nonblocking(true)?;
    signal_hook::low_level::pipe::register(sig, write)?;
    Ok(read)
}

/// Empties a signal socket; whether anything was in it.
fn drain(mut socket: &UnixStream) -> bool {
    let mut buf = [0u8; 64];
    let mut any = false;
    while let Ok(n) = socket.read(&mut buf) {
        if n == 0 {
            break;
        }
        any = true;
    }
    any
}
