//! The Slurm options `build` and `run` share.

use super::target::{
    Jobs, ON_THIS_MACHINE, Planned, PlannedPool, Plans, RunInput, each_rank, planned_pool, to_json,
};
use skyc_compiler::ir::Pool;
use skyc_runtime::backend::run_token;
use skyc_runtime::slurm::{JobPlan, Plan};
use skyc_runtime::store::Backend;
use skyc_targets::files::Delivery;
use skyc_targets::slurm::{self, SbatchOption};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Clone)]
#[command(next_help_heading = "Slurm")]
pub(crate) struct SlurmArgs {
    /// The partition of every component.
    #[arg(long, value_name = "NAME", value_parser = sbatch_value)]
    partition: Option<String>,
    /// The account of every component.
    #[arg(long, value_name = "NAME", value_parser = sbatch_value)]
    account: Option<String>,
    /// The job's time limit, in sbatch's `--time` forms.
    #[arg(long, value_name = "TIME", value_parser = sbatch_value)]
    time: Option<String>,
    /// An extra option for every component, as `KEY[=VALUE]`.
    #[arg(long = "sbatch-option", value_name = "KEY[=VALUE]", value_parser = sbatch_option)]
    sbatch_options: Vec<SbatchOption>,
}

impl SlurmArgs {
    pub(crate) fn options(&self, grace_secs: u64) -> slurm::Options {
        slurm::Options {
            partition: self.partition.clone(),
            account: self.account.clone(),
            time: self.time.clone(),
            sbatch_options: self.sbatch_options.clone(),
            grace_secs,
            gpus: None,
            files: None,
        }
    }
}

fn sbatch_value(s: &str) -> Result<String, String> {
    if slurm::is_safe_value(s) {
        Ok(s.to_owned())
    } else {
        Err("only letters, digits and `_.:/=,@%+-[]*` are safe on an #SBATCH line".to_owned())
    }
}

fn sbatch_option(s: &str) -> Result<SbatchOption, String> {
    SbatchOption::parse(s).map_err(|e| e.to_string())
}

/// The Slurm options of `run`: the shared ones, and the job's directory.
#[derive(clap::Args, Clone)]
pub(crate) struct SlurmRunArgs {
    #[command(flatten)]
    slurm: SlurmArgs,
    /// The job's directory: its batch script, status file and node logs
    /// (a pipeline's: its step scripts, a directory per step); compute
    /// nodes must see it at the same path [default: the group's directory
    /// in the state directory].
    #[arg(long, value_name = "DIR", help_heading = "Slurm")]
    pub(crate) out_dir: Option<PathBuf>,
}

impl SlurmRunArgs {
    /// The options of a run: the command line's, and the cluster's GPU
    /// nodes when a task asks for GPUs (its type is requested as the
    /// cluster names it).
    fn run_options(&self, run: &RunInput<'_>, grace_secs: u64) -> Result<slurm::Options, String> {
        let group = run.group;
        let mut options = self.slurm.options(grace_secs);
        if !run.files.is_empty() {
            // Compute nodes read the snapshots, and run skyc's files
            // helper, from the state directory.
            // Absolute: the batch script runs elsewhere.
            let state_dir = std::path::absolute(run.state_dir)
                .map_err(|e| format!("{}: {e}", run.state_dir.display()))?;
            let helper = skyc_runtime::files::helper::install(&state_dir).map_err(|e| {
                format!(
                    "installing skyc in {}: {e}",
                    state_dir.join("bin").display()
                )
            })?;
            options.files = Some(Delivery {
                tasks: run.files.tasks.clone(),
                volumes: run.files.volumes.clone(),
                buckets: run.files.buckets.clone(),
                snapshots: skyc_runtime::files::Snapshots::of(&state_dir)
                    .dir()
                    .to_owned(),
                helper,
            });
        }
        let asks = group.tasks.iter().any(|t| {
            t.resources
                .candidates
                .first()
                .is_some_and(|c| c.accelerator.is_some())
        });
        if asks {
            // sbatch's own default, when the client names one.
            let default = std::env::var("SBATCH_PARTITION").ok();
            match skyc_runtime::slurm::Slurm::from_env().gpus(default.as_deref()) {
                Ok(gpus) => options.gpus = Some(gpus),
                // As SkyPilot does: the type as the task names it.
                Err(e) => super::out::errln!(
                    "warning: asking the Slurm cluster for its GPUs: {e}; GPU types are asked as \
                     the tasks name them"
                ),
            }
        }
        Ok(options)
    }
}

impl Plans for SlurmRunArgs {
    fn backend(&self) -> Backend {
        Backend::Slurm
    }

    fn elsewhere(&self) -> Option<&'static str> {
        self.out_dir
            .as_ref()
            .map(|_| "--out-dir is for the Slurm target")
    }

    /// One heterogeneous job (a pipeline: a job per step; see
    /// [`Plan::new`]).
    fn group(&self, run: &RunInput<'_>) -> Result<Planned, String> {
        // The script's own grace is whole seconds; never shorter than asked.
        let grace_secs = run.grace.ceil() as u64;
        let (plan, diagnostics) = Plan::new(
            run.group,
            &self.run_options(run, grace_secs)?,
            self.out_dir.as_deref(),
            Duration::from_secs(grace_secs),
            run.secrets,
            run_token(run.submitted_ms),
        )?;
        Planned::of(plan, diagnostics)
    }

    /// See [`skyc_runtime::slurm::plan_pool`].
    fn pool(&self, run: &RunInput<'_>, _name: &str, pool: &Pool) -> Result<PlannedPool, String> {
        if self.out_dir.is_some() {
            return Err(
                "--out-dir is not taken by pools: each worker's directory is in the \
                 state directory, which compute nodes must see"
                    .into(),
            );
        }
        let grace_secs = run.grace.ceil() as u64;
        let (plan, diagnostics) = skyc_runtime::slurm::plan_pool(
            run.group,
            pool,
            &self.run_options(run, grace_secs)?,
            Duration::from_secs(grace_secs),
            run.secrets,
            run_token(run.submitted_ms),
        );
        planned_pool(plan, diagnostics)
    }

    /// Steps of the pool's workers' allocations.
    fn jobs(&self, run: &RunInput<'_>, jobs: &Jobs<'_>) -> Result<Planned<Vec<String>>, String> {
        if jobs.pool.is_none() {
            return Err(ON_THIS_MACHINE.into());
        }
        let grace = Duration::from_secs(run.grace.ceil() as u64);
        each_rank(jobs.num_jobs, |rank| {
            let token = format!("{}-{rank}", run_token(run.submitted_ms));
            let (plan, diagnostics) =
                JobPlan::new(run.group, grace, run.secrets, token, (jobs.spec)(rank));
            Ok((plan.map(|p| to_json(&p)).transpose()?, diagnostics))
        })
    }
}
