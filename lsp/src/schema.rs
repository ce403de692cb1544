//! The JSON Schemas (`skyc schema`'s bundle, the compiler's own), walked by
//! path: which fields a mapping takes, what a field means (its
//! `description`) and the forms its value takes.

use crate::context::{DocumentKind, Segment};
use serde_json::Value as Json;
use std::sync::LazyLock;

static BUNDLE: LazyLock<Json> = LazyLock::new(skyc_compiler::editor_schema);

/// `$ref`s and nested `anyOf`s followed at most this deep (the schemas
/// nest a few levels; this only stops a cycle).
const MAX_DEPTH: usize = 16;

/// A field a mapping takes.
#[derive(Debug)]
pub(crate) struct Field {
    pub(crate) name: String,
    pub(crate) schema: &'static Json,
}

/// The roots of a document of `kind`.
fn roots(kind: DocumentKind) -> Vec<&'static Json> {
    let defs = &BUNDLE["$defs"];
    match kind {
        DocumentKind::Header => vec![&defs["header"]],
        DocumentKind::Task => vec![&defs["task"]],
        DocumentKind::Either => vec![&defs["task"], &defs["header"]],
    }
}

/// The schemas a node at `path` may match.
pub(crate) fn at(kind: DocumentKind, path: &[Segment]) -> Vec<&'static Json> {
    let mut current = roots(kind);
    for segment in path {
        let mut next = Vec::new();
        for schema in current {
            for alt in alternatives(schema) {
                let child = match segment {
                    Segment::Key(key) => alt
                        .get("properties")
                        .and_then(|p| p.get(key.as_str()))
                        .or_else(|| alt.get("additionalProperties").filter(|a| a.is_object())),
                    Segment::Item => alt.get("items"),
                };
                if let Some(child) = child {
                    next.push(child);
                }
            }
        }
        current = next;
    }
    current
}

