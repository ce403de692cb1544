//! What the runtime runs in a worker's pod (through `pods/exec`) to
//! start a pool job's node, to read how it is doing, and to stop it, and
//! how the answers are read: fixed scripts, much as the AWS data plane's
//! over SSH (`cloud::data::remote`).
//!
//! Every script is fixed text run as `bash -c SCRIPT NAME ARGS...`: the
//! values (the attempt's directory, a log offset) are positional
//! arguments, never spliced into the script. The job's `run` and
//! environment, secrets included, travel on the start's standard input,
//! not in its arguments: an exec's arguments are the request's URL,
//! which API servers log and proxies bound. They are base64-encoded, one
//! line each, and a last line `end` tells a whole input from one cut
//! short, so no byte of them is parsed by a shell before the job's own
//! and no partial script ever runs. Answers come on stdout: a state
//! line, then the log's new bytes as base64 on one line.
//!
//! Starting is idempotent: `mkdir` of the attempt's directory is the
//! marker, atomic in the pod; a start that finds it starts nothing. The
//! job runs detached, in a process group of its own, with its output in
//! `log` and its exit code in `exit` once it ends, so a lost exec session
//! or supervisor loses nothing.

use super::exec::Command;
use base64::Engine as _;
use skyc_targets::k8s::worker::WORKER_DIR;

/// The most log bytes one read returns.
pub const LOG_CHUNK_BYTES: u64 = 1 << 20;

/// The directory of a job's attempt in a worker's pod.
pub fn attempt_dir(job: i64, attempt: u32) -> String {
    format!("{WORKER_DIR}/jobs/{job}.{attempt}")
}

/// Starts the job's node unless this attempt was started already.
/// Answers `started` or `already` (or `unready`). Reads its input first,
/// into memory, whatever it answers: exactly three lines, never to an
/// end the writer would have to close.
const START: &str = r#"set -u
dir=$1
IFS= read -r run || run=
IFS= read -r env || env=
IFS= read -r end || end=
if [ "$end" != end ]; then
  echo "the job's input was cut short" >&2
  exit 1
fi
if [ ! -f /tmp/skyc/ready ]; then
  echo unready
  exit 0
fi
mkdir -p "${dir%/*}" || exit 1
if ! mkdir "$dir" 2>/dev/null; then
  echo already
  exit 0
fi
printf '%s' "$run" | base64 -d >"$dir/run.sh" || exit 1
(umask 077 && printf '%s' "$env" | base64 -d >"$dir/env") || exit 1
# In the worker's workdir when the pool has one, as SkyPilot starts a job.
cd "${HOME:-/}/sky_workdir" 2>/dev/null || cd "${HOME:-/}" 2>/dev/null || cd /
set -m
bash -c '
  # SIGTERM is for the job alone: ignored by this shell and the commands
  # it runs around the job (so the exit code is always written and the
  # environment file always removed), handled (reset in the child) while
  # the job runs.
  trap "" TERM
  : >"$1/armed"
  # shellcheck disable=SC1091 # the worker node wrote it after setup
  . /tmp/skyc/env
  while IFS= read -r -d "" kv; do export "${kv?}"; done <"$1/env"
  # The secrets among them are in the environment now, not on disk.
  rm -f "$1/env"
  # The nodes of the job only: the first SKYPILOT_NUM_NODES of the worker.
  SKYPILOT_NODE_IPS=$(printf "%s\n" "${SKYPILOT_NODE_IPS:-}" | head -n "${SKYPILOT_NUM_NODES:-1}")
  export SKYPILOT_NODE_IPS
  trap : TERM
  # A signal sent before the job existed left the stop file (written
  # before the signal): the job, once started, ends at once.
  bash -c "[ ! -f \"\$1/stop\" ] || exit 143; exec bash \"\$1/run.sh\"" skyc-run "$1"
  code=$?
  trap "" TERM
  echo "$code" >"$1/exit.tmp" && mv -f "$1/exit.tmp" "$1/exit"
' skyc-job "$dir" >"$dir/log" 2>&1 </dev/null &
echo "$!" >"$dir/pid"
echo started
"#;

