//! `skyc cancel ID...`: terminate groups.

use super::exit::{NOT_FOUND, OK, USAGE};
use super::out::errln;
use super::select::{self, ByName};
use super::state::StateArgs;
use skyc_runtime::store::{Kind, Store};
use skyc_runtime::supervisor;
use std::path::Path;

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
        let outcome = request(&mut store, id)?;
        match &outcome {
            Outcome::Asked(_) => {
                errln!("skyc: {}", outcome.message(id, &dir));
                asked = true;
            }
            Outcome::Ended(..) => errln!("skyc: {}", outcome.message(id, &dir)),
            Outcome::Missing | Outcome::NotAGroup(..) => {
                errln!("error: {}", outcome.message(id, &dir));
                code = NOT_FOUND;
            }
        }
    }
    if asked {
        wake(&dir)?;
    }
    Ok(code)
}

/// What a cancel request of one group came to.
pub(crate) enum Outcome {
    /// No such group.
    Missing,
    /// A pool or a worker: (kind, name).
    NotAGroup(Kind, String),
    /// The group ended already: (name, status).
    Ended(String, String),
    /// The request is recorded for the supervisor: the group's name.
    Asked(String),
}

impl Outcome {
    pub(crate) fn message(&self, id: i64, dir: &Path) -> String {
        match self {
            Outcome::Missing => format!("no group {id} in {}", dir.display()),
            Outcome::NotAGroup(kind, name) => format!(
                "{id} is {} `{name}`, not a group: {}",
                if *kind == Kind::Pool {
                    "the pool"
                } else {
                    "a worker of a pool"
                },
                if *kind == Kind::Pool {
                    "`skyc pool down` takes a pool down"
                } else {
                    "a pool's workers go with `skyc pool down` or `skyc pool apply --workers N`"
                }
            ),
            Outcome::Ended(name, status) => format!("group {id} ({name}) already ended: {status}"),
            Outcome::Asked(name) => format!("cancelling group {id} ({name})"),
        }
    }
}

/// Records a request to cancel group `id`, which the supervisor carries
/// out once woken ([`wake`]). `skyc cancel` and the dashboard's cancel
/// button both come through here.
pub(crate) fn request(store: &mut Store, id: i64) -> Result<Outcome, String> {
    Ok(match store.group(id).map_err(|e| e.to_string())? {
        None => Outcome::Missing,
        Some(g) if g.kind != Kind::Group => Outcome::NotAGroup(g.kind, g.name),
        Some(g) if g.finished_at_ms.is_some() => Outcome::Ended(g.name, g.status),
        Some(g) => {
            store.request_cancel(id).map_err(|e| e.to_string())?;
            Outcome::Asked(g.name)
        }
    })
}

/// Wakes the supervisor of `dir` (starting one if none answers) to carry
/// out the requests recorded.
pub(crate) fn wake(dir: &Path) -> Result<(), String> {
    supervisor::wake(dir).map_err(|e| format!("supervisor: {e}"))
}

/// The group in progress named `name`. Several in progress is an error, as
/// for `sky jobs cancel -n`: the ids tell them apart.
fn by_name(store: &Store, name: &str) -> Result<Result<i64, String>, String> {
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
