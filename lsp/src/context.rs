//! Where the cursor is: which document, under which keys, and whether a
//! key or a value is being written. Read from the text's lines and
//! indentation, not from the parsed tree: while a user types, the YAML is
//! often incomplete (`primary_tasks: [tr`), and the reader stops there.

use std::ops::Range;

/// One step of the path from a document's root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Segment {
    Key(String),
    /// An item of a sequence.
    Item,
}

/// What the cursor is writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A key of the mapping at `path`, or (in a sequence item, or under a
    /// key whose value is not a mapping) a bare value there.
    Key,
    /// The value at `path` (whose last key is the field).
    Value,
}

/// Which kind of document the cursor is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DocumentKind {
    Header,
    Task,
    /// The first document of a file with no sign yet of being a group or a
    /// task: either.
    Either,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Context {
    pub(crate) kind: DocumentKind,
    pub(crate) path: Vec<Segment>,
    pub(crate) slot: Slot,
    /// The partial word before the cursor, as a byte range of the text.
    pub(crate) word: Range<usize>,
    /// Keys already written in the same mapping (for a key slot).
    pub(crate) siblings: Vec<String>,
}

impl Context {
    /// The last key of the path.
    pub(crate) fn field(&self) -> Option<&str> {
        self.path.iter().rev().find_map(|s| match s {
            Segment::Key(k) => Some(k.as_str()),
            Segment::Item => None,
        })
    }

    pub(crate) fn path_is(&self, keys: &[&str]) -> bool {
        let names: Vec<&str> = self
            .path
            .iter()
            .filter_map(|s| match s {
                Segment::Key(k) => Some(k.as_str()),
                Segment::Item => None,
            })
            .collect();
        names == keys
    }
}

/// Keys the header has and a task has not.
const HEADER_ONLY: [&str; 4] = [
    "execution",
    "primary_tasks",
    "termination_delay",
    "inter_connection",
];

/// The context at byte `offset` of `text`; `None` in a comment or on a
/// document marker.
pub(crate) fn at(text: &str, offset: usize) -> Option<Context> {
    let offset = floor_boundary(text, offset);
    let line_start = text[..offset].rfind(['\n', '\r']).map_or(0, |i| i + 1);
    let line_end = text[offset..]
        .find(['\n', '\r'])
        .map_or(text.len(), |i| offset + i);
    let line = &text[line_start..line_end];
    let column = offset - line_start;
    let before = &line[..column];
    if is_document_marker(line) || in_comment(before) {
        return None;
    }
    let documents = Documents::scan(text);
    let (doc_index, doc_start) = documents.containing(line_start);
    let kind = documents.kind(doc_index);
    let above = &text[doc_start..line_start];

    let word_start = before
        .char_indices()
        .rev()
        .take_while(|&(_, c)| !is_word_break(c))
        .last()
        .map_or(column, |(i, _)| i);
    let word = line_start + word_start..offset;

    // The dashes of sequence items opening this line, then its content.
    let indent = before.len() - before.trim_start_matches(' ').len();
    let mut items = Vec::new();
    let mut content = indent;
    while let Some(rest) = before[content..].strip_prefix('-')
        && rest.starts_with([' ', '\t'])
    {
        items.push(content);
        content += 1 + (rest.len() - rest.trim_start().len());
    }
    let mut siblings = Vec::new();
    let mut path = match items.first() {
        Some(&dash) => ancestors(above, dash, true, &mut siblings),
        None => ancestors(above, content, false, &mut siblings),
    };
    path.extend(items.iter().map(|_| Segment::Item));
    let rest = &before[content..];
    let slot = match key_colon(rest) {
        Some(colon) => {
            let key = unquote(rest[..colon].trim());
            path.push(Segment::Key(key.to_owned()));
            flow(&rest[colon + 1..], &mut path)
        }
        None => {
            if items.is_empty() {
                // Keys written below the cursor in the same mapping.
                let below = &text[line_end..documents.end_of(doc_index)];
                siblings.extend(same_level_keys(below, content));
            } else {
                siblings.clear();
            }
            Slot::Key
        }
    };
    if slot == Slot::Value {
        siblings.clear();
    }
    Some(Context {
        kind,
        path,
        slot,
        word,
        siblings,
    })
}

