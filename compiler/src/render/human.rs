//! The terminal format: rustc-style excerpts drawn by annotate-snippets.

use crate::{Compilation, Severity};
use annotate_snippets::{AnnotationKind, Group, Level, Renderer, Snippet};

pub(super) fn render(compilations: &[Compilation], color: bool) -> String {
    let renderer = if color {
        Renderer::styled()
    } else {
        Renderer::plain()
    };
    let mut out = String::new();
    for c in compilations {
        for d in &c.diagnostics {
            let level = match d.severity {
                Severity::Error => Level::ERROR,
                Severity::Warning => Level::WARNING,
            };
            let text = c.source.text();
            let mut title = level.primary_title(d.message.as_str()).id(d.rule.name());
            let mut snippet = Snippet::source(text).path(c.source.name());
            let primary = clamp(d.primary.span.range(), text);
            snippet = snippet.annotation(
                AnnotationKind::Primary
                    .span(primary)
                    .label(non_empty(&d.primary.message)),
            );
            for s in &d.secondary {
                snippet = snippet.annotation(
                    AnnotationKind::Context
                        .span(clamp(s.span.range(), text))
                        .label(non_empty(&s.message)),
                );
            }
            let mut groups: Vec<Group<'_>> = Vec::new();
            if text.is_empty() {
                title = title.id(d.rule.name());
                groups.push(Group::with_title(title));
            } else {
                groups.push(title.element(snippet));
            }
            if let Some(help) = &d.help {
                groups.push(Group::with_title(
                    Level::HELP.secondary_title(help.as_str()),
                ));
            }
            out.push_str(&renderer.render(&groups));
            out.push_str("\n\n");
        }
    }
    out
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// A byte range inside `text`, on character boundaries.
fn clamp(range: std::ops::Range<usize>, text: &str) -> std::ops::Range<usize> {
    let fix = |mut i: usize| {
        i = i.min(text.len());
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let start = fix(range.start);
    let end = fix(range.end).max(start);
    start..end
}
