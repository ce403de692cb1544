//! A command on the controller instance over SSH (docs/controller.md,
//! "On AWS"): `skyc ARGS` run as root there, its input streamed in from
//! a thread, its output streamed back as it comes, its exit status the
//! session's. The session's input stays open until the command ends: a
//! command run for a client ([`super::remote::ANSWER`]) ends when it
//! closes, so a client gone leaves nothing running there.

use super::remote::{CLOSED_OUTPUT, Input, Session};
use crate::cloud::data::remote::{Command, Ssh};
use skyc_targets::cloud::controller::{BINARY, STATE_DIR};
use skyc_targets::shell::single_quoted;
use std::io::{Read, Write};
use std::process::Stdio;
use std::sync::mpsc;

/// The controller instance, reached over SSH.
pub struct SshSession {
    pub ssh: Ssh,
    pub instance: String,
    pub address: String,
}

/// What the session's threads tell the loop.
enum Said {
    Out(Vec<u8>),
    Err(Vec<u8>),
    OutClosed,
    ErrClosed,
    /// The input cannot be had whole: the session ends.
    Unread(String),
}

/// The script that runs `argv` (a skyc command line, `argv[0]` the
/// program) on the controller: each word quoted, the program skyc as it
/// was delivered there.
pub fn script(argv: &[String]) -> String {
    let mut words = vec![single_quoted(BINARY)];
    words.extend(argv.iter().skip(1).map(|a| single_quoted(a)));
    format!("exec {}", words.join(" "))
}

impl Session for SshSession {
    fn exec(
        &mut self,
        argv: Vec<String>,
        input: Option<Input>,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Result<i32, String> {
        let command = Command {
            script: script(&argv),
            stdin: Vec::new(),
        };
        let argv = self.ssh.argv(&self.instance, &self.address, &command);
        let mut child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run ssh: {e}"))?;
        let (tell, said) = mpsc::channel::<Said>();
        let (ended, end) = mpsc::channel::<()>();
        // The input, written as it comes, then held open until the
        // command has ended.
        let mut pipe = child.stdin.take();
        {
            let tell = tell.clone();
            std::thread::spawn(move || {
                if let (Some(w), Some(mut chunks)) = (pipe.as_mut(), input) {
                    while let Some(chunk) = chunks.blocking_recv() {
                        match chunk {
                            Ok(bytes) => {
                                if w.write_all(&bytes).and_then(|()| w.flush()).is_err() {
                                    // The command stopped reading: its
                                    // status says what it made of it.
                                    break;
                                }
                            }
                            Err(e) => {
                                let _ = tell.send(Said::Unread(e));
                                return;
                            }
                        }
                    }
                }
                let _ = end.recv();
                drop(pipe);
            });
        }
        for (stream, open, closed) in [
            (
                child
                    .stdout
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
                Said::Out as fn(Vec<u8>) -> Said,
                Said::OutClosed,
            ),
            (
                child
                    .stderr
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
                Said::Err as fn(Vec<u8>) -> Said,
                Said::ErrClosed,
            ),
        ] {
            let tell = tell.clone();
            std::thread::spawn(move || {
                if let Some(mut stream) = stream {
                    let mut buf = vec![0u8; 16 << 10];
                    while let Ok(n) = stream.read(&mut buf) {
                        if n == 0 || tell.send(open(buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                }
                let _ = tell.send(closed);
            });
        }
        drop(tell);
        let kill = |child: &mut std::process::Child| {
            let _ = child.kill();
            let _ = child.wait();
        };
        let (mut out_open, mut err_open) = (true, true);
        while out_open || err_open {
            let Ok(said) = said.recv() else { break };
            let written = match said {
                Said::Out(bytes) => stdout.write_all(&bytes).and_then(|()| stdout.flush()),
                Said::Err(bytes) => stderr.write_all(&bytes).and_then(|()| stderr.flush()),
                Said::OutClosed => {
                    out_open = false;
                    Ok(())
                }
                Said::ErrClosed => {
                    err_open = false;
                    Ok(())
                }
                Said::Unread(e) => {
                    kill(&mut child);
                    let _ = ended.send(());
                    return Err(e);
                }
            };
            if written.is_err() {
                // Nobody reads what it prints here: the session is
                // dropped, and the command with it.
                kill(&mut child);
                let _ = ended.send(());
                return Ok(CLOSED_OUTPUT);
            }
        }
        let status = child.wait().map_err(|e| format!("ssh: {e}"))?;
        let _ = ended.send(());
        match status.code() {
            Some(255) => Err(format!(
                "cannot reach instance {} at {} over SSH",
                self.instance, self.address
            )),
            Some(code) => Ok(code),
            None => Err("ssh was killed".into()),
        }
    }

    fn name(&self) -> String {
        format!("instance {}", self.instance)
    }

    /// Its supervisor's log (`supervisor.log` of its state), where its
    /// service writes too.
    fn controller_log(&mut self, follow: bool, out: &mut dyn Write) -> Result<(), String> {
        let mut args = vec![
            "skyc".to_owned(),
            "logs".into(),
            "--controller".into(),
            "--state-dir".into(),
            STATE_DIR.into(),
        ];
        if follow {
            args.push("-f".into());
        }
        let argv: Vec<String> = std::iter::once("skyc".to_owned())
            .chain(super::remote::ANSWER.iter().map(|s| (*s).to_owned()))
            .chain(args.into_iter().skip(1))
            .collect();
        let mut err = std::io::stderr();
        match self.exec(argv, None, out, &mut err)? {
            0 => Ok(()),
            code => Err(format!("its log: exit {code}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_is_quoted_once_for_the_remote_shell() {
        let argv: Vec<String> = ["skyc", "logs", "it's; rm -rf /", "$(x)"]
            .map(str::to_owned)
            .to_vec();
        let s = script(&argv);
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(s.replacen(&single_quoted(BINARY), "printf '%s\\n'", 1))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "logs\nit's; rm -rf /\n$(x)\n"
        );
    }
}