/// The path of the mapping or sequence holding a node whose content starts
/// at `column`, read from the lines above it (nearest first). With
/// `allow_equal`, the node is a sequence item, whose owning key may sit at
/// the same column (`key:\n- item`). Keys at `column` before the owner are
/// the node's siblings.
fn ancestors(
    above: &str,
    column: usize,
    mut allow_equal: bool,
    siblings: &mut Vec<String>,
) -> Vec<Segment> {
    let mut target = column;
    let mut path = Vec::new();
    let mut collecting = !allow_equal;
    for line in above.lines().rev() {
        // Nothing is left of column 0; only siblings remain to be found.
        if target == 0 && !allow_equal && !collecting {
            break;
        }
        let Some(shape) = Shape::of(line) else {
            continue;
        };
        let elements = shape.elements();
        let Some(pick) = elements.iter().rposition(|&(c, ref e)| {
            c < target || (allow_equal && c == target && matches!(e, Segment::Key(_)))
        }) else {
            if collecting
                && let Some((c, Segment::Key(k))) = elements.first()
                && *c == target
            {
                siblings.push(k.clone());
            }
            continue;
        };
        if collecting {
            for (c, e) in &elements[pick + 1..] {
                if let (true, Segment::Key(k)) = (*c == target, e) {
                    siblings.push(k.clone());
                }
            }
        }
        collecting = false;
        path.extend(elements[..=pick].iter().rev().map(|(_, e)| e.clone()));
        let (leftmost, first) = &elements[0];
        target = *leftmost;
        allow_equal = matches!(first, Segment::Item);
    }
    path.reverse();
    path
}

/// Keys at `column` in the lines of `below`, until the block ends.
fn same_level_keys(below: &str, column: usize) -> Vec<String> {
    let mut keys = Vec::new();
    for line in below.lines() {
        if is_document_marker(line) {
            break;
        }
        let Some(shape) = Shape::of(line) else {
            continue;
        };
        let elements = shape.elements();
        match elements.first() {
            Some((c, _)) if *c < column => break,
            Some((c, Segment::Key(k))) if *c == column => keys.push(k.clone()),
            Some((c, Segment::Item)) if *c == column => break,
            _ => {}
        }
    }
    keys
}

/// The slot of a value being written after `key:`, following flow
/// collections (`[a, b`, `{H100: 1, A`) into `path`.
fn flow(value: &str, path: &mut Vec<Segment>) -> Slot {
    #[derive(PartialEq)]
    enum Open {
        Seq,
        Map { key: Option<String> },
    }
    let mut stack: Vec<Open> = Vec::new();
    let mut element_start = 0;
    let mut quote: Option<char> = None;
    for (i, c) in value.char_indices() {
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '[' => {
                stack.push(Open::Seq);
                element_start = i + 1;
            }
            '{' => {
                stack.push(Open::Map { key: None });
                element_start = i + 1;
            }
            ']' | '}' => {
                stack.pop();
            }
            ',' => {
                if let Some(Open::Map { key }) = stack.last_mut() {
                    *key = None;
                }
                element_start = i + 1;
            }
            ':' if value[i + 1..].starts_with([' ', '\t']) || i + 1 == value.len() => {
                if let Some(Open::Map { key }) = stack.last_mut() {
                    *key = Some(unquote(value[element_start..i].trim()).to_owned());
                }
            }
            _ => {}
        }
    }
    let mut slot = Slot::Value;
    for open in stack {
        match open {
            Open::Seq => {
                path.push(Segment::Item);
                slot = Slot::Value;
            }
            Open::Map { key: Some(key) } => {
                path.push(Segment::Key(key));
                slot = Slot::Value;
            }
            Open::Map { key: None } => slot = Slot::Key,
        }
    }
    slot
}

/// A line's structure: indentation, sequence dashes, and its key.
struct Shape<'a> {
    dashes: Vec<usize>,
    /// The key's column and text.
    key: Option<(usize, &'a str)>,
}

