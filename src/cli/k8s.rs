//! The Kubernetes options `build` and `run` share.

use super::target::{
    Jobs, ON_THIS_MACHINE, Planned, PlannedPool, Plans, RunInput, planned_pool, to_json,
};
use skyc_compiler::Diagnostic;
use skyc_compiler::ir::{self, Group};
use skyc_runtime::backend::run_token;
use skyc_runtime::files::take::Mounting;
use skyc_runtime::k8s::{Lowering, Plan, PoolInput, PoolPlan};
use skyc_runtime::store::Backend;
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
    /// Image of the pod that serves the tasks' files and of each node's
    /// init container that fetches them (sh, wget, tar, sha256sum, httpd).
    #[arg(long, value_name = "IMAGE", default_value = k8s::files::DEFAULT_FILES_IMAGE)]
    files_image: String,
    /// How buckets a task mounts (`mode: MOUNT`, `MOUNT_CACHED`) reach its
    /// pods: `sidecar`, a privileged rclone sidecar per bucket (the
    /// namespace must admit privileged pods); `none`, a located error.
    #[arg(long, value_enum, value_name = "HOW", default_value = "none")]
    bucket_mounts: BucketMountsArg,
    /// Image of the bucket sidecars (rclone, sh).
    #[arg(long, value_name = "IMAGE", default_value = k8s::DEFAULT_RCLONE_IMAGE)]
    bucket_image: String,
}

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
enum BucketMountsArg {
    None,
    Sidecar,
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
            files_image: self.files_image.clone(),
            files: None,
            bucket_mounts: match self.bucket_mounts {
                BucketMountsArg::None => k8s::BucketMounts::Refused,
                BucketMountsArg::Sidecar => k8s::BucketMounts::Sidecar {
                    image: self.bucket_image.clone(),
                },
            },
            buckets: None,
        };
        options.validate()?;
        Ok(options)
    }
}

/// The Kubernetes options of `run`: the shared ones, and the context.
#[derive(clap::Args, Clone)]
pub(crate) struct K8sRunArgs {
    #[command(flatten)]
    k8s: K8sArgs,
    /// The kubeconfig context [default: the current one].
    #[arg(long, value_name = "NAME", help_heading = "Kubernetes")]
    pub(crate) context: Option<String>,
}

impl K8sRunArgs {
    /// A run a controller supervises: on the cluster its state is reached
    /// through, in its namespace unless `--namespace` names another.
    pub(crate) fn for_controller(
        &mut self,
        remote: &skyc_runtime::controller::pods::K8s,
    ) -> Result<(), String> {
        if let Some(context) = &self.context
            && Some(context) != remote.context.as_ref()
        {
            return Err(format!(
                "--context {context}: the controller ({remote}) is reached through {}",
                remote
                    .context
                    .as_deref()
                    .map_or("the current context".to_owned(), |c| format!("context {c}"))
            ));
        }
        self.context = remote.context.clone();
        if self.k8s.namespace.is_none() {
            self.k8s.namespace = Some(remote.namespace.clone());
        }
        Ok(())
    }

    /// The options of a run: the command line's, and the files the
    /// submission took, as streams of its snapshots.
    fn options(&self, run: &RunInput<'_>) -> Result<k8s::Options, String> {
        let mut options = self.k8s.options()?;
        let snapshots = skyc_runtime::files::Snapshots::of(run.state_dir);
        options.files = Some(
            skyc_runtime::k8s::files::packs(&run.files.tasks, &snapshots, false)
                .map_err(|e| format!("{}: {e}", snapshots.dir().display()))?,
        );
        options.buckets = Some(run.files.buckets.clone());
        Ok(options)
    }
}

impl Plans for K8sRunArgs {
    fn backend(&self) -> Backend {
        Backend::Kubernetes
    }

    /// By the pods' sidecars, when allowed.
    fn mounting(&self) -> Mounting {
        match self.k8s.bucket_mounts {
            BucketMountsArg::Sidecar => Mounting::Nodes,
            BucketMountsArg::None => Mounting::No,
        }
    }

    fn elsewhere(&self) -> Option<&'static str> {
        if self.k8s.bucket_mounts == BucketMountsArg::Sidecar {
            return Some("--bucket-mounts is for the k8s target");
        }
        self.context
            .as_ref()
            .map(|_| "--context is for the k8s target")
    }

    /// A JobSet (see [`Plan::for_run`]), with the kubeconfig
    /// `KUBECONFIG` names.
    fn group(&self, run: &RunInput<'_>) -> Result<Planned, String> {
        let (plan, diagnostics) = Plan::for_run(
            run.group,
            &self.options(run)?,
            std::env::var("KUBECONFIG").ok().as_deref(),
            self.context.as_deref(),
            Duration::from_secs_f64(run.grace),
            run.secrets,
            run_token(run.submitted_ms),
        )?;
        Planned::of(plan, diagnostics)
    }

    /// Workers named after the pool (see [`PoolPlan::for_apply`]).
    fn pool(&self, run: &RunInput<'_>, name: &str, pool: &ir::Pool) -> Result<PlannedPool, String> {
        let (plan, diagnostics) = PoolPlan::for_apply(&PoolInput {
            group: run.group,
            pool,
            name,
            options: &self.options(run)?,
            kubeconfig: std::env::var("KUBECONFIG").ok().as_deref(),
            context: self.context.as_deref(),
            grace: Duration::from_secs_f64(run.grace),
            secrets: run.secrets,
            token: run_token(run.submitted_ms),
        })?;
        planned_pool(plan, diagnostics)
    }

    /// Started in the pods of the workers made from the pool's plan
    /// ([`Plan::pool_jobs`]).
    fn jobs(&self, run: &RunInput<'_>, jobs: &Jobs<'_>) -> Result<Planned<Vec<String>>, String> {
        let Some(pool) = jobs.pool else {
            return Err(ON_THIS_MACHINE.into());
        };
        let worker: Plan = serde_json::from_value(pool.worker.clone())
            .map_err(|e| format!("the pool's Kubernetes plan: {e}"))?;
        let grace = Duration::from_secs_f64(run.grace);
        let token = run_token(run.submitted_ms);
        let (plans, diagnostics) = worker.pool_jobs(
            run.group,
            grace,
            run.secrets,
            token,
            jobs.num_jobs,
            jobs.spec,
        );
        Ok(Planned {
            plan: plans
                .map(|plans| plans.iter().map(to_json).collect::<Result<Vec<_>, _>>())
                .transpose()?,
            diagnostics,
        })
    }
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
        &Lowering {
            options,
            namespace,
            context: None,
            grace: Duration::from_secs(10),
            secrets: &[],
            token: String::new(),
        },
    )
    .map(|plan| plan.manifests(&group.name)))
}
