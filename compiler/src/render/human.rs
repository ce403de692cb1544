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
            let full = c.source.text();
            // Only the lines the labels touch (annotate-snippets walks all
            // of its source, per diagnostic), from the line before when a
            // label starts a line, which renders as the whole text did.
            let labels = std::iter::once(&d.primary).chain(&d.secondary);
            let ranges: Vec<_> = labels.map(|l| clamp(l.span.range(), full)).collect();
            let lo = ranges.iter().map(|r| r.start).min().unwrap_or(0);
            let hi = ranges.iter().map(|r| r.end).max().unwrap_or(0);
            let bytes = full.as_bytes();
            let lo = bytes[..lo.saturating_sub(1)]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let hi = bytes[hi..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(full.len(), |i| hi + i + 1);
            let text = &full[lo..hi];
            // No text to show (an empty or unread file): the title names
            // the file instead of a source excerpt.
            let headline = if full.is_empty() {
                format!("{}: {}", c.source.name(), d.message)
            } else {
                d.message.clone()
            };
            let title = level.primary_title(headline.as_str()).id(d.rule.name());
            let mut snippet = Snippet::source(text)
                .line_start(
                    c.source
                        .position(u32::try_from(lo).unwrap_or(u32::MAX))
                        .line,
                )
                .path(c.source.name());
            let shift = |r: &std::ops::Range<usize>| r.start - lo..r.end - lo;
            snippet = snippet.annotation(
                AnnotationKind::Primary
                    .span(shift(&ranges[0]))
                    .label(non_empty(&d.primary.message)),
            );
            for (s, r) in d.secondary.iter().zip(&ranges[1..]) {
                snippet = snippet.annotation(
                    AnnotationKind::Context
                        .span(shift(r))
                        .label(non_empty(&s.message)),
                );
            }
            let mut groups: Vec<Group<'_>> = Vec::new();
            if full.is_empty() {
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
