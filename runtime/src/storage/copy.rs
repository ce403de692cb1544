//! A bucket copied to the nodes (`DST: s3://bucket/path`, or a storage
//! spec with `mode: COPY`): listed and downloaded once, when the group is
//! submitted, in parallel, into a snapshot of the state directory. Every
//! target then delivers it as it delivers a local source: the nodes need
//! neither credentials nor a client, a restarted node gets the bytes the
//! group was submitted with, and a bucket read once serves every node.
//!
//! As SkyPilot's `cloud_stores` tells them apart: a URL naming an object
//! is a file; else it is the directory of the objects under it, the
//! whole bucket for a bare `s3://bucket`.

use super::client::why;
use super::{Buckets, CopyError, Reach};
use crate::aws::ec2::client::Error;
use crate::aws::s3::Object;
use crate::files::source::{Budget, SourceError, Taken};
use crate::files::store::{Snapshots, Writing, remove};
use futures::StreamExt;
use skyc_targets::storage::BucketUrl;
use std::collections::HashMap;
use std::fs::{self, File};
use std::path::{Component, Path, PathBuf};

/// Objects downloaded at once.
pub const PARALLEL: usize = 16;

/// The most objects one source is listed to (1,000 pages).
const MAX_PAGES: usize = 1000;

impl Buckets {
    /// Copies `url` into a snapshot: its digest, files and bytes.
    pub fn copy(
        &mut self,
        url: &BucketUrl,
        snapshots: &Snapshots,
        writing: &Writing,
        budget: &mut Budget<'_>,
    ) -> Result<Taken, CopyError> {
        let (store, rt) = self.reach(url.store)?;
        rt.block_on(take(store, url, snapshots, writing, budget, PARALLEL))
    }

    /// Whether `url` could be copied, read no further than its listing
    /// (for a submission refused already: each problem said, no data
    /// fetched).
    pub fn check(&mut self, url: &BucketUrl) -> Result<(), CopyError> {
        let (store, rt) = self.reach(url.store)?;
        rt.block_on(listed(store, url)).map(drop)
    }
}

/// What a URL names.
enum Listed {
    /// One object: copied to the destination as a file.
    File(Object),
    /// The objects under it: a directory.
    Dir(Vec<Object>),
}

/// What `url` names: one object (a file), or those under it.
async fn listed(s3: Reach<'_>, url: &BucketUrl) -> Result<Listed, CopyError> {
    if url.path.is_empty() {
        let all = s3
            .list_under(&url.bucket, "", MAX_PAGES)
            .await
            .map_err(why)?
            .ok_or(CopyError::NoBucket)?;
        return Ok(Listed::Dir(all));
    }
    // Keys come in order: an object named the path comes first.
    let first = s3
        .first_under(&url.bucket, &url.path)
        .await
        .map_err(why)?
        .ok_or(CopyError::NoBucket)?;
    if let Some(o) = first.filter(|o| o.key == url.path) {
        return Ok(Listed::File(o));
    }
    let prefix = format!("{}/", url.path);
    let under = s3
        .list_under(&url.bucket, &prefix, MAX_PAGES)
        .await
        .map_err(why)?
        .ok_or(CopyError::NoBucket)?;
    if under.is_empty() {
        return Err(CopyError::Nothing);
    }
    Ok(Listed::Dir(under))
}

/// Where `key` lands under the destination: the key after the prefix,
/// each part a plain name (no `.`, `..` or empty part: S3 allows them, a
/// path under the destination cannot hold them).
fn relative<'k>(key: &'k str, prefix: &str) -> Result<Option<&'k str>, CopyError> {
    let rel = key
        .strip_prefix(prefix)
        .ok_or_else(|| CopyError::Key(key.to_owned()))?;
    // A folder marker (`dir/`) names a directory.
    let rel = rel.strip_suffix('/').unwrap_or(rel);
    if rel.is_empty() {
        return Ok(None);
    }
    let plain = rel
        .split('/')
        .all(|part| matches!(Path::new(part).components().next(), Some(Component::Normal(n)) if n == part));
    if !plain || rel.contains('\0') {
        return Err(CopyError::Key(key.to_owned()));
    }
    Ok(Some(rel))
}

/// Lists, downloads `parallel` objects at once, and keeps the snapshot.
pub async fn take(
    s3: Reach<'_>,
    url: &BucketUrl,
    snapshots: &Snapshots,
    writing: &Writing,
    budget: &mut Budget<'_>,
    parallel: usize,
) -> Result<Taken, CopyError> {
    let listed = listed(s3, url).await?;
    let total: u64 = match &listed {
        Listed::File(o) => o.size,
        Listed::Dir(all) => all.iter().map(|o| o.size).sum(),
    };
    let room = budget.limit.saturating_sub(budget.bytes);
    if total > room {
        return Err(CopyError::TooLarge {
            limit: budget.limit,
        });
    }
    let staged = snapshots
        .staging(writing)
        .map_err(|error| local(snapshots.dir(), error))?;
    let kept = match plan(url, &listed, &staged) {
        Err(e) => Err(e),
        Ok(files) => match fill(s3, &url.bucket, &files, parallel, budget).await {
            Err(e) => Err(e),
            Ok(()) => match listed {
                Listed::Dir(_) => snapshots.keep(writing, &staged, true, budget),
                Listed::File(_) => snapshots.keep(writing, &staged.join("object"), false, budget),
            }
            .map_err(CopyError::Local),
        },
    };
    remove(&staged);
    kept
}

