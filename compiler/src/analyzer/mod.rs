//! Analyzer: from the YAML documents to a checked [`Group`], applying every
//! rule of the language. Structure is the schemas' job ([`crate::schema`]);
//! what a schema cannot say lives here, one subject per module.

mod header;
pub(crate) mod hostnames;
pub(crate) mod names;
mod placement;
mod pool;
pub(crate) mod resources;
mod service;
mod task;
pub(crate) mod volume;

use crate::ir::{Execution, Group, InterConnection, Role};
use crate::schema;
use crate::yaml::{Document, Node, Value};
use crate::{Diagnostic, Diagnostics, Rule, Source, Span};
use header::Header;
use hostnames::TaskTable;
use task::TaskContext;

/// What a check or build is given besides the file.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `--env KEY=VALUE`, applied to every task as SkyPilot's CLI does.
    pub env: Vec<(String, String)>,
}

pub(crate) struct Analyzer<'a> {
    source: &'a Source,
    options: &'a Options,
    diagnostics: &'a mut Diagnostics,
}

impl<'a> Analyzer<'a> {
    pub(crate) fn analyze(
        source: &'a Source,
        documents: &[Document],
        options: &'a Options,
        diagnostics: &'a mut Diagnostics,
    ) -> Option<Group> {
        let mut analyzer = Analyzer {
            source,
            options,
            diagnostics,
        };
        if is_job_group(documents) {
            analyzer.group(&documents[0], &documents[1..])
        } else {
            analyzer.single(documents)
        }
    }

