//! skyc's executable where a cluster's compute nodes find it: they run
//! its files helper ([`super::node`]) and see the state directory, not
//! necessarily the submitting machine's paths. Installed once per build
//! of skyc as `bin/skyc-SIZE-MTIME` (written aside, then renamed into
//! place), beside the node agent.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Installs the running executable in `state_dir` (unless this build's
/// is there already); its path.
pub fn install(state_dir: &Path) -> io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let meta = fs::metadata(&exe)?;
    let bin = state_dir.join("bin");
    let path = bin.join(format!(
        "skyc-{}-{}",
        meta.len(),
        meta.mtime_nsec() + meta.mtime() * 1_000_000_000
    ));
    if fs::metadata(&path).is_ok_and(|m| m.len() == meta.len()) {
        return Ok(path);
    }
    fs::create_dir_all(&bin)?;
    let tmp = bin.join(format!(".skyc-{}", std::process::id()));
    fs::copy(&exe, &tmp)?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
    fs::rename(&tmp, &path)?;
    Ok(path)
}
