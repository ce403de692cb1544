//! Code actions: the compiler's "did you mean" fixes, as quick fixes.

use crate::diagnostics::{self, Style};
use crate::document::Document;
use lsp_types::{CodeAction, CodeActionKind, Range, TextEdit, Uri, WorkspaceEdit};
use std::collections::HashMap;

/// A quick fix for each diagnostic with a fix whose range touches `range`.
/// Fixes come from the server's own compilation of this version, not from
/// what the client sends back.
pub(crate) fn quick_fixes(
    document: &Document,
    uri: &Uri,
    range: Range,
    style: Style,
) -> Vec<CodeAction> {
    let compilation = document.compilation();
    let mut actions = Vec::new();
    for d in &compilation.diagnostics {
        let Some(fix) = &d.fix else { continue };
        let Some(span) = fix.edit(&compilation.source) else {
            continue;
        };
        let at = document.range(d.primary.span);
        if at.end < range.start || range.end < at.start {
            continue;
        }
        let edit = TextEdit::new(document.range(span), fix.replacement.clone());
        actions.push(CodeAction {
            title: format!("Replace `{}` with `{}`", fix.original, fix.replacement),
            kind: Some(CodeActionKind::QUICKFIX),
            diagnostics: Some(vec![diagnostics::convert(document, uri, d, style)]),
            edit: Some(WorkspaceEdit::new(HashMap::from([(
                uri.clone(),
                vec![edit],
            )]))),
            is_preferred: Some(true),
            ..CodeAction::default()
        });
    }
    actions
}
