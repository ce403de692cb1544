//! The database schema, versioned with `PRAGMA user_version`.

use rusqlite::Connection;

/// Each entry upgrades the schema from its index to the next version.
const MIGRATIONS: &[&str] = &[
    r"
CREATE TABLE groups (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    source TEXT NOT NULL,
    status TEXT NOT NULL,
    submitted_at_ms INTEGER NOT NULL,
    finished_at_ms INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    cancel_seen INTEGER NOT NULL DEFAULT 0,
    -- the backend's plan (JSON), written once by the client
    plan TEXT NOT NULL,
    -- the policy engine's state (JSON), written by the supervisor
    engine TEXT,
    -- actions decided but maybe not yet carried out (JSON)
    pending TEXT,
    -- addresses and namespaces held by the group (JSON)
    network TEXT
);
CREATE TABLE tasks (
    group_id INTEGER NOT NULL REFERENCES groups(id),
    idx INTEGER NOT NULL,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    restarts INTEGER NOT NULL DEFAULT 0,
    restarts_on_errors INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (group_id, idx)
);
CREATE TABLE nodes (
    group_id INTEGER NOT NULL REFERENCES groups(id),
    task INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    hostname TEXT NOT NULL,
    ip TEXT NOT NULL,
    pid INTEGER,
    attempt INTEGER NOT NULL,
    phase TEXT,
    exit_code INTEGER,
    PRIMARY KEY (group_id, task, rank)
);
CREATE TABLE timers (
    group_id INTEGER NOT NULL REFERENCES groups(id),
    timer TEXT NOT NULL,
    deadline_ms INTEGER NOT NULL,
    PRIMARY KEY (group_id, timer)
);
CREATE TABLE events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id INTEGER NOT NULL REFERENCES groups(id),
    at_ms INTEGER NOT NULL,
    event TEXT NOT NULL
);
CREATE INDEX events_by_group ON events (group_id, seq);
",
    r"
-- where the group runs: 'local' (this machine) or 'slurm'
ALTER TABLE groups ADD COLUMN backend TEXT NOT NULL DEFAULT 'local';
-- the backend's id of the group once submitted (Slurm: the leader job id)
ALTER TABLE groups ADD COLUMN job TEXT;
-- why the group could not run, when it could not
ALTER TABLE groups ADD COLUMN error TEXT;
ALTER TABLE tasks ADD COLUMN num_nodes INTEGER NOT NULL DEFAULT 1;
",
    r"
-- 'k8s' joins the backends. The network column holds what the group's
-- backend keeps for after a crash (the local network).
-- the pod (Kubernetes) or instance that runs the node, and its machine
ALTER TABLE nodes ADD COLUMN handle TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN machine TEXT NOT NULL DEFAULT '';
-- why the backend cannot reach its cluster, while it cannot
ALTER TABLE groups ADD COLUMN outage TEXT;
",
    r"
-- pools: a pool, its workers and the jobs submitted to it are rows of
-- groups too. kind: 'group' (what `skyc run` ran), 'pool', 'worker'.
ALTER TABLE groups ADD COLUMN kind TEXT NOT NULL DEFAULT 'group';
-- a job's or a worker's pool
ALTER TABLE groups ADD COLUMN pool INTEGER REFERENCES groups(id);
-- a job's SKYPILOT_JOB_RANK, a worker's number in its pool
ALTER TABLE groups ADD COLUMN rank INTEGER;
-- a job's SKYPILOT_NUM_JOBS
ALTER TABLE groups ADD COLUMN num_jobs INTEGER;
-- a client's request to a pool not yet taken by the supervisor (JSON)
ALTER TABLE groups ADD COLUMN request TEXT;
CREATE INDEX groups_by_pool ON groups (pool, kind);
CREATE INDEX groups_by_kind ON groups (kind, finished_at_ms);
",
    r"
-- the live groups, which the supervisor reads at every wake-up: found
-- without reading the finished ones, however many a sweep left
CREATE INDEX groups_live ON groups (id) WHERE finished_at_ms IS NULL;
-- why a task's nodes wait (PENDING or STARTING), in the backend's words,
-- and since when
ALTER TABLE tasks ADD COLUMN waiting TEXT;
ALTER TABLE tasks ADD COLUMN waiting_since_ms INTEGER;
",
    r"
-- the snapshots of code and data (the state directory's files/DIGEST) a
-- group's nodes are given: kept while a group naming them is live
CREATE TABLE snapshots (
    group_id INTEGER NOT NULL REFERENCES groups(id),
    digest TEXT NOT NULL,
    PRIMARY KEY (group_id, digest)
);
",
    r"
-- volumes made by `skyc volume apply`: on this machine and on Slurm, a
-- directory of the state directory (path)
CREATE TABLE volumes (
    name TEXT PRIMARY KEY,
    -- the target that has it ('local', 'slurm')
    backend TEXT NOT NULL,
    -- the volume file as applied (JSON)
    spec TEXT NOT NULL,
    path TEXT NOT NULL,
    size_gb INTEGER,
    created_at_ms INTEGER NOT NULL
);
",
    r"
-- buckets skyc made (a storage spec's `name` that did not exist),
-- recorded before they are made: `skyc storage ls` lists them, `skyc
-- storage delete` deletes them, and one not kept (`persistent: false`)
-- is deleted once no live group uses it
CREATE TABLE buckets (
    name TEXT PRIMARY KEY,
    -- its object store ('s3')
    store TEXT NOT NULL,
    -- the endpoint and region it was made at (NULL: AWS's own)
    endpoint TEXT,
    region TEXT NOT NULL,
    -- the last submission's `persistent`
    persistent INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    -- why its deletion failed last, until it succeeds
    error TEXT,
    -- 1 while it is being deleted: a submission that names it is refused
    deleting INTEGER NOT NULL DEFAULT 0
);
-- the buckets each group mounts: a bucket is used while one is live
CREATE TABLE bucket_uses (
    group_id INTEGER NOT NULL REFERENCES groups(id),
    bucket TEXT NOT NULL,
    PRIMARY KEY (group_id, bucket)
);
CREATE INDEX bucket_uses_by_bucket ON bucket_uses (bucket);
",
    r"
-- what a task's nodes hold to reach its buckets, when the runtime
-- delivers credentials (AWS instances): narrowed to them, or the run's
-- own and why
ALTER TABLE tasks ADD COLUMN credentials TEXT;
",
];

/// The schema version this skyc writes and reads.
pub(super) const VERSION: i64 = MIGRATIONS.len() as i64;

pub(super) fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    // IMMEDIATE, and the version read inside: two processes opening a new
    // state directory at once migrate it once.
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        for (i, sql) in (0i64..).zip(MIGRATIONS).skip(version as usize) {
            conn.execute_batch(sql)?;
            conn.pragma_update(None, "user_version", i + 1)?;
        }
        Ok(())
    })();
    conn.execute_batch(if result.is_ok() { "COMMIT" } else { "ROLLBACK" })?;
    result
}
