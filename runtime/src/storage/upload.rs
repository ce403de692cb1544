//! A storage spec's local `source` uploaded to its named bucket when the
//! group is submitted (`{name: B, source: ./dir}`), as SkyPilot syncs it
//! there before the job: the snapshot skyc took of the directory as that
//! sync reads it (`source::Filters::Storage`: its ignore files applied,
//! no `.git`, no links), every file at its path as the key, 16 at once.

use super::{Buckets, CopyError, Store, client::why, copy::PARALLEL};
use crate::objects::Source;
use futures::StreamExt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

impl Buckets {
    /// Uploads the directory `tree` to `bucket` of `store`: its files
    /// and bytes.
    pub fn upload(
        &mut self,
        store: Store,
        bucket: &str,
        tree: &Path,
    ) -> Result<(u64, u64), CopyError> {
        let mut files = Vec::new();
        walk(tree, "", &mut files)
            .map_err(|e| CopyError::Write(format!("{}: {e}", tree.display())))?;
        let (s3, rt) = self.reach(store)?;
        rt.block_on(async {
            let mut puts = futures::stream::iter(&files)
                .map(|(key, path)| async move {
                    let (sha256, bytes) = crate::files::tar::file_digest(path)
                        .map_err(|e| CopyError::Write(format!("{}: {e}", path.display())))?;
                    let at = path.clone();
                    let source: Source = Arc::new(move |w: &mut dyn io::Write| {
                        io::copy(&mut fs::File::open(&at)?, w).map(drop)
                    });
                    s3.put_object(bucket, key, bytes, &sha256, source)
                        .await
                        .map_err(why)?;
                    Ok::<u64, CopyError>(bytes)
                })
                .buffer_unordered(PARALLEL);
            let mut total = 0;
            while let Some(put) = puts.next().await {
                total += put?;
            }
            Ok((files.len() as u64, total))
        })
    }
}

/// Every regular file under `dir`, with its key (`prefix` and its path
/// under `dir`), in name order.
fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) -> io::Result<()> {
    let mut entries: Vec<fs::DirEntry> = fs::read_dir(dir)?.collect::<io::Result<_>>()?;
    entries.sort_by_key(fs::DirEntry::file_name);
    for e in entries {
        let name = e.file_name();
        let Some(name) = name.to_str() else {
            return Err(io::Error::other(format!(
                "{}: a name a bucket cannot hold as a key",
                e.path().display()
            )));
        };
        let key = format!("{prefix}{name}");
        let kind = e.file_type()?;
        if kind.is_dir() {
            walk(&e.path(), &format!("{key}/"), out)?;
        } else if kind.is_file() {
            out.push((key, e.path()));
        }
    }
    Ok(())
}
