//! Integration tests of skyc, compiled into one test binary.

mod support;

mod cli;
mod conformance;
mod examples;
mod hostile;
mod jobs_cli;
mod k8s;
mod local;
mod lsp;
mod slurm;
mod slurm_e2e;
mod slurm_run;
