//! One task: its fields beyond structure, lowered to an IR [`Task`].

use super::Options;
use super::{pool, resources, service};
use crate::ir::{At, EnvVar, FileMount, Role, Task, VolumeMount, Workdir};
use crate::schema::{self, DocumentKind};
use crate::yaml::{Node, Value};
use crate::{Diagnostic, Diagnostics, Rule, Span};

pub(super) struct TaskContext<'a> {
    pub options: &'a Options,
    pub in_group: bool,
}

pub(super) fn analyze(ctx: &TaskContext<'_>, root: &Node, out: &mut Diagnostics) -> Option<Task> {
    let envs = envs(ctx, root, out);
    // Everything but `service` is the same in the filled-in copy.
    let filled = service::fill_in_env_vars(root, &fill_in_values(&envs, root), out);
    let root = filled.as_ref().unwrap_or(root);
    schema::validate(DocumentKind::Task, root, out);
    service::check(root, out);
    // A name of another type is a schema error; the task is then unnamed.
    let (name, name_span) = match root.get("name").and_then(|n| Some((n.as_str()?, n.span))) {
        Some((n, span)) => (n.to_owned(), span),
        None => (String::new(), Span::default()),
    };
    let num_nodes = num_nodes(root, out);
    let secrets = secrets(root, out);
    let (resources, recovery) = resources::analyze(root.get_present("resources"), out);
    pool::check(root, ctx.in_group, out);
    check_file_mounts(root, out);
    for field in ["inputs", "outputs"] {
        if let Some(e) = root.entry(field)
            && e.value.as_map().is_some_and(<[_]>::is_empty)
        {
            out.push(
                Diagnostic::new(
                    Rule::InvalidValue,
                    e.value.span,
                    format!("`{field}` must name exactly one entry"),
                )
                .label("empty mapping"),
            );
        }
    }
    let text = |key: &str| {
        root.get_present(key)
            .and_then(Node::as_str)
            .map(str::to_owned)
    };
    Some(Task {
        name,
        name_span,
        role: Role::Primary,
        num_nodes,
        termination_delay_secs: None,
        resources,
        recovery,
        envs,
        secrets,
        setup: text("setup"),
        run: text("run"),
        workdir: workdir(root),
        file_mounts: file_mounts(root),
        volumes: volumes(root),
        config: root.get_present("config").map(to_plain_json),
    })
}

fn num_nodes(root: &Node, out: &mut Diagnostics) -> u32 {
    let Some(n) = root.get_present("num_nodes") else {
        return 1;
    };
    match n.value {
        Value::Int(i) if i > 0 => u32::try_from(i).unwrap_or_else(|_| {
            out.push(
                Diagnostic::new(
                    Rule::InvalidNumNodes,
                    n.span,
                    format!("`num_nodes` of {i} is too large"),
                )
                .label("too many nodes"),
            );
            1
        }),
        Value::Int(i) => {
            out.push(
                Diagnostic::new(
                    Rule::InvalidNumNodes,
                    n.span,
                    format!("`num_nodes` must be a positive integer, found {i}"),
                )
                .label("expected 1 or more"),
            );
            1
        }
        // `2.0` passes the schema's integer check but not SkyPilot's setter
        // (other floats are schema errors).
        Value::Float(f) if f.fract() == 0.0 => {
            out.push(
                Diagnostic::new(
                    Rule::InvalidNumNodes,
                    n.span,
                    format!(
                        "`num_nodes` must be a whole number written without a fraction, found `{f}`"
                    ),
                )
                .label("expected an integer such as 2")
                .help(format!("write `num_nodes: {}`", f.trunc())),
            );
            1
        }
        // Other types are schema errors.
        _ => 1,
    }
}

