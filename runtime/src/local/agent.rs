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
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// The agent's executable's name (its `argv[0]`).
pub const EXECUTABLE: &str = "skyc-agent";

/// The agent's executable, built with the runtime (runtime/build.rs).
const IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/skyc-agent"));

/// Names this build of the agent, so that skyc builds sharing a state
/// directory each run their own.
const DIGEST: &str = env!("SKYC_AGENT_DIGEST");

/// SIGTERM is passed on; SIGUSR1 asks for SIGKILL (a SIGKILL sent to the
/// agent itself would lose the exit status).
pub const KILL_REQUEST: Signal = Signal::USR1;

/// ETXTBSY.
const TEXT_BUSY: i32 = rustix::io::Errno::TXTBSY.raw_os_error();

const PID_FILE: &str = "agent.pid";
const EXIT_FILE: &str = "exit";

/// Where this skyc's agents run from: `bin/skyc-agent-DIGEST` in the state
/// directory, written there when missing, not this build's or not
/// executable, atomically (a new file renamed into place), so agents
/// already running keep theirs.
pub fn install(state_dir: &Path) -> io::Result<PathBuf> {
    static TEMPORARY: AtomicU64 = AtomicU64::new(0);
    let dir = std::path::absolute(state_dir.join("bin"))?;
    let path = dir.join(format!("{EXECUTABLE}-{DIGEST}"));
    let installed = fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o100 != 0)
        && fs::read(&path).is_ok_and(|bytes| bytes == IMAGE);
    if installed {
        return Ok(path);
    }
    let n = TEMPORARY.fetch_add(1, Ordering::Relaxed);
    let temporary = dir.join(format!(".{EXECUTABLE}-{DIGEST}.{}.{n}", std::process::id()));
    let written = (|| {
        fs::create_dir_all(&dir)?;
        refuse_noexec(&dir)?;
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .open(&temporary)?;
        // Whatever the umask took away.
        file.set_permissions(fs::Permissions::from_mode(0o755))?;
        file.write_all(IMAGE)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temporary, &path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&temporary);
        return Err(io::Error::new(
            e.kind(),
            format!(
                "cannot install skyc's node agent as {}: {e}",
                path.display()
            ),
        ));
    }
    Ok(path)
}

/// A filesystem mounted `noexec` runs no agent: said at once, with the
/// way out, rather than as every node's start failing with EACCES.
fn refuse_noexec(dir: &Path) -> io::Result<()> {
    let flags = rustix::fs::statvfs(dir)?.f_flag;
    if flags.contains(rustix::fs::StatVfsMountFlags::NOEXEC) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "its filesystem is mounted noexec; use a state directory on another \
             (--state-dir, or SKYC_STATE_DIR)",
        ));
    }
    Ok(())
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
    let mut command = Command::new(agent);
    command
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
        .stderr(Stdio::inherit());
    let mut busy = 0;
    let child = loop {
        match command.spawn() {
            // A child forked while the agent's file was still open for
            // writing (its install) holds it so until that child execs:
            // a moment.
            Err(e) if e.raw_os_error() == Some(TEXT_BUSY) && busy < 50 => {
                busy += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            // A filesystem remounted noexec since the install: said so.
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                if let Some(Err(noexec)) = agent.parent().map(refuse_noexec) {
                    return Err(io::Error::new(
                        noexec.kind(),
                        format!("cannot run skyc's node agent {}: {noexec}", agent.display()),
                    ));
                }
                return Err(e);
            }
            other => break other?,
        }
    };
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
    fn the_agent_is_installed_once_and_a_damaged_one_replaced() {
        let state = Scratch::new("installed");
        let path = install(state.path()).expect("installed");
        assert_eq!(path, state.path().join(format!("bin/skyc-agent-{DIGEST}")));
        assert_eq!(fs::read(&path).unwrap(), IMAGE);
        assert_ne!(fs::metadata(&path).unwrap().permissions().mode() & 0o111, 0);
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).unwrap());
        let first = inode(&path);
        assert_eq!(install(state.path()).unwrap(), path);
        assert_eq!(inode(&path), first, "an intact agent is left as it is");

        fs::write(&path, &IMAGE[..IMAGE.len() / 2]).unwrap();
        assert_eq!(install(state.path()).unwrap(), path);
        assert_eq!(fs::read(&path).unwrap(), IMAGE);
        // One that can no longer be run is replaced too.
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(install(state.path()).unwrap(), path);
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o755
        );
        let left: Vec<_> = fs::read_dir(state.path().join("bin")).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left: {left:?}");
    }

    #[test]
    fn an_agent_that_cannot_be_installed_is_an_error_that_names_it() {
        let state = Scratch::new("not-installed");
        // `bin` cannot be a directory: a file stands in its place.
        fs::write(state.path().join("bin"), "").unwrap();
        let err = install(state.path()).expect_err("no directory");
        let bin = state.path().join("bin");
        assert!(
            err.to_string().starts_with(&format!(
                "cannot install skyc's node agent as {}/skyc-agent-",
                bin.display()
            )),
            "{err}"
        );
    }

    /// A directory of a test's own, removed after it.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("skyc-agent-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}
