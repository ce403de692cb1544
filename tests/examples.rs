//! SkyPilot's own Job Group examples: skyc accepts what SkyPilot accepts,
//! and the IR of each is snapshotted for review.

use crate::support::{render_human, root, snapshots, yaml_files};
use skyc_compiler::{Options, compile};

pub(crate) fn examples_dir() -> std::path::PathBuf {
    root().join("tests/fixtures/skypilot-examples")
}

/// SkyPilot's verdict per file, from MANIFEST.md (`ACCEPT...`, `REJECT...`,
/// or `template`).
pub(crate) fn manifest() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(examples_dir().join("MANIFEST.md")).unwrap();
    text.lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells.len() >= 4 && cells[1].ends_with(".yaml"))
                .then(|| (cells[1].to_owned(), cells[3].to_owned()))
        })
        .collect()
}

/// The smoke-test templates' Jinja placeholders, filled as SkyPilot's smoke
/// suite would.
pub(crate) fn render_template(text: &str) -> String {
    [
        ("{{name}}", "jg-smoke"),
        ("{{cloud}}", "kubernetes"),
        ("{{delay}}", "10s"),
        ("{{image_id}}", "docker:ubuntu:22.04"),
        ("{{primary_tasks}}", "trainer"),
        ("{{suffix}}", "-x1"),
        (
            "{{trainer_run | indent(2, true)}}",
            "  sky jobs launch -y nested.yaml",
        ),
        ("{{watcher_run | indent(2, true)}}", "  sky jobs queue"),
    ]
    .iter()
    .fold(text.to_owned(), |t, (from, to)| t.replace(from, to))
}

/// Examples SkyPilot's loader accepts and skyc rejects on purpose: a group
/// SkyPilot's API server refuses at submission (`inter_connection: true`
/// with a task pinned to AWS), which skyc refuses at check.
const REJECTED: &[&str] = &["test_job_groups__smoke_inter_connection_pin_error.yaml"];

#[test]
fn skyc_agrees_with_skypilot_on_every_example() {
    let verdicts = manifest();
    let files = yaml_files(&examples_dir());
    assert_eq!(
        verdicts.len(),
        files.len(),
        "MANIFEST.md lists every example"
    );
    let mut problems = Vec::new();
    for (file, verdict) in &verdicts {
        let raw = std::fs::read_to_string(examples_dir().join(file)).unwrap();
        let template = verdict.starts_with("template");
        let text = if template { render_template(&raw) } else { raw };
        assert!(!text.contains("{{"), "{file}: placeholder left");
        let c = compile(file, text.as_bytes(), &Options::default());
        let expect_accept =
            (template || verdict.starts_with("ACCEPT")) && !REJECTED.contains(&file.as_str());
        if c.has_errors() == expect_accept {
            problems.push(format!("{file} ({verdict}):\n{}", render_human(&c)));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn ir_of_every_accepted_example() {
    let settings = snapshots("ir");
    settings.bind(|| {
        for (stem, group) in accepted_examples() {
            insta::assert_json_snapshot!(stem, group);
        }
    });
}

/// An example's text, a template rendered.
fn example_text(file: &str, verdict: &str) -> String {
    let raw = std::fs::read_to_string(examples_dir().join(file)).unwrap();
    if verdict.starts_with("template") {
        render_template(&raw)
    } else {
        raw
    }
}

/// `(file, text)` of every example SkyPilot accepts (templates rendered),
/// but those skyc rejects on purpose.
pub(crate) fn example_texts() -> Vec<(String, String)> {
    manifest()
        .into_iter()
        .filter(|(_, verdict)| verdict.starts_with("ACCEPT") || verdict.starts_with("template"))
        .filter(|(file, _)| !REJECTED.contains(&file.as_str()))
        .map(|(file, verdict)| {
            let text = example_text(&file, &verdict);
            (file, text)
        })
        .collect()
}

/// Every example skyc accepts, compiled: (file stem, IR).
pub(crate) fn accepted_examples() -> Vec<(String, skyc_compiler::ir::Group)> {
    manifest()
        .into_iter()
        .filter_map(|(file, verdict)| {
            let text = example_text(&file, &verdict);
            let c = compile(&file, text.as_bytes(), &Options::default());
            c.group
                .map(|g| (file.trim_end_matches(".yaml").to_owned(), g))
        })
        .collect()
}