/// `envs`, stringified as SkyPilot does, with `--env` overrides applied;
/// a variable left without a value is an error.
fn envs(ctx: &TaskContext<'_>, root: &Node, out: &mut Diagnostics) -> Vec<EnvVar> {
    let mut vars: Vec<EnvVar> = Vec::new();
    for e in root
        .get_present("envs")
        .and_then(Node::as_map)
        .unwrap_or_default()
    {
        let Some(key) = e.key.python_str() else {
            continue;
        };
        let overridden = ctx.options.env.iter().rev().find(|(k, _)| *k == key);
        let value = match (&e.value.value, overridden) {
            (_, Some((_, v))) => v.clone(),
            (Value::Null, None) => {
                out.push(
                    Diagnostic::new(
                        Rule::MissingEnvValue,
                        e.key.span,
                        format!("environment variable `{key}` has no value"),
                    )
                    .label("no value")
                    .help(format!(
                        "set it in the file, or pass `--env {key}=VALUE`; for an empty value write `{key}: \"\"`"
                    )),
                );
                continue;
            }
            _ => e.value.python_literal(),
        };
        vars.push(EnvVar { name: key, value });
    }
    for (k, v) in &ctx.options.env {
        if !vars.iter().any(|e| e.name == *k) {
            vars.push(EnvVar {
                name: k.clone(),
                value: v.clone(),
            });
        }
    }
    vars
}

/// What SkyPilot fills into `service`: the envs, then the inline values of
/// `secrets` (which win).
fn fill_in_values(envs: &[EnvVar], root: &Node) -> Vec<(String, String)> {
    let mut values: Vec<(String, String)> = envs
        .iter()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect();
    for e in root
        .get_present("secrets")
        .and_then(Node::as_map)
        .unwrap_or_default()
    {
        if let Some(key) = e.key.python_str()
            && !e.value.is_null()
        {
            values.push((key, e.value.python_literal()));
        }
    }
    values
}

/// `secrets`: a mapping (inline values, or null for a managed secret) or a
/// list of `secrets:NAME` references. Only the names enter the IR.
fn secrets(root: &Node, out: &mut Diagnostics) -> Vec<String> {
    let Some(node) = root.get_present("secrets") else {
        return Vec::new();
    };
    let mut names = Vec::new();
    match &node.value {
        Value::Map(entries) => {
            for e in entries {
                let Some(key) = e.key.python_str() else {
                    continue;
                };
                if let Some(reference) = key.strip_prefix("secrets:") {
                    if !e.value.is_null() {
                        out.push(
                            Diagnostic::new(
                                Rule::InvalidSecret,
                                e.value.span,
                                format!("the secret reference `{key}` cannot have a value"),
                            )
                            .label("a reference takes no value")
                            .help(format!(
                                "write `{key}:` with no value to use the managed secret, or drop the \
                                 `secrets:` prefix to set `{reference}` inline"
                            )),
                        );
                    }
                    names.push(strip_scope(reference).to_owned());
                } else {
                    names.push(strip_scope(&key).to_owned());
                }
            }
        }
        Value::Seq(items) => {
            for item in items {
                let text = item.python_str().unwrap_or_default();
                match text.strip_prefix("secrets:") {
                    Some(reference) => names.push(strip_scope(reference).to_owned()),
                    None => out.push(
                        Diagnostic::new(
                            Rule::InvalidSecret,
                            item.span,
                            format!("`{text}` is not a secret reference"),
                        )
                        .label("expected `secrets:NAME`")
                        .help("list entries name managed secrets as `secrets:NAME`; for inline values use a mapping"),
                    ),
                }
            }
        }
        _ => {}
    }
    names
}

/// `personal.`/`workspace.`/`global.` scope prefixes are not part of the
/// variable name.
fn strip_scope(name: &str) -> &str {
    ["personal.", "workspace.", "global."]
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name)
}

