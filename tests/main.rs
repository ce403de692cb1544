//! Integration tests of skyc, compiled into one test binary.

mod support;

mod cli;
mod conformance;
mod examples;
mod hostile;
mod local;
mod k8s;
