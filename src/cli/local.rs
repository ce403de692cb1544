//! The local target's options `run`, `run --pool` and `pool apply` share.

use super::out::errln;
use clap::ValueEnum;
use skyc_runtime::local::capacity::Capacity;
use skyc_runtime::local::network::{self, Mode};
use skyc_runtime::local::plan::{NetworkRequest, Plan, PlanOptions, run_timestamp};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How nodes get their own address.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum NetworkArg {
    Auto,
    Netns,
    Loopback,
}

/// What planning for this machine needs beside the group: how nodes get
/// their addresses, where relative `workdir`s start, what the machine has.
pub(crate) struct LocalSetting {
    pub(crate) request: NetworkRequest,
    pub(crate) mode: Mode,
    pub(crate) base_dir: PathBuf,
    pub(crate) capacity: Capacity,
}

impl LocalSetting {
    /// For the file `name` (given on the command line as `file`).
    pub(crate) fn new(network: Option<NetworkArg>, file: &str, name: &str) -> Result<Self, String> {
        let request = match network.unwrap_or(NetworkArg::Auto) {
            NetworkArg::Auto => NetworkRequest::Auto,
            NetworkArg::Netns => NetworkRequest::Netns,
            NetworkArg::Loopback => NetworkRequest::Loopback,
        };
        let mode = network::resolve(request)?;
        let base_dir = Path::new(name)
            .parent()
            .filter(|_| file != "-")
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let base_dir = std::env::current_dir()
            .map(|cwd| cwd.join(&base_dir))
            .unwrap_or(base_dir);
        Ok(Self {
            request,
            mode,
            base_dir,
            capacity: Capacity::detect(),
        })
    }

    pub(crate) fn options<'a>(
        &'a self,
        grace: f64,
        secrets: &'a [(String, String)],
        submitted_ms: i64,
    ) -> PlanOptions<'a> {
        PlanOptions {
            grace: Duration::from_secs_f64(grace),
            network: self.request,
            base_env: std::env::vars().collect(),
            secrets,
            base_dir: &self.base_dir,
            submitted: run_timestamp(submitted_ms),
            capacity: &self.capacity,
        }
    }

    /// Refuses hostnames this machine cannot give, and says how nodes get
    /// their addresses when it is not a namespace each.
    pub(crate) fn check_network(&self, plan: &Plan) -> Result<(), String> {
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
