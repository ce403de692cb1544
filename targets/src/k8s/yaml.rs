//! A small deterministic YAML writer over `serde_json::Value`.
//!
//! serde_yaml is archived, and the manifests need only block mappings,
//! block sequences and scalars. Every string is written so that YAML 1.1
//! (PyYAML, go-yaml v2 in older kubectl) and YAML 1.2 readers get the same
//! string back: plain only when it cannot be read as anything else, a
//! literal block for multi-line scripts, double-quoted otherwise. Key
//! order is the object's order, so the output is as deterministic as the
//! value.

use serde_json::{Map, Value};
use std::fmt::Write as _;

/// One YAML document (no `---`), ending in a newline.
pub fn document(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(m) if !m.is_empty() => write_map(&mut out, m, 0, false),
        Value::Array(a) if !a.is_empty() => write_seq(&mut out, a, 0, false),
        // A top-level block scalar could hold a `---` line; quote instead.
        Value::String(s) => {
            write_quoted(&mut out, s);
            out.push('\n');
        }
        scalar => write_scalar(&mut out, scalar, 0),
    }
    out
}

/// A multi-document stream: each document introduced by `---`.
pub fn stream(values: &[Value]) -> String {
    let mut out = String::new();
    for value in values {
        out.push_str("---\n");
        out.push_str(&document(value));
    }
    out
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// Writes the entries at `indent`; when `inline_first`, the first one
/// continues a line already at that column (after `- `).
fn write_map(out: &mut String, m: &Map<String, Value>, indent: usize, inline_first: bool) {
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 || !inline_first {
            pad(out, indent);
        }
        if is_plain_key(k) {
            out.push_str(k);
        } else {
            write_quoted(out, k);
        }
        out.push(':');
        match v {
            Value::Object(m) if !m.is_empty() => {
                out.push('\n');
                write_map(out, m, indent + 2, false);
            }
            Value::Array(a) if !a.is_empty() => {
                out.push('\n');
                write_seq(out, a, indent + 2, false);
            }
            _ => {
                out.push(' ');
                write_scalar(out, v, indent + 2);
            }
        }
    }
}

fn write_seq(out: &mut String, a: &[Value], indent: usize, inline_first: bool) {
    for (i, v) in a.iter().enumerate() {
        if i > 0 || !inline_first {
            pad(out, indent);
        }
        out.push_str("- ");
        match v {
            Value::Object(m) if !m.is_empty() => write_map(out, m, indent + 2, true),
            Value::Array(a) if !a.is_empty() => write_seq(out, a, indent + 2, true),
            _ => write_scalar(out, v, indent + 2),
        }
    }
}

/// Writes a scalar (or an empty collection) and the line break after it;
/// a literal block's lines go at `indent`.
fn write_scalar(out: &mut String, v: &Value, indent: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::Object(_) => out.push_str("{}"),
        Value::Array(_) => out.push_str("[]"),
        Value::String(s) if is_plain(s) => out.push_str(s),
        Value::String(s) if literal_block_fits(s) => return write_literal(out, s, indent),
        Value::String(s) => write_quoted(out, s),
    }
    out.push('\n');
}

/// Words YAML 1.1 or 1.2 reads as booleans or null, in any case.
const RESERVED: &[&str] = &["y", "n", "yes", "no", "on", "off", "true", "false", "null"];

/// Plain only for strings that cannot be taken for a number, boolean,
/// null, date, tag, anchor or flow syntax by any YAML version: a letter or
/// `/` first, then a safe alphabet; spaces only singly inside, never
/// before `#` or after `:`.
fn is_plain(s: &str) -> bool {
    let b = s.as_bytes();
    let Some(&first) = b.first() else {
        return false;
    };
    if !(first.is_ascii_alphabetic() || first == b'/') || b[b.len() - 1] == b' ' {
        return false;
    }
    if RESERVED.iter().any(|w| s.eq_ignore_ascii_case(w)) {
        return false;
    }
    b.iter().enumerate().all(|(i, &c)| match c {
        c if c.is_ascii_alphanumeric() => true,
        b'-' | b'.' | b'_' | b'/' | b'@' | b'+' | b'=' => true,
        b':' => b.get(i + 1).is_some_and(|&n| n != b' '),
        b' ' => b.get(i + 1).is_some_and(|&n| n != b' ' && n != b'#'),
        _ => false,
    })
}

/// Keys are plainer still: no `:` and no space.
fn is_plain_key(s: &str) -> bool {
    is_plain(s) && !s.contains([':', ' '])
}

/// A literal block keeps scripts readable. It cannot carry every string:
/// not control characters or Unicode line breaks, not a first non-empty line
/// that starts with white space (its indentation would be misread), not
/// white-space-only lines (readers fold them into empty ones).
fn literal_block_fits(s: &str) -> bool {
    s.contains('\n')
        && !s.trim_matches('\n').is_empty()
        && !s.trim_start_matches('\n').starts_with([' ', '\t'])
        && s.chars().all(|c| {
            c == '\n'
                || c == '\t'
                || !(c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}'))
        })
        && s.split('\n')
            .all(|line| line.is_empty() || !line.trim_matches([' ', '\t']).is_empty())
}

