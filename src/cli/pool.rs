//! `skyc pool apply|status|down`: pools of warm workers, as `sky jobs pool`
//! has them. Jobs are submitted to a pool with `skyc run --pool NAME`.

use super::exit::{INVALID, NOT_FOUND, OK, USAGE};
use super::local::NetworkArg;
use super::out::{self, errln, out, outln};
use super::run::secret_values;
use super::state::StateArgs;
use super::table::{self, Table};
use super::target::{self, PlannedPool, Planners, RunInput, SubmitArgs};
use super::{input, parse_env, report};
use serde_json::json;
use skyc_compiler::{Diagnostic, Rule};
use skyc_runtime::controller::submission::{Accepted, Record, Submission};
use skyc_runtime::files::Snapshots;
use skyc_runtime::pool::admission::{self, Applied};
use skyc_runtime::pool::{Pool, WorkerState};
use skyc_runtime::store::{Backend, GroupRow, Kind, NewGroup, Store, now_ms};
use skyc_runtime::supervisor::{self, PoolRequest};
use std::collections::BTreeMap;

#[derive(clap::Subcommand)]
pub(crate) enum Command {
    Apply(Box<ApplyArgs>),
    Status(StatusArgs),
    Down(DownArgs),
}

/// Create a pool from a pool file, or update the pool of that name: a
/// change of `pool:` alone resizes it in place; a change of what workers
/// are made of starts new workers and retires the old ones as they become
/// idle.
#[derive(clap::Args)]
pub(crate) struct ApplyArgs {
    /// The pool's name.
    #[arg(short = 'p', long = "pool", value_name = "NAME", value_parser = pool_name)]
    pool: String,
    /// The pool file: one task with a `pool` section.
    #[arg(value_name = "FILE", required_unless_present = "workers")]
    file: Option<String>,
    /// Resize an existing pool to N workers, without a file.
    #[arg(long, value_name = "N", conflicts_with = "file")]
    workers: Option<u32>,
    /// Where its workers run.
    #[arg(long, value_parser = target::parser(|d| d.runs_pool), default_value = "local")]
    target: Backend,
    /// Give an environment variable of the workers a value.
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// A value for one of the pool's `secrets`.
    #[arg(long = "secret", value_name = "KEY=VALUE", value_parser = parse_env)]
    secrets: Vec<(String, String)>,
    /// How workers get their own address (local) [default: auto].
    #[arg(long, value_enum)]
    network: Option<NetworkArg>,
    #[command(flatten)]
    submit: SubmitArgs,
}

/// Show pools: their workers and the jobs on them.
#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    /// The pools to show [default: every live pool].
    #[arg(value_name = "NAME")]
    names: Vec<String>,
    /// Pools that are down too.
    #[arg(short, long)]
    all: bool,
    /// Print a JSON array of pools.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    state: StateArgs,
}

/// Take pools down: their jobs are cancelled, their workers terminated.
#[derive(clap::Args)]
pub(crate) struct DownArgs {
    /// The pools to take down.
    #[arg(value_name = "NAME", required_unless_present = "all")]
    names: Vec<String>,
    /// Every live pool.
    #[arg(short, long, conflicts_with = "names")]
    all: bool,
    #[command(flatten)]
    state: StateArgs,
}

impl ApplyArgs {
    /// Whether a pool file is applied (else the pool is resized).
    pub(crate) fn has_file(&self) -> bool {
        self.file.is_some()
    }
}

pub(crate) fn run(command: &Command) -> u8 {
    let result = match command {
        Command::Apply(a) => apply(a),
        Command::Status(a) => status(a),
        Command::Down(a) => down(a),
    };
    result.unwrap_or_else(|message| {
        errln!("error: {message}");
        USAGE
    })
}

/// A pool's name: what SkyPilot takes for a cluster name, since workers are
/// named `{pool}-{n}` after it.
fn pool_name(s: &str) -> Result<String, String> {
    let ok = s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && !s.ends_with(['-', '_', '.']);
    if ok {
        Ok(s.to_owned())
    } else {
        Err(
            "a pool name starts with a letter and has letters, digits, `-`, `_` and `.` \
             (at most 63, not ending with punctuation)"
                .into(),
        )
    }
}

