//! The IR: one Job Group, normalised, that every target lowers from.
//!
//! Deterministic (no maps with random order) and free of YAML details;
//! spans are kept for targets that must report an error at the source, but
//! are not part of the serialised form.

use crate::Span;
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Group {
    pub name: String,
    /// `None` when the file was a single task (run as a one-task group).
    #[serde(skip)]
    pub name_span: Option<Span>,
    pub inter_connection: InterConnection,
    /// Together (a Job Group) or one after another (a pipeline).
    pub execution: Execution,
    /// In order; a pipeline's steps run in this order.
    pub tasks: Vec<Task>,
    /// A pool file (`sky jobs pool apply`): its one task is each worker's,
    /// and jobs are submitted to the pool. Absent for everything else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<Pool>,
}

/// A pool of workers for managed jobs, as SkyPilot's spec resolves it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pool {
    /// The `pool` key, for targets that refuse a pool.
    #[serde(skip)]
    pub span: Span,
    pub workers: PoolWorkers,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PoolWorkers {
    /// `workers: N` without `max_workers`.
    Fixed { count: u64 },
    /// `max_workers` set: SkyServe's queue-length autoscaler, with its
    /// defaults filled in (`min_workers`: `workers`, else 1;
    /// `queue_length_threshold` 1; delays 300 s up, 1200 s down).
    Autoscaled {
        min_workers: u64,
        max_workers: u64,
        /// Scale up when more jobs than this wait.
        queue_length_threshold: u64,
        upscale_delay_seconds: f64,
        downscale_delay_seconds: f64,
    },
}

/// How a group's tasks are ordered in time. A pipeline is a chain: each
/// task waits for the one before it (a DAG would name its predecessors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Execution {
    /// Every task at once: `execution: parallel`, a Job Group.
    Parallel,
    /// Each task after the previous one succeeded: a managed-job pipeline.
    Serial,
}

/// Whether tasks must reach each other by group hostname.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InterConnection {
    /// Unset: networking where the target can provide it.
    Auto,
    /// `true`: required; a target that cannot provide it must fail.
    Required,
    /// `false`: none.
    Disabled,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Primary,
    Auxiliary,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Task {
    pub name: String,
    #[serde(skip)]
    pub name_span: Span,
    pub role: Role,
    pub num_nodes: u32,
    /// Seconds an auxiliary keeps running after every primary succeeded;
    /// `None` for primaries.
    pub termination_delay_secs: Option<u64>,
    pub resources: Resources,
    pub recovery: Recovery,
    pub envs: Vec<EnvVar>,
    /// Names of secret variables; values never enter the IR.
    pub secrets: Vec<String>,
    pub setup: Option<String>,
    pub run: Option<String>,
    pub workdir: Option<Workdir>,
    pub file_mounts: Vec<FileMount>,
    pub volumes: Vec<VolumeMount>,
    /// Per-task config overrides (`config:`), as written, for targets.
    pub config: Option<serde_json::Value>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Resources {
    /// `true` when candidates are a preference order (`ordered` or a list
    /// of accelerators), `false` when any will do.
    pub ordered: bool,
    /// At least one.
    pub candidates: Vec<Candidate>,
}

/// One acceptable shape for every node of the task.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Candidate {
    pub infra: Option<Infra>,
    pub accelerator: Option<Accelerator>,
    pub cpus: Option<Quantity>,
    /// In GiB, as SkyPilot reads `memory` (GB means GiB there).
    pub memory_gb: Option<Quantity>,
    pub instance_type: Option<String>,
    pub use_spot: bool,
    pub disk_size_gb: Option<u64>,
    pub disk_tier: Option<String>,
    pub network_tier: Option<String>,
    pub ports: Vec<PortRange>,
    pub image: Option<Image>,
    pub labels: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Infra {
    /// Lower-case cloud name, `kubernetes` for `k8s`; `None` for `*`.
    pub cloud: Option<String>,
    /// Region, or the Kubernetes context.
    pub region: Option<String>,
    pub zone: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Accelerator {
    /// As written (SkyPilot canonicalises names against its catalog).
    pub name: String,
    /// Per node; may be fractional.
    pub count: f64,
    /// Where it is written, for a target that cannot give it. Not part
    /// of what it is: two candidates asking for the same are equal.
    #[serde(skip)]
    pub span: Span,
}

impl PartialEq for Accelerator {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.count == other.count
    }
}

/// A minimum (`4+`) or an exact amount (`4`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Quantity {
    pub value: f64,
    pub at_least: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PortRange {
    pub start: u16,
    pub end: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "ref", rename_all = "snake_case")]
pub enum Image {
    /// `docker:<image>`.
    Docker(String),
    /// Any other image id (a cloud image, `skypilot:<tag>`).
    Cloud(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Recovery {
    /// Upper-case strategy for preemptions and lost nodes; SkyPilot always
    /// recovers managed jobs, `EAGER_NEXT_REGION` by default.
    pub strategy: String,
    pub max_restarts_on_errors: u32,
    pub recover_on_exit_codes: Vec<u8>,
}

impl Default for Recovery {
    fn default() -> Self {
        Self {
            strategy: "EAGER_NEXT_REGION".to_owned(),
            max_restarts_on_errors: 0,
            recover_on_exit_codes: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workdir {
    Local {
        path: String,
        #[serde(skip)]
        at: At,
    },
    Git {
        url: String,
        r#ref: Option<String>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FileMount {
    pub destination: String,
    /// A local path or bucket URI; `None` for a storage spec with no source.
    pub source: Option<String>,
    /// The storage spec's bucket name, mode, store, as written.
    pub storage: Option<serde_json::Value>,
    /// The mount's value (its source), for what reading it finds.
    #[serde(skip)]
    pub at: At,
}

/// Where a value is written: carried for the diagnostics of later stages
/// (reading a `workdir`, say), never part of what the value is, so two
/// equal values written in different places stay equal.
#[derive(Clone, Copy, Debug, Default)]
pub struct At(pub Span);

impl PartialEq for At {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for At {}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VolumeMount {
    pub path: String,
    /// A volume name, or the inline spec as written.
    pub volume: serde_json::Value,
    /// The volume's value, for what finding it finds.
    #[serde(skip)]
    pub at: At,
}

/// A volume file (`skyc volume apply`), as SkyPilot's loader reads it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Volume {
    pub name: String,
    /// SkyPilot's type (`k8s-pvc`, `k8s-hostpath`, ...).
    pub r#type: String,
    pub infra: Option<String>,
    /// Whole GiB, rounded up; `None` when not given.
    pub size_gb: Option<u64>,
    pub use_existing: bool,
    /// Type-specific settings, as written.
    pub config: Option<serde_json::Value>,
    /// Its name, for what applying it finds.
    #[serde(skip)]
    pub at: At,
}

impl Volume {
    /// A new volume needs a size, as SkyPilot's loader says (a
    /// `k8s-hostpath` one has none).
    pub fn lacks_size(&self) -> bool {
        self.size_gb.is_none() && !self.use_existing && self.r#type != "k8s-hostpath"
    }
}