impl<'a> Shape<'a> {
    /// `None` for a blank or comment line.
    fn of(line: &'a str) -> Option<Self> {
        let mut at = line.len() - line.trim_start_matches(' ').len();
        let rest = &line[at..];
        if rest.trim().is_empty() || rest.starts_with('#') {
            return None;
        }
        let mut dashes = Vec::new();
        while let Some(after) = line[at..].strip_prefix('-')
            && (after.starts_with([' ', '\t']) || after.is_empty())
        {
            dashes.push(at);
            at += 1 + (after.len() - after.trim_start().len());
        }
        let content = &line[at..];
        let key = key_colon(content).map(|colon| (at, unquote(content[..colon].trim())));
        Some(Self { dashes, key })
    }

    /// Its elements left to right: an item per dash, then the key.
    fn elements(&self) -> Vec<(usize, Segment)> {
        let mut out: Vec<(usize, Segment)> =
            self.dashes.iter().map(|&d| (d, Segment::Item)).collect();
        if let Some((column, key)) = self.key {
            out.push((column, Segment::Key(key.to_owned())));
        }
        out
    }
}

/// Where the `:` ending a block mapping key is in `content`: followed by
/// white space or the end, outside quotes and flow collections, before
/// any comment.
fn key_colon(content: &str) -> Option<usize> {
    if content.starts_with(['[', '{', '|', '>', '&', '*', '!']) {
        return None;
    }
    let mut quote: Option<char> = None;
    let mut previous = ' ';
    for (i, c) in content.char_indices() {
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            previous = c;
            continue;
        }
        match c {
            '"' | '\'' if i == 0 => quote = Some(c),
            '#' if previous == ' ' || previous == '\t' => return None,
            ':' if content[i + 1..].is_empty() || content[i + 1..].starts_with([' ', '\t']) => {
                return Some(i);
            }
            _ => {}
        }
        previous = c;
    }
    None
}

fn unquote(key: &str) -> &str {
    for q in ['"', '\''] {
        if key.len() >= 2 && key.starts_with(q) && key.ends_with(q) {
            return &key[1..key.len() - 1];
        }
    }
    key
}

fn is_word_break(c: char) -> bool {
    c.is_whitespace() || matches!(c, '[' | ']' | '{' | '}' | ',' | ':' | '"' | '\'' | '#')
}

fn in_comment(before: &str) -> bool {
    let mut quote: Option<char> = None;
    let mut previous = ' ';
    for c in before.chars() {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '#') if previous.is_whitespace() => return true,
            _ => {}
        }
        previous = c;
    }
    false
}

fn is_document_marker(line: &str) -> bool {
    ["---", "..."].iter().any(|m| {
        line.strip_prefix(m)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
    })
}

fn floor_boundary(text: &str, offset: usize) -> usize {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// The documents of a file, by their start offsets.
struct Documents<'a> {
    text: &'a str,
    /// Where each document's content starts.
    starts: Vec<usize>,
}

impl<'a> Documents<'a> {
    fn scan(text: &'a str) -> Self {
        let mut starts = vec![0];
        let mut content_seen = false;
        let mut at = 0;
        for line in text.split_inclusive('\n') {
            let next = at + line.len();
            if line.starts_with("---") && is_document_marker(line.trim_end()) {
                if content_seen {
                    starts.push(next);
                } else if let Some(last) = starts.last_mut() {
                    // An explicit start of the first document.
                    *last = next;
                }
                content_seen = false;
            } else if Shape::of(line.trim_end()).is_some() {
                content_seen = true;
            }
            at = next;
        }
        Self { text, starts }
    }

    /// The index and start of the document holding `offset`.
    fn containing(&self, offset: usize) -> (usize, usize) {
        let index = self.starts.partition_point(|&s| s <= offset).max(1) - 1;
        (index, self.starts[index].min(offset))
    }

    fn end_of(&self, index: usize) -> usize {
        self.starts
            .get(index + 1)
            .copied()
            .unwrap_or(self.text.len())
    }

