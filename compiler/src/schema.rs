//! Validator: the JSON Schemas in `schemas/` applied to each document, every
//! error mapped back to the YAML span at fault.
//!
//! The schemas are the source of truth for structure; they are compiled
//! into Rust at build time, from copies whose `pattern`s are plain matchers
//! (`patterns`).

use crate::suggest::did_you_mean;
use crate::yaml::{Node, Value};
use crate::{Diagnostic, Diagnostics, Rule, Span};
use jsonschema::ValidationError;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::LocationSegment;
use serde_json::{Map, Value as Json};
use std::sync::LazyLock;

mod patterns;

const BASE: &str = "https://skyc.dev/schemas/";
/// The schemas; `skyc.json`, the editor's entry point, comes last.
const SOURCES: [(&str, &str); 8] = [
    ("header.json", include_str!("../../schemas/header.json")),
    ("task.json", include_str!("../../schemas/task.json")),
    (
        "resources.json",
        include_str!("../../schemas/resources.json"),
    ),
    ("storage.json", include_str!("../../schemas/storage.json")),
    ("service.json", include_str!("../../schemas/service.json")),
    ("pool.json", include_str!("../../schemas/pool.json")),
    ("volume.json", include_str!("../../schemas/volume.json")),
    ("skyc.json", include_str!("../../schemas/skyc.json")),
];

/// A validator compiled into Rust at build time by jsonschema's
/// `validator` macro (no schema compilation at run time), from the
/// validator's copies of the schemas, whose `pattern`s are `format`s
/// checked by plain matchers: building regexes at run time cost more than
/// checking (see `patterns`).
macro_rules! validator {
    ($(#[$doc:meta])* $name:ident { $($options:tt)* }) => {
        $(#[$doc])*
        #[jsonschema::validator(
            $($options)*
            validate_formats = true,
            formats = {
                "skyc-group-name" => crate::schema::patterns::group_name,
                "skyc-delay" => crate::schema::patterns::delay,
                "skyc-cloud" => crate::schema::patterns::cloud,
                "skyc-infra" => crate::schema::patterns::infra,
                "skyc-size" => crate::schema::patterns::size,
                "skyc-volume-infra" => crate::schema::patterns::volume_infra,
                "skyc-minutes" => crate::schema::patterns::minutes,
                "skyc-autostop-mode" => crate::schema::patterns::autostop_mode,
                "skyc-spot-placer" => crate::schema::patterns::spot_placer,
                "skyc-load-balancing" => crate::schema::patterns::load_balancing,
                "skyc-store" => crate::schema::patterns::store,
                "skyc-storage-mode" => crate::schema::patterns::storage_mode,
                "skyc-volume-type" => crate::schema::patterns::volume_type,
                "skyc-bytes" => crate::schema::patterns::bytes,
                "skyc-duration" => crate::schema::patterns::duration,
                "skyc-volume-name" => crate::schema::patterns::volume_name,
                "skyc-one-line" => crate::schema::patterns::one_line,
                "skyc-relative-path" => crate::schema::patterns::relative_path,
            }
        )]
        struct $name;
    };
}

validator! {
    /// The header schema.
    HeaderSchema { path = "validator-schemas/header.json", }
}

validator! {
    /// The task schema, with the schemas it references.
    TaskSchema {
        path = "validator-schemas/task.json",
        resources = {
            "https://skyc.dev/schemas/resources.json" => { path = "validator-schemas/resources.json" },
            "https://skyc.dev/schemas/storage.json" => { path = "validator-schemas/storage.json" },
            "https://skyc.dev/schemas/service.json" => { path = "validator-schemas/service.json" },
            "https://skyc.dev/schemas/pool.json" => { path = "../schemas/pool.json" },
        },
    }
}

validator! {
    /// The volume schema (`skyc volume apply`).
    VolumeSchema { path = "validator-schemas/volume.json", }
}

/// Parsed schema documents, for field-name suggestions (error paths only).
struct Schemas {
    task_json: Json,
    volume_json: Json,
    resources_json: Json,
    service_json: Json,
    pool_json: Json,
}

fn parse(name: &str) -> Json {
    let text = SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("{}", |(_, t)| t);
    serde_json::from_str(text).expect("embedded schemas are valid JSON (checked by tests)")
}

