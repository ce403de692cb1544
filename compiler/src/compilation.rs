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
