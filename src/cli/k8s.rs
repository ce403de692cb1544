//! The Kubernetes options `build` and `run` share.

use super::run::RunInput;
use skyc_compiler::Diagnostic;
use skyc_runtime::backend::run_token;
use skyc_runtime::k8s::Plan;
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
}
