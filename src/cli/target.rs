//! `--target` of `run` and `pool apply`: a backend of the runtime's
//! registry ([`skyc_runtime::registry::BACKENDS`]), and each backend's
//! planning from its own options ([`Plans`]). `run`, `run --pool` and
//! `pool apply` plan through it and name no backend.

use super::aws::AwsArgs;
use super::check::Color;
use super::k8s::K8sRunArgs;
use super::local::{LocalOptions, NetworkArg};
use super::slurm::SlurmRunArgs;
use super::state::StateArgs;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use skyc_compiler::Diagnostic;
use skyc_compiler::ir::{Group, Pool};
use skyc_runtime::files::take::Mounting;
use skyc_runtime::pool::{JobSpec, PoolPlan};
use skyc_runtime::registry::{BACKENDS, Descriptor};
use skyc_runtime::store::Backend;
use std::path::Path;

/// `--target`'s values, each with what `about` says of it for the
/// command: a backend's name.
pub(crate) fn parser(
    about: fn(&Descriptor) -> &'static str,
) -> impl TypedValueParser<Value = Backend> {
    PossibleValuesParser::new(
        BACKENDS
            .iter()
            .map(|d| PossibleValue::new(d.name).help(about(d))),
    )
    .map(|name| Backend::named(&name).expect("one of the values listed"))
}

/// What planning takes beside the target's options.
pub(crate) struct RunInput<'a> {
    pub(crate) group: &'a Group,
    /// Between SIGTERM and SIGKILL, in seconds.
    pub(crate) grace: f64,
    pub(crate) secrets: &'a [(String, String)],
    pub(crate) submitted_ms: i64,
    /// The file as the store names it.
    pub(crate) source: &'a str,
    pub(crate) state_dir: &'a Path,
    /// The tasks' code and data, taken for a target that delivers them.
    pub(crate) files: &'a skyc_runtime::files::Files,
}

/// A plan as the store keeps it (JSON; none when planning failed), and
/// what planning found.
pub(crate) struct Planned<T = String> {
    pub(crate) plan: Option<T>,
    pub(crate) diagnostics: Vec<Diagnostic>,
}

impl Planned {
    /// `plan` as the JSON the store keeps.
    pub(crate) fn of(
        plan: Option<impl serde::Serialize>,
        diagnostics: Vec<Diagnostic>,
    ) -> Result<Self, String> {
        Ok(Self {
            plan: plan.map(|p| to_json(&p)).transpose()?,
            diagnostics,
        })
    }
}

impl<T> Planned<T> {
    /// The plan, once planning's findings join the file's (sorted, then
    /// shown); `None` when any of them refuses the submission. The buckets
    /// the run names are made first, once nothing else refuses it.
    pub(crate) fn conclude(
        self,
        compilation: &mut skyc_compiler::Compilation,
        run: &RunInput<'_>,
        show: impl Fn(&skyc_compiler::Compilation),
    ) -> Option<T> {
        compilation.diagnostics.extend(self.diagnostics);
        if self.plan.is_some() && !compilation.has_errors() {
            compilation
                .diagnostics
                .extend(run.files.naming.carry_out(run.state_dir));
        }
        compilation
            .diagnostics
            .sort_by_key(|d| (d.primary.span.start, d.rule));
        show(compilation);
        self.plan.filter(|_| !compilation.has_errors())
    }
}

pub(crate) fn to_json(plan: &impl serde::Serialize) -> Result<String, String> {
    serde_json::to_string(plan).map_err(|e| e.to_string())
}

/// A pool's plan ([`PoolPlan`] as JSON), and its
/// size as `pool apply` says it (`2 workers`, `1 to 4 workers`).
pub(crate) struct PlannedPool {
    pub(crate) planned: Planned,
    pub(crate) size: String,
}

/// A pool's plan, serialized, with its size.
pub(crate) fn planned_pool<W: serde::Serialize>(
    plan: Option<PoolPlan<W>>,
    diagnostics: Vec<Diagnostic>,
) -> Result<PlannedPool, String> {
    let size = plan
        .as_ref()
        .map(|p| p.pool.scaling.describe())
        .unwrap_or_default();
    Ok(PlannedPool {
        planned: Planned::of(plan, diagnostics)?,
        size,
    })
}

/// The jobs `skyc run --num-jobs N [--pool NAME]` submits.
pub(crate) struct Jobs<'a> {
    /// The pool's stored plan; none without `--pool`.
    pub(crate) pool: Option<&'a PoolPlan>,
    pub(crate) num_jobs: u32,
    /// Each rank's spec on the pool.
    pub(crate) spec: &'a dyn Fn(u32) -> JobSpec,
}

/// Why `--num-jobs` without `--pool` is refused on a cluster.
pub(crate) const ON_THIS_MACHINE: &str =
    "`--num-jobs` runs on this machine only for now (`--target local`)";

/// The jobs of every rank, each planned by `plan` as the store keeps it;
/// none once one has errors. Every rank is planned alike, so the first
/// rank's findings are the jobs'.
pub(crate) fn each_rank(
    num_jobs: u32,
    mut plan: impl FnMut(u32) -> Result<(Option<String>, Vec<Diagnostic>), String>,
) -> Result<Planned<Vec<String>>, String> {
    let mut found = Vec::new();
    let mut plans = Vec::new();
    for rank in 0..num_jobs {
        let (one, diagnostics) = plan(rank)?;
        if rank == 0 {
            found = diagnostics;
        }
        match one {
            Some(one) => plans.push(one),
            None => {
                return Ok(Planned {
                    plan: None,
                    diagnostics: found,
                });
            }
        }
    }
    Ok(Planned {
        plan: Some(plans),
        diagnostics: found,
    })
}

