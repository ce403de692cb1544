//! The Job Group header: `name`, `execution`, `primary_tasks`,
//! `termination_delay`, `inter_connection`.

use crate::ir::{Execution, Group, InterConnection, Role, Task};
use crate::schema::{self, DocumentKind};
use crate::suggest::{did_you_mean, some_of};
use crate::units::parse_duration;
use crate::yaml::{Node, Value};
use crate::{Diagnostic, Diagnostics, Rule, Span};
use std::collections::HashSet;

const FIELDS: [&str; 5] = [
    "name",
    "execution",
    "primary_tasks",
    "termination_delay",
    "inter_connection",
];

pub(super) struct Header {
    name: String,
    name_span: Span,
    /// `None` (or empty in the file): every task is primary.
    primary: Option<Vec<(String, Span)>>,
    /// The same names, for lookups (a group may have thousands of tasks).
    primary_set: HashSet<String>,
    delay: Option<Delay>,
    inter_connection: InterConnection,
    inter_connection_span: Option<Span>,
}

/// `termination_delay`, in seconds.
struct Delay {
    span: Span,
    default: Option<u64>,
    /// Per-task entries: name, key span, seconds.
    per_task: Vec<(String, Span, u64)>,
}

impl Header {
    /// Checks the header; `None` when it is unusable (no valid name).
    pub(super) fn analyze(root: &Node, out: &mut Diagnostics) -> Option<Header> {
        schema::validate(DocumentKind::Header, root, out);
        for entry in root.as_map().unwrap_or_default() {
            let key = entry.key.python_str().unwrap_or_default();
            if !FIELDS.contains(&key.as_str()) {
                let mut d = Diagnostic::new(
                    Rule::UnknownHeaderField,
                    entry.key.span,
                    format!("unknown Job Group header field `{key}`; SkyPilot ignores it"),
                )
                .label("ignored");
                d = match did_you_mean(&key, FIELDS) {
                    Some(s) => d.did_you_mean(entry.key.span, &key, s),
                    None if key == "placement" => {
                        d.help("`placement` was removed; tasks are co-located when `inter_connection` needs it")
                    }
                    None => d,
                };
                out.push(d);
            }
        }
        let name_node = root.get("name")?;
        let Some(name) = name_node.as_str().map(str::to_owned) else {
            // The schema reports a non-string name, except a non-finite
            // float (`.inf`), which it sees as text: without this, no
            // group and no error.
            if !out.has_errors() {
                out.push(
                    Diagnostic::new(
                        Rule::InvalidType,
                        name_node.span,
                        format!("`name` must be a string, found {}", name_node.type_name()),
                    )
                    .label("expected a string"),
                );
            }
            return None;
        };
        let primary = root.get_present("primary_tasks").and_then(|p| {
            let items = p.as_seq()?;
            let names: Vec<(String, Span)> = items
                .iter()
                .filter_map(|n| Some((n.as_str()?.to_owned(), n.span)))
                .collect();
            (!names.is_empty()).then_some(names)
        });
        let delay = root
            .entry("termination_delay")
            .filter(|e| !e.value.is_null())
            .and_then(|e| delay(&e.value, e.key.span, out));
        let inter_connection_node = root.get_present("inter_connection");
        let inter_connection = match inter_connection_node.map(|n| &n.value) {
            Some(Value::Bool(true)) => InterConnection::Required,
            Some(Value::Bool(false)) => InterConnection::Disabled,
            _ => InterConnection::Auto,
        };
        let primary_set = primary.iter().flatten().map(|(n, _)| n.clone()).collect();
        Some(Header {
            name,
            name_span: name_node.span,
            primary,
            primary_set,
            delay,
            inter_connection,
            inter_connection_span: root.entry("inter_connection").map(|e| e.key.span),
        })
    }

    /// `inter_connection`, for the placement rules.
    pub(super) fn networking(&self) -> super::placement::Networking {
        super::placement::Networking {
            setting: self.inter_connection,
            span: self.inter_connection_span,
        }
    }

    fn is_primary(&self, task: &str) -> bool {
        self.primary.is_none() || self.primary_set.contains(task)
    }

