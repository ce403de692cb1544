//! Standard output and standard error of the subcommands.
//!
//! A reader that goes away (`skyc status | head -1`) ends skyc as it ends
//! standard tools: by SIGPIPE, quietly, with no message and no panic. Any
//! other failure to write standard output is an error (exit 2); one to
//! write standard error is ignored, as there is nowhere left to say it.

use std::io::{self, Write};

/// Prints to standard output; see the module's docs for write errors.
macro_rules! out {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::write!($crate::cli::out::stdout(), $($arg)*);
    }};
}

/// Prints a line to standard output.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!($crate::cli::out::stdout(), $($arg)*);
    }};
}

/// Prints a line to standard error.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!($crate::cli::out::stderr(), $($arg)*);
    }};
}

pub(crate) use {errln, out, outln};

/// Prints `value` to standard output as pretty JSON (`--json`).
pub(crate) fn json(value: &impl serde::Serialize) {
    out!(
        "{}\n",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// Standard output: a closed pipe ends the process quietly.
pub(crate) fn stdout() -> Stream<io::StdoutLock<'static>> {
    Stream {
        inner: io::stdout().lock(),
        on_error: fail_stdout,
    }
}

/// Standard error: a closed pipe ends the process quietly.
pub(crate) fn stderr() -> Stream<io::StderrLock<'static>> {
    Stream {
        inner: io::stderr().lock(),
        on_error: |e| e,
    }
}

/// A writer whose broken pipe is the end of the process.
pub(crate) struct Stream<W> {
    inner: W,
    on_error: fn(io::Error) -> io::Error,
}

impl<W: Write> Write for Stream<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf).map_err(|e| self.fail(e))
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.inner.write_all(buf).map_err(|e| self.fail(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().map_err(|e| self.fail(e))
    }
}

impl<W> Stream<W> {
    fn fail(&self, e: io::Error) -> io::Error {
        if e.kind() == io::ErrorKind::BrokenPipe {
            broken_pipe();
        }
        (self.on_error)(e)
    }
}

/// Ends the process as SIGPIPE's default action would (Rust ignores
/// SIGPIPE, so the write failed instead of the process ending).
pub(crate) fn broken_pipe() -> ! {
    let _ = signal_hook::low_level::emulate_default_handler(signal_hook::consts::SIGPIPE);
    std::process::exit(128 + signal_hook::consts::SIGPIPE);
}

/// Any other failure to write standard output: the output is incomplete,
/// and the exit status must say so.
fn fail_stdout(e: io::Error) -> io::Error {
    let _ = writeln!(io::stderr(), "error: writing standard output: {e}");
    std::process::exit(i32::from(super::USAGE));
}
