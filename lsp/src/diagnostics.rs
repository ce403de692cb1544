//! The compiler's diagnostics as LSP diagnostics: the rule as the code,
//! the message, the help and secondary labels as related information (or
//! in the message, for clients that show no related information).

use crate::document::Document;
use lsp_types::{
    Diagnostic, DiagnosticRelatedInformation, DiagnosticSeverity, DiagnosticTag, Location,
    NumberOrString, Uri,
};
use skyc_compiler::{Rule, Severity};

/// How the client shows diagnostics.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Style {
    /// The client shows `relatedInformation`.
    pub(crate) related_information: bool,
}

/// Every diagnostic of the document's compilation.
pub(crate) fn of(document: &Document, uri: &Uri, style: Style) -> Vec<Diagnostic> {
    let compilation = document.compilation();
    compilation
        .diagnostics
        .iter()
        .map(|d| convert(document, uri, d, style))
        .collect()
}

/// One compiler diagnostic in LSP's terms.
pub(crate) fn convert(
    document: &Document,
    uri: &Uri,
    d: &skyc_compiler::Diagnostic,
    style: Style,
) -> Diagnostic {
    let range = document.range(d.primary.span);
    let mut message = d.message.clone();
    let mut related = Vec::new();
    let mut note = |span, text: String| {
        if style.related_information {
            related.push(DiagnosticRelatedInformation {
                location: Location::new(uri.clone(), document.range(span)),
                message: text,
            });
        } else {
            message.push('\n');
            message.push_str(&text);
        }
    };
    for label in &d.secondary {
        let at = document.range(label.span).start;
        note(
            label.span,
            format!("{} (line {})", label.message, at.line + 1),
        );
    }
    if let Some(help) = &d.help {
        note(d.primary.span, format!("help: {help}"));
    }
    Diagnostic {
        range,
        severity: Some(match d.severity {
            Severity::Error => DiagnosticSeverity::ERROR,
            Severity::Warning => DiagnosticSeverity::WARNING,
        }),
        code: Some(NumberOrString::String(d.rule.name().to_owned())),
        source: Some("skyc".to_owned()),
        message,
        related_information: (!related.is_empty()).then_some(related),
        tags: (d.rule == Rule::DeprecatedField).then(|| vec![DiagnosticTag::DEPRECATED]),
        ..Diagnostic::default()
    }
}
