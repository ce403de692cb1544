//! `skyc run --pool NAME` and `--num-jobs N`: several jobs of one file,
//! ranked, on a pool's workers or each on its own; and following them.

use super::exit::{self, NOT_FINISHED, USAGE};
use super::follow::Follower;
use super::out::{self, errln};
use super::run::Submitted;
use super::state::StateArgs;
use super::target::{Jobs, ON_THIS_MACHINE, Planners, RunInput};
use skyc_compiler::ir::{Group, Task};
use skyc_compiler::{Compilation, Diagnostic, Rule};
use skyc_runtime::controller::submission::{self, Accepted, Record};
use skyc_runtime::files::Snapshots;
use skyc_runtime::local::capacity::Demand;
use skyc_runtime::pool::admission;
use skyc_runtime::pool::{JobSpec, PoolSpec, Room};
use skyc_runtime::store::{Backend, GroupRow, NewGroup, NewTask, Store};
use skyc_runtime::supervisor;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What `run` was given for jobs.
pub(super) struct Submission<'a> {
    pub(super) run_name: Option<&'a str>,
    pub(super) pool: Option<&'a str>,
    pub(super) num_jobs: u32,
    pub(super) target: Backend,
    pub(super) planners: &'a Planners<'a>,
    pub(super) state: &'a StateArgs,
}

impl Submission<'_> {
    /// Plans the jobs, shows what planning found, and records them: here,
    /// or on the controller the state directory names (planned here
    /// against the pool it holds).
    pub(super) fn submit(
        &self,
        mut compilation: Compilation,
        run: &RunInput<'_>,
        show: &dyn Fn(&Compilation),
    ) -> Result<Submitted, String> {
        let group = run.group;
        if self.target != Backend::Local {
            return Err(match self.pool {
                Some(_) => "a pool's jobs run where the pool is: drop `--target`".into(),
                None => ON_THIS_MACHINE.into(),
            });
        }
        let remote = self.state.remote()?;
        let pool = match (self.pool, &remote) {
            (Some(name), Some(remote)) => Some(remote.pool(name)?),
            (Some(name), None) => {
                let (_, store) = self.state.open()?;
                Some(admission::for_jobs(&store, name)?)
            }
            (None, _) => None,
        };
        let mut room = None;
        if let Some(pool) = &pool {
            let (fit, found) = fit(group, &pool.name, &pool.plan.pool);
            room = fit;
            compilation.diagnostics.extend(found);
        }
        // On the pool's backend, else on this machine.
        let backend = pool.as_ref().map_or(Backend::Local, |p| p.backend);
        let spec = |rank| JobSpec {
            room,
            rank,
            num_jobs: self.num_jobs,
        };
        let jobs = Jobs {
            pool: pool.as_ref().map(|p| &p.plan),
            num_jobs: self.num_jobs,
            spec: &spec,
        };
        let planned = self.planners.get(backend).jobs(run, &jobs)?;
        let Some(plans) = planned.conclude(&mut compilation, run, show) else {
            return Ok(Submitted::Invalid);
        };
        let name = self.run_name.unwrap_or(&group.name);
        let snapshots = run.files.digests();
        let buckets = run.files.bucket_names();
        let jobs: Vec<NewGroup<'_>> = plans
            .iter()
            .map(|plan| NewGroup {
                name,
                source: run.source,
                submitted_at_ms: run.submitted_ms,
                plan,
                backend,
                snapshots: &snapshots,
                buckets: &buckets,
                tasks: NewTask::of(group),
            })
            .collect();
        let planned_on = pool.as_ref().map(|p| (p.id, p.name.as_str()));
        if let Some(remote) = remote {
            let record = Record::Jobs(submission::Jobs {
                pool: planned_on.map(|(id, name)| (id, name.to_owned())),
                num_jobs: self.num_jobs,
                jobs: jobs.iter().map(submission::Submission::of).collect(),
            });
            return match remote.submit(&record, &Snapshots::of(run.state_dir))? {
                Accepted::Jobs(ids) => Ok(Submitted::RemoteJobs(remote, ids)),
                other => Err(format!("the controller {remote} answered {other:?}")),
            };
        }
        let (dir, mut store) = self.state.open()?;
        let ids = admission::record_jobs(&mut store, planned_on, self.num_jobs, jobs)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        supervisor::wake(&dir).map_err(|e| format!("supervisor: {e}"))?;
        Ok(Submitted::Jobs(dir, ids))
    }
}

