//! skyc's executable where a cluster's compute nodes find it: they run
//! its files helper ([`super::node`]) and see the state directory, not
//! necessarily the submitting machine's paths. Installed once per build
//! of skyc as `bin/skyc-SIZE-MTIME` (written aside, then renamed into
//! place), beside the node agent; removed once no live group's plan
//! names it ([`collect`]).

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

/// Whether `name` is an installed helper's (`skyc-SIZE-MTIME`).
fn is_helper(name: &str) -> bool {
    name.strip_prefix("skyc-")
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(size, mtime)| {
            !size.is_empty()
                && !mtime.is_empty()
                && size.bytes().all(|b| b.is_ascii_digit())
                && mtime.bytes().all(|b| b.is_ascii_digit())
        })
}

/// Removes the helpers of `state_dir` that `named` says no live group's
/// plan names; how many. The caller holds the snapshots' lock
/// exclusively, so no submission is between installing one and recording
/// its group.
pub fn collect(state_dir: &Path, named: impl Fn(&Path) -> bool) -> io::Result<usize> {
    let bin = state_dir.join("bin");
    let entries = match fs::read_dir(&bin) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if !name.to_str().is_some_and(is_helper) {
            continue;
        }
        let path = entry.path();
        if !named(&path) {
            fs::remove_file(&path)?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_helpers_no_plan_names_are_removed() {
        let dir = std::env::temp_dir().join(format!("skyc-helpers-{}", std::process::id()));
        let bin = dir.join("bin");
        fs::create_dir_all(&bin).unwrap();
        for name in [
            "skyc-10-20",
            "skyc-11-21",
            "skyc-agent-abc",
            "skyc-x-1",
            ".skyc-99",
        ] {
            fs::write(bin.join(name), "").unwrap();
        }
        let live = bin.join("skyc-11-21");
        assert_eq!(collect(&dir, |p| p == live).unwrap(), 1);
        let mut left: Vec<String> = fs::read_dir(&bin)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [".skyc-99", "skyc-11-21", "skyc-agent-abc", "skyc-x-1"]
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
