//! `pool`: a pool of workers for managed jobs. A pool file (one document
//! with a top-level `pool`) is what `sky jobs pool apply` takes: its task
//! (setup, resources, ...) is each worker's, and jobs are submitted to the
//! pool afterwards.
//!
//! Its structure is `schemas/pool.json`. SkyPilot reads a task's `pool` as
//! the service spec `{pool: ...}` (`Task.from_yaml_config`), so the spec's
//! rules are `service.rs`'s, applied to that spec; a pool file adds
//! `serve_utils.validate_service_task` with `pool=True` and the checks of
//! the command (`_generate_task_with_service`), with SkyPilot's messages.

use super::service;
use crate::ir::{Pool, PoolWorkers};
use crate::yaml::{Document, Entry, Node, Value};
use crate::{Diagnostic, Diagnostics, Rule, Span};

/// SkyServe's defaults for an autoscaled pool (`sky/serve/constants.py`).
const DEFAULT_QUEUE_LENGTH_THRESHOLD: u64 = 1;
const DEFAULT_UPSCALE_DELAY_SECONDS: f64 = 300.0;
const DEFAULT_DOWNSCALE_DELAY_SECONDS: f64 = 1200.0;
/// The minimum of an autoscaled pool that sets neither `min_workers` nor
/// `workers` (`DEFAULT_MIN_REPLICAS`).
const DEFAULT_MIN_WORKERS: u64 = 1;

/// Whether the file is a pool file as `sky jobs pool apply` reads one: a
/// single document (empty ones aside), a mapping with a `pool` key (with a
/// value or without).
pub(super) fn is_pool_file(documents: &[Document]) -> bool {
    let mut present = documents.iter().filter(|d| !d.root.is_null());
    match (present.next(), present.next()) {
        (Some(doc), None) => doc.root.entry("pool").is_some(),
        _ => false,
    }
}

/// The `pool` section of any task: the pool spec's rules, and what it
/// cannot go with (`service`; a Job Group's task).
pub(super) fn check(root: &Node, in_group: bool, out: &mut Diagnostics) {
    let Some(pool) = root.entry("pool").filter(|e| !e.value.is_null()) else {
        return;
    };
    if let Some(s) = root.entry("service").filter(|e| !e.value.is_null()) {
        out.push(
            Diagnostic::new(
                Rule::ConflictingFields,
                pool.key.span,
                "cannot set both `service` and `pool` in the same task",
            )
            .label("second")
            .with_secondary(s.key.span, "first")
            .help("a file is either a service (`service:`) or a pool of workers (`pool:`)"),
        );
    }
    if in_group {
        out.push(
            Diagnostic::new(
                Rule::ConflictingFields,
                pool.key.span,
                "tasks of a Job Group cannot use a pool",
            )
            .label("pools are not supported in Job Groups"),
        );
    }
    // SkyPilot checks the section as the service spec `{pool: ...}` once
    // its schema passed (run before this): an unknown field (`worker`) is
    // then its one error.
    if pool.value.as_map().is_some() && !out.has_error_within(pool.value.span) {
        let spec = Node::new(Value::Map(vec![pool.clone()]), pool.value.span);
        service::check_spec(&spec, Rule::InvalidPool, out);
    }
}

/// A pool file beyond its task's rules: what `sky jobs pool apply` checks
/// of it, and the pool spec for the IR (`None` when there is an error).
pub(super) fn analyze(root: &Node, out: &mut Diagnostics) -> Option<Pool> {
    let entry = root.entry("pool")?;
    if entry.value.is_null() {
        out.push(
            Diagnostic::new(
                Rule::InvalidPool,
                entry.key.span,
                "pool section not found in the YAML file: `pool` has no value",
            )
            .label("no pool spec")
            .help(
                "add a valid `pool` field: `workers: 2`, or `min_workers: 1` and `max_workers: 4`",
            ),
        );
        return None;
    }
    let resources = root.get_present("resources");
    let options = options(resources);
    spot(resources, &options, out);
    ordered(resources, out);
    for field in ["job_recovery", "ports"] {
        every(resources, &options, field, out);
    }
    if let Some(run) = root.entry("run").filter(|e| !e.value.is_null()) {
        out.push(
            Diagnostic::new(
                Rule::PoolRunIgnored,
                run.key.span,
                "pool creation does not support the `run` section; the pool is created ignoring it",
            )
            .label("ignored")
            .help(
                "a pool's workers run its `setup`; the jobs submitted to the pool bring their own \
                 `run` (the same file can serve as both)",
            ),
        );
    }
    workers(&entry.value).map(|workers| Pool {
        span: entry.key.span,
        workers,
    })
}

