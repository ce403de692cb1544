//! `skyc storage ls|delete`: the buckets skyc made for storage specs
//! that name a bucket alone (`file_mounts: {DST: {name: NAME}}`), as `sky
//! storage ls|delete` lists and deletes SkyPilot's. A bucket skyc did not
//! make is neither listed nor deleted.

use super::exit::{NOT_FOUND, OK, USAGE};
use super::out::{errln, out};
use super::state::StateArgs;
use super::table::{Table, ago};
use skyc_runtime::storage::owned::{self, Refusal};
use skyc_runtime::store::{Store, now_ms};

#[derive(clap::Subcommand)]
pub(crate) enum Command {
    Ls(LsArgs),
    Delete(DeleteArgs),
}

/// List the buckets skyc made, whether each is kept after its groups, and
/// the live groups that mount it.
#[derive(clap::Args)]
pub(crate) struct LsArgs {
    /// As JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

/// Delete buckets skyc made, with every object they hold; refused while
/// a live group mounts one.
#[derive(clap::Args)]
pub(crate) struct DeleteArgs {
    /// The buckets' names.
    #[arg(value_name = "NAME", required_unless_present = "all")]
    names: Vec<String>,
    /// Every bucket skyc made that no live group mounts (with `--yes`).
    #[arg(long, short = 'a', conflicts_with = "names")]
    all: bool,
    /// Delete every bucket `--all` names without asking.
    #[arg(long, short = 'y')]
    yes: bool,
    #[command(flatten)]
    state: StateArgs,
}

pub(crate) fn run(command: &Command) -> u8 {
    let result = match command {
        Command::Ls(a) => ls(a),
        Command::Delete(a) => delete(a),
    };
    result.unwrap_or_else(|(code, message)| {
        errln!("error: {message}");
        code
    })
}

type Outcome = Result<u8, (u8, String)>;

fn ls(args: &LsArgs) -> Outcome {
    let dir = args.state.dir();
    let Some(store) = Store::open_read_only(&dir).map_err(|e| (USAGE, e))? else {
        return empty(args.json);
    };
    let rows = store.buckets().map_err(|e| (USAGE, e.to_string()))?;
    let mut users = Vec::with_capacity(rows.len());
    for b in &rows {
        users.push(
            store
                .bucket_users(&b.name)
                .map_err(|e| (USAGE, e.to_string()))?,
        );
    }
    if rows.is_empty() {
        return empty(args.json);
    }
    // One due for deletion is deleted by the supervisor: a listing starts
    // one when none runs (the last died before it could).
    let due = rows
        .iter()
        .zip(&users)
        .any(|(b, u)| b.deleting || (!b.persistent && u.is_empty()));
    if due && let Err(e) = skyc_runtime::supervisor::wake(&dir) {
        errln!("skyc: cannot start the supervisor that deletes the buckets not kept: {e}");
    }
    if args.json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .zip(&users)
            .map(|(b, users)| {
                serde_json::json!({
                    "name": b.name,
                    "store": b.store,
                    "url": skyc_targets::storage::Store::named(&b.store).url(&b.name).to_string(),
                    "endpoint": b.endpoint,
                    "region": b.region,
                    "persistent": b.persistent,
                    "created_at_ms": b.created_at_ms,
                    "used_by": users.iter().map(|(id, _)| id).collect::<Vec<_>>(),
                    "error": b.error,
                    "deleting": b.deleting,
                })
            })
            .collect();
        out!(
            "{}\n",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        );
        return Ok(OK);
    }
    let now = now_ms();
    let mut t = Table::new(&["NAME", "STORE", "CREATED", "KEPT", "USED BY", "STATUS"]);
    for (b, users) in rows.iter().zip(&users) {
        let used: Vec<String> = users.iter().map(|(id, _)| id.to_string()).collect();
        let status = match (&b.error, b.persistent, users.is_empty()) {
            _ if b.deleting => "deleting".to_owned(),
            (Some(why), _, _) => format!("cannot delete: {why}"),
            (None, false, true) => "to delete".to_owned(),
            (None, false, false) => "deleted after its groups".to_owned(),
            (None, true, _) => "ready".to_owned(),
        };
        t.row(vec![
            b.name.clone(),
            b.store.clone(),
            ago(now, b.created_at_ms),
            if b.persistent { "yes" } else { "no" }.to_owned(),
            if used.is_empty() {
                "-".to_owned()
            } else {
                used.join(",")
            },
            status,
        ]);
    }
    out!("{}", t.render());
    Ok(OK)
}

fn empty(json: bool) -> Outcome {
    if json {
        out!("[]\n");
    } else {
        errln!("skyc: no buckets made by skyc (a storage spec's `name` alone makes one)");
    }
    Ok(OK)
}

fn delete(args: &DeleteArgs) -> Outcome {
    let dir = args.state.dir();
    // No state directory, no bucket skyc made: none is made to say so.
    let Some(read) = Store::open_read_only(&dir).map_err(|e| (USAGE, e))? else {
        for name in &args.names {
            errln!("error: {}", no_such(name));
        }
        return Ok(if args.names.is_empty() { OK } else { NOT_FOUND });
    };
    let names: Vec<String> = if args.all {
        let rows = read.buckets().map_err(|e| (USAGE, e.to_string()))?;
        let mut unused = Vec::new();
        for b in rows {
            let users = read
                .bucket_users(&b.name)
                .map_err(|e| (USAGE, e.to_string()))?;
            if users.is_empty() {
                unused.push(b.name);
            }
        }
        if !args.yes && !unused.is_empty() {
            return Err((
                USAGE,
                format!(
                    "`--all` deletes {} with every object in them: {}; add `--yes` to go ahead",
                    if unused.len() == 1 {
                        "1 bucket"
                    } else {
                        "these buckets"
                    },
                    unused.join(", ")
                ),
            ));
        }
        unused
    } else {
        args.names.clone()
    };
    drop(read);
    let (dir, mut store) = args.state.open().map_err(|e| (USAGE, e))?;
    // The first failure's status, every failure said.
    let mut code = OK;
    for name in &names {
        let failed = match owned::delete_named(&dir, &mut store, name) {
            Ok(()) => {
                errln!("skyc: bucket `{name}` deleted");
                continue;
            }
            Err(Refusal::NotFound) => {
                errln!("error: {}", no_such(name));
                NOT_FOUND
            }
            Err(refusal) => {
                errln!("error: {refusal}");
                USAGE
            }
        };
        if code == OK {
            code = failed;
        }
    }
    Ok(code)
}

fn no_such(name: &str) -> String {
    format!("no bucket named `{name}` was made by skyc (`skyc storage ls` lists those it made)")
}
