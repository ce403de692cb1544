//! An open document: its text and version, and what is computed from them
//! (the compilation, the outline), each once per version, on first use.

use crate::lines::LineIndex;
use crate::outline::{Outline, Task};
use lsp_types::{Position, Range, TextDocumentContentChangeEvent};
use skyc_compiler::{Compilation, Options, Span, compile};
use std::sync::OnceLock;

#[derive(Debug)]
pub(crate) struct Document {
    pub(crate) version: i32,
    text: String,
    lines: LineIndex,
    compilation: OnceLock<Compilation>,
    outline: OnceLock<Outline>,
    /// The tasks of the last version whose YAML read through, for
    /// completing task names while the text is mid-edit.
    last_tasks: Vec<Task>,
    options: Options,
}

impl Document {
    pub(crate) fn new(text: String, version: i32, options: Options) -> Self {
        Self {
            version,
            lines: LineIndex::new(&text),
            text,
            compilation: OnceLock::new(),
            outline: OnceLock::new(),
            last_tasks: Vec::new(),
            options,
        }
    }

    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// Applies `didChange` content changes in order: a change without a
    /// range replaces the text, one with a range replaces that range.
    pub(crate) fn change(&mut self, version: i32, changes: Vec<TextDocumentContentChangeEvent>) {
        if let Some(outline) = self.outline.get()
            && outline.complete
        {
            self.last_tasks.clone_from(&outline.tasks);
        }
        for change in changes {
            match change.range {
                None => self.text = change.text,
                Some(range) => {
                    let start = self.offset(range.start);
                    let end = self.offset(range.end).max(start);
                    self.text.replace_range(start..end, &change.text);
                }
            }
            self.lines = LineIndex::new(&self.text);
        }
        self.version = version;
        self.compilation = OnceLock::new();
        self.outline = OnceLock::new();
    }

    pub(crate) fn compilation(&self) -> &Compilation {
        self.compilation
            .get_or_init(|| compile("", self.text.as_bytes(), &self.options))
    }

    pub(crate) fn outline(&self) -> &Outline {
        self.outline.get_or_init(|| Outline::read(&self.text))
    }

    /// The tasks to offer by name: this version's, or while its YAML does
    /// not read through, those of the last version that did.
    pub(crate) fn task_names(&self) -> &[Task] {
        let outline = self.outline();
        if outline.complete || self.last_tasks.is_empty() {
            &outline.tasks
        } else {
            &self.last_tasks
        }
    }

    pub(crate) fn offset(&self, position: Position) -> usize {
        self.lines.offset(&self.text, position)
    }

    pub(crate) fn position(&self, offset: usize) -> Position {
        self.lines.position(&self.text, offset)
    }

    pub(crate) fn range(&self, span: Span) -> Range {
        self.lines
            .range(&self.text, span.start as usize, span.end as usize)
    }

    /// Whether the editor features read this document: not past the
    /// compiler's file limit (its diagnostics say it is too large).
    pub(crate) fn is_readable(&self) -> bool {
        self.text.len() <= skyc_compiler::MAX_FILE_BYTES
    }
}
