//! The data plane's commands, as data: what the runtime runs on a node
//! (over SSH, DESIGN.md "The AWS runtime") to deliver its `hosts` and
//! secrets and to read its files, and how the answers are read.
//!
//! Every remote script is fixed text; the only values in it are the
//! node's directory (the spec's `node_dir`), numbers the runtime formats
//! and secret names that are shell variable names, each quoted. Contents travel on standard input, answers as
//! base64 on one line each, so no byte of a file or a secret is ever
//! parsed by a shell.

use super::node::NodeFiles;
use base64::Engine as _;
use rustix::process::{Pid, Signal, kill_process};
use skyc_targets::slurm::{is_variable_name, quote};
use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

/// How much of the `status` file is read each time: its last lines say
/// where the node is.
pub const STATUS_TAIL_BYTES: u64 = 4096;

/// The most bytes of a log read in one call.
pub const LOG_CHUNK_BYTES: u64 = 1 << 20;

/// One command on a node: a script for `sudo sh -c`, and what to give it
/// on standard input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub script: String,
    pub stdin: Vec<u8>,
}

/// Writes the `hosts` file of the node directory `dir` atomically (the
/// agent may read it any time).
pub fn deliver_hosts(dir: &str, hosts: &str) -> Command {
    let tmp = quote(&format!("{dir}/hosts.tmp"));
    let path = quote(&format!("{dir}/hosts"));
    Command {
        script: format!("umask 077 && cat > {tmp} && mv -f {tmp} {path}"),
        stdin: hosts.as_bytes().to_vec(),
    }
}

/// Writes one secret's value (the file's bytes exactly), atomically;
/// `None` for a name that is not a variable name (the build refuses those).
pub fn deliver_secret(dir: &str, name: &str, value: &[u8]) -> Option<Command> {
    if !is_variable_name(name) {
        return None;
    }
    let secrets = quote(&format!("{dir}/secrets"));
    let path = quote(&format!("{dir}/secrets/{name}"));
    let tmp = quote(&format!("{dir}/secrets/.{name}.tmp"));
    Some(Command {
        // The directory may not be made yet: sshd can answer before the
        // boot script has run.
        script: format!("umask 077 && mkdir -p {secrets} && cat > {tmp} && mv -f {tmp} {path}"),
        stdin: value.to_vec(),
    })
}

/// Reads the node's state: the tail of `status` and both exit files, one
/// line each, `NAME BASE64` (a missing file has no line).
pub fn read_files(dir: &str) -> Command {
    Command {
        script: format!(
            "cd {} 2>/dev/null || exit 0\n\
             [ -e status ] && printf 'status %s\\n' \"$(tail -c {STATUS_TAIL_BYTES} status | base64 -w0)\"\n\
             for f in setup.exit run.exit; do\n  \
               [ -e \"$f\" ] && printf '%s %s\\n' \"$f\" \"$(base64 -w0 < \"$f\")\"\n\
             done\n\
             exit 0",
            quote(dir)
        ),
        stdin: Vec::new(),
    }
}

/// Parses what [`read_files`] printed.
pub fn parse_files(out: &str) -> NodeFiles {
    let mut files = NodeFiles::default();
    for line in out.lines() {
        let Some((name, data)) = line.split_once(' ') else {
            continue;
        };
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data.trim()) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes).into_owned();
        match name {
            "status" => files.status = text,
            "setup.exit" => files.setup_exit = Some(text),
            "run.exit" => files.run_exit = Some(text),
            _ => {}
        }
    }
    files
}

/// Which log a phase writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Log {
    Setup,
    Run,
}

impl Log {
    fn file(self) -> &'static str {
        match self {
            Log::Setup => "setup.log",
            Log::Run => "run.log",
        }
    }
}

/// Reads a log from byte `offset` (what the runtime has already), at most
/// [`LOG_CHUNK_BYTES`]: `SIZE BASE64`, the file's size then the bytes.
pub fn read_log(dir: &str, log: Log, offset: u64) -> Command {
    Command {
        script: format!(
            "f={path}\n\
             [ -e \"$f\" ] || {{ echo 0; exit 0; }}\n\
             printf '%s %s\\n' \"$(wc -c < \"$f\")\" \"$(tail -c +{start} \"$f\" | head -c {LOG_CHUNK_BYTES} | base64 -w0)\"",
            path = quote(&format!("{dir}/{}", log.file())),
            start = offset + 1,
        ),
        stdin: Vec::new(),
    }
}

/// What [`read_log`] printed: the file's size and the new bytes. A size
/// below the offset asked means the file is not the one read before.
pub fn parse_log(out: &str) -> Option<(u64, Vec<u8>)> {
    let line = out.lines().next()?;
    let (size, data) = line.split_once(' ').unwrap_or((line, ""));
    let size = size.trim().parse().ok()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .ok()?;
    Some((size, bytes))
}

