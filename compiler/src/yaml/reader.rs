//! Reader: YAML text to one [`Node`] tree per document.
//!
//! Built iteratively over the parser's event stream, so input depth cannot
//! exhaust the stack, and under explicit budgets (nesting, nodes, bytes
//! materialised through aliases) so hostile input costs bounded time and
//! memory. Aliases are expanded the way PyYAML's constructor shares objects;
//! merge keys (`<<`) are applied; duplicate keys are reported, not silently
//! resolved.

use super::node::{Entry, Node, Value};
use super::scalar::{Resolved, resolve_plain};
use crate::{Diagnostic, Diagnostics, Rule, Span};
use granit_parser::{Event, Parser, ScalarStyle, Tag};
use std::collections::HashMap;

/// Limits on what one file may expand to.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Nesting of collections, in the source and after alias expansion.
    pub max_depth: usize,
    /// Nodes in all documents, aliases expanded.
    pub max_nodes: usize,
    /// Scalar bytes in all documents, aliases expanded.
    pub max_bytes: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            max_depth: 64,
            max_nodes: 250_000,
            max_bytes: 16 << 20,
        }
    }
}

/// One YAML document of the stream.
#[derive(Debug, Clone)]
pub struct Document {
    /// The document's root; `Value::Null` for an empty document.
    pub root: Node,
    /// Where the document starts (its `---` when explicit).
    pub start: Span,
}

pub struct Reader<'a> {
    text: &'a str,
    budget: Budget,
    nodes: usize,
    bytes: usize,
    /// Anchor id to (node, height).
    anchors: HashMap<usize, (Node, usize)>,
    diagnostics: &'a mut Diagnostics,
}

enum Frame {
    Seq {
        start: usize,
        anchor: usize,
        items: Vec<Node>,
        height: usize,
    },
    Map {
        start: usize,
        anchor: usize,
        entries: Keyed,
        /// Entries brought in by `<<`, applied when the mapping closes.
        merged: Keyed,
        pending_key: Option<Node>,
        /// The pending key is a plain `<<`.
        pending_merge: bool,
        height: usize,
    },
}

/// Aborts reading: the diagnostic explaining why is already recorded.
struct Abort;

impl<'a> Reader<'a> {
    /// Reads every document of `text`. On a syntax error or an exceeded
    /// budget, reports it and returns the documents completed before it.
    pub fn read(text: &'a str, budget: Budget, diagnostics: &'a mut Diagnostics) -> Vec<Document> {
        let mut reader = Reader {
            text,
            budget,
            nodes: 0,
            bytes: 0,
            anchors: HashMap::new(),
            diagnostics,
        };
        let mut documents = Vec::new();
        let _ = reader.stream(&mut documents);
        documents
    }