static SCHEMAS: LazyLock<Schemas> = LazyLock::new(|| Schemas {
    task_json: parse("task.json"),
    volume_json: parse("volume.json"),
    resources_json: parse("resources.json"),
    service_json: parse("service.json"),
    pool_json: parse("pool.json"),
});

/// Which schema a document is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DocumentKind {
    Header,
    Task,
    Volume,
}

/// Validates `root` and reports every structural error.
pub(crate) fn validate(kind: DocumentKind, root: &Node, diagnostics: &mut Diagnostics) {
    let instance = to_json(root, kind, &mut Vec::new());
    let errors = match kind {
        DocumentKind::Header => HeaderSchema::iter_errors(&instance),
        DocumentKind::Task => TaskSchema::iter_errors(&instance),
        DocumentKind::Volume => VolumeSchema::iter_errors(&instance),
    };
    for error in errors {
        if diagnostics.is_full() {
            // Counted, but not worth building: it would not be shown.
            diagnostics.count_unshown_error();
        } else {
            report(&error, kind, root, diagnostics);
        }
    }
}

/// The schema for editors: one document (header or task, chosen by the
/// presence of `execution`) with every schema bundled under `$defs`.
pub fn editor_schema() -> Json {
    let mut defs = Map::new();
    for (name, _) in &SOURCES[..SOURCES.len() - 1] {
        let mut schema = parse(name);
        if let Json::Object(obj) = &mut schema {
            obj.remove("$schema");
            obj.remove("$id");
        }
        let key = name.trim_end_matches(".json");
        defs.insert(key.to_owned(), rewrite_refs(schema, key));
    }
    let mut root = parse("skyc.json");
    if let Json::Object(obj) = &mut root {
        obj.insert("then".into(), serde_json::json!({"$ref": "#/$defs/header"}));
        obj.insert("else".into(), serde_json::json!({"$ref": "#/$defs/task"}));
        obj.insert("$defs".into(), Json::Object(defs));
    }
    root
}

/// Rewrites references so a schema nested at `#/$defs/{owner}` still
/// resolves: local `#/...` gains the prefix, `x.json#/...` points at x.
fn rewrite_refs(value: Json, owner: &str) -> Json {
    match value {
        Json::Object(obj) => Json::Object(
            obj.into_iter()
                .map(|(k, v)| {
                    if k == "$ref"
                        && let Json::String(r) = &v
                    {
                        let r = r.strip_prefix(BASE).unwrap_or(r);
                        let target = match r.split_once('#') {
                            Some(("", frag)) => format!("#/$defs/{owner}{frag}"),
                            Some((file, frag)) => {
                                format!("#/$defs/{}{frag}", file.trim_end_matches(".json"))
                            }
                            None => format!("#/$defs/{}", r.trim_end_matches(".json")),
                        };
                        return (k, Json::String(target));
                    }
                    (k, rewrite_refs(v, owner))
                })
                .collect(),
        ),
        Json::Array(items) => {
            Json::Array(items.into_iter().map(|v| rewrite_refs(v, owner)).collect())
        }
        other => other,
    }
}

/// The JSON value SkyPilot's schema check sees for `node`: keys and env
/// values stringified as `str()` does, non-finite floats as their text.
fn to_json(node: &Node, kind: DocumentKind, path: &mut Vec<String>) -> Json {
    match &node.value {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::Float(f) => serde_json::Number::from_f64(*f).map_or_else(
            || Json::String(crate::yaml::python_float_repr(*f)),
            Json::Number,
        ),
        Value::String(s) => Json::String(s.clone()),
        Value::Seq(items) => Json::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    path.push(i.to_string());
                    let v = to_json(n, kind, path);
                    path.pop();
                    v
                })
                .collect(),
        ),
        Value::Map(entries) => {
            let stringify = kind == DocumentKind::Task
                && path.len() == 1
                && matches!(path[0].as_str(), "envs" | "secrets");
            // SkyPilot drops top-level fields whose value is null before
            // validating a task (an unknown field is still reported: a later
            // assertion trips on it) and before validating `service` (where
            // nothing does).
            let (top, in_service) = match path.as_slice() {
                [] => (true, false),
                [field] => (false, field == "service"),
                _ => (false, false),
            };
            let drop_null = |key: &str| {
                kind == DocumentKind::Task && (in_service || (top && KNOWN_NULLABLE.contains(&key)))
            };
            let mut map = Map::with_capacity(entries.len());
            for e in entries {
                let key = e.key.python_str().unwrap_or_default();
                if e.value.is_null() && drop_null(&key) {
                    continue;
                }
                let value = if stringify && !e.value.is_null() {
                    Json::String(e.value.python_literal())
                } else {
                    path.push(key.clone());
                    let v = to_json(&e.value, kind, path);
                    path.pop();
                    v
                };
                map.insert(key, value);
            }
            Json::Object(map)
        }
    }
}

