//! `skyc status [ID]`: groups and their tasks.

use super::state::{StateArgs, supervisor_pid};
use super::{OK, USAGE};
use serde_json::json;
use skyc_runtime::store::Store;

/// Show groups run on this machine, newest first.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// One group; all when omitted.
    #[arg(value_name = "ID")]
    id: Option<i64>,
    /// Print JSON: per group its id, name, status, supervisor pid, and per
    /// task its status and restarts.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

pub(crate) fn run(args: &Args) -> u8 {
    match show(args) {
        Ok(()) => OK,
        Err(message) => {
            eprintln!("error: {message}");
            USAGE
        }
    }
}

fn show(args: &Args) -> Result<(), String> {
    let (dir, store) = args.state.open_supervised()?;
    let groups = match args.id {
        Some(id) => vec![
            store
                .group(id)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("no group {id} in {}", dir.display()))?,
        ],
        None => store.groups().map_err(|e| e.to_string())?,
    };
    let supervisor = supervisor_pid(&dir);
    if args.json {
        let out: Vec<_> = groups
            .iter()
            .map(|g| group_json(&store, g, supervisor))
            .collect::<Result<_, _>>()?;
        let value = if args.id.is_some() {
            out.into_iter().next().unwrap_or_default()
        } else {
            serde_json::Value::Array(out)
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
        return Ok(());
    }
    println!(
        "{:<5} {:<24} {:<13} {:<10} TASKS",
        "ID", "NAME", "STATUS", "DURATION"
    );
    let now = skyc_runtime::store::now_ms();
    for g in &groups {
        let tasks = store.tasks(g.id).map_err(|e| e.to_string())?;
        let summary: Vec<String> = tasks
            .iter()
            .map(|t| {
                let restarts = if t.restarts > 0 {
                    format!(" ({} restarts)", t.restarts)
                } else {
                    String::new()
                };
                format!("{}={}{restarts}", t.name, t.status)
            })
            .collect();
        let secs = (g.finished_at_ms.unwrap_or(now) - g.submitted_at_ms).max(0) / 1000;
        println!(
            "{:<5} {:<24} {:<13} {:<10} {}",
            g.id,
            g.name,
            g.status,
            format!("{}m{:02}s", secs / 60, secs % 60),
            summary.join(", ")
        );
        if let Some(job) = &g.job {
            println!("      on {}: job {job}", g.backend.as_str());
        }
        if let Some(error) = &g.error {
            println!("      error: {error}");
        }
    }
    Ok(())
}

fn group_json(
    store: &Store,
    g: &skyc_runtime::store::GroupRow,
    supervisor: Option<i64>,
) -> Result<serde_json::Value, String> {
    let tasks = store.tasks(g.id).map_err(|e| e.to_string())?;
    let nodes = store.nodes(g.id).map_err(|e| e.to_string())?;
    let live = g.finished_at_ms.is_none();
    Ok(json!({
        "id": g.id,
        "name": g.name,
        "status": g.status,
        "backend": g.backend,
        "job": g.job,
        "error": g.error,
        "source": g.source,
        "submitted_at_ms": g.submitted_at_ms,
        "finished_at_ms": g.finished_at_ms,
        "supervisor_pid": if live { supervisor } else { None },
        "tasks": tasks.iter().map(|t| json!({
            "name": t.name,
            "role": t.role,
            "status": t.status,
            "attempt": t.attempt,
            "restarts": t.restarts,
            "restarts_on_errors": t.restarts_on_errors,
            "nodes": nodes.iter().filter(|n| n.task == t.index).map(|n| json!({
                "rank": n.rank,
                "hostname": n.hostname,
                "ip": n.ip,
                "pid": if live { n.pid } else { None },
                "attempt": n.attempt,
                "phase": n.phase,
                "exit_code": n.exit_code,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    }))
}