    fn push(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic);
    }

    /// A Job Group: the header, then one task per non-empty document.
    fn group(&mut self, header_doc: &Document, task_docs: &[Document]) -> Option<Group> {
        let header = Header::analyze(&header_doc.root, self.diagnostics);
        let mut tasks = Vec::new();
        let mut seen: Vec<(String, Span)> = Vec::new();
        // Name to its first definition: a scan of `seen` per task is
        // quadratic in a hostile file's 100,000 tasks.
        let mut first_seen: std::collections::HashMap<String, Span> = Default::default();
        let mut any_document = false;
        let mut locations = Vec::new();
        for (i, doc) in task_docs.iter().enumerate() {
            if doc.root.is_null() {
                continue;
            }
            any_document = true;
            if doc.root.as_map().is_none() {
                self.push(not_a_mapping(&doc.root, "a task"));
                continue;
            }
            let name = self.group_task_name(&doc.root, i + 1, doc.start);
            if let Some((name, span)) = &name {
                if let Some(first) = first_seen.get(name) {
                    self.push(
                        Diagnostic::new(
                            Rule::DuplicateTaskName,
                            *span,
                            format!("a task named `{name}` is already defined"),
                        )
                        .label("second definition")
                        .with_secondary(*first, "first defined here")
                        .help("task names must be unique within a group: they name the hosts"),
                    );
                } else {
                    first_seen.insert(name.clone(), *span);
                    seen.push((name.clone(), *span));
                }
            }
            let ctx = TaskContext {
                options: self.options,
                in_group: true,
            };
            locations.push(placement::TaskLocations {
                name: name.map_or_else(|| format!("task {}", i + 1), |(n, _)| n),
                locations: resources::locations(doc.root.get_present("resources")),
            });
            if let Some(task) = task::analyze(&ctx, &doc.root, self.diagnostics) {
                tasks.push(task);
            }
        }
        if !any_document {
            self.push(
                Diagnostic::new(
                    Rule::GroupWithoutTasks,
                    Span::at(self.source.text().len()),
                    "the Job Group has a header but no task",
                )
                .label("expected a task document after the header")
                .help("add `---` and a task (`name:`, `run:`, ...) after the header"),
            );
        }
        self.check_priorities(task_docs);
        let header = header?;
        header.check_references(&seen, self.diagnostics);
        placement::check(&header.networking(), &locations, self.diagnostics);
        let group = header.to_group(tasks);
        let references = self.check_group(&group, task_docs);
        header.check_hostnames_enabled(references, self.diagnostics);
        (!self.diagnostics.has_errors()).then_some(group)
    }

    /// A group is one managed job, which has one priority: SkyPilot's API
    /// server rejects tasks that set different ones.
    fn check_priorities(&mut self, task_docs: &[Document]) {
        let priorities = task_docs.iter().filter_map(|doc| {
            doc.root
                .get("resources")
                .and_then(|r| r.get_present("priority"))
        });
        for (first, differing) in resources::disagreements(priorities) {
            self.push(
                Diagnostic::new(
                    Rule::ConflictingFields,
                    differing.span,
                    "the tasks of a Job Group must share one `priority`",
                )
                .label("differs from the first task's")
                .with_secondary(first.span, "first priority")
                .help("a group is scheduled as one job; set the same priority on every task, or on none"),
            );
        }
    }

    /// The `name` of a task in a group, checked as `_load_job_group` and
    /// `Task.validate_name` check it.
    fn group_task_name(
        &mut self,
        root: &Node,
        index: usize,
        start: Span,
    ) -> Option<(String, Span)> {
        let Some(entry) = root.entry("name").filter(|e| !e.value.is_null()) else {
            self.push(
                Diagnostic::new(
                    Rule::MissingTaskName,
                    if start.is_empty() {
                        Span::at(root.span.start as usize)
                    } else {
                        start
                    },
                    format!("task {index} of the Job Group has no `name`"),
                )
                .label("this task needs a `name`")
                .help("every task of a group is named: the name is its hostname prefix"),
            );
            return None;
        };
        // A non-string name is a schema error, reported there.
        let name = entry.value.as_str()?;
        let span = entry.value.span;
        if !names::is_group_name(name) || !names::is_task_name(name) {
            let message = if name.is_empty() {
                "a task name cannot be empty".to_owned()
            } else {
                format!("invalid task name `{name}`")
            };
            self.push(
                Diagnostic::new(Rule::InvalidTaskName, span, message)
                    .label("not a valid task name")
                    .help(
                        "a task name in a group has only letters, digits, `-` and `_`, starts \
                     and ends with a letter or digit, and has at most two separators in a row",
                    ),
            );
        }
        Some((name.to_owned(), span))
    }

    /// A file that is not a Job Group: one task (possibly under a
    /// name-only pipeline header), run as a one-task group.
    fn single(&mut self, documents: &[Document]) -> Option<Group> {
        let present: Vec<&Document> = documents
            .iter()
            .filter(|d| !d.root.is_null() && d.root.as_map().is_none_or(|m| !m.is_empty()))
            .collect();
        let Some(first) = present.first() else {
            self.push(
                Diagnostic::new(Rule::EmptyFile, Span::at(0), "the file holds no task")
                    .label("expected a task here")
                    .help("a task needs at least a `run:` (or `setup:`) field"),
            );
            return None;
        };
        let header_keys = first.root.as_map().map(|entries| {
            let mut keys: Vec<&str> = entries.iter().filter_map(|e| e.key.as_str()).collect();
            keys.sort_unstable();
            keys
        });
        let is_header = matches!(
            header_keys.as_deref(),
            Some(["name"] | ["execution", "name"])
        );
        if !is_header && self.misses_execution(&first.root) {
            return None;
        }
        let mut tasks: Vec<&Document> = present.clone();
        if is_header {
            if let Some(execution) = first.root.get("execution") {
                self.check_pipeline_execution(execution, documents.len());
            }
            if present.len() > 1 {
                tasks.remove(0);
            } else {
                // A header alone: SkyPilot makes a task of just its name.
                return self.header_only_task(&first.root);
            }
        }
        if tasks.len() > 1 {
            let name = is_header
                .then(|| first.root.get("name"))
                .flatten()
                .and_then(|n| Some((n.as_str()?, n.span)));
            return self.pipeline(name, &tasks);
        }
        self.single_task(tasks[0], pool::is_pool_file(documents))
    }

    /// Several tasks without a Job Group header: a managed-job pipeline, run
    /// one after another. SkyPilot names unnamed steps `{pipeline}-{i}`;
    /// skyc names the pipeline after its header, else its first step (where
    /// SkyPilot makes up a random name).
    fn pipeline(&mut self, header: Option<(&str, Span)>, docs: &[&Document]) -> Option<Group> {
        let mut steps = Vec::new();
        for doc in docs {
            if doc.root.as_map().is_none() {
                self.push(not_a_mapping(&doc.root, "a task"));
                continue;
            }
            self.check_single_task_name(doc);
            let ctx = TaskContext {
                options: self.options,
                in_group: false,
            };
            if let Some(mut task) = task::analyze(&ctx, &doc.root, self.diagnostics) {
                if task.name.is_empty() {
                    task.name_span = doc.start;
                }
                task.role = Role::Primary;
                task.termination_delay_secs = None;
                steps.push(task);
            }
        }
        let name = match header {
            Some((name, _)) => name.to_owned(),
            None => docs
                .first()
                .and_then(|d| d.root.get("name"))
                .and_then(Node::as_str)
                .unwrap_or("pipeline")
                .to_owned(),
        };
        // Name to its first step: a lookup per step keeps a hostile
        // pipeline of many steps linear.
        let mut seen: std::collections::HashMap<&str, Span> = std::collections::HashMap::new();
        for (i, step) in steps.iter_mut().enumerate() {
            if step.name.is_empty() {
                step.name = format!("{name}-{i}");
            }
        }
        let mut duplicates = Vec::new();
        for step in &steps {
            match seen.get(step.name.as_str()) {
                Some(first) => duplicates.push(
                    Diagnostic::new(
                        Rule::DuplicateTaskName,
                        step.name_span,
                        format!("a second step named `{}`", step.name),
                    )
                    .label("the same name as an earlier step")
                    .with_secondary(*first, "first named here")
                    .help(
                        "give each step its own name: `skyc status` and `skyc logs` tell steps \
                         apart by name",
                    ),
                ),
                None => {
                    seen.insert(&step.name, step.name_span);
                }
            }
        }
        for d in duplicates {
            self.push(d);
        }
        let group = Group {
            name,
            name_span: header.map(|(_, span)| span),
            inter_connection: InterConnection::Disabled,
            execution: Execution::Serial,
            tasks: steps,
            pool: None,
        };
        (!self.diagnostics.has_errors()).then_some(group)
    }

    /// A standalone task's name: SkyPilot's task-name rule.
    fn check_single_task_name(&mut self, doc: &Document) {
        if let Some(name) = doc.root.get("name").and_then(Node::as_str)
            && !names::is_task_name(name)
        {
            self.push(
                Diagnostic::new(
                    Rule::InvalidTaskName,
                    doc.root.get("name").map_or(doc.start, |n| n.span),
                    format!("invalid task name `{name}`"),
                )
                .label("not a valid task name")
                .help(
                    "a task name has letters and digits, with `.`, `_` or `-` (at most two \
                     in a row) between them",
                ),
            );
        }
    }

    /// One task document, run as a one-task group; or the task of a pool
    /// file, its workers' (`pool_file`).
    fn single_task(&mut self, doc: &Document, pool_file: bool) -> Option<Group> {
        if doc.root.as_map().is_none() {
            self.push(not_a_mapping(&doc.root, "a task"));
            return None;
        }
        self.check_single_task_name(doc);
        let ctx = TaskContext {
            options: self.options,
            in_group: false,
        };
        let task = task::analyze(&ctx, &doc.root, self.diagnostics);
        // A pool file is checked as `sky jobs pool apply` checks it.
        let pool = if pool_file {
            pool::analyze(&doc.root, self.diagnostics)
        } else {
            None
        };
        let mut task = task?;
        if task.name.is_empty() {
            "task".clone_into(&mut task.name);
        }
        task.role = Role::Primary;
        let group = Group {
            name: task.name.clone(),
            name_span: None,
            inter_connection: InterConnection::Auto,
            execution: Execution::Parallel,
            tasks: vec![task],
            pool,
        };
        self.check_group(&group, std::slice::from_ref(doc));
        (!self.diagnostics.has_errors()).then_some(group)
    }

    /// A first document with Job Group header fields but without
    /// `execution: parallel` is a header the user forgot to mark, not a task.
    fn misses_execution(&mut self, root: &Node) -> bool {
        let Some(entries) = root.as_map() else {
            return false;
        };
        let Some(field) = entries.iter().find(|e| {
            matches!(
                e.key.as_str(),
                Some("primary_tasks" | "termination_delay" | "inter_connection")
            )
        }) else {
            return false;
        };
        let key = field.key.as_str().unwrap_or_default();
        let (span, message) = match root.get("execution") {
            Some(execution) => (
                execution.span,
                format!(
                    "`{key}` belongs to a Job Group header, which needs `execution: parallel`, found {}",
                    schema::shown(Some(execution))
                ),
            ),
            None => (
                field.key.span,
                format!("`{key}` belongs to a Job Group header, which needs `execution: parallel`"),
            ),
        };
        self.push(
            Diagnostic::new(Rule::InvalidExecution, span, message)
                .label("header without `execution: parallel`")
                .help("add `execution: parallel` to the first document"),
        );
        true
    }

    /// `name: x` (and `execution`) alone: one task with that name and
    /// nothing to run.
    fn header_only_task(&mut self, root: &Node) -> Option<Group> {
        if self.diagnostics.has_errors() {
            return None;
        }
        let entries = root.as_map().unwrap_or_default();
        let only_name = Node::new(
            Value::Map(
                entries
                    .iter()
                    .filter(|e| e.key.as_str() == Some("name"))
                    .cloned()
                    .collect(),
            ),
            root.span,
        );
        let doc = Document {
            root: only_name,
            start: root.span,
        };
        self.single_task(&doc, false)
    }

    fn check_pipeline_execution(&mut self, execution: &Node, documents: usize) {
        if execution.as_str() == Some("serial") {
            return;
        }
        let shown = schema::shown(Some(execution));
        let (message, help) = if execution.as_str() == Some("parallel") && documents < 2 {
            (
                "a Job Group (`execution: parallel`) needs at least one task after the header"
                    .to_owned(),
                "add `---` and a task document after the header",
            )
        } else {
            (
                format!("invalid execution mode {shown}"),
                "use `execution: parallel` for a Job Group, or `execution: serial` (or none) for a \
                 pipeline",
            )
        };
        self.push(
            Diagnostic::new(Rule::InvalidExecution, execution.span, message)
                .label("here")
                .help(help),
        );
    }

    /// Rules over the whole group: hostnames in scripts, DNS labels.
    /// Returns how many group hostnames the scripts use.
    fn check_group(&mut self, group: &Group, task_docs: &[Document]) -> usize {
        let table = TaskTable::new(
            &group.name,
            group
                .tasks
                .iter()
                .map(|t| (t.name.as_str(), t.num_nodes))
                .collect(),
        );
        let mut found = Vec::new();
        let mut references = 0;
        for doc in task_docs {
            for field in ["run", "setup"] {
                if let Some(node) = doc.root.get(field)
                    && let Some(text) = node.as_str()
                {
                    references +=
                        hostnames::check_text(self.source, node, text, &table, &mut found);
                }
            }
            if let Some(envs) = doc.root.get("envs").and_then(Node::as_map) {
                for e in envs {
                    if let Value::String(text) = &e.value.value {
                        references +=
                            hostnames::check_text(self.source, &e.value, text, &table, &mut found);
                    }
                }
            }
        }
        for d in found {
            self.push(d);
        }
        // Names that are invalid anyway have their error already.
        if let Some(span) = group.name_span
            && names::is_group_name(&group.name)
            && !names::is_dns_label(&group.name)
        {
            self.push(not_dns_label("group", &group.name, span));
        }
        for task in &group.tasks {
            if task.name_span == Span::default() || !names::is_task_name(&task.name) {
                continue;
            }
            if !names::is_dns_label(&task.name) {
                self.push(not_dns_label("task", &task.name, task.name_span));
            } else if task.name.len() + 1 + (task.num_nodes - 1).to_string().len() > 63 {
                self.push(
                    Diagnostic::new(
                        Rule::NotDnsLabel,
                        task.name_span,
                        format!(
                            "the hostname label `{}-{}` is longer than 63 characters",
                            task.name,
                            task.num_nodes - 1
                        ),
                    )
                    .label("name too long for a DNS label"),
                );
            }
        }
        references
    }
}

