//! The state store: one SQLite database (WAL) per state directory.
//!
//! It holds every group, its tasks and nodes, the engine's state, pending
//! actions, timers and the event history. The supervisor is the only writer
//! of group state; clients insert groups and set cancel requests. Every
//! change the supervisor makes for one batch of events is one transaction,
//! written before the batch's actions are carried out, so a supervisor that
//! dies at any point resumes from a consistent record.

mod buckets;
mod schema;

pub use buckets::BucketRow;

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use rusqlite::Error;
pub type Result<T> = std::result::Result<T, Error>;

/// A group as the store records it.
#[derive(Clone, Debug, Serialize)]
pub struct GroupRow {
    pub id: i64,
    pub name: String,
    pub status: String,
    /// The file the group came from, as given to `skyc run`.
    pub source: String,
    pub submitted_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    pub cancel_requested: bool,
    pub backend: Backend,
    /// The backend's id of the group once submitted (Slurm: the job id).
    pub job: Option<String>,
    /// Why the group could not run, when it could not.
    pub error: Option<String>,
    /// Why the backend cannot reach its cluster, while it cannot.
    pub outage: Option<String>,
    pub kind: Kind,
    /// A job's or a worker's pool.
    pub pool: Option<i64>,
    /// A job's rank (`SKYPILOT_JOB_RANK`), a worker's number.
    pub rank: Option<i64>,
    /// A job's `SKYPILOT_NUM_JOBS`.
    pub num_jobs: Option<i64>,
}

/// What a row of `groups` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A group `skyc run` ran: alone, or as a job of a pool.
    Group,
    /// A pool of workers (`skyc pool apply`).
    Pool,
    /// One of a pool's workers, made by the supervisor.
    Worker,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Group => "group",
            Kind::Pool => "pool",
            Kind::Worker => "worker",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "pool" => Kind::Pool,
            "worker" => Kind::Worker,
            _ => Kind::Group,
        }
    }
}

/// A job of several submitted together, or a worker, and its pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Member {
    /// The pool (none for `--num-jobs` without a pool).
    pub pool: Option<i64>,
    /// A job's rank, or a worker's number.
    pub rank: u32,
    /// A job's `--num-jobs`; 0 for a worker.
    pub num_jobs: u32,
}

/// Where a group runs: one of [`crate::registry::BACKENDS`], at its place
/// there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// This machine, under the supervisor.
    Local,
    /// A Slurm cluster; the supervisor submits and watches.
    Slurm,
    /// A Kubernetes cluster; the supervisor applies and supervises.
    #[serde(rename = "k8s")]
    Kubernetes,
    /// EC2 instances; the supervisor launches, supervises and terminates.
    #[serde(rename = "aws")]
    Aws,
}

