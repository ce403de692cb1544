//! The whole front end, bytes in: read, classify, validate, analyze.

use crate::analyzer::{Analyzer, Options};
use crate::ir::{Group, Volume};
use crate::yaml::{Budget, Document, Reader};
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

/// A volume file compiled (`skyc volume apply`).
#[derive(Debug)]
pub struct VolumeCompilation {
    pub source: Source,
    pub diagnostics: Vec<Diagnostic>,
    /// Present when there is no error.
    pub volume: Option<Volume>,
}

/// Compiles the volume file `name` with contents `bytes`.
pub fn compile_volume(name: &str, bytes: &[u8]) -> VolumeCompilation {
    let mut diagnostics = Diagnostics::default();
    let (source, volume) = match read(name, bytes, &mut diagnostics) {
        Ok((source, documents)) => {
            let volume = crate::analyzer::volume::analyze(&documents, &mut diagnostics);
            (source, volume)
        }
        Err(source) => (source, None),
    };
    let diagnostics = diagnostics.into_sorted();
    let has_errors = diagnostics.iter().any(Diagnostic::is_error);
    VolumeCompilation {
        source,
        diagnostics,
        volume: if has_errors { None } else { volume },
    }
}

/// Compiles the file `name` with contents `bytes`.
pub fn compile(name: &str, bytes: &[u8], options: &Options) -> Compilation {
    let mut diagnostics = Diagnostics::default();
    match read(name, bytes, &mut diagnostics) {
        Ok((source, documents)) => {
            let group = Analyzer::analyze(&source, &documents, options, &mut diagnostics);
            done(source, diagnostics, group)
        }
        Err(source) => done(source, diagnostics, None),
    }
}

/// Reads `bytes` into YAML documents: bounded, UTF-8, within the reader's
/// budgets. `Err`: it could not (the diagnostics say why), with the source
/// they point into.
fn read(
    name: &str,
    bytes: &[u8],
    diagnostics: &mut Diagnostics,
) -> Result<(Source, Vec<Document>), Source> {
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
        return Err(Source::new(name, ""));
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
            return Err(source);
        }
    };
    let source = Source::new(name, text);
    let documents = Reader::read(source.text(), Budget::default(), diagnostics);
    if diagnostics.has_errors() {
        return Err(source);
    }
    Ok((source, documents))
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