/// Top-level task fields that may be written with no value. (`envs:` with
/// no value crashes SkyPilot's loader, so it is not among them.)
const KNOWN_NULLABLE: &[&str] = &[
    "name",
    "workdir",
    "event_callback",
    "num_nodes",
    "resources",
    "file_mounts",
    "service",
    "pool",
    "setup",
    "run",
    "secrets",
    "managed_secrets",
    "inputs",
    "outputs",
    "config",
    "volumes",
    "api_server_access",
];

/// Where an instance path lands in the YAML tree.
struct Target<'a> {
    node: Option<&'a Node>,
    /// The span of the key under which the node sits, if any.
    key_span: Option<Span>,
    /// The dotted field name for messages (`resources.any_of[0].cpus`).
    field: String,
}

fn locate<'a>(root: &'a Node, path: &jsonschema::paths::Location) -> Target<'a> {
    let mut node = Some(root);
    let mut key_span = None;
    let mut field = String::new();
    for segment in path {
        match segment {
            LocationSegment::Property(name) => {
                if !field.is_empty() {
                    field.push('.');
                }
                field.push_str(&name);
                let entry = node
                    .and_then(Node::as_map)
                    .and_then(|entries| entries.iter().find(|e| key_is(&e.key, &name)));
                key_span = entry.map(|e| e.key.span);
                node = entry.map(|e| &e.value);
            }
            LocationSegment::Index(i) => {
                field.push_str(&format!("[{i}]"));
                node = node.and_then(Node::as_seq).and_then(|items| items.get(i));
                key_span = None;
            }
        }
    }
    Target {
        node,
        key_span,
        field,
    }
}