/// Whether a job fits the pool's workers: one task, no more nodes than a
/// worker has, resources a worker's node offers. What it takes of a
/// worker (`None`: a whole one, as it names no resources), and the
/// findings: errors where it does not fit, warnings for what the pool
/// ignores.
fn fit(group: &Group, pool: &str, spec: &PoolSpec) -> (Option<Room>, Vec<Diagnostic>) {
    let mut found = Vec::new();
    let at = group.name_span.or(group.tasks.first().map(|t| t.name_span));
    if group.tasks.len() != 1 {
        found.push(
            Diagnostic::new(
                Rule::PoolJobMisfit,
                at.unwrap_or_default(),
                format!(
                    "a job submitted to a pool is one task; this file has {}",
                    group.tasks.len()
                ),
            )
            .label("Job Groups and pipelines do not run on pools")
            .help("submit each task as a job of its own, or run the file without `--pool`"),
        );
        return (None, found);
    }
    let task = &group.tasks[0];
    let offer = spec.offer;
    if task.num_nodes > spec.nodes {
        found.push(
            Diagnostic::new(
                Rule::PoolJobMisfit,
                task.name_span,
                format!(
                    "job `{}` runs on {} nodes; a worker of pool `{pool}` has {}",
                    task.name, task.num_nodes, spec.nodes
                ),
            )
            .label("this job"),
        );
    }
    for ignored in ignored(task) {
        found.push(
            Diagnostic::new(
                Rule::PoolJobIgnored,
                task.name_span,
                format!("job `{}`: {ignored}", task.name),
            )
            .label("this job"),
        );
    }
    let names_resources = task
        .resources
        .candidates
        .iter()
        .any(|c| c.cpus.is_some() || c.memory_gb.is_some() || c.accelerator.is_some());
    if !names_resources {
        return (None, found);
    }
    let asks: Vec<Room> = task
        .resources
        .candidates
        .iter()
        .map(|c| {
            let d = Demand::of(c);
            Room {
                cpus: d.cpus,
                memory_gb: d.memory_gb,
                gpus: d.gpus,
            }
        })
        .collect();
    let room = asks.iter().find(|ask| offer.admits(ask)).copied();
    if room.is_none() {
        let wanted: Vec<String> = asks.iter().map(Room::describe).collect();
        found.push(
            Diagnostic::new(
                Rule::PoolJobMisfit,
                task.name_span,
                format!(
                    "job `{}` needs {} per node; a worker of pool `{pool}` offers {}",
                    task.name,
                    wanted.join(" or "),
                    offer.describe()
                ),
            )
            .label("this job")
            .help("ask for less, or apply the pool with larger `resources`"),
        );
    }
    (room, found)
}

/// What of a job a pool does not apply, in SkyPilot's words.
fn ignored(task: &Task) -> Vec<&'static str> {
    let mut out = Vec::new();
    if task.setup.is_some() {
        out.push("`setup` is ignored when submitting to a pool: its workers ran the pool's setup");
    }
    if !task.file_mounts.is_empty() {
        out.push(
            "`file_mounts` and storage mounts are ignored when submitting to a pool: its \
             workers have the pool's",
        );
    }
    out
}

/// Follows jobs until every one has ended: their statuses on stderr,
/// their logs on stdout, each line prefixed by the job's rank. Ctrl-C
/// cancels them; a second Ctrl-C stops following.
pub(super) fn follow(dir: &Path, ids: &[i64], state_flag: &str) -> u8 {
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(signal, Arc::clone(&interrupted));
    }
    watch(dir, ids, state_flag, Some(&interrupted)).unwrap_or_else(|message| {
        errln!("error: {message}");
        USAGE
    })
}

/// [`follow`] for a controller's client (`skyc controller follow`): the
/// jobs go on when the client goes (its session ends the command).
pub(super) fn follow_for_client(dir: &Path, ids: &[i64]) -> u8 {
    watch(dir, ids, "", None).unwrap_or_else(|message| {
        errln!("error: {message}");
        USAGE
    })
}

/// Follows the jobs; `interrupted` (none: a controller's client) is
/// Ctrl-C, which cancels them.
fn watch(
    dir: &Path,
    ids: &[i64],
    state_flag: &str,
    interrupted: Option<&AtomicBool>,
) -> Result<u8, String> {
    let store = Store::open(dir).map_err(|e| e.to_string())?;
    let first = rows(&store, ids)?;
    let mut logs = Follower::empty();
    for row in &first {
        let label = format!("rank {}", row.rank.unwrap_or(0));
        logs.extend(Follower::new(&store, dir, row.id, None)?.relabel(&label));
    }
    let pool = first
        .first()
        .and_then(|r| r.pool)
        .and_then(|p| store.group(p).ok().flatten())
        .map(|p| format!(" to pool `{}`", p.name))
        .unwrap_or_default();
    errln!(
        "skyc: {} job{} submitted{pool}: {} ({})",
        ids.len(),
        super::report::plural(ids.len()),
        ids.iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        if interrupted.is_some() {
            "Ctrl-C cancels them"
        } else {
            "Ctrl-C stops following; the jobs go on"
        }
    );
    let mut shown: Vec<String> = vec![String::new(); ids.len()];
    let mut interrupts = 0;
    let mut stdout = out::stdout();
    loop {
        logs.poll(&store, &mut stdout).map_err(|e| e.to_string())?;
        let now = rows(&store, ids)?;
        for (i, row) in now.iter().enumerate() {
            if shown[i] != row.status {
                errln!(
                    "skyc: job {} (rank {}) {}",
                    row.id,
                    row.rank.unwrap_or(0),
                    row.status
                );
                shown[i].clone_from(&row.status);
            }
        }
        if now.iter().all(|r| r.finished_at_ms.is_some()) {
            logs.finish(&store, &mut stdout)
                .map_err(|e| e.to_string())?;
            return Ok(worst(&now));
        }
        if interrupted.is_some_and(|i| i.swap(false, Ordering::Relaxed)) {
            interrupts += 1;
            if interrupts == 1 {
                errln!("skyc: cancelling the jobs (Ctrl-C again to stop following)");
                let mut store = Store::open(dir).map_err(|e| e.to_string())?;
                for id in ids {
                    store.request_cancel(*id).map_err(|e| e.to_string())?;
                }
                supervisor::wake(dir).map_err(|e| format!("supervisor: {e}"))?;
            } else {
                errln!("skyc: stopped following; the jobs go on (`skyc status`{state_flag})");
                return Ok(NOT_FINISHED);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn rows(store: &Store, ids: &[i64]) -> Result<Vec<GroupRow>, String> {
    ids.iter()
        .map(|&id| {
            store
                .group(id)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("job {id} vanished from the store"))
        })
        .collect()
}

/// The exit status of several jobs: the first that did not succeed
/// decides, as for a group's tasks.
fn worst(rows: &[GroupRow]) -> u8 {
    rows.iter()
        .map(|r| exit::of_group(&r.status, true))
        .find(|&code| code != super::OK)
        .unwrap_or(super::OK)
}