fn apply(args: &ApplyArgs) -> Result<u8, String> {
    let Some(file) = &args.file else {
        return resize(args, args.workers.unwrap_or(0));
    };
    let remote = args.submit.state.remote()?;
    let mut backends = args.submit.backends.clone();
    if let Some(remote) = &remote {
        if remote.target() != args.target.as_str() {
            return Err(format!(
                "the controller {remote} runs pools of --target {}, not {}",
                remote.target(),
                args.target.as_str()
            ));
        }
        if let Some(k8s) = remote.k8s() {
            backends.k8s.for_controller(k8s)?;
        }
    }
    let planners = Planners::new(args.network, &backends);
    let planner = planners.of(args.target)?;
    // Said before planning, here; the controller says it of its own.
    if remote.is_none() {
        let (_, store) = args.submit.state.open()?;
        admission::applicable(&store, &args.pool, args.target)?;
    }
    let (name, mut compilation) = input::compile(file, &args.env)?;
    let color = args.submit.color.enabled();
    let show =
        |c: &skyc_compiler::Compilation| report::human(std::slice::from_ref(c), color, false);
    let Some(group) = compilation.group.take() else {
        show(&compilation);
        return Ok(INVALID);
    };
    let Some(pool) = group.pool.clone() else {
        let at = group
            .tasks
            .first()
            .map(|t| t.name_span)
            .or(group.name_span)
            .unwrap_or_default();
        compilation.diagnostics.push(
            Diagnostic::new(
                Rule::ApplyJobFile,
                at,
                "this is not a pool file: it has no `pool` section",
            )
            .label("a task, not a pool")
            .help(
                "a pool file is one task with `pool: {workers: N}`; to run this file as a job, \
                 use `skyc run` (with `--pool NAME` to run it on a pool's workers)",
            ),
        );
        show(&compilation);
        return Ok(INVALID);
    };
    let secrets = secret_values(&args.secrets, &group);
    let state_dir = args.submit.state.dir();
    let mut taken = super::files::take(&group, args.target, &state_dir, true, planner.mounting())?;
    if taken.refuses(&mut compilation, show) {
        return Ok(INVALID);
    }
    let run = RunInput {
        group: &group,
        grace: 10.0,
        secrets: &secrets,
        submitted_ms: now_ms(),
        source: &name,
        state_dir: &state_dir,
        files: &taken.files,
    };
    let PlannedPool { planned, size } = planner.pool(&run, &args.pool, &pool)?;
    let Some(json) = planned.conclude(&mut compilation, &run, show) else {
        return Ok(INVALID);
    };
    let new = NewGroup {
        name: &args.pool,
        source: &name,
        submitted_at_ms: run.submitted_ms,
        plan: &json,
        backend: args.target,
        snapshots: &taken.files.digests(),
        buckets: &taken.files.bucket_names(),
        tasks: Vec::new(),
    };
    let applied = match &remote {
        Some(remote) => {
            // A controller SkyPilot's configuration asks for is made on
            // the first pool that needs it, as on the first run.
            super::controller::ensure(remote, &args.submit.backends.aws)?;
            // The controller holds its own snapshots.
            let record = Record::Pool(Submission::of(&new));
            let accepted = remote.submit(&record, &Snapshots::of(&state_dir));
            drop(taken);
            match accepted? {
                Accepted::Pool(applied) => applied,
                other => return Err(format!("the controller {remote} answered {other:?}")),
            }
        }
        None => {
            let (dir, mut store) = args.submit.state.open()?;
            let applied = admission::apply(&mut store, &new)
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            taken.recorded();
            supervisor::wake(&dir).map_err(|e| format!("supervisor: {e}"))?;
            applied
        }
    };
    match applied {
        Applied::Updated(_) => errln!("skyc: pool `{}` updated ({size})", args.pool),
        Applied::Created(id) => {
            errln!("skyc: pool `{}` created ({size}; pool {id})", args.pool);
        }
    }
    let state = super::run::state_dir_flag_of(&args.submit.state);
    errln!("  its workers:     skyc pool status {}{state}", args.pool);
    errln!(
        "  submit jobs:     skyc run --pool {} [--num-jobs N] JOB.yaml{state}",
        args.pool
    );
    errln!("  take it down:    skyc pool down {}{state}", args.pool);
    Ok(OK)
}

/// `pool apply --workers N`: the live pool resized, whatever its target.
fn resize(args: &ApplyArgs, n: u32) -> Result<u8, String> {
    let (dir, mut store) = args.submit.state.open()?;
    let live = store.live_pool(&args.pool).map_err(|e| e.to_string())?;
    if let Some(pool) = &live {
        admission::not_going_down(pool)?;
    }
    let Some(pool) = live else {
        errln!(
            "error: no pool named `{}`; `skyc pool apply -p {} FILE` creates it",
            args.pool,
            args.pool
        );
        return Ok(NOT_FOUND);
    };
    let request = serde_json::to_string(&PoolRequest::Workers(n)).map_err(|e| e.to_string())?;
    if !store
        .request(pool.id, &request)
        .map_err(|e| e.to_string())?
    {
        return Err(format!("pool `{}` went down meanwhile", args.pool));
    }
    supervisor::wake(&dir).map_err(|e| format!("supervisor: {e}"))?;
    errln!("skyc: pool `{}` resized to {n} workers", args.pool);
    Ok(OK)
}

