//! Integration tests of skyc, compiled into one test binary.

mod support;

mod cli;
mod conformance;
mod examples;
mod hostile;
mod k8s;
mod local;
mod local_network;
mod slurm;
mod slurm_e2e;
mod slurm_run;
