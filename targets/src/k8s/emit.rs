//! Objects to text: a YAML stream or a JSON `List` for stdout, or one file
//! per object for `--out DIR`. Deterministic: the same objects give the
//! same bytes and file names.

use super::yaml;
use serde_json::{Value, json};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    pub fn extension(self) -> &'static str {
        match self {
            Format::Yaml => "yaml",
            Format::Json => "json",
        }
    }
}

/// Everything in one text, for `kubectl apply --server-side -f -`.
pub fn render(objects: &[Value], format: Format) -> String {
    match format {
        Format::Yaml => yaml::stream(objects),
        Format::Json => {
            let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
            let mut out = serde_json::to_string_pretty(&list).unwrap_or_default();
            out.push('\n');
            out
        }
    }
}

/// One `(file name, contents)` per object. Names start with the apply
/// order, since `kubectl apply -f DIR` goes alphabetically:
/// `00-configmap-g-skyc.yaml`, `01-jobset-g.yaml`.
pub fn files(objects: &[Value], format: Format) -> Vec<(String, String)> {
    objects
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let kind = o["kind"].as_str().unwrap_or("object").to_ascii_lowercase();
            let name = o["metadata"]["name"].as_str().unwrap_or("unnamed");
            let text = match format {
                Format::Yaml => yaml::document(o),
                Format::Json => {
                    let mut t = serde_json::to_string_pretty(o).unwrap_or_default();
                    t.push('\n');
                    t
                }
            };
            (format!("{i:02}-{kind}-{name}.{}", format.extension()), text)
        })
        .collect()
}
