//! Diagnostics for people, on standard error: the rendered list, then one
//! summary line. `check`, `build` and `run` end the same way.

use super::out::errln;
use skyc_compiler::render::{Format, render};
use skyc_compiler::{Compilation, Severity};
use std::io::{IsTerminal, Write};

/// Prints the diagnostics of `compilations` and the summary line. A clean
/// result prints nothing unless `say_ok` (a person at a terminal asked).
pub(crate) fn human(compilations: &[Compilation], color: bool, say_ok: bool) {
    let rendered = render(Format::Human { color }, compilations);
    let _ = super::out::stderr().write_all(rendered.as_bytes());
    if let Some(line) = summary(compilations, say_ok) {
        errln!("{line}");
    }
}

/// `failed: 1 error, 0 warnings in 1 file`, `ok: 0 errors, 2 warnings in
/// 1 file`, or (when asked) `ok: no problems in 2 files`.
pub(crate) fn summary(compilations: &[Compilation], say_ok: bool) -> Option<String> {
    let count = |s: Severity| {
        compilations
            .iter()
            .flat_map(|c| &c.diagnostics)
            .filter(|d| d.severity == s)
            .count()
    };
    let (errors, warnings) = (count(Severity::Error), count(Severity::Warning));
    let files = compilations.len();
    if errors + warnings == 0 {
        return say_ok.then(|| format!("ok: no problems in {files} file{}", plural(files)));
    }
    let failed = compilations.iter().any(Compilation::has_errors);
    Some(format!(
        "{}: {errors} error{}, {warnings} warning{} in {files} file{}",
        if failed { "failed" } else { "ok" },
        plural(errors),
        plural(warnings),
        plural(files),
    ))
}

/// Whether a person reads standard error (so a clean check may say so).
pub(crate) fn at_terminal() -> bool {
    std::io::stderr().is_terminal()
}

pub(crate) fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
