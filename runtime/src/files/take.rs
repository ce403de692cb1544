//! A group's code and data, taken when it is submitted (or built): each
//! task's local `workdir` and local `file_mounts` sources, resolved as
//! SkyPilot resolves them (`~` expanded, relative paths against the
//! directory skyc runs in), read once however many tasks name them, and
//! checked, every problem a diagnostic at the value that names the source.

use super::source::{self, Budget, Filters, SourceError, Taken};
use super::store::{Snapshots, Writing};
use crate::storage::{Buckets, CopyError};
use skyc_compiler::ir::{Group, Task, Workdir};
use skyc_compiler::{Diagnostic, Rule, Span};
pub use skyc_targets::files::{Mount, Volume, WORKDIR, delivered, local};
use skyc_targets::storage::{BucketUrl, Mode, Mounted, Store, Uploaded, uploaded};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The variable that raises [`DEFAULT_LIMIT_MB`].
pub const LIMIT_VAR: &str = "SKYC_FILES_LIMIT_MB";

/// What one submission may read, all sources together: code, not data
/// (data belongs in volumes and buckets).
pub const DEFAULT_LIMIT_MB: u64 = 2048;

/// Every task's mounts, by task index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Files {
    pub tasks: Vec<Vec<Mount>>,
    /// Every task's volumes, by task index.
    pub volumes: Vec<Vec<Volume>>,
    /// Every task's mounted buckets, by task index (for a target that
    /// mounts them, [`Taking::mount_buckets`]).
    pub buckets: Vec<Vec<Mounted>>,
    /// What is done to buckets once the submission is known good.
    pub naming: Naming,
}

impl Files {
    /// Every snapshot's digest, once each.
    pub fn digests(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .tasks
            .iter()
            .flatten()
            .map(|m| m.taken.digest.clone())
            .collect();
        all.sort();
        all.dedup();
        all
    }

    /// The buckets mounted, and those a storage spec names (a local
    /// source uploaded for a copy too), once each: the group's uses.
    pub fn bucket_names(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .buckets
            .iter()
            .flatten()
            .map(|b| b.bucket.clone())
            .chain(self.naming.named.iter().map(|n| n.bucket.clone()))
            .collect();
        all.sort();
        all.dedup();
        all
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.iter().all(Vec::is_empty)
            && self.volumes.iter().all(Vec::is_empty)
            && self.buckets.iter().all(Vec::is_empty)
    }
}

/// Where a source is read from and what a submission knows to read it.
pub struct Taking<'a> {
    /// The directory relative sources start at.
    pub cwd: &'a Path,
    /// The home `~` means.
    pub home: Option<&'a Path>,
    /// Where snapshots are kept (`None`: only digested, for `build`).
    pub into: Option<(&'a Snapshots, &'a Writing)>,
    pub limit_bytes: u64,
    /// Called after each file read with the files and bytes so far.
    pub progress: &'a mut dyn FnMut(u64, u64),
    /// Whether and how the target mounts buckets on its nodes: they are
    /// then found, or made, and the FUSE client checked where it must be.
    pub mount_buckets: Mounting,
    /// Whether this is a submission (not a build): a storage spec's
    /// local source is then uploaded to its bucket, made when it is not
    /// there.
    pub submitting: bool,
}

/// Whether and where a target's nodes mount buckets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mounting {
    /// Not at all (a build; a target that does not mount them).
    No,
    /// With this machine's rclone and FUSE (this machine; Slurm, whose
    /// nodes share its software): checked at submission.
    Here,
    /// With a client the nodes bring (a Kubernetes sidecar's image).
    Nodes,
}

/// The size limit from the environment, in bytes.
pub fn limit_from_env() -> u64 {
    std::env::var(LIMIT_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_LIMIT_MB)
        .saturating_mul(1024 * 1024)
}

/// The snapshots a stored plan gives its nodes, whatever its backend:
/// the `digest` of every entry of a `files` list in it.
pub fn digests_in(plan: &str) -> Vec<String> {
    found_in(plan, |v| {
        let digests = v
            .get("files")
            .and_then(|f| f.as_array())
            .into_iter()
            .flatten()
            .filter_map(|m| m.get("digest")?.as_str())
            .map(str::to_owned)
            .collect();
        (digests, true)
    })
}

