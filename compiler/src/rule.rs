//! Every rule skyc checks, with its stable name and default severity.
//!
//! The name is what users see (`error[duplicate-task-name]`), what
//! `--format json|sarif` reports, and what the fixtures refer to. Never rename
//! one; add a new rule instead.

use crate::Severity;

macro_rules! rules {
    ($($variant:ident = $name:literal, $severity:ident, $summary:literal;)*) => {
        /// A rule of the Job Group language.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Rule { $($variant,)* }

        impl Rule {
            pub const ALL: &[Rule] = &[$(Rule::$variant,)*];

            pub fn name(self) -> &'static str {
                match self { $(Rule::$variant => $name,)* }
            }

            pub fn severity(self) -> Severity {
                match self { $(Rule::$variant => Severity::$severity,)* }
            }

            pub fn summary(self) -> &'static str {
                match self { $(Rule::$variant => $summary,)* }
            }
        }
    };
}

rules! {
    // Reading the file.
    InvalidUtf8 = "invalid-utf8", Error, "The file is not UTF-8 text.";
    FileTooLarge = "file-too-large", Error, "The file is larger than skyc reads.";
    TooManyDiagnostics = "too-many-diagnostics", Warning, "The file has more problems than skyc lists.";
    YamlSyntax = "yaml-syntax", Error, "The file is not well-formed YAML.";
    YamlLimit = "yaml-limit", Error, "The YAML nests too deeply or expands too many aliases.";
    UnsupportedTag = "unsupported-tag", Error, "A YAML tag SkyPilot's safe loader cannot construct.";
    DuplicateKey = "duplicate-key", Error, "A mapping defines the same key twice.";
    NonStringKey = "non-string-key", Error, "A mapping key is not a string.";
    // The shape of the stream.
    NotAMapping = "not-a-mapping", Error, "A document is not a mapping.";
    EmptyFile = "empty-file", Error, "The file holds no task.";
    GroupWithoutTasks = "group-without-tasks", Error, "A Job Group header is not followed by any task.";
    EmptyHeader = "empty-header", Error, "The Job Group header document is empty.";
    InvalidExecution = "invalid-execution", Error, "`execution` is not `parallel`.";
    // Structure (the JSON Schemas in schemas/).
    UnknownField = "unknown-field", Error, "A field the schema does not define.";
    MissingField = "missing-field", Error, "A required field is missing.";
    InvalidType = "invalid-type", Error, "A value has the wrong type.";
    InvalidValue = "invalid-value", Error, "A value is outside what the field accepts.";
    // The Job Group header.
    UnknownHeaderField = "unknown-header-field", Warning, "A header field SkyPilot ignores.";
    InvalidGroupName = "invalid-group-name", Error, "The group name has characters other than letters, digits, `-` and `_`.";
    UnknownPrimaryTask = "unknown-primary-task", Error, "`primary_tasks` names a task that does not exist.";
    InvalidDuration = "invalid-duration", Error, "A duration is not NUMBER[s|m|h|d|w].";
    UnknownDelayTask = "unknown-delay-task", Error, "A `termination_delay` key names no task.";
    UnusedTerminationDelay = "unused-termination-delay", Warning, "A `termination_delay` that can never apply.";
    // Tasks.
    MissingTaskName = "missing-task-name", Error, "A task in a Job Group has no name.";
    InvalidTaskName = "invalid-task-name", Error, "A task name SkyPilot rejects.";
    DuplicateTaskName = "duplicate-task-name", Error, "Two tasks share a name.";
    NotDnsLabel = "not-dns-label", Warning, "A name that cannot be a DNS label, so its hostnames fail on DNS-based targets.";
    InvalidNumNodes = "invalid-num-nodes", Error, "`num_nodes` is not a positive integer.";
    MissingEnvValue = "missing-env-value", Error, "An environment variable has no value and none was given with --env.";
    InvalidSecret = "invalid-secret", Error, "A malformed `secrets` entry.";
    ConflictingFields = "conflicting-fields", Error, "Two fields that cannot be set together.";
    InvalidFileMount = "invalid-file-mount", Error, "A file mount SkyPilot rejects.";
    InvalidVolume = "invalid-volume", Error, "A volume mount SkyPilot rejects.";
    // Resources.
    InvalidCpus = "invalid-cpus", Error, "`cpus` is not a positive number or `N+`.";
    InvalidMemory = "invalid-memory", Error, "`memory` is not a positive size or `N+`.";
    InvalidAccelerators = "invalid-accelerators", Error, "`accelerators` is malformed.";
    InvalidInfra = "invalid-infra", Error, "`infra` is malformed.";
    InvalidPorts = "invalid-ports", Error, "`ports` is malformed or out of range.";
    InvalidDiskSize = "invalid-disk-size", Error, "`disk_size` is not a positive size.";
    InvalidJobRecovery = "invalid-job-recovery", Error, "`job_recovery` is malformed.";
    UnknownRecoveryStrategy = "unknown-recovery-strategy", Warning, "A recovery strategy SkyPilot does not ship (a plugin may provide it).";
    DeprecatedField = "deprecated-field", Warning, "A field SkyPilot has deprecated.";
    IneffectiveSetting = "ineffective-setting", Warning, "A setting that does not do what it says.";
    // Placement: the tasks' infra pins against `inter_connection`.
    InterConnectionOffKubernetes = "inter-connection-off-kubernetes", Error, "`inter_connection: true` with a task pinned only off Kubernetes, the one place SkyPilot has in-group networking.";
    InterConnectionAcrossInfra = "inter-connection-across-infra", Error, "`inter_connection: true` with tasks pinned to infrastructures that share no option.";
    NoCommonInfra = "no-common-infra", Warning, "Tasks pinned to infrastructures that share no option, so SkyPilot sets up no in-group networking.";
    // SkyServe (`service`).
    InvalidService = "invalid-service", Error, "A `service` section SkyServe rejects.";
    // Pools (a file with a top-level `pool`, for `sky jobs pool apply`).
    InvalidPool = "invalid-pool", Error, "A pool file `sky jobs pool apply` rejects.";
    PoolRunIgnored = "pool-run-ignored", Warning, "A pool's `run`, which SkyPilot ignores: the jobs submitted to the pool bring their own.";
    RunPoolFile = "run-pool-file", Error, "A pool file given to `skyc run`: a pool is applied, then jobs are submitted to it.";
    PoolJobIgnored = "pool-job-ignored", Warning, "A job's `setup`, `file_mounts` or storage mounts, which a pool ignores: its workers ran the pool's.";
    PoolJobMisfit = "pool-job-misfit", Error, "A job a pool's workers cannot run: more nodes or resources than a worker has, or more than one task.";
    ApplyJobFile = "apply-job-file", Error, "A file without `pool` given to `skyc pool apply`.";
    // Checks SkyPilot does not make.
    UnknownHostTask = "unknown-host-task", Error, "A group hostname names a task that does not exist.";
    HostIndexOutOfRange = "host-index-out-of-range", Error, "A group hostname names a node the task does not have.";
    HostnamesDisabled = "hostnames-disabled", Warning, "Scripts use group hostnames that `inter_connection: false` turns off.";
    // The local target.
    ExceedsLocalCapacity = "exceeds-local-capacity", Error, "A task needs more than this machine offers.";
    MissingSecretValue = "missing-secret-value", Error, "A task's secret has no value.";
    NotAppliedLocally = "not-applied-locally", Warning, "A setting the local target does not apply.";
    UnsupportedLocally = "unsupported-locally", Error, "A setting the local target cannot run.";
    // Code and data: a task's `workdir` and local `file_mounts`, read when submitted or built.
    MissingFileSource = "missing-file-source", Error, "A `workdir` or file mount source that does not exist.";
    WorkdirNotDirectory = "workdir-not-directory", Error, "A local `workdir` that is not a directory.";
    StorageSourceNotDirectory = "storage-source-not-directory", Error, "A storage spec's local `source` that is not a directory (a bucket is given directories).";
    UnreadableFileSource = "unreadable-file-source", Error, "A file or directory under a source that cannot be read.";
    SpecialFileInSource = "special-file-in-source", Error, "A socket, device or pipe under a source: it cannot be copied.";
    SymlinkLeavesSource = "symlink-leaves-source", Error, "A symbolic link under a source that points outside it.";
    FilesTooLarge = "files-too-large", Error, "A submission's files, together, above the size limit.";
    MissingBucketSource = "missing-bucket-source", Error, "A bucket, or a path in one, that a file mount copies and that does not exist.";
    NoBucketMounter = "no-bucket-mounter", Error, "A bucket mounted where skyc cannot mount it (no rclone or FUSE on this machine).";
    BucketKept = "bucket-kept", Warning, "`persistent: false` on a bucket skyc did not make, which it never deletes.";
    UnreadableBucketSource = "unreadable-bucket-source", Error, "A bucket a file mount copies that cannot be read (credentials, access, region, a key that is no path).";
    // Volumes: a volume file, and the volumes tasks mount.
    InvalidVolumeFile = "invalid-volume-file", Error, "A volume file SkyPilot's loader refuses beyond its schema.";
    UnknownVolume = "unknown-volume", Error, "A task mounts a volume the target does not have.";
    // Lowering to Kubernetes (`skyc build --target k8s`).
    K8sInvalidName = "k8s-invalid-name", Error, "A name Kubernetes cannot use for the objects or hostnames built from it.";
    K8sIgnoredSetting = "k8s-ignored-setting", Warning, "A setting with no Kubernetes meaning, or one the manifests cannot carry; it is not applied.";
    K8sUnsupported = "k8s-unsupported", Error, "A setting the Kubernetes target cannot honour.";
    K8sBucketMount = "k8s-bucket-mount", Error, "A bucket mounted in pods where skyc may not mount it (no `--bucket-mounts sidecar`), or at a path a pod volume cannot be.";
    CloudBucketMount = "cloud-bucket-mount", Error, "A bucket mounted on cloud instances that cannot mount it: a GCS bucket on AWS, any bucket on GCP.";
    K8sPodSetCap = "k8s-podset-cap", Warning, "More replicated Jobs than Kueue admits in one workload.";
    K8sTooLarge = "k8s-too-large", Error, "An object larger than the Kubernetes API server stores.";
    // Lowering to Slurm.
    SlurmSbatchOption = "slurm-sbatch-option", Error, "An sbatch option or value that cannot be written on an #SBATCH line.";
    SlurmUnrepresentable = "slurm-unrepresentable", Error, "A value the Slurm batch script cannot carry.";
    SlurmIgnored = "slurm-ignored", Warning, "A task setting the Slurm target does not apply.";
    SlurmGpuType = "slurm-gpu-type", Error, "A GPU type, or a count per node, the Slurm cluster does not offer.";
    // Lowering to cloud instance specs (`skyc build --target aws|gcp`).
    CloudNoInstance = "cloud-no-instance", Error, "No instance in the catalog satisfies a task's resources.";
    CloudNoCommonRegion = "cloud-no-common-region", Error, "The tasks of a group have no region in common on the cloud.";
    CloudInvalidName = "cloud-invalid-name", Error, "A name the cloud cannot use for the instances, labels or rules built from it.";
    CloudUnrepresentable = "cloud-unrepresentable", Error, "A value a boot script or request cannot carry.";
    CloudUserDataTooLarge = "cloud-user-data-too-large", Error, "A node's boot script is larger than the cloud accepts.";
    CloudTooManyNodes = "cloud-too-many-nodes", Error, "A group with more nodes than one instance spec holds.";
    CloudIgnored = "cloud-ignored", Warning, "A task setting the cloud target does not apply.";
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
