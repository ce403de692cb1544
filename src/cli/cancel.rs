//! `skyc cancel ID...`: terminate groups.

use super::exit::{NOT_FOUND, OK, USAGE};
use super::out::errln;
use super::select::{self, ByName};
use super::state::StateArgs;
use skyc_runtime::store::Kind;
use skyc_runtime::supervisor;

/// Cancel groups: every task gets SIGTERM, then SIGKILL after the grace
/// period.
///
/// Exit status 102 when a group named is not found.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The groups to cancel.
    #[arg(
        value_name = "ID",
        value_parser = select::group_id,
        required_unless_present_any = ["all", "name", "pool"],
        conflicts_with = "name"
    )]
    ids: Vec<i64>,
    #[command(flatten)]
    by_name: ByName,
    /// Every group that has not finished (pools stay: `skyc pool down`).
    #[arg(short, long, conflicts_with_all = ["ids", "name"])]
    all: bool,
    /// Every job of this pool that has not finished, as
    /// `sky jobs cancel -p` does (the pool stays).
    #[arg(short = 'p', long = "pool", value_name = "NAME", conflicts_with_all = ["ids", "name", "all"])]
    pool: Option<String>,
    #[command(flatten)]
    state: StateArgs,
}

pub(crate) fn run(args: &Args) -> u8 {
    cancel(args).unwrap_or_else(|message| {
        errln!("error: {message}");
        USAGE
    })
}

fn cancel(args: &Args) -> Result<u8, String> {
    let (dir, mut store) = args.state.open()?;
    let ids = if args.all {
        let live = store.live_jobs().map_err(|e| e.to_string())?;
        if live.is_empty() {
            errln!("skyc: no group in progress; nothing to cancel");
            return Ok(OK);
        }
        live
    } else if let Some(name) = &args.pool {
        let Some(pool) = store.live_pool(name).map_err(|e| e.to_string())? else {
            errln!("error: no live pool named `{name}` in {}", dir.display());
            return Ok(NOT_FOUND);
        };
        let jobs: Vec<i64> = store
            .members(pool.id, Kind::Group, false)
            .map_err(|e| e.to_string())?
            .iter()
            .map(|j| j.id)
            .collect();
        if jobs.is_empty() {
            errln!("skyc: no job of pool `{name}` in progress; nothing to cancel");
            return Ok(OK);
        }
        jobs
    } else if let Some(name) = &args.by_name.name {
        match by_name(&store, name)? {
            Ok(id) => vec![id],
            Err(message) => {
                errln!("error: {message}");
                return Ok(NOT_FOUND);
            }
        }
    } else {
        args.ids.clone()
    };
    let mut code = OK;
    let mut asked = false;
    for &id in &ids {
        match store.group(id).map_err(|e| e.to_string())? {
            None => {
                errln!("error: no group {id} in {}", dir.display());
                code = NOT_FOUND;
            }
            Some(g) if g.kind != Kind::Group => {
                errln!(
                    "error: {id} is {} `{}`, not a group: {}",
                    if g.kind == Kind::Pool {
                        "the pool"
                    } else {
                        "a worker of a pool"
                    },
                    g.name,
                    if g.kind == Kind::Pool {
                        "`skyc pool down` takes a pool down"
                    } else {
                        "a pool's workers go with `skyc pool down` or `skyc pool apply --workers N`"
                    }
                );
                code = NOT_FOUND;
            }
            Some(g) if g.finished_at_ms.is_some() => {
                errln!("skyc: group {id} ({}) already ended: {}", g.name, g.status);
            }
            Some(g) => {
                store.request_cancel(id).map_err(|e| e.to_string())?;
                errln!("skyc: cancelling group {id} ({})", g.name);
                asked = true;
            }
        }
    }
    if asked {
        supervisor::wake(&dir).map_err(|e| format!("supervisor: {e}"))?;
    }
    Ok(code)
}

/// The group in progress named `name`. Several in progress is an error, as
/// for `sky jobs cancel -n`: the ids tell them apart.
fn by_name(store: &skyc_runtime::store::Store, name: &str) -> Result<Result<i64, String>, String> {
    let groups = store.groups_named(name).map_err(|e| e.to_string())?;
    if groups.is_empty() {
        return Ok(Err(format!("no group named `{name}`")));
    }
    let live: Vec<i64> = groups
        .iter()
        .filter(|g| g.finished_at_ms.is_none())
        .map(|g| g.id)
        .collect();
    Ok(match live.as_slice() {
        [] => Ok(groups[0].id),
        [id] => Ok(*id),
        ids => {
            let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
            return Err(format!(
                "{} groups named `{name}` are in progress ({}); cancel them by id",
                ids.len(),
                ids.join(", ")
            ));
        }
    })
}
