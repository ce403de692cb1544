//! The data plane's commands, as data: what the runtime runs on a node
//! (over SSH, docs/targets/cloud.md, "Inside the AWS runtime") to deliver its `hosts` and
//! secrets and to read its files, and how the answers are read.
//!
//! Every remote script is fixed text; the only values in it are the
//! node's directory (the spec's `node_dir`), numbers the runtime formats
//! and secret names that are shell variable names, each quoted. Contents travel on standard input, answers as
//! base64 on one line each, so no byte of a file or a secret is ever
//! parsed by a shell.

use crate::cloud::data::node::NodeFiles;
use base64::Engine as _;
use rustix::process::{Pid, Signal, kill_process};
use skyc_targets::shell::{is_variable_name, quote, single_quoted};
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

/// Writes the credentials a node's buckets are mounted with
/// (`aws/credentials.json`, what the AWS configuration's
/// `credential_process` prints), atomically, readable by root alone.
pub fn deliver_credentials(dir: &str, json: &str) -> Command {
    let aws = quote(&format!("{dir}/aws"));
    let path = quote(&format!("{dir}/aws/credentials.json"));
    let tmp = quote(&format!("{dir}/aws/.credentials.json.tmp"));
    Command {
        script: format!("umask 077 && mkdir -p {aws} && cat > {tmp} && mv -f {tmp} {path}"),
        stdin: json.as_bytes().to_vec(),
    }
}

/// Writes a node's `mounts.sh` (what mounts its task's buckets),
/// atomically.
pub fn deliver_mounts(dir: &str, script: &str) -> Command {
    let path = quote(&format!("{dir}/mounts.sh"));
    let tmp = quote(&format!("{dir}/.mounts.sh.tmp"));
    let dir = quote(dir);
    Command {
        script: format!("umask 077 && mkdir -p {dir} && cat > {tmp} && mv -f {tmp} {path}"),
        stdin: script.as_bytes().to_vec(),
    }
}

/// Writes where each of a task's snapshots is fetched from
/// (`files/DIGEST.url`, one line), each atomically: the URLs come on
/// standard input, one a line, in the order given. `None` when there are
/// none, or a digest is not a hex digest (the runtime makes them).
pub fn deliver_file_urls(dir: &str, urls: &[(String, String)]) -> Option<Command> {
    let hex = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_hexdigit());
    if urls.is_empty()
        || urls
            .iter()
            .any(|(d, u)| !hex(d) || u.contains(['\n', '\r', '\0']))
    {
        return None;
    }
    let files = quote(&format!("{dir}/files"));
    let mut script = format!("umask 077 && mkdir -p {files}");
    let mut stdin = Vec::new();
    for (digest, url) in urls {
        let tmp = quote(&format!("{dir}/files/.{digest}.url.tmp"));
        let path = quote(&format!("{dir}/files/{digest}.url"));
        script.push_str(&format!(
            " && IFS= read -r u && printf '%s\\n' \"$u\" > {tmp} && mv -f {tmp} {path}"
        ));
        stdin.extend_from_slice(url.as_bytes());
        stdin.push(b'\n');
    }
    Some(Command { script, stdin })
}

/// The logs a node's phases write, in the order they are read.
pub const LOGS: [&str; 2] = ["setup.log", "run.log"];

/// Reads the node's state in one call: the tail of `status`, both exit
/// files, then each of [`LOGS`] from its byte `offsets` (what the runtime
/// has already), at most [`LOG_CHUNK_BYTES`] of each. One line each,
/// `NAME BASE64` for a file, `NAME SIZE BASE64` for a log; a missing file
/// has no line. The exits are read before the logs, so the logs read
/// with an exit hold everything the phase wrote.
pub fn read_node(dir: &str, offsets: [u64; 2]) -> Command {
    Command {
        script: format!(
            "cd {} 2>/dev/null || exit 0\n\
             [ -e status ] && printf 'status %s\\n' \"$(tail -c {STATUS_TAIL_BYTES} status | base64 -w0)\"\n\
             for f in setup.exit run.exit; do\n  \
               [ -e \"$f\" ] && printf '%s %s\\n' \"$f\" \"$(base64 -w0 < \"$f\")\"\n\
             done\n\
             chunk() {{\n  \
               [ -e \"$1\" ] || return 0\n  \
               printf '%s %s %s\\n' \"$1\" \"$(wc -c < \"$1\")\" \"$(tail -c +\"$2\" \"$1\" | head -c {LOG_CHUNK_BYTES} | base64 -w0)\"\n\
             }}\n\
             chunk {} {}\n\
             chunk {} {}\n\
             exit 0",
            quote(dir),
            LOGS[0],
            offsets[0] + 1,
            LOGS[1],
            offsets[1] + 1,
        ),
        stdin: Vec::new(),
    }
}

