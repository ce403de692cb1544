//! Where node agents are started from: a small helper process
//! (`skyc __spawn`) that starts each agent and hands its pidfd back over a
//! Unix socket (`SCM_RIGHTS`).
//!
//! Why not the supervisor itself: it holds a pidfd for every running node
//! (10,000 at 2,000 five-node groups), and the kernel copies that whole
//! descriptor table into every child it starts, then closes it again at
//! `exec`, one descriptor at a time. The helper, started while the table
//! is small, holds only its socket, so starting a node costs the same
//! whatever runs.
//!
//! The helper is the supervisor's child, started on first use. It reaps
//! the agents it started (they are its children; the supervisor learns of
//! an exit from the pidfd and the agent's status file, as for an agent
//! adopted after a restart), and exits when the supervisor's end of the
//! socket closes. A helper that died before it was asked is replaced. One
//! that took a request and gave no answer is killed, and so is whatever
//! it may have started for that node (what carries the node's marker):
//! no agent runs unwatched, and none twice. When a helper cannot be had
//! (not started, or not answering), the supervisor starts agents itself
//! for a minute, then tries a helper again.
//!
//! Protocol, on a stream socket: the helper first sends `{"ready":1}`;
//! then each request (a [`Request`], JSON) gets one reply (`{"pid":N}`
//! with the pidfd attached, or `{"error":...,"os":errno}`). Every message
//! is a 4-byte little-endian length and that many bytes.

use super::agent::{self, Launch};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use rustix::process::{Pid, WaitOptions};
use serde::{Deserialize, Serialize};
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The largest message read: a node's environment and arguments are
/// bounded by the kernel's `ARG_MAX` (2 MiB on Linux) well below it.
const MAX_MESSAGE: usize = 16 << 20;

/// How long an answer may take before the helper is taken for hung.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long agents are started directly once a helper could not be had.
const DIRECT_FOR: Duration = Duration::from_secs(60);

/// How often the helper reaps the agents that ended.
const REAP_EVERY: Duration = Duration::from_secs(1);

/// The argument that makes skyc the helper.
pub const ARG: &str = "__spawn";