    /// A header is the first of several documents, with header keys only,
    /// or any first document with a header-only key.
    fn kind(&self, index: usize) -> DocumentKind {
        if index > 0 {
            return DocumentKind::Task;
        }
        let first = &self.text[self.starts[0]..self.end_of(0)];
        let keys: Vec<&str> = first
            .lines()
            .filter_map(Shape::of)
            .filter(|s| s.dashes.is_empty())
            .filter_map(|s| s.key.filter(|(c, _)| *c == 0).map(|(_, k)| k))
            .collect();
        if keys.iter().any(|k| HEADER_ONLY.contains(k)) {
            DocumentKind::Header
        } else if keys.iter().any(|k| *k != "name") {
            DocumentKind::Task
        } else if self.starts.len() > 1 {
            DocumentKind::Header
        } else {
            DocumentKind::Either
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The context at `‸` in `text`.
    fn context(text: &str) -> Context {
        let at = text.find('‸').expect("a cursor");
        let text = text.replacen('‸', "", 1);
        super::at(&text, at).expect("a context")
    }

    fn path(c: &Context) -> String {
        c.path
            .iter()
            .map(|s| match s {
                Segment::Key(k) => k.as_str(),
                Segment::Item => "[]",
            })
            .collect::<Vec<_>>()
            .join(".")
    }

    #[test]
    fn keys_under_nested_mappings_and_items() {
        let c = context("name: t\nresources:\n  any_of:\n    - infra: aws\n      acc‸\n");
        assert_eq!(
            (path(&c), c.slot),
            ("resources.any_of.[]".into(), Slot::Key)
        );
        assert_eq!(c.siblings, ["infra"]);
        assert_eq!(c.kind, DocumentKind::Task);
        let c = context("resources:\n  cpus: 4\n  ‸\n  memory: 8\nrun: x\n");
        assert_eq!((path(&c), c.slot), ("resources".into(), Slot::Key));
        assert_eq!(c.siblings, ["cpus", "memory"]);
        let c = context("resources:\n  any_of:\n  - inf‸\n");
        assert_eq!(
            (path(&c), c.slot),
            ("resources.any_of.[]".into(), Slot::Key)
        );
        assert_eq!(c.word.len(), 3);
    }

    #[test]
    fn values_block_and_flow() {
        let c = context("resources:\n  accelerators: H1‸\n");
        assert_eq!(
            (path(&c), c.slot),
            ("resources.accelerators".into(), Slot::Value)
        );
        let c =
            context("name: g\nexecution: parallel\nprimary_tasks: [trainer, ev‸\n---\nname: a\n");
        assert_eq!((path(&c), c.slot), ("primary_tasks.[]".into(), Slot::Value));
        assert_eq!(c.kind, DocumentKind::Header);
        let c = context("name: g\nexecution: parallel\nprimary_tasks:\n- a\n- ‸\n");
        assert_eq!((path(&c), c.slot), ("primary_tasks.[]".into(), Slot::Key));
        let c = context("resources:\n  accelerators: {H100: 1, A‸\n");
        assert_eq!(
            (path(&c), c.slot),
            ("resources.accelerators".into(), Slot::Key)
        );
        let c = context("resources:\n  accelerators: {H100: ‸\n");
        assert_eq!(
            (path(&c), c.slot),
            ("resources.accelerators.H100".into(), Slot::Value)
        );
    }

    #[test]
    fn documents_and_their_kinds() {
        let text = "---\nname: g\nexecution: parallel\n---\nname: a\n‸\n";
        let c = context(text);
        assert_eq!((c.kind, path(&c)), (DocumentKind::Task, String::new()));
        assert_eq!(c.siblings, ["name"]);
        assert_eq!(context("name: g\n‸").kind, DocumentKind::Either);
        assert_eq!(
            context("name: g\n‸\n---\nname: a\n").kind,
            DocumentKind::Header
        );
        assert_eq!(context("name: t\nrun: x\n‸").kind, DocumentKind::Task);
    }

    #[test]
    fn no_context_in_comments_and_markers() {
        assert!(super::at("a: 1 # note", 10).is_none());
        assert!(super::at("---\n", 2).is_none());
        // A `#` inside a word is not a comment.
        let c = context("envs:\n  A: x#‸");
        assert_eq!(c.slot, Slot::Value);
    }

    #[test]
    fn block_scalars_are_values_of_their_key() {
        let c = context("run: |\n  echo hi\n  ‸\n");
        assert_eq!((path(&c), c.slot), ("run".into(), Slot::Key));
    }
}
