//! `skyc run FILE`: run a group and supervise it.

use super::exit::{self, FAILED, INVALID, NOT_FINISHED, OK, USAGE};
use super::follow::Follower;
use super::local::NetworkArg;
use super::out::{self, errln, outln};
use super::state::StateArgs;
use super::target::{self, Planners, RunInput, SubmitArgs};
use super::{input, parse_env, report};
use skyc_compiler::ir::Group;
use skyc_compiler::{Diagnostic, Rule};
use skyc_runtime::controller::remote::Remote;
use skyc_runtime::controller::submission::{Accepted, Record, Submission};
use skyc_runtime::files::Snapshots;
use skyc_runtime::store::{Backend, NewGroup, NewTask, Store, now_ms};
use skyc_runtime::supervisor;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Run a Job Group and supervise it until it ends.
///
/// Exit status: 0 SUCCEEDED, 100 FAILED, 101 no longer followed, 103
/// CANCELLED, 1 the file has errors.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The Job Group (or task) file; `-` reads standard input.
    #[arg(value_name = "FILE")]
    file: String,
    /// Where to run.
    #[arg(long, value_parser = target::parser(|d| d.runs_group), default_value = "local")]
    target: Backend,
    /// Print the group id and return; the supervisor runs on.
    #[arg(short, long)]
    detach: bool,
    /// The name `status`, `logs -n` and `cancel -n` know the run by
    /// [default: the group's `name`]. Hostnames keep the group's name.
    #[arg(short = 'n', long = "name", value_name = "NAME", value_parser = run_name)]
    name: Option<String>,
    /// Run on the workers of this pool (`skyc pool apply`), as
    /// `sky jobs launch --pool` does: the job's `setup` and file mounts
    /// are the pool's.
    #[arg(short = 'p', long = "pool", value_name = "NAME")]
    pool: Option<String>,
    /// Submit N jobs of the file, ranked 0..N-1 (`SKYPILOT_JOB_RANK`,
    /// `SKYPILOT_NUM_JOBS`): on the pool's workers with `--pool`, else each
    /// on its own.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    num_jobs: u32,
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
    /// How nodes get their own address (local): namespaces (root),
    /// loopback addresses, or the best this machine allows [default: auto].
    #[arg(long, value_enum)]
    network: Option<NetworkArg>,
    #[command(flatten)]
    submit: SubmitArgs,
}

