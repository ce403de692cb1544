//! The Kubernetes options `build` and `run` share.

use super::run::RunInput;
use skyc_compiler::Diagnostic;
use skyc_compiler::ir::{self, Group};
use skyc_runtime::backend::run_token;
use skyc_runtime::k8s::{Plan, PoolInput, PoolPlan};
use skyc_runtime::pool::JobSpec;
use skyc_targets::k8s;
use std::time::Duration;

#[derive(clap::Args, Clone)]
#[command(next_help_heading = "Kubernetes")]
pub(crate) struct K8sArgs {
    /// Namespace of every object; default: the kubeconfig context's.
    #[arg(long, value_name = "NAME")]
    pub(crate) namespace: Option<String>,
    /// Kueue LocalQueue to submit to, as the `kueue.x-k8s.io/queue-name` label.
    #[arg(long, value_name = "NAME")]
    queue: Option<String>,
    /// Container image of tasks without `image_id: docker:...`.
    #[arg(long, value_name = "IMAGE", default_value = k8s::DEFAULT_IMAGE)]
    image: String,
    /// Node label that carries the accelerator type.
    #[arg(
        long,
        value_name = "KEY",
        default_value = "cloud.google.com/gke-accelerator"
    )]
    gpu_label_key: String,
    /// The Secret that `secrets` are read from; default `{group}-secrets`.
    #[arg(long, value_name = "NAME")]
    secret_name: Option<String>,
}

impl K8sArgs {
    /// The lowering's options, or why they cannot be.
    pub(crate) fn options(&self) -> Result<k8s::Options, String> {
        let options = k8s::Options {
            namespace: self.namespace.clone(),
            queue: self.queue.clone(),
            image: self.image.clone(),
            gpu_label_key: self.gpu_label_key.clone(),
            secret_name: self.secret_name.clone(),
        };
        options.validate()?;
        Ok(options)
    }
}

/// The Kubernetes options of `run`: the shared ones, and the context.
#[derive(clap::Args)]
pub(crate) struct K8sRunArgs {
    #[command(flatten)]
    k8s: K8sArgs,
    /// The kubeconfig context [default: the current one].
    #[arg(long, value_name = "NAME", help_heading = "Kubernetes")]
    pub(crate) context: Option<String>,
}

impl K8sRunArgs {
    /// The run's plan (see [`Plan::for_run`]), with the kubeconfig
    /// `KUBECONFIG` names.
    pub(crate) fn plan(
        &self,
        run: &RunInput<'_>,
    ) -> Result<(Option<Plan>, Vec<Diagnostic>), String> {
        Plan::for_run(
            run.group,
            &self.k8s.options()?,
            std::env::var("KUBECONFIG").ok().as_deref(),
            self.context.as_deref(),
            Duration::from_secs_f64(run.grace),
            run.secrets,
            run_token(run.submitted_ms),
        )
    }

    /// The plan of the pool `pool` named `name` (`skyc pool apply
    /// --target k8s`), as JSON, its size, and what planning found.
    pub(crate) fn plan_pool(
        &self,
        run: &RunInput<'_>,
        name: &str,
        pool: &ir::Pool,
    ) -> Result<(Option<String>, String, Vec<Diagnostic>), String> {
        let (plan, diagnostics) = PoolPlan::for_apply(&PoolInput {
            group: run.group,
            pool,
            name,
            options: &self.k8s.options()?,
            kubeconfig: std::env::var("KUBECONFIG").ok().as_deref(),
            context: self.context.as_deref(),
            grace: Duration::from_secs_f64(run.grace),
            secrets: run.secrets,
            token: run_token(run.submitted_ms),
        })?;
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

/// The plans of the jobs of `run` on a Kubernetes pool whose workers are
/// made from `worker` (`skyc run --pool`), as JSON, in rank order
/// ([`Plan::pool_jobs`]); `None` when planning found errors.
pub(crate) fn plan_pool_jobs(
    run: &RunInput<'_>,
    worker: &serde_json::Value,
    num_jobs: u32,
    job: impl Fn(u32) -> JobSpec,
) -> Result<(Option<Vec<String>>, Vec<Diagnostic>), String> {
    let worker: Plan = serde_json::from_value(worker.clone())
        .map_err(|e| format!("the pool's Kubernetes plan: {e}"))?;
    let grace = Duration::from_secs_f64(run.grace);
    let token = run_token(run.submitted_ms);
    let (plans, diagnostics) =
        worker.pool_jobs(run.group, grace, run.secrets, token, num_jobs, job);
    let json = plans
        .map(|plans| {
            plans
                .iter()
                .map(|p| serde_json::to_string(p).map_err(|e| e.to_string()))
                .collect::<Result<Vec<_>, String>>()
        })
        .transpose()?;
    Ok((json, diagnostics))
}

/// What `skyc pool apply --target k8s` would start for the pool file
/// `group`, named as the file's task (`skyc build POOLFILE --target
/// k8s`): the first worker's objects and its nodes' pods. An error when the name
/// cannot name workers; the lowering's diagnostics when it fails.
pub(crate) fn pool_manifests(
    group: &Group,
    options: &k8s::Options,
) -> Result<Result<Vec<serde_json::Value>, Vec<Diagnostic>>, String> {
    let Some(pool) = &group.pool else {
        return Ok(Ok(Vec::new()));
    };
    k8s::worker::check_pool_name(&group.name)?;
    let namespace = options.namespace.as_deref().unwrap_or("default");
    Ok(PoolPlan::new(
        group,
        pool,
        &group.name,
        options,
        namespace,
        None,
        Duration::from_secs(10),
        &[],
        String::new(),
    )
    .map(|plan| plan.manifests(&group.name)))
}
