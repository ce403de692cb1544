//! `skyc cancel ID...`: terminate groups.

use super::state::StateArgs;
use super::{INVALID, OK, USAGE};
use skyc_runtime::supervisor;

/// Cancel groups: every task gets SIGTERM, then SIGKILL after the grace
/// period.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[arg(value_name = "ID", required_unless_present = "all")]
    ids: Vec<i64>,
    /// Every group that has not finished.
    #[arg(long, conflicts_with = "ids")]
    all: bool,
    #[command(flatten)]
    state: StateArgs,
}

pub(crate) fn run(args: &Args) -> u8 {
    let result = (|| -> Result<u8, String> {
        let (dir, mut store) = args.state.open()?;
        let ids = if args.all {
            store.live_groups().map_err(|e| e.to_string())?
        } else {
            args.ids.clone()
        };
        let mut code = OK;
        for &id in &ids {
            match store.group(id).map_err(|e| e.to_string())? {
                None => {
                    eprintln!("error: no group {id} in {}", dir.display());
                    code = INVALID;
                }
                Some(g) if g.finished_at_ms.is_some() => {
                    eprintln!("skyc: group {id} already ended ({})", g.status);
                }
                Some(_) => {
                    store.request_cancel(id).map_err(|e| e.to_string())?;
                    eprintln!("skyc: cancelling group {id}");
                }
            }
        }
        if !ids.is_empty() {
            supervisor::wake(&dir).map_err(|e| format!("supervisor: {e}"))?;
        }
        Ok(code)
    })();
    result.unwrap_or_else(|message| {
        eprintln!("error: {message}");
        USAGE
    })
}
