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

use super::{Buckets, CopyError};
use crate::aws::ec2::client::Error;
use crate::aws::s3::{Object, S3};
use crate::files::source::{Budget, SourceError, Taken};
use crate::files::store::{Snapshots, Writing, remove};
use futures::StreamExt;
use skyc_targets::storage::BucketUrl;
use std::path::{Component, Path};

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
        let (s3, rt) = self.client()?;
        rt.block_on(take(s3, url, snapshots, writing, budget, PARALLEL))
    }
}

/// What `url` names: one object (a file), or those under it.
async fn listed(s3: &S3, url: &BucketUrl) -> Result<(bool, Vec<Object>), CopyError> {
    let missing = |l: Option<Vec<Object>>| l.ok_or(CopyError::NoBucket);
    if url.path.is_empty() {
        let all = missing(
            s3.list_under(&url.bucket, "", MAX_PAGES)
                .await
                .map_err(why)?,
        )?;
        return Ok((true, all));
    }
    // Keys come in order: an object named the path comes first.
    let first = missing(
        s3.list_under(&url.bucket, &url.path, 1)
            .await
            .map_err(why)?,
    )?;
    if let Some(o) = first.into_iter().find(|o| o.key == url.path) {
        return Ok((false, vec![o]));
    }
    let prefix = format!("{}/", url.path);
    let under = missing(
        s3.list_under(&url.bucket, &prefix, MAX_PAGES)
            .await
            .map_err(why)?,
    )?;
    if under.is_empty() {
        return Err(CopyError::Nothing);
    }
    Ok((true, under))
}

pub(super) fn why(e: Error) -> CopyError {
    match e.code() {
        Some(
            "AccessDenied"
            | "InvalidAccessKeyId"
            | "SignatureDoesNotMatch"
            | "ExpiredToken"
            | "InvalidToken",
        ) => CopyError::Denied(e.to_string()),
        Some(
            "PermanentRedirect"
            | "AuthorizationHeaderMalformed"
            | "IllegalLocationConstraintException",
        ) => CopyError::Region(e.to_string()),
        _ => CopyError::Failed(e.to_string()),
    }
}

/// Where `key` lands under the destination: the key after the prefix,
/// each part a plain name (no `.`, `..` or empty part: S3 allows them, a
/// path under the destination cannot hold them).
fn relative<'k>(key: &'k str, prefix: &str) -> Result<Option<&'k str>, CopyError> {
    let rel = key.strip_prefix(prefix).unwrap_or(key);
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
    s3: &S3,
    url: &BucketUrl,
    snapshots: &Snapshots,
    writing: &Writing,
    budget: &mut Budget<'_>,
    parallel: usize,
) -> Result<Taken, CopyError> {
    let (dir, objects) = listed(s3, url).await?;
    let total: u64 = objects.iter().map(|o| o.size).sum();
    let room = budget.limit.saturating_sub(budget.bytes);
    if total > room {
        return Err(CopyError::TooLarge {
            bytes: budget.bytes + total,
            limit: budget.limit,
        });
    }
    let staged = snapshots
        .staging(writing)
        .map_err(|error| local(snapshots.dir(), error))?;
    let result = fill(s3, url, dir, &objects, &staged, parallel).await;
    let kept = match result {
        Err(e) => Err(e),
        Ok(()) if dir => snapshots
            .keep(writing, &staged, true, budget)
            .map_err(CopyError::Local),
        Ok(()) => snapshots
            .keep(writing, &staged.join("object"), false, budget)
            .map_err(CopyError::Local),
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

/// Downloads `objects` into `staged`: under it for a directory, as
/// `staged/object` for a file.
async fn fill(
    s3: &S3,
    url: &BucketUrl,
    dir: bool,
    objects: &[Object],
    staged: &Path,
    parallel: usize,
) -> Result<(), CopyError> {
    let mut files = Vec::new();
    if dir {
        let prefix = if url.path.is_empty() {
            String::new()
        } else {
            format!("{}/", url.path)
        };
        for o in objects {
            let Some(rel) = relative(&o.key, &prefix)? else {
                continue;
            };
            let to = staged.join(rel);
            if o.key.ends_with('/') {
                std::fs::create_dir_all(&to).map_err(|e| local(&to, e))?;
                continue;
            }
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent).map_err(|e| local(parent, e))?;
            }
            files.push((o, to));
        }
    } else {
        files.extend(objects.iter().map(|o| (o, staged.join("object"))));
    }
    let mut downloads = futures::stream::iter(files.iter())
        .map(|(o, to)| async move {
            s3.get_object(&url.bucket, &o.key, o.size, to)
                .await
                .map_err(|e| (o.key.clone(), e))
        })
        .buffer_unordered(parallel.max(1));
    while let Some(done) = downloads.next().await {
        if let Err((key, e)) = done {
            return Err(match why(e) {
                CopyError::Failed(m) => CopyError::Failed(format!("`{key}`: {m}")),
                other => other,
            });
        }
    }
    // A key that is also a folder (`a` and `a/b`) cannot be both here.
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
        for bad in ["data/../etc/passwd", "data/a//b", "data/./a", "data/.."] {
            assert!(
                matches!(relative(bad, "data/"), Err(CopyError::Key(_))),
                "{bad}"
            );
        }
    }
}