/// How the runtime reaches nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ssh {
    /// The run's private key (in the group's directory, mode 0600).
    pub key: String,
    /// Where the run's `known_hosts` and connection sockets live (short:
    /// a socket's path holds at most 107 bytes).
    pub dir: String,
    /// The image's login user (`ubuntu` on the default images); commands
    /// run through `sudo` unless it is `root`.
    pub user: String,
    /// The SSH port, when not 22.
    pub port: Option<u16>,
}

/// Why a command on a node did not run to success.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RemoteError {
    /// `ssh` could not reach or log in to the node (its exit status 255).
    Unreachable(String),
    /// The command ran and failed.
    Failed { code: Option<i32>, stderr: String },
    /// No answer in time; `ssh` was killed.
    Timeout(Duration),
    /// `ssh` itself cannot run.
    Spawn(String),
}

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteError::Unreachable(why) => write!(f, "cannot reach the node: {why}"),
            RemoteError::Failed { code, stderr } => {
                write!(f, "a command on the node failed")?;
                if let Some(c) = code {
                    write!(f, " (exit {c})")?;
                }
                if !stderr.is_empty() {
                    write!(f, ": {stderr}")?;
                }
                Ok(())
            }
            RemoteError::Timeout(t) => write!(f, "no answer from the node in {} s", t.as_secs()),
            RemoteError::Spawn(why) => write!(f, "cannot run ssh: {why}"),
        }
    }
}

impl std::error::Error for RemoteError {}

impl Ssh {
    fn options(&self) -> Vec<String> {
        let dir = Path::new(&self.dir);
        let mut argv: Vec<String> = Vec::new();
        for (k, v) in [
            ("BatchMode", "yes".to_owned()),
            ("IdentitiesOnly", "yes".to_owned()),
            ("StrictHostKeyChecking", "accept-new".to_owned()),
            (
                "UserKnownHostsFile",
                dir.join("known_hosts").display().to_string(),
            ),
            ("ControlMaster", "auto".to_owned()),
            ("ControlPath", dir.join("cm-%C").display().to_string()),
            ("ControlPersist", "60".to_owned()),
            ("ConnectTimeout", "10".to_owned()),
            ("ServerAliveInterval", "5".to_owned()),
            ("ServerAliveCountMax", "3".to_owned()),
            ("LogLevel", "ERROR".to_owned()),
        ] {
            argv.push("-o".into());
            argv.push(format!("{k}={v}"));
        }
        if let Some(port) = self.port {
            argv.push("-p".into());
            argv.push(port.to_string());
        }
        argv.push("-i".into());
        argv.push(self.key.clone());
        argv
    }

    /// The `ssh` argument vector that runs `command` on the node at
    /// `address` as root. One multiplexed connection per node is kept
    /// for a minute after its last use; host keys are learnt on first
    /// contact into the run's own file (each instance is new).
    pub fn argv(&self, address: &str, command: &Command) -> Vec<String> {
        let mut argv: Vec<String> = vec!["ssh".into()];
        argv.extend(self.options());
        argv.push(format!("{}@{address}", self.user));
        argv.push("--".into());
        // ssh joins its arguments into one line for the remote shell:
        // one argument, quoted once for it.
        let sudo = if self.user == "root" { "" } else { "sudo -n " };
        argv.push(format!("{sudo}sh -c {}", quote(&command.script)));
        argv
    }