/// A pool and what `status` shows of it.
pub(crate) struct Shown {
    row: GroupRow,
    engine: Option<Pool>,
    workers: Vec<GroupRow>,
    /// Worker number to its address.
    addresses: BTreeMap<i64, String>,
    /// Worker group to why it waits, and since when.
    waiting: BTreeMap<i64, (String, i64)>,
    jobs: Vec<GroupRow>,
}

fn status(args: &StatusArgs) -> Result<u8, String> {
    let (dir, store) = args.state.open_supervised()?;
    let rows = store.pools(args.all).map_err(|e| e.to_string())?;
    let mut code = OK;
    for name in &args.names {
        if !rows.iter().any(|p| &p.name == name) {
            errln!("error: no pool named `{name}` in {}", dir.display());
            code = NOT_FOUND;
        }
    }
    let rows: Vec<GroupRow> = rows
        .into_iter()
        .filter(|p| args.names.is_empty() || args.names.contains(&p.name))
        .collect();
    let shown = rows
        .into_iter()
        .map(|row| read(&store, row))
        .collect::<Result<Vec<_>, String>>()?;
    if args.json {
        let value: Vec<_> = shown.iter().map(pool_json).collect();
        out::json(&value);
        return Ok(code);
    }
    if shown.is_empty() {
        errln!("No pools in {}.", dir.display());
        return Ok(code);
    }
    let now = now_ms();
    out!("{}", pools_table(&shown, now).render());
    for s in &shown {
        if let Some(error) = s.row.error.as_ref().filter(|_| s.row.status == "FAILED") {
            outln!("\npool `{}`: {error}", s.row.name);
        }
    }
    for s in &shown {
        if s.workers.is_empty() {
            continue;
        }
        outln!("\nPool `{}` workers:", s.row.name);
        out!("{}", workers_table(s).render());
    }
    Ok(code)
}

/// Reads what `pool status` (and the dashboard) shows of a pool.
pub(crate) fn read(store: &Store, row: GroupRow) -> Result<Shown, String> {
    let engine = store
        .runtime_state(row.id)
        .map_err(|e| e.to_string())?
        .engine
        .and_then(|text| serde_json::from_str::<Pool>(&text).ok());
    let live = row.finished_at_ms.is_none();
    let workers = store
        .members(row.id, Kind::Worker, !live)
        .map_err(|e| e.to_string())?;
    let mut addresses = BTreeMap::new();
    let mut waiting = BTreeMap::new();
    for w in &workers {
        let task = store.tasks(w.id).map_err(|e| e.to_string())?;
        if let Some(t) = task.into_iter().next()
            && let (Some(why), Some(since)) = (t.waiting, t.waiting_since_ms)
        {
            waiting.insert(w.id, (why, since));
        }
        let ips: Vec<String> = store
            .nodes(w.id)
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|n| n.ip)
            .filter(|ip| !ip.is_empty())
            .collect();
        addresses.insert(w.id, ips.join(","));
    }
    let jobs = store
        .members(row.id, Kind::Group, false)
        .map_err(|e| e.to_string())?;
    Ok(Shown {
        row,
        engine,
        workers,
        addresses,
        waiting,
        jobs,
    })
}

/// The engine's view of a worker row: its state and jobs.
fn worker_view<'a>(s: &'a Shown, w: &GroupRow) -> Option<&'a skyc_runtime::pool::Worker> {
    let id = u32::try_from(w.rank?).ok()?;
    s.engine.as_ref()?.workers().get(&id)
}

fn pools_table(shown: &[Shown], now: i64) -> Table {
    let mut t = Table::new(&[
        "ID",
        "NAME",
        "WORKERS",
        "JOBS",
        "PENDING",
        "SUBMITTED",
        "STATUS",
        "SIZE",
    ]);
    for s in shown {
        let ready = s.engine.as_ref().map_or(0, |e| {
            e.workers()
                .values()
                .filter(|w| w.state == WorkerState::Ready)
                .count()
        });
        let target = s.engine.as_ref().map_or(0, Pool::target);
        let pending = s.engine.as_ref().map_or(0, |e| e.waiting().count());
        let size = s
            .engine
            .as_ref()
            .map(|e| e.spec().scaling.describe())
            .unwrap_or_default();
        t.row(vec![
            s.row.id.to_string(),
            s.row.name.clone(),
            format!("{ready}/{target}"),
            s.jobs.len().to_string(),
            pending.to_string(),
            table::ago(now, s.row.submitted_at_ms),
            s.row.status.clone(),
            size,
        ]);
    }
    t
}