impl Backend {
    /// The store's column; a name no backend has reads as `local`.
    fn parse(s: &str) -> Self {
        Self::named(s).unwrap_or(Self::Local)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct TaskRow {
    pub index: i64,
    pub name: String,
    pub role: String,
    pub status: String,
    pub attempt: i64,
    pub restarts: i64,
    pub restarts_on_errors: i64,
    pub num_nodes: i64,
    /// Why its nodes wait, in the backend's words (the machine's
    /// capacity, Slurm's pending reason, the scheduler's message), while
    /// they do.
    pub waiting: Option<String>,
    /// Since when they wait for that reason.
    pub waiting_since_ms: Option<i64>,
    /// What its nodes hold to reach its buckets, when the runtime
    /// delivers credentials.
    pub credentials: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRow {
    pub task: i64,
    pub rank: i64,
    pub hostname: String,
    pub ip: String,
    /// The node's agent, while one runs.
    pub pid: Option<i64>,
    pub attempt: i64,
    pub phase: Option<String>,
    pub exit_code: Option<i64>,
    /// The pod (Kubernetes) or instance (a cloud) that runs it.
    #[serde(default)]
    pub handle: String,
    /// The machine it runs on (Kubernetes: the node's name).
    #[serde(default)]
    pub machine: String,
}

pub struct Store {
    conn: Connection,
}

impl Store {
    /// Opens (creating if needed) the database of a state directory.
    pub fn open(dir: &Path) -> Result<Self> {
        let path = dir.join("state.db");
        // Private from the start: plans hold environments and secrets.
        // SQLite gives the -wal and -shm files the database's mode.
        {
            use std::os::unix::fs::OpenOptionsExt;
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&path);
        }
        let conn = Connection::open(&path)?;
        conn.busy_timeout(Duration::from_secs(10))?;
        // WAL: readers (`skyc status`) never block the supervisor.
        // synchronous=NORMAL: a commit survives a crash of any process;
        // only a power loss may drop the last transactions.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        schema::migrate(&conn)?;
        Ok(Self { conn })
    }

    /// Opens an existing store to read it only: nothing is migrated or
    /// written (`skyc dashboard`, which changes nothing it is not asked
    /// to). SQLite's own side files of the write-ahead log (`state.db-wal`,
    /// `-shm`) are made again by any reader when no writer left them.
    /// `Ok(None)` when the directory holds no store yet.
    pub fn open_read_only(dir: &Path) -> std::result::Result<Option<Self>, String> {
        use rusqlite::OpenFlags;
        let path = dir.join("state.db");
        if !path.exists() {
            return Ok(None);
        }
        let at = |e: Error| format!("{}: {e}", path.display());
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(at)?;
        conn.busy_timeout(Duration::from_secs(10)).map_err(at)?;
        // Reading the version is the first read: a file that is not a
        // database says so here.
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(at)?;
        if version < schema::VERSION {
            return Err(format!(
                "{} was written by an older skyc (schema {version}, this skyc reads {}); \
                 any other skyc command on it (`skyc status --state-dir {}`) upgrades it",
                path.display(),
                schema::VERSION,
                dir.display()
            ));
        }
        Ok(Some(Self { conn }))
    }

    /// Runs the reads of `f` in one read transaction: one snapshot of the
    /// store, and one lock taken for all of them rather than one per
    /// statement (a listing of a thousand groups reads thousands of rows).
    pub fn snapshot<T>(
        &self,
        f: impl FnOnce(&Self) -> std::result::Result<T, String>,
    ) -> std::result::Result<T, String> {
        self.conn
            .execute_batch("BEGIN")
            .map_err(|e| e.to_string())?;
        let out = f(self);
        // A read transaction has nothing to keep: ending it cannot lose
        // anything, whatever `f` returned.
        let _ = self.conn.execute_batch("COMMIT");
        out
    }

    /// Runs `f` in one IMMEDIATE transaction.
    pub fn transaction<T>(&mut self, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let out = f(&Tx(&tx))?;
        tx.commit()?;
        Ok(out)
    }

    /// The snapshots live groups, pools and workers are given: what the
    /// state directory's `files` must keep.
    pub fn live_snapshots(&self) -> Result<std::collections::HashSet<String>> {
        let mut stmt = self.conn.prepare(
            "SELECT DISTINCT s.digest FROM snapshots s JOIN groups g ON g.id = s.group_id \
             WHERE g.finished_at_ms IS NULL",
        )?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect()
    }

    /// Records a volume, unless one of that name exists: false then.
    pub fn insert_volume(&mut self, row: &VolumeRow) -> Result<bool> {
        let n = self.conn.execute(
            "INSERT OR IGNORE INTO volumes (name, backend, spec, path, size_gb, created_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                row.name,
                row.backend.as_str(),
                row.spec,
                row.path,
                row.size_gb,
                row.created_at_ms
            ],
        )?;
        Ok(n > 0)
    }

    /// The volumes, by name.
    pub fn volumes(&self) -> Result<Vec<VolumeRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT name, backend, spec, path, size_gb, created_at_ms FROM volumes ORDER BY name",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(VolumeRow {
                name: r.get(0)?,
                backend: Backend::named(&r.get::<_, String>(1)?).unwrap_or(Backend::Local),
                spec: r.get(2)?,
                path: r.get(3)?,
                size_gb: r.get(4)?,
                created_at_ms: r.get(5)?,
            })
        })?;
        rows.collect()
    }

    pub fn delete_volume(&mut self, name: &str) -> Result<()> {
        self.conn
            .execute("DELETE FROM volumes WHERE name = ?1", params![name])?;
        Ok(())
    }

    /// The live groups whose plan names `text` (a volume's directory).
    pub fn live_groups_naming(&self, text: &str) -> Result<Vec<(i64, String)>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, name FROM groups WHERE finished_at_ms IS NULL AND instr(plan, ?1) > 0 \
             ORDER BY id",
        )?;
        let rows = stmt.query_map(params![text], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect()
    }

    /// Makes `digests` the snapshots of the live group (a pool) `gid`:
    /// its workers keep those they were made with.
    pub fn set_snapshots(&mut self, gid: i64, digests: &[String]) -> Result<()> {
        self.transaction(|tx| {
            tx.0.execute("DELETE FROM snapshots WHERE group_id = ?1", params![gid])?;
            for digest in digests {
                tx.0.execute(
                    "INSERT OR IGNORE INTO snapshots (group_id, digest) VALUES (?1, ?2)",
                    params![gid, digest],
                )?;
            }
            Ok(())
        })
    }

    /// Records a new group and its tasks; returns its id.
    pub fn insert_group(&mut self, new: &NewGroup<'_>) -> Result<i64> {
        self.transaction(|tx| tx.insert(new, Kind::Group, None))
    }

    /// Records jobs submitted together (`--num-jobs`), in one transaction;
    /// returns their ids, in order.
    pub fn insert_jobs(&mut self, jobs: &[(NewGroup<'_>, Option<Member>)]) -> Result<Vec<i64>> {
        self.transaction(|tx| {
            jobs.iter()
                .map(|(new, member)| tx.insert(new, Kind::Group, *member))
                .collect()
        })
    }

    /// Records jobs of the pool `pool` in one transaction, if it is live
    /// and not going down: `None` otherwise, and nothing recorded.
    pub fn insert_pool_jobs(
        &mut self,
        pool: i64,
        jobs: &[(NewGroup<'_>, Option<Member>)],
    ) -> Result<Option<Vec<i64>>> {
        self.transaction(|tx| {
            let takes: i64 = tx.0.query_row(
                "SELECT count(*) FROM groups WHERE id = ?1 AND kind = 'pool' \
                 AND finished_at_ms IS NULL AND cancel_requested = 0",
                params![pool],
                |r| r.get(0),
            )?;
            if takes == 0 {
                return Ok(None);
            }
            jobs.iter()
                .map(|(new, member)| tx.insert(new, Kind::Group, *member))
                .collect::<Result<Vec<_>>>()
                .map(Some)
        })
    }

    /// Records a new pool, unless a pool of that name is live: `None` then.
    pub fn insert_pool(&mut self, new: &NewGroup<'_>) -> Result<Option<i64>> {
        self.transaction(|tx| {
            if tx.live_pool_named(new.name)?.is_some() {
                return Ok(None);
            }
            tx.insert(new, Kind::Pool, None).map(Some)
        })
    }

    /// Leaves a request for a live pool's supervisor; false when the pool
    /// has ended meanwhile.
    pub fn request(&mut self, pool: i64, request: &str) -> Result<bool> {
        let n = self.conn.execute(
            "UPDATE groups SET request = ?2 WHERE id = ?1 AND kind = 'pool' \
             AND finished_at_ms IS NULL",
            params![pool, request],
        )?;
        Ok(n > 0)
    }

    /// The live pool named `name`.
    pub fn live_pool(&self, name: &str) -> Result<Option<GroupRow>> {
        self.conn
            .query_row(
                &format!(
                    "{GROUP_COLUMNS} WHERE kind = 'pool' AND name = ?1 \
                     AND finished_at_ms IS NULL"
                ),
                params![name],
                group_row,
            )
            .optional()
    }

    /// Pools, newest first: the live ones, or every one.
    pub fn pools(&self, all: bool) -> Result<Vec<GroupRow>> {
        let live = if all {
            ""
        } else {
            " AND finished_at_ms IS NULL"
        };
        let mut stmt = self.conn.prepare(&format!(
            "{GROUP_COLUMNS} WHERE kind = 'pool'{live} ORDER BY id DESC"
        ))?;
        stmt.query_map([], group_row)?.collect()
    }

    /// A pool's workers or jobs, oldest first: the live ones, or every one.
    pub fn members(&self, pool: i64, kind: Kind, all: bool) -> Result<Vec<GroupRow>> {
        let live = if all {
            ""
        } else {
            " AND finished_at_ms IS NULL"
        };
        let mut stmt = self.conn.prepare(&format!(
            "{GROUP_COLUMNS} WHERE pool = ?1 AND kind = ?2{live} ORDER BY id"
        ))?;
        stmt.query_map(params![pool, kind.as_str()], group_row)?
            .collect()
    }

    /// A pool's pending request, if a client left one.
    pub fn pending_request(&self, pool: i64) -> Result<Option<String>> {
        self.conn
            .query_row(
                "SELECT request FROM groups WHERE id = ?1",
                params![pool],
                |r| r.get(0),
            )
            .optional()
            .map(Option::flatten)
    }

    pub fn request_cancel(&mut self, id: i64) -> Result<bool> {
        let n = self.conn.execute(
            "UPDATE groups SET cancel_requested = 1 WHERE id = ?1 AND finished_at_ms IS NULL",
            params![id],
        )?;
        Ok(n > 0)
    }

    pub fn group(&self, id: i64) -> Result<Option<GroupRow>> {
        self.conn
            .query_row(
                &format!("{GROUP_COLUMNS} WHERE id = ?1"),
                params![id],
                group_row,
            )
            .optional()
    }

    /// Every group `skyc run` ran, newest first.
    pub fn groups(&self) -> Result<Vec<GroupRow>> {
        let mut stmt = self.conn.prepare(&format!(
            "{GROUP_COLUMNS} WHERE kind = 'group' ORDER BY id DESC"
        ))?;
        stmt.query_map([], group_row)?.collect()
    }

    /// Groups named `name`, newest first.
    pub fn groups_named(&self, name: &str) -> Result<Vec<GroupRow>> {
        let mut stmt = self.conn.prepare(&format!(
            "{GROUP_COLUMNS} WHERE kind = 'group' AND name = ?1 ORDER BY id DESC"
        ))?;
        stmt.query_map(params![name], group_row)?.collect()
    }

    /// The newest group.
    pub fn latest_group(&self) -> Result<Option<GroupRow>> {
        self.conn
            .query_row(
                &format!("{GROUP_COLUMNS} WHERE kind = 'group' ORDER BY id DESC LIMIT 1"),
                [],
                group_row,
            )
            .optional()
    }

    /// Ids of the groups `skyc run` ran that are not finished.
    pub fn live_jobs(&self) -> Result<Vec<i64>> {
        let mut stmt = self.conn.prepare(
            "SELECT id FROM groups WHERE kind = 'group' AND finished_at_ms IS NULL ORDER BY id",
        )?;
        stmt.query_map([], |r| r.get(0))?.collect()
    }

    /// Live groups whose cancel a client requested and no supervisor has
    /// seen yet.
    pub fn cancels_pending(&self) -> Result<Vec<i64>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id FROM groups WHERE finished_at_ms IS NULL \
             AND cancel_requested = 1 AND cancel_seen = 0 ORDER BY id",
        )?;
        stmt.query_map([], |r| r.get(0))?.collect()
    }

    /// Ids of groups (pools and workers too) that are not finished.
    pub fn live_groups(&self) -> Result<Vec<i64>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id FROM groups WHERE finished_at_ms IS NULL ORDER BY id")?;
        stmt.query_map([], |r| r.get(0))?.collect()
    }

    pub fn tasks(&self, id: i64) -> Result<Vec<TaskRow>> {
        // Cached: listings ask for the tasks and nodes of every group.
        let mut stmt = self.conn.prepare_cached(
            "SELECT idx, name, role, status, attempt, restarts, restarts_on_errors, num_nodes, \
             waiting, waiting_since_ms, credentials \
             FROM tasks WHERE group_id = ?1 ORDER BY idx",
        )?;
        stmt.query_map(params![id], |r| task_row(r, 0))?.collect()
    }

    /// The tasks of every group from `first` on, by group: one query for
    /// a listing of many groups (the newest ones are the highest ids).
    pub fn tasks_from(&self, first: i64) -> Result<BTreeMap<i64, Vec<TaskRow>>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT group_id, idx, name, role, status, attempt, restarts, restarts_on_errors, \
             num_nodes, waiting, waiting_since_ms, credentials FROM tasks WHERE group_id >= ?1 \
             ORDER BY group_id, idx",
        )?;
        let mut by_group: BTreeMap<i64, Vec<TaskRow>> = BTreeMap::new();
        let rows = stmt.query_map(params![first], |r| {
            Ok((r.get::<_, i64>(0)?, task_row(r, 1)?))
        })?;
        for row in rows {
            let (group, task) = row?;
            by_group.entry(group).or_default().push(task);
        }
        Ok(by_group)
    }

    pub fn nodes(&self, id: i64) -> Result<Vec<NodeRow>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT task, rank, hostname, ip, pid, attempt, phase, exit_code, handle, machine \
             FROM nodes WHERE group_id = ?1 ORDER BY task, rank",
        )?;
        stmt.query_map(params![id], |r| {
            Ok(NodeRow {
                task: r.get(0)?,
                rank: r.get(1)?,
                hostname: r.get(2)?,
                ip: r.get(3)?,
                pid: r.get(4)?,
                attempt: r.get(5)?,
                phase: r.get(6)?,
                exit_code: r.get(7)?,
                handle: r.get(8)?,
                machine: r.get(9)?,
            })
        })?
        .collect()
    }

    /// The group's plan, as the submitting client wrote it.
    pub fn plan(&self, id: i64) -> Result<String> {
        self.conn
            .query_row("SELECT plan FROM groups WHERE id = ?1", params![id], |r| {
                r.get(0)
            })
    }

    /// The supervisor's record of a group: engine, pending actions, network.
    pub fn runtime_state(&self, id: i64) -> Result<RuntimeState> {
        self.conn.query_row(
            "SELECT engine, pending, network, cancel_requested, cancel_seen \
             FROM groups WHERE id = ?1",
            params![id],
            |r| {
                Ok(RuntimeState {
                    engine: r.get(0)?,
                    pending: r.get(1)?,
                    network: r.get(2)?,
                    cancel_requested: r.get::<_, i64>(3)? != 0,
                    cancel_seen: r.get::<_, i64>(4)? != 0,
                })
            },
        )
    }

    /// Finished groups whose network was not torn down.
    pub fn finished_with_network(&self) -> Result<Vec<(i64, String)>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, network FROM groups WHERE finished_at_ms IS NOT NULL \
             AND network IS NOT NULL",
        )?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect()
    }

    pub fn timers(&self, id: i64) -> Result<Vec<(String, i64)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT timer, deadline_ms FROM timers WHERE group_id = ?1")?;
        stmt.query_map(params![id], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect()
    }

    /// How many of a group's events are JSON objects with key `key` first.
    pub fn count_events_keyed(&self, id: i64, key: &str) -> Result<usize> {
        let pattern = format!("{{\"{key}\":%");
        self.conn.query_row(
            "SELECT COUNT(*) FROM events WHERE group_id = ?1 AND event LIKE ?2",
            params![id, pattern],
            |r| r.get::<_, i64>(0).map(|n| n as usize),
        )
    }

    /// The newest of a group's events keyed `key` (see `count_events_keyed`).
    pub fn last_event_keyed(&self, id: i64, key: &str) -> Result<Option<String>> {
        let pattern = format!("{{\"{key}\":%");
        self.conn
            .query_row(
                "SELECT event FROM events WHERE group_id = ?1 AND event LIKE ?2 \
                 ORDER BY seq DESC LIMIT 1",
                params![id, pattern],
                |r| r.get(0),
            )
            .optional()
    }

    /// The first `limit` events of a group, oldest first: (time, JSON).
    pub fn first_events(&self, id: i64, limit: usize) -> Result<Vec<(i64, String)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT at_ms, event FROM events WHERE group_id = ?1 ORDER BY seq LIMIT ?2",
        )?;
        stmt.query_map(params![id, limit as i64], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect()
    }

    /// At most `limit` of the events of groups `ids` after the one
    /// numbered `after` (numbers are shared by every group), oldest first:
    /// (number, group, time, JSON). A reader following groups' histories
    /// asks again from the last number it was given, in one query however
    /// many groups it follows.
    pub fn events_after(
        &self,
        ids: &[i64],
        after: i64,
        limit: usize,
    ) -> Result<Vec<(i64, i64, i64, String)>> {
        let ids = serde_json::to_string(ids).unwrap_or_else(|_| "[]".into());
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, group_id, at_ms, event FROM events \
             WHERE group_id IN (SELECT value FROM json_each(?1)) AND seq > ?2 \
             ORDER BY seq LIMIT ?3",
        )?;
        stmt.query_map(params![ids, after, limit as i64], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect()
    }

    /// The `limit` newest groups `skyc run` ran, newest first, and how
    /// many there are in all.
    pub fn newest_groups(&self, limit: usize) -> Result<(Vec<GroupRow>, usize)> {
        let mut stmt = self.conn.prepare(&format!(
            "{GROUP_COLUMNS} WHERE kind = 'group' ORDER BY id DESC LIMIT ?1"
        ))?;
        let rows = stmt
            .query_map(params![limit as i64], group_row)?
            .collect::<Result<Vec<_>>>()?;
        let total: i64 = self.conn.query_row(
            "SELECT COUNT(*) FROM groups WHERE kind = 'group'",
            [],
            |r| r.get(0),
        )?;
        Ok((rows, usize::try_from(total).unwrap_or(0)))
    }

    /// Event history of a group, oldest first: (time, JSON).
    pub fn events(&self, id: i64) -> Result<Vec<(i64, String)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT at_ms, event FROM events WHERE group_id = ?1 ORDER BY seq")?;
        stmt.query_map(params![id], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect()
    }
}

