//! A volume file (`skyc volume apply`, as `sky volumes apply`): SkyPilot's
//! volume schema, then what its loader checks beyond it, lowered to an
//! [`ir::Volume`].

use crate::ir::{At, Volume};
use crate::schema::{self, DocumentKind};
use crate::units::parse_volume_size;
use crate::yaml::{Document, Node, Value};
use crate::{Diagnostic, Diagnostics, Rule, Span};

/// The volume of a file's documents: exactly one, a mapping.
pub(crate) fn analyze(documents: &[Document], out: &mut Diagnostics) -> Option<Volume> {
    let present: Vec<&Document> = documents.iter().filter(|d| !d.root.is_null()).collect();
    let [document] = present.as_slice() else {
        let at = present.get(1).map_or(Span::at(0), |d| d.start);
        out.push(
            Diagnostic::new(
                Rule::InvalidVolumeFile,
                at,
                format!(
                    "a volume file holds one volume; this one holds {}",
                    present.len()
                ),
            )
            .label(if present.is_empty() {
                "expected a volume here"
            } else {
                "a second document"
            })
            .help("one volume per file: `name`, `type`, `size`"),
        );
        return None;
    };
    let root = &document.root;
    schema::validate(DocumentKind::Volume, root, out);
    if out.has_errors() {
        return None;
    }
    let text = |key: &str| root.get_present(key).and_then(Node::as_str);
    let name = root.get_present("name")?;
    let use_existing = root
        .get_present("use_existing")
        .is_some_and(|n| matches!(n.value, Value::Bool(true)));
    if name.as_str().is_some_and(str::is_empty) {
        out.push(
            Diagnostic::new(
                Rule::InvalidVolumeFile,
                name.span,
                "the volume's name is empty",
            )
            .label("no name"),
        );
    }
    let size_gb = match root.get_present("size") {
        Some(size) => match parse_volume_size(size.as_str().unwrap_or_default()) {
            Ok(gb) => Some(gb),
            Err(message) => {
                out.push(
                    Diagnostic::new(Rule::InvalidVolumeFile, size.span, message).label("this size"),
                );
                None
            }
        },
        None => None,
    };
    let kind = text("type").unwrap_or_default();
    let config = root.get_present("config");
    let volume = Volume {
        name: name.as_str()?.to_owned(),
        r#type: kind.to_owned(),
        infra: text("infra").map(str::to_owned),
        size_gb,
        use_existing,
        config: config.map(super::task::to_plain_json),
        at: At(name.span),
    };
    // A size given but invalid is reported above.
    if volume.lacks_size() && root.get_present("size").is_none() {
        out.push(
            Diagnostic::new(
                Rule::InvalidVolumeFile,
                name.span,
                "a new volume needs a size",
            )
            .label("this volume")
            .help("add `size: 10Gi` (or `--size`), or `use_existing: true` to adopt one"),
        );
    }
    if kind == "k8s-hostpath" {
        let host_path = config.and_then(|c| c.get_present("host_path"));
        let valid = host_path
            .and_then(Node::as_str)
            .is_some_and(|p| p.starts_with('/') && !p.chars().all(|c| c == '/'));
        if !valid {
            let at = host_path.map_or(
                root.get_present("type").map_or(root.span, |t| t.span),
                |p| p.span,
            );
            out.push(
                Diagnostic::new(
                    Rule::InvalidVolumeFile,
                    at,
                    "a `k8s-hostpath` volume needs `config.host_path`, an absolute path that is not `/`",
                )
                .label("here"),
            );
        }
    }
    (!out.has_errors()).then_some(volume)
}

#[cfg(test)]
mod tests {
    use crate::units::parse_volume_size as size_gb;

    #[test]
    fn sizes_are_whole_gib_rounded_up() {
        assert_eq!(size_gb("10Gi"), Ok(10));
        assert_eq!(size_gb("10"), Ok(10));
        assert_eq!(size_gb("500Mi"), Ok(1));
        assert_eq!(size_gb("1Ti"), Ok(1024));
        assert!(size_gb("0").is_err());
    }
}
