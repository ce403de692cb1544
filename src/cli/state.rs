//! The state directory shared by `run`, `status`, `logs` and `cancel`.

use skyc_runtime::controller::remote::Remote;
use skyc_runtime::store::{Store, default_state_dir, user_state_dir};
use skyc_runtime::supervisor;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

/// `--state-dir`, common to the runtime commands.
#[derive(clap::Args, Clone)]
pub(crate) struct StateArgs {
    /// Where groups, logs and the supervisor live [default:
    /// $SKYC_STATE_DIR, else $XDG_STATE_HOME/skyc, else ~/.local/state/skyc];
    /// `k8s://NAMESPACE[@CONTEXT]`: the controller's in that namespace;
    /// `aws://REGION`: the controller's in that region.
    #[arg(long, value_name = "DIR")]
    pub(crate) state_dir: Option<PathBuf>,
}

impl StateArgs {
    /// The local state directory. For a controller's (`k8s://NS`), the
    /// one this machine would use otherwise: where a submission's
    /// snapshots are taken before they are sent.
    pub(crate) fn dir(&self) -> PathBuf {
        if matches!(self.remote(), Ok(Some(_)) | Err(_)) {
            return user_state_dir();
        }
        self.state_dir.clone().unwrap_or_else(default_state_dir)
    }

    /// The state directory, which must be on this machine.
    pub(crate) fn local(&self) -> Result<PathBuf, String> {
        match self.remote()? {
            Some(_) => Err("--state-dir: a directory on this machine, not a controller's".into()),
            None => Ok(self.dir()),
        }
    }

    /// The controller the state directory names (`k8s://NS[@CONTEXT]`,
    /// `aws://REGION`).
    pub(crate) fn remote(&self) -> Result<Option<Remote>, String> {
        let named = match &self.state_dir {
            Some(dir) => dir.to_str().map(str::to_owned),
            None => std::env::var("SKYC_STATE_DIR").ok(),
        };
        named.and_then(|n| Remote::parse(&n)).transpose()
    }

    /// Opens the store, creating the directory (private: it holds secrets
    /// and environments) when needed.
    pub(crate) fn open(&self) -> Result<(PathBuf, Store), String> {
        let dir = self.dir();
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let store = Store::open(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok((dir, store))
    }

    /// Opens the store and makes sure a supervisor runs when a group is
    /// live: a supervisor that died is replaced by the next command.
    pub(crate) fn open_supervised(&self) -> Result<(PathBuf, Store), String> {
        let (dir, store) = self.open()?;
        let live = store.live_groups().map_err(|e| e.to_string())?;
        if !live.is_empty() {
            supervisor::wake(&dir).map_err(|e| format!("supervisor: {e}"))?;
        }
        Ok((dir, store))
    }
}

/// The pid of the live supervisor of `dir`, if any.
pub(crate) fn supervisor_pid(dir: &std::path::Path) -> Option<i64> {
    let pid: i32 = std::fs::read_to_string(dir.join("supervisor.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    std::path::Path::new(&format!("/proc/{pid}"))
        .exists()
        .then_some(i64::from(pid))
}