/// A backend's planning, from the options the command line has for it.
pub(crate) trait Plans {
    /// Its place in the registry.
    fn backend(&self) -> Backend;

    /// When options only it takes were given: the refusal of them on any
    /// other target.
    fn elsewhere(&self) -> Option<&'static str>;

    /// A group (`skyc run`).
    fn group(&self, run: &RunInput<'_>) -> Result<Planned, String>;

    /// A pool named `name` (`skyc pool apply`).
    fn pool(&self, run: &RunInput<'_>, name: &str, pool: &Pool) -> Result<PlannedPool, String>;

    /// The jobs of `run`, in rank order, each a plan as the store keeps
    /// it.
    fn jobs(&self, run: &RunInput<'_>, jobs: &Jobs<'_>) -> Result<Planned<Vec<String>>, String>;

    /// Whether and how its nodes mount buckets, which a submission then
    /// finds (or makes) for them.
    fn mounting(&self) -> Mounting {
        if self.backend().descriptor().mounts_buckets {
            Mounting::Here
        } else {
            Mounting::No
        }
    }
}

/// What `run` and `pool apply` take last: the state directory, colour,
/// and every backend's options.
#[derive(clap::Args)]
pub(crate) struct SubmitArgs {
    #[command(flatten)]
    pub(crate) state: StateArgs,
    /// When to colour diagnostics.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    pub(crate) color: Color,
    #[command(flatten)]
    pub(crate) backends: BackendArgs,
}

/// The options of every backend but this machine's, which `run` and
/// `pool apply` list last, each under its heading.
#[derive(clap::Args, Clone)]
pub(crate) struct BackendArgs {
    #[command(flatten)]
    pub(crate) slurm: SlurmRunArgs,
    #[command(flatten)]
    pub(crate) k8s: K8sRunArgs,
    #[command(flatten)]
    pub(crate) aws: AwsArgs,
}

/// Every backend's planning, from the command line's options.
pub(crate) struct Planners<'a> {
    local: LocalOptions,
    args: &'a BackendArgs,
}

impl<'a> Planners<'a> {
    pub(crate) fn new(network: Option<NetworkArg>, args: &'a BackendArgs) -> Self {
        Self {
            local: LocalOptions { network },
            args,
        }
    }

    /// Each backend's, in the registry's order.
    fn all(&self) -> [&dyn Plans; BACKENDS.len()] {
        [
            &self.local,
            &self.args.slurm,
            &self.args.k8s,
            &self.args.aws,
        ]
    }

    /// The planning of `target`, once no other backend's options were
    /// given (in the registry's order: the first refusal is said).
    pub(crate) fn of(&self, target: Backend) -> Result<&dyn Plans, String> {
        if let Some(refusal) = self
            .all()
            .iter()
            .filter(|p| p.backend() != target)
            .find_map(|p| p.elsewhere())
        {
            return Err(refusal.to_owned());
        }
        Ok(self.get(target))
    }

    /// The planning of `backend`, whatever options were given: a pool's
    /// jobs are planned on the pool's backend, which the command line did
    /// not choose.
    pub(crate) fn get(&self, backend: Backend) -> &dyn Plans {
        *self
            .all()
            .iter()
            .find(|p| p.backend() == backend)
            .expect("every backend has its planning")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[arg(long, value_enum)]
        network: Option<NetworkArg>,
        #[command(flatten)]
        args: BackendArgs,
    }

    #[test]
    fn each_backend_plans_at_its_place_and_refuses_the_options_of_others() {
        let cli = Cli::parse_from(["skyc"]);
        let planners = Planners::new(cli.network, &cli.args);
        for (i, p) in planners.all().iter().enumerate() {
            assert_eq!(p.backend(), BACKENDS[i].kind, "at its place");
        }
        for d in &BACKENDS {
            assert_eq!(planners.of(d.kind).unwrap().backend(), d.kind);
        }
        let cli = Cli::parse_from(["skyc", "--out-dir", "/o", "--network", "loopback"]);
        let planners = Planners::new(cli.network, &cli.args);
        assert_eq!(
            planners.of(Backend::Slurm).err().unwrap(),
            "--network is for the local target; cluster nodes have their own"
        );
        assert_eq!(
            planners.of(Backend::Local).err().unwrap(),
            "--out-dir is for the Slurm target"
        );
        // A pool's jobs go where the pool is, whatever was given.
        assert_eq!(planners.get(Backend::Local).backend(), Backend::Local);
        for flags in [
            &["--catalog", "/c"][..],
            &["--ssh-from", "10.0.0.1/32"],
            &["--catalog", "/c", "--ssh-from", "10.0.0.1/32"],
        ] {
            let cli = Cli::parse_from([&["skyc"][..], flags].concat());
            let planners = Planners::new(cli.network, &cli.args);
            assert_eq!(
                planners.of(Backend::Kubernetes).err().unwrap(),
                "--catalog and --ssh-from are for the aws target"
            );
            assert!(planners.of(Backend::Aws).is_ok());
        }
    }
}
