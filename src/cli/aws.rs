//! The AWS options `run` takes.

use super::catalog;
use super::out::errln;
use super::run::RunInput;
use clap::ValueEnum;
use skyc_compiler::Diagnostic;
use skyc_runtime::aws::{JobPlan, PoolPlan, RunOptions, RunPlan};
use skyc_runtime::local::plan::run_timestamp;
use skyc_runtime::pool::JobSpec;
use skyc_targets::cloud::Cloud;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args)]
#[command(next_help_heading = "AWS")]
pub(crate) struct AwsArgs {
    /// SkyPilot's catalog directory (`DIR/aws/vms.csv`, as in
    /// ~/.sky/catalogs/v8) [default: $SKYC_CATALOG, then
    /// ~/.sky/catalogs/v8, then the snapshot skyc ships].
    #[arg(long, value_name = "DIR")]
    catalog: Option<PathBuf>,
    /// The image's login user, whom the runtime reaches the nodes as over
    /// SSH (commands run through `sudo` unless it is root).
    #[arg(
        long,
        value_name = "USER",
        default_value = "ubuntu",
        value_parser = login_name
    )]
    ssh_user: String,
    /// Where the runtime connects to the nodes' SSH from (the run's
    /// `tcp/22` rule) [default: this machine's address on its default
    /// route, /32].
    #[arg(long, value_name = "CIDR")]
    ssh_from: Option<String>,
    /// Which address of a node the runtime connects to: its public one
    /// when it has one (`auto`), or always its private one (a runtime
    /// inside the VPC).
    #[arg(long, value_enum, default_value_t = SshVia::Auto)]
    ssh_via: SshVia,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SshVia {
    Auto,
    Private,
}

impl AwsArgs {
    /// Whether an option only the aws target reads was given.
    pub(crate) fn given(&self) -> bool {
        self.catalog.is_some() || self.ssh_from.is_some()
    }

    /// The run's plan (see [`RunPlan::for_run`]), and a note when the
    /// credentials are ones nothing renews.
    pub(crate) fn plan(
        &self,
        run: &RunInput<'_>,
        state_dir: &Path,
    ) -> Result<(Option<RunPlan>, Vec<Diagnostic>), String> {
        let catalog = catalog::load(Cloud::Aws, self.catalog.as_deref())?;
        let (plan, diagnostics) =
            RunPlan::for_run(run.group, &catalog, &self.options(run, state_dir))?;
        note_credentials(plan.as_ref());
        Ok((plan, diagnostics))
    }

    /// A pool's plan (see [`PoolPlan::for_pool`]).
    pub(crate) fn plan_pool(
        &self,
        run: &RunInput<'_>,
        pool: &skyc_compiler::ir::Pool,
        name: &str,
        state_dir: &Path,
    ) -> Result<(Option<PoolPlan>, Vec<Diagnostic>), String> {
        let catalog = catalog::load(Cloud::Aws, self.catalog.as_deref())?;
        let options = self.options(run, state_dir);
        let (plan, diagnostics) = PoolPlan::for_pool(run.group, pool, name, &catalog, &options)?;
        note_credentials(plan.as_ref().map(|p| &p.worker));
        Ok((plan, diagnostics))
    }

    fn options<'a>(&self, run: &RunInput<'a>, state_dir: &'a Path) -> RunOptions<'a> {
        RunOptions {
            grace: Duration::from_secs_f64(run.grace),
            secrets: run.secrets,
            state_dir,
            submitted_ms: run.submitted_ms,
            user: self.ssh_user.clone(),
            ssh_from: self.ssh_from.clone(),
            private: self.ssh_via == SshVia::Private,
        }
    }
}

/// Says when the credentials are ones nothing renews.
fn note_credentials(plan: Option<&RunPlan>) {
    if plan.is_some_and(RunPlan::credentials_from_environment) {
        errln!(
            "skyc: note: the AWS credentials come from the environment: the supervisor uses its \
             own (this command's); nothing renews them, and a supervisor started later from a \
             shell without them cannot reach EC2"
        );
    }
}

/// A login name as `useradd` takes one: the runtime passes it to `ssh`.
fn login_name(user: &str) -> Result<String, String> {
    let mut chars = user.chars();
    let first = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c));
    if first && rest && user.len() <= 32 {
        Ok(user.to_owned())
    } else {
        Err(
            "not a login name: lower-case letters, digits, `_`, `.` and `-`, \
             starting with a letter or `_`, at most 32"
                .into(),
        )
    }
}

/// The plans of a pool's jobs on AWS, in rank order (`job` gives each its
/// rank); none when planning found an error. The findings are the same
/// for every rank, so they are given once.
pub(crate) fn plan_pool_jobs(
    run: RunInput<'_>,
    job: impl Fn(u32) -> JobSpec,
) -> Result<(Option<Vec<String>>, Vec<Diagnostic>), String> {
    let grace = Duration::from_secs_f64(run.grace);
    let submitted = run_timestamp(run.submitted_ms);
    let mut found = Vec::new();
    let mut plans = Vec::new();
    for rank in 0..job(0).num_jobs {
        let (plan, diagnostics) =
            JobPlan::new(run.group, job(rank), run.secrets, grace, submitted.clone());
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
