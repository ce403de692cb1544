//! skyc's targets: each lowers the IR ([`skyc_compiler::ir::Group`]) to what
//! one kind of cluster runs. Pure: IR in, objects and diagnostics out; no
//! I/O, no clock, so the same group always builds the same bytes.

pub mod cloud;
pub mod files;
pub mod k8s;
pub mod shell;
pub mod slurm;
pub mod storage;

use skyc_compiler::ir::Group;
use skyc_compiler::{Diagnostic, Rule};

/// A target that cannot take a pool refuses it at its `pool` key.
/// `target` is its name as users write it (`Slurm`, `AWS`).
pub fn pool_refusal(group: &Group, target: &str, rule: Rule) -> Option<Diagnostic> {
    let pool = group.pool.as_ref()?;
    Some(
        Diagnostic::new(
            rule,
            pool.span,
            format!("pools are not supported on the {target} target yet"),
        )
        .label("a pool")
        .help("`skyc build --target ir` prints the pool as checked"),
    )
}