fn workers_table(s: &Shown) -> Table {
    let mut t = Table::new(&[
        "WORKER",
        "NAME",
        "STATUS",
        "ADDRESS",
        "RESOURCES",
        "JOBS",
        "DETAILS",
    ]);
    let now = skyc_runtime::store::now_ms();
    let offer = s
        .engine
        .as_ref()
        .map(|e| e.spec().offer.describe())
        .unwrap_or_default();
    for w in &s.workers {
        let view = worker_view(s, w);
        t.row(vec![
            w.rank.map_or_else(|| "-".into(), |r| r.to_string()),
            w.name.clone(),
            worker_status(w, view),
            s.addresses
                .get(&w.id)
                .filter(|a| !a.is_empty())
                .cloned()
                .unwrap_or_else(|| "-".into()),
            offer.clone(),
            view.map(|v| {
                v.jobs
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .filter(|j| !j.is_empty())
            .unwrap_or_else(|| "-".into()),
            s.waiting
                .get(&w.id)
                .map(|(why, since)| super::table::waiting(now, why, *since))
                .unwrap_or_default(),
        ]);
    }
    t
}

/// SkyPilot's worker statuses (PENDING, STARTING, READY, SHUTTING_DOWN),
/// or how the worker's group ended.
fn worker_status(w: &GroupRow, view: Option<&skyc_runtime::pool::Worker>) -> String {
    if w.finished_at_ms.is_some() {
        return w.status.clone();
    }
    match view.map(|v| v.state) {
        Some(WorkerState::Ready) => "READY".into(),
        Some(WorkerState::Retiring) => "SHUTTING_DOWN".into(),
        Some(WorkerState::Launching) if w.status == "PENDING" => "PENDING".into(),
        Some(WorkerState::Launching) => "STARTING".into(),
        None => w.status.clone(),
    }
}

/// A pool as `pool status --json` prints it (and the dashboard serves it).
pub(crate) fn pool_json(s: &Shown) -> serde_json::Value {
    let e = s.engine.as_ref();
    json!({
        "id": s.row.id,
        "name": s.row.name,
        "status": s.row.status,
        "error": s.row.error.as_ref().filter(|_| s.row.status == "FAILED"),
        "source": s.row.source,
        "submitted_at_ms": s.row.submitted_at_ms,
        "finished_at_ms": s.row.finished_at_ms,
        "target_workers": e.map(Pool::target),
        "size": e.map(|e| e.spec().scaling.describe()),
        "resources": e.map(|e| e.spec().offer),
        "pending_jobs": e.map(|e| e.waiting().collect::<Vec<_>>()).unwrap_or_default(),
        "jobs": s.jobs.iter().map(|j| json!({
            "id": j.id,
            "name": j.name,
            "rank": j.rank,
            "status": j.status,
        })).collect::<Vec<_>>(),
        "workers": s.workers.iter().map(|w| {
            let view = worker_view(s, w);
            json!({
                "worker": w.rank,
                "group": w.id,
                "name": w.name,
                "status": worker_status(w, view),
                "address": s.addresses.get(&w.id),
                "waiting": s.waiting.get(&w.id).map(|(why, since)| json!({
                    "why": why,
                    "since_ms": since,
                })),
                "jobs": view.map(|v| v.jobs.iter().copied().collect::<Vec<_>>())
                    .unwrap_or_default(),
            })
        }).collect::<Vec<_>>(),
    })
}

fn down(args: &DownArgs) -> Result<u8, String> {
    let (dir, mut store) = args.state.open()?;
    let pools: Vec<GroupRow> = if args.all {
        store.pools(false).map_err(|e| e.to_string())?
    } else {
        let mut found = Vec::new();
        for name in &args.names {
            match store.live_pool(name).map_err(|e| e.to_string())? {
                Some(p) => found.push(p),
                None => {
                    errln!("error: no live pool named `{name}` in {}", dir.display());
                    return Ok(NOT_FOUND);
                }
            }
        }
        found
    };
    if pools.is_empty() {
        errln!("skyc: no live pool; nothing to take down");
        return Ok(OK);
    }
    for p in &pools {
        // Its jobs first: a job is never left waiting on a pool going down.
        let jobs = store
            .members(p.id, Kind::Group, false)
            .map_err(|e| e.to_string())?;
        for job in &jobs {
            store.request_cancel(job.id).map_err(|e| e.to_string())?;
        }
        store.request_cancel(p.id).map_err(|e| e.to_string())?;
        errln!(
            "skyc: taking pool `{}` down ({} job{} cancelled)",
            p.name,
            jobs.len(),
            report::plural(jobs.len())
        );
    }
    supervisor::wake(&dir).map_err(|e| format!("supervisor: {e}"))?;
    Ok(OK)
}