/// What [`read_node`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeRead {
    pub files: NodeFiles,
    /// Per log of [`LOGS`]: its size and the bytes from the offset asked;
    /// `None` when the file is not there yet.
    pub logs: [Option<(u64, Vec<u8>)>; 2],
}

/// Parses what [`read_node`] printed; lines it cannot read are left out.
pub fn parse_node(out: &str) -> NodeRead {
    let b64 = |data: Option<&str>| {
        base64::engine::general_purpose::STANDARD
            .decode(data.unwrap_or("").trim())
            .ok()
    };
    let mut read = NodeRead::default();
    for line in out.lines() {
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else {
            continue;
        };
        if let Some(i) = LOGS.iter().position(|l| *l == name) {
            let size = words.next().and_then(|w| w.parse().ok());
            if let (Some(size), Some(bytes)) = (size, b64(words.next())) {
                read.logs[i] = Some((size, bytes));
            }
            continue;
        }
        let Some(bytes) = b64(words.next()) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes).into_owned();
        match name {
            "status" => read.files.status = text,
            "setup.exit" => read.files.setup_exit = Some(text),
            "run.exit" => read.files.run_exit = Some(text),
            _ => {}
        }
    }
    read
}

/// Whether `name` can name a job's directory on a node: the runtime's
/// own `{job}-{attempt}`, digits and `-`.
pub fn is_job_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit() || b == b'-')
}

/// Hands a pool job's node its script on a worker's node (`dir`, the
/// node directory): `jobs/{name}/` with `job.sh` (from standard input),
/// `grace`, and `stop` when it is stopped already, moved into place whole
/// so the agent never sees half of it; nothing when it is there already
/// (the agent starts it once). `None` for a name not [`is_job_name`].
pub fn deliver_job(
    dir: &str,
    name: &str,
    grace_secs: u64,
    stop: bool,
    script: &str,
) -> Option<Command> {
    if !is_job_name(name) {
        return None;
    }
    let stop = if stop { " && : > {tmp}/stop" } else { "" };
    let jobs = quote(&format!("{dir}/jobs"));
    let tmp = quote(&format!("{dir}/jobs/.{name}.tmp"));
    let path = quote(&format!("{dir}/jobs/{name}"));
    Some(Command {
        script: format!(
            "[ -e {path} ] && {{ cat > /dev/null; exit 0; }}\n\
             umask 077 && mkdir -p {jobs} && rm -rf {tmp} && mkdir {tmp} && \
             cat > {tmp}/job.sh && echo {grace_secs} > {tmp}/grace{stop} && mv -T {tmp} {path}",
            stop = stop.replace("{tmp}", &tmp),
        ),
        stdin: script.as_bytes().to_vec(),
    })
}

/// Asks the agent to end a pool job's node (`jobs/{name}/stop`), if it
/// was handed over.
pub fn stop_job(dir: &str, name: &str) -> Command {
    let path = quote(&format!("{dir}/jobs/{name}"));
    Command {
        script: format!(
            "[ -d {path} ] || exit 0
: > {path}/stop"
        ),
        stdin: Vec::new(),
    }
}

/// Removes a closed job's directory from a worker's node.
pub fn remove_job(dir: &str, name: &str) -> Command {
    Command {
        script: format!("rm -rf {}", quote(&format!("{dir}/jobs/{name}"))),
        stdin: Vec::new(),
    }
}

/// Reads a pool job's node on its worker: whether it was handed over
/// (`job`), started, its exit, and its log from `offset` (a chunk at
/// most), in [`read_node`]'s line format.
pub fn read_job(dir: &str, name: &str, offset: u64) -> Command {
    Command {
        script: format!(
            "cd {} 2>/dev/null || exit 0
             [ -e job.sh ] && echo job
             [ -e started ] && echo started
             [ -e run.exit ] && printf 'run.exit %s\n' \"$(base64 -w0 < run.exit)\"
             [ -e run.log ] && printf 'run.log %s %s\n' \"$(wc -c < run.log)\" \"$(tail -c +{} run.log | head -c {LOG_CHUNK_BYTES} | base64 -w0)\"
             exit 0",
            quote(&format!("{dir}/jobs/{name}")),
            offset + 1,
        ),
        stdin: Vec::new(),
    }
}

/// What [`read_job`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobRead {
    pub handed: bool,
    pub started: bool,
    pub exit: Option<i32>,
    /// The log's size and the bytes from the offset asked.
    pub log: Option<(u64, Vec<u8>)>,
}