fn report(error: &ValidationError<'_>, kind: DocumentKind, root: &Node, out: &mut Diagnostics) {
    let target = locate(root, error.instance_path());
    let span = target
        .node
        .map_or(target.key_span.unwrap_or(root.span), |n| n.span);
    let field = if target.field.is_empty() {
        match kind {
            DocumentKind::Header => "the Job Group header".to_owned(),
            DocumentKind::Task => "the task".to_owned(),
            DocumentKind::Volume => "the volume".to_owned(),
        }
    } else {
        format!("`{}`", target.field)
    };
    let found = target.node.map_or("nothing", Node::type_name);
    match error.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            for name in unexpected {
                // Finding each key is a scan of its mapping: stop once
                // nothing more would be shown.
                if out.is_full() {
                    break;
                }
                out.push(unknown_field(root, &target, name, kind));
            }
        }
        ValidationErrorKind::Required { property } => {
            let property = property.as_str().unwrap_or_default();
            let at = target.key_span.unwrap_or(Span::at(span.start as usize));
            out.push(
                Diagnostic::new(
                    Rule::MissingField,
                    at,
                    format!("{field} is missing the required field `{property}`"),
                )
                .label(format!("`{property}` is required here")),
            );
        }
        ValidationErrorKind::Type { kind: expected } => {
            out.push(invalid_type(
                &target,
                span,
                &field,
                &describe_types(expected),
                found,
            ));
        }
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            // Report the branch whose type the value has; if none or
            // several, say which types would do.
            let path = error.instance_path();
            let matching: Vec<&Vec<ValidationError<'static>>> = context
                .iter()
                .filter(|branch| !branch.iter().any(|e| is_type_mismatch(e, path)))
                .collect();
            if let [branch] = matching.as_slice() {
                for e in branch.iter() {
                    report(e, kind, root, out);
                }
            } else {
                let mut types = Vec::new();
                for branch in context {
                    for e in branch {
                        expected_types(e, path, &mut types);
                    }
                }
                let expected = if types.is_empty() {
                    "one of the accepted forms".to_owned()
                } else {
                    join_or(&types)
                };
                out.push(invalid_type(&target, span, &field, &expected, found));
            }
        }
        ValidationErrorKind::Pattern { .. } => out.push(pattern_error(&target, &field, span)),
        // A `pattern` of `schemas/`, checked as a format (see `patterns`).
        ValidationErrorKind::Format { format } if format.starts_with("skyc-") => {
            out.push(pattern_error(&target, &field, span));
        }
        ValidationErrorKind::Constant { expected_value } => out.push(
            Diagnostic::new(
                Rule::InvalidValue,
                span,
                format!("{field} must be `{}`", display_json(expected_value)),
            )
            .label(format!("found {}", shown(target.node))),
        ),
        ValidationErrorKind::Enum { options } => out.push(
            Diagnostic::new(
                Rule::InvalidValue,
                span,
                format!("{field} must be one of {}", display_json(options)),
            )
            .label(format!("found {}", shown(target.node))),
        ),
        ValidationErrorKind::Minimum { limit } => {
            bound(out, &target, &field, span, format!("at least {limit}"))
        }
        ValidationErrorKind::Maximum { limit } => {
            bound(out, &target, &field, span, format!("at most {limit}"))
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            bound(out, &target, &field, span, format!("greater than {limit}"))
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            bound(out, &target, &field, span, format!("less than {limit}"))
        }
        ValidationErrorKind::MinLength { limit } => bound(
            out,
            &target,
            &field,
            span,
            format!("at least {limit} characters long"),
        ),
        ValidationErrorKind::MaxLength { limit } => bound(
            out,
            &target,
            &field,
            span,
            format!("at most {limit} characters long"),
        ),
        ValidationErrorKind::MinItems { limit } => bound(
            out,
            &target,
            &field,
            span,
            format!("a list of at least {limit} items"),
        ),
        ValidationErrorKind::MaxItems { limit } => bound(
            out,
            &target,
            &field,
            span,
            format!("a list of at most {limit} items"),
        ),
        ValidationErrorKind::MaxProperties { limit } => {
            let message =
                if target.field.ends_with("accelerators") || target.field.ends_with("gpus") {
                    format!(
                        "{field} may name only one accelerator inside `any_of` or `ordered`; \
                     list the alternatives as separate entries"
                    )
                } else {
                    format!("{field} may have at most {limit} entries")
                };
            out.push(
                Diagnostic::new(field_rule(&target.field, Rule::InvalidValue), span, message)
                    .label("too many entries"),
            );
        }
        ValidationErrorKind::MinProperties { limit } => bound(
            out,
            &target,
            &field,
            span,
            format!("a mapping of at least {limit} entries"),
        ),
        ValidationErrorKind::UniqueItems => out.push(
            Diagnostic::new(
                field_rule(&target.field, Rule::InvalidValue),
                span,
                format!("{field} lists the same value twice"),
            )
            .label("duplicate values"),
        ),
        ValidationErrorKind::Not { .. } if target.field.ends_with("custom_metadata") => out.push(
            Diagnostic::new(
                Rule::InvalidValue,
                span,
                format!("{field} must not set `name` or `namespace`"),
            )
            .label("SkyPilot owns these"),
        ),
        _ => out.push(
            Diagnostic::new(
                field_rule(&target.field, Rule::InvalidValue),
                span,
                format!("{field} is invalid: {}", error.masked()),
            )
            .label("invalid value"),
        ),
    }
}

/// Whether `key` reads as `name` (its Python `str()`), without building
/// that string for string keys: this runs per key per error.
fn key_is(key: &Node, name: &str) -> bool {
    match key.as_str() {
        Some(s) => s == name,
        None => key.python_str().as_deref() == Some(name),
    }
}