fn write_literal(out: &mut String, s: &str, indent: usize) {
    // Chomping: `|-` no final break, `|` one, `|+` keep every trailing one.
    let (body, chomp) = match s.strip_suffix('\n') {
        None => (s, "-"),
        Some(rest) if rest.ends_with('\n') => (rest, "+"),
        Some(rest) => (rest, ""),
    };
    out.push('|');
    out.push_str(chomp);
    out.push('\n');
    for line in body.split('\n') {
        if !line.is_empty() {
            pad(out, indent);
            out.push_str(line);
        }
        out.push('\n');
    }
}

fn write_quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn layout() {
        let v = json!({
            "apiVersion": "v1",
            "list": [{"a": 1, "b": [true, null]}, [], {}, ["x"]],
            "empty": {},
            "nested": {"k": "v"},
            "script": "echo hi\necho there\n",
        });
        assert_eq!(
            document(&v),
            "apiVersion: v1\n\
             list:\n\
             \x20 - a: 1\n\
             \x20   b:\n\
             \x20     - true\n\
             \x20     - null\n\
             \x20 - []\n\
             \x20 - {}\n\
             \x20 - - x\n\
             empty: {}\n\
             nested:\n\
             \x20 k: v\n\
             script: |\n\
             \x20 echo hi\n\
             \x20 echo there\n"
        );
    }

    #[test]
    fn quoting() {
        for (s, want) in [
            ("plain-name", "plain-name"),
            ("nvidia.com/gpu", "nvidia.com/gpu"),
            ("ubuntu:22.04", "ubuntu:22.04"),
            ("yes", "\"yes\""),
            ("No", "\"No\""),
            ("1", "\"1\""),
            ("500m", "\"500m\""),
            ("0755", "\"0755\""),
            ("a: b", "\"a: b\""),
            ("a #b", "\"a #b\""),
            ("", "\"\""),
            ("-x", "\"-x\""),
            ("tab\there", "\"tab\\there\""),
            ("nl\u{2028}", "\"nl\\u2028\""),
        ] {
            let mut out = String::new();
            write_scalar(&mut out, &Value::String(s.to_owned()), 2);
            assert_eq!(out, format!("{want}\n"), "{s:?}");
        }
    }

    #[test]
    fn chomping() {
        let v = json!({"a": "x\ny", "b": "x\n\n", "c": "  indented\nfirst"});
        assert_eq!(
            document(&v),
            "a: |-\n  x\n  y\nb: |+\n  x\n\nc: \"  indented\\nfirst\"\n"
        );
    }

    /// Reads YAML back as SkyPilot's PyYAML rules do (the strictest reader
    /// at hand: YAML 1.1 booleans, octals, sexagesimals).
    fn read_back(text: &str) -> Vec<Value> {
        use skyc_compiler::yaml::{Budget, Node, Reader, Value as Y};
        fn to_json(n: &Node) -> Value {
            match &n.value {
                Y::Null => Value::Null,
                Y::Bool(b) => Value::Bool(*b),
                Y::Int(i) => json!(i),
                Y::Float(f) => json!(f),
                Y::String(s) => json!(s),
                Y::Seq(items) => Value::Array(items.iter().map(to_json).collect()),
                Y::Map(entries) => Value::Object(
                    entries
                        .iter()
                        .map(|e| {
                            (
                                e.key.as_str().expect("string key").to_owned(),
                                to_json(&e.value),
                            )
                        })
                        .collect(),
                ),
            }
        }
        let mut d = skyc_compiler::Diagnostics::default();
        let docs = Reader::read(text, Budget::default(), &mut d);
        assert!(!d.has_errors(), "{text}\n{:?}", d.into_sorted());
        docs.iter().map(|doc| to_json(&doc.root)).collect()
    }

    fn tricky() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            any::<String>(),
            "[a-zA-Z0-9 :#/._\\-]{0,12}",
            "[ \\t\\n#a:-]{0,10}",
            Just("yes".to_owned()),
            Just("0o17".to_owned()),
            Just("1:30".to_owned()),
            Just("~".to_owned()),
            Just("- x".to_owned()),
            Just("a\n\n".to_owned()),
            Just("\n".to_owned()),
            Just("a\n \nb".to_owned()),
            Just("x\u{85}y\n".to_owned()),
        ]
    }

    fn values() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| json!(i)),
            tricky().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::vec((tricky(), inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn round_trips(docs in proptest::collection::vec(values(), 1..3)) {
            // Top-level documents are objects, as manifests are.
            let docs: Vec<Value> = docs
                .into_iter()
                .map(|v| json!({"v": v}))
                .collect();
            let text = stream(&docs);
            proptest::prop_assert_eq!(read_back(&text), docs);
        }
    }

    #[test]
    fn scalars_round_trip_at_top_level() {
        for v in [json!("a\nb"), json!(1), json!(null), json!([]), json!({})] {
            assert_eq!(read_back(&document(&v)), vec![v]);
        }
    }
}
