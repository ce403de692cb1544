//! The command line as a controller's client (docs/controller.md).
//!
//! A state directory named `k8s://NAMESPACE[@CONTEXT]` is the state
//! directory of the controller in that namespace; `aws://REGION` that of
//! the controller instance in that region. Its commands are run there,
//! as the command line would run them against a local state directory:
//! `skyc ARGS --state-dir STATE_DIR`, through the API server's
//! `pods/exec` ([`super::pods`]) or SSH ([`super::ssh`]). So their output
//! is the same by construction, the user's own access (kubeconfig and
//! RBAC, the controller's SSH key) is the authentication, and the
//! controller listens on no port of its own. SkyPilot's client reaches
//! its jobs controller the same way: commands run on the controller.
//!
//! The session's input is held open while the command runs and a
//! command run for a client ends when it closes ([`ANSWER`]): a client
//! gone (Ctrl-C, a closed laptop) leaves nothing running there.

use super::aws::Aws;
use super::pods::K8s;
use super::submission::{Accepted, Record};
use crate::files::Snapshots;
use skyc_targets::k8s::controller::STATE_DIR;
use std::io::Write;

/// The argument that runs a client's command on a controller, ended
/// when the session's input closes: `skyc controller answer -- ARGS`.
pub const ANSWER: [&str; 3] = ["controller", "answer", "--"];

/// The controller a state directory names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Remote {
    /// `k8s://NAMESPACE[@CONTEXT]`.
    K8s(K8s),
    /// `aws://REGION`.
    Aws(Aws),
}

/// What a command run on the controller reads: chunks as they come (a
/// submission is written by a thread as it reads the snapshots, never
/// held whole); an `Err` ends the session at once, the input cannot be
/// had whole.
pub type Input = tokio::sync::mpsc::Receiver<Result<Vec<u8>, String>>;

/// The exit status of a command whose output cannot be written here any
/// more (a closed pipe: `| head`), as the command line's own.
pub(super) const CLOSED_OUTPUT: i32 = 141;

/// How many bytes of input a session's pipe holds ahead of it.
pub(super) const STDIN_BUFFER: usize = 64 << 10;

/// Commands on one controller: each run with its input streamed in and
/// its output streamed back, answering its exit status. The session
/// ends with the command's status, or when the connection does, whatever
/// is still being written: a command that stopped reading its input, or
/// a network gone, never leaves the client waiting.
pub(super) trait Session: Send {
    fn exec(
        &mut self,
        argv: Vec<String>,
        input: Option<Input>,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Result<i32, String>;

    /// Where commands run, for messages (`pod NAME`, `instance ID`).
    fn name(&self) -> String;

    /// The controller's own log, followed while it runs when `follow`.
    fn controller_log(&mut self, follow: bool, out: &mut dyn Write) -> Result<(), String>;
}

impl Remote {
    /// `k8s://NAMESPACE[@CONTEXT]` or `aws://REGION`; `None` when `s`
    /// names a local directory.
    pub fn parse(s: &str) -> Option<Result<Self, String>> {
        if let Some(rest) = s.strip_prefix(super::pods::SCHEME) {
            return Some(K8s::parse(s, rest).map(Remote::K8s));
        }
        let rest = s.strip_prefix(super::aws::SCHEME)?;
        Some(Aws::parse(s, rest).map(Remote::Aws))
    }

    /// The controller on Kubernetes, if it is one.
    pub fn k8s(&self) -> Option<&K8s> {
        match self {
            Remote::K8s(k8s) => Some(k8s),
            Remote::Aws(_) => None,
        }
    }

    /// Reached once, for commands in a row.
    pub fn connect(&self) -> Result<Connected, String> {
        Ok(Connected {
            remote: self.clone(),
            session: Some(self.session()?),
        })
    }

    fn session(&self) -> Result<Box<dyn Session>, String> {
        Ok(match self {
            Remote::K8s(k8s) => Box::new(k8s.session()?),
            Remote::Aws(aws) => Box::new(aws.session()?),
        })
    }