/// What SkyPilot checks of `file_mounts` when loading: each source is a
/// path or URI string, or a storage mapping (whose fields the schema
/// checked) with consistent mode options.
fn check_file_mounts(root: &Node, out: &mut Diagnostics) {
    for e in root
        .get_present("file_mounts")
        .and_then(Node::as_map)
        .unwrap_or_default()
    {
        let dst = e.key.python_str().unwrap_or_default();
        // Other types are schema errors.
        if e.value.as_map().is_none() {
            continue;
        }
        let field = |k: &str| {
            e.value
                .get_present(k)
                .and_then(Node::as_str)
                .map(str::to_ascii_uppercase)
        };
        if field("store").as_deref() == Some("VOLUME") {
            if e.value.get_present("name").is_none() {
                out.push(
                    Diagnostic::new(
                        Rule::InvalidVolume,
                        e.key.span,
                        format!("the volume mounted at `{dst}` has no `name`"),
                    )
                    .label("`store: volume` needs the volume's `name`"),
                );
            }
            continue;
        }
        let mode = field("mode").unwrap_or_else(|| "MOUNT".to_owned());
        let config = e.value.get_present("config");
        let needs = |present: bool, what: &str, wanted: &str, span: Span, out: &mut Diagnostics| {
            if present && mode != wanted {
                out.push(
                    Diagnostic::new(
                        Rule::InvalidFileMount,
                        span,
                        format!("{what} can only be set when `mode` is {wanted}, not {mode}"),
                    )
                    .label("not allowed with this mode"),
                );
            }
        };
        if let Some(t) = e.value.get_present("type") {
            needs(true, "`type`", "MOUNT_CACHED", t.span, out);
        }
        if let Some(c) = config.and_then(|c| c.entry("mount_cached")) {
            needs(
                true,
                "`config.mount_cached`",
                "MOUNT_CACHED",
                c.key.span,
                out,
            );
        }
        if let Some(c) = config.and_then(|c| c.entry("mount")) {
            needs(true, "`config.mount`", "MOUNT", c.key.span, out);
        }
    }
}

fn workdir(root: &Node) -> Option<Workdir> {
    let n = root.get_present("workdir")?;
    match &n.value {
        Value::String(path) => Some(Workdir::Local {
            path: path.clone(),
            at: At(n.span),
        }),
        Value::Map(_) => Some(Workdir::Git {
            url: n.get("url")?.as_str()?.to_owned(),
            r#ref: n
                .get_present("ref")
                .and_then(Node::as_str)
                .map(str::to_owned),
        }),
        _ => None,
    }
}

fn file_mounts(root: &Node) -> Vec<FileMount> {
    let Some(entries) = root.get_present("file_mounts").and_then(Node::as_map) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|e| {
            let destination = e.key.python_str()?;
            Some(match &e.value.value {
                Value::String(s) => FileMount {
                    destination,
                    source: Some(s.clone()),
                    storage: None,
                    at: At(e.value.span),
                },
                _ => FileMount {
                    destination,
                    source: e
                        .value
                        .get_present("source")
                        .and_then(Node::as_str)
                        .map(str::to_owned),
                    storage: Some(to_plain_json(&e.value)),
                    at: At(e.value.span),
                },
            })
        })
        .collect()
}

fn volumes(root: &Node) -> Vec<VolumeMount> {
    root.get_present("volumes")
        .and_then(Node::as_map)
        .unwrap_or_default()
        .iter()
        .filter_map(|e| {
            Some(VolumeMount {
                path: e.key.python_str()?,
                volume: to_plain_json(&e.value),
                at: At(e.value.span),
            })
        })
        .collect()
}

/// A YAML value as plain JSON, for fields the IR carries through as written.
pub(super) fn to_plain_json(node: &Node) -> serde_json::Value {
    use serde_json::Value as Json;
    match &node.value {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::Float(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
        Value::String(s) => Json::String(s.clone()),
        Value::Seq(items) => Json::Array(items.iter().map(to_plain_json).collect()),
        Value::Map(entries) => Json::Object(
            entries
                .iter()
                .filter_map(|e| Some((e.key.python_str()?, to_plain_json(&e.value))))
                .collect(),
        ),
    }
}