fn not_dns_label(what: &str, name: &str, span: Span) -> Diagnostic {
    let why = if name.len() > 63 {
        format!(
            "is {} characters long, more than a DNS label's 63",
            name.len()
        )
    } else {
        "is not a DNS label".to_owned()
    };
    let mut suggestion = names::dns_suggestion(name);
    suggestion.truncate(63);
    Diagnostic::new(
        Rule::NotDnsLabel,
        span,
        format!(
            "the {what} name `{name}` {why}, so its group hostnames fail on DNS-based targets (Kubernetes)"
        ),
    )
    .label("not a DNS label")
    .help(format!(
        "use lower-case letters, digits and `-`, at most 63 characters, e.g. `{}`",
        suggestion.trim_end_matches('-')
    ))
}

fn not_a_mapping(node: &Node, what: &str) -> Diagnostic {
    Diagnostic::new(
        Rule::NotAMapping,
        node.span,
        format!(
            "this document must be {what} (a mapping of fields), found {}",
            node.type_name()
        ),
    )
    .label(format!("expected {what}"))
}

/// SkyPilot's detection: at least two documents, and the first has
/// `execution: parallel` (the exact string).
fn is_job_group(documents: &[Document]) -> bool {
    documents.len() >= 2
        && documents[0].root.get("execution").and_then(Node::as_str) == Some("parallel")
}
