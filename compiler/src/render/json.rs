//! `--format json`: every diagnostic, with 1-based positions.

use super::region;
use crate::Compilation;
use serde_json::json;

pub(super) fn render(compilations: &[Compilation]) -> String {
    let mut items = Vec::new();
    for c in compilations {
        for d in &c.diagnostics {
            let (start, end) = region(c, d);
            let labels: Vec<_> = std::iter::once(&d.primary)
                .chain(&d.secondary)
                .map(|l| {
                    let (s, e) = (
                        c.source.position(l.span.start),
                        c.source.position(l.span.end),
                    );
                    json!({
                        "message": l.message,
                        "start": {"line": s.line, "column": s.column},
                        "end": {"line": e.line, "column": e.column},
                        "byte_range": [l.span.start, l.span.end],
                    })
                })
                .collect();
            items.push(json!({
                "file": c.source.name(),
                "rule": d.rule.name(),
                "severity": d.severity,
                "message": d.message,
                "start": {"line": start.line, "column": start.column},
                "end": {"line": end.line, "column": end.column},
                "help": d.help,
                "labels": labels,
            }));
        }
    }
    let mut s = serde_json::to_string_pretty(&items).unwrap_or_else(|_| "[]".into());
    s.push('\n');
    s
}