/// The buckets a plan's nodes mount (its [`Mounted`] entries), once each:
/// a pool worker's uses, from the plan it is made with.
pub fn buckets_in(plan: &str) -> Vec<String> {
    found_in(plan, |v| {
        match serde_json::from_value::<Mounted>(v.clone()) {
            Ok(m) if v.is_object() => (vec![m.bucket], false),
            _ => (Vec::new(), true),
        }
    })
}

/// What `pick` finds in a plan's JSON, once each, sorted: it is asked of
/// every object, and says what it found there and whether to look
/// inside it too.
fn found_in(plan: &str, pick: impl Fn(&serde_json::Value) -> (Vec<String>, bool)) -> Vec<String> {
    fn walk(
        v: &serde_json::Value,
        pick: &dyn Fn(&serde_json::Value) -> (Vec<String>, bool),
        out: &mut Vec<String>,
    ) {
        match v {
            serde_json::Value::Object(map) => {
                let (found, inside) = pick(v);
                out.extend(found);
                if inside {
                    map.values().for_each(|v| walk(v, pick, out));
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, pick, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(v) = serde_json::from_str(plan) {
        walk(&v, &pick, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

/// A source a task names: local, or a bucket copied.
struct Wanted<'t> {
    destination: String,
    written: &'t str,
    span: Span,
    workdir: bool,
    bucket: Option<BucketUrl>,
    /// A local source uploaded to a bucket (then copied, or mounted).
    upload: Option<Uploaded>,
}

impl Wanted<'_> {
    /// Whether the nodes are given the source with their files (not a
    /// local source uploaded to a bucket they mount).
    fn delivered(&self) -> bool {
        self.upload.as_ref().is_none_or(|u| u.mode == Mode::Copy)
    }
}

fn wanted(task: &Task) -> Vec<Wanted<'_>> {
    let mut out = Vec::new();
    if let Some(Workdir::Local { path, at }) = &task.workdir {
        out.push(Wanted {
            destination: WORKDIR.to_owned(),
            written: path,
            span: at.0,
            workdir: true,
            bucket: None,
            upload: None,
        });
    }
    let read = |m: &&skyc_compiler::ir::FileMount| delivered(m) || uploaded(m).is_some();
    for m in task.file_mounts.iter().filter(read) {
        if let Some(source) = &m.source {
            out.push(Wanted {
                destination: m.destination.clone(),
                written: source,
                span: m.at.0,
                workdir: false,
                bucket: skyc_targets::storage::copied(m),
                upload: uploaded(m),
            });
        }
    }
    out
}

/// Whether any task names a local source, or a bucket copied or mounted.
pub fn names_files(group: &Group) -> bool {
    group.tasks.iter().any(|t| {
        !wanted(t).is_empty()
            || t.file_mounts
                .iter()
                .any(|m| skyc_targets::storage::to_mount(m).is_some())
    })
}

/// Takes every task's sources; the files, or the diagnostics that stop
/// the submission.
pub fn take(group: &Group, taking: &mut Taking<'_>) -> (Files, Vec<Diagnostic>) {
    let mut files = Files::default();
    let mut diagnostics = Vec::new();
    let mut seen: HashMap<(PathBuf, bool, Filters), Result<Taken, ()>> = HashMap::new();
    let mut budget = Budget {
        limit: taking.limit_bytes,
        files: 0,
        bytes: 0,
        progress: taking.progress,
    };
    let mut buckets = Buckets::default();
    let mut named: Vec<Named> = Vec::new();
    let recorded = Recorded::read(taking.into.map(|(s, _)| s));
    let mut uploads: Vec<Upload> = Vec::new();
    for task in &group.tasks {
        let mut mounts = Vec::new();
        for w in wanted(task) {
            if let Some(url) = &w.bucket {
                // Read only into snapshots (a run, a build; a review lists
                // buckets unread), and not for a submission already
                // refused.
                let Some((store, writing)) = taking.into else {
                    continue;
                };
                if recorded.deleting(&url.bucket, url.store) {
                    diagnostics.push(goes(w.span, &url.bucket));
                    continue;
                }
                if diagnostics.iter().any(Diagnostic::is_error) {
                    if let Err(e) = buckets.check(url) {
                        diagnostics.push(bucket_diagnostic(&w, url, e));
                    }
                    continue;
                }
                let key = (PathBuf::from(url.to_string()), false, Filters::All);
                let taken = match seen.get(&key) {
                    Some(t) => t.clone(),
                    None => {
                        let t = buckets
                            .copy(url, store, writing, &mut budget)
                            .map_err(|e| diagnostics.push(bucket_diagnostic(&w, url, e)));
                        seen.insert(key, t.clone());
                        t
                    }
                };
                if let Ok(taken) = taken {
                    mounts.push(Mount {
                        destination: w.destination,
                        source: url.to_string(),
                        workdir: false,
                        taken,
                    });
                }
                if diagnostics.iter().any(|d| d.rule == Rule::FilesTooLarge) {
                    return (files, diagnostics);
                }
                continue;
            }
            // Uploaded to a bucket the nodes mount: read only where they
            // do (elsewhere the mount is not applied, and warned).
            if !w.delivered() && taking.mount_buckets == Mounting::No {
                continue;
            }
            let root = resolve(w.written, taking.cwd, taking.home);
            // A storage source is a directory, as SkyPilot asks, and is
            // read as its sync to the bucket reads it.
            let want_dir = w.workdir || w.upload.is_some();
            let filters = if w.upload.is_some() {
                Filters::Storage
            } else {
                Filters::IgnoreFiles
            };
            let key = (root.clone(), want_dir, filters);
            let taken = match seen.get(&key) {
                Some(t) => t.clone(),
                None => {
                    let read = match taking.into {
                        Some((store, writing)) => {
                            store.take(writing, &root, want_dir, filters, &mut budget)
                        }
                        None => source::read_tree(&root, want_dir, None, &mut budget, filters),
                    };
                    let t = read.map_err(|e| {
                        diagnostics.push(diagnostic(&w, &root, e));
                    });
                    seen.insert(key, t.clone());
                    t
                }
            };
            if let Ok(taken) = taken {
                if let Some(d) = w
                    .upload
                    .as_ref()
                    .and_then(|u| recorded.refusal(w.span, &u.bucket, u.store))
                {
                    diagnostics.push(d);
                } else if let (Some(u), Some((store, _)), true) =
                    (&w.upload, taking.into, taking.submitting)
                {
                    uploads.push(Upload {
                        store: u.store,
                        bucket: u.bucket.clone(),
                        tree: store.path(&taken.digest),
                        span: w.span,
                        source: w.written.to_owned(),
                    });
                    if u.mode == Mode::Copy && !named.iter().any(|n| n.bucket == u.bucket) {
                        match buckets.exists(u.store, &u.bucket) {
                            Ok(there) => named.push(Named {
                                store: u.store,
                                bucket: u.bucket.clone(),
                                span: w.span,
                                make: !there,
                                persistent: u.persistent,
                            }),
                            Err(e) => {
                                diagnostics.push(bucket_diagnostic(&w, &u.store.url(&u.bucket), e))
                            }
                        }
                    }
                }
                if w.delivered() {
                    mounts.push(Mount {
                        destination: w.destination,
                        source: root.display().to_string(),
                        workdir: w.workdir,
                        taken,
                    });
                }
            }
            // Past the limit, reading on only repeats the error.
            if diagnostics.iter().any(|d| d.rule == Rule::FilesTooLarge) {
                return (files, diagnostics);
            }
        }
        files.tasks.push(mounts);
        let mounted = if taking.mount_buckets != Mounting::No && taking.into.is_some() {
            let here = taking.mount_buckets == Mounting::Here;
            let mut found = Found {
                buckets: &mut buckets,
                diagnostics: &mut diagnostics,
                named: &mut named,
                recorded: &recorded,
            };
            mount_buckets(task, here, &mut found)
        } else {
            Vec::new()
        };
        files.buckets.push(mounted);
    }
    // Made, kept or not, and filled only once the submission is known
    // good ([`Naming::carry_out`]): a refused one leaves no bucket
    // behind and changes no bucket's fate.
    files.naming = Naming { named, uploads };
    (files, diagnostics)
}

/// The buckets `task` mounts, each found (or made) now; a diagnostic at
/// each that cannot be, or when this machine cannot mount.
/// What finding a task's mounted buckets reads and adds to.
struct Found<'a> {
    buckets: &'a mut Buckets,
    diagnostics: &'a mut Vec<Diagnostic>,
    named: &'a mut Vec<Named>,
    /// The buckets skyc made.
    recorded: &'a Recorded,
}

fn mount_buckets(task: &Task, here: bool, found: &mut Found<'_>) -> Vec<Mounted> {
    let Found {
        buckets,
        diagnostics,
        named,
        recorded,
    } = found;
    let mut out = Vec::new();
    for m in &task.file_mounts {
        let Some(to) = skyc_targets::storage::to_mount(m) else {
            continue;
        };
        let refused = if to.create {
            recorded.refusal(m.at.0, &to.bucket, to.store)
        } else {
            recorded
                .deleting(&to.bucket, to.store)
                .then(|| goes(m.at.0, &to.bucket))
        };
        if let Some(d) = refused {
            diagnostics.push(d);
            continue;
        }
        if here && let Err(why) = crate::storage::mount::client() {
            diagnostics.push(
                Diagnostic::new(
                    Rule::NoBucketMounter,
                    m.at.0,
                    format!("cannot mount `{}` at `{}`: {why}", to.bucket, m.destination),
                )
                .label("mounted here")
                .help(
                    "skyc mounts buckets with rclone and FUSE: `apt install rclone fuse3`; or \
                     copy the bucket instead (`mode: COPY`)",
                ),
            );
            continue;
        }
        let url = BucketUrl {
            path: to.path.clone(),
            ..to.store.url(&to.bucket)
        };
        let w = Wanted {
            destination: m.destination.clone(),
            written: m.source.as_deref().unwrap_or(&to.bucket),
            span: m.at.0,
            workdir: false,
            bucket: Some(url.clone()),
            upload: None,
        };
        match buckets.mount(&to, &m.destination) {
            Ok((mounted, make)) => {
                if to.create && !named.iter().any(|n| n.bucket == to.bucket) {
                    named.push(Named {
                        store: to.store,
                        bucket: to.bucket.clone(),
                        span: m.at.0,
                        make,
                        persistent: to.persistent,
                    });
                }
                out.push(mounted);
            }
            Err(e) => diagnostics.push(bucket_diagnostic(&w, &url, e)),
        }
        if !to.create && !to.persistent {
            diagnostics.push(kept(m.at.0, &to.bucket));
        }
    }
    out
}

/// What a submission does to buckets once it is known good (planned,
/// about to be recorded): makes the named buckets that are not there
/// (each recorded as skyc's first), says of each whether it is kept, and
/// uploads the local sources to theirs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Naming {
    named: Vec<Named>,
    uploads: Vec<Upload>,
}

impl Naming {
    pub fn is_empty(&self) -> bool {
        self.named.is_empty() && self.uploads.is_empty()
    }

    /// Carries it out, recorded in `state_dir`'s store; a diagnostic at
    /// each bucket that cannot be.
    pub fn carry_out(&self, state_dir: &Path) -> Vec<Diagnostic> {
        let mut diagnostics = Vec::new();
        let Some(first) = self.named.first() else {
            return diagnostics;
        };
        let mut store = match crate::store::Store::open(state_dir) {
            Ok(store) => store,
            Err(e) => {
                diagnostics.push(Diagnostic::new(
                    Rule::UnreadableBucketSource,
                    first.span,
                    format!("cannot record bucket `{}`: {e}", first.bucket),
                ));
                return diagnostics;
            }
        };
        let mut buckets = Buckets::default();
        name_buckets(
            &self.named,
            &self.uploads,
            &mut buckets,
            &mut store,
            &mut diagnostics,
        );
        diagnostics
    }
}

/// A bucket a storage spec names alone: made when it is not there
/// (`make`), deleted after its groups unless `persistent`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Named {
    store: Store,
    bucket: String,
    span: Span,
    make: bool,
    persistent: bool,
}

/// A local source, taken, to upload to its bucket once the bucket is
/// there.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Upload {
    store: Store,
    bucket: String,
    /// The snapshot of the source.
    tree: PathBuf,
    span: Span,
    source: String,
}

