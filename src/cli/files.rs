//! A submission's code and data: each task's local `workdir` and
//! `file_mounts`, taken into the state directory's snapshots when the
//! target delivers them, with progress on a terminal when it takes a
//! while.

use skyc_compiler::Diagnostic;
use skyc_compiler::ir::Group;
use skyc_runtime::files::store::Writing;
use skyc_runtime::files::take::{self, Mounting, Taking};
use skyc_runtime::files::{Files, Snapshots};
use skyc_runtime::store::Backend;
use skyc_runtime::volumes;
use skyc_targets::storage::Mode;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// The files taken, and the guard that keeps them until the group that
/// is given them is recorded. Dropped unrecorded (the file had errors,
/// the plan was refused, the store could not be written), it removes what
/// it wrote: a refused submission leaves nothing behind.
pub(crate) struct Taken {
    pub(crate) files: Files,
    pub(crate) diagnostics: Vec<Diagnostic>,
    writing: Option<(Writing, std::path::PathBuf)>,
}

impl Taken {
    /// Whether taking the files refuses the submission: their findings
    /// join the file's, and its errors are said now (sorted, shown); its
    /// warnings are said later with the plan's.
    pub(crate) fn refuses(
        &mut self,
        compilation: &mut skyc_compiler::Compilation,
        show: impl Fn(&skyc_compiler::Compilation),
    ) -> bool {
        compilation
            .diagnostics
            .extend(std::mem::take(&mut self.diagnostics));
        if !compilation.has_errors() {
            return false;
        }
        compilation
            .diagnostics
            .sort_by_key(|d| (d.primary.span.start, d.rule));
        show(compilation);
        true
    }

    /// The group given these files is recorded: they are its now.
    pub(crate) fn recorded(&mut self) {
        self.writing = None;
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        let Some((writing, state_dir)) = self.writing.take() else {
            return;
        };
        // Collection takes the lock this submission holds.
        drop(writing);
        // No store yet: no group is given anything.
        let Ok(store) = skyc_runtime::store::Store::open_read_only(&state_dir) else {
            return;
        };
        let live = || match &store {
            Some(store) => store.live_snapshots().map_err(|e| e.to_string()),
            None => Ok(Default::default()),
        };
        let _ = Snapshots::of(&state_dir).collect(live);
    }
}

/// Takes `group`'s files for `target` into `state_dir` (nothing when the
/// target does not deliver files, or `wanted` is false).
pub(crate) fn take(
    group: &Group,
    target: Backend,
    state_dir: &Path,
    wanted: bool,
    mounting: Mounting,
) -> Result<Taken, String> {
    let mut taken = Taken {
        files: Files::default(),
        diagnostics: Vec::new(),
        writing: None,
    };
    if !wanted || !target.descriptor().delivers_files {
        return Ok(taken);
    }
    let volumes_named = group.tasks.iter().any(|t| !t.volumes.is_empty());
    if !take::names_files(group) && !volumes_named {
        return Ok(taken);
    }
    // Held until the group is recorded: its snapshots are not collected,
    // nor its volumes deleted, before it is.
    let snapshots = Snapshots::of(state_dir);
    let writing = snapshots
        .writing()
        .map_err(|e| format!("{}: {e}", state_dir.join("files").display()))?;
    let read = read(group, Some((&snapshots, &writing)), mounting, true);
    taken.writing = Some((writing, state_dir.to_owned()));
    (taken.files, taken.diagnostics) = read?;
    if volumes_named && volumes::kept_as_directories(target) {
        let store = skyc_runtime::store::Store::open_read_only(state_dir)?;
        let (volumes, diagnostics) = volumes::resolve(group, store.as_ref(), target);
        taken.files.volumes = volumes;
        taken.diagnostics.extend(diagnostics);
    }
    Ok(taken)
}

/// Reads the group's sources as the submitting user's shell sees them
/// (its directory, its home), into `into` when given.
fn read(
    group: &Group,
    into: Option<(&Snapshots, &Writing)>,
    mount_buckets: Mounting,
    submitting: bool,
) -> Result<(Files, Vec<Diagnostic>), String> {
    let cwd = std::env::current_dir().map_err(|e| format!("the current directory: {e}"))?;
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let mut progress = Progress::new();
    let mut report = |files, bytes| progress.show(files, bytes);
    let read = take::take(
        group,
        &mut Taking {
            cwd: &cwd,
            home: home.as_deref(),
            into,
            limit_bytes: take::limit_from_env(),
            progress: &mut report,
            mount_buckets,
            submitting,
        },
    );
    progress.done();
    Ok(read)
}

/// `files, bytes` on one terminal line, once reading has taken a second.
struct Progress {
    start: Instant,
    last: Option<Instant>,
    terminal: bool,
}