/// The attempt's state, then its log from an offset. States: `absent`
/// (never started here: the pod is a new one), `running`, `exit CODE`,
/// `vanished` (the job's process is gone without an exit code: killed
/// with SIGKILL, or the container restarted).
const POLL: &str = r#"set -u
dir=$1
if [ ! -d "$dir" ]; then
  echo absent
  exit 0
fi
if [ -f "$dir/exit" ]; then
  echo "exit $(cat "$dir/exit")"
elif [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
  echo running
elif [ -f "$dir/exit" ]; then
  echo "exit $(cat "$dir/exit")"
else
  echo vanished
fi
tail -c "+$(($2 + 1))" "$dir/log" 2>/dev/null | head -c "$3" | base64 | tr -d '\n'
echo
"#;

/// Sends the attempt's process group a signal (`TERM` or `KILL`).
const SIGNAL: &str = r#"set -u
dir=$1
# The attempt's marker taken if no start has taken it (a start late or
# under way then starts nothing: it answers `already`, or its job finds
# the stop file), and the stop file left for a job not yet running.
mkdir -p "$dir" && : >"$dir/stop"
if [ -f "$dir/pid" ] && [ ! -f "$dir/exit" ]; then
  # A job started a moment ago may not trap TERM yet: its shell would
  # die with the job and never write the exit code.
  i=0
  while [ ! -f "$dir/armed" ] && [ "$i" -lt 50 ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; do
    sleep 0.1
    i=$((i + 1))
  done
  kill "-$2" -- "-$(cat "$dir/pid")" 2>/dev/null
fi
echo signalled
"#;

/// A command to exec: `bash -c SCRIPT NAME ARGS...`.
fn command(script: &str, name: &str, args: Vec<String>, stdin: Option<Vec<u8>>) -> Command {
    let mut argv = vec!["bash".into(), "-c".into(), script.into(), name.into()];
    argv.extend(args);
    Command { argv, stdin }
}

/// Starts `run` in `dir` with `env` (after the worker node's own).
pub fn start(dir: &str, run: &str, env: &[(String, String)]) -> Command {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut envs = Vec::new();
    for (k, v) in env {
        envs.extend_from_slice(k.as_bytes());
        envs.push(b'=');
        envs.extend_from_slice(v.as_bytes());
        envs.push(0);
    }
    let input = format!("{}\n{}\nend\n", b64(run.as_bytes()), b64(&envs));
    command(
        START,
        "skyc-start",
        vec![dir.to_owned()],
        Some(input.into_bytes()),
    )
}

/// The job's `run` and environment from a start's input, as the start
/// script reads them; `None` for an input cut short.
#[cfg(any(test, feature = "fake-cluster"))]
pub fn start_input(input: &[u8]) -> Option<(String, Vec<(String, String)>)> {
    let text = std::str::from_utf8(input).ok()?;
    let mut lines = text.lines();
    let decode = |l: &str| base64::engine::general_purpose::STANDARD.decode(l).ok();
    let run = String::from_utf8(decode(lines.next()?)?).ok()?;
    let env = decode(lines.next()?)?
        .split(|b| *b == 0)
        .filter(|kv| !kv.is_empty())
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv).into_owned();
            let (k, v) = kv.split_once('=')?;
            Some((k.to_owned(), v.to_owned()))
        })
        .collect();
    (lines.next()? == "end").then_some((run, env))
}

/// Reads the attempt's state and its log from `offset`.
pub fn poll(dir: &str, offset: u64) -> Command {
    command(
        POLL,
        "skyc-poll",
        vec![
            dir.to_owned(),
            offset.to_string(),
            LOG_CHUNK_BYTES.to_string(),
        ],
        None,
    )
}

/// Signals the attempt's processes.
pub fn signal(dir: &str, kill: bool) -> Command {
    let sig = if kill { "KILL" } else { "TERM" };
    command(
        SIGNAL,
        "skyc-signal",
        vec![dir.to_owned(), sig.to_owned()],
        None,
    )
}

/// What a start answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    /// Started now, or by an earlier start of this attempt.
    Yes,
    /// The worker's node has not finished its setup.
    Unready,
}

pub fn parse_start(out: &str) -> Option<Started> {
    match out.trim() {
        "started" | "already" => Some(Started::Yes),
        "unready" => Some(Started::Unready),
        _ => None,
    }
}

/// How a job's node is, as a poll read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Absent,
    Running,
    Exited(i32),
    Vanished,
}