/// Uploads each source to its bucket; a diagnostic at each that cannot
/// be.
fn upload(uploads: &[Upload], buckets: &mut Buckets, diagnostics: &mut Vec<Diagnostic>) {
    for u in uploads {
        if let Err(e) = buckets.upload(u.store, &u.bucket, &u.tree) {
            let w = Wanted {
                destination: String::new(),
                written: &u.source,
                span: u.span,
                workdir: false,
                bucket: None,
                upload: None,
            };
            diagnostics.push(bucket_diagnostic(&w, &u.store.url(&u.bucket), e));
        }
    }
}

/// Makes the named buckets that are not there, each recorded as skyc's
/// and not kept until the whole submission has gone through; then, when
/// nothing failed, records of each whether it is kept. A bucket skyc did
/// not make is kept, whatever the spec says (a warning then). Made ones
/// of a submission that fails stay not kept: the next collection deletes
/// them.
fn name_buckets(
    named: &[Named],
    uploads: &[Upload],
    buckets: &mut Buckets,
    store: &mut crate::store::Store,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let failed = |diagnostics: &mut Vec<Diagnostic>, n: &Named, e: CopyError| {
        let w = Wanted {
            destination: String::new(),
            written: &n.bucket,
            span: n.span,
            workdir: false,
            bucket: None,
            upload: None,
        };
        diagnostics.push(bucket_diagnostic(&w, &n.store.url(&n.bucket), e));
    };
    for n in named.iter().filter(|n| n.make) {
        if let Err(e) = buckets.make_recorded(store, n.store, &n.bucket) {
            failed(diagnostics, n, e);
            return;
        }
    }
    upload(uploads, buckets, diagnostics);
    if diagnostics.iter().any(Diagnostic::is_error) {
        return;
    }
    for n in named {
        match store.keep_bucket(&n.bucket, n.persistent) {
            Ok(ours) => {
                if !ours && !n.persistent {
                    diagnostics.push(kept(n.span, &n.bucket));
                }
            }
            Err(e) => failed(
                diagnostics,
                n,
                CopyError::Failed(format!("recording the bucket: {e}")),
            ),
        }
    }
}

