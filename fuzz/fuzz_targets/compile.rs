//! Arbitrary bytes through `skyc_compiler::compile`, then every renderer.
//! Crashes are panics (including failed invariants below) and hangs.
//!
//! Invariants, as in tests/hostile.rs: every label's span lies within the
//! source text on character boundaries; the verdict, the diagnostics and
//! the IR agree; every format renders, the JSON ones as valid JSON.

#![no_main]

use libfuzzer_sys::fuzz_target;
use skyc_compiler::render::{Format, render};
use skyc_compiler::{Options, Severity, compile};

fuzz_target!(|bytes: &[u8]| {
    let c = compile("fuzz.yaml", bytes, &Options::default());
    let text = c.source.text();
    for d in &c.diagnostics {
        for label in std::iter::once(&d.primary).chain(&d.secondary) {
            let (start, end) = (label.span.start as usize, label.span.end as usize);
            assert!(start <= end, "{:?}: reversed span {start}..{end}", d.rule);
            assert!(
                end <= text.len(),
                "{:?}: span {start}..{end} past the text",
                d.rule
            );
            assert!(
                text.is_char_boundary(start) && text.is_char_boundary(end),
                "{:?}: span {start}..{end} splits a character",
                d.rule
            );
        }
    }
    let errors = c.diagnostics.iter().any(|d| d.severity == Severity::Error);
    assert_eq!(c.has_errors(), errors);
    assert_eq!(
        c.group.is_some(),
        !errors,
        "an IR exactly when there is no error"
    );
    if let Some(group) = &c.group {
        serde_json::to_string(group).expect("the IR serializes");
    }
    let one = std::slice::from_ref(&c);
    for format in [
        Format::Human { color: false },
        Format::Human { color: true },
        Format::Json,
        Format::Sarif,
        Format::Github,
    ] {
        let out = render(format, one);
        if matches!(format, Format::Json | Format::Sarif) {
            serde_json::from_str::<serde_json::Value>(&out).expect("valid JSON");
        }
    }
});