/// What a client writes to submit a group.
pub struct NewGroup<'a> {
    pub name: &'a str,
    pub source: &'a str,
    pub submitted_at_ms: i64,
    /// The backend's plan, as JSON.
    pub plan: &'a str,
    pub backend: Backend,
    pub tasks: Vec<NewTask<'a>>,
    /// The digests of the snapshots its nodes are given (`files`): kept
    /// while it is live.
    pub snapshots: &'a [String],
    /// The buckets its nodes mount: one skyc made and does not keep is
    /// deleted once no live group uses it.
    pub buckets: &'a [String],
}

/// A volume `skyc volume apply` made.
#[derive(Clone, Debug, PartialEq)]
pub struct VolumeRow {
    pub name: String,
    pub backend: Backend,
    /// The volume file as applied (JSON).
    pub spec: String,
    pub path: String,
    pub size_gb: Option<i64>,
    pub created_at_ms: i64,
}

pub struct NewTask<'a> {
    pub name: &'a str,
    pub primary: bool,
    pub num_nodes: u32,
}

impl<'a> NewTask<'a> {
    /// The tasks of a compiled group, as the store records them.
    pub fn of(group: &'a skyc_compiler::ir::Group) -> Vec<Self> {
        group
            .tasks
            .iter()
            .map(|t| NewTask {
                name: &t.name,
                primary: t.role == skyc_compiler::ir::Role::Primary,
                num_nodes: t.num_nodes,
            })
            .collect()
    }
}