/// The buckets skyc made, as the state directory records them.
#[derive(Default)]
struct Recorded {
    /// Those being deleted now (a group's last end, `skyc storage
    /// delete`): a submission may not use them.
    deleting: HashSet<String>,
    /// The store of each: a name is one store's bucket in a state
    /// directory.
    stores: HashMap<String, Store>,
}

impl Recorded {
    fn read(snapshots: Option<&Snapshots>) -> Recorded {
        let rows = snapshots
            .and_then(|s| {
                crate::store::Store::open_read_only(s.state_dir())
                    .ok()
                    .flatten()
            })
            .and_then(|store| store.buckets().ok())
            .unwrap_or_default();
        Recorded {
            deleting: rows
                .iter()
                .filter(|r| r.deleting)
                .map(|r| r.name.clone())
                .collect(),
            stores: rows
                .into_iter()
                .map(|r| (r.name, Store::named(&r.store)))
                .collect(),
        }
    }

    /// Whether skyc is deleting bucket `name` of `store`.
    fn deleting(&self, name: &str, store: Store) -> bool {
        self.deleting.contains(name) && self.stores.get(name) == Some(&store)
    }

    /// Why bucket `name` of `store`, named at `span`, cannot be used:
    /// being deleted, or skyc's in another store.
    fn refusal(&self, span: Span, name: &str, store: Store) -> Option<Diagnostic> {
        if self.deleting(name, store) {
            return Some(goes(span, name));
        }
        let theirs = *self.stores.get(name)?;
        (theirs != store).then(|| {
            Diagnostic::new(
                Rule::UnreadableBucketSource,
                span,
                format!(
                    "bucket `{name}` is named in {}, and skyc made `{}` in {}: one name is one \
                     store's bucket in a state directory",
                    store.name(),
                    theirs.url(name),
                    theirs.name()
                ),
            )
            .label("in another store")
            .help(format!(
                "name another bucket, or delete skyc's first (`skyc storage delete {name}`)"
            ))
        })
    }
}

