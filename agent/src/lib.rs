//! skyc's node agent: one small process per node and phase of a local
//! group, which outlives the supervisor (see [`agent`] for what it does).
//!
//! It is built to cost little memory, since one runs per node: no C
//! library and no allocator (`no_std`, its own system calls in [`sys`] and
//! entry point in `start`), linked static and not position-independent, so
//! that nothing in it is relocated at load time and its code and read-only
//! data stay shared among all agents. Each agent then owns little more than
//! its stack. Building it `no_std` on stable Rust needs `panic = "abort"`,
//! so the runtime's build script builds it with rustc, links it
//! (`-nostartfiles -nostdlib -static -no-pie`) and carries the executable,
//! which the local backend installs in the state directory.
#![cfg_attr(not(test), no_std)]

pub mod agent;
#[cfg(not(test))]
mod start;
pub mod sys;