/// Parses what [`read_job`] printed.
pub fn parse_job(out: &str) -> JobRead {
    let b64 = |data: Option<&str>| {
        base64::engine::general_purpose::STANDARD
            .decode(data.unwrap_or("").trim())
            .ok()
    };
    let mut read = JobRead::default();
    for line in out.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("job") => read.handed = true,
            Some("started") => read.started = true,
            Some("run.exit") => {
                read.exit =
                    b64(words.next()).and_then(|b| String::from_utf8_lossy(&b).trim().parse().ok());
            }
            Some("run.log") => {
                let size = words.next().and_then(|w| w.parse().ok());
                if let (Some(size), Some(bytes)) = (size, b64(words.next())) {
                    read.log = Some((size, bytes));
                }
            }
            _ => {}
        }
    }
    read
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
    /// The options for the node that is instance `id`: its host key and
    /// shared connection are the instance's, not its address's, since
    /// EC2 gives a terminated instance's address to new ones.
    fn options(&self, id: &str) -> Vec<String> {
        let dir = Path::new(&self.dir);
        // Instance ids are `i-` and hex; anything else is left out.
        let id: String = id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(40)
            .collect();
        let mut argv: Vec<String> = Vec::new();
        for (k, v) in [
            ("BatchMode", "yes".to_owned()),
            ("IdentitiesOnly", "yes".to_owned()),
            ("StrictHostKeyChecking", "accept-new".to_owned()),
            (
                "UserKnownHostsFile",
                dir.join("known_hosts").display().to_string(),
            ),
            ("HostKeyAlias", format!("skyc-{id}")),
            ("ControlMaster", "auto".to_owned()),
            (
                "ControlPath",
                dir.join(format!("cm-{id}")).display().to_string(),
            ),
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

    /// The `ssh` argument vector that runs `command` as root on the node
    /// that is instance `id`, at `address`. One multiplexed connection
    /// per instance is kept for a minute after its last use; host keys
    /// are learnt on first contact into the run's own file (each
    /// instance is new), under the instance's id.
    pub fn argv(&self, id: &str, address: &str, command: &Command) -> Vec<String> {
        let mut argv: Vec<String> = vec!["ssh".into()];
        argv.extend(self.options(id));
        // The user as an option's argument and the address after `--`:
        // neither is ever read as an option, whatever it holds.
        argv.extend(["-l".into(), self.user.clone(), "--".into(), address.into()]);
        // ssh joins its arguments into one line for the remote shell:
        // one argument, quoted once for it, in single quotes whatever it
        // holds (newlines too), which every POSIX login shell reads.
        let sudo = if self.user == "root" { "" } else { "sudo -n " };
        argv.push(format!("{sudo}sh -c {}", single_quoted(&command.script)));
        argv
    }

    /// Runs `command` on the node that is instance `id`, at `address`;
    /// its standard output. Blocks, at most `timeout` (then `ssh` is
    /// killed).
    pub fn run(
        &self,
        id: &str,
        address: &str,
        command: &Command,
        timeout: Duration,
    ) -> Result<String, RemoteError> {
        let argv = self.argv(id, address, command);
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

    /// Ends the shared connection to instance `id`, if one is open.
    pub fn close(&self, id: &str, address: &str) {
        let _ = std::process::Command::new("ssh")
            .args(self.options(id))
            .args(["-O", "exit", "-l", &self.user, "--", address])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A directory for `known_hosts` and SSH connection sockets of what
/// `group_dir` runs (a group's, a controller's): its own `ssh` when its
/// path is short enough for a socket's (107 bytes, with `cm-` and 64 hex
/// digits), else one under the temporary directory, private to this
/// user, named after it.
pub fn ssh_dir(group_dir: &Path) -> std::io::Result<std::path::PathBuf> {
    let own = group_dir.join("ssh");
    let dir = if own.as_os_str().len() <= 36 {
        std::fs::create_dir_all(group_dir)?;
        own
    } else {
        use std::os::unix::ffi::OsStrExt as _;
        let uid = rustix::process::getuid().as_raw();
        let hash = ring::digest::digest(&ring::digest::SHA256, group_dir.as_os_str().as_bytes());
        let hex = crate::aws::ec2::sigv4::hex(hash.as_ref());
        std::env::temp_dir().join(format!("skyc-ssh-{uid}-{}", &hex[..16]))
    };
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    if !meta.is_dir() || meta.uid() != rustix::process::getuid().as_raw() {
        return Err(std::io::Error::other(format!(
            "{} is not this user's directory",
            dir.display()
        )));
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
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
        let read = |dir: &Path| parse_node(&run(&read_node(&d(dir), [0, 0])));
        assert_eq!(read(&dir), NodeRead::default());
        let hostile = "1.0 agent start\n2.0 setup start $(touch x) `y` '\"\n";
        std::fs::write(dir.join("status"), hostile).unwrap();
        std::fs::write(dir.join("setup.exit"), "0\n").unwrap();
        let files = read(&dir).files;
        assert_eq!(files.status, hostile);
        assert_eq!(files.setup_exit.as_deref(), Some("0\n"));
        assert_eq!(files.run_exit, None);
        assert!(!dir.join("x").exists());
        // Only the tail of a long status file.
        let long = "9.0 run start\n".repeat(1000);
        std::fs::write(dir.join("status"), &long).unwrap();
        let files = read(&dir).files;
        assert_eq!(files.status.len() as u64, STATUS_TAIL_BYTES);
        assert!(long.ends_with(&files.status));
        // No directory yet: nothing, not an error.
        assert_eq!(read(&dir.join("none")), NodeRead::default());
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
    fn file_urls_are_delivered_each_on_its_line() {
        let dir = node_dir("urls");
        let urls = vec![
            (
                "ab12".to_owned(),
                "https://b.s3.x/ab12.tar?X-Amz-Signature=1&a=$(touch x)".to_owned(),
            ),
            (
                "cd34".to_owned(),
                "http://169.254.77.1:5000/b/cd34.tar?q='\"".to_owned(),
            ),
        ];
        run(&deliver_file_urls(&d(&dir), &urls).unwrap());
        for (digest, url) in &urls {
            assert_eq!(
                std::fs::read_to_string(dir.join(format!("files/{digest}.url"))).unwrap(),
                format!("{url}\n")
            );
        }
        assert!(!dir.join("x").exists());
        assert_eq!(deliver_file_urls("/x", &[]), None);
        let bad = |d: &str, u: &str| deliver_file_urls("/x", &[(d.to_owned(), u.to_owned())]);
        assert_eq!(bad("../etc", "u"), None);
        assert_eq!(bad("ab", "u\nv"), None);
    }

    #[test]
    fn logs_are_read_from_an_offset() {
        let dir = node_dir("log");
        let read = |offsets| parse_node(&run(&read_node(&d(&dir), offsets))).logs;
        assert_eq!(read([0, 0]), [None, None]);
        std::fs::write(dir.join("setup.log"), b"").unwrap();
        std::fs::write(dir.join("run.log"), b"line 1\nline 2\n").unwrap();
        assert_eq!(
            read([0, 0]),
            [Some((0, vec![])), Some((14, b"line 1\nline 2\n".to_vec()))]
        );
        assert_eq!(read([0, 7])[1], Some((14, b"line 2\n".to_vec())));
        assert_eq!(read([0, 14])[1], Some((14, vec![])));
        // At most a chunk a call.
        let big = vec![b'x'; LOG_CHUNK_BYTES as usize + 10];
        std::fs::write(dir.join("setup.log"), &big).unwrap();
        let [setup, _] = read([5, 0]);
        let (size, bytes) = setup.unwrap();
        assert_eq!(
            (size, bytes.len() as u64),
            (big.len() as u64, LOG_CHUNK_BYTES)
        );
        assert_eq!(parse_node("garbage\nrun.log x y\n"), NodeRead::default());
    }

    #[test]
    fn ssh_runs_one_quoted_command_as_root() {
        let ssh = Ssh {
            key: "/s/key".into(),
            dir: "/s".into(),
            user: "ubuntu".into(),
            port: None,
        };
        let argv = ssh.argv("i-0abc", "10.0.0.5", &deliver_hosts("/var/lib/skyc", ""));
        assert!(argv.contains(&"HostKeyAlias=skyc-i-0abc".to_owned()));
        assert!(argv.contains(&"ControlPath=/s/cm-i-0abc".to_owned()));
        assert_eq!(argv[0], "ssh");
        assert!(argv.contains(&"StrictHostKeyChecking=accept-new".to_owned()));
        assert!(argv.contains(&"UserKnownHostsFile=/s/known_hosts".to_owned()));
        let at = argv.iter().position(|a| a == "--").unwrap();
        assert_eq!(argv[at - 2..at], ["-l", "ubuntu"]);
        assert_eq!(argv[at + 1], "10.0.0.5");
        assert_eq!(argv.len(), at + 3);
        // The remote shell, given that line, runs exactly the script.
        // The remote shell, given that line, runs exactly the script,
        // newlines and quotes included, with no `$'…'` quoting (which
        // dash, a common /bin/sh, does not read).
        let line = &argv[at + 2];
        let printed = std::process::Command::new("sh")
            .arg("-c")
            .arg(line.replacen("sudo -n sh -c", "printf %s", 1))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8(printed.stdout).unwrap(),
            deliver_hosts("/var/lib/skyc", "").script
        );
        let read = read_node("/var/lib/it's", [0, 0]);
        assert!(read.script.contains('\n'));
        let line = ssh.argv("i-0abc", "10.0.0.5", &read).pop().unwrap();
        assert!(!line.contains("$'"), "{line}");
        let printed = std::process::Command::new("sh")
            .arg("-c")
            .arg(line.replacen("sudo -n sh -c", "printf %s", 1))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(printed.stdout).unwrap(), read.script);
    }
}