    /// Runs `command` on the node at `address`; its standard output.
    /// Blocks, at most `timeout` (then `ssh` is killed).
    pub fn run(
        &self,
        address: &str,
        command: &Command,
        timeout: Duration,
    ) -> Result<String, RemoteError> {
        let argv = self.argv(address, command);
        let mut child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| RemoteError::Spawn(e.to_string()))?;
        let stdin = child.stdin.take();
        let input = command.stdin.clone();
        // Written from a thread: a large input and a large output must
        // not wait for each other.
        let writer = std::thread::spawn(move || {
            if let Some(mut pipe) = stdin {
                let _ = pipe.write_all(&input);
            }
        });
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait_with_output()));
        let out = match rx.recv_timeout(timeout) {
            Ok(out) => out.map_err(|e| RemoteError::Spawn(e.to_string()))?,
            Err(_) => {
                if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
                    let _ = kill_process(pid, Signal::KILL);
                }
                let _ = rx.recv();
                let _ = writer.join();
                return Err(RemoteError::Timeout(timeout));
            }
        };
        let _ = writer.join();
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        match out.status.code() {
            Some(0) => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
            Some(255) => Err(RemoteError::Unreachable(stderr)),
            code => Err(RemoteError::Failed { code, stderr }),
        }
    }

    /// Ends the node's shared connection, if one is open.
    pub fn close(&self, address: &str) {
        let _ = std::process::Command::new("ssh")
            .args(self.options())
            .args(["-O", "exit", &format!("{}@{address}", self.user)])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a command's script as `sh -c` would on the node.
    fn run(command: &Command) -> String {
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(&command.script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&command.stdin)
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    }

    fn d(dir: &Path) -> String {
        dir.display().to_string()
    }

    fn node_dir(name: &str) -> std::path::PathBuf {
        // A space in the path: it must be quoted everywhere.
        let dir = std::env::temp_dir().join(format!("skyc remote-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("secrets")).unwrap();
        dir
    }

    #[test]
    fn files_are_read_whatever_they_hold() {
        let dir = node_dir("read");
        assert_eq!(
            parse_files(&run(&read_files(&d(&dir)))),
            NodeFiles::default()
        );
        let hostile = "1.0 agent start\n2.0 setup start $(touch x) `y` '\"\n";
        std::fs::write(dir.join("status"), hostile).unwrap();
        std::fs::write(dir.join("setup.exit"), "0\n").unwrap();
        let files = parse_files(&run(&read_files(&d(&dir))));
        assert_eq!(files.status, hostile);
        assert_eq!(files.setup_exit.as_deref(), Some("0\n"));
        assert_eq!(files.run_exit, None);
        assert!(!dir.join("x").exists());
        // Only the tail of a long status file.
        let long = "9.0 run start\n".repeat(1000);
        std::fs::write(dir.join("status"), &long).unwrap();
        let files = parse_files(&run(&read_files(&d(&dir))));
        assert_eq!(files.status.len() as u64, STATUS_TAIL_BYTES);
        assert!(long.ends_with(&files.status));
    }

    #[test]
    fn hosts_and_secrets_are_delivered_byte_for_byte() {
        let dir = node_dir("deliver");
        run(&deliver_hosts(&d(&dir), "10.0.0.1 a-0.g\n"));
        assert_eq!(
            std::fs::read_to_string(dir.join("hosts")).unwrap(),
            "10.0.0.1 a-0.g\n"
        );
        let value = b"p@ss 'word' $(rm -rf /) \n\0tail";
        run(&deliver_secret(&d(&dir), "TOKEN", value).unwrap());
        assert_eq!(std::fs::read(dir.join("secrets/TOKEN")).unwrap(), value);
        assert_eq!(deliver_secret("/x", "../etc/passwd", b"x"), None);
        assert_eq!(deliver_secret("/x", "A B", b"x"), None);
    }

    #[test]
    fn logs_are_read_from_an_offset() {
        let dir = node_dir("log");
        assert_eq!(
            parse_log(&run(&read_log(&d(&dir), Log::Run, 0))),
            Some((0, vec![]))
        );
        std::fs::write(dir.join("run.log"), b"line 1\nline 2\n").unwrap();
        assert_eq!(
            parse_log(&run(&read_log(&d(&dir), Log::Run, 0))),
            Some((14, b"line 1\nline 2\n".to_vec()))
        );
        assert_eq!(
            parse_log(&run(&read_log(&d(&dir), Log::Run, 7))),
            Some((14, b"line 2\n".to_vec()))
        );
        assert_eq!(
            parse_log(&run(&read_log(&d(&dir), Log::Run, 14))),
            Some((14, vec![]))
        );
        assert_eq!(parse_log("garbage"), None);
    }

    #[test]
    fn ssh_runs_one_quoted_command_as_root() {
        let ssh = Ssh {
            key: "/s/key".into(),
            dir: "/s".into(),
            user: "ubuntu".into(),
            port: None,
        };
        let argv = ssh.argv("10.0.0.5", &deliver_hosts("/var/lib/skyc", ""));
        assert_eq!(argv[0], "ssh");
        assert!(argv.contains(&"StrictHostKeyChecking=accept-new".to_owned()));
        assert!(argv.contains(&"UserKnownHostsFile=/s/known_hosts".to_owned()));
        let at = argv.iter().position(|a| a == "--").unwrap();
        assert_eq!(argv[at - 1], "ubuntu@10.0.0.5");
        assert_eq!(argv.len(), at + 2);
        // The remote shell, given that line, runs exactly the script.
        let line = &argv[at + 1];
        let printed = std::process::Command::new("sh")
            .arg("-c")
            .arg(line.replacen("sudo -n sh -c", "printf %s", 1))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8(printed.stdout).unwrap(),
            deliver_hosts("/var/lib/skyc", "").script
        );
    }
}
