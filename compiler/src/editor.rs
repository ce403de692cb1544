//! What an editor needs from the language besides diagnostics: the group
//! hostnames a text names, and the closed sets of values some fields take.
//! The rules stay where they are checked; this module only exposes them.

pub use crate::analyzer::hostnames::{Reference, find_references};

/// The values `field` takes from a closed set, as the analyzer checks them
/// (`job_recovery` or its `strategy`, `disk_tier`, `network_tier`); the
/// schemas' `enum`s and `const`s are read from the schemas themselves.
pub fn field_values(field: &str) -> &'static [&'static str] {
    use crate::analyzer::resources::{DISK_TIERS, NETWORK_TIERS, STRATEGIES};
    match field {
        "job_recovery" | "strategy" => &STRATEGIES,
        "disk_tier" => &DISK_TIERS,
        "network_tier" => &NETWORK_TIERS,
        _ => &[],
    }
}
