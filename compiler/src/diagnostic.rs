//! The one diagnostic model every stage reports through and every renderer
//! reads.

use crate::{Rule, Source, Span};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// A span with an optional message, drawn under the source line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    pub span: Span,
    pub message: String,
}

/// One finding: which rule, where, and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub rule: Rule,
    pub severity: Severity,
    pub message: String,
    pub primary: Label,
    pub secondary: Vec<Label>,
    pub help: Option<String>,
    /// An edit that resolves the finding, for editors to apply.
    pub fix: Option<Fix>,
}

/// A replacement that fixes a diagnostic: the scalar at `span`, which
/// reads `original`, should read `replacement` (a "did you mean").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fix {
    pub span: Span,
    pub original: String,
    pub replacement: String,
}

impl Fix {
    /// The bytes to replace in `source`: the span, or the inside of its
    /// quotes. `None` when the text there is not `original` as written
    /// (an escape, an alias, a scalar the span does not isolate), since
    /// replacing it would change more than the misspelt name.
    pub fn edit(&self, source: &Source) -> Option<Span> {
        let text = source.slice(self.span);
        if text == self.original {
            return Some(self.span);
        }
        let quoted = ['"', '\'']
            .into_iter()
            .any(|q| text.len() >= 2 && text.starts_with(q) && text.ends_with(q));
        (quoted && text[1..text.len() - 1] == self.original)
            .then(|| self.span.slice(1, text.len() - 1))
    }
}

impl Diagnostic {
    /// A diagnostic of `rule` at `span`, with the rule's default severity.
    pub fn new(rule: Rule, span: Span, message: impl Into<String>) -> Self {
        Self {
            rule,
            severity: rule.severity(),
            message: message.into(),
            primary: Label {
                span,
                message: String::new(),
            },
            secondary: Vec::new(),
            help: None,
            fix: None,
        }
    }

    /// Sets the text drawn under the primary span.
    #[must_use]
    pub fn label(mut self, message: impl Into<String>) -> Self {
        self.primary.message = message.into();
        self
    }

    /// Adds a secondary span, e.g. "first defined here".
    #[must_use]
    pub fn with_secondary(mut self, span: Span, message: impl Into<String>) -> Self {
        self.secondary.push(Label {
            span,
            message: message.into(),
        });
        self
    }

    #[must_use]
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// "did you mean `suggestion`?" as help, and as a fix replacing the
    /// misspelt `found` written at `span`.
    #[must_use]
    pub fn did_you_mean(mut self, span: Span, found: &str, suggestion: &str) -> Self {
        self.help = Some(format!("did you mean `{suggestion}`?"));
        self.fix = Some(Fix {
            span,
            original: found.to_owned(),
            replacement: suggestion.to_owned(),
        });
        self
    }

    #[must_use]
    pub fn severity(mut self, severity: Severity) -> Self {
        self.severity = severity;
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// The most diagnostics one file reports. A file with more is broken
/// wholesale (a generated file gone wrong, the wrong file); listing every
/// problem would cost minutes and gigabytes and help no one.
pub const MAX_DIAGNOSTICS: usize = 200;

/// Collects diagnostics for one source, in the order they are found, up to
/// [`MAX_DIAGNOSTICS`]; the rest are counted.
#[derive(Debug, Default)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
    errors: usize,
    dropped: usize,
}

impl Diagnostics {
    pub fn push(&mut self, diagnostic: Diagnostic) {
        if diagnostic.is_error() {
            self.errors += 1;
        }
        if self.is_full() {
            self.dropped += 1;
        } else {
            self.items.push(diagnostic);
        }
    }

    /// Counts an error found past the cap without building it.
    pub fn count_unshown_error(&mut self) {
        self.errors += 1;
        self.dropped += 1;
    }

    /// Whether any error was pushed (counted ones included).
    pub fn has_errors(&self) -> bool {
        self.errors > 0
    }

    /// Whether an error kept so far starts within `span`.
    pub(crate) fn has_error_within(&self, span: Span) -> bool {
        self.items.iter().any(|d| {
            d.is_error()
                && (span.start..span.end.max(span.start + 1)).contains(&d.primary.span.start)
        })
    }

    /// No more diagnostics will be kept: producers may skip the work of
    /// building them.
    pub fn is_full(&self) -> bool {
        self.items.len() >= MAX_DIAGNOSTICS
    }

    /// Sorted by position, then rule; duplicates (same rule, span and
    /// message, e.g. from a merged alias) dropped; a last note says how
    /// many were not kept.
    pub fn into_sorted(mut self) -> Vec<Diagnostic> {
        self.items.sort_by(|a, b| {
            (a.primary.span.start, a.primary.span.end, a.rule, &a.message).cmp(&(
                b.primary.span.start,
                b.primary.span.end,
                b.rule,
                &b.message,
            ))
        });
        self.items.dedup_by(|a, b| {
            a.rule == b.rule && a.primary.span == b.primary.span && a.message == b.message
        });
        if self.dropped > 0 {
            let span = self
                .items
                .last()
                .map_or(Span::default(), |d| d.primary.span);
            self.items.push(
                Diagnostic::new(
                    Rule::TooManyDiagnostics,
                    span,
                    format!(
                        "{} more problems not shown: skyc reports the first {MAX_DIAGNOSTICS} of a file",
                        self.dropped
                    ),
                )
                .label("the last one shown"),
            );
        }
        self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fix_edits_the_name_as_written() {
        let source = Source::new("f", "a: runn\nb: \"runn\"\nc: 'ru\\nn'\n");
        let fix = |start: usize, end: usize| Fix {
            span: Span::new(start, end),
            original: "runn".to_owned(),
            replacement: "run".to_owned(),
        };
        // Plain: the span itself; quoted: inside the quotes.
        assert_eq!(fix(3, 7).edit(&source), Some(Span::new(3, 7)));
        assert_eq!(fix(11, 17).edit(&source), Some(Span::new(12, 16)));
        // Written otherwise (an escape, a wider span): no edit.
        assert_eq!(fix(21, 28).edit(&source), None);
        assert_eq!(fix(0, 7).edit(&source), None);
    }
}