/// One agent to start.
#[derive(Debug, Serialize, Deserialize)]
struct Request {
    agent: PathBuf,
    dir: PathBuf,
    log: PathBuf,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Reply {
    Ready { ready: u32 },
    Started { pid: i32 },
    Failed { error: String, os: Option<i32> },
}

/// The supervisor's side: starts agents through the helper, or directly
/// when there is none.
pub struct Spawner {
    /// skyc's executable: the helper.
    exe: PathBuf,
    /// Where the agent is installed (`agent::install`), once asked.
    state_dir: PathBuf,
    agent: Option<PathBuf>,
    helper: Option<Helper>,
    /// Until then agents are started directly: no helper could be had.
    direct_until: Option<Instant>,
}

struct Helper {
    child: Child,
    sock: UnixStream,
}

impl Drop for Helper {
    fn drop(&mut self) {
        // Closing the socket ends it; a hung one is killed.
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Spawner {
    pub fn new(exe: PathBuf, state_dir: PathBuf) -> Self {
        Self {
            exe,
            state_dir,
            agent: None,
            helper: None,
            direct_until: None,
        }
    }

    /// Starts the agent of `launch`: its pid, and a pidfd that becomes
    /// readable when it exits.
    pub fn spawn(&mut self, launch: Launch<'_>) -> io::Result<(Pid, OwnedFd)> {
        // Installed once; again if it went (the state directory's `bin/`
        // cleaned while the supervisor runs).
        let agent = match self.agent.as_ref().filter(|a| a.exists()) {
            Some(agent) => agent.clone(),
            None => self.agent.insert(agent::install(&self.state_dir)?).clone(),
        };
        if self
            .direct_until
            .is_some_and(|until| Instant::now() < until)
        {
            return agent::spawn(&agent, launch);
        }
        // Paths as given: the helper runs where the supervisor does, and
        // `agent::spawn` makes them absolute there.
        let request = Request {
            agent: agent.clone(),
            dir: launch.dir.to_owned(),
            log: launch.log.to_owned(),
            argv: launch.argv.clone(),
            env: launch.env.clone(),
            cwd: launch.cwd.to_owned(),
        };
        let body = serde_json::to_vec(&request).map_err(io::Error::other)?;
        // A helper that died before it was asked is replaced once.
        for _ in 0..2 {
            if self.helper.is_none() {
                match Helper::start(&self.exe) {
                    Ok(helper) => self.helper = Some(helper),
                    Err(e) => {
                        crate::supervisor::log(format_args!("no spawn helper: {e}"));
                        break;
                    }
                }
            }
            let helper = self.helper.as_mut().expect("started above");
            match helper.ask(&body) {
                Ok(Answer::Started(pid, pidfd)) => return Ok((pid, pidfd)),
                Ok(Answer::Failed(e)) => return Err(e),
                Err(Asked::NotSent(e)) => {
                    crate::supervisor::log(format_args!("spawn helper gone: {e}"));
                    self.helper = None;
                }
                Err(Asked::NoAnswer(e)) => {
                    crate::supervisor::log(format_args!("spawn helper gave no answer: {e}"));
                    // Killed and waited for as it drops: nothing more of
                    // its can start, and what it started for this node is
                    // killed before the node is started again.
                    self.helper = None;
                    if let Some(marker) =
                        launch.env.iter().find(|(k, _)| k == super::NODE_MARKER_VAR)
                    {
                        agent::kill_carrying(&format!("{}={}", marker.0, marker.1));
                    }
                    break;
                }
            }
        }
        crate::supervisor::log(format_args!(
            "starting nodes without a spawn helper for {}s",
            DIRECT_FOR.as_secs()
        ));
        self.direct_until = Some(Instant::now() + DIRECT_FOR);
        agent::spawn(&agent, launch)
    }
}

/// Why a request got no answer.
enum Asked {
    /// The helper was gone before it was asked: it started nothing.
    NotSent(io::Error),
    /// It was asked, and may have started the agent.
    NoAnswer(io::Error),
}

enum Answer {
    Started(Pid, OwnedFd),
    Failed(io::Error),
}

impl Helper {
    fn start(exe: &Path) -> io::Result<Self> {
        let (ours, theirs) = UnixStream::pair()?;
        let child = Command::new(exe)
            .arg(ARG)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()?;
        ours.set_read_timeout(Some(ANSWER_TIMEOUT))?;
        ours.set_write_timeout(Some(ANSWER_TIMEOUT))?;
        let mut helper = Self { child, sock: ours };
        match read_message(&mut helper.sock)? {
            Reply::Ready { ready: 1 } => Ok(helper),
            other => Err(io::Error::other(format!("not a spawn helper: {other:?}"))),
        }
    }

    /// One request and its reply. An error is the helper's fault (gone,
    /// hung, garbled); a refused start is an [`Answer::Failed`].
    fn ask(&mut self, body: &[u8]) -> Result<Answer, Asked> {
        // The helper reads a whole request before it starts anything: a
        // request it did not get whole started nothing.
        write_message(&mut self.sock, body).map_err(Asked::NotSent)?;
        self.answer().map_err(Asked::NoAnswer)
    }

    fn answer(&mut self) -> io::Result<Answer> {
        let (reply, fd) = loop {
            match receive(&self.sock) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        match (reply, fd) {
            (Reply::Started { pid }, Some(fd)) => {
                let pid = Pid::from_raw(pid).ok_or_else(|| io::Error::other("pid 0"))?;
                Ok(Answer::Started(pid, fd))
            }
            (Reply::Failed { error, os }, None) => Ok(Answer::Failed(match os {
                Some(code) => io::Error::from_raw_os_error(code),
                None => io::Error::other(error),
            })),
            (reply, fd) => Err(io::Error::other(format!(
                "unexpected answer {reply:?} ({} descriptor)",
                if fd.is_some() { "with a" } else { "no" }
            ))),
        }
    }
}

/// Reads a reply and the descriptor sent with it.
fn receive(sock: &UnixStream) -> io::Result<(Reply, Option<OwnedFd>)> {
    let mut head = [0u8; 4];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(&mut head)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fd = None;
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = message {
            for f in fds {
                // One is expected; any more are closed as they drop.
                fd.get_or_insert(f);
            }
        }
    }
    if got.bytes == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    (&*sock).read_exact(&mut head[got.bytes..])?;
    let reply = read_body(&mut &*sock, u32::from_le_bytes(head))?;
    Ok((reply, fd))
}

fn write_message(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len()).map_err(io::Error::other)?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(body)
}

fn read_message<T: serde::de::DeserializeOwned>(r: &mut impl Read) -> io::Result<T> {
    let mut head = [0u8; 4];
    r.read_exact(&mut head)?;
    read_body(r, u32::from_le_bytes(head))
}

fn read_body<T: serde::de::DeserializeOwned>(r: &mut impl Read, len: u32) -> io::Result<T> {
    let len = len as usize;
    if len > MAX_MESSAGE {
        return Err(io::Error::other(format!("a message of {len} bytes")));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    serde_json::from_slice(&body).map_err(io::Error::other)
}

/// The helper (`skyc __spawn`): serves the supervisor on its standard
/// input until the supervisor's end closes.
pub fn serve() -> io::Result<()> {
    let sock = UnixStream::from(io::stdin().as_fd().try_clone_to_owned()?);
    let mut w = &sock;
    write_message(
        &mut w,
        &serde_json::to_vec(&Reply::Ready { ready: 1 }).map_err(io::Error::other)?,
    )?;
    let mut reaped = Instant::now();
    loop {
        // Agents that ended are reaped once a second: a look for ended
        // children goes through every child, and there is one per node.
        let left = REAP_EVERY.saturating_sub(reaped.elapsed());
        let mut fds = [rustix::event::PollFd::new(
            &sock,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec {
            tv_sec: i64::try_from(left.as_secs()).unwrap_or(1),
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        if reaped.elapsed() >= REAP_EVERY {
            reap();
            reaped = Instant::now();
        }
        if fds[0].revents().is_empty() {
            continue;
        }
        let request: Request = match read_message(&mut &sock) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        let launch = Launch {
            dir: &request.dir,
            log: &request.log,
            argv: request.argv,
            env: request.env,
            cwd: &request.cwd,
        };
        match agent::spawn(&request.agent, launch) {
            Ok((pid, pidfd)) => {
                let body = serde_json::to_vec(&Reply::Started {
                    pid: pid.as_raw_nonzero().get(),
                })
                .map_err(io::Error::other)?;
                send_with_fd(&sock, &body, &pidfd)?;
            }
            Err(e) => {
                let body = serde_json::to_vec(&Reply::Failed {
                    error: e.to_string(),
                    os: e.raw_os_error(),
                })
                .map_err(io::Error::other)?;
                write_message(&mut w, &body)?;
            }
        }
    }
}

/// Sends a message with `fd` attached to its first bytes.
fn send_with_fd(sock: &UnixStream, body: &[u8], fd: &OwnedFd) -> io::Result<()> {
    let len = u32::try_from(body.len()).map_err(io::Error::other)?;
    let mut message = len.to_le_bytes().to_vec();
    message.extend_from_slice(body);
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd.as_fd()];
    control.push(SendAncillaryMessage::ScmRights(&fds));
    let sent = rustix::net::sendmsg(
        sock,
        &[IoSlice::new(&message)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    (&*sock).write_all(&message[sent..])
}

/// Reaps every child that has ended.
fn reap() {
    while let Ok(Some(_)) = rustix::process::waitpid(None, WaitOptions::NOHANG) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_travels_with_its_reply() {
        let (a, b) = UnixStream::pair().unwrap();
        let (r, w) = rustix::pipe::pipe().unwrap();
        let body = serde_json::to_vec(&Reply::Started { pid: 42 }).unwrap();
        send_with_fd(&a, &body, &w).unwrap();
        drop(w);
        let (reply, fd) = receive(&b).unwrap();
        assert!(matches!(reply, Reply::Started { pid: 42 }), "{reply:?}");
        // The descriptor received is the pipe's write end: what is written
        // to it arrives at the read end.
        let mut sent = std::fs::File::from(fd.expect("a descriptor"));
        sent.write_all(b"x").unwrap();
        drop(sent);
        let mut got = String::new();
        std::fs::File::from(r).read_to_string(&mut got).unwrap();
        assert_eq!(got, "x");
    }

    #[test]
    fn a_helper_that_is_not_skyc_is_refused_at_its_greeting() {
        // `true` sends no greeting: the spawner is told so and falls back.
        let err = Helper::start(Path::new("/bin/true"))
            .err()
            .expect("no helper");
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
    }

    #[test]
    fn an_agent_removed_under_a_running_supervisor_is_installed_again() {
        let dir = std::env::temp_dir().join(format!("skyc-spawner-again-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // `true` is no helper: agents are started directly.
        let mut spawner = Spawner::new("/bin/true".into(), dir.clone());
        let run = |spawner: &mut Spawner, n: u32| {
            let node = dir.join(format!("node-{n}"));
            std::fs::create_dir_all(&node).unwrap();
            let (_, pidfd) = spawner
                .spawn(Launch {
                    dir: &node,
                    log: &node.join("log"),
                    argv: vec!["sh".into(), "-c".into(), format!("echo ran {n}")],
                    env: vec![("PATH".into(), "/usr/bin:/bin".into())],
                    cwd: &node,
                })
                .expect("started");
            let mut fds = [rustix::event::PollFd::new(
                &pidfd,
                rustix::event::PollFlags::IN,
            )];
            rustix::event::poll(&mut fds, None).unwrap();
            let exit = super::super::agent::read_exit(&node);
            let log = std::fs::read_to_string(node.join("log")).unwrap_or_default();
            (exit, log)
        };
        assert_eq!(run(&mut spawner, 1), (Some(0), "ran 1\n".into()));
        std::fs::remove_dir_all(dir.join("bin")).unwrap();
        assert_eq!(run(&mut spawner, 2), (Some(0), "ran 2\n".into()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_oversized_message_is_refused_before_it_is_read() {
        let mut input: &[u8] = &(u32::MAX).to_le_bytes();
        let err = read_message::<Reply>(&mut input).unwrap_err();
        assert!(err.to_string().contains("bytes"), "{err}");
    }
}