    fn stream(&mut self, documents: &mut Vec<Document>) -> Result<(), Abort> {
        let options = granit_parser::options! {
            block_nesting_limit: self.budget.max_depth,
            flow_nesting_limit: self.budget.max_depth,
        };
        let mut parser = Parser::new_from_str_with_options(self.text, options);
        let mut stack: Vec<Frame> = Vec::new();
        let mut doc_start = Span::default();
        let mut root: Option<(Node, usize)> = None;
        loop {
            let (event, span) = match parser.next_event() {
                None => return Ok(()),
                Some(Ok(pair)) => pair,
                Some(Err(e)) => {
                    let at = self.byte_at(e.marker().byte_offset(), e.marker().index());
                    let message = syntax_message(&e.kind().to_string());
                    let rule = if message.contains("recursion limit") {
                        Rule::YamlLimit
                    } else {
                        Rule::YamlSyntax
                    };
                    let mut d = Diagnostic::new(rule, Span::at(at), message.clone());
                    if rule == Rule::YamlLimit {
                        d = Diagnostic::new(
                            rule,
                            Span::at(at),
                            format!("YAML nests deeper than {} levels", self.budget.max_depth),
                        );
                    }
                    self.diagnostics.push(d);
                    return Err(Abort);
                }
            };
            let span = self.span(&span);
            let mut is_merge = false;
            let completed = match event {
                Event::StreamStart | Event::StreamEnd => None,
                Event::DocumentStart(..) => {
                    doc_start = Span::at(span.start as usize);
                    self.anchors.clear();
                    None
                }
                Event::DocumentEnd => {
                    let node = root
                        .take()
                        .map_or_else(|| Node::new(Value::Null, doc_start), |(n, _)| n);
                    documents.push(Document {
                        root: node,
                        start: doc_start,
                    });
                    None
                }
                Event::Scalar(text, style, anchor, tag) => {
                    is_merge = style == ScalarStyle::Plain && tag.is_none() && text == "<<";
                    let node = self.scalar(&text, style, tag.as_deref(), span)?;
                    if anchor != 0 {
                        self.anchors.insert(anchor, (node.clone(), 0));
                    }
                    Some((node, 0))
                }
                Event::Alias(id) => {
                    let Some((node, height)) = self.anchors.get(&id) else {
                        self.error(Rule::YamlSyntax, span, "alias to an unknown anchor");
                        return Err(Abort);
                    };
                    let (mut node, height) = (node.clone(), *height);
                    let (count, bytes) = measure(&node);
                    self.spend(count, bytes, span)?;
                    if stack.len() + height > self.budget.max_depth {
                        self.error(
                            Rule::YamlLimit,
                            span,
                            format!(
                                "this alias expands deeper than {} levels",
                                self.budget.max_depth
                            ),
                        );
                        return Err(Abort);
                    }
                    node.span = span;
                    Some((node, height))
                }
                Event::SequenceStart(_, anchor, tag) => {
                    self.check_collection_tag(tag.as_deref(), "seq", span)?;
                    self.spend(1, 0, span)?;
                    stack.push(Frame::Seq {
                        start: span.start as usize,
                        anchor,
                        items: Vec::new(),
                        height: 0,
                    });
                    None
                }
                Event::MappingStart(_, anchor, tag) => {
                    self.check_collection_tag(tag.as_deref(), "map", span)?;
                    self.spend(1, 0, span)?;
                    stack.push(Frame::Map {
                        start: span.start as usize,
                        anchor,
                        entries: Keyed::default(),
                        merged: Keyed::default(),
                        pending_key: None,
                        pending_merge: false,
                        height: 0,
                    });
                    None
                }
                Event::SequenceEnd => match stack.pop() {
                    Some(Frame::Seq {
                        start,
                        anchor,
                        items,
                        height,
                    }) => {
                        let node =
                            Node::new(Value::Seq(items), Span::new(start, span.end as usize));
                        Some(self.finish(node, anchor, height + 1))
                    }
                    _ => None,
                },
                Event::MappingEnd => match stack.pop() {
                    Some(Frame::Map {
                        start,
                        anchor,
                        mut entries,
                        merged,
                        height,
                        ..
                    }) => {
                        // Explicit keys win over merged ones; earlier merges
                        // win over later ones (PyYAML's flatten_mapping).
                        for m in merged.entries {
                            if entries.find(&m.key.value).is_none() {
                                entries.push(m);
                            }
                        }
                        let node = Node::new(
                            Value::Map(entries.entries),
                            Span::new(start, span.end as usize),
                        );
                        Some(self.finish(node, anchor, height + 1))
                    }
                    _ => None,
                },
                // Comment events are off by default; anything else the
                // parser adds later carries no data.
                #[allow(unreachable_patterns)]
                _ => None,
            };
            if let Some((node, height)) = completed {
                match stack.last_mut() {
                    None => root = Some((node, height)),
                    Some(Frame::Seq {
                        items, height: h, ..
                    }) => {
                        *h = (*h).max(height);
                        items.push(node);
                    }
                    Some(Frame::Map {
                        entries,
                        merged,
                        pending_key,
                        pending_merge,
                        height: h,
                        ..
                    }) => match pending_key.take() {
                        None => {
                            *pending_key = Some(node);
                            *pending_merge = is_merge;
                        }
                        Some(key) => {
                            *h = (*h).max(height);
                            let merge = std::mem::take(pending_merge);
                            Self::insert(self.diagnostics, entries, merged, key, merge, node)?;
                        }
                    },
                }
            }
        }
    }

