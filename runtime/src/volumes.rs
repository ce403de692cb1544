//! Volumes, as `skyc volume apply` makes them and `skyc volume delete`
//! deletes them (refused while a live group mounts one):
//! - where the target keeps them as directories (this machine and
//!   Slurm): `volumes/NAME` in the state directory (which Slurm's compute
//!   nodes see), mounted read-write and shared by every node whose task
//!   names them;
//! - on Kubernetes: a PersistentVolumeClaim of the volume's name
//!   ([`crate::k8s::volume`]), which pods mount by name; the state
//!   directory records where (context, namespace).

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

/// Where a volume is on Kubernetes, as the store records it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct OnCluster {
    context: Option<String>,
    namespace: String,
    use_existing: bool,
}

/// Makes `volume`'s PersistentVolumeClaim (or keeps, or adopts, the one of
/// its name) in the cluster of `context` (else the volume file's
/// `infra: k8s/CONTEXT`, else kubectl's), in `namespace` (else the file's
/// `config.namespace`, else the context's), and records it; a located
/// diagnostic when it cannot.
pub fn apply_k8s(
    store: &mut Store,
    volume: &Volume,
    namespace: Option<&str>,
    context: Option<&str>,
) -> Result<(Applied, String), Box<Diagnostic>> {
    use skyc_targets::k8s::volume as target;
    let at = volume.at.0;
    let refuse = |message: String| Box::new(Diagnostic::new(Rule::InvalidVolumeFile, at, message));
    let existing = store
        .volumes()
        .map_err(|e| refuse(format!("the state directory: {e}")))?
        .into_iter()
        .find(|v| v.name == volume.name);
    if let Some(v) = &existing
        && v.backend != Backend::Kubernetes
    {
        return Err(refuse(format!(
            "a volume named `{}` exists on {} already",
            volume.name,
            v.backend.descriptor().title
        )));
    }
    // What cannot be a claim is said before any cluster is asked.
    target::claim(volume, "default").map_err(refuse)?;
    let context = context.or_else(|| target::context(volume));
    let kubeconfig = std::env::var("KUBECONFIG").ok();
    let (kubeconfig, context) = crate::k8s::client::pin(kubeconfig.as_deref(), context);
    let claimed =
        crate::k8s::volume::blocking(kubeconfig.as_deref(), context.as_deref(), async |cluster| {
            let namespace = namespace
                .or_else(|| target::namespace(volume))
                .unwrap_or(&cluster.namespace)
                .to_owned();
            let claim = target::claim(volume, &namespace)?;
            let claimed =
                crate::k8s::volume::apply(&cluster.client, &namespace, &claim, volume.use_existing)
                    .await
                    .map_err(|e| format!("the Kubernetes API server {}: {e}", cluster.server))?;
            Ok((claimed, namespace))
        })
        .map_err(refuse)?;
    let (claimed, namespace) = claimed;
    let path = format!("{namespace}/{}", volume.name);
    if existing.is_none() {
        let mut spec = serde_json::to_value(volume).unwrap_or_default();
        spec["on_cluster"] = serde_json::to_value(OnCluster {
            context,
            namespace,
            use_existing: volume.use_existing,
        })
        .unwrap_or_default();
        let row = VolumeRow {
            name: volume.name.clone(),
            backend: Backend::Kubernetes,
            spec: spec.to_string(),
            path: path.clone(),
            size_gb: volume.size_gb.and_then(|g| i64::try_from(g).ok()),
            created_at_ms: now_ms(),
        };
        store
            .insert_volume(&row)
            .map_err(|e| refuse(format!("the state directory: {e}")))?;
    }
    let applied = match claimed {
        crate::k8s::volume::Claimed::Made => Applied::Made(PathBuf::from(&path)),
        crate::k8s::volume::Claimed::Kept => Applied::Kept(PathBuf::from(&path)),
    };
    Ok((applied, path))
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
    // Plans name the directory as JSON writes it; a pod names its claim.
    let named = match v.backend {
        Backend::Kubernetes => format!("\"claimName\":{}", serde_json::json!(v.name)),
        _ => serde_json::to_string(&v.path)
            .unwrap_or_default()
            .trim_matches('"')
            .to_owned(),
    };
    let users = store
        .live_groups_naming(&named)
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
    if kept_as_directories(v.backend) {
        crate::files::store::remove(Path::new(&v.path));
    } else if v.backend == Backend::Kubernetes {
        let spec: serde_json::Value = serde_json::from_str(&v.spec).unwrap_or_default();
        let on: OnCluster = serde_json::from_value(spec["on_cluster"].clone())
            .map_err(|e| format!("volume `{name}`: its record: {e}"))?;
        // A claim adopted with `use_existing` is someone else's: left.
        if !on.use_existing {
            let kubeconfig = std::env::var("KUBECONFIG").ok();
            crate::k8s::volume::blocking(
                kubeconfig.as_deref(),
                on.context.as_deref(),
                async |c| crate::k8s::volume::delete(&c.client, &on.namespace, name).await,
            )?;
        }
    }
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
