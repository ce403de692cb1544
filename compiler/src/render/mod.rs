//! Renderers: one diagnostic model, many output formats.

mod github;
mod human;
mod json;
mod sarif;

use crate::Compilation;

/// How diagnostics are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Source excerpts with labels, for people.
    Human { color: bool },
    /// One JSON document listing every diagnostic.
    Json,
    /// SARIF 2.1.0, for code-scanning tools.
    Sarif,
    /// GitHub Actions workflow commands (annotations on the PR diff).
    Github,
}

/// Renders the diagnostics of every compilation, in order.
pub fn render(format: Format, compilations: &[Compilation]) -> String {
    match format {
        Format::Human { color } => human::render(compilations, color),
        Format::Json => json::render(compilations),
        Format::Sarif => sarif::render(compilations),
        Format::Github => github::render(compilations),
    }
}

/// 1-based start and end (line, column) of a diagnostic's primary span.
fn region(c: &Compilation, d: &crate::Diagnostic) -> (crate::Position, crate::Position) {
    (
        c.source.position(d.primary.span.start),
        c.source.position(d.primary.span.end),
    )
}
