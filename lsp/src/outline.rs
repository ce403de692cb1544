//! The file's group and tasks, read from the compiler's spanned YAML tree:
//! what completion offers as task names and what go to definition jumps to.

use skyc_compiler::yaml::{Budget, Document, Node, Reader};
use skyc_compiler::{Diagnostics, Span};

/// A task of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Task {
    pub(crate) name: String,
    /// The span of the `name` value.
    pub(crate) name_span: Span,
    pub(crate) num_nodes: Option<i64>,
}

#[derive(Debug, Default)]
pub(crate) struct Outline {
    /// The header's `name`, when the file is a Job Group.
    pub(crate) group: Option<String>,
    pub(crate) tasks: Vec<Task>,
    /// Whether the whole text was read (no YAML error stopped the reader).
    pub(crate) complete: bool,
}

impl Outline {
    /// Reads `text` (at most the compiler's file limit). On a YAML error,
    /// what the documents read before it hold.
    pub(crate) fn read(text: &str) -> Self {
        if text.len() > skyc_compiler::MAX_FILE_BYTES {
            return Self::default();
        }
        let mut diagnostics = Diagnostics::default();
        let documents = Reader::read(text, Budget::default(), &mut diagnostics);
        let complete = !diagnostics.has_errors();
        let is_group = documents.len() >= 2
            && documents[0].root.get("execution").and_then(Node::as_str) == Some("parallel");
        let (group, tasks): (Option<String>, &[Document]) = if is_group {
            let name = documents[0].root.get("name").and_then(Node::as_str);
            (name.map(str::to_owned), &documents[1..])
        } else {
            (None, &documents[..])
        };
        let tasks = tasks
            .iter()
            .filter_map(|doc| {
                let name = doc.root.get("name")?;
                Some(Task {
                    name: name.as_str()?.to_owned(),
                    name_span: name.span,
                    num_nodes: doc.root.get("num_nodes").and_then(Node::as_i64),
                })
            })
            .collect();
        Self {
            group,
            tasks,
            complete,
        }
    }

    pub(crate) fn task(&self, name: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.name == name)
    }
}