impl Progress {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            last: None,
            terminal: std::io::stderr().is_terminal(),
        }
    }

    fn show(&mut self, files: u64, bytes: u64) {
        let now = Instant::now();
        if !self.terminal
            || now - self.start < Duration::from_secs(1)
            || self
                .last
                .is_some_and(|l| now - l < Duration::from_millis(100))
        {
            return;
        }
        self.last = Some(now);
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\rskyc: reading the tasks' files: {files} files, {:.1} MiB",
            bytes as f64 / (1024.0 * 1024.0)
        );
        let _ = err.flush();
    }

    fn done(&self) {
        if self.last.is_some() {
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// The group's files as `skyc build` shows them (Kubernetes' manifests,
/// AWS's boot scripts): read into a snapshot directory of the build's own
/// (removed after), each snapshot's stream digested, and kept whole when
/// `with_data` (the ConfigMap of the manifests for kubectl).
pub(crate) fn packed(
    group: &Group,
    with_data: bool,
) -> Result<(skyc_targets::files::Files, Vec<Diagnostic>), String> {
    if !take::names_files(group) {
        return Ok((Default::default(), Vec::new()));
    }
    let dir = std::env::temp_dir().join(format!(
        "skyc-build-files-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    ));
    let snapshots = Snapshots::of(&dir);
    let result = (|| {
        let writing = snapshots
            .writing()
            .map_err(|e| format!("{}: {e}", snapshots.dir().display()))?;
        let (files, diagnostics) = read(group, Some((&snapshots, &writing)), Mounting::No, false)?;
        if diagnostics.iter().any(Diagnostic::is_error) {
            return Ok((Default::default(), diagnostics));
        }
        // Streams that cannot fit a ConfigMap are not held in memory: the
        // target says they are too large from their sizes.
        let fits = files
            .tasks
            .iter()
            .flatten()
            .map(|m| m.taken.bytes)
            .sum::<u64>()
            <= skyc_targets::k8s::MAX_CONFIG_MAP_BYTES as u64;
        let packs = skyc_runtime::files::pack::packs(&files.tasks, &snapshots, with_data && fits)
            .map_err(|e| format!("{}: {e}", snapshots.dir().display()))?;
        Ok((packs, diagnostics))
    })();
    skyc_runtime::files::store::remove(&dir);
    result
}

/// What `build --target files` shows: per task, each local mount as a run
/// would send it (read and digested, not kept), the volumes it needs, and
/// the buckets it names, each with its mode and what a run does with it
/// (copied at submission with the files, or not applied yet); a bucket is
/// not read here.
pub(crate) fn review(group: &Group) -> Result<(serde_json::Value, Vec<Diagnostic>), String> {
    let (files, diagnostics) = read(group, None, Mounting::No, false)?;
    let tasks: Vec<serde_json::Value> = group
        .tasks
        .iter()
        .zip(files.tasks.iter().chain(std::iter::repeat(&Vec::new())))
        .map(|(task, mounts)| {
            let elsewhere: Vec<serde_json::Value> = task
                .file_mounts
                .iter()
                .filter(|m| !take::local(m))
                .map(|m| {
                    let bucket = skyc_targets::storage::bucket(m);
                    let uploaded = skyc_targets::storage::uploaded(m);
                    let run = if uploaded.as_ref().is_some_and(|u| u.mode == Mode::Copy) {
                        "uploaded to the bucket when submitted, and copied with the files"
                    } else if uploaded.is_some() {
                        "uploaded to the bucket when submitted, and mounted on the nodes on this \
                         machine and Slurm, on Kubernetes with --bucket-mounts sidecar; refused \
                         on AWS"
                    } else if skyc_targets::storage::copied(m).is_some() {
                        "copied with the files when submitted"
                    } else if skyc_targets::storage::to_mount(m).is_some() {
                        "mounted on the nodes on this machine and Slurm, on Kubernetes with \
                         --bucket-mounts sidecar; refused on AWS"
                    } else {
                        "not applied"
                    };
                    serde_json::json!({
                        "destination": m.destination,
                        "source": m.source,
                        "storage": m.storage,
                        "mode": bucket.map(|b| b.mode.name()),
                        "run": run,
                    })
                })
                .collect();
            serde_json::json!({
                "task": task.name,
                "mounts": mounts,
                "volumes": task.volumes.iter().map(|v| serde_json::json!({
                    "path": v.path,
                    "volume": v.volume,
                })).collect::<Vec<_>>(),
                "buckets": elsewhere,
            })
        })
        .collect();
    Ok((
        serde_json::json!({ "group": group.name, "tasks": tasks }),
        diagnostics,
    ))
}
