//! `skyc run FILE`: run a group and supervise it.

use super::check::Color;
use super::follow::Follower;
use super::state::StateArgs;
use super::{INVALID, OK, USAGE, input, parse_env};
use clap::ValueEnum;
use skyc_compiler::render::{Format, render};
use skyc_compiler::{Options, compile};
use skyc_runtime::local::capacity::Capacity;
use skyc_runtime::local::network::{self, Mode};
use skyc_runtime::local::plan::{NetworkRequest, Plan, PlanOptions, run_timestamp};
use skyc_runtime::local::supervisor;
use skyc_runtime::store::{NewGroup, Store, now_ms};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Exit status: the group ran and did not succeed.
pub(crate) const GROUP_FAILED: u8 = 3;

/// Run a Job Group and supervise it until it ends.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The Job Group (or task) file; `-` reads standard input.
    #[arg(value_name = "FILE")]
    file: String,
    /// Where to run.
    #[arg(long, value_enum, default_value_t = Target::Local)]
    target: Target,
    /// Print the group id and return; the supervisor runs on.
    #[arg(short, long)]
    detach: bool,
    /// Give an environment variable a value, as `sky jobs launch --env` does.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// A value for one of the tasks' `secrets` (by default taken from the
    /// environment variable of the same name).
    #[arg(long = "secret", value_name = "KEY=VALUE", value_parser = parse_env)]
    secrets: Vec<(String, String)>,
    /// Time between SIGTERM and SIGKILL when a task is terminated.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    grace: f64,
    /// How nodes get their own address: namespaces (root), loopback
    /// addresses, or the best this machine allows.
    #[arg(long, value_enum, default_value_t = NetworkArg::Auto)]
    network: NetworkArg,
    #[command(flatten)]
    state: StateArgs,
    /// When to colour diagnostics.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    color: Color,
}

#[derive(Clone, Copy, ValueEnum)]
enum Target {
    /// This machine.
    Local,
}

#[derive(Clone, Copy, ValueEnum)]
enum NetworkArg {
    Auto,
    Netns,
    Loopback,
}

pub(crate) fn run(args: &Args) -> u8 {
    match submit(args) {
        Ok(Submitted::Invalid) => INVALID,
        Ok(Submitted::Group(_, gid)) if args.detach => {
            println!("{gid}");
            OK
        }
        Ok(Submitted::Group(dir, gid)) => follow(args, &dir, gid),
        Err(message) => {
            eprintln!("error: {message}");
            USAGE
        }
    }
}

enum Submitted {
    Invalid,
    Group(std::path::PathBuf, i64),
}