/// The entries of `any_of` or `ordered`, each merged over the base fields.
fn options(resources: Option<&Node>) -> Vec<&Node> {
    let Some(resources) = resources else {
        return Vec::new();
    };
    ["any_of", "ordered"]
        .iter()
        .filter_map(|k| resources.get_present(k).and_then(Node::as_seq))
        .flatten()
        .filter(|n| n.as_map().is_some())
        .collect()
}

/// Spot for every candidate or none (`validate_service_task`): an entry's
/// own `use_spot`, else the base's.
fn spot(resources: Option<&Node>, options: &[&Node], out: &mut Diagnostics) {
    let is_true = |n: &Node| matches!(n.value, Value::Bool(true));
    let base = resources
        .and_then(|r| r.get_present("use_spot"))
        .is_some_and(is_true);
    fn own(n: &Node) -> Option<&Entry> {
        n.entry("use_spot").filter(|e| !e.value.is_null())
    }
    let spot_of = |n: &Node| own(n).map_or(base, |e| is_true(&e.value));
    let Some(first) = options.first() else {
        return;
    };
    let Some(differs) = options.iter().find(|o| spot_of(o) != spot_of(first)) else {
        return;
    };
    // Point at an entry that says so itself; the other is the contrast.
    let (at, other) = if own(differs).is_some() {
        (*differs, *first)
    } else {
        (*first, *differs)
    };
    let span_of = |n: &Node| own(n).map_or_else(|| first_key(n), |e| e.key.span);
    let (mine, theirs) = if spot_of(at) {
        ("spot", "on-demand")
    } else {
        ("on-demand", "spot")
    };
    out.push(
        Diagnostic::new(
            Rule::InvalidPool,
            span_of(at),
            "resources must either all use spot or none use spot",
        )
        .label(format!("this candidate is {mine}"))
        .with_secondary(span_of(other), format!("this one is {theirs}"))
        .help("set `use_spot` alike on every candidate (once, beside `any_of`, sets it for all)"),
    );
}

/// Where an entry of a list of candidates is shown: its first key (a block
/// mapping's span runs on to the next entry).
fn first_key(node: &Node) -> Span {
    node.as_map()
        .and_then(<[Entry]>::first)
        .map_or(node.span, |e| e.key.span)
}

/// A preference order (`ordered`, or a list of accelerators).
fn ordered(resources: Option<&Node>, out: &mut Diagnostics) {
    let Some(resources) = resources else {
        return;
    };
    let span = match (
        resources.entry("ordered").filter(|e| !e.value.is_null()),
        resources
            .get_present("accelerators")
            .filter(|a| a.as_seq().is_some()),
    ) {
        (Some(e), _) => e.key.span,
        (None, Some(list)) => list.span,
        (None, None) => return,
    };
    out.push(
        Diagnostic::new(
            Rule::InvalidPool,
            span,
            "ordered resources are not supported for pools",
        )
        .label("a preference order")
        .help(
            "use `any_of` instead (`accelerators: {H100: 1, A100: 1}` for accelerators), or \
             specify a single resource",
        ),
    );
}

