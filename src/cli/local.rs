//! The local target's options `run`, `run --pool` and `pool apply` share.

use super::out::errln;
use super::target::{Jobs, Planned, PlannedPool, Plans, RunInput, planned_pool, to_json};
use clap::ValueEnum;
use skyc_compiler::Diagnostic;
use skyc_compiler::ir::Pool;
use skyc_runtime::local::capacity::Capacity;
use skyc_runtime::local::network::{self, Mode};
use skyc_runtime::local::plan::{NetworkRequest, Plan, PlanOptions, PoolPlan, run_timestamp};
use skyc_runtime::store::Backend;
use std::time::Duration;

/// How nodes get their own address.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum NetworkArg {
    Auto,
    Netns,
    Loopback,
}

/// What planning for this machine needs beside the group: how nodes get
/// their addresses, what the machine has.
pub(crate) struct LocalSetting {
    pub(crate) request: NetworkRequest,
    pub(crate) mode: Mode,
    pub(crate) capacity: Capacity,
}

impl LocalSetting {
    pub(crate) fn new(network: Option<NetworkArg>) -> Result<Self, String> {
        let request = match network.unwrap_or(NetworkArg::Auto) {
            NetworkArg::Auto => NetworkRequest::Auto,
            NetworkArg::Netns => NetworkRequest::Netns,
            NetworkArg::Loopback => NetworkRequest::Loopback,
        };
        let mode = network::resolve(request)?;
        Ok(Self {
            request,
            mode,
            capacity: Capacity::detect(),
        })
    }

    pub(crate) fn options<'a>(&'a self, run: &'a RunInput<'_>) -> PlanOptions<'a> {
        PlanOptions {
            grace: Duration::from_secs_f64(run.grace),
            network: self.request,
            base_env: std::env::vars().collect(),
            secrets: run.secrets,
            files: run.files,
            submitted: run_timestamp(run.submitted_ms),
            capacity: &self.capacity,
        }
    }

    /// Refuses hostnames this machine cannot give, and says how nodes get
    /// their addresses when it is not a namespace each.
    pub(crate) fn check_network(&self, plan: &Plan) -> Result<(), String> {
        let views = plan
            .tasks
            .iter()
            .any(|t| !t.files.is_empty() || !t.volumes.is_empty());
        if self.mode == Mode::LoopbackNoHosts && views {
            return Err(
                "the tasks' `workdir`, `file_mounts` and `volumes` are given to each node in a \
                 mount namespace of its own, and this machine allows none (run as root, or enable \
                 unprivileged user namespaces)"
                    .into(),
            );
        }
        if self.mode == Mode::LoopbackNoHosts && plan.hostnames_required {
            return Err(
                "`inter_connection: true` needs group hostnames, and this machine allows no \
                 namespace to provide them (run as root, or enable unprivileged user namespaces)"
                    .into(),
            );
        }
        if self.mode != Mode::Netns && plan.hostnames {
            errln!("note: nodes get {}", self.mode.describe());
        }
        Ok(())
    }
}

/// The local target's options: `--network`, which `run` and `pool apply`
/// each describe in their own words.
pub(crate) struct LocalOptions {
    pub(crate) network: Option<NetworkArg>,
}

impl Plans for LocalOptions {
    fn backend(&self) -> Backend {
        Backend::Local
    }

    fn elsewhere(&self) -> Option<&'static str> {
        self.network
            .map(|_| "--network is for the local target; cluster nodes have their own")
    }

    fn group(&self, run: &RunInput<'_>) -> Result<Planned, String> {
        let setting = LocalSetting::new(self.network)?;
        let options = setting.options(run);
        let (plan, diagnostics) = Plan::new(run.group, &options);
        if let Some(plan) = &plan {
            setting.check_network(plan)?;
        }
        Planned::of(plan, diagnostics)
    }

    fn pool(&self, run: &RunInput<'_>, _name: &str, pool: &Pool) -> Result<PlannedPool, String> {
        let setting = LocalSetting::new(self.network)?;
        let options = setting.options(run);
        let (plan, diagnostics) = PoolPlan::new(run.group, pool, &options);
        if let Some(plan) = &plan {
            setting.check_network(&plan.worker)?;
        }
        planned_pool(plan, diagnostics)
    }

    /// On a pool's workers, or each on its own.
    fn jobs(&self, run: &RunInput<'_>, jobs: &Jobs<'_>) -> Result<Planned<Vec<String>>, String> {
        let setting = LocalSetting::new(self.network)?;
        let (plan, diagnostics) = Plan::new(run.group, &setting.options(run));
        let has_errors = diagnostics.iter().any(Diagnostic::is_error);
        let Some(mut plan) = plan.filter(|_| !has_errors) else {
            return Ok(Planned {
                plan: None,
                diagnostics,
            });
        };
        let pooled = jobs.pool.is_some();
        if pooled {
            // Jobs run on the pool's workers, which ran the pool's setup.
            plan.tasks.iter_mut().for_each(|t| t.setup = None);
        } else {
            setting.check_network(&plan)?;
        }
        let plans = (0..jobs.num_jobs)
            .map(|rank| {
                let mut plan = plan.clone();
                if pooled {
                    plan.pool_job = Some((jobs.spec)(rank));
                } else {
                    plan.job_rank = Some((rank, jobs.num_jobs));
                }
                to_json(&plan)
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Planned {
            plan: Some(plans),
            diagnostics,
        })
    }
}
