//! The Slurm options `build` and `run` share.

use super::run::RunInput;
use skyc_compiler::Diagnostic;
use skyc_compiler::ir::{Group, Pool};
use skyc_runtime::backend::run_token;
use skyc_runtime::pool::JobSpec;
use skyc_runtime::slurm::{JobPlan, Plan};
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
#[derive(clap::Args)]
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
    fn run_options(&self, group: &Group, grace_secs: u64) -> Result<slurm::Options, String> {
        let mut options = self.slurm.options(grace_secs);
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

    /// The run's plan (see [`Plan::new`]).
    pub(crate) fn plan(
        &self,
        run: &RunInput<'_>,
    ) -> Result<(Option<Plan>, Vec<Diagnostic>), String> {
        // The script's own grace is whole seconds; never shorter than asked.
        let grace_secs = run.grace.ceil() as u64;
        Plan::new(
            run.group,
            &self.run_options(run.group, grace_secs)?,
            self.out_dir.as_deref(),
            Duration::from_secs(grace_secs),
            run.secrets,
            run_token(run.submitted_ms),
        )
    }
}

impl SlurmRunArgs {
    /// A pool's plan on Slurm (see [`skyc_runtime::slurm::plan_pool`]), as
    /// JSON, with its size as `pool apply` says it.
    pub(crate) fn plan_pool(
        &self,
        run: &RunInput<'_>,
        pool: &Pool,
    ) -> Result<(Option<String>, String, Vec<Diagnostic>), String> {
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
            &self.run_options(run.group, grace_secs)?,
            Duration::from_secs(grace_secs),
            run.secrets,
            run_token(run.submitted_ms),
        );
        let size = plan
            .as_ref()
            .map(|p| p.pool.scaling.describe())
            .unwrap_or_default();
        let json = plan
            .map(|p| serde_json::to_string(&p).map_err(|e| e.to_string()))
            .transpose()?;
        Ok((json, size, diagnostics))
    }
}

/// The plans of a Slurm pool's jobs, in rank order (`job` gives each its
/// rank), as JSON; `None` when planning found errors.
pub(crate) fn plan_pool_jobs(
    run: RunInput<'_>,
    job: impl Fn(u32) -> JobSpec,
) -> Result<(Option<Vec<String>>, Vec<Diagnostic>), String> {
    let num_jobs = job(0).num_jobs;
    let grace = Duration::from_secs(run.grace.ceil() as u64);
    let mut found = Vec::new();
    let mut plans = Vec::new();
    for rank in 0..num_jobs {
        let token = format!("{}-{rank}", run_token(run.submitted_ms));
        let (plan, diagnostics) = JobPlan::new(run.group, grace, run.secrets, token, job(rank));
        if rank == 0 {
            found = diagnostics;
        }
        match plan {
            Some(plan) => plans.push(serde_json::to_string(&plan).map_err(|e| e.to_string())?),
            None => return Ok((None, found)),
        }
    }
    Ok((Some(plans), found))
}