    /// Runs `skyc ARGS` on the controller (its state directory given), its
    /// output written to `stdout` and `stderr` as it comes. Answers the
    /// command's exit status.
    pub fn run(
        &self,
        args: &[String],
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Result<i32, String> {
        self.connect()?.run(args, stdout, stderr)
    }

    /// The controller's own log, written to `out`; followed while it runs
    /// when `follow`.
    pub fn controller_log(&self, follow: bool, out: &mut dyn Write) -> Result<(), String> {
        self.session()?
            .controller_log(follow, out)
            .map_err(|e| self.failed(&e))
    }

    fn failed(&self, e: &str) -> String {
        match self {
            Remote::K8s(k8s) => format!("the controller in {}: {e}", k8s.namespace),
            Remote::Aws(aws) => format!("the controller in {}: {e}", aws.region),
        }
    }

    /// Submits what was planned here (a group, a pool file, jobs): the
    /// snapshots of `snapshots` the controller does not hold are sent
    /// with it (once: a snapshot it holds is not sent again). Answers what
    /// the controller recorded.
    pub fn submit(&self, record: &Record, snapshots: &Snapshots) -> Result<Accepted, String> {
        record.check_size()?;
        let mut session = self.session()?;
        submit(session.as_mut(), self.target(), record, snapshots).map_err(|e| self.failed(&e))
    }

    /// The live pool `name` that takes jobs, as the controller holds it
    /// (`skyc controller pool NAME`): what jobs are planned against here.
    pub fn pool(&self, name: &str) -> Result<crate::pool::admission::Found, String> {
        let mut session = self.session()?;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = session
            .exec(
                controller_argv("pool", &[name.to_owned()]),
                None,
                &mut out,
                &mut err,
            )
            .map_err(|e| self.failed(&e))?;
        if code != 0 {
            // The controller's own words: no such pool, going down.
            return Err(self.failed(&refused(&err)));
        }
        serde_json::from_slice(&out)
            .map_err(|e| self.failed(&format!("its answer for pool `{name}`: {e}")))
    }

    /// The target the controller runs groups on (`k8s`, `aws`).
    pub fn target(&self) -> &'static str {
        match self {
            Remote::K8s(_) => "k8s",
            Remote::Aws(_) => "aws",
        }
    }
}

/// A controller reached once, for commands in a row (a dashboard's
/// requests): its session kept, and made again after one fails (a leader
/// replaced, a connection lost).
pub struct Connected {
    remote: Remote,
    session: Option<Box<dyn Session>>,
}

impl Connected {
    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// [`Remote::run`] through the kept session.
    pub fn run(
        &mut self,
        args: &[String],
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Result<i32, String> {
        let session = match &mut self.session {
            Some(session) => session,
            None => self.session.insert(self.remote.session()?),
        };
        let ran = session
            .exec(answer_argv(args), None, stdout, stderr)
            .map_err(|e| self.remote.failed(&e));
        if ran.is_err() {
            self.session = None;
        }
        ran
    }
}

/// [`Remote::submit`] through a session.
fn submit(
    session: &mut dyn Session,
    target: &str,
    record: &Record,
    snapshots: &Snapshots,
) -> Result<Accepted, String> {
    let named = record.snapshots();
    // Asked again once if a snapshot the controller held was collected
    // before the group that needs it was recorded.
    let mut last = String::new();
    for _ in 0..2 {
        let asked = controller_argv("missing", &named);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = session.exec(asked, None, &mut out, &mut err)?;
        if code != 0 {
            return Err(refused(&err));
        }
        // Only what this group names: the answer is the controller's,
        // the paths read are this machine's.
        let answer = String::from_utf8_lossy(&out).into_owned();
        let sending: Vec<String> = named
            .iter()
            .filter(|d| answer.split_whitespace().any(|m| m == d.as_str()))
            .cloned()
            .collect();
        let (to, input) = tokio::sync::mpsc::channel(4);
        // Not joined: one still reading a large snapshot when the
        // controller refused finds its input gone at its next send, and
        // ends.
        {
            let (record, snapshots) = (record.clone(), snapshots.clone());
            std::thread::spawn(move || {
                let mut chunks = Chunks {
                    to: to.clone(),
                    chunk: Vec::with_capacity(STDIN_BUFFER),
                };
                if let Err(e) = record.write(&snapshots, &sending, &mut chunks) {
                    // The session must end rather than wait for the rest:
                    // the controller would wait with it.
                    let _ = to.blocking_send(Err(format!("reading the snapshots to send: {e}")));
                }
            });
        }
        // `--target` only where it is not the default: a controller of an
        // older skyc knows its own.
        let mut args: Vec<String> = record
            .kind()
            .args()
            .iter()
            .map(|a| (*a).to_owned())
            .collect();
        if target != "k8s" {
            args.extend(["--target".to_owned(), target.to_owned()]);
        }
        let accept = controller_argv("accept", &args);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = session.exec(accept, Some(input), &mut out, &mut err);
        // A refusal whose status was lost with the connection is still the
        // controller's words.
        let code = code.map_err(|e| {
            if err.is_empty() || e.starts_with("reading the snapshots") {
                e
            } else {
                refused(&err)
            }
        })?;
        if code == 0 {
            let answer = String::from_utf8_lossy(&out);
            return Accepted::parse(record.kind(), &answer).ok_or_else(|| {
                format!(
                    "{} answered `{}`, not what it recorded",
                    session.name(),
                    answer.trim()
                )
            });
        }
        last = refused(&err);
        if !last.contains("submit again") {
            break;
        }
    }
    Err(last)
}

/// As the command line names it: `k8s://NAMESPACE[@CONTEXT]`,
/// `aws://REGION`.
impl std::fmt::Display for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Remote::K8s(k8s) => k8s.fmt(f),
            Remote::Aws(aws) => aws.fmt(f),
        }
    }
}

