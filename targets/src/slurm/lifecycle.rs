//! The shell that runs inside the allocation, the same for every group:
//! the supervisor (`lifecycle.sh`, appended to every batch script after the
//! group's data) and the step wrapper (`step.sh`, written out by the batch
//! script and run by srun on every node). Kept as shell files so they can
//! be read, and shellchecked, as shell.

use crate::shell::quote;

/// The supervisor. Reads the `skyc_*` variables and the writers
/// (`skyc_write_task_files`, `skyc_write_step`) defined before it.
const SUPERVISOR: &str = include_str!("lifecycle.sh");

/// The step wrapper: `bash step.sh G ATTEMPT` on each node of a step.
pub const STEP: &str = include_str!("step.sh");

/// The first line of the part every script shares: what precedes it is
/// the group's own part.
pub const SUPERVISOR_MARKER: &str = "# ---- skyc lifecycle";

/// The part every script shares: the marker, the writer of the step
/// wrapper (`skyc_write_step FILE`), the supervisor.
pub(crate) fn fixed_part() -> String {
    format!(
        "{SUPERVISOR_MARKER}: the same for every group -------------------------------\n\
         # shellcheck disable=SC2016 # a literal script, written out unexpanded\n\
         skyc_write_step() {{\n    printf '%s' {} >\"$1\"\n}}\n{SUPERVISOR}",
        quote(STEP)
    )
}