/// A bucket that is being deleted, named at `span`.
fn goes(span: Span, bucket: &str) -> Diagnostic {
    Diagnostic::new(
        Rule::UnreadableBucketSource,
        span,
        format!(
            "bucket `{bucket}` is being deleted (a bucket skyc made: `skyc storage delete`, or \
             `persistent: false` once no group used it)"
        ),
    )
    .label("being deleted")
    .help(
        "submit again once `skyc storage ls` no longer lists it (it is then made anew); to keep a \
         bucket after its groups, leave `persistent` out or set it to true",
    )
}

/// `persistent: false` on a bucket skyc did not make: it is kept.
fn kept(span: Span, bucket: &str) -> Diagnostic {
    Diagnostic::new(
        Rule::BucketKept,
        span,
        format!("bucket `{bucket}` was not made by skyc: `persistent: false` does not delete it"),
    )
    .label("kept after the group")
    .help(
        "skyc deletes only the buckets it made (a storage spec's `name` that did not exist), \
         as SkyPilot deletes only the storage it manages",
    )
}

/// `~` is the home; a relative path starts where skyc runs, as SkyPilot's
/// `os.path.abspath(os.path.expanduser(...))`.
fn resolve(written: &str, cwd: &Path, home: Option<&Path>) -> PathBuf {
    let expanded = match (written, home) {
        ("~", Some(home)) => home.to_owned(),
        (w, Some(home)) if w.starts_with("~/") => home.join(&w[2..]),
        (w, _) => PathBuf::from(w),
    };
    let joined = cwd.join(expanded);
    // Lexically, as abspath does: `a/../b` is `b` even if `a` is a link.
    let mut out = PathBuf::new();
    for part in joined.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn diagnostic(w: &Wanted<'_>, root: &Path, error: SourceError) -> Diagnostic {
    let what = if w.workdir {
        "workdir"
    } else if w.upload.is_some() {
        "storage source"
    } else {
        "file mount source"
    };
    let written = w.written;
    let root_shown = root.display();
    let skyignore = "leave it out with a line in the source's `.skyignore` (or `.gitignore` when \
                     there is no `.skyignore`)";
    match error {
        SourceError::Missing => Diagnostic::new(
            Rule::MissingFileSource,
            w.span,
            format!("{what} `{written}` does not exist (looked for {root_shown})"),
        )
        .label("not found")
        .help(
            "relative paths start in the directory skyc runs in, as SkyPilot reads them: run \
             from there, or give the path from `~` or `/`",
        ),
        SourceError::NotADirectory if w.upload.is_some() => Diagnostic::new(
            Rule::StorageSourceNotDirectory,
            w.span,
            format!("storage source `{written}` is not a directory ({root_shown})"),
        )
        .label("not a directory")
        .help(
            "a storage spec uploads a directory to its bucket, as SkyPilot's does; to copy one \
             file to the nodes, write `DST: SOURCE` in `file_mounts`",
        ),
        SourceError::NotADirectory => Diagnostic::new(
            Rule::WorkdirNotDirectory,
            w.span,
            format!("workdir `{written}` is not a directory ({root_shown})"),
        )
        .label("not a directory")
        .help("a workdir is a directory; to copy one file, use `file_mounts`"),
        SourceError::Unreadable { path, error } => Diagnostic::new(
            Rule::UnreadableFileSource,
            w.span,
            format!(
                "cannot read {} under {what} `{written}`: {error}",
                path.display()
            ),
        )
        .label("cannot be read")
        .help(format!("make it readable, or {skyignore}")),
        SourceError::Special { path, kind } => Diagnostic::new(
            Rule::SpecialFileInSource,
            w.span,
            format!(
                "{} under {what} `{written}` is {kind}, which cannot be copied to the nodes",
                path.display()
            ),
        )
        .label("holds it")
        .help(skyignore.to_owned()),
        SourceError::LinkLeaves { path, target } => Diagnostic::new(
            Rule::SymlinkLeavesSource,
            w.span,
            format!(
                "{} under {what} `{written}` links to {}, outside it: links are copied as links \
                 (as SkyPilot's rsync copies them), and this one would point at nothing on the \
                 nodes",
                path.display(),
                target.display()
            ),
        )
        .label("holds it")
        .help(format!(
            "make the link relative and inside the source, mount its target as a file mount of \
             its own, or {skyignore}"
        )),
        SourceError::TooLarge { limit, .. } => Diagnostic::new(
            Rule::FilesTooLarge,
            w.span,
            format!(
                "the submission's files are larger than the limit of {} MiB: reading stopped in \
                 {what} `{written}`",
                limit / (1024 * 1024),
            ),
        )
        .label("passes the limit")
        .help(format!(
            "leave large files out with `.skyignore`, put data in a volume, or raise the limit: \
             {LIMIT_VAR}={}",
            (limit / (1024 * 1024)).saturating_mul(2)
        )),
    }
}

fn bucket_diagnostic(w: &Wanted<'_>, url: &BucketUrl, error: CopyError) -> Diagnostic {
    let gcs = url.store == Store::Gcs;
    let credentials = if gcs {
        "skyc reads GCS buckets with Application Default Credentials, as `gcloud storage` \
         does (GOOGLE_APPLICATION_CREDENTIALS, `gcloud auth application-default login`, an \
         instance's service account)"
    } else {
        "skyc reads buckets with the AWS configuration `aws` uses (AWS_PROFILE, the shared \
         files, AWS_ACCESS_KEY_ID, SSO, an instance role)"
    };
    let ls = if gcs {
        "`gcloud storage ls`"
    } else {
        "`aws s3 ls`"
    };
    let unreadable = |why: String, label: &str, help: String| {
        Diagnostic::new(
            Rule::UnreadableBucketSource,
            w.span,
            format!("cannot copy `{url}`: {why}"),
        )
        .label(label)
        .help(help)
    };
    match error {
        CopyError::NoBucket => Diagnostic::new(
            Rule::MissingBucketSource,
            w.span,
            format!("bucket `{}` does not exist", url.bucket),
        )
        .label("no such bucket")
        .help(format!(
            "name a bucket these credentials can list ({ls} lists them)"
        )),
        CopyError::Nothing => Diagnostic::new(
            Rule::MissingBucketSource,
            w.span,
            format!(
                "nothing is at `{url}`: bucket `{}` has no object `{}` and none under `{}/`",
                url.bucket, url.path, url.path
            ),
        )
        .label("not found")
        .help(format!(
            "object keys are case-sensitive; {ls} lists what the bucket holds"
        )),
        CopyError::NoCredentials(why) => unreadable(
            if gcs {
                why
            } else {
                format!("no AWS credentials: {why}")
            },
            "needs credentials",
            credentials.to_owned(),
        ),
        CopyError::Denied(why) => unreadable(why, "refused", credentials.to_owned()),
        CopyError::Region(why) => unreadable(
            why,
            "in another region",
            "set AWS_REGION (or the profile's `region`) to the bucket's region".to_owned(),
        ),
        CopyError::Key(key) => unreadable(
            format!(
                "its object `{key}` cannot be a path under `{}`",
                w.destination
            ),
            "holds it",
            "a key with an empty, `.` or `..` part cannot be copied; copy a prefix without it"
                .to_owned(),
        ),
        CopyError::Changed(key) => unreadable(
            format!("its object `{key}` was replaced while it was being copied"),
            "changed while read",
            "a copy is one version of every object: submit again once the bucket's writers are \
             done"
                .to_owned(),
        ),
        CopyError::Collision(a, b) => unreadable(
            format!(
                "its objects `{a}` and `{b}` would be one path under `{}`",
                w.destination
            ),
            "holds them",
            "a bucket keeps a key and keys under it apart, a filesystem cannot: copy a prefix \
             that holds only one of them"
                .to_owned(),
        ),
        CopyError::Failed(why) => unreadable(
            why,
            "cannot be read",
            if gcs {
                "skyc reaches Google Cloud Storage (or the emulator STORAGE_EMULATOR_HOST names); \
                 submit again once it answers"
            } else {
                "skyc reaches S3 where the AWS configuration says (AWS_ENDPOINT_URL_S3, \
                 AWS_ENDPOINT_URL, the profile's `endpoint_url`); submit again once it answers"
            }
            .to_owned(),
        ),
        CopyError::TooLarge { limit, .. } => Diagnostic::new(
            Rule::FilesTooLarge,
            w.span,
            format!(
                "the submission's files are larger than the limit of {} MiB: `{url}` passes it",
                limit / (1024 * 1024),
            ),
        )
        .label("passes the limit")
        .help(format!(
            "copy a smaller prefix, mount the bucket (`mode: MOUNT`, on this machine), or raise \
             the limit: {LIMIT_VAR}={}",
            (limit / (1024 * 1024)).saturating_mul(2)
        )),
        CopyError::Write(why) => unreadable(
            why,
            "cannot be kept",
            "the state directory's filesystem refused the bytes: free space there, or give \
             another with --state-dir"
                .to_owned(),
        ),
        CopyError::Local(e) => diagnostic(w, Path::new(&url.to_string()), e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root reads every file, so the end-to-end tests (run as root)
    /// cannot meet this one: its diagnostic, built directly.
    #[test]
    fn an_unreadable_file_is_named_at_its_source() {
        let w = Wanted {
            destination: "/code".into(),
            written: "code",
            span: Span::new(10, 14),
            workdir: false,
            bucket: None,
            upload: None,
        };
        let d = diagnostic(
            &w,
            Path::new("/work/code"),
            SourceError::Unreadable {
                path: PathBuf::from("/work/code/secret.key"),
                error: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
            },
        );
        assert_eq!(d.rule, Rule::UnreadableFileSource);
        assert_eq!(d.primary.span, Span::new(10, 14));
        assert_eq!(
            d.message,
            "cannot read /work/code/secret.key under file mount source `code`: permission denied"
        );
    }

    #[test]
    fn a_plans_mounted_buckets_are_its_uses() {
        let plan = serde_json::json!({
            "tasks": [
                {"buckets": [
                    {"destination": "/p", "bucket": "policy", "path": "", "cached": false,
                     "endpoint": null, "region": "us-east-1"},
                    {"destination": "/c", "bucket": "ckpt", "path": "run", "cached": true,
                     "region": "eu-west-1"}
                ]},
                {"buckets": [{"destination": "/q", "bucket": "policy", "path": "",
                              "cached": false, "region": "us-east-1"}],
                 "bucket": "not-a-mount"}
            ]
        });
        assert_eq!(buckets_in(&plan.to_string()), ["ckpt", "policy"]);
        assert!(buckets_in("not json").is_empty());
    }

    #[test]
    fn sources_resolve_as_abspath_expanduser() {
        let cwd = Path::new("/work/repo");
        let home = Some(Path::new("/home/u"));
        let r = |w: &str| resolve(w, cwd, home).display().to_string();
        assert_eq!(r("code"), "/work/repo/code");
        assert_eq!(r("./a/../code"), "/work/repo/code");
        assert_eq!(r("~/src"), "/home/u/src");
        assert_eq!(r("~"), "/home/u");
        assert_eq!(r("/abs/x"), "/abs/x");
        assert_eq!(r("../x"), "/work/x");
    }
}
