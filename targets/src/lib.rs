//! skyc's targets: each lowers the IR ([`skyc_compiler::ir::Group`]) to what
//! one kind of cluster runs. Pure: IR in, objects and diagnostics out; no
//! I/O, no clock, so the same group always builds the same bytes.

pub mod cloud;
pub mod k8s;
pub mod shell;
pub mod slurm;
