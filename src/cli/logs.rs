//! `skyc logs ID [TASK]`: a group's node logs.

use super::follow::Follower;
use super::state::StateArgs;
use super::{OK, USAGE};
use std::time::Duration;

/// Print a group's logs, each line prefixed `(task-rank)`.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[arg(value_name = "ID")]
    id: i64,
    /// One task (`trainer`) or one node (`trainer-1`).
    #[arg(value_name = "TASK")]
    task: Option<String>,
    /// Keep printing until the group ends.
    #[arg(short, long)]
    follow: bool,
    #[command(flatten)]
    state: StateArgs,
}

pub(crate) fn run(args: &Args) -> u8 {
    match print(args) {
        Ok(()) => OK,
        Err(message) => {
            eprintln!("error: {message}");
            USAGE
        }
    }
}

fn print(args: &Args) -> Result<(), String> {
    let (dir, store) = args.state.open_supervised()?;
    let group = store
        .group(args.id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no group {} in {}", args.id, dir.display()))?;
    let mut logs = Follower::new(&store, &dir, group.id, args.task.as_deref())?;
    let mut out = std::io::stdout().lock();
    if args.follow {
        loop {
            let done = store
                .group(group.id)
                .map_err(|e| e.to_string())?
                .is_none_or(|g| g.finished_at_ms.is_some());
            logs.poll(&mut out).map_err(|e| e.to_string())?;
            if done {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    logs.finish(&mut out).map_err(|e| e.to_string())
}
