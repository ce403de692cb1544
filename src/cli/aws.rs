//! The AWS options `run` takes.

use super::catalog;
use super::out::errln;
use super::target::{
    Jobs, ON_THIS_MACHINE, Planned, PlannedPool, Plans, RunInput, each_rank, planned_pool, to_json,
};
use clap::ValueEnum;
use skyc_runtime::aws::{JobPlan, PoolPlan, RunOptions, RunPlan};
use skyc_runtime::files::take::Mounting;
use skyc_runtime::local::plan::run_timestamp;
use skyc_runtime::store::Backend;
use skyc_targets::cloud::Cloud;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args, Clone)]
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
    /// The login user and whether nodes are reached at their private
    /// address: how a controller made for a run is reached too.
    pub(crate) fn ssh(&self) -> (&str, bool) {
        (&self.ssh_user, self.ssh_via == SshVia::Private)
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
            files: None,
        }
    }
}

/// The submission's files with their streams' SHA-256s, as the run's
/// boot scripts check them.
fn packs(run: &RunInput<'_>) -> Result<skyc_targets::files::Files, String> {
    let snapshots = skyc_runtime::files::Snapshots::of(run.state_dir);
    let mut files = skyc_runtime::files::pack::packs(&run.files.tasks, &snapshots, false)
        .map_err(|e| format!("{}: {e}", snapshots.dir().display()))?;
    files.buckets = run.files.buckets.clone();
    Ok(files)
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

impl Plans for AwsArgs {
    fn backend(&self) -> Backend {
        Backend::Aws
    }

    /// Each instance mounts its task's S3 buckets (found, or made, at
    /// submission).
    fn mounting(&self) -> Mounting {
        Mounting::Nodes
    }

    /// The options without a default (`--ssh-user` and `--ssh-via` have
    /// one, so they cannot tell).
    fn elsewhere(&self) -> Option<&'static str> {
        (self.catalog.is_some() || self.ssh_from.is_some())
            .then_some("--catalog and --ssh-from are for the aws target")
    }

    /// An instance per node (see [`RunPlan::for_run`]), and a note when
    /// the credentials are ones nothing renews.
    fn group(&self, run: &RunInput<'_>) -> Result<Planned, String> {
        let catalog = catalog::load(Cloud::Aws, self.catalog.as_deref())?;
        let files = packs(run)?;
        let mut options = self.options(run, run.state_dir);
        options.files = Some(&files);
        let (plan, diagnostics) = RunPlan::for_run(run.group, &catalog, &options)?;
        note_credentials(plan.as_ref());
        Planned::of(plan, diagnostics)
    }

    /// See [`PoolPlan::for_pool`].
    fn pool(
        &self,
        run: &RunInput<'_>,
        name: &str,
        pool: &skyc_compiler::ir::Pool,
    ) -> Result<PlannedPool, String> {
        let catalog = catalog::load(Cloud::Aws, self.catalog.as_deref())?;
        let files = packs(run)?;
        let mut options = self.options(run, run.state_dir);
        options.files = Some(&files);
        let (plan, diagnostics) = PoolPlan::for_pool(run.group, pool, name, &catalog, &options)?;
        note_credentials(plan.as_ref().map(|p| &p.worker));
        planned_pool(plan, diagnostics)
    }

    /// Run on the pool's workers' instances.
    fn jobs(&self, run: &RunInput<'_>, jobs: &Jobs<'_>) -> Result<Planned<Vec<String>>, String> {
        if jobs.pool.is_none() {
            return Err(ON_THIS_MACHINE.into());
        }
        let grace = Duration::from_secs_f64(run.grace);
        let submitted = run_timestamp(run.submitted_ms);
        each_rank(jobs.num_jobs, |rank| {
            let (plan, diagnostics) = JobPlan::new(
                run.group,
                (jobs.spec)(rank),
                run.secrets,
                grace,
                submitted.clone(),
            );
            Ok((plan.map(|p| to_json(&p)).transpose()?, diagnostics))
        })
    }
}
