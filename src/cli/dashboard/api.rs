//! What the dashboard serves: the page, and the JSON views it polls, read
//! from the store as `skyc status` and `skyc pool status` read it. Only
//! the cancel button writes, through `skyc cancel`'s own path.

use super::super::follow::log_places;
use super::super::state::supervisor_pid;
use super::super::{cancel, pool, status};
use super::server::{query, random_hex};
use super::timeline::{self, TaskInfo};
use hyper::StatusCode;
use hyper::header::HeaderName;
use hyper::http::request::Parts;
use serde::Serialize;
use serde_json::{Value, json};
use skyc_runtime::paths;
use skyc_runtime::store::{Backend, GroupRow, Store, TaskRow, now_ms};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Groups listed at most (newest first), unless `?limit=` asks for fewer
/// or more (up to `MAX_GROUPS`).
const GROUPS: usize = 1000;
const MAX_GROUPS: usize = 10_000;
/// The most of a log one answer carries.
pub(crate) const LOG_CHUNK: u64 = 64 << 10;
/// The most of a group's history read for its timeline.
const EVENTS: usize = 20_000;

const HTML: &str = include_str!("assets/index.html");
const CSS: &str = include_str!("assets/style.css");
const JS: &str = include_str!("assets/app.js");

pub(crate) enum Answer {
    Html {
        body: String,
        nonce: String,
    },
    Json(StatusCode, Value),
    /// JSON already serialised.
    JsonBytes(StatusCode, Vec<u8>),
    /// Bytes of a log, with where they start and end.
    Bytes {
        body: Vec<u8>,
        headers: Vec<(HeaderName, u64)>,
    },
    Status(StatusCode, String),
}

impl Answer {
    pub(crate) fn not_found() -> Self {
        Answer::Status(StatusCode::NOT_FOUND, "not found".into())
    }

    fn error(message: String) -> Self {
        Answer::Json(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": message }),
        )
    }
}

/// An answer as a controller writes it for its client's dashboard
/// (`skyc dashboard --answer`): one line of JSON saying what it is, then
/// its body's bytes.
#[derive(Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Head {
    Html { nonce: String },
    Json { status: u16 },
    Bytes { headers: Vec<(String, u64)> },
    Status { status: u16 },
}

impl Answer {
    pub(crate) fn encode(self) -> Vec<u8> {
        let (head, body) = match self {
            Answer::Html { body, nonce } => (Head::Html { nonce }, body.into_bytes()),
            Answer::Json(status, value) => (
                Head::Json {
                    status: status.as_u16(),
                },
                serde_json::to_vec(&value).unwrap_or_default(),
            ),
            Answer::JsonBytes(status, body) => (
                Head::Json {
                    status: status.as_u16(),
                },
                body,
            ),
            Answer::Bytes { body, headers } => (
                Head::Bytes {
                    headers: headers
                        .into_iter()
                        .map(|(name, value)| (name.as_str().to_owned(), value))
                        .collect(),
                },
                body,
            ),
            Answer::Status(status, message) => (
                Head::Status {
                    status: status.as_u16(),
                },
                message.into_bytes(),
            ),
        };
        let mut out = serde_json::to_vec(&head).unwrap_or_default();
        out.push(b'\n');
        out.extend(body);
        out
    }

    /// [`Answer::encode`] read back; `None` when it is not one.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let at = bytes.iter().position(|&b| b == b'\n')?;
        let head: Head = serde_json::from_slice(&bytes[..at]).ok()?;
        let body = bytes[at + 1..].to_vec();
        let status = |code| StatusCode::from_u16(code).ok();
        Some(match head {
            // The nonce goes into this server's policy, the headers into
            // its answer: only what the dashboard itself sends.
            Head::Html { nonce } if !nonce.bytes().all(|b| b.is_ascii_hexdigit()) => return None,
            Head::Bytes { headers } if headers.iter().any(|(n, _)| !n.starts_with("x-skyc-")) => {
                return None;
            }
            Head::Html { nonce } => Answer::Html {
                body: String::from_utf8(body).ok()?,
                nonce,
            },
            Head::Json { status: code } => Answer::JsonBytes(status(code)?, body),
            Head::Bytes { headers } => Answer::Bytes {
                body,
                headers: headers
                    .into_iter()
                    .map(|(name, value)| {
                        Some((HeaderName::from_bytes(name.as_bytes()).ok()?, value))
                    })
                    .collect::<Option<_>>()?,
            },
            Head::Status { status: code } => {
                Answer::Status(status(code)?, String::from_utf8_lossy(&body).into_owned())
            }
        })
    }
}