/// `job_recovery` and `ports`, which no candidate of a pool may set.
fn every(resources: Option<&Node>, options: &[&Node], field: &str, out: &mut Diagnostics) {
    let set = |n: &Node| {
        n.entry(field)
            .filter(|e| !e.value.is_null() && e.value.as_seq().is_none_or(|s| !s.is_empty()))
            .map(|e| e.key.span)
    };
    let spans = resources
        .into_iter()
        .chain(options.iter().copied())
        .filter_map(set);
    for span in spans {
        let d = match field {
            "ports" => Diagnostic::new(Rule::InvalidPool, span, "cannot specify ports in a pool")
                .label("a pool opens no ports")
                .help("workers run jobs, not services; for a service use `service:`"),
            _ => Diagnostic::new(
                Rule::InvalidPool,
                span,
                "job_recovery is disabled for Pool: a pool replenishes preempted spot workers \
                 with spot instances",
            )
            .label("not for a pool")
            .help("remove it; a job submitted to the pool sets its own `job_recovery`"),
        };
        out.push(d);
    }
}

/// A count the schema accepted: an integer, or an integral float.
fn count(node: Option<&Node>) -> Option<u64> {
    match node?.value {
        Value::Int(i) => u64::try_from(i).ok(),
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Value::Float(f) if f.fract() == 0.0 && (0.0..1.8e19).contains(&f) => Some(f as u64),
        _ => None,
    }
}

fn seconds(node: Option<&Node>, default: f64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    match node.map(|n| &n.value) {
        Some(Value::Int(i)) => *i as f64,
        Some(Value::Float(f)) => *f,
        _ => default,
    }
}

/// The workers as SkyPilot's spec resolves them: a fixed count, or the
/// queue-length autoscaler's bounds and settings, defaults filled in.
fn workers(pool: &Node) -> Option<PoolWorkers> {
    let field = |k: &str| pool.get_present(k);
    let workers = count(field("workers"));
    let Some(max_workers) = count(field("max_workers")) else {
        return workers.map(|count| PoolWorkers::Fixed { count });
    };
    Some(PoolWorkers::Autoscaled {
        min_workers: count(field("min_workers"))
            .or(workers)
            .unwrap_or(DEFAULT_MIN_WORKERS),
        max_workers,
        queue_length_threshold: count(field("queue_length_threshold"))
            .unwrap_or(DEFAULT_QUEUE_LENGTH_THRESHOLD),
        upscale_delay_seconds: seconds(
            field("upscale_delay_seconds"),
            DEFAULT_UPSCALE_DELAY_SECONDS,
        ),
        downscale_delay_seconds: seconds(
            field("downscale_delay_seconds"),
            DEFAULT_DOWNSCALE_DELAY_SECONDS,
        ),
    })
}

#[cfg(test)]
mod tests {
    use crate::ir::PoolWorkers;
    use crate::{Options, compile};

    fn pool_of(text: &str) -> Option<PoolWorkers> {
        let c = compile("p.yaml", text.as_bytes(), &Options::default());
        assert!(!c.has_errors(), "{:?}", c.diagnostics);
        c.group.and_then(|g| g.pool).map(|p| p.workers)
    }

    #[test]
    fn resolves_the_workers_as_skypilot_does() {
        assert_eq!(
            pool_of("pool:\n  workers: 3\nsetup: x\n"),
            Some(PoolWorkers::Fixed { count: 3 })
        );
        assert_eq!(
            pool_of("pool:\n  workers: 2\n  max_workers: 5\n"),
            Some(PoolWorkers::Autoscaled {
                min_workers: 2,
                max_workers: 5,
                queue_length_threshold: 1,
                upscale_delay_seconds: 300.0,
                downscale_delay_seconds: 1200.0,
            })
        );
    }

    /// `sky jobs pool apply` reads one document; a pipeline is no pool file.
    #[test]
    fn only_a_single_document_is_a_pool_file() {
        assert_eq!(pool_of("run: a\n---\npool:\n  workers: 1\nrun: b\n"), None);
        assert_eq!(pool_of("run: a\n"), None);
        assert!(pool_of("---\npool:\n  workers: 1\n---\n").is_some());
    }
}
