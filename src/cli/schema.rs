//! `skyc schema`: the JSON Schema for editors.

use super::OK;
use super::out::out;

/// Print the JSON Schema of a Job Group document, for editors
/// (yaml-language-server: `# yaml-language-server: $schema=...`).
#[derive(clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(_: &Args) -> u8 {
    let mut text =
        serde_json::to_string_pretty(&skyc_compiler::editor_schema()).unwrap_or_default();
    text.push('\n');
    out!("{text}");
    OK
}
