//! The data plane's commands over real SSH: OpenSSH's client against a
//! private sshd on loopback (its own host key, port, authorized key and
//! config; as root, so commands run without sudo), with a node directory
//! in a temporary directory. scripts/test installs openssh-server when
//! missing and sets SKYC_SSHD_REQUIRED=1; without sshd these tests skip,
//! loudly.

use crate::cloud::data::node::{Outcome, outcome};
use crate::cloud::data::remote::{
    RemoteError, Ssh, deliver_hosts, deliver_secret, parse_node, read_node,
};
use crate::policy::Phase;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SSHD: &str = "/usr/sbin/sshd";

/// A private sshd, stopped (by its pid) when dropped.
struct Sshd {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn keygen(path: &Path) {
    let ok = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .status()
        .unwrap()
        .success();
    assert!(ok, "ssh-keygen failed");
}

/// Starts a private sshd, or `None` (after a loud message) when there is
/// none and none is required.
fn sshd(name: &str) -> Option<Sshd> {
    sshd_on(name, None)
}

/// [`sshd`] on `port`, when given.
fn sshd_on(name: &str, port: Option<u16>) -> Option<Sshd> {
    let root = rustix::process::geteuid().is_root();
    if !Path::new(SSHD).exists() || !root {
        assert!(
            std::env::var_os("SKYC_SSHD_REQUIRED").is_none(),
            "SKYC_SSHD_REQUIRED is set but {SSHD} is missing or this is not root"
        );
        eprintln!(
            "!!! SKIPPED: no sshd (or not root); scripts/test installs openssh-server as root"
        );
        return None;
    }
    // Short: the connection sockets live here (107 bytes at most).
    let dir = PathBuf::from(format!("/tmp/skyc-ssh-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    keygen(&dir.join("host"));
    keygen(&dir.join("key"));
    std::fs::copy(dir.join("key.pub"), dir.join("authorized_keys")).unwrap();
    let port = port.unwrap_or_else(|| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    });
    let config = format!(
        "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host\nAuthorizedKeysFile {d}/authorized_keys\n\
         PidFile {d}/sshd.pid\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n\
         KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n",
        d = dir.display()
    );
    std::fs::write(dir.join("sshd_config"), config).unwrap();
    // sshd's privilege separation directory.
    std::fs::create_dir_all("/run/sshd").unwrap();
    let child = Command::new(SSHD)
        .args(["-D", "-e", "-f"])
        .arg(dir.join("sshd_config"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("sshd.log")).unwrap())
        .spawn()
        .unwrap();
    let sshd = Sshd { child, dir, port };
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "sshd did not listen: {}",
            std::fs::read_to_string(sshd.dir.join("sshd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(sshd)
}

fn client(sshd: &Sshd) -> Ssh {
    Ssh {
        key: sshd.dir.join("key").display().to_string(),
        dir: sshd.dir.display().to_string(),
        user: "root".into(),
        port: Some(sshd.port),
    }
}

const T: Duration = Duration::from_secs(20);

/// The instance the private sshd stands for.
const ID: &str = "i-0123456789abcdef0";

#[test]
fn a_nodes_files_travel_over_ssh() {
    let Some(sshd) = sshd("files") else { return };
    let ssh = client(&sshd);
    // The node's directory, with a space in its path.
    let node = sshd.dir.join("node dir");
    std::fs::create_dir_all(node.join("secrets")).unwrap();
    let nd = node.display().to_string();
    let at = "127.0.0.1";

    ssh.run(
        ID,
        at,
        &deliver_hosts(&nd, "10.0.0.1 a-0.g\n10.0.0.2 a-1.g\n"),
        T,
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(node.join("hosts")).unwrap(),
        "10.0.0.1 a-0.g\n10.0.0.2 a-1.g\n"
    );
    let secret = b"s3cr3t 'quoted' $(touch /tmp/skyc-canary) \n\0end";
    ssh.run(ID, at, &deliver_secret(&nd, "TOKEN", secret).unwrap(), T)
        .unwrap();
    assert_eq!(std::fs::read(node.join("secrets/TOKEN")).unwrap(), secret);
    assert!(!Path::new("/tmp/skyc-canary").exists());

    // The agent's records, as it writes them.
    std::fs::write(
        node.join("status"),
        "1.0 agent start\n2.0 setup start\n3.0 setup exit 0\n3.1 run start\n",
    )
    .unwrap();
    std::fs::write(node.join("setup.exit"), "0\n").unwrap();
    let read = |offsets| parse_node(&ssh.run(ID, at, &read_node(&nd, offsets), T).unwrap());
    let files = read([0, 0]).files;
    assert_eq!(outcome(&files), Outcome::Running(Phase::Run));
    std::fs::write(node.join("run.exit"), "42\n").unwrap();
    let files = read([0, 0]).files;
    assert_eq!(
        outcome(&files),
        Outcome::Exited {
            phase: Phase::Run,
            code: 42
        }
    );

    // Logs, from where the runtime left off; binary output intact.
    let log: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    std::fs::write(node.join("run.log"), &log).unwrap();
    let [_, run] = read([0, 0]).logs;
    let (size, first) = run.unwrap();
    assert_eq!((size, first.as_slice()), (70_000, log.as_slice()));
    let [_, run] = read([0, 69_990]).logs;
    assert_eq!(run.unwrap().1, &log[69_990..]);

    ssh.close(ID, at);
}

#[test]
fn failures_say_what_failed() {
    let Some(sshd) = sshd("fail") else { return };
    let ssh = client(&sshd);
    let at = "127.0.0.1";
    // A node directory that does not exist: writing there fails.
    let e = ssh
        .run(ID, at, &deliver_hosts("/nonexistent/skyc", "x\n"), T)
        .unwrap_err();
    assert!(
        matches!(e, RemoteError::Failed { code: Some(_), .. }),
        "{e:?}"
    );
    // Reading one is nothing yet, not an error.
    assert_eq!(
        ssh.run(ID, at, &read_node("/nonexistent/skyc", [0, 0]), T)
            .unwrap(),
        ""
    );
    ssh.close(ID, at);
    // Nothing listens: unreachable, not a failed command.
    let mut off = client(&sshd);
    off.port = Some(
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port(),
    );
    let e = off.run(ID, at, &read_node("/x", [0, 0]), T).unwrap_err();
    assert!(matches!(e, RemoteError::Unreachable(_)), "{e:?}");
    // A key the node does not know: unreachable too (no login).
    let mut stranger = client(&sshd);
    keygen(&sshd.dir.join("other"));
    stranger.key = sshd.dir.join("other").display().to_string();
    stranger.dir = sshd.dir.join("s2").display().to_string();
    std::fs::create_dir_all(&stranger.dir).unwrap();
    let e = stranger
        .run(ID, at, &read_node("/x", [0, 0]), T)
        .unwrap_err();
    assert!(matches!(e, RemoteError::Unreachable(_)), "{e:?}");
}

#[test]
fn an_address_given_to_a_new_instance_is_a_new_host() {
    let Some(first) = sshd("reuse-a") else { return };
    let mut ssh = client(&first);
    // The run's own directory for known hosts and sockets, kept across
    // both machines as the runtime keeps it.
    let run = PathBuf::from(format!("/tmp/skyc-ssh-reuse-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&run);
    std::fs::create_dir_all(&run).unwrap();
    ssh.dir = run.display().to_string();
    let at = "127.0.0.1";
    let echo = |ssh: &Ssh, id: &str| {
        ssh.run(
            id,
            at,
            &crate::cloud::data::remote::Command {
                script: "echo here".into(),
                stdin: Vec::new(),
            },
            T,
        )
    };
    assert_eq!(echo(&ssh, "i-000000000000000a1").unwrap(), "here\n");
    ssh.close("i-000000000000000a1", at);
    // The instance is gone; a new one has its address (and port) and,
    // being a new machine, another host key.
    let port = first.port;
    drop(first);
    let second = sshd_on("reuse-b", Some(port)).unwrap();
    ssh.key = second.dir.join("key").display().to_string();
    assert_eq!(echo(&ssh, "i-000000000000000b2").unwrap(), "here\n");
    ssh.close("i-000000000000000b2", at);
    // The first instance's key is still what its id is known by.
    assert!(matches!(
        echo(&ssh, "i-000000000000000a1"),
        Err(RemoteError::Unreachable(_))
    ));
    let _ = std::fs::remove_dir_all(&run);
}
