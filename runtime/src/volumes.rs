//! Volumes where the target keeps them as directories (this machine and
//! Slurm): made by `skyc volume apply` as `volumes/NAME` in the state
//! directory (which Slurm's compute nodes see), mounted read-write and
//! shared by every node whose task names them, kept until `skyc volume
//! delete`, which refuses while a live group mounts one.

use crate::store::{Backend, Store, VolumeRow, now_ms};
use skyc_compiler::ir::{Group, Volume};
use skyc_compiler::{Diagnostic, Rule};
use skyc_targets::files;
use std::path::{Path, PathBuf};

/// Whether `backend` keeps volumes as directories skyc makes.
pub fn kept_as_directories(backend: Backend) -> bool {
    matches!(backend, Backend::Local | Backend::Slurm)
}

/// Where the volume `name` is.
pub fn dir(state_dir: &Path, name: &str) -> PathBuf {
    state_dir.join("volumes").join(name)
}

/// What applying did.
#[derive(Debug, PartialEq, Eq)]
pub enum Applied {
    Made(PathBuf),
    /// It existed, with the same target (`use_existing`, or applied again).
    Kept(PathBuf),
}

/// Makes `volume` on `backend`, or keeps the one of that name; a located
/// diagnostic when it cannot.
pub fn apply(
    store: &mut Store,
    state_dir: &Path,
    backend: Backend,
    volume: &Volume,
) -> Result<Applied, Box<Diagnostic>> {
    let at = volume.at.0;
    let refuse = |message: String| Diagnostic::new(Rule::InvalidVolumeFile, at, message);
    // A directory's name, on this target.
    let name = &volume.name;
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !plain || name == "." || name == ".." || name.len() > 253 {
        return Err(Box::new(
            refuse(format!(
                "`{name}` cannot name a volume here: on {} a volume is a directory, named with \
             letters, digits, `-`, `_` and `.`",
                backend.descriptor().title
            ))
            .label("this name"),
        ));
    }
    let existing = store
        .volumes()
        .map_err(|e| Box::new(refuse(format!("the state directory: {e}"))))?
        .into_iter()
        .find(|v| &v.name == name);
    if let Some(v) = existing {
        if v.backend != backend {
            return Err(Box::new(
                refuse(format!(
                    "a volume named `{name}` exists on {} already",
                    v.backend.descriptor().title
                ))
                .label("this name")
                .help("delete it first (`skyc volume delete`), or give this one another name"),
            ));
        }
        return Ok(Applied::Kept(PathBuf::from(v.path)));
    }
    if volume.use_existing {
        return Err(Box::new(
            refuse(format!(
                "`use_existing: true`, and there is no volume `{name}` to adopt"
            ))
            .label("no such volume")
            .help("remove `use_existing` to make it"),
        ));
    }
    let path = dir(state_dir, name);
    std::fs::create_dir_all(&path)
        .map_err(|e| Box::new(refuse(format!("cannot make {}: {e}", path.display()))))?;
    let row = VolumeRow {
        name: name.clone(),
        backend,
        spec: serde_json::to_string(volume).unwrap_or_default(),
        path: path.display().to_string(),
        size_gb: volume.size_gb.and_then(|g| i64::try_from(g).ok()),
        created_at_ms: now_ms(),
    };
    match store.insert_volume(&row) {
        Ok(true) => Ok(Applied::Made(path)),
        // Made meanwhile by another client.
        Ok(false) => Ok(Applied::Kept(path)),
        Err(e) => Err(Box::new(refuse(format!("the state directory: {e}")))),
    }
}

/// Deletes the volume `name` and what it holds, unless a live group
/// mounts it. Submissions, which hold the state directory's files lock
/// from naming a volume until their group is recorded, wait meanwhile.
pub fn delete(store: &mut Store, state_dir: &Path, name: &str) -> Result<(), String> {
    let _excluding = crate::files::Snapshots::of(state_dir)
        .excluding()
        .map_err(|e| format!("{}: {e}", state_dir.join("files").display()))?;
    let volumes = store.volumes().map_err(|e| e.to_string())?;
    let Some(v) = volumes.into_iter().find(|v| v.name == name) else {
        return Err(format!("no volume named `{name}`"));
    };
    // Plans name the directory as JSON writes it.
    let named = serde_json::to_string(&v.path).unwrap_or_default();
    let users = store
        .live_groups_naming(named.trim_matches('"'))
        .map_err(|e| e.to_string())?;
    if !users.is_empty() {
        let list: Vec<String> = users
            .iter()
            .map(|(id, name)| format!("{id} ({name})"))
            .collect();
        return Err(format!(
            "volume `{name}` is mounted by live groups: {}; cancel them or wait for them to end",
            list.join(", ")
        ));
    }
    crate::files::store::remove(Path::new(&v.path));
    store.delete_volume(name).map_err(|e| e.to_string())
}

/// The volumes `group`'s tasks mount on `backend`, by task index; a
/// located diagnostic for each that the target does not have.
pub fn resolve(
    group: &Group,
    store: Option<&Store>,
    backend: Backend,
) -> (Vec<Vec<files::Volume>>, Vec<Diagnostic>) {
    let mut diagnostics = Vec::new();
    let known = store.and_then(|s| s.volumes().ok()).unwrap_or_default();
    let tasks = group
        .tasks
        .iter()
        .map(|task| {
            task.volumes
                .iter()
                .filter_map(|m| {
                    let at = m.at.0;
                    let Some(name) = m.volume.as_str() else {
                        diagnostics.push(
                            Diagnostic::new(
                                Rule::UnknownVolume,
                                at,
                                format!(
                                    "an inline volume is made with its Kubernetes pod; {} mounts \
                                     volumes made beforehand",
                                    backend.descriptor().title
                                ),
                            )
                            .label("an inline volume")
                            .help("make it with `skyc volume apply`, and name it here"),
                        );
                        return None;
                    };
                    match known.iter().find(|v| v.name == name) {
                        Some(v) if v.backend == backend => Some(files::Volume {
                            destination: m.path.clone(),
                            name: name.to_owned(),
                            dir: PathBuf::from(&v.path),
                        }),
                        Some(v) => {
                            diagnostics.push(
                                Diagnostic::new(
                                    Rule::UnknownVolume,
                                    at,
                                    format!(
                                        "volume `{name}` is on {}, and this group runs on {}",
                                        v.backend.descriptor().title,
                                        backend.descriptor().title
                                    ),
                                )
                                .label("another target's volume"),
                            );
                            None
                        }
                        None => {
                            let have: Vec<&str> = known
                                .iter()
                                .filter(|v| v.backend == backend)
                                .map(|v| v.name.as_str())
                                .collect();
                            let d = Diagnostic::new(
                                Rule::UnknownVolume,
                                at,
                                format!(
                                    "there is no volume `{name}` on {}",
                                    backend.descriptor().title
                                ),
                            )
                            .label("no such volume")
                            .help(format!(
                                "make it first: `skyc volume apply --name {name} --size 10Gi \
                                 --target {}`{}",
                                backend.as_str(),
                                if have.is_empty() {
                                    String::new()
                                } else {
                                    format!(" (volumes here: {})", have.join(", "))
                                }
                            ));
                            diagnostics.push(d);
                            None
                        }
                    }
                })
                .collect()
        })
        .collect();
    (tasks, diagnostics)
}
