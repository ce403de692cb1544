//! The shell that runs inside the allocation, the same for every group:
//! the supervisor (`lifecycle.sh`, appended to every batch script after the
//! group's data) and the step wrapper (`step.sh`, written out by the batch
//! script and run by srun on every node). Kept as shell files so they can
//! be read, and shellchecked, as shell.

/// The supervisor. Reads the `skyc_*` variables and the
/// `skyc_write_task_files`/`skyc_write_step` functions the script defines
/// before it.
pub(crate) const SUPERVISOR: &str = include_str!("lifecycle.sh");

/// The step wrapper: `bash step.sh G ATTEMPT` on each node of a step.
pub const STEP: &str = include_str!("step.sh");

/// The first line of [`SUPERVISOR`]: what precedes it in a script is the
/// group's own part.
pub const SUPERVISOR_MARKER: &str = "# ---- skyc lifecycle";
