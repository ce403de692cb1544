//! `--format sarif`: SARIF 2.1.0 for code-scanning services.

use super::region;
use crate::{Compilation, Rule, Severity};
use serde_json::json;

pub(super) fn render(compilations: &[Compilation]) -> String {
    let rules: Vec<_> = Rule::ALL
        .iter()
        .map(|r| {
            json!({
                "id": r.name(),
                "shortDescription": {"text": r.summary()},
                "defaultConfiguration": {"level": level(r.severity())},
            })
        })
        .collect();
    let mut results = Vec::new();
    for c in compilations {
        for d in &c.diagnostics {
            let (start, end) = region(c, d);
            let mut text = d.message.clone();
            if let Some(help) = &d.help {
                text.push_str("\nhelp: ");
                text.push_str(help);
            }
            results.push(json!({
                "ruleId": d.rule.name(),
                "ruleIndex": Rule::ALL.iter().position(|r| *r == d.rule),
                "level": level(d.severity),
                "message": {"text": text},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": c.source.name()},
                        "region": {
                            "startLine": start.line,
                            "startColumn": start.column,
                            "endLine": end.line,
                            "endColumn": end.column,
                        }
                    }
                }],
            }));
        }
    }
    let log = json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "skyc",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": "https://github.com/skyc-dev/skyc",
                "rules": rules,
            }},
            "results": results,
        }],
    });
    let mut s = serde_json::to_string_pretty(&log).unwrap_or_default();
    s.push('\n');
    s
}

fn level(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}
