//! The buckets skyc made: a storage spec's `name` alone, made when it did
//! not exist, as SkyPilot makes a Storage's bucket. Each is recorded in
//! the store before it is made, so none is made that skyc does not know
//! of; `skyc storage ls` lists them and `skyc storage delete` deletes
//! them. One the last submission does not keep (`persistent: false`) is
//! deleted by the supervisor once no live group uses it ([`collect`]):
//! decided from the store alone, so a supervisor that dies before or
//! during a deletion leaves it to the next one. A bucket skyc did not
//! make is never deleted.

use super::{Buckets, CopyError, client::why, copy::PARALLEL};
use crate::files::Snapshots;
use crate::store::{BucketRow, Store, now_ms};
use futures::StreamExt;
use skyc_targets::storage::Store as Kind;
use std::path::Path;

impl Buckets {
    /// Makes bucket `name` of `kind`, recorded first and not kept: the
    /// submission says whether it is kept once it has gone through
    /// ([`Store::keep_bucket`]). One the store did not confirm stays not
    /// kept: it may have been made all the same (an answer lost), and the
    /// next collection deletes it, or finds it gone and forgets it.
    pub fn make_recorded(
        &mut self,
        store: &mut Store,
        kind: Kind,
        name: &str,
    ) -> Result<(), CopyError> {
        let region = self.reach(kind)?.0.made_in();
        let row = BucketRow {
            name: name.to_owned(),
            store: kind.name().into(),
            endpoint: self.endpoint(kind),
            region,
            persistent: false,
            created_at_ms: now_ms(),
            error: None,
            deleting: false,
        };
        let new = store
            .insert_bucket(&row)
            .map_err(|e| CopyError::Failed(format!("recording the bucket: {e}")))?;
        if !new {
            let _ = store.keep_bucket(name, false);
        }
        self.make(kind, name)
    }
}

/// Deletes the bucket `row` records, where it was made: every object,
/// then the bucket. One already gone is deleted.
pub fn delete(row: &BucketRow) -> Result<(), CopyError> {
    let mut buckets = Buckets::at(row.endpoint.clone(), row.region.clone());
    let (s3, rt) = buckets.reach(Kind::named(&row.store))?;
    rt.block_on(async {
        // A page at a time, deleted before the next is asked for: however
        // many objects, memory holds one page.
        loop {
            let Some(objects) = s3.first_page(&row.name, "").await.map_err(why)? else {
                return Ok(());
            };
            if objects.is_empty() {
                break;
            }
            let mut deletes = futures::stream::iter(objects)
                .map(|o| async move { s3.delete_object(&row.name, &o.key).await })
                .buffer_unordered(PARALLEL);
            while let Some(done) = deletes.next().await {
                done.map_err(why)?;
            }
        }
        s3.delete_bucket(&row.name).await.map_err(why)
    })
}

/// Deletes bucket `name`, which skyc made, unless a live group uses it;
/// what is wrong when it cannot be.
pub fn delete_named(state_dir: &Path, store: &mut Store, name: &str) -> Result<(), Refusal> {
    let failed = |e: String| Refusal::Failed(e);
    let row = {
        // Decided while submissions are held off; marked, a bucket being
        // deleted is refused to them from then on.
        let _excluding = Snapshots::of(state_dir)
            .excluding()
            .map_err(|e| failed(format!("{}: {e}", state_dir.join("files").display())))?;
        let Some(row) = store.bucket(name).map_err(|e| failed(e.to_string()))? else {
            return Err(Refusal::NotFound);
        };
        let users = store
            .bucket_users(name)
            .map_err(|e| failed(e.to_string()))?;
        if !users.is_empty() {
            let list: Vec<String> = users
                .iter()
                .map(|(id, group)| format!("{id} ({group})"))
                .collect();
            return Err(Refusal::InUse(format!(
                "bucket `{name}` is mounted by live groups: {}; cancel them or wait for them to \
                 end",
                list.join(", ")
            )));
        }
        store
            .deleting_bucket(name)
            .map_err(|e| failed(e.to_string()))?;
        row
    };
    if let Err(e) = delete(&row) {
        let why = reason(&e);
        let _ = store.set_bucket_error(name, &why);
        return Err(failed(format!("bucket `{name}`: {why}")));
    }
    store.remove_bucket(name).map_err(|e| failed(e.to_string()))
}

/// Why `skyc storage delete` did not delete a bucket.
#[derive(Debug)]
pub enum Refusal {
    /// skyc made no bucket of that name (or it is gone already).
    NotFound,
    /// A live group mounts it.
    InUse(String),
    /// The bucket's store (S3, GCS), or the state directory's record,
    /// failed.
    Failed(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotFound => f.write_str("skyc made no bucket of that name"),
            Refusal::InUse(why) | Refusal::Failed(why) => f.write_str(why),
        }
    }
}

/// Deletes every bucket skyc made that is not kept and that no live
/// group uses, each while no submission is writing (one may be about to
/// use it); one that cannot be is left with why, for the next
/// collection. Returns each bucket tried, and why it could not be
/// deleted.
pub fn collect(state_dir: &Path) -> Result<Vec<(String, Option<String>)>, String> {
    let mut store = Store::open(state_dir).map_err(|e| e.to_string())?;
    let snapshots = Snapshots::of(state_dir);
    let mut tried = Vec::new();
    for candidate in store.unused_buckets().map_err(|e| e.to_string())? {
        let row = {
            let _excluding = snapshots
                .excluding()
                .map_err(|e| format!("{}: {e}", snapshots.dir().display()))?;
            // Read again under the lock: a submission since may use or
            // keep it. Marked, it is refused to submissions from then on,
            // which need not wait for the deletion.
            let still = store
                .unused_buckets()
                .map_err(|e| e.to_string())?
                .into_iter()
                .find(|b| b.name == candidate.name);
            let Some(row) = still else {
                continue;
            };
            store
                .deleting_bucket(&row.name)
                .map_err(|e| e.to_string())?;
            row
        };
        match delete(&row) {
            Ok(()) => {
                store.remove_bucket(&row.name).map_err(|e| e.to_string())?;
                tried.push((row.name, None));
            }
            Err(e) => {
                let why = reason(&e);
                store
                    .set_bucket_error(&row.name, &why)
                    .map_err(|e| e.to_string())?;
                tried.push((row.name, Some(why)));
            }
        }
    }
    Ok(tried)
}

/// A deletion's failure, in a line.
fn reason(e: &CopyError) -> String {
    match e {
        CopyError::NoCredentials(why) => format!("no credentials: {why}"),
        CopyError::Denied(why) | CopyError::Region(why) | CopyError::Failed(why) => why.clone(),
        other => format!("{other:?}"),
    }
}
