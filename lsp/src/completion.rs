//! Completion: the fields a mapping takes at the cursor, and values where
//! the language knows them: task names (`primary_tasks`, the keys of
//! `termination_delay`), accelerator names, `infra` forms, and the closed
//! sets the schemas and the analyzer define.

use crate::context::{self, Context, DocumentKind, Segment, Slot};
use crate::document::Document;
use crate::schema;
use lsp_types::{
    CompletionItem, CompletionItemKind, CompletionTextEdit, Documentation, MarkupContent,
    MarkupKind, Position, Range, TextEdit,
};

/// Common accelerator names, as SkyPilot's catalogs spell them. SkyPilot
/// accepts any name its catalogs list; these are offered, not enforced.
const ACCELERATORS: [&str; 24] = [
    "H100",
    "H100-MEGA",
    "H200",
    "B200",
    "GB200",
    "A100",
    "A100-80GB",
    "A10G",
    "A10",
    "L4",
    "L40",
    "L40S",
    "T4",
    "V100",
    "V100-32GB",
    "P100",
    "K80",
    "RTX4090",
    "RTXA6000",
    "MI300X",
    "tpu-v4-8",
    "tpu-v5e-8",
    "tpu-v5p-8",
    "tpu-v6e-8",
];

pub(crate) fn complete(document: &Document, position: Position) -> Vec<CompletionItem> {
    if !document.is_readable() {
        return Vec::new();
    }
    let text = document.text();
    let offset = document.offset(position);
    let Some(context) = context::at(text, offset) else {
        return Vec::new();
    };
    let replace = Range::new(document.position(context.word.start), position);
    // A key being renamed keeps its colon: insert the name alone.
    let rest = text[offset..].split(['\n', '\r']).next().unwrap_or("");
    let has_colon = rest
        .trim_start_matches(|c: char| !c.is_whitespace() && c != ':')
        .starts_with(':');
    // A key slot where the schema knows no fields (`accelerators:` as a
    // mapping, a sequence of names) takes values.
    let keys = match context.slot {
        Slot::Key => keys(document, &context, has_colon),
        Slot::Value => None,
    };
    let mut items = keys.unwrap_or_else(|| values(document, &context));
    for (i, item) in items.iter_mut().enumerate() {
        let new_text = item
            .insert_text
            .take()
            .unwrap_or_else(|| item.label.clone());
        item.text_edit = Some(CompletionTextEdit::Edit(TextEdit::new(replace, new_text)));
        item.sort_text = Some(format!("{i:04}"));
    }
    items
}

/// The fields of the mapping at the cursor, less those already written;
/// `None` where the schemas define no fields.
fn keys(document: &Document, context: &Context, has_colon: bool) -> Option<Vec<CompletionItem>> {
    if context.kind != DocumentKind::Task && context.path_is(&["termination_delay"]) {
        return Some(delay_keys(document, context));
    }
    let schemas = schema::at(context.kind, &context.path);
    let mut fields = schema::fields(&schemas);
    if fields.is_empty() {
        return None;
    }
    fields.retain(|f| !context.siblings.contains(&f.name));
    // The fields the schemas document are the ones users write; the rest
    // (deprecated `cloud`, SkyPilot's rarer knobs) follow them.
    fields.sort_by_key(|f| schema::description(f.schema).is_none());
    let items = fields
        .into_iter()
        .map(|f| {
            let forms = schema::forms(f.schema);
            CompletionItem {
                label: f.name.clone(),
                kind: Some(CompletionItemKind::PROPERTY),
                detail: (!forms.is_empty()).then(|| forms.join(", ")),
                documentation: schema::description(f.schema).map(markdown),
                insert_text: Some(if has_colon {
                    f.name
                } else {
                    format!("{}: ", f.name)
                }),
                ..CompletionItem::default()
            }
        })
        .collect();
    Some(items)
}

/// `termination_delay`'s keys: `default` and the auxiliary tasks.
fn delay_keys(document: &Document, context: &Context) -> Vec<CompletionItem> {
    let primary = primary_tasks(document.text());
    let mut items = vec![value(
        "default",
        "every auxiliary task without its own delay",
        CompletionItemKind::KEYWORD,
    )];
    for task in document.task_names() {
        if primary.contains(&task.name) || context.siblings.contains(&task.name) {
            continue;
        }
        items.push(task_item(task));
    }
    for item in &mut items {
        item.insert_text = Some(format!("{}: ", item.label));
    }
    items.retain(|i| !context.siblings.contains(&i.label));
    items
}