fn unknown_field(root: &Node, target: &Target<'_>, name: &str, kind: DocumentKind) -> Diagnostic {
    let key_span = target
        .node
        .and_then(Node::as_map)
        .and_then(|entries| entries.iter().find(|e| key_is(&e.key, name)))
        .map_or(root.span, |e| e.key.span);
    let context = if target.field.is_empty() {
        match kind {
            DocumentKind::Volume => "the volume".to_owned(),
            _ => "task".to_owned(),
        }
    } else {
        format!("`{}`", target.field)
    };
    if target.field == "envs" || target.field == "secrets" {
        return Diagnostic::new(
            Rule::InvalidValue,
            key_span,
            format!("`{name}` is not a valid environment variable name"),
        )
        .label("invalid name")
        .help("names are letters, digits and `_`, not starting with a digit");
    }
    let mut d = Diagnostic::new(
        Rule::UnknownField,
        key_span,
        format!("unknown field `{name}` in {context}"),
    )
    .label("not a field SkyPilot knows");
    if target.field == "resources" && name == "hooks" {
        return d.help("hooks are task-scoped: move them to `config.hooks`");
    }
    if target.field.ends_with("target_qps_per_replica") {
        return Diagnostic::new(
            Rule::InvalidValue,
            key_span,
            format!("`{name}` is not an accelerator key of `{}`", target.field),
        )
        .label("expected an accelerator such as `H100` or `A100:1`")
        .help("keys are upper-case letters and digits, optionally with `:COUNT`");
    }
    if (target.field == "pool" || target.field.ends_with(".pool")) && SERVICE_FIELDS.contains(&name)
    {
        return d.help(format!(
            "`{name}` is a field of a service (`service:`); a pool has `workers`, or \
             `min_workers` and `max_workers` to autoscale"
        ));
    }
    let candidates = fields_at(kind, &target.field);
    if let Some(suggestion) = did_you_mean(name, candidates.iter().map(String::as_str)) {
        d = d.did_you_mean(key_span, name, suggestion);
    }
    d
}

/// A service's fields that a pool does not have.
const SERVICE_FIELDS: [&str; 7] = [
    "replicas",
    "replica_policy",
    "readiness_probe",
    "ports",
    "load_balancing_policy",
    "load_balancer",
    "tls",
];

/// The property names the schema defines for the object at `field`.
fn fields_at(kind: DocumentKind, field: &str) -> Vec<String> {
    let schemas = &*SCHEMAS;
    if kind == DocumentKind::Header {
        return Vec::new();
    }
    let mut schema = if kind == DocumentKind::Volume {
        &schemas.volume_json
    } else {
        &schemas.task_json
    };
    let mut in_resources = false;
    for part in field.split('.').filter(|p| !p.is_empty()) {
        let (name, indexed) = match part.split_once('[') {
            Some((n, _)) => (n, true),
            None => (part, false),
        };
        let next = schema.get("properties").and_then(|p| p.get(name));
        schema = match next {
            Some(s) if s.get("$ref").is_some() && name == "resources" => {
                in_resources = true;
                &schemas.resources_json
            }
            Some(s) if s.get("$ref").is_some() && name == "service" => &schemas.service_json,
            Some(s) if s.get("$ref").is_some() && name == "pool" => &schemas.pool_json,
            Some(s) => s,
            None => return Vec::new(),
        };
        if indexed {
            schema = match schema.get("items") {
                Some(items) if items.get("$ref").is_some() && in_resources => {
                    &schemas.resources_json["$defs"]["option"]
                }
                Some(items) => items,
                None => return Vec::new(),
            };
        }
    }
    // A field of several forms (`readiness_probe`): the mapping's fields.
    let object = schema
        .get("anyOf")
        .and_then(Json::as_array)
        .and_then(|branches| branches.iter().find(|b| b.get("properties").is_some()));
    object
        .unwrap_or(schema)
        .get("properties")
        .and_then(Json::as_object)
        .map(|p| p.keys().filter(|k| !k.starts_with('_')).cloned().collect())
        .unwrap_or_default()
}

/// Field-specific rules, so a bad `infra` reads as an infra error.
fn field_rule(field: &str, default: Rule) -> Rule {
    let last = field.rsplit('.').next().unwrap_or(field);
    let last = last.split('[').next().unwrap_or(last);
    match last {
        "infra" => Rule::InvalidInfra,
        "cpus" => Rule::InvalidCpus,
        "memory" => Rule::InvalidMemory,
        "accelerators" | "gpus" => Rule::InvalidAccelerators,
        "ports" => Rule::InvalidPorts,
        "disk_size" => Rule::InvalidDiskSize,
        "job_recovery" | "max_restarts_on_errors" | "recover_on_exit_codes" => {
            Rule::InvalidJobRecovery
        }
        "termination_delay" => Rule::InvalidDuration,
        "num_nodes" => Rule::InvalidNumNodes,
        _ => default,
    }
}

/// A value of a type the schema does not take here.
fn invalid_type(
    target: &Target<'_>,
    span: Span,
    field: &str,
    expected: &str,
    found: &str,
) -> Diagnostic {
    Diagnostic::new(
        field_rule(&target.field, Rule::InvalidType),
        span,
        format!("{field} must be {expected}, found {found}"),
    )
    .label(format!("expected {expected}"))
}

