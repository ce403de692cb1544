//! `skyc schema`: the JSON Schema for editors.

use super::OK;
use std::io::Write;

/// Print the JSON Schema of a Job Group document, for editors
/// (yaml-language-server: `# yaml-language-server: $schema=...`).
#[derive(clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(_: &Args) -> u8 {
    let mut text =
        serde_json::to_string_pretty(&skyc_compiler::editor_schema()).unwrap_or_default();
    text.push('\n');
    let _ = std::io::stdout().write_all(text.as_bytes());
    OK
}
