//! `skyc status [ID]`: groups and their tasks, in the spirit of
//! `sky jobs queue`.

use super::exit::{NOT_FOUND, OK, USAGE};
use super::out::{self, errln, out};
use super::report::plural;
use super::select::{self, ByName};
use super::state::{StateArgs, supervisor_pid};
use super::table::{self, Table};
use serde_json::json;
use skyc_runtime::registry::BACKENDS;
use skyc_runtime::store::{Backend, GroupRow, NodeRow, Store, TaskRow, now_ms};

/// How many finished groups are listed when `--all` is not given.
const RECENT: usize = 10;

/// Show groups: the ones in progress and the most recent ones, newest first.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// One group, with its nodes; the group list when omitted.
    #[arg(value_name = "ID", value_parser = select::group_id, conflicts_with = "name")]
    id: Option<i64>,
    #[command(flatten)]
    by_name: ByName,
    /// Every group, not only those in progress and the 10 most recent.
    #[arg(short, long)]
    all: bool,
    /// Print a JSON array of groups (the same shape with or without ID):
    /// per group its id, name, status, recoveries, and per task its status,
    /// restarts and nodes.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

pub(crate) fn run(args: &Args) -> u8 {
    match show(args) {
        Ok(code) => code,
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

/// A group with what the listing shows of it.
pub(crate) struct Shown {
    pub(crate) group: GroupRow,
    pub(crate) tasks: Vec<TaskRow>,
    pub(crate) nodes: Vec<NodeRow>,
    /// The name of the pool it was submitted to.
    pub(crate) pool: Option<String>,
}

/// Reads what `status` (and the dashboard) shows of a group.
pub(crate) fn read(store: &Store, group: GroupRow) -> Result<Shown, String> {
    let pool = match group.pool {
        Some(p) => store.group(p).map_err(|e| e.to_string())?.map(|p| p.name),
        None => None,
    };
    Ok(Shown {
        tasks: store.tasks(group.id).map_err(|e| e.to_string())?,
        nodes: store.nodes(group.id).map_err(|e| e.to_string())?,
        group,
        pool,
    })
}

fn show(args: &Args) -> Result<u8, String> {
    let (dir, store) = args.state.open_supervised()?;
    let (groups, hidden) = match (args.id, &args.by_name.name) {
        (Some(id), _) => match select::one(&store, &dir, Some(id), None)? {
            Ok(group) => (vec![group], 0),
            Err(missing) => {
                errln!("error: {}", missing.0);
                return Ok(NOT_FOUND);
            }
        },
        (None, name) => {
            let all = match name {
                Some(name) => store.groups_named(name),
                None => store.groups(),
            }
            .map_err(|e| e.to_string())?;
            if all.is_empty()
                && let Some(name) = name
            {
                errln!("error: no group named `{name}` in {}", dir.display());
                return Ok(NOT_FOUND);
            }
            listed(all, args.all)
        }
    };
    let shown = groups
        .into_iter()
        .map(|group| read(&store, group))
        .collect::<Result<Vec<_>, String>>()?;
    if args.json {
        let supervisor = supervisor_pid(&dir);
        let value: Vec<_> = shown.iter().map(|s| group_json(s, supervisor)).collect();
        out::json(&value);
        return Ok(OK);
    }
    if shown.is_empty() {
        errln!("No groups in {}.", dir.display());
        return Ok(OK);
    }
    out!("{}", groups_table(&shown, now_ms()).render());
    if hidden > 0 {
        errln!(
            "({hidden} older group{} not shown; `skyc status --all` lists every group)",
            plural(hidden)
        );
    }
    if args.id.is_some()
        && let Some(one) = shown.first()
    {
        out!("\n{}", nodes_table(one).render());
        // What the runtime delivered to the nodes to reach their buckets.
        let held: Vec<String> = one
            .tasks
            .iter()
            .filter_map(|t| {
                Some(format!(
                    "credentials of {}'s nodes: {}",
                    t.name,
                    t.credentials.as_ref()?
                ))
            })
            .collect();
        if live(one) && !held.is_empty() {
            out!("\n{}\n", held.join("\n"));
        }
        if let Some(outage) = one.group.outage.as_ref().filter(|_| live(one)) {
            out!("\nunreachable: {outage}\n");
        }
        if let Some(error) = &one.group.error {
            out!("\nerror: {error}\n");
        }
    }
    Ok(OK)
}

/// The groups a listing shows: all in progress and the `RECENT` newest of
/// the rest (`all`: every one); and how many it leaves out.
fn listed(groups: Vec<GroupRow>, all: bool) -> (Vec<GroupRow>, usize) {
    if all {
        return (groups, 0);
    }
    let mut finished = 0;
    let mut hidden = 0;
    let shown = groups
        .into_iter()
        .filter(|g| {
            if g.finished_at_ms.is_none() {
                return true;
            }
            finished += 1;
            let keep = finished <= RECENT;
            hidden += usize::from(!keep);
            keep
        })
        .collect();
    (shown, hidden)
}

/// A group row, then a `↳` row per task; a POOL column (as `sky jobs
/// queue` has) when a group listed ran on a pool.
fn groups_table(shown: &[Shown], now: i64) -> Table {
    let pools = shown.iter().any(|s| s.pool.is_some());
    let mut columns = vec![
        "ID",
        "TASK",
        "NAME",
        "NODES",
        "SUBMITTED",
        "DURATION",
        "#RECOVERIES",
        "STATUS",
    ];
    if pools {
        columns.push("POOL");
    }
    columns.push("DETAILS");
    let mut t = Table::new(&columns);
    let with_pool = |mut row: Vec<String>, pool: String| {
        if pools {
            let details = row.pop().unwrap_or_default();
            row.push(pool);
            row.push(details);
        }
        row
    };
    for s in shown {
        let g = &s.group;
        let nodes: i64 = s.tasks.iter().map(|t| t.num_nodes).sum();
        let recoveries: i64 = s.tasks.iter().map(|t| t.restarts).sum();
        let outage = g.outage.as_ref().filter(|_| g.finished_at_ms.is_none());
        let details = match (&g.error, &g.job) {
            // Statuses are as last known while the cluster cannot be asked.
            _ if outage.is_some() => format!(
                "unreachable: {}",
                table::truncate(&table::one_line(outage.map_or("", |o| o)), 80)
            ),
            (Some(error), _) => format!("error: {}", table::truncate(&table::one_line(error), 80)),
            (None, Some(job)) => {
                // A pipeline on Slurm has a job per step.
                let jobs = if job.contains(',') { "jobs" } else { "job" };
                format!("{} {jobs} {job}", g.backend.as_str())
            }
            (None, None) => String::new(),
        };
        let details = match (g.rank, g.num_jobs) {
            (Some(rank), Some(n)) if n > 1 => [format!("rank {rank} of {n}"), details]
                .into_iter()
                .filter(|d| !d.is_empty())
                .collect::<Vec<_>>()
                .join(", "),
            _ => details,
        };
        let row = vec![
            g.id.to_string(),
            "-".into(),
            g.name.clone(),
            nodes.to_string(),
            table::ago(now, g.submitted_at_ms),
            table::duration(g.finished_at_ms.unwrap_or(now) - g.submitted_at_ms),
            recoveries.to_string(),
            g.status.clone(),
            details,
        ];
        t.row(with_pool(row, s.pool.clone().unwrap_or_else(|| "-".into())));
        for task in &s.tasks {
            let row = vec![
                "↳".into(),
                task.index.to_string(),
                task.name.clone(),
                task.num_nodes.to_string(),
                "-".into(),
                "-".into(),
                task.restarts.to_string(),
                task.status.clone(),
                task_details(task, &s.nodes, now),
            ];
            t.row(with_pool(row, "-".into()));
        }
    }
    t
}

/// A task's role, why it waits, its restarts on errors, and how it failed.
fn task_details(task: &TaskRow, nodes: &[NodeRow], now: i64) -> String {
    let mut parts = vec![task.role.clone()];
    if let (Some(why), Some(since)) = (&task.waiting, task.waiting_since_ms) {
        parts.push(table::waiting(now, why, since));
    }
    if task.restarts > 0 {
        let on_errors = task.restarts_on_errors;
        parts.push(format!(
            "{} restart{} ({on_errors} on errors)",
            task.restarts,
            plural(usize::try_from(task.restarts).unwrap_or(2))
        ));
    }
    if task.status.starts_with("FAILED")
        && let Some((node, code)) = failed_node(task, nodes)
    {
        parts.push(format!("{}-{} exit {code}", task.name, node.rank));
    }
    parts.join(", ")
}

/// The first node of `task` that ended with a non-zero exit code.
fn failed_node<'a>(task: &TaskRow, nodes: &'a [NodeRow]) -> Option<(&'a NodeRow, i64)> {
    nodes
        .iter()
        .filter(|n| n.task == task.index)
        .find_map(|n| n.exit_code.filter(|&c| c != 0).map(|c| (n, c)))
}

fn live(s: &Shown) -> bool {
    s.group.finished_at_ms.is_none()
}

/// One group's nodes: where each runs (its agent's pid here, its pod
/// and machine on Kubernetes, its instance and machine type and zone on
/// AWS), its attempt and how it ended.
fn nodes_table(s: &Shown) -> Table {
    let handle = s
        .group
        .backend
        .descriptor()
        .handle
        .as_ref()
        .map(|h| h.column);
    let pods = handle.is_some();
    let mut t = Table::new(&match handle {
        Some(handle) => vec![
            "NODE", "HOSTNAME", "ADDRESS", "ATTEMPT", "PHASE", handle, "MACHINE", "EXIT",
        ],
        None => vec![
            "NODE", "HOSTNAME", "ADDRESS", "ATTEMPT", "PHASE", "PID", "EXIT",
        ],
    });
    let live = live(s);
    for n in &s.nodes {
        let task = s.tasks.iter().find(|t| t.index == n.task);
        let name = task.map_or("?", |t| t.name.as_str());
        let dash = || "-".to_owned();
        let or_dash = |v: &str| {
            if v.is_empty() { dash() } else { v.to_owned() }
        };
        let mut row = vec![
            format!("{name}-{}", n.rank),
            n.hostname.clone(),
            or_dash(&n.ip),
            n.attempt.to_string(),
            n.phase.clone().unwrap_or_else(dash),
        ];
        if pods {
            row.push(or_dash(&n.handle));
            row.push(or_dash(&n.machine));
        } else {
            row.push(n.pid.filter(|_| live).map_or_else(dash, |p| p.to_string()));
        }
        row.push(n.exit_code.map_or_else(dash, |c| c.to_string()));
        t.row(row);
    }
    t
}

/// A group as `status --json` prints it (and the dashboard serves it).
pub(crate) fn group_json(s: &Shown, supervisor: Option<i64>) -> serde_json::Value {
    let g = &s.group;
    let live = g.finished_at_ms.is_none();
    json!({
        "id": g.id,
        "name": g.name,
        "status": g.status,
        "backend": g.backend,
        "job": g.job,
        "error": g.error,
        "unreachable": if live { g.outage.clone() } else { None },
        "source": g.source,
        "submitted_at_ms": g.submitted_at_ms,
        "finished_at_ms": g.finished_at_ms,
        "recoveries": s.tasks.iter().map(|t| t.restarts).sum::<i64>(),
        "supervisor_pid": if live { supervisor } else { None },
        "pool": s.pool,
        "rank": g.rank.filter(|_| g.num_jobs.is_some()),
        "num_jobs": g.num_jobs,
        "tasks": s.tasks.iter().map(|t| json!({
            "index": t.index,
            "name": t.name,
            "role": t.role,
            "status": t.status,
            "attempt": t.attempt,
            "restarts": t.restarts,
            "restarts_on_errors": t.restarts_on_errors,
            "num_nodes": t.num_nodes,
            "credentials": t.credentials,
            "waiting": t.waiting.as_ref().map(|why| json!({
                "why": why,
                "since_ms": t.waiting_since_ms,
            })),
            "nodes": s.nodes.iter()
                .filter(|n| n.task == t.index)
                .map(|n| node_json(g.backend, n, live))
                .collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// A node in `--json`. Its handle is under its backend's key (`pod`,
/// `instance`); every backend's key is there, null but on its own.
fn node_json(backend: Backend, n: &NodeRow, live: bool) -> serde_json::Value {
    let mut node = serde_json::Map::new();
    let mut put = |key: &str, value: serde_json::Value| node.insert(key.to_owned(), value);
    put("rank", json!(n.rank));
    put("hostname", json!(n.hostname));
    put("ip", json!(n.ip));
    put("pid", json!(if live { n.pid } else { None }));
    for d in &BACKENDS {
        if let Some(h) = &d.handle {
            let own = d.kind == backend && !n.handle.is_empty();
            put(h.key, json!(own.then_some(&n.handle)));
        }
    }
    put(
        "machine",
        json!((!n.machine.is_empty()).then_some(&n.machine)),
    );
    put("attempt", json!(n.attempt));
    put("phase", json!(n.phase));
    put("exit_code", json!(n.exit_code));
    serde_json::Value::Object(node)
}
