//! Every backend, listed once ([`BACKENDS`]): its name, what `status`
//! shows of its nodes, where its logs are, and how the supervisor starts
//! it. The supervisor, the store and the command line loop over this
//! list; none of them names a backend. Adding a backend is its folder
//! under `runtime/src/` and one [`Descriptor`] here (DESIGN.md, "How to
//! add a backend").

use crate::backend::Backend as Driver;
use crate::k8s::{Connect, Kubernetes, Tuning};
use crate::store::{Backend, GroupRow, Store};
use crate::{aws, local, paths, slurm};
use std::io;
use std::path::{Path, PathBuf};

/// One backend, as the rest of skyc knows it.
pub struct Descriptor {
    pub kind: Backend,
    /// The store's `backend` column, the `--target` value and what
    /// `status` prints.
    pub name: &'static str,
    /// How messages name it: "the Kubernetes backend".
    pub title: &'static str,
    /// What `run --target` says of it: where, and what a group runs as.
    pub runs_group: &'static str,
    /// What `pool apply --target` says of it: what a worker and a job
    /// run as.
    pub runs_pool: &'static str,
    /// What a node runs as, when it is an object of the backend's own (a
    /// pod, an instance): `status` shows it in place of the agent's pid.
    pub handle: Option<Handle>,
    /// `run -d` waits until the group exists on the backend (its job
    /// id recorded) or has ended: the cluster's own checks (the JobSet
    /// controller installed, RBAC, the name free) answer only once the
    /// supervisor has applied it.
    pub detach_waits: bool,
    /// Gives nodes their task's local `workdir` and `file_mounts`: a
    /// submission takes their snapshots ([`crate::files`]) for it.
    pub delivers_files: bool,
    /// Mounts buckets on its nodes (`mode: MOUNT`, [`crate::storage::mount`]):
    /// a submission finds them for it.
    pub mounts_buckets: bool,
    /// Where a group's logs are.
    pub logs: fn(&LogQuery<'_>) -> Result<LogPlaces, String>,
    /// Starts the supervisor's side of it, with its first group.
    pub start: fn(&Path, &Setup) -> io::Result<Box<dyn Driver>>,
}

/// A node's handle in `status`: the table's column and the `--json` key.
pub struct Handle {
    pub column: &'static str,
    pub key: &'static str,
}

/// What the supervisor was started with that a backend may need.
#[derive(Clone)]
pub struct Setup {
    /// skyc's executable, read when the supervisor starts (a later read
    /// could find it replaced): the local backend's spawn helper.
    pub exe: PathBuf,
    /// How the Kubernetes backend reaches its cluster (the kubeconfig's,
    /// or a test's).
    pub k8s: (Connect, Tuning),
}

/// A group whose logs are looked for.
pub struct LogQuery<'a> {
    pub store: &'a Store,
    pub state: &'a Path,
    pub group: &'a GroupRow,
    /// Its tasks' names, in order.
    pub tasks: &'a [String],
}

/// Where a group's logs are.
pub struct LogPlaces {
    /// Each task's directory holding `logs/<task>-<rank>.log`, in task
    /// order.
    pub task_dirs: Vec<PathBuf>,
    /// Logs of the backend's own beside the nodes' (Slurm's batch
    /// output: why a script could not run the group), with their labels.
    pub extra: Vec<(String, PathBuf)>,
}

/// Every backend, in the order `status` and `--help` list them.
pub static BACKENDS: [Descriptor; 4] = [
    Descriptor {
        kind: Backend::Local,
        name: "local",
        title: "local",
        runs_group: "This machine",
        runs_pool: "This machine: each worker a node environment of its own",
        handle: None,
        detach_waits: false,
        delivers_files: true,
        mounts_buckets: true,
        logs: in_group_dir,
        start: |dir, setup| {
            Ok(Box::new(local::backend::Local::new(
                dir,
                setup.exe.clone(),
            )?))
        },
    },
    Descriptor {
        kind: Backend::Slurm,
        name: "slurm",
        title: "Slurm",
        runs_group: "A Slurm cluster, the one `SLURM_CONF` names (else Slurm's default): the \
                     group runs as one heterogeneous job, a pipeline as one job per step",
        runs_pool: "A Slurm cluster: each worker a batch job holding its allocation, each job \
                    a step in it",
        handle: None,
        detach_waits: false,
        delivers_files: true,
        mounts_buckets: true,
        logs: slurm::log_places,
        start: |dir, _| Ok(Box::new(slurm::SlurmBackend::new(dir))),
    },
    Descriptor {
        kind: Backend::Kubernetes,
        name: "k8s",
        title: "Kubernetes",
        runs_group: "A Kubernetes cluster, as kubectl finds it (`KUBECONFIG`, ~/.kube/config, \
                     in-cluster): the group runs as a JobSet",
        runs_pool: "A Kubernetes cluster: each worker a pod per node, each job started in it",
        handle: Some(Handle {
            column: "POD",
            key: "pod",
        }),
        detach_waits: true,
        delivers_files: true,
        mounts_buckets: false,
        logs: in_group_dir,
        start: |dir, setup| {
            let (connect, tuning) = setup.k8s.clone();
            Ok(Box::new(Kubernetes::start(
                dir.to_owned(),
                connect,
                tuning,
            )?))
        },
    },
    Descriptor {
        kind: Backend::Aws,
        name: "aws",
        title: "AWS",
        runs_group: "AWS, as the AWS CLI finds it (credentials, `AWS_ENDPOINT_URL`): one EC2 \
                     instance per node, reached over SSH",
        runs_pool: "AWS EC2: each worker an instance per node",
        handle: Some(Handle {
            column: "INSTANCE",
            key: "instance",
        }),
        detach_waits: false,
        delivers_files: true,
        mounts_buckets: false,
        logs: in_group_dir,
        start: |dir, _| Ok(Box::new(aws::Aws::start(dir.to_owned())?)),
    },
];

impl Backend {
    /// Its entry in [`BACKENDS`].
    pub fn descriptor(self) -> &'static Descriptor {
        &BACKENDS[self.index()]
    }

    /// Its place in [`BACKENDS`].
    pub fn index(self) -> usize {
        BACKENDS
            .iter()
            .position(|d| d.kind == self)
            .expect("every backend is in the registry")
    }

    pub fn as_str(self) -> &'static str {
        self.descriptor().name
    }

    /// The backend named `name` (the store's column, `--target`).
    pub fn named(name: &str) -> Option<Self> {
        BACKENDS.iter().find(|d| d.name == name).map(|d| d.kind)
    }
}

/// Logs where most backends keep them: every task's in the group's
/// directory.
fn in_group_dir(q: &LogQuery<'_>) -> Result<LogPlaces, String> {
    Ok(LogPlaces {
        task_dirs: vec![paths::group_dir(q.state, q.group.id); q.tasks.len()],
        extra: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_backend_is_listed_once_at_its_place() {
        for (i, d) in BACKENDS.iter().enumerate() {
            assert_eq!(d.kind.index(), i, "{}", d.name);
            assert_eq!(Backend::named(d.name), Some(d.kind));
            assert_eq!(
                serde_json::to_value(d.kind).unwrap(),
                serde_json::json!(d.name),
                "the store's JSON names it as the registry does"
            );
        }
    }
}
