//! The buckets skyc made, and the groups that use them: what `skyc
//! storage` lists and deletes, and what the supervisor deletes when a
//! bucket not kept (`persistent: false`) is no longer used
//! (`skyc_runtime::storage::owned`).

use super::{Result, Store, Tx};
use rusqlite::params;

/// A bucket skyc made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketRow {
    pub name: String,
    /// Its object store (`s3`).
    pub store: String,
    /// The endpoint it was made at; `None` is the store's own.
    pub endpoint: Option<String>,
    pub region: String,
    /// Kept after the groups that use it (the last submission's word).
    pub persistent: bool,
    pub created_at_ms: i64,
    /// Why its deletion failed last, until it succeeds.
    pub error: Option<String>,
    /// Being deleted: a submission that names it is refused.
    pub deleting: bool,
}

const COLUMNS: &str = "name, store, endpoint, region, persistent, created_at_ms, error, deleting";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<BucketRow> {
    Ok(BucketRow {
        name: r.get(0)?,
        store: r.get(1)?,
        endpoint: r.get(2)?,
        region: r.get(3)?,
        persistent: r.get(4)?,
        created_at_ms: r.get(5)?,
        error: r.get(6)?,
        deleting: r.get(7)?,
    })
}

impl Store {
    /// Records a bucket about to be made, unless it is recorded: false
    /// then. Recorded first, a bucket made by a client that died before
    /// its group was recorded is still skyc's to list and delete.
    pub fn insert_bucket(&mut self, b: &BucketRow) -> Result<bool> {
        let n = self.conn.execute(
            "INSERT OR IGNORE INTO buckets (name, store, endpoint, region, persistent, \
             created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                b.name,
                b.store,
                b.endpoint,
                b.region,
                b.persistent,
                b.created_at_ms
            ],
        )?;
        Ok(n > 0)
    }

    /// The bucket of that name, if skyc made it.
    pub fn bucket(&self, name: &str) -> Result<Option<BucketRow>> {
        use rusqlite::OptionalExtension;
        self.conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM buckets WHERE name = ?1"),
                params![name],
                row,
            )
            .optional()
    }

    /// Every bucket skyc made, by name.
    pub fn buckets(&self) -> Result<Vec<BucketRow>> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {COLUMNS} FROM buckets ORDER BY name"))?;
        let rows = stmt.query_map([], row)?;
        rows.collect()
    }

    /// Says whether bucket `name` (if skyc made it) is kept after the
    /// groups that use it; true when it is skyc's.
    pub fn keep_bucket(&mut self, name: &str, persistent: bool) -> Result<bool> {
        let n = self.conn.execute(
            "UPDATE buckets SET persistent = ?2, error = NULL WHERE name = ?1",
            params![name, persistent],
        )?;
        Ok(n > 0)
    }

    /// Forgets a bucket that is gone.
    pub fn remove_bucket(&mut self, name: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM buckets WHERE name = ?1", params![name])?;
        Ok(())
    }

    /// Why deleting bucket `name` failed: it is no longer being deleted.
    pub fn set_bucket_error(&mut self, name: &str, error: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE buckets SET error = ?2, deleting = 0 WHERE name = ?1",
            params![name, error],
        )?;
        Ok(())
    }

    /// Marks bucket `name` as being deleted (the caller holds submissions
    /// off while it does).
    pub fn deleting_bucket(&mut self, name: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE buckets SET deleting = 1 WHERE name = ?1",
            params![name],
        )?;
        Ok(())
    }

    /// The live groups, pools and workers that use bucket `name`.
    pub fn bucket_users(&self, name: &str) -> Result<Vec<(i64, String)>> {
        let mut stmt = self.conn.prepare(
            "SELECT g.id, g.name FROM bucket_uses u JOIN groups g ON g.id = u.group_id \
             WHERE u.bucket = ?1 AND g.finished_at_ms IS NULL ORDER BY g.id",
        )?;
        let rows = stmt.query_map(params![name], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect()
    }

    /// The buckets skyc made that are not kept and that no live group
    /// uses, and those a deletion left unfinished: those to delete now.
    pub fn unused_buckets(&self) -> Result<Vec<BucketRow>> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {COLUMNS} FROM buckets b WHERE deleting = 1 OR (persistent = 0 AND NOT EXISTS (\
             SELECT 1 FROM bucket_uses u JOIN groups g ON g.id = u.group_id \
             WHERE u.bucket = b.name AND g.finished_at_ms IS NULL)) ORDER BY name"
        ))?;
        let rows = stmt.query_map([], row)?;
        rows.collect()
    }

    /// Makes `buckets` the buckets of the live group (a pool) `gid`.
    pub fn set_bucket_uses(&mut self, gid: i64, buckets: &[String]) -> Result<()> {
        self.transaction(|tx| {
            tx.0.execute("DELETE FROM bucket_uses WHERE group_id = ?1", params![gid])?;
            tx.use_buckets(gid, buckets)
        })
    }
}

impl Tx<'_> {
    /// Records that group `gid` uses `buckets`.
    pub(super) fn use_buckets(&self, gid: i64, buckets: &[String]) -> Result<()> {
        for b in buckets {
            self.0.execute(
                "INSERT OR IGNORE INTO bucket_uses (group_id, bucket) VALUES (?1, ?2)",
                params![gid, b],
            )?;
        }
        Ok(())
    }
}