/// What the supervisor persists per group.
#[derive(Clone, Debug, Default)]
pub struct RuntimeState {
    pub engine: Option<String>,
    pub pending: Option<String>,
    pub network: Option<String>,
    pub cancel_requested: bool,
    pub cancel_seen: bool,
}

/// The supervisor's writes, inside one transaction.
pub struct Tx<'a>(&'a rusqlite::Transaction<'a>);

impl Tx<'_> {
    fn insert(&self, new: &NewGroup<'_>, kind: Kind, member: Option<Member>) -> Result<i64> {
        self.0.execute(
            "INSERT INTO groups (name, source, status, submitted_at_ms, plan, backend, kind, pool, \
             rank, num_jobs) VALUES (?1, ?2, 'PENDING', ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                new.name,
                new.source,
                new.submitted_at_ms,
                new.plan,
                new.backend.as_str(),
                kind.as_str(),
                member.and_then(|m| m.pool),
                member.map(|m| m.rank),
                member.map(|m| m.num_jobs),
            ],
        )?;
        let id = self.0.last_insert_rowid();
        self.use_buckets(id, new.buckets)?;
        for digest in new.snapshots {
            self.0.execute(
                "INSERT OR IGNORE INTO snapshots (group_id, digest) VALUES (?1, ?2)",
                params![id, digest],
            )?;
        }
        for (index, task) in new.tasks.iter().enumerate() {
            self.0.execute(
                "INSERT INTO tasks (group_id, idx, name, role, status, num_nodes) \
                 VALUES (?1, ?2, ?3, ?4, 'PENDING', ?5)",
                params![
                    id,
                    index as i64,
                    task.name,
                    if task.primary { "primary" } else { "auxiliary" },
                    task.num_nodes
                ],
            )?;
        }
        Ok(id)
    }

    /// Records a pool's new worker, unless it is recorded already (the
    /// supervisor died between deciding and recording it); its id.
    pub fn insert_worker(&self, new: &NewGroup<'_>, member: Member) -> Result<i64> {
        let found = self
            .0
            .query_row(
                "SELECT id FROM groups WHERE kind = 'worker' AND pool = ?1 AND rank = ?2",
                params![member.pool, member.rank],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(id) = found {
            return Ok(id);
        }
        let id = self.insert(new, Kind::Worker, Some(member))?;
        // And its pool's: a plan that does not list what its nodes mount
        // (a Kubernetes sidecar's) still keeps them while the worker runs.
        self.0.execute(
            "INSERT OR IGNORE INTO bucket_uses (group_id, bucket) \
             SELECT ?1, bucket FROM bucket_uses WHERE group_id = ?2",
            params![id, member.pool],
        )?;
        Ok(id)
    }

    fn live_pool_named(&self, name: &str) -> Result<Option<i64>> {
        self.0
            .query_row(
                "SELECT id FROM groups WHERE kind = 'pool' AND name = ?1 \
                 AND finished_at_ms IS NULL",
                params![name],
                |r| r.get(0),
            )
            .optional()
    }

    /// Takes a pool's request, `request` as it was read: it is handled in
    /// this transaction. One a client wrote since is left for the next.
    pub fn take_request(&self, pool: i64, request: &str) -> Result<()> {
        self.0.execute(
            "UPDATE groups SET request = NULL WHERE id = ?1 AND request = ?2",
            params![pool, request],
        )?;
        Ok(())
    }

    /// Replaces a pool's plan (an update applied).
    pub fn set_plan(&self, id: i64, plan: &str) -> Result<()> {
        self.0.execute(
            "UPDATE groups SET plan = ?2 WHERE id = ?1",
            params![id, plan],
        )?;
        Ok(())
    }

    pub fn save_runtime(&self, id: i64, engine: &str, pending: Option<&str>) -> Result<()> {
        self.0.execute(
            "UPDATE groups SET engine = ?2, pending = ?3 WHERE id = ?1",
            params![id, engine, pending],
        )?;
        Ok(())
    }

    pub fn save_network(&self, id: i64, network: &str) -> Result<()> {
        self.0.execute(
            "UPDATE groups SET network = ?2 WHERE id = ?1",
            params![id, network],
        )?;
        Ok(())
    }

    pub fn clear_network(&self, id: i64) -> Result<()> {
        self.0.execute(
            "UPDATE groups SET network = NULL WHERE id = ?1",
            params![id],
        )?;
        Ok(())
    }

    pub fn mark_cancel_seen(&self, id: i64) -> Result<()> {
        self.0.execute(
            "UPDATE groups SET cancel_seen = 1 WHERE id = ?1",
            params![id],
        )?;
        Ok(())
    }

    /// An action begun and maybe not finished (the supervisor's marker).
    pub fn set_pending(&self, id: i64, pending: Option<&str>) -> Result<()> {
        self.0.execute(
            "UPDATE groups SET pending = ?2 WHERE id = ?1",
            params![id, pending],
        )?;
        Ok(())
    }

    pub fn set_job(&self, id: i64, job: &str) -> Result<()> {
        self.0
            .execute("UPDATE groups SET job = ?2 WHERE id = ?1", params![id, job])?;
        Ok(())
    }

    /// Records why the backend cannot reach the group's cluster (`None`:
    /// it can again).
    pub fn set_outage(&self, id: i64, outage: Option<&str>) -> Result<()> {
        self.0.execute(
            "UPDATE groups SET outage = ?2 WHERE id = ?1",
            params![id, outage],
        )?;
        Ok(())
    }

    /// Records why a pool cannot make workers now, or that it can again.
    pub fn set_pool_error(&self, id: i64, error: Option<&str>) -> Result<()> {
        self.0.execute(
            "UPDATE groups SET error = ?2 WHERE id = ?1",
            params![id, error],
        )?;
        Ok(())
    }

    /// Records why the group could not run (the first reason wins).
    pub fn set_error(&self, id: i64, error: &str) -> Result<()> {
        self.0.execute(
            "UPDATE groups SET error = ?2 WHERE id = ?1 AND error IS NULL",
            params![id, error],
        )?;
        Ok(())
    }

    pub fn set_group_status(&self, id: i64, status: &str) -> Result<()> {
        self.0.execute(
            "UPDATE groups SET status = ?2 WHERE id = ?1",
            params![id, status],
        )?;
        Ok(())
    }

    pub fn finish_group(&self, id: i64, at_ms: i64) -> Result<()> {
        self.0.execute(
            "UPDATE groups SET finished_at_ms = ?2, pending = NULL WHERE id = ?1",
            params![id, at_ms],
        )?;
        // Nothing of an ended group waits.
        self.0.execute(
            "UPDATE tasks SET waiting = NULL, waiting_since_ms = NULL WHERE group_id = ?1",
            params![id],
        )?;
        self.0
            .execute("DELETE FROM timers WHERE group_id = ?1", params![id])?;
        Ok(())
    }

    /// Ends a group that never ran: it and every task get `status`.
    pub fn end_unstarted(&self, id: i64, status: &str, at_ms: i64) -> Result<()> {
        self.0.execute(
            "UPDATE tasks SET status = ?2, attempt = 0, restarts = 0, restarts_on_errors = 0 \
             WHERE group_id = ?1",
            params![id, status],
        )?;
        self.set_group_status(id, status)?;
        self.set_pending(id, None)?;
        self.finish_group(id, at_ms)
    }

    /// Why a task's nodes wait (`None`: they no longer do), for a task
    /// that has not started (or restarts): PENDING, STARTING or
    /// RECOVERING; [`set_task`](Self::set_task) forgets it once the task
    /// is anything else, and [`finish_group`](Self::finish_group) when the
    /// group ends. Since when is kept while the task goes on waiting, in
    /// whatever words. Whether it changed.
    pub fn set_waiting(&self, id: i64, task: usize, why: Option<&str>, now: i64) -> Result<bool> {
        let n = self.0.execute(
            "UPDATE tasks SET waiting = ?3, \
             waiting_since_ms = CASE WHEN ?3 IS NULL THEN NULL \
                                ELSE coalesce(waiting_since_ms, ?4) END \
             WHERE group_id = ?1 AND idx = ?2 AND waiting IS NOT ?3 \
             AND (?3 IS NULL OR status IN ('PENDING', 'STARTING', 'RECOVERING'))",
            params![id, task as i64, why, now],
        )?;
        Ok(n > 0)
    }

    /// What task `task`'s nodes hold to reach its buckets. Whether it
    /// changed.
    pub fn set_credentials(&self, id: i64, task: usize, says: &str) -> Result<bool> {
        let n = self.0.execute(
            "UPDATE tasks SET credentials = ?3 \
             WHERE group_id = ?1 AND idx = ?2 AND credentials IS NOT ?3",
            params![id, task as i64, says],
        )?;
        Ok(n > 0)
    }

    pub fn set_task(
        &self,
        id: i64,
        task: usize,
        status: &str,
        attempt: u32,
        restarts: (u32, u32),
    ) -> Result<()> {
        self.0.execute(
            // A task waits only while it has not started (or restarts):
            // why it waited is forgotten once it runs or ends.
            "UPDATE tasks SET status = ?3, attempt = ?4, restarts = ?5, restarts_on_errors = ?6, \
             waiting = CASE WHEN ?3 IN ('PENDING', 'STARTING', 'RECOVERING') \
                       THEN waiting END, \
             waiting_since_ms = CASE WHEN ?3 IN ('PENDING', 'STARTING', 'RECOVERING') \
                                THEN waiting_since_ms END \
             WHERE group_id = ?1 AND idx = ?2",
            params![id, task as i64, status, attempt, restarts.0, restarts.1],
        )?;
        Ok(())
    }

    pub fn upsert_node(&self, id: i64, node: &NodeRow) -> Result<()> {
        self.0.execute(
            "INSERT INTO nodes (group_id, task, rank, hostname, ip, pid, attempt, phase, exit_code, \
             handle, machine) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
             ON CONFLICT (group_id, task, rank) DO UPDATE SET hostname = ?4, ip = ?5, pid = ?6, \
             attempt = ?7, phase = ?8, exit_code = ?9, handle = ?10, machine = ?11",
            params![
                id,
                node.task,
                node.rank,
                node.hostname,
                node.ip,
                node.pid,
                node.attempt,
                node.phase,
                node.exit_code,
                node.handle,
                node.machine
            ],
        )?;
        Ok(())
    }

    pub fn set_timer(&self, id: i64, timer: &str, deadline_ms: i64) -> Result<()> {
        self.0.execute(
            "INSERT INTO timers (group_id, timer, deadline_ms) VALUES (?1, ?2, ?3) \
             ON CONFLICT (group_id, timer) DO UPDATE SET deadline_ms = ?3",
            params![id, timer, deadline_ms],
        )?;
        Ok(())
    }

    pub fn delete_timer(&self, id: i64, timer: &str) -> Result<()> {
        self.0.execute(
            "DELETE FROM timers WHERE group_id = ?1 AND timer = ?2",
            params![id, timer],
        )?;
        Ok(())
    }

    pub fn append_event(&self, id: i64, at_ms: i64, event: &str) -> Result<()> {
        self.0.execute(
            "INSERT INTO events (group_id, at_ms, event) VALUES (?1, ?2, ?3)",
            params![id, at_ms, event],
        )?;
        Ok(())
    }
}

