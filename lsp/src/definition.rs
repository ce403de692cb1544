//! Go to definition, and the hostnames it starts from: a group hostname in
//! a script or env value (`trainer-1.${SKYPILOT_JOBGROUP_NAME}`), or a task
//! named in `primary_tasks` or as a key of `termination_delay`, leads to
//! that task's `name`.

use crate::context::{self, DocumentKind, Segment, Slot};
use crate::document::Document;
use crate::outline::Task;
use lsp_types::{Location, Position, Range, Uri};
use skyc_compiler::editor::find_references;

/// A group hostname under the cursor.
pub(crate) struct Hostname<'a> {
    pub(crate) task: &'a Task,
    /// The node index, when written as a number.
    pub(crate) index: Option<u64>,
    /// The hostname's `{task}-{i}` part, as a byte range of the text.
    pub(crate) span: std::ops::Range<usize>,
}

/// The hostname at `offset`, naming a task of this file.
pub(crate) fn hostname_at(document: &Document, offset: usize) -> Option<Hostname<'_>> {
    let text = document.text();
    let line_start = text[..offset].rfind(['\n', '\r']).map_or(0, |i| i + 1);
    let line_end = text[offset..]
        .find(['\n', '\r'])
        .map_or(text.len(), |i| offset + i);
    let line = &text[line_start..line_end];
    let outline = document.outline();
    let group = outline.group.as_deref().unwrap_or_default();
    // A hostname never spans lines: the line is all there is to read,
    // whether the scalar is plain, quoted or a block.
    find_references(line, group)
        .into_iter()
        .find(|r| (r.task.start..=r.index.end).contains(&(offset - line_start)))
        .and_then(|r| {
            let task = outline.task(&line[r.task.clone()])?;
            Some(Hostname {
                task,
                index: r.literal_index,
                span: line_start + r.task.start..line_start + r.index.end,
            })
        })
}

/// The task named at `offset` in the header (`primary_tasks`,
/// `termination_delay`).
fn header_task_at(document: &Document, offset: usize) -> Option<&Task> {
    let text = document.text();
    let context = context::at(text, offset)?;
    // `[a, b]` or a block list: either way, an item of `primary_tasks`.
    let in_primary =
        context.path_is(&["primary_tasks"]) && context.path.last() == Some(&Segment::Item);
    let in_delay = context.slot == Slot::Key && context.path_is(&["termination_delay"]);
    if context.kind == DocumentKind::Task || !(in_primary || in_delay) {
        return None;
    }
    let word_end = text[offset..]
        .find(|c: char| c.is_whitespace() || matches!(c, ',' | ']' | ':' | '"' | '\'' | '#'))
        .map_or(text.len(), |i| offset + i);
    let word = &text[context.word.start..word_end];
    document.outline().task(word)
}

pub(crate) fn definition(document: &Document, uri: &Uri, position: Position) -> Option<Location> {
    if !document.is_readable() {
        return None;
    }
    let offset = document.offset(position);
    let task = match hostname_at(document, offset) {
        Some(hostname) => hostname.task,
        None => header_task_at(document, offset)?,
    };
    Some(Location::new(uri.clone(), document.range(task.name_span)))
}

/// The range of a hostname, for hover.
pub(crate) fn range(document: &Document, span: &std::ops::Range<usize>) -> Range {
    Range::new(document.position(span.start), document.position(span.end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use skyc_compiler::Options;

    const GROUP: &str = "name: g\nexecution: parallel\nprimary_tasks:\n  - b\n---\nname: a\nrun: curl b-0.g:80 && curl \"b-1.${SKYPILOT_JOBGROUP_NAME}\"\n---\nname: b\nnum_nodes: 2\n";

    fn target(text: &str, needle: &str, extra: usize) -> Option<Range> {
        let document = Document::new(text.to_owned(), 1, Options::default());
        let uri: Uri = "file:///g.yaml".parse().unwrap();
        let at = document.position(text.find(needle).unwrap() + extra);
        definition(&document, &uri, at).map(|l| l.range)
    }

    #[test]
    fn hostnames_and_header_names_lead_to_the_task() {
        let b = Some(Range::new(Position::new(8, 6), Position::new(8, 7)));
        // The literal group name and the quoted variable form.
        assert_eq!(target(GROUP, "b-0.g", 0), b);
        assert_eq!(target(GROUP, "b-1.$", 2), b);
        // A block list item of `primary_tasks`.
        assert_eq!(target(GROUP, "  - b", 4), b);
        assert_eq!(target(GROUP, "curl b", 1), None);
    }
}