/// The store, read-only; `None` when nothing has run in `dir` yet.
fn open(dir: &Path) -> Result<Option<Store>, String> {
    Store::open_read_only(dir)
}

/// The page, with the group list and pools inlined: the list is drawn
/// without waiting for a first request, then kept live by polling.
pub(crate) fn page(dir: &Path) -> Answer {
    let Ok(nonce) = random_hex(16) else {
        return Answer::error("no randomness from the OS".into());
    };
    let groups = match groups_view(dir, GROUPS) {
        Ok(v) => serde_json::to_string(&v).unwrap_or_default(),
        Err(e) => json!({ "error": e }).to_string(),
    };
    let pools = pools_view(dir).unwrap_or_else(|e| json!({ "error": e }));
    // JSON inside a <script> element: `<` escaped, so no text of the data
    // can close the element.
    let boot = format!("{{\"groups\":{groups},\"pools\":{pools}}}").replace('<', "\\u003c");
    let body = HTML
        .replace("{{nonce}}", &nonce)
        .replace("{{css}}", CSS)
        .replace("{{js}}", JS)
        .replacen("{{boot}}", &boot, 1);
    Answer::Html { body, nonce }
}

pub(crate) fn groups(dir: &Path, parts: &Parts) -> Answer {
    let limit = query(parts, "limit")
        .and_then(|l| l.parse::<usize>().ok())
        .unwrap_or(GROUPS)
        .clamp(1, MAX_GROUPS);
    match groups_view(dir, limit).and_then(|v| serde_json::to_vec(&v).map_err(|e| e.to_string())) {
        Ok(bytes) => Answer::JsonBytes(StatusCode::OK, bytes),
        Err(e) => Answer::error(e),
    }
}

/// The list, serialised as it is (no `Value` in between: a thousand
/// groups are a few hundred KiB).
#[derive(Serialize)]
struct GroupsView {
    groups: Vec<Summary>,
    total: usize,
    now_ms: i64,
    state_dir: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'static str>,
}

/// A group as the list shows it.
#[derive(Serialize)]
struct Summary {
    id: i64,
    name: String,
    status: String,
    backend: Backend,
    submitted_at_ms: i64,
    finished_at_ms: Option<i64>,
    recoveries: i64,
    nodes: i64,
    pool: Option<String>,
    rank: Option<i64>,
    num_jobs: Option<i64>,
    error: Option<String>,
    unreachable: Option<String>,
    tasks: Vec<TaskBrief>,
}

#[derive(Serialize)]
struct TaskBrief {
    name: String,
    status: String,
}

fn groups_view(dir: &Path, limit: usize) -> Result<GroupsView, String> {
    let state_dir = dir.display().to_string();
    let Some(store) = open(dir)? else {
        return Ok(GroupsView {
            groups: Vec::new(),
            total: 0,
            now_ms: now_ms(),
            state_dir,
            note: Some("no group has run with this state directory yet"),
        });
    };
    let (groups, total) = store.snapshot(|store| {
        let (rows, total) = store.newest_groups(limit).map_err(|e| e.to_string())?;
        // Three queries for the whole list, not three a group: the
        // groups, their tasks, and each pool's name once.
        let first = rows.last().map_or(i64::MAX, |g| g.id);
        let mut tasks = store.tasks_from(first).map_err(|e| e.to_string())?;
        let mut pools: HashMap<i64, Option<String>> = HashMap::new();
        let mut groups = Vec::with_capacity(rows.len());
        for g in rows {
            let pool = match g.pool {
                Some(p) => match pools.get(&p) {
                    Some(name) => name.clone(),
                    None => {
                        let name = store.group(p).map_err(|e| e.to_string())?.map(|p| p.name);
                        pools.insert(p, name.clone());
                        name
                    }
                },
                None => None,
            };
            let tasks = tasks.remove(&g.id).unwrap_or_default();
            groups.push(summary(g, tasks, pool));
        }
        Ok((groups, total))
    })?;
    Ok(GroupsView {
        groups,
        total,
        now_ms: now_ms(),
        state_dir,
        note: None,
    })
}

