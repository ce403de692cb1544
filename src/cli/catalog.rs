//! Finding and reading SkyPilot's catalog for `build --target aws|gcp`.
//!
//! A directory in SkyPilot's layout (`DIR/aws/vms.csv`, `DIR/gcp/vms.csv`):
//! `--catalog DIR`, else `$SKYC_CATALOG`, else SkyPilot's own copy
//! (`~/.sky/catalogs/v8`, which `sky check` downloads) when it has the
//! cloud's file, else the snapshot built into skyc. The file's text is
//! parsed by the target (pure); this module only reads it.

use skyc_targets::cloud::{Catalog, Cloud, Origin};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The upstream files are a few MB; anything this large is not a catalog.
const MAX_CATALOG_BYTES: u64 = 64 << 20;

/// SkyPilot's catalog directory for schema v8, under the home directory.
const SKYPILOT_CATALOG: &str = ".sky/catalogs/v8";

/// The catalog of `cloud`, or a message for a usage or I/O error.
pub(crate) fn load(cloud: Cloud, flag: Option<&Path>) -> Result<Catalog, String> {
    let given = flag.map(|p| (p.to_path_buf(), "--catalog")).or_else(|| {
        std::env::var_os("SKYC_CATALOG")
            .filter(|v| !v.is_empty())
            .map(|v| (PathBuf::from(v), "$SKYC_CATALOG"))
    });
    if let Some((dir, from)) = given {
        let file = dir.join(cloud.name()).join("vms.csv");
        if !file.is_file() {
            return Err(format!(
                "{from} {}: no {}/vms.csv there (SkyPilot's layout: DIR/aws/vms.csv, DIR/gcp/vms.csv)",
                dir.display(),
                cloud.name()
            ));
        }
        return read(cloud, &file);
    }
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        let file = Path::new(&home)
            .join(SKYPILOT_CATALOG)
            .join(cloud.name())
            .join("vms.csv");
        if file.is_file() {
            return read(cloud, &file);
        }
    }
    Ok(Catalog::snapshot(cloud))
}

fn read(cloud: Cloud, file: &Path) -> Result<Catalog, String> {
    let name = file.display();
    let f = std::fs::File::open(file).map_err(|e| format!("cannot read {name}: {e}"))?;
    let modified = f.metadata().and_then(|m| m.modified()).ok();
    let mut bytes = Vec::new();
    f.take(MAX_CATALOG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {name}: {e}"))?;
    if bytes.len() as u64 > MAX_CATALOG_BYTES {
        return Err(format!(
            "{name} is larger than {} MiB; it is not a SkyPilot catalog",
            MAX_CATALOG_BYTES >> 20
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{name} is not UTF-8 text"))?;
    let origin = Origin {
        source: name.to_string(),
        date: modified.and_then(day),
    };
    Catalog::parse(cloud, &text, origin).map_err(|e| format!("{name}: {e}"))
}

/// `YYYY-MM-DD` (UTC) of a file time: the catalog's date is the day it
/// was downloaded.
fn day(t: std::time::SystemTime) -> Option<String> {
    let ts = jiff::Timestamp::try_from(t).ok()?;
    (ts >= jiff::Timestamp::UNIX_EPOCH).then(|| ts.strftime("%Y-%m-%d").to_string())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn dates() {
        let day = |days: u64| super::day(UNIX_EPOCH + Duration::from_secs(days * 86_400 + 86_399));
        assert_eq!(day(0).as_deref(), Some("1970-01-01"));
        assert_eq!(day(20_415).as_deref(), Some("2025-11-23"));
        assert_eq!(day(11_016).as_deref(), Some("2000-02-29"));
        assert_eq!(super::day(UNIX_EPOCH - Duration::from_secs(1)), None);
    }
}