    fn finish(&mut self, node: Node, anchor: usize, height: usize) -> (Node, usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, (node.clone(), height));
        }
        (node, height)
    }

    fn insert(
        diagnostics: &mut Diagnostics,
        entries: &mut Keyed,
        merged: &mut Keyed,
        key: Node,
        is_merge: bool,
        value: Node,
    ) -> Result<(), Abort> {
        if is_merge {
            let sources: Vec<&Node> = match &value.value {
                Value::Map(_) => vec![&value],
                Value::Seq(items) => items.iter().collect(),
                _ => vec![],
            };
            if sources.is_empty() || sources.iter().any(|s| s.as_map().is_none()) {
                diagnostics.push(
                    Diagnostic::new(
                        Rule::YamlSyntax,
                        value.span,
                        "a merge key (`<<`) takes a mapping or a list of mappings",
                    )
                    .label(format!("found {}", value.type_name())),
                );
                return Err(Abort);
            }
            for source in sources {
                for entry in source.as_map().unwrap_or_default() {
                    if merged.find(&entry.key.value).is_none() {
                        merged.push(entry.clone());
                    }
                }
            }
            return Ok(());
        }
        if matches!(key.value, Value::Seq(_) | Value::Map(_)) {
            diagnostics.push(
                Diagnostic::new(
                    Rule::NonStringKey,
                    key.span,
                    "a mapping key must be a scalar",
                )
                .label(format!("this key is {}", key.type_name())),
            );
            return Ok(());
        }
        if let Some(first) = entries.find(&key.value) {
            let shown = key.python_str().unwrap_or_default();
            diagnostics.push(
                Diagnostic::new(
                    Rule::DuplicateKey,
                    key.span,
                    format!("duplicate key `{shown}`"),
                )
                .label("defined again here")
                .with_secondary(first.key.span, "first defined here")
                .help(
                    "remove one of them; YAML loaders disagree on which one wins \
                     (SkyPilot keeps the last inside a Job Group)",
                ),
            );
            return Ok(());
        }
        entries.push(Entry { key, value });
        Ok(())
    }

    fn scalar(
        &mut self,
        text: &str,
        style: ScalarStyle,
        tag: Option<&Tag>,
        span: Span,
    ) -> Result<Node, Abort> {
        self.spend(1, text.len(), span)?;
        let value = match tag {
            None if style == ScalarStyle::Plain => match resolve_plain(text) {
                Resolved::Null => Value::Null,
                Resolved::Bool(b) => Value::Bool(b),
                Resolved::Int(i) => Value::Int(i),
                Resolved::Float(f) => Value::Float(f),
                Resolved::String | Resolved::Merge => Value::String(text.to_owned()),
                Resolved::IntOverflow => {
                    self.error(
                        Rule::InvalidValue,
                        span,
                        format!("the integer `{text}` does not fit in 64 bits"),
                    );
                    Value::String(text.to_owned())
                }
                Resolved::ValueTag => {
                    self.error(
                        Rule::UnsupportedTag,
                        span,
                        "a bare `=` is YAML 1.1's value tag, which the loader cannot construct; quote it",
                    );
                    Value::String(text.to_owned())
                }
            },
            None => Value::String(text.to_owned()),
            Some(tag) => self.tagged_scalar(text, tag, span),
        };
        Ok(Node::new(value, span))
    }

    fn tagged_scalar(&mut self, text: &str, tag: &Tag, span: Span) -> Value {
        let resolved = resolve_plain(text);
        match (tag.core_suffix(), tag.handle(), tag.suffix()) {
            (Some("str"), ..) | (None, "!", "") => Value::String(text.to_owned()),
            (Some("null"), ..) if resolved == Resolved::Null => Value::Null,
            (Some("bool"), ..) => match resolved {
                Resolved::Bool(b) => Value::Bool(b),
                _ => self.bad_tagged(text, "bool", span),
            },
            (Some("int"), ..) => match resolved {
                Resolved::Int(i) => Value::Int(i),
                _ => self.bad_tagged(text, "int", span),
            },
            (Some("float"), ..) => match resolved {
                Resolved::Float(f) => Value::Float(f),
                #[allow(clippy::cast_precision_loss)]
                Resolved::Int(i) => Value::Float(i as f64),
                _ => self.bad_tagged(text, "float", span),
            },
            _ => {
                self.error(
                    Rule::UnsupportedTag,
                    span,
                    format!(
                        "the tag `{}{}` is not one SkyPilot's safe YAML loader can construct",
                        tag.original_handle(),
                        tag.suffix()
                    ),
                );
                Value::String(text.to_owned())
            }
        }
    }

    fn bad_tagged(&mut self, text: &str, tag: &str, span: Span) -> Value {
        self.error(
            Rule::YamlSyntax,
            span,
            format!("`{text}` is not a valid `!!{tag}`"),
        );
        Value::String(text.to_owned())
    }

    fn check_collection_tag(
        &mut self,
        tag: Option<&Tag>,
        kind: &str,
        span: Span,
    ) -> Result<(), Abort> {
        match tag {
            None => Ok(()),
            Some(t)
                if t.core_suffix() == Some(kind)
                    || (t.handle() == "!" && t.suffix().is_empty()) =>
            {
                Ok(())
            }
            Some(t) => {
                self.error(
                    Rule::UnsupportedTag,
                    span,
                    format!(
                        "the tag `{}{}` is not one SkyPilot's safe YAML loader can construct here",
                        t.original_handle(),
                        t.suffix()
                    ),
                );
                Err(Abort)
            }
        }
    }

    fn spend(&mut self, nodes: usize, bytes: usize, span: Span) -> Result<(), Abort> {
        self.nodes += nodes;
        self.bytes += bytes;
        if self.nodes > self.budget.max_nodes || self.bytes > self.budget.max_bytes {
            self.error(
                Rule::YamlLimit,
                span,
                format!(
                    "the YAML expands to more than {} nodes or {} MiB (aliases included); \
                     skyc stops reading here",
                    self.budget.max_nodes,
                    self.budget.max_bytes >> 20
                ),
            );
            return Err(Abort);
        }
        Ok(())
    }

    fn error(&mut self, rule: Rule, span: Span, message: impl Into<String>) {
        self.diagnostics.push(Diagnostic::new(rule, span, message));
    }

    fn span(&self, span: &granit_parser::Span) -> Span {
        let start = self.byte_at(span.start.byte_offset(), span.start.index());
        let end = self.byte_at(span.end.byte_offset(), span.end.index());
        Span::new(start, end)
    }

    /// Byte offset of a marker; falls back to converting its character index.
    fn byte_at(&self, byte: Option<usize>, chars: usize) -> usize {
        byte.unwrap_or_else(|| {
            self.text
                .char_indices()
                .nth(chars)
                .map_or(self.text.len(), |(i, _)| i)
        })
    }
}

