//! `skyc logs [ID] [TASK]`: a group's node logs, as `sky jobs logs` shows
//! a job's.

use super::exit::{self, NOT_FOUND, USAGE};
use super::follow::Follower;
use super::out::{self, errln};
use super::select::{self, ByName};
use super::state::StateArgs;
use std::time::Duration;

/// Print a group's logs, each line prefixed `(task-rank)`.
///
/// Lines of all nodes come in the order they were written. A group in
/// progress is followed until it ends. Exit status: 0 SUCCEEDED, 100
/// FAILED, 101 not finished, 102 no such group, 103 CANCELLED.
#[derive(clap::Args, Clone)]
pub(crate) struct Args {
    /// The group; the newest one when omitted (with `-n`: the TASK).
    #[arg(value_name = "ID")]
    id_or_task: Option<String>,
    /// One task, by name (`trainer`) or index (`0`), or one node
    /// (`trainer-1`).
    #[arg(value_name = "TASK")]
    task: Option<String>,
    #[command(flatten)]
    by_name: ByName,
    /// Print what was written so far and exit, even if the group runs.
    #[arg(long, conflicts_with = "follow")]
    no_follow: bool,
    /// Follow a group in progress until it ends (the default).
    #[arg(short, long)]
    follow: bool,
    /// The supervisor's own log instead: the state directory's
    /// `supervisor.log`, or a controller's (`--state-dir k8s://NS`), its
    /// leading replica's.
    #[arg(long, conflicts_with_all = ["id_or_task", "task", "name"])]
    controller: bool,
    #[command(flatten)]
    state: StateArgs,
}

impl Args {
    pub(crate) fn controller(&self) -> bool {
        self.controller
    }

    pub(crate) fn follows(&self) -> bool {
        self.follow
    }
}

pub(crate) fn run(args: &Args) -> u8 {
    if args.controller {
        return supervisor_log(args);
    }
    // With `-n NAME` the one positional is the task (`skyc logs -n exp 0`).
    let mut args = args.clone();
    if args.by_name.name.is_some()
        && let Some(id) = args.id_or_task.take()
    {
        if args.task.is_some() {
            errln!("error: with -n NAME, give only the TASK");
            return USAGE;
        }
        args.task = Some(id);
    }
    match print(&args) {
        Ok(code) => code,
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

fn print(args: &Args) -> Result<u8, String> {
    let id = args
        .id_or_task
        .as_deref()
        .map(select::group_id)
        .transpose()?;
    let (dir, store) = args.state.open_supervised()?;
    let group = match select::one(&store, &dir, id, args.by_name.name.as_deref())? {
        Ok(group) => group,
        Err(missing) => {
            errln!("error: {}", missing.0);
            return Ok(NOT_FOUND);
        }
    };
    let tasks = store.tasks(group.id).map_err(|e| e.to_string())?;
    if args.task.is_none() && tasks.len() > 1 {
        errln!(
            "hint: group {} has {} tasks; `skyc logs {} TASK` shows one (TASK: a name or an \
             index)",
            group.id,
            tasks.len(),
            group.id
        );
    }
    let mut logs = Follower::new(&store, &dir, group.id, args.task.as_deref())?;
    let mut out = out::stdout();
    let group = if args.no_follow {
        group
    } else {
        loop {
            let now = store
                .group(group.id)
                .map_err(|e| e.to_string())?
                .ok_or("the group vanished from the store")?;
            logs.poll(&store, &mut out).map_err(|e| e.to_string())?;
            if now.finished_at_ms.is_some() {
                break now;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    logs.finish(&store, &mut out).map_err(|e| e.to_string())?;
    Ok(exit::of_group(
        &group.status,
        group.finished_at_ms.is_some(),
    ))
}

/// `logs --controller` of a local state directory: its supervisor's log,
/// as written so far.
fn supervisor_log(args: &Args) -> u8 {
    let path = args.state.dir().join("supervisor.log");
    match std::fs::File::open(&path) {
        Ok(mut file) => match std::io::copy(&mut file, &mut out::stdout()) {
            Ok(_) => exit::OK,
            Err(e) => {
                errln!("error: {}: {e}", path.display());
                USAGE
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            errln!(
                "skyc: no supervisor has run for {} yet",
                args.state.dir().display()
            );
            NOT_FOUND
        }
        Err(e) => {
            errln!("error: {}: {e}", path.display());
            USAGE
        }
    }
}
