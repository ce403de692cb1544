//! `--format github`: workflow commands that GitHub Actions shows as
//! annotations on the changed lines.

use super::region;
use crate::{Compilation, Severity};
use std::fmt::Write;

pub(super) fn render(compilations: &[Compilation]) -> String {
    let mut out = String::new();
    for c in compilations {
        for d in &c.diagnostics {
            let (start, end) = region(c, d);
            let command = match d.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            let mut message = d.message.clone();
            if let Some(help) = &d.help {
                message.push_str("\nhelp: ");
                message.push_str(help);
            }
            let _ = writeln!(
                out,
                "::{command} file={},line={},col={},endLine={},endColumn={},title={}::{}",
                property(c.source.name()),
                start.line,
                start.column,
                end.line,
                end.column,
                property(&format!("skyc {}", d.rule.name())),
                data(&message),
            );
        }
    }
    out
}

/// Escapes a message: `%`, CR and LF.
fn data(s: &str) -> String {
    s.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes a property value: as data, plus `:` and `,`.
fn property(s: &str) -> String {
    data(s).replace(':', "%3A").replace(',', "%2C")
}
