//! `skyc cancel ID...`: terminate groups.

use super::exit::{NOT_FOUND, OK, USAGE};
use super::out::errln;
use super::select::{self, ByName};
use super::state::StateArgs;
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
        required_unless_present_any = ["all", "name"],
        conflicts_with = "name"
    )]
    ids: Vec<i64>,
    #[command(flatten)]
    by_name: ByName,
    /// Every group that has not finished.
    #[arg(short, long, conflicts_with_all = ["ids", "name"])]
    all: bool,
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
        let live = store.live_groups().map_err(|e| e.to_string())?;
        if live.is_empty() {
            errln!("skyc: no group in progress; nothing to cancel");
            return Ok(OK);
        }
        live
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