/// The argv a client's `args` run as on the controller: its state
/// directory given before any `--`.
pub fn answer_argv(args: &[String]) -> Vec<String> {
    let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
    std::iter::once("skyc".to_owned())
        .chain(ANSWER.iter().map(|s| (*s).to_owned()))
        .chain(args[..at].iter().cloned())
        .chain(["--state-dir".to_owned(), STATE_DIR.to_owned()])
        .chain(args[at..].iter().cloned())
        .collect()
}

/// The argv of `skyc controller COMMAND ARGS` on the controller's state.
pub fn controller_argv(command: &str, args: &[String]) -> Vec<String> {
    ["skyc", "controller", command, "--state-dir", STATE_DIR]
        .into_iter()
        .map(str::to_owned)
        .chain(args.iter().cloned())
        .collect()
}

/// A [`Write`] of chunks into an exec's [`Input`], from a thread that
/// is not the session's.
struct Chunks {
    to: tokio::sync::mpsc::Sender<Result<Vec<u8>, String>>,
    chunk: Vec<u8>,
}

impl Write for Chunks {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.chunk.extend_from_slice(bytes);
        if self.chunk.len() >= STDIN_BUFFER {
            self.flush()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.chunk.is_empty() {
            self.to
                .blocking_send(Ok(std::mem::take(&mut self.chunk)))
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::BrokenPipe))?;
        }
        Ok(())
    }
}

/// What a command that refused said, without its `error: ` prefix; a
/// command line the controller's skyc does not know is said to be that.
fn refused(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    let said = text.strip_prefix("error: ").unwrap_or(text);
    if said.starts_with("unrecognized subcommand") || said.starts_with("unexpected argument") {
        let first = said.lines().next().unwrap_or_default();
        return format!(
            "the controller's skyc is older than this one and does not know this ({first}): \
             `skyc controller up` updates it"
        );
    }
    said.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_controllers_state_is_named_by_namespace_and_context() {
        assert_eq!(Remote::parse("/var/lib/skyc"), None);
        assert_eq!(
            Remote::parse("k8s://team"),
            Some(Ok(Remote::K8s(K8s {
                namespace: "team".into(),
                context: None
            })))
        );
        assert_eq!(
            Remote::parse("k8s://team@arn:aws:eks:us-west-2:1:cluster/x"),
            Some(Ok(Remote::K8s(K8s {
                namespace: "team".into(),
                context: Some("arn:aws:eks:us-west-2:1:cluster/x".into())
            })))
        );
        assert_eq!(
            Remote::parse("aws://us-west-2"),
            Some(Ok(Remote::Aws(Aws {
                region: "us-west-2".into()
            })))
        );
        for bad in [
            "k8s://",
            "k8s://Team",
            "k8s://-a",
            "k8s://a/b",
            "k8s://a@",
            "aws://",
            "aws://US-WEST-2",
            "aws://us-west-2/x",
        ] {
            assert!(matches!(Remote::parse(bad), Some(Err(_))), "{bad}");
        }
    }

    /// A controller whose skyc does not know a command says so, and how
    /// to update it, rather than its usage.
    #[test]
    fn an_older_controller_is_said_to_be_one() {
        let said =
            refused(b"error: unrecognized subcommand 'pool'\n\nUsage: skyc controller <COMMAND>\n");
        assert!(said.contains("older than this one"), "{said}");
        assert!(said.contains("'pool'") && !said.contains("Usage"), "{said}");
        let said = refused(b"error: unexpected argument '--jobs' found\n");
        assert!(said.contains("`skyc controller up` updates it"), "{said}");
        assert_eq!(refused(b"error: no pool named `p`\n"), "no pool named `p`");
    }

    #[test]
    fn a_commands_argv_names_the_controllers_state() {
        assert_eq!(
            answer_argv(&["status".into(), "--json".into()]),
            [
                "skyc",
                "controller",
                "answer",
                "--",
                "status",
                "--json",
                "--state-dir",
                STATE_DIR
            ]
        );
    }
}