    /// `primary_tasks` and `termination_delay` keys name real tasks; a delay
    /// that can never apply is reported.
    pub(super) fn check_references(&self, tasks: &[(String, Span)], out: &mut Diagnostics) {
        let names: Vec<&str> = tasks.iter().map(|(n, _)| n.as_str()).collect();
        let known: HashSet<&str> = names.iter().copied().collect();
        let unknown = |rule: Rule, name: &str, span: Span, what: &str| {
            let mut d = Diagnostic::new(
                rule,
                span,
                format!("{what} names `{name}`, which is not a task of this group"),
            )
            .label("unknown task");
            d = match did_you_mean(name, names.iter().copied()) {
                Some(s) => d.did_you_mean(span, name, s),
                None => d.help(format!(
                    "the group's tasks are: {}",
                    some_of(names.iter().copied())
                )),
            };
            d
        };
        if let Some(primary) = &self.primary {
            for (name, span) in primary {
                if !known.contains(name.as_str()) {
                    out.push(unknown(
                        Rule::UnknownPrimaryTask,
                        name,
                        *span,
                        "`primary_tasks`",
                    ));
                }
            }
        }
        let Some(delay) = &self.delay else { return };
        for (name, span, _) in &delay.per_task {
            if !known.contains(name.as_str()) {
                out.push(unknown(
                    Rule::UnknownDelayTask,
                    name,
                    *span,
                    "`termination_delay`",
                ));
            } else if self.primary.is_some() && self.is_primary(name) {
                out.push(
                    Diagnostic::new(
                        Rule::UnusedTerminationDelay,
                        *span,
                        format!("`{name}` is a primary task, so its termination delay never applies"),
                    )
                    .label("delay for a primary task")
                    .help("termination delays apply to auxiliary tasks (those not in `primary_tasks`)"),
                );
            }
        }
        let auxiliaries = names.iter().filter(|n| !self.is_primary(n)).count();
        if auxiliaries == 0 && !names.is_empty() {
            let why = if self.primary.is_none() {
                "no `primary_tasks` are listed, so every task is primary"
            } else {
                "every task is listed in `primary_tasks`"
            };
            out.push(
                Diagnostic::new(
                    Rule::UnusedTerminationDelay,
                    delay.span,
                    "`termination_delay` never applies: the group has no auxiliary task",
                )
                .label("no task is ever terminated after a delay")
                .help(format!(
                    "{why}; list the tasks that end the group in `primary_tasks`"
                )),
            );
        }
    }

    /// Warns when scripts use group hostnames that `inter_connection: false`
    /// turns off.
    pub(super) fn check_hostnames_enabled(&self, references: usize, out: &mut Diagnostics) {
        if self.inter_connection == InterConnection::Disabled && references > 0 {
            out.push(
                Diagnostic::new(
                    Rule::HostnamesDisabled,
                    self.inter_connection_span.unwrap_or(self.name_span),
                    format!(
                        "`inter_connection: false` turns group hostnames off, but the tasks use {references} of them"
                    ),
                )
                .label("hostnames are off")
                .help("remove `inter_connection: false`, or stop using `{task}-{i}.{group}` names"),
            );
        }
    }

    /// The group, with roles and resolved delays set on its tasks.
    pub(super) fn to_group(&self, mut tasks: Vec<Task>) -> Group {
        for task in &mut tasks {
            if self.is_primary(&task.name) {
                task.role = Role::Primary;
                task.termination_delay_secs = None;
            } else {
                task.role = Role::Auxiliary;
                let delay = self.delay.as_ref().map_or(0, |d| {
                    d.per_task
                        .iter()
                        .find(|(n, _, _)| *n == task.name)
                        .map(|(_, _, s)| *s)
                        .or(d.default)
                        .unwrap_or(0)
                });
                task.termination_delay_secs = Some(delay);
            }
        }
        Group {
            name: self.name.clone(),
            name_span: Some(self.name_span),
            inter_connection: self.inter_connection,
            execution: Execution::Parallel,
            tasks,
            pool: None,
        }
    }
}

/// Reads `termination_delay` (its form already checked by the schema, but
/// keys are checked here: the schema sees them stringified).
fn delay(node: &Node, key_span: Span, out: &mut Diagnostics) -> Option<Delay> {
    let seconds = |n: &Node| -> Option<u64> {
        match &n.value {
            Value::Int(i) => u64::try_from(*i).ok(),
            Value::String(s) => parse_duration(s),
            _ => None,
        }
    };
    match &node.value {
        Value::Map(entries) => {
            let mut delay = Delay {
                span: key_span,
                default: None,
                per_task: Vec::new(),
            };
            for e in entries {
                let Some(key) = e.key.as_str() else {
                    out.push(
                        Diagnostic::new(
                            Rule::InvalidValue,
                            e.key.span,
                            format!(
                                "`termination_delay` keys are task names or `default`, found {}",
                                e.key.type_name()
                            ),
                        )
                        .label("expected a task name")
                        .help("quote the key if it is a task name"),
                    );
                    continue;
                };
                let Some(s) = seconds(&e.value) else { continue };
                if key == "default" {
                    delay.default = Some(s);
                } else {
                    delay.per_task.push((key.to_owned(), e.key.span, s));
                }
            }
            Some(delay)
        }
        _ => seconds(node).map(|s| Delay {
            span: key_span,
            default: Some(s),
            per_task: Vec::new(),
        }),
    }
}
