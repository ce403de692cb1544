//! The Slurm target: a Job Group as one heterogeneous batch job.
//!
//! One hetjob component per task (nodes, cpus, memory, `gpu:N` gres from
//! the IR), and a batch script that runs the whole lifecycle inside the
//! allocation: one `srun --het-group` step per task, group hostnames
//! through a private `/etc/hosts` per step, SIGTERM/SIGKILL of auxiliaries
//! after the primaries, restarts within the budget. [`build`] is pure: the
//! same IR and options give the same bytes.
//!
//! - `sbatch`: validated `#SBATCH` options (sbatch reads them without a
//!   shell, so values are checked, never escaped);
//! - `quote`: single quoting for every user value in the script body;
//! - `script`: assembles the script from the IR;
//! - `lifecycle`: the in-allocation supervisor and step wrapper (shell).

mod lifecycle;
mod quote;
mod sbatch;
mod script;

pub use lifecycle::{STEP, SUPERVISOR_MARKER};
pub use quote::{is_variable_name, quote};
pub use sbatch::{SbatchError, SbatchOption, is_safe_value};
pub use script::{Build, Options, build};
