//! The state directory's snapshots: `files/DIGEST`, a tree (or one file)
//! as a source held it when submitted, named by its digest so that equal
//! sources are kept once. A snapshot lives while a live group refers to it
//! (the store's `snapshots` table); [`Snapshots::collect`] removes the
//! others.
//!
//! A submission writes its snapshots, then records its group: between the
//! two, its snapshots are referred to by nothing. It holds the directory's
//! lock shared meanwhile, and collection takes it exclusively, so a
//! snapshot is never collected before its group is recorded.

use super::source::{self, Budget, Filters, SourceError, Taken};
use rustix::fs::{FlockOperation, flock};
use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct Snapshots {
    dir: PathBuf,
}

/// Held while a submission writes snapshots its group is not yet
/// recorded with.
pub struct Writing {
    _lock: File,
}

impl Snapshots {
    /// The snapshots of the state directory `state_dir`.
    pub fn of(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("files"),
        }
    }

    /// Where the snapshots are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The state directory they are kept in.
    pub fn state_dir(&self) -> &Path {
        self.dir.parent().unwrap_or(&self.dir)
    }

    /// Where the snapshot `digest` is.
    pub fn path(&self, digest: &str) -> PathBuf {
        self.dir.join(digest)
    }

    fn lock(&self) -> io::Result<File> {
        fs::create_dir_all(&self.dir)?;
        File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(".lock"))
    }

    /// Starts writing: collection waits until the returned guard is gone.
    pub fn writing(&self) -> io::Result<Writing> {
        let lock = self.lock()?;
        flock(&lock, FlockOperation::LockShared)?;
        Ok(Writing { _lock: lock })
    }

    /// Waits until no submission is writing, and holds them off: what a
    /// live group is given cannot change meanwhile (a volume deleted).
    pub fn excluding(&self) -> io::Result<Writing> {
        let lock = self.lock()?;
        flock(&lock, FlockOperation::LockExclusive)?;
        Ok(Writing { _lock: lock })
    }

    /// Holds submissions off if none is writing now; `None` when one is.
    pub fn try_excluding(&self) -> io::Result<Option<Writing>> {
        let lock = self.lock()?;
        Ok(flock(&lock, FlockOperation::NonBlockingLockExclusive)
            .is_ok()
            .then_some(Writing { _lock: lock }))
    }

    /// Reads `root` into the snapshot its bytes make, unless it is kept
    /// already. The caller holds [`Writing`].
    pub fn take(
        &self,
        _writing: &Writing,
        root: &Path,
        want_dir: bool,
        filters: Filters,
        budget: &mut Budget<'_>,
    ) -> Result<Taken, SourceError> {
        // Read once to name it: the bytes kept already (a live group
        // submitted from the same source) are not written again. When
        // they are written, the name is the digest of what was written.
        let mut quiet = |_, _| {};
        let mut counting = Budget {
            limit: budget.limit.saturating_sub(budget.bytes),
            files: 0,
            bytes: 0,
            progress: &mut quiet,
        };
        if let Ok(taken) = source::read_tree(root, want_dir, None, &mut counting, filters)
            && self.path(&taken.digest).symlink_metadata().is_ok()
        {
            budget.files += counting.files;
            budget.bytes += counting.bytes;
            (budget.progress)(budget.files, budget.bytes);
            return Ok(taken);
        }
        let tmp = self.fresh();
        let taken = source::read_tree(root, want_dir, Some(&tmp), budget, filters);
        self.place(&tmp, taken)
    }

    /// A new name beside the snapshots, for one being written: removed by
    /// the next collection if the submission is interrupted.
    fn fresh(&self) -> PathBuf {
        self.dir
            .join(format!(".new-{}-{}", std::process::id(), unique()))
    }

    /// Puts `written` (what `taken` read) in place as the snapshot of its
    /// digest, or removes it: when reading failed, or those bytes are kept
    /// already.
    fn place(
        &self,
        written: &Path,
        taken: Result<Taken, SourceError>,
    ) -> Result<Taken, SourceError> {
        let taken = match taken {
            Ok(t) => t,
            Err(e) => {
                remove(written);
                return Err(e);
            }
        };
        let kept = self.path(&taken.digest);
        if kept.symlink_metadata().is_ok() {
            remove(written);
        } else if let Err(error) = fs::rename(written, &kept) {
            remove(written);
            // Another submission kept the same bytes meanwhile.
            if kept.symlink_metadata().is_err() {
                return Err(SourceError::Unreadable { path: kept, error });
            }
        }
        Ok(taken)
    }

    /// A directory to fill (a bucket's objects) and then [`Self::keep`]:
    /// beside the snapshots, so keeping it is a rename, and removed by the
    /// next collection if the submission is interrupted.
    pub fn staging(&self, _writing: &Writing) -> io::Result<PathBuf> {
        let dir = self.fresh();
        fs::create_dir_all(&self.dir)?;
        fs::create_dir(&dir)?;
        Ok(dir)
    }

    /// Keeps `staged` (from [`Self::staging`]) whole, every file of it, as
    /// the snapshot its bytes make: renamed into place, or removed when
    /// those bytes are kept already.
    pub fn keep(
        &self,
        _writing: &Writing,
        staged: &Path,
        want_dir: bool,
        budget: &mut Budget<'_>,
    ) -> Result<Taken, SourceError> {
        let taken = source::read_tree(staged, want_dir, None, budget, source::Filters::All);
        self.place(staged, taken)
    }

    /// Removes every snapshot not in `live()`, and what interrupted
    /// submissions left. `live` is asked once the lock is held: a
    /// submission that recorded its group before is seen, and none can
    /// record one meanwhile. Skipped (returns `None`) while a submission
    /// is writing; the next collection does it.
    pub fn collect(
        &self,
        live: impl FnOnce() -> Result<HashSet<String>, String>,
    ) -> io::Result<Option<usize>> {
        if !self.dir.exists() {
            return Ok(Some(0));
        }
        let lock = self.lock()?;
        if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
            return Ok(None);
        }
        let live = live().map_err(io::Error::other)?;
        let mut removed = 0;
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name == ".lock" || live.contains(name.as_ref()) {
                continue;
            }
            remove(&entry.path());
            removed += 1;
        }
        Ok(Some(removed))
    }
}

/// Removes a file or a tree, whatever its modes (a snapshot keeps the
/// source's, read-only directories included).
pub fn remove(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = path.symlink_metadata() else {
        return;
    };
    if meta.is_dir() {
        let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o700));
        if let Ok(entries) = fs::read_dir(path) {
            for entry in entries.flatten() {
                remove(&entry.path());
            }
        }
        let _ = fs::remove_dir(path);
    } else {
        let _ = fs::remove_file(path);
    }
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}
