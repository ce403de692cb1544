//! Integration tests of skyc, compiled into one test binary.

mod support;

mod agent;
mod aws_controller;
mod aws_run;
mod cli;
mod cloud;
mod conformance;
mod dashboard;
mod examples;
mod files;
mod hostile;
mod jobs_cli;
mod k8s;
mod k8s_run;
mod local;
mod local_leftovers;
mod local_network;
mod lsp;
mod pipelines;
mod pools;
mod slurm;
mod slurm_e2e;
mod slurm_pipeline;
mod slurm_pipeline_run;
mod slurm_pools;
mod slurm_run;
mod slurm_step;
mod storage;