fn summary(g: GroupRow, tasks: Vec<TaskRow>, pool: Option<String>) -> Summary {
    let live = g.finished_at_ms.is_none();
    Summary {
        // A store's counts are not trusted to add up without overflow.
        recoveries: tasks.iter().fold(0, |n, t| t.restarts.saturating_add(n)),
        nodes: tasks.iter().fold(0, |n, t| t.num_nodes.saturating_add(n)),
        tasks: tasks
            .into_iter()
            .map(|t| TaskBrief {
                name: t.name,
                status: t.status,
            })
            .collect(),
        id: g.id,
        name: g.name,
        status: g.status,
        backend: g.backend,
        submitted_at_ms: g.submitted_at_ms,
        finished_at_ms: g.finished_at_ms,
        pool,
        rank: g.rank.filter(|_| g.num_jobs.is_some()),
        num_jobs: g.num_jobs,
        error: g.error,
        unreachable: g.outage.filter(|_| live),
    }
}

pub(crate) fn group(dir: &Path, id: i64) -> Answer {
    let view = || -> Result<Option<Value>, String> {
        let Some(store) = open(dir)? else {
            return Ok(None);
        };
        let Some((shown, events)) = store.snapshot(|store| {
            let Some(row) = store.group(id).map_err(|e| e.to_string())? else {
                return Ok(None);
            };
            let shown = status::read(store, row)?;
            let events = store.first_events(id, EVENTS).map_err(|e| e.to_string())?;
            Ok(Some((shown, events)))
        })?
        else {
            return Ok(None);
        };
        let finished = shown.group.finished_at_ms;
        let tasks: Vec<TaskInfo> = shown
            .tasks
            .iter()
            .map(|t| TaskInfo {
                primary: t.role == "primary",
                num_nodes: u32::try_from(t.num_nodes).unwrap_or(0),
            })
            .collect();
        let spans = timeline::spans(&events, &tasks, finished);
        Ok(Some(json!({
            "group": status::group_json(&shown, supervisor_pid(dir)),
            "kind": shown.group.kind,
            "timeline": spans,
            "timeline_cut": events.len() >= EVENTS,
            "now_ms": now_ms(),
            "state_dir": dir.display().to_string(),
        })))
    };
    match view() {
        Ok(Some(v)) => Answer::Json(StatusCode::OK, v),
        Ok(None) => Answer::Json(
            StatusCode::NOT_FOUND,
            json!({ "error": format!("no group {id}") }),
        ),
        Err(e) => Answer::error(e),
    }
}

pub(crate) fn pools(dir: &Path) -> Answer {
    match pools_view(dir) {
        Ok(v) => Answer::Json(StatusCode::OK, v),
        Err(e) => Answer::error(e),
    }
}

/// Live pools, as `skyc pool status --json` shows them.
fn pools_view(dir: &Path) -> Result<Value, String> {
    let Some(store) = open(dir)? else {
        return Ok(json!({ "pools": [] }));
    };
    let pools = store.snapshot(|store| {
        store
            .pools(false)
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|row| pool::read(store, row).map(|s| pool::pool_json(&s)))
            .collect::<Result<Vec<_>, String>>()
    })?;
    Ok(json!({ "pools": pools }))
}