const GROUP_COLUMNS: &str = "SELECT id, name, status, source, submitted_at_ms, finished_at_ms, \
                             cancel_requested, backend, job, error, outage, kind, pool, rank, \
                             num_jobs FROM groups";

/// A task's columns, from `at` on, in `tasks()`'s order.
fn task_row(r: &rusqlite::Row<'_>, at: usize) -> Result<TaskRow> {
    Ok(TaskRow {
        index: r.get(at)?,
        name: r.get(at + 1)?,
        role: r.get(at + 2)?,
        status: r.get(at + 3)?,
        attempt: r.get(at + 4)?,
        restarts: r.get(at + 5)?,
        restarts_on_errors: r.get(at + 6)?,
        num_nodes: r.get(at + 7)?,
        waiting: r.get(at + 8)?,
        waiting_since_ms: r.get(at + 9)?,
        credentials: r.get(at + 10)?,
    })
}

fn group_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<GroupRow> {
    Ok(GroupRow {
        id: r.get(0)?,
        name: r.get(1)?,
        status: r.get(2)?,
        source: r.get(3)?,
        submitted_at_ms: r.get(4)?,
        finished_at_ms: r.get(5)?,
        cancel_requested: r.get::<_, i64>(6)? != 0,
        backend: Backend::parse(&r.get::<_, String>(7)?),
        job: r.get(8)?,
        error: r.get(9)?,
        outage: r.get(10)?,
        kind: Kind::parse(&r.get::<_, String>(11)?),
        pool: r.get(12)?,
        rank: r.get(13)?,
        num_jobs: r.get(14)?,
    })
}

/// The state directory: `--state-dir`, else `$SKYC_STATE_DIR`, else
/// `$XDG_STATE_HOME/skyc`, else `~/.local/state/skyc`.
pub fn default_state_dir() -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(dir) = var("SKYC_STATE_DIR") {
        return dir.into();
    }
    user_state_dir()
}

/// The user's state directory, whatever `$SKYC_STATE_DIR` says:
/// `$XDG_STATE_HOME/skyc`, else `~/.local/state/skyc`.
pub fn user_state_dir() -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(xdg) = var("XDG_STATE_HOME") {
        return PathBuf::from(xdg).join("skyc");
    }
    let home = var("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".local/state/skyc")
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