fn pattern_error(target: &Target<'_>, field: &str, span: Span) -> Diagnostic {
    let value = shown(target.node);
    let last = target.field.rsplit('.').next().unwrap_or("");
    let (rule, message, help): (Rule, String, &str) = match last {
        "infra" => (
            Rule::InvalidInfra,
            format!("invalid infra {value}"),
            "use `cloud[/region[/zone]]` (e.g. `aws/us-east-1`), `*/region`, or `kubernetes[/context]`",
        ),
        "disk_size" => (
            Rule::InvalidDiskSize,
            format!("invalid disk size {value}"),
            "use a whole number of GB, optionally with a unit: `100`, `100GB`, `1TB`",
        ),
        "name" if target.field == "name" && value == "``" => (
            Rule::InvalidGroupName,
            "the Job Group name is empty".to_owned(),
            "name the group: letters, digits, `-` and `_`",
        ),
        "name" if target.field == "name" => (
            Rule::InvalidGroupName,
            format!("invalid Job Group name {value}"),
            "a group name has only letters, digits, `-` and `_`",
        ),
        "autostop" => (
            Rule::InvalidValue,
            format!("invalid `autostop` {value}"),
            "autostop takes idle minutes: `30`, or with a unit `30m`, `2h`, `1d`, `1w`",
        ),
        "load_balancing_policy" => (
            Rule::InvalidValue,
            format!("unknown load balancing policy {value}"),
            "use `round_robin`, `least_load` or `instance_aware_least_load`",
        ),
        "spot_placer" => (
            Rule::InvalidValue,
            format!("unknown spot placer {value}"),
            "the one spot placer is `dynamic_fallback`",
        ),
        "cloud" => (
            Rule::InvalidInfra,
            format!("unknown cloud {value}"),
            "prefer `infra: <cloud>[/<region>]`",
        ),
        _ if target.field.contains("termination_delay") => (
            Rule::InvalidDuration,
            format!("invalid duration {value} in {field}"),
            "use NUMBER[s|m|h|d|w], e.g. `30s`, `5m`, `1h`; a bare number is seconds",
        ),
        _ => (
            Rule::InvalidValue,
            format!("{field} has an invalid value {value}"),
            "",
        ),
    };
    let d = Diagnostic::new(rule, span, message).label("invalid value");
    if help.is_empty() { d } else { d.help(help) }
}

/// "`field` must be {what}": a value outside a numeric or size bound.
fn bound(out: &mut Diagnostics, target: &Target<'_>, field: &str, span: Span, what: String) {
    out.push(
        Diagnostic::new(
            field_rule(&target.field, Rule::InvalidValue),
            span,
            format!("{field} must be {what}"),
        )
        .label(format!("found {}", shown(target.node))),
    );
}

/// A scalar shown in a message: `` `4++` ``, or its type for collections.
pub(crate) fn shown(node: Option<&Node>) -> String {
    match node {
        Some(n) => match &n.value {
            Value::String(s) => format!("`{s}`"),
            Value::Seq(_) | Value::Map(_) => n.type_name().to_owned(),
            Value::Null => "null".to_owned(),
            _ => format!("`{}`", n.python_str().unwrap_or_default()),
        },
        None => "nothing".to_owned(),
    }
}

/// Whether `e` says the value at `path` has the wrong type (directly, or in
/// every branch of a nested `anyOf`).
fn is_type_mismatch(e: &ValidationError<'_>, path: &jsonschema::paths::Location) -> bool {
    if e.instance_path() != path {
        return false;
    }
    match e.kind() {
        ValidationErrorKind::Type { .. } => true,
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            context
                .iter()
                .all(|branch| branch.iter().any(|e| is_type_mismatch(e, path)))
        }
        _ => false,
    }
}

/// The types the errors at `path` ask for, in schema order, without repeats.
fn expected_types(
    e: &ValidationError<'_>,
    path: &jsonschema::paths::Location,
    out: &mut Vec<String>,
) {
    if e.instance_path() != path {
        return;
    }
    match e.kind() {
        ValidationErrorKind::Type { kind } => {
            let t = describe_types(kind);
            if !out.contains(&t) {
                out.push(t);
            }
        }
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            for branch in context {
                for e in branch {
                    expected_types(e, path, out);
                }
            }
        }
        _ => {}
    }
}