/// A poll's answer: the state, and the log's new bytes.
pub fn parse_poll(out: &str) -> Option<(State, Vec<u8>)> {
    let mut lines = out.lines();
    let state = match lines.next()?.trim() {
        "absent" => State::Absent,
        "running" => State::Running,
        "vanished" => State::Vanished,
        other => State::Exited(other.strip_prefix("exit ")?.trim().parse().ok()?),
    };
    let log = match lines.next() {
        Some(l) => base64::engine::general_purpose::STANDARD
            .decode(l.trim())
            .ok()?,
        None => Vec::new(),
    };
    Some((state, log))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// Runs a script as the pod would, with `/tmp/skyc` moved to `root`.
    fn sh(root: &std::path::Path, command: &super::Command) -> String {
        let out = run(root, command, false);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// `close`: the input ends (a session dropped mid-way), else the
    /// stream is left open as the API server leaves it.
    fn run(root: &std::path::Path, command: &super::Command, close: bool) -> std::process::Output {
        use std::io::Write as _;
        let argv = &command.argv;
        let script = argv[2].replace("/tmp/skyc", &root.display().to_string());
        let mut child = Command::new(&argv[0])
            .arg("-c")
            .arg(script)
            .args(&argv[3..])
            .env("HOME", root)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bash runs");
        let mut stdin = child.stdin.take().unwrap();
        // The script must read what it needs and no more.
        stdin
            .write_all(command.stdin.as_deref().unwrap_or_default())
            .unwrap();
        let stdin = (!close).then_some(stdin);
        let out = child.wait_with_output().unwrap();
        drop(stdin);
        out
    }

    /// A worker node's directory past its setup (an empty environment),
    /// and the directory of attempt `attempt` in it.
    fn ready_node(name: &str, attempt: &str) -> (std::path::PathBuf, String) {
        let root = std::env::temp_dir().join(format!("skyc-job-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("ready"), "").unwrap();
        std::fs::write(root.join("env"), "").unwrap();
        let dir = format!("{}/jobs/{attempt}", root.display());
        (root, dir)
    }

    fn wait_exit(root: &std::path::Path, dir: &str) -> (State, Vec<u8>) {
        for _ in 0..200 {
            let (state, log) = parse_poll(&sh(root, &poll(dir, 0))).unwrap();
            if matches!(state, State::Exited(_)) {
                return (state, log);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("the job did not end");
    }

    #[test]
    fn a_job_starts_once_with_its_env_and_its_exit_and_log_are_read() {
        let root = std::env::temp_dir().join(format!("skyc-job-scripts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let r = root.display().to_string();
        let dir = format!("{r}/jobs/7.0");
        // Not ready: nothing starts.
        let hostile = "it's $(touch pwned) `x` \"q\"\nline two";
        let env = vec![
            ("SKYPILOT_JOB_RANK".to_owned(), "3".to_owned()),
            ("SKYPILOT_NUM_NODES".to_owned(), "2".to_owned()),
            ("ODD".to_owned(), hostile.to_owned()),
        ];
        let run = "echo rank=$SKYPILOT_JOB_RANK worker=$WORKER_ONLY; printf '%s' \"$ODD\"; echo; echo \"$SKYPILOT_NODE_IPS\"; echo run >> runs; exit 4";
        assert_eq!(
            parse_start(&sh(&root, &start(&dir, run, &env))),
            Some(Started::Unready)
        );
        std::fs::write(root.join("ready"), "").unwrap();
        std::fs::write(
            root.join("env"),
            "declare -x WORKER_ONLY=\"setup-env\"\ndeclare -x SKYPILOT_NODE_IPS=\"10.0.0.1\n10.0.0.2\n10.0.0.3\"\n",
        )
        .unwrap();
        assert_eq!(
            parse_start(&sh(&root, &start(&dir, run, &env))),
            Some(Started::Yes)
        );
        // Given again (a supervisor restarted): nothing more starts.
        assert_eq!(
            parse_start(&sh(&root, &start(&dir, run, &env))),
            Some(Started::Yes)
        );
        let (state, log) = wait_exit(&root, &dir);
        assert_eq!(state, State::Exited(4));
        let log = String::from_utf8(log).unwrap();
        // The job's own nodes' addresses only.
        assert_eq!(
            log,
            format!("rank=3 worker=setup-env\n{hostile}\n10.0.0.1\n10.0.0.2\n")
        );
        assert_eq!(std::fs::read_to_string(root.join("runs")).unwrap(), "run\n");
        assert!(!root.join("pwned").exists());
        // From an offset.
        let (_, rest) = parse_poll(&sh(&root, &poll(&dir, 7))).unwrap();
        assert_eq!(rest, &log.as_bytes()[7..]);
        // Another attempt's directory is absent.
        let (state, _) = parse_poll(&sh(&root, &poll(&format!("{r}/jobs/7.1"), 0))).unwrap();
        assert_eq!(state, State::Absent);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// The input: a `run` far over what an exec's URL may carry, and
    /// nothing on disk but the script once the job has its environment.
    /// An input cut short starts nothing, and a whole one still can.
    #[test]
    fn a_large_run_and_its_secrets_travel_on_stdin_and_a_cut_input_starts_nothing() {
        let (root, dir) = ready_node("input", "9.0");
        let filler = format!("# {}\n", "x".repeat(1000)).repeat(300);
        let script = format!("{filler}printf '%s' \"$TOKEN\"");
        let env = vec![("TOKEN".to_owned(), "s3cr'et\n$(x)".to_owned())];
        let whole = start(&dir, &script, &env);
        assert!(whole.argv.iter().all(|a| !a.contains("s3cr")));
        assert_eq!(
            start_input(whole.stdin.as_deref().unwrap()),
            Some((script.clone(), env.clone()))
        );
        let mut cut = whole.clone();
        let input = cut.stdin.as_mut().unwrap();
        input.truncate(input.len() - 4);
        let out = run(&root, &cut, true);
        assert!(!out.status.success(), "{out:?}");
        assert!(!std::path::Path::new(&dir).exists());
        assert_eq!(parse_start(&sh(&root, &whole)), Some(Started::Yes));
        let (state, log) = wait_exit(&root, &dir);
        assert_eq!(state, State::Exited(0));
        assert_eq!(log, b"s3cr'et\n$(x)");
        assert!(!std::path::Path::new(&dir).join("env").exists());
        // Nothing but the attempt's directory is left beside it.
        let left: Vec<_> = std::fs::read_dir(root.join("jobs")).unwrap().collect();
        assert_eq!(left.len(), 1, "{left:?}");
        let _ = std::fs::remove_dir_all(&root);
    }

    /// The job's files are made with the pod's umask; only its
    /// environment file (secrets) was private.
    #[test]
    fn the_job_keeps_the_pods_umask() {
        let (root, dir) = ready_node("umask", "3.0");
        sh(&root, &start(&dir, "umask", &[]));
        let (_, log) = wait_exit(&root, &dir);
        let pods = Command::new("bash").args(["-c", "umask"]).output().unwrap();
        assert_eq!(log, pods.stdout);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A signal that comes before the start (a start late, after its
    /// attempt was stopped) takes the attempt's marker: the start starts
    /// nothing, and the attempt reads as gone.
    #[test]
    fn a_signal_before_the_start_keeps_it_from_running() {
        let (root, dir) = ready_node("early-signal", "2.0");
        sh(&root, &signal(&dir, false));
        assert_eq!(
            parse_start(&sh(&root, &start(&dir, "echo ran > ran", &[]))),
            Some(Started::Yes)
        );
        let (state, _) = parse_poll(&sh(&root, &poll(&dir, 0))).unwrap();
        assert_eq!(state, State::Vanished);
        assert!(!root.join("ran").exists());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_signalled_job_ends() {
        let (root, dir) = ready_node("signal", "8.0");
        // Signalled at once, before the job's shell could have set its
        // trap: still ended with its exit code.
        sh(&root, &start(&dir, "sleep 30", &[]));
        sh(&root, &signal(&dir, false));
        let (state, _) = wait_exit(&root, &dir);
        assert_eq!(state, State::Exited(143));
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn answers_that_are_not_ours_are_refused() {
        assert_eq!(parse_start("hello"), None);
        assert_eq!(parse_poll("exit x\n"), None);
        assert_eq!(parse_poll("running\n!!\n"), None);
        assert_eq!(
            parse_poll("exit 3\naGk=\n"),
            Some((State::Exited(3), b"hi".to_vec()))
        );
    }
}
