//! Hover: what a field means and the forms its value takes (the schemas'
//! descriptions), and which node a group hostname names.

use crate::context::{self, Segment, Slot};
use crate::definition;
use crate::document::Document;
use crate::schema;
use lsp_types::{Hover, HoverContents, MarkupContent, MarkupKind, Position, Range};

pub(crate) fn hover(document: &Document, position: Position) -> Option<Hover> {
    if !document.is_readable() {
        return None;
    }
    let offset = document.offset(position);
    if let Some(h) = definition::hostname_at(document, offset) {
        let nodes = h.task.num_nodes.unwrap_or(1);
        let node = match h.index {
            Some(i) if i < nodes.unsigned_abs() => format!("node {i} of task `{}`", h.task.name),
            Some(i) => format!(
                "no node {i}: task `{}` has nodes 0 to {}",
                h.task.name,
                nodes - 1
            ),
            None => format!("a node of task `{}`", h.task.name),
        };
        let text = format!("{node} ({nodes} node{})", if nodes == 1 { "" } else { "s" });
        return Some(markdown(text, Some(definition::range(document, &h.span))));
    }
    field(document, offset)
}

/// The field whose key is under the cursor.
fn field(document: &Document, offset: usize) -> Option<Hover> {
    let text = document.text();
    let (key_start, key_end) = key_at(text, offset)?;
    let context = context::at(text, key_start)?;
    if context.slot != Slot::Key {
        return None;
    }
    let key = text[key_start..key_end].trim_matches(['"', '\'']);
    let mut path = context.path.clone();
    path.push(Segment::Key(key.to_owned()));
    let schemas = schema::at(context.kind, &path);
    let schema = *schemas.first()?;
    let dotted: Vec<&str> = path
        .iter()
        .filter_map(|s| match s {
            Segment::Key(k) => Some(k.as_str()),
            Segment::Item => None,
        })
        .collect();
    let mut text = format!("**`{}`**", dotted.join("."));
    if let Some(description) = schema::description(schema) {
        text.push_str("\n\n");
        text.push_str(description);
    }
    let forms = schema::forms(schema);
    if !forms.is_empty() {
        text.push_str("\n\nTakes ");
        text.push_str(&forms.join(", or "));
        text.push('.');
    }
    Some(markdown(
        text,
        Some(definition::range(document, &(key_start..key_end))),
    ))
}

/// The block mapping key around `offset`: the text before `: ` on its
/// line, after indentation and sequence dashes.
fn key_at(text: &str, offset: usize) -> Option<(usize, usize)> {
    let line_start = text[..offset].rfind(['\n', '\r']).map_or(0, |i| i + 1);
    let line_end = text[offset..]
        .find(['\n', '\r'])
        .map_or(text.len(), |i| offset + i);
    let line = &text[line_start..line_end];
    let mut start = line.len() - line.trim_start_matches([' ', '-']).len();
    // `- -` nests; a dash glued to a word is part of it.
    while start > 0 && line.as_bytes()[start - 1] == b'-' {
        start -= 1;
    }
    let colon = line[start..]
        .match_indices(':')
        .map(|(i, _)| start + i)
        .find(|&i| line[i + 1..].is_empty() || line[i + 1..].starts_with([' ', '\t']))?;
    let (key_start, key_end) = (line_start + start, line_start + colon);
    (key_start <= offset && offset <= key_end).then_some((key_start, key_end))
}

fn markdown(value: String, range: Option<Range>) -> Hover {
    Hover {
        contents: HoverContents::Markup(MarkupContent {
            kind: MarkupKind::Markdown,
            value,
        }),
        range,
    }
}