fn describe_types(kind: &TypeKind) -> String {
    let names: Vec<String> = match kind {
        TypeKind::Single(t) => vec![type_phrase(&t.to_string())],
        TypeKind::Multiple(set) => set
            .into_iter()
            .map(|t| type_phrase(&t.to_string()))
            .collect(),
    };
    join_or(&names)
}

fn type_phrase(json_type: &str) -> String {
    match json_type {
        "string" => "a string",
        "integer" => "an integer",
        "number" => "a number",
        "boolean" => "a boolean",
        "array" => "a list",
        "object" => "a mapping",
        "null" => "null",
        other => other,
    }
    .to_owned()
}

fn join_or(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

fn display_json(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        Json::Array(items) => items
            .iter()
            .map(|i| format!("`{}`", display_json(i)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_schemas_are_valid_2020_12() {
        for (name, text) in SOURCES {
            let schema: Json = serde_json::from_str(text).unwrap();
            jsonschema::meta::validate(&schema).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let _ = &*SCHEMAS;
    }

    /// The validator's copies are `schemas/` with each `pattern` replaced by
    /// its format, and nothing else: `SKYC_BLESS=1` rewrites them.
    #[test]
    fn validator_schemas_are_the_schemas_with_formats() {
        let copies = [
            (
                "header.json",
                include_str!("../validator-schemas/header.json"),
            ),
            ("task.json", include_str!("../validator-schemas/task.json")),
            (
                "resources.json",
                include_str!("../validator-schemas/resources.json"),
            ),
            (
                "storage.json",
                include_str!("../validator-schemas/storage.json"),
            ),
            (
                "service.json",
                include_str!("../validator-schemas/service.json"),
            ),
            (
                "volume.json",
                include_str!("../validator-schemas/volume.json"),
            ),
        ];
        for (name, source) in SOURCES {
            let mut expected = source.to_owned();
            for (pattern, format, _) in patterns::PATTERNS {
                let key = format!("\"pattern\": {}", Json::from(*pattern));
                expected = expected.replace(&key, &format!("\"format\": \"{format}\""));
            }
            let copy = copies.iter().find(|(n, _)| *n == name);
            let Some((_, copy)) = copy else {
                assert_eq!(
                    expected, source,
                    "{name} has patterns: give the validator a copy"
                );
                continue;
            };
            assert!(
                !expected.contains("\"pattern\""),
                "{name}: a pattern without a matcher"
            );
            if std::env::var_os("SKYC_BLESS").is_some() {
                let path = format!("{}/validator-schemas/{name}", env!("CARGO_MANIFEST_DIR"));
                std::fs::write(path, &expected).unwrap();
            } else {
                assert_eq!(
                    *copy, expected,
                    "validator-schemas/{name} is stale: SKYC_BLESS=1"
                );
            }
        }
    }

    #[test]
    fn editor_schema_is_self_contained() {
        let bundled = editor_schema();
        let text = bundled.to_string();
        assert!(
            !text.contains(&format!("\"$ref\":\"{BASE}")),
            "external refs left in the bundle"
        );
        let validator = jsonschema::validator_for(&bundled).expect("bundle compiles");
        let task = serde_json::json!({"name": "t", "resources": {"cpus": "4+", "any_of": [{"infra": "aws"}]}});
        assert!(validator.is_valid(&task));
        let bad = serde_json::json!({"name": "t", "resources": {"any_of": [{"bogus": 1}]}});
        assert!(!validator.is_valid(&bad));
        let service =
            serde_json::json!({"name": "t", "service": {"replica_policy": {"min_replicas": 1}}});
        assert!(validator.is_valid(&service));
        let bad =
            serde_json::json!({"name": "t", "service": {"replica_policy": {"max_replicas": 1}}});
        assert!(!validator.is_valid(&bad));
        let pool = serde_json::json!({"setup": "x", "pool": {"min_workers": 1, "max_workers": 2}});
        assert!(validator.is_valid(&pool));
        let bad = serde_json::json!({"setup": "x", "pool": {"worker": 2}});
        assert!(!validator.is_valid(&bad));
        let bad = serde_json::json!({"service": {"pool": {"workers": -1}}});
        assert!(!validator.is_valid(&bad));
        let header =
            serde_json::json!({"name": "g", "execution": "parallel", "termination_delay": "30s"});
        assert!(validator.is_valid(&header));
    }
}
