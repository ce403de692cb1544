//! skyc's targets: a compiled group (the IR) in, the artifacts a scheduler
//! runs out. Pure and deterministic: no I/O, no clock, the same bytes for
//! the same input.

pub mod slurm;
