//! A pool's worker on Slurm: one batch job holding its allocation. The
//! pool's task lowered as a group of one task ([`super::build`]'s header,
//! data and lifecycle: setup on every node under the step wrapper), whose
//! `run` is [`HOLD`]: each node marks itself ready and waits until the
//! worker is retired (scancel). The job is not requeued: a worker whose
//! allocation ends is replaced by the pool.
//!
//! The pool's jobs run as steps of that allocation (`srun --jobid
//! --overlap`), each started by [`LAUNCH`] on the submitting side.

use super::script::{Build, Common, Job, Options, batch_script};
use skyc_compiler::ir::Group;
use skyc_compiler::{Diagnostic, Rule};

/// A worker node's `run`: marks the node ready (`$SKYC_RUN_DIR/ready.RANK`,
/// read by the supervisor), then holds the allocation. A hold that ends
/// by itself is the worker's loss.
pub const HOLD: &str = ": >\"$SKYC_RUN_DIR/ready.$SKYPILOT_NODE_RANK\"\nexec sleep infinity\n";

/// The launcher of a pool job's step: `bash launch.sh DIR SRUN_ARGS...`.
pub const LAUNCH: &str = include_str!("launch.sh");

/// Lowers a pool file's group (one task, a `pool` section) to its
/// worker's batch script.
pub fn worker(group: &Group, options: &Options) -> Build {
    let mut diagnostics = Vec::new();
    let common = Common::new(group, options, &mut diagnostics);
    if group.pool.is_none() || group.tasks.len() != 1 {
        diagnostics.push(
            Diagnostic::new(
                Rule::SlurmUnrepresentable,
                common.span,
                "a pool's worker is made from a pool file: one task and a `pool` section",
            )
            .label("not a pool"),
        );
        return Build {
            script: None,
            diagnostics,
        };
    }
    let mut held = group.clone();
    held.pool = None;
    held.tasks[0].run = Some(HOLD.to_owned());
    // A worker whose setup fails is replaced by the pool, not restarted.
    held.tasks[0].recovery.max_restarts_on_errors = 0;
    held.tasks[0].recovery.recover_on_exit_codes.clear();
    let script = batch_script(&held, Job::Worker, &common, &mut diagnostics);
    Build {
        script: (!diagnostics.iter().any(Diagnostic::is_error)).then_some(script),
        diagnostics,
    }
}

/// The opening comment of a worker's script.
pub(super) fn comment(group: &Group) -> String {
    format!(
        "#!/bin/bash\n\
         # Built by skyc: a worker of the pool `{}` (one Slurm batch job). Runs the\n\
         # pool's setup on every node, then holds the allocation until cancelled; the\n\
         # pool's jobs run in it as job steps (srun --jobid=JOBID --overlap).\n",
        group.name
    )
}