/// Values for the field at the cursor.
fn values(document: &Document, context: &Context) -> Vec<CompletionItem> {
    let field = context.field().unwrap_or_default();
    let in_resources = context
        .path
        .first()
        .is_some_and(|s| *s == Segment::Key("resources".to_owned()));
    match field {
        "primary_tasks" if context.kind != DocumentKind::Task => {
            let written = primary_tasks(document.text());
            document
                .task_names()
                .iter()
                .filter(|t| !written.contains(&t.name))
                .map(task_item)
                .collect()
        }
        "accelerators" | "gpus" if in_resources => ACCELERATORS
            .iter()
            .map(|a| value(a, "accelerator", CompletionItemKind::VALUE))
            .collect(),
        "infra" if in_resources => infra(),
        "cloud" if in_resources => schema::clouds()
            .into_iter()
            .map(|c| value(c, "cloud (prefer `infra`)", CompletionItemKind::VALUE))
            .collect(),
        _ => {
            let schemas = schema::at(context.kind, &context.path);
            let mut words = schema::values(&schemas);
            for v in skyc_compiler::editor::field_values(field) {
                if !words.iter().any(|w| w == v) {
                    words.push((*v).to_owned());
                }
            }
            words
                .iter()
                .map(|w| value(w, field, CompletionItemKind::ENUM_MEMBER))
                .collect()
        }
    }
}

/// `infra`'s forms: each cloud (`cloud[/region[/zone]]`), Kubernetes
/// (`kubernetes[/context]`, `k8s`), and `*/region`.
fn infra() -> Vec<CompletionItem> {
    let mut items: Vec<CompletionItem> = schema::clouds()
        .into_iter()
        .filter(|c| *c != "kubernetes")
        .map(|c| value(c, "cloud[/region[/zone]]", CompletionItemKind::VALUE))
        .collect();
    items.insert(
        0,
        value(
            "kubernetes",
            "kubernetes[/context]",
            CompletionItemKind::VALUE,
        ),
    );
    items.insert(
        1,
        value("k8s", "kubernetes, for short", CompletionItemKind::VALUE),
    );
    items.push(value(
        "*/",
        "any cloud: */region[/zone]",
        CompletionItemKind::VALUE,
    ));
    items
}

fn task_item(task: &crate::outline::Task) -> CompletionItem {
    let nodes = task.num_nodes.unwrap_or(1);
    value(
        &task.name,
        &format!("task, {nodes} node{}", if nodes == 1 { "" } else { "s" }),
        CompletionItemKind::REFERENCE,
    )
}

fn value(label: &str, detail: &str, kind: CompletionItemKind) -> CompletionItem {
    CompletionItem {
        label: label.to_owned(),
        kind: Some(kind),
        detail: (!detail.is_empty()).then(|| detail.to_owned()),
        ..CompletionItem::default()
    }
}

fn markdown(text: &str) -> Documentation {
    Documentation::MarkupContent(MarkupContent {
        kind: MarkupKind::Markdown,
        value: text.to_owned(),
    })
}

/// The names already listed in the header's `primary_tasks` (flow or
/// block form), read from the text so a half-written list counts.
fn primary_tasks(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with("primary_tasks:"));
    let Some(first) = lines.next() else {
        return names;
    };
    let inline = first["primary_tasks:".len()..].trim();
    let words = |s: &str| -> Vec<String> {
        s.split([',', '[', ']'])
            .map(|w| w.trim().trim_matches(['"', '\'']).to_owned())
            .filter(|w| !w.is_empty() && !w.starts_with('#'))
            .collect()
    };
    if !inline.is_empty() {
        return words(inline);
    }
    for line in lines {
        let trimmed = line.trim_start();
        match trimmed.strip_prefix('-') {
            Some(item) => names.extend(words(item)),
            None if trimmed.is_empty() || trimmed.starts_with('#') => {}
            None => break,
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use skyc_compiler::Options;

    /// Labels and inserted texts offered at `‸`.
    fn offered(text: &str) -> Vec<(String, String)> {
        let at = text.find('‸').unwrap();
        let text = text.replacen('‸', "", 1);
        let document = Document::new(text, 1, Options::default());
        complete(&document, document.position(at))
            .into_iter()
            .map(|i| {
                let inserted = match i.text_edit {
                    Some(CompletionTextEdit::Edit(e)) => e.new_text,
                    _ => String::new(),
                };
                (i.label, inserted)
            })
            .collect()
    }

    #[test]
    fn a_renamed_key_keeps_its_colon() {
        let items = offered("name: t\nresources:\n  cp‸us: 4\n");
        assert!(items.contains(&("cpus".into(), "cpus".into())), "{items:?}");
        let items = offered("name: t\nresources:\n  cp‸\n");
        assert!(
            items.contains(&("cpus".into(), "cpus: ".into())),
            "{items:?}"
        );
    }

    #[test]
    fn a_mapping_with_every_field_written_offers_nothing() {
        let text = "name: t\nresources:\n  job_recovery:\n    strategy: FAILOVER\n    \
                    max_restarts_on_errors: 1\n    recover_on_exit_codes: [3]\n    ‸\n";
        assert_eq!(offered(text), []);
        // `accelerators` as a mapping takes names as keys.
        let items = offered("name: t\nresources:\n  accelerators:\n    H1‸\n");
        assert!(items.iter().any(|(l, _)| l == "H100"), "{items:?}");
    }
}
