//! skyc's compiler: a SkyPilot Job Group file in, diagnostics and the IR out.
//!
//! Stages, each a noun in its own module: the [`yaml::Reader`] (text to
//! spanned YAML trees, with PyYAML's scalar rules), the validator
//! (`schema`: the JSON Schemas in `schemas/`), and the `Analyzer` (every
//! semantic rule, and lowering to the [`ir`]). [`compile`] runs them;
//! [`render`] prints what they found. Nothing here does I/O or reads the
//! clock.

mod analyzer;
mod compilation;
mod diagnostic;
pub mod editor;
pub mod ir;
mod pyjson;
pub mod render;
mod rule;
mod schema;
mod source;
mod suggest;
mod units;
/// Dates for what skyc prints (task ids, catalog dates), with no clock read.
pub mod yaml;

pub use analyzer::Options;
pub use analyzer::names::is_dns_label;
pub use compilation::{Compilation, MAX_FILE_BYTES, VolumeCompilation, compile, compile_volume};
pub use diagnostic::{Diagnostic, Diagnostics, Fix, Label, MAX_DIAGNOSTICS, Severity};
pub use rule::Rule;
pub use schema::editor_schema;
pub use source::{Position, Source, Span};
pub use units::{parse_cpus, parse_disk_size, parse_memory, parse_volume_size};