fn submit(args: &Args) -> Result<Submitted, String> {
    let Target::Local = args.target;
    if !(args.grace.is_finite() && args.grace >= 0.0) {
        return Err("--grace must be a number of seconds".into());
    }
    let (name, bytes) = input::read(&args.file)?;
    let options = Options {
        env: args.env.clone(),
    };
    let mut compilation = compile(&name, &bytes, &options);
    let color = args.color.enabled();
    let show = |c: &skyc_compiler::Compilation| {
        let text = render(Format::Human { color }, std::slice::from_ref(c));
        let _ = std::io::stderr().write_all(text.as_bytes());
    };
    let Some(group) = compilation.group.take() else {
        show(&compilation);
        return Ok(Submitted::Invalid);
    };
    let request = match args.network {
        NetworkArg::Auto => NetworkRequest::Auto,
        NetworkArg::Netns => NetworkRequest::Netns,
        NetworkArg::Loopback => NetworkRequest::Loopback,
    };
    let mode = network::resolve(request)?;
    let base_env: Vec<(String, String)> = std::env::vars().collect();
    let secrets: Vec<(String, String)> = args
        .secrets
        .iter()
        .cloned()
        .chain(group.tasks.iter().flat_map(|t| {
            t.secrets
                .iter()
                .filter_map(|s| Some((s.clone(), std::env::var(s).ok()?)))
        }))
        .collect();
    let base_dir = Path::new(&name)
        .parent()
        .filter(|_| args.file != "-")
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let base_dir = std::env::current_dir()
        .map(|cwd| cwd.join(&base_dir))
        .unwrap_or(base_dir);
    let capacity = Capacity::detect();
    let submitted_ms = now_ms();
    let (plan, diagnostics) = Plan::new(
        &group,
        &PlanOptions {
            grace: Duration::from_secs_f64(args.grace),
            network: request,
            base_env,
            secrets: &secrets,
            base_dir: &base_dir,
            submitted: run_timestamp(submitted_ms),
            capacity: &capacity,
        },
    );
    compilation.diagnostics.extend(diagnostics);
    compilation
        .diagnostics
        .sort_by_key(|d| (d.primary.span.start, d.rule));
    show(&compilation);
    let Some(plan) = plan else {
        return Ok(Submitted::Invalid);
    };
    if mode == Mode::LoopbackNoHosts && plan.hostnames_required {
        return Err(
            "`inter_connection: true` needs group hostnames, and this machine allows no \
             namespace to provide them (run as root, or enable unprivileged user namespaces)"
                .into(),
        );
    }
    if mode != Mode::Netns && plan.hostnames {
        eprintln!("note: nodes get {}", mode.describe());
    }
    let (dir, mut store) = args.state.open()?;
    let json = serde_json::to_string(&plan).map_err(|e| e.to_string())?;
    let tasks = plan
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), plan.primary(i)))
        .collect();
    let gid = store
        .insert_group(&NewGroup {
            name: &plan.group,
            source: &name,
            submitted_at_ms: submitted_ms,
            plan: &json,
            tasks,
        })
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    supervisor::wake(&dir).map_err(|e| format!("supervisor: {e}"))?;
    Ok(Submitted::Group(dir, gid))
}

/// Follows a running group: its statuses on stderr, its logs on stdout.
/// Ctrl-C cancels the group; a second Ctrl-C stops following.
fn follow(args: &Args, dir: &Path, gid: i64) -> u8 {
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(signal, Arc::clone(&interrupted));
    }
    let result = watch(args, dir, gid, &interrupted);
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            USAGE
        }
    }
}

fn watch(args: &Args, dir: &Path, gid: i64, interrupted: &AtomicBool) -> Result<u8, String> {
    let store = Store::open(dir).map_err(|e| e.to_string())?;
    let mut logs = Follower::new(&store, dir, gid, None)?;
    let mut shown: Vec<String> = Vec::new();
    let mut interrupts = 0;
    let mut stdout = std::io::stdout().lock();
    eprintln!("skyc: group {gid} submitted (Ctrl-C cancels it)");
    loop {
        let _ = logs.poll(&mut stdout);
        let group = store
            .group(gid)
            .map_err(|e| e.to_string())?
            .ok_or("the group vanished from the store")?;
        let tasks = store.tasks(gid).map_err(|e| e.to_string())?;
        for (i, task) in tasks.iter().enumerate() {
            let line = task.status.clone();
            if shown.get(i) != Some(&line) {
                eprintln!("skyc: {} {}", task.name, task.status);
                if i < shown.len() {
                    shown[i] = line;
                } else {
                    shown.push(line);
                }
            }
        }
        if group.finished_at_ms.is_some() {
            let _ = logs.finish(&mut stdout);
            eprintln!("skyc: group {gid} ({}) {}", group.name, group.status);
            return Ok(if group.status == "SUCCEEDED" {
                OK
            } else {
                GROUP_FAILED
            });
        }
        if interrupted.swap(false, Ordering::Relaxed) {
            interrupts += 1;
            if interrupts == 1 {
                eprintln!("skyc: cancelling group {gid} (Ctrl-C again to stop following)");
                let mut store = Store::open(dir).map_err(|e| e.to_string())?;
                store.request_cancel(gid).map_err(|e| e.to_string())?;
                supervisor::wake(dir).map_err(|e| format!("supervisor: {e}"))?;
            } else {
                eprintln!(
                    "skyc: stopped following; the group goes on (`skyc status {gid}`{})",
                    args.state
                        .state_dir
                        .as_ref()
                        .map(|d| format!(" --state-dir {}", d.display()))
                        .unwrap_or_default()
                );
                return Ok(GROUP_FAILED);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