/// `?task=I&rank=R[&offset=N]`: at most `LOG_CHUNK` bytes of a node's log
/// from `offset`, or, without one, its tail from the start of a line.
/// Headers say where the bytes start, where the next read starts and how
/// long the log is.
pub(crate) fn log(dir: &Path, id: i64, parts: &Parts) -> Answer {
    let number = |k: &str| query(parts, k).and_then(|v| v.parse::<u64>().ok());
    let (Some(task), Some(rank)) = (number("task"), number("rank")) else {
        return Answer::Status(
            StatusCode::BAD_REQUEST,
            "`task` and `rank` are numbers".into(),
        );
    };
    let path = || -> Result<Option<std::path::PathBuf>, String> {
        let Some(store) = open(dir)? else {
            return Ok(None);
        };
        let Some(group) = store.group(id).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let tasks = store.tasks(id).map_err(|e| e.to_string())?;
        let Some(t) = usize::try_from(task).ok().and_then(|i| tasks.get(i)) else {
            return Ok(None);
        };
        if rank >= u64::try_from(t.num_nodes).unwrap_or(0) {
            return Ok(None);
        }
        let dirs = log_places(&store, dir, &group, &tasks)?.task_dirs;
        let rank = u32::try_from(rank).unwrap_or(u32::MAX);
        Ok(usize::try_from(task)
            .ok()
            .and_then(|i| dirs.get(i))
            .map(|d| paths::log(d, &t.name, rank)))
    };
    let path = match path() {
        Ok(Some(path)) => path,
        Ok(None) => return Answer::not_found(),
        Err(e) => return Answer::error(e),
    };
    match read_chunk(&path, number("offset")) {
        Ok((start, body, size)) => {
            let next = start + body.len() as u64;
            Answer::Bytes {
                body,
                headers: vec![
                    (HeaderName::from_static("x-skyc-start"), start),
                    (HeaderName::from_static("x-skyc-next"), next),
                    (HeaderName::from_static("x-skyc-size"), size),
                ],
            }
        }
        Err(e) => Answer::error(format!("{}: {e}", path.display())),
    }
}

/// Reads at most `LOG_CHUNK` bytes of `path` from `offset` (the tail when
/// `None`, from its first whole line); (start, bytes, size). A log not yet
/// written is empty.
pub(crate) fn read_chunk(path: &Path, offset: Option<u64>) -> std::io::Result<(u64, Vec<u8>, u64)> {
    // A state directory can hold anything at a log's place: only a
    // regular file is read (a link is not followed, a FIFO would block).
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Err(std::io::Error::other("not a regular file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, Vec::new(), 0)),
        Err(e) => return Err(e),
    }
    let mut file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    let tail = offset.is_none();
    let start = offset.unwrap_or(size.saturating_sub(LOG_CHUNK)).min(size);
    file.seek(SeekFrom::Start(start))?;
    let mut body = Vec::new();
    file.take(LOG_CHUNK).read_to_end(&mut body)?;
    if tail
        && start > 0
        && let Some(nl) = body.iter().position(|&b| b == b'\n')
    {
        body.drain(..=nl);
        return Ok((start + nl as u64 + 1, body, size));
    }
    Ok((start, body, size))
}

/// The cancel button: `skyc cancel ID`'s own request, then the supervisor
/// woken to carry it out.
pub(crate) fn cancel(dir: &Path, id: i64) -> Answer {
    let run = || -> Result<(StatusCode, String), String> {
        // Never create a store to cancel in: a missing one has no group.
        if !dir.join("state.db").exists() {
            return Ok((StatusCode::NOT_FOUND, format!("no group {id}")));
        }
        let mut store = Store::open(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let outcome = cancel::request(&mut store, id)?;
        let message = outcome.message(id, dir);
        Ok(match outcome {
            cancel::Outcome::Asked(_) => {
                cancel::wake(dir)?;
                (StatusCode::ACCEPTED, message)
            }
            cancel::Outcome::Ended(..) => (StatusCode::CONFLICT, message),
            cancel::Outcome::Missing | cancel::Outcome::NotAGroup(..) => {
                (StatusCode::NOT_FOUND, message)
            }
        })
    };
    match run() {
        Ok((status, message)) => Answer::Json(
            status,
            json!({ "ok": status == StatusCode::ACCEPTED, "message": message }),
        ),
        Err(e) => Answer::error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_is_read_in_bounded_chunks_and_tailed_from_a_line() {
        let dir = std::env::temp_dir().join(format!("skyc-dash-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.log");
        assert_eq!(read_chunk(&path, None).unwrap(), (0, Vec::new(), 0));
        let text = "line\n".repeat(30_000);
        std::fs::write(&path, &text).unwrap();
        let size = text.len() as u64;
        let (start, body, s) = read_chunk(&path, Some(0)).unwrap();
        assert_eq!((start, body.len() as u64, s), (0, LOG_CHUNK, size));
        let (start, body, _) = read_chunk(&path, None).unwrap();
        assert!(body.starts_with(b"line\n"), "the tail starts at a line");
        assert_eq!(start + body.len() as u64, size);
        assert!(body.len() as u64 <= LOG_CHUNK);
        let (start, body, _) = read_chunk(&path, Some(size + 10)).unwrap();
        assert_eq!((start, body.len()), (size, 0));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