/// The fields of the mappings `schemas` describe, in schema order, without
/// repeats; fields starting with `_` are SkyPilot's internals.
pub(crate) fn fields(schemas: &[&'static Json]) -> Vec<Field> {
    let mut out: Vec<Field> = Vec::new();
    for schema in schemas {
        for alt in alternatives(schema) {
            let Some(properties) = alt.get("properties").and_then(Json::as_object) else {
                continue;
            };
            for (name, schema) in properties {
                if !name.starts_with('_') && !out.iter().any(|f| &f.name == name) {
                    out.push(Field {
                        name: name.clone(),
                        schema,
                    });
                }
            }
        }
    }
    out
}

/// `schema` itself, then what its `$ref`, `anyOf`, `oneOf` and `allOf`
/// lead to, depth first.
pub(crate) fn alternatives(schema: &'static Json) -> Vec<&'static Json> {
    let mut out = Vec::new();
    collect(schema, 0, &mut out);
    out
}

fn collect(schema: &'static Json, depth: usize, out: &mut Vec<&'static Json>) {
    if depth > MAX_DEPTH {
        return;
    }
    out.push(schema);
    if let Some(target) = schema
        .get("$ref")
        .and_then(Json::as_str)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|pointer| BUNDLE.pointer(pointer))
    {
        collect(target, depth + 1, out);
    }
    for keyword in ["anyOf", "oneOf", "allOf"] {
        for branch in schema
            .get(keyword)
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
        {
            collect(branch, depth + 1, out);
        }
    }
}

/// The first `description` on the way from `schema` through its
/// references.
pub(crate) fn description(schema: &'static Json) -> Option<&'static str> {
    alternatives(schema)
        .into_iter()
        .find_map(|s| s.get("description").and_then(Json::as_str))
}

/// The forms a value of `schema` takes, in words: `a string`, `a list of
/// strings`, `` `parallel` ``, `one of `low`, `high``.
pub(crate) fn forms(schema: &'static Json) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |form: String| {
        if !out.contains(&form) {
            out.push(form);
        }
    };
    for alt in alternatives(schema) {
        if let Some(value) = alt.get("const") {
            add(format!("`{}`", scalar_text(value)));
        }
        if let Some(values) = alt.get("enum").and_then(Json::as_array) {
            let list: Vec<String> = values
                .iter()
                .map(|v| format!("`{}`", scalar_text(v)))
                .collect();
            add(format!("one of {}", list.join(", ")));
        }
        let types: Vec<&str> = match alt.get("type") {
            Some(Json::String(t)) => vec![t.as_str()],
            Some(Json::Array(ts)) => ts.iter().filter_map(Json::as_str).collect(),
            _ => Vec::new(),
        };
        for t in types {
            let form = match t {
                "array" => match alt.get("items").map(item_types) {
                    Some(items) if !items.is_empty() => format!("a list of {}", items.join(" or ")),
                    _ => "a list".to_owned(),
                },
                other => phrase(other).to_owned(),
            };
            add(form);
        }
    }
    out
}

/// The plural type names of a list's items (`strings`, `integers`).
fn item_types(items: &'static Json) -> Vec<&'static str> {
    let mut out = Vec::new();
    for alt in alternatives(items) {
        let types: Vec<&str> = match alt.get("type") {
            Some(Json::String(t)) => vec![t.as_str()],
            Some(Json::Array(ts)) => ts.iter().filter_map(Json::as_str).collect(),
            _ => Vec::new(),
        };
        for t in types {
            let plural = match t {
                "string" => "strings",
                "integer" => "integers",
                "number" => "numbers",
                "boolean" => "booleans",
                "object" => "mappings",
                "array" => "lists",
                _ => continue,
            };
            if !out.contains(&plural) {
                out.push(plural);
            }
        }
    }
    out
}

fn phrase(json_type: &str) -> &'static str {
    match json_type {
        "string" => "a string",
        "integer" => "an integer",
        "number" => "a number",
        "boolean" => "a boolean",
        "object" => "a mapping",
        "null" => "empty",
        _ => "a value",
    }
}

fn scalar_text(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The values a field takes from a closed set, as its schema says:
/// `const`, `enum`, booleans, and case-insensitive alternations written as
/// a `^(?i:a|b)$` pattern.
pub(crate) fn values(schemas: &[&'static Json]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |v: String| {
        if !out.contains(&v) {
            out.push(v);
        }
    };
    for schema in schemas {
        for alt in alternatives(schema) {
            if let Some(v) = alt.get("const") {
                add(scalar_text(v));
            }
            for v in alt
                .get("enum")
                .and_then(Json::as_array)
                .into_iter()
                .flatten()
            {
                add(scalar_text(v));
            }
            let is_boolean = match alt.get("type") {
                Some(Json::String(t)) => t == "boolean",
                Some(Json::Array(ts)) => ts.iter().any(|t| t == "boolean"),
                _ => false,
            };
            if is_boolean {
                add("true".to_owned());
                add("false".to_owned());
            }
            if let Some(words) = alt
                .get("pattern")
                .and_then(Json::as_str)
                .and_then(alternation)
            {
                for w in words {
                    add(w.to_owned());
                }
            }
        }
    }
    out
}

/// The words of a `^(?i:a|b|c)$` pattern.
pub(crate) fn alternation(pattern: &str) -> Option<Vec<&str>> {
    let inner = pattern.strip_prefix("^(?i:")?.strip_suffix(")$")?;
    let words: Vec<&str> = inner.split('|').collect();
    words
        .iter()
        .all(|w| {
            !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
        .then_some(words)
}

/// The clouds the schemas name (`resources.cloud`), for `infra`.
pub(crate) fn clouds() -> Vec<&'static str> {
    let cloud = &BUNDLE["$defs"]["resources"]["properties"]["cloud"]["pattern"];
    cloud.as_str().and_then(alternation).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Segment {
        Segment::Key(k.to_owned())
    }

    #[test]
    fn fields_follow_refs_and_items() {
        let names = |kind, path: &[Segment]| -> Vec<String> {
            fields(&at(kind, path))
                .into_iter()
                .map(|f| f.name)
                .collect()
        };
        let header = names(DocumentKind::Header, &[]);
        assert_eq!(
            header,
            [
                "name",
                "execution",
                "primary_tasks",
                "termination_delay",
                "inter_connection"
            ]
        );
        let resources = names(DocumentKind::Task, &[key("resources")]);
        assert!(resources.contains(&"accelerators".to_owned()));
        assert!(!resources.iter().any(|f| f.starts_with('_')));
        let option = names(
            DocumentKind::Task,
            &[key("resources"), key("any_of"), Segment::Item],
        );
        assert!(option.contains(&"infra".to_owned()) && !option.contains(&"any_of".to_owned()));
        let recovery = names(DocumentKind::Task, &[key("resources"), key("job_recovery")]);
        assert_eq!(
            recovery,
            [
                "strategy",
                "max_restarts_on_errors",
                "recover_on_exit_codes"
            ]
        );
    }

    #[test]
    fn descriptions_forms_and_values() {
        let resources = at(DocumentKind::Task, &[key("resources")]);
        assert!(description(resources[0]).is_some_and(|d| d.contains("each node")));
        let execution = at(DocumentKind::Header, &[key("execution")]);
        assert_eq!(forms(execution[0]), ["`parallel`"]);
        assert_eq!(values(&execution), ["parallel"]);
        let primary = at(DocumentKind::Header, &[key("primary_tasks")]);
        assert_eq!(forms(primary[0]), ["a list of strings", "empty"]);
        let spot = at(DocumentKind::Task, &[key("resources"), key("use_spot")]);
        assert_eq!(values(&spot), ["true", "false"]);
        assert!(clouds().contains(&"aws") && clouds().contains(&"kubernetes"));
    }
}
