//! The supervisor's side of the node agent: one `skyc-agent` process per
//! node and phase (the crate in agent/ has its side). It outlives the
//! supervisor: it runs the node's command in a process group of its own,
//! passes the supervisor's signals on to that group, captures the
//! command's output into the node's log and its index ([`super::logindex`]),
//! reaps everything the command left behind, and records the exit status in
//! its directory before it exits.
//!
//! Files in the directory, each written atomically (write, then rename):
//! - `agent.pid`: the agent's pid, written first;
//! - `pgid`: the node's process group;
//! - `exit`: the exit status (128 + signal when killed by a signal),
//!   written last, once the node's output is all in its log.
//!
//! A directory with `agent.pid` and neither a live agent nor `exit` is a
//! lost node: the agent itself was killed, as a machine is lost.

use rustix::process::{Pid, PidfdFlags, Signal};
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The agent's executable, installed next to skyc's.
pub const EXECUTABLE: &str = "skyc-agent";

/// SIGTERM is passed on; SIGUSR1 asks for SIGKILL (a SIGKILL sent to the
/// agent itself would lose the exit status).
pub const KILL_REQUEST: Signal = Signal::USR1;

const PID_FILE: &str = "agent.pid";
const EXIT_FILE: &str = "exit";

/// Where the agent is for the skyc executable `skyc` (the running one, for
/// the supervisor): beside it. A missing agent is an incomplete
/// installation, said as such; nothing else stands in for it.
pub fn executable(skyc: &Path) -> io::Result<PathBuf> {
    let agent = skyc.with_file_name(EXECUTABLE);
    if agent.is_file() {
        Ok(agent)
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "skyc's node agent {} is missing: install `{EXECUTABLE}` next to `{}`",
                agent.display(),
                skyc.display()
            ),
        ))
    }
}

/// What one node and phase runs, and where its files go.
pub struct Launch<'a> {
    /// The attempt directory (the agent's files).
    pub dir: &'a Path,
    /// The node's log (its index is beside it).
    pub log: &'a Path,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: &'a Path,
}

/// Starts the agent of `launch`: its pid, and a pidfd that becomes
/// readable when it exits.
pub fn spawn(agent: &Path, launch: Launch<'_>) -> io::Result<(Pid, OwnedFd)> {
    let (name, args) = launch
        .argv
        .split_first()
        .ok_or_else(|| io::Error::other("no command"))?;
    let program = resolve(name, path_var(&launch.env), launch.cwd);
    // The agent runs in the node's working directory: its paths are
    // absolute.
    let dir = std::path::absolute(launch.dir)?;
    let log = std::path::absolute(launch.log)?;
    let child = Command::new(agent)
        .arg0(EXECUTABLE)
        .arg(&dir)
        .arg(&log)
        .arg(super::logindex::index_path(&log))
        .arg(program)
        .arg("--")
        .arg(name)
        .args(args)
        .env_clear()
        .envs(launch.env)
        .current_dir(launch.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // The agent's own errors go where the supervisor's do.
        .stderr(Stdio::inherit())
        .spawn()?;
    let pid = Pid::from_child(&child);
    let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty())?;
    Ok((pid, pidfd))
}

/// The node's `PATH` (the last one set wins, as in the environment the
/// agent gets).
fn path_var(env: &[(String, String)]) -> Option<&str> {
    env.iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
}

/// The executable `name` names, searched in `path` as a shell does (with
/// the shell's default when unset; relative entries from `cwd`, where the
/// node runs); `name` itself when it has a slash or is not found (starting
/// it then fails, and the node's log says so).
pub fn resolve(name: &str, path: Option<&str>, cwd: &Path) -> PathBuf {
    if name.contains('/') {
        return PathBuf::from(name);
    }
    path.unwrap_or("/usr/local/bin:/usr/bin:/bin")
        .split(':')
        .map(|dir| cwd.join(if dir.is_empty() { "." } else { dir }).join(name))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
        .unwrap_or_else(|| PathBuf::from(name))
}

/// The exit status the agent in `dir` recorded, once it did.
pub fn read_exit(dir: &Path) -> Option<i32> {
    fs::read_to_string(dir.join(EXIT_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The agent recorded in `dir`, if it still runs: checked by its command
/// line, which names the directory, so a reused pid is not mistaken for it.
pub fn adopt(dir: &Path) -> Option<(Pid, OwnedFd)> {
    let pid: i32 = fs::read_to_string(dir.join(PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let pid = Pid::from_raw(pid)?;
    let pidfd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok()?;
    // Checked after the pidfd is open: from here the pid cannot be reused.
    let cmdline = fs::read(format!("/proc/{}/cmdline", pid.as_raw_nonzero())).ok()?;
    let dir = std::path::absolute(dir).ok()?;
    let needle = dir.as_os_str().as_encoded_bytes();
    let ours = cmdline.split(|&b| b == 0).any(|arg| arg == needle);
    ours.then_some((pid, pidfd))
}

/// Kills every process whose environment holds `entry` (`NAME=value`):
/// what a node started carries its marker.
pub fn kill_carrying(entry: &str) {
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let Some(pid) = e
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
            .and_then(Pid::from_raw)
        else {
            continue;
        };
        let Ok(environ) = fs::read(e.path().join("environ")) else {
            continue;
        };
        if environ
            .split(|&b| b == 0)
            .any(|var| var == entry.as_bytes())
        {
            let _ = rustix::process::kill_process(pid, Signal::KILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_searched_in_the_nodes_path() {
        let sh = resolve("sh", Some("/nonexistent:/bin:/usr/bin"), Path::new("/"));
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{sh:?}");
        assert_eq!(
            resolve("no-such-program-skyc", Some("/bin"), Path::new("/")),
            PathBuf::from("no-such-program-skyc")
        );
        assert_eq!(
            resolve("./run.sh", Some("/bin"), Path::new("/")),
            PathBuf::from("./run.sh")
        );
        let env = vec![
            ("PATH".to_owned(), "/a".to_owned()),
            ("PATH".to_owned(), "/b".to_owned()),
        ];
        assert_eq!(path_var(&env), Some("/b"));
    }

    #[test]
    fn a_missing_agent_is_an_error_that_names_it() {
        let err = executable(Path::new("/nonexistent/bin/skyc")).expect_err("missing");
        assert!(
            err.to_string()
                .contains("/nonexistent/bin/skyc-agent is missing"),
            "{err}"
        );
    }
}