pub(crate) fn run(args: &Args) -> u8 {
    match submit(args) {
        Ok(Submitted::Invalid) => INVALID,
        Ok(Submitted::Jobs(dir, ids)) => {
            if args.detach {
                for id in &ids {
                    outln!("{id}");
                }
                errln!(
                    "skyc: {} job{} submitted; `skyc status{}` lists them",
                    ids.len(),
                    report::plural(ids.len()),
                    state_dir_flag(args)
                );
                OK
            } else {
                super::jobs::follow(&dir, &ids, &state_dir_flag(args))
            }
        }
        Ok(Submitted::Group(dir, gid)) => {
            if args.detach && args.target.descriptor().detach_waits {
                wait_applied(&dir, gid);
            }
            // The supervisor answered once it took the group on: a group
            // that could not start (sbatch refused it, say) has ended.
            if let Some(error) = start_error(&dir, gid) {
                errln!("error: group {gid} could not start: {error}");
                return FAILED;
            }
            if args.detach {
                outln!("{gid}");
                print_next_steps(args, gid);
                OK
            } else {
                follow(args, &dir, gid)
            }
        }
        Ok(Submitted::RemoteJobs(remote, ids)) => {
            if args.detach {
                for id in &ids {
                    outln!("{id}");
                }
                errln!(
                    "skyc: {} job{} submitted to the controller {remote}; `skyc status{}` lists \
                     them",
                    ids.len(),
                    report::plural(ids.len()),
                    state_dir_flag(args)
                );
                return OK;
            }
            let follow: Vec<String> = ["controller".to_owned(), "follow".to_owned()]
                .into_iter()
                .chain(ids.iter().map(i64::to_string))
                .collect();
            on_controller(&remote, &follow)
        }
        Ok(Submitted::Remote(remote, gid)) => {
            if args.detach {
                outln!("{gid}");
                print_next_steps(args, gid);
                return OK;
            }
            errln!(
                "skyc: group {gid} submitted to the controller {remote} (Ctrl-C stops following; \
                 the group goes on)"
            );
            let follow = ["logs".to_owned(), gid.to_string(), "--follow".to_owned()];
            on_controller(&remote, &follow)
        }
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

/// Runs `skyc ARGS` on the controller, its output here; its exit status.
fn on_controller(remote: &Remote, args: &[String]) -> u8 {
    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    match remote.run(args, &mut stdout, &mut stderr) {
        Ok(code) => u8::try_from(code).unwrap_or(USAGE),
        Err(message) => {
            errln!("error: {message}");
            USAGE
        }
    }
}

/// Waits (a minute at most) until the group exists on its cluster or has
/// ended.
fn wait_applied(dir: &Path, gid: i64) {
    let Ok(store) = Store::open(dir) else {
        return;
    };
    for _ in 0..1200 {
        match store.group(gid) {
            Ok(Some(g)) if g.job.is_none() && g.finished_at_ms.is_none() => {}
            _ => return,
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn start_error(dir: &Path, gid: i64) -> Option<String> {
    let group = Store::open(dir).ok()?.group(gid).ok()??;
    group.finished_at_ms?;
    group.error
}

pub(super) enum Submitted {
    Invalid,
    Group(std::path::PathBuf, i64),
    /// `--pool` or `--num-jobs`: jobs, in rank order.
    Jobs(std::path::PathBuf, Vec<i64>),
    /// Recorded by a controller.
    Remote(Remote, i64),
    /// Jobs recorded by a controller, in rank order.
    RemoteJobs(Remote, Vec<i64>),
}

fn submit(args: &Args) -> Result<Submitted, String> {
    // A day is longer than any grace period a cluster honours.
    if !(args.grace.is_finite() && (0.0..=86_400.0).contains(&args.grace)) {
        return Err("--grace must be a number of seconds from 0 to 86400".into());
    }
    let remote = args.submit.state.remote()?;
    let mut backends = args.submit.backends.clone();
    if let Some(k8s) = remote.as_ref().and_then(Remote::k8s) {
        backends.k8s.for_controller(k8s)?;
    }
    let planners = Planners::new(args.network, &backends);
    let planner = planners.of(args.target)?;
    let (name, mut compilation) = input::compile(&args.file, &args.env)?;
    let color = args.submit.color.enabled();
    let show =
        |c: &skyc_compiler::Compilation| report::human(std::slice::from_ref(c), color, false);
    let Some(group) = compilation.group.take() else {
        show(&compilation);
        return Ok(Submitted::Invalid);
    };
    if let Some(pool) = &group.pool {
        // A pool is applied, then jobs are submitted to it.
        compilation.diagnostics.push(
            Diagnostic::new(
                Rule::RunPoolFile,
                pool.span,
                "this is a pool file: `skyc run` runs jobs, and a pool is not one",
            )
            .label("a pool of workers")
            .help(
                "apply the pool with `skyc pool apply -p NAME FILE`, then submit jobs to it with \
                 `skyc run --pool NAME JOB.yaml`; to run this task as a job, remove `pool`",
            ),
        );
        compilation
            .diagnostics
            .sort_by_key(|d| (d.primary.span.start, d.rule));
        show(&compilation);
        return Ok(Submitted::Invalid);
    }
    let secrets = secret_values(&args.secrets, &group);
    if remote.is_some() && args.pool.is_none() && args.num_jobs > 1 {
        return Err(
            "`--num-jobs` without `--pool` runs its jobs on this machine, not through a \
                    controller: give a local --state-dir, or apply a pool there and submit \
                    them with `--pool`"
                .into(),
        );
    }
    // A pool's jobs run where the pool is (`jobs::Submission`).
    if remote.is_some() && args.pool.is_none() {
        let runs = match remote.as_ref().map(Remote::target) {
            Some("aws") => Backend::Aws,
            _ => Backend::Kubernetes,
        };
        if args.target != runs {
            return Err(format!(
                "the controller {} runs groups of --target {}, not {}",
                remote.as_ref().map(ToString::to_string).unwrap_or_default(),
                runs.as_str(),
                args.target.as_str()
            ));
        }
    }
    let state_dir = args.submit.state.dir();
    // A pool's jobs are given the pool's files.
    let mut taken = super::files::take(
        &group,
        args.target,
        &state_dir,
        args.pool.is_none(),
        planner.mounting(),
    )?;
    if taken.refuses(&mut compilation, show) {
        return Ok(Submitted::Invalid);
    }
    let run = RunInput {
        group: &group,
        grace: args.grace,
        secrets: &secrets,
        submitted_ms: now_ms(),
        source: &name,
        state_dir: &state_dir,
        files: &taken.files,
    };
    if args.pool.is_some() || args.num_jobs > 1 {
        let jobs = super::jobs::Submission {
            run_name: args.name.as_deref(),
            pool: args.pool.as_deref(),
            num_jobs: args.num_jobs,
            target: args.target,
            planners: &planners,
            state: &args.submit.state,
        };
        let submitted = jobs.submit(compilation, &run, &show);
        if matches!(submitted, Ok(Submitted::Jobs(..))) {
            taken.recorded();
        }
        return submitted;
    }
    let Some(plan) = planner.group(&run)?.conclude(&mut compilation, &run, show) else {
        return Ok(Submitted::Invalid);
    };
    let new = NewGroup {
        name: args.name.as_deref().unwrap_or(&group.name),
        source: &name,
        submitted_at_ms: run.submitted_ms,
        plan: &plan,
        backend: args.target,
        snapshots: &taken.files.digests(),
        buckets: &taken.files.bucket_names(),
        tasks: NewTask::of(&group),
    };
    if let Some(remote) = remote {
        // A controller SkyPilot's configuration asks for is made on the
        // first run that needs it.
        super::controller::ensure(&remote, &backends.aws)?;
        // Planned here, where the files are; recorded and supervised
        // there.
        let record = Record::Group(Submission::of(&new));
        let accepted = remote.submit(&record, &Snapshots::of(&state_dir));
        // Not recorded here: the snapshots taken on this machine go with
        // `taken` (the controller holds its own), and so does a run's
        // SSH key (the controller makes its own).
        drop(taken);
        if let Some(run) = serde_json::from_str::<serde_json::Value>(&plan)
            .ok()
            .and_then(|p| p["run"].as_str().map(str::to_owned))
            .filter(|r| args.target == Backend::Aws && skyc_runtime::aws::valid_run(r))
        {
            let _ = std::fs::remove_dir_all(state_dir.join("aws").join(run));
        }
        return match accepted? {
            Accepted::Group(gid) => Ok(Submitted::Remote(remote, gid)),
            other => Err(format!("the controller {remote} answered {other:?}")),
        };
    }
    let (dir, mut store) = args.submit.state.open()?;
    let gid = store
        .insert_group(&new)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    taken.recorded();
    supervisor::wake(&dir).map_err(|e| format!("supervisor: {e}"))?;
    Ok(Submitted::Group(dir, gid))
}

/// The values of the tasks' secrets: `--secret` first, then the
/// submitting environment.
pub(super) fn secret_values(given: &[(String, String)], group: &Group) -> Vec<(String, String)> {
    given
        .iter()
        .cloned()
        .chain(group.tasks.iter().flat_map(|t| {
            t.secrets
                .iter()
                .filter_map(|s| Some((s.clone(), std::env::var(s).ok()?)))
        }))
        .collect()
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
            errln!("error: {message}");
            USAGE
        }
    }
}

/// `-n`: any name a table cell and a shell argument can carry.
fn run_name(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 253 || s.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("a name has 1 to 253 characters, none of them white space".into());
    }
    Ok(s.to_owned())
}

/// After `-d`: how to follow, inspect and cancel the group (on stderr;
/// stdout carries only the id, for scripts).
fn print_next_steps(args: &Args, gid: i64) {
    let state = state_dir_flag(args);
    errln!("skyc: group {gid} submitted");
    errln!("  follow its logs:  skyc logs {gid}{state}");
    errln!("  see its status:   skyc status {gid}{state}");
    errln!("  cancel it:        skyc cancel {gid}{state}");
}

/// ` --state-dir DIR` as a shell word, when the user gave one: the hints
/// that name commands to run must be pasteable.
pub(super) fn state_dir_flag_of(state: &StateArgs) -> String {
    state
        .state_dir
        .as_ref()
        .map(|d| {
            format!(
                " --state-dir {}",
                skyc_targets::shell::quote(&d.to_string_lossy())
            )
        })
        .unwrap_or_default()
}

fn state_dir_flag(args: &Args) -> String {
    state_dir_flag_of(&args.submit.state)
}

fn watch(args: &Args, dir: &Path, gid: i64, interrupted: &AtomicBool) -> Result<u8, String> {
    let store = Store::open(dir).map_err(|e| e.to_string())?;
    let mut logs = Follower::new(&store, dir, gid, None)?;
    let mut shown: Vec<String> = Vec::new();
    let mut interrupts = 0;
    let mut stdout = out::stdout();
    let on = store
        .group(gid)
        .ok()
        .flatten()
        .and_then(|g| {
            g.job
                .map(|job| format!(" to {} as job {job}", g.backend.as_str()))
        })
        .unwrap_or_default();
    errln!("skyc: group {gid} submitted{on} (Ctrl-C cancels it)");
    loop {
        logs.poll(&store, &mut stdout).map_err(|e| e.to_string())?;
        let group = store
            .group(gid)
            .map_err(|e| e.to_string())?
            .ok_or("the group vanished from the store")?;
        let tasks = store.tasks(gid).map_err(|e| e.to_string())?;
        for (i, task) in tasks.iter().enumerate() {
            let line = task.status.clone();
            if shown.get(i) != Some(&line) {
                errln!("skyc: {} {}", task.name, task.status);
                if i < shown.len() {
                    shown[i] = line;
                } else {
                    shown.push(line);
                }
            }
        }
        if group.finished_at_ms.is_some() {
            logs.finish(&store, &mut stdout)
                .map_err(|e| e.to_string())?;
            if let Some(error) = &group.error {
                errln!("skyc: error: {error}");
            }
            errln!("skyc: group {gid} ({}) {}", group.name, group.status);
            return Ok(exit::of_group(&group.status, true));
        }
        if interrupted.swap(false, Ordering::Relaxed) {
            interrupts += 1;
            if interrupts == 1 {
                errln!("skyc: cancelling group {gid} (Ctrl-C again to stop following)");
                let mut store = Store::open(dir).map_err(|e| e.to_string())?;
                store.request_cancel(gid).map_err(|e| e.to_string())?;
                supervisor::wake(dir).map_err(|e| format!("supervisor: {e}"))?;
            } else {
                errln!(
                    "skyc: stopped following; the group goes on (`skyc status {gid}`{})",
                    state_dir_flag(args)
                );
                return Ok(NOT_FINISHED);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