/// The entries of a mapping being read, indexed by key, so that duplicate
/// and merge checks cost O(1) per key instead of a scan (quadratic on a
/// hostile mapping of 100,000 keys). Equality stays `Value`'s `==`.
#[derive(Default)]
struct Keyed {
    entries: Vec<Entry>,
    /// Key hash to the first entry with that hash.
    index: HashMap<u64, usize>,
}

impl Keyed {
    fn find(&self, key: &Value) -> Option<&Entry> {
        let first = *self.index.get(&key_hash(key)?)?;
        if self.entries[first].key.value == *key {
            return Some(&self.entries[first]);
        }
        // A hash collision: rare enough to scan.
        self.entries.iter().find(|e| e.key.value == *key)
    }

    fn push(&mut self, entry: Entry) {
        if let Some(hash) = key_hash(&entry.key.value) {
            self.index.entry(hash).or_insert(self.entries.len());
        }
        self.entries.push(entry);
    }
}

/// A hash consistent with `Value`'s `==` on keys; `None` for NaN, which
/// equals nothing.
fn key_hash(value: &Value) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match value {
        Value::Null => 0u8.hash(&mut h),
        Value::Bool(b) => (1u8, b).hash(&mut h),
        Value::Int(i) => (2u8, i).hash(&mut h),
        Value::Float(f) if f.is_nan() => return None,
        // 0.0 == -0.0.
        Value::Float(f) => (3u8, if *f == 0.0 { 0 } else { f.to_bits() }).hash(&mut h),
        Value::String(s) => (4u8, s).hash(&mut h),
        // Never stored as keys (rejected first); one bucket keeps `==`.
        Value::Seq(_) | Value::Map(_) => 5u8.hash(&mut h),
    }
    Some(h.finish())
}

fn measure(node: &Node) -> (usize, usize) {
    let mut stack = vec![node];
    let (mut count, mut bytes) = (0, 0);
    while let Some(n) = stack.pop() {
        count += 1;
        match &n.value {
            Value::String(s) => bytes += s.len(),
            Value::Seq(items) => stack.extend(items),
            Value::Map(entries) => {
                for e in entries {
                    stack.push(&e.key);
                    stack.push(&e.value);
                }
            }
            _ => {}
        }
    }
    (count, bytes)
}

fn syntax_message(raw: &str) -> String {
    let mut message = raw.trim().to_owned();
    if let Some(first) = message.chars().next() {
        let lower: String = first.to_lowercase().collect();
        message.replace_range(..first.len_utf8(), &lower);
    }
    message
}