fn local(path: &Path, error: std::io::Error) -> CopyError {
    CopyError::Local(SourceError::Unreadable {
        path: path.to_owned(),
        error,
    })
}

/// The files `listed` makes under `staged` (a directory's objects under
/// it, a file as `staged/object`), each made empty now: two keys that
/// would be one path (`a` and `a/b`, `a` and the folder `a/`, keys a
/// case-insensitive filesystem takes for one) are refused here, before
/// any byte is fetched.
fn plan<'o>(
    url: &BucketUrl,
    listed: &'o Listed,
    staged: &Path,
) -> Result<Vec<(&'o Object, PathBuf)>, CopyError> {
    let objects = match listed {
        Listed::File(o) => {
            let to = staged.join("object");
            File::create_new(&to).map_err(|e| local(&to, e))?;
            return Ok(vec![(o, to)]);
        }
        Listed::Dir(all) => all,
    };
    let prefix = if url.path.is_empty() {
        String::new()
    } else {
        format!("{}/", url.path)
    };
    // Folders first (a marker, or a file's parents), then files: a file
    // where a folder is, or the reverse, is then a collision.
    let mut dirs: Vec<(&Object, &str)> = Vec::new();
    let mut files = Vec::new();
    for o in objects {
        let Some(rel) = relative(&o.key, &prefix)? else {
            continue;
        };
        if o.key.ends_with('/') {
            dirs.push((o, rel));
        } else {
            files.push((o, rel));
        }
    }
    let collision = |a: &str, b: &str| CopyError::Collision(a.to_owned(), b.to_owned());
    let mut made: HashMap<PathBuf, &str> = HashMap::new();
    for (o, rel) in &dirs {
        let to = staged.join(rel);
        fs::create_dir_all(&to).map_err(|e| local(&to, e))?;
        made.insert(to, &o.key);
    }
    let mut out = Vec::with_capacity(files.len());
    for (o, rel) in files {
        let to = staged.join(rel);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).map_err(|_| {
                // A parent is a file already.
                let clash = made
                    .iter()
                    .find(|(p, _)| parent.starts_with(p))
                    .map_or("", |(_, k)| k);
                collision(clash, &o.key)
            })?;
        }
        match File::create_new(&to) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let clash = made.get(&to).copied().unwrap_or("");
                return Err(collision(clash, &o.key));
            }
            Err(e) => return Err(local(&to, e)),
        }
        made.insert(to.clone(), &o.key);
        out.push((o, to));
    }
    Ok(out)
}

/// Downloads `files` (made empty by [`plan`]), `parallel` at once,
/// showing the bytes come as `budget`'s progress.
async fn fill(
    s3: Reach<'_>,
    bucket: &str,
    files: &[(&Object, PathBuf)],
    parallel: usize,
    budget: &mut Budget<'_>,
) -> Result<(), CopyError> {
    let mut downloads = futures::stream::iter(files.iter())
        .map(|(o, to)| async move {
            s3.get_object(bucket, o, to)
                .await
                .map(|()| o.size)
                .map_err(|e| (o.key.clone(), e))
        })
        .buffer_unordered(parallel.max(1));
    let (mut count, mut bytes) = (0, 0);
    while let Some(done) = downloads.next().await {
        match done {
            Ok(size) => {
                count += 1;
                bytes += size;
                (budget.progress)(budget.files + count, budget.bytes + bytes);
            }
            // Writing here failed (a full disk): not the store's doing.
            Err((_, Error::Request(why))) => return Err(CopyError::Write(why)),
            Err((key, e)) => {
                return Err(match why(e) {
                    CopyError::Failed(m) => CopyError::Failed(format!("`{key}`: {m}")),
                    CopyError::Changed(_) => CopyError::Changed(key),
                    other => other,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_land_under_the_destination_or_are_refused() {
        assert_eq!(relative("data/a/b.txt", "data/").unwrap(), Some("a/b.txt"));
        assert_eq!(relative("data/", "data/").unwrap(), None);
        assert_eq!(relative("data/sub/", "data/").unwrap(), Some("sub"));
        assert_eq!(relative("x", "").unwrap(), Some("x"));
        for bad in [
            "data/../etc/passwd",
            "data/a//b",
            "data/./a",
            "data/..",
            "other/x",
        ] {
            assert!(
                matches!(relative(bad, "data/"), Err(CopyError::Key(_))),
                "{bad}"
            );
        }
    }
}
