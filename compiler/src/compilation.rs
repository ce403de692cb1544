//! The whole front end, bytes in: read, classify, validate, analyze.

use crate::analyzer::{Analyzer, Options};
use crate::ir::Group;
use crate::yaml::{Budget, Reader};
use crate::{Diagnostic, Diagnostics, Rule, Source, Span};

/// The largest file skyc reads. Real group files are a few KB; the cap
/// keeps hostile input cheap.
pub const MAX_FILE_BYTES: usize = 4 << 20;

/// The result of compiling one file.
#[derive(Debug)]
pub struct Compilation {
    pub source: Source,
    /// Sorted by position.
    pub diagnostics: Vec<Diagnostic>,
    /// The IR, present when there is no error.
    pub group: Option<Group>,
}

impl Compilation {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }
}

/// Compiles the file `name` with contents `bytes`.
pub fn compile(name: &str, bytes: &[u8], options: &Options) -> Compilation {
    let mut diagnostics = Diagnostics::default();
    if bytes.len() > MAX_FILE_BYTES {
        diagnostics.push(
            Diagnostic::new(
                Rule::FileTooLarge,
                Span::at(0),
                // The CLI reads one byte past the limit, so the size shown
                // would be that, not the file's.
                format!(
                    "the file is larger than {} MiB, the most skyc reads of a group file",
                    MAX_FILE_BYTES >> 20
                ),
            )
            .label("file too large"),
        );
        return done(Source::new(name, ""), diagnostics, None);
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let at = e.valid_up_to();
            let source = Source::new(name, String::from_utf8_lossy(bytes).into_owned());
            // The lossy text keeps valid prefixes byte-for-byte; the bad
            // bytes became one U+FFFD there, so the span covers that char.
            diagnostics.push(
                Diagnostic::new(
                    Rule::InvalidUtf8,
                    Span::new(at, at + char::REPLACEMENT_CHARACTER.len_utf8()),
                    format!("the file is not UTF-8 text: invalid byte at offset {at}"),
                )
                .label("not UTF-8"),
            );
            return done(source, diagnostics, None);
        }
    };
    let source = Source::new(name, text);
    let documents = Reader::read(source.text(), Budget::default(), &mut diagnostics);
    if diagnostics.has_errors() {
        return done(source, diagnostics, None);
    }
    let group = Analyzer::analyze(&source, &documents, options, &mut diagnostics);
    done(source, diagnostics, group)
}

fn done(source: Source, diagnostics: Diagnostics, group: Option<Group>) -> Compilation {
    let diagnostics = diagnostics.into_sorted();
    let has_errors = diagnostics.iter().any(Diagnostic::is_error);
    Compilation {
        source,
        diagnostics,
        group: if has_errors { None } else { group },
    }
}

impl Compilation {
    /// What must hold of every compilation, whatever the input: each
    /// label's span lies within the text on character boundaries; the
    /// verdict, the diagnostics and the IR agree; the IR serialises; every
    /// format renders, the JSON ones as valid JSON. Returns the first
    /// violation. The fuzz target and the randomized tests check this.
    pub fn check_invariants(&self) -> Result<(), String> {
        use crate::render::{Format, render};
        let text = self.source.text();
        for d in &self.diagnostics {
            for label in std::iter::once(&d.primary).chain(&d.secondary) {
                let (start, end) = (label.span.start as usize, label.span.end as usize);
                if start > end || end > text.len() {
                    return Err(format!(
                        "{}: span {start}..{end} outside the text ({} bytes)",
                        d.rule,
                        text.len()
                    ));
                }
                if !text.is_char_boundary(start) || !text.is_char_boundary(end) {
                    return Err(format!(
                        "{}: span {start}..{end} splits a character",
                        d.rule
                    ));
                }
            }
        }
        let errors = self.diagnostics.iter().any(Diagnostic::is_error);
        if self.has_errors() != errors || self.group.is_some() == errors {
            return Err(format!(
                "verdict disagrees: {errors} errors listed, an IR {}",
                if self.group.is_some() {
                    "present"
                } else {
                    "absent"
                }
            ));
        }
        if let Some(group) = &self.group {
            serde_json::to_string(group).map_err(|e| format!("the IR does not serialise: {e}"))?;
        }
        let one = std::slice::from_ref(self);
        for format in [
            Format::Human { color: false },
            Format::Human { color: true },
            Format::Json,
            Format::Sarif,
            Format::Github,
        ] {
            let out = render(format, one);
            if matches!(format, Format::Json | Format::Sarif) {
                serde_json::from_str::<serde_json::Value>(&out)
                    .map_err(|e| format!("{format:?} output is not JSON: {e}"))?;
            }
            if format == (Format::Human { color: false })
                && !self.diagnostics.is_empty()
                && !(out.contains("error") || out.contains("warning"))
            {
                return Err("human output lost the diagnostics".to_owned());
            }
        }
        Ok(())
    }
}
