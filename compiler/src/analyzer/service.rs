//! `service`: a SkyServe spec, checked as SkyPilot loads it. Its structure
//! is `schemas/service.json`; the rules here are those of
//! `SkyServiceSpec.from_yaml_config` and the spec's constructor
//! (`sky/serve/service_spec.py`), with SkyPilot's messages.
//!
//! Before either, SkyPilot fills the task's envs and inline secrets into the
//! section (`$VAR`, `${VAR}`, keys included) by editing its JSON text, so
//! skyc checks the section as filled in.

use crate::pyjson;
use crate::yaml::{Entry, Node, Value};
use crate::{Diagnostic, Diagnostics, Rule, Span};

/// SkyServe's load balancing policies (the schema matches them in any case;
/// the spec wants them exactly).
const LB_POLICIES: [&str; 3] = ["round_robin", "least_load", "instance_aware_least_load"];
const INSTANCE_AWARE: &str = "instance_aware_least_load";
/// The fields of `service`.
const FIELDS: [&str; 9] = [
    "readiness_probe",
    "load_balancer",
    "pool",
    "replica_policy",
    "ports",
    "replicas",
    "workers",
    "load_balancing_policy",
    "tls",
];

/// `root` with its `service` section filled in from `vars` (name and value;
/// a later entry wins) as SkyPilot's `_fill_in_env_vars` does; `None` when
/// that changes nothing.
pub(super) fn fill_in_env_vars(
    root: &Node,
    vars: &[(String, String)],
    out: &mut Diagnostics,
) -> Option<Node> {
    let entries = root.as_map()?;
    let index = entries
        .iter()
        .position(|e| e.key.as_str() == Some("service") && !e.value.is_null())?;
    if vars.is_empty() {
        return None;
    }
    let mut changed = false;
    let service = fill(&entries[index].value, vars, &mut changed, out);
    if !changed {
        return None;
    }
    let mut entries = entries.to_vec();
    entries[index].value = service;
    Some(Node::new(Value::Map(entries), root.span))
}

fn fill(node: &Node, vars: &[(String, String)], changed: &mut bool, out: &mut Diagnostics) -> Node {
    let value = match &node.value {
        Value::String(s) => Value::String(fill_text(s, node.span, vars, changed, out)),
        Value::Seq(items) => {
            Value::Seq(items.iter().map(|n| fill(n, vars, changed, out)).collect())
        }
        Value::Map(entries) => Value::Map(
            entries
                .iter()
                .map(|e| Entry {
                    key: fill(&e.key, vars, changed, out),
                    value: fill(&e.value, vars, changed, out),
                })
                .collect(),
        ),
        other => other.clone(),
    };
    Node::new(value, node.span)
}

/// One string as SkyPilot fills it: in its JSON form, `$NAME` or `${NAME}`
/// (a bash name) is replaced by the raw value when the task defines NAME,
/// then the JSON is read back.
fn fill_text(
    text: &str,
    span: Span,
    vars: &[(String, String)],
    changed: &mut bool,
    out: &mut Diagnostics,
) -> String {
    if !text.contains('$') {
        return text.to_owned();
    }
    let json = pyjson::dumps_str(text);
    let filled = substitute(&json, vars);
    if filled == json {
        return text.to_owned();
    }
    *changed = true;
    pyjson::loads_str(&filled).unwrap_or_else(|| {
        out.push(
            Diagnostic::new(
                Rule::InvalidService,
                span,
                "an environment variable filled in here breaks the JSON text of `service`",
            )
            .label("its value holds a quote, backslash or control character")
            .help(
                "SkyPilot fills `$VAR` into `service` by editing the section as JSON text; keep \
                 quotes and newlines out of variables used there",
            ),
        );
        text.to_owned()
    })
}

/// SkyPilot's `\$\{?\b([a-zA-Z_][a-zA-Z0-9_]*)\b\}?` over ASCII text, each
/// match replaced by the value of its name, or kept when there is none.
fn substitute(text: &str, vars: &[(String, String)]) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut copied) = (0, 0);
    while let Some(offset) = text[i..].find('$') {
        let start = i + offset;
        let mut j = start + 1;
        if bytes.get(j) == Some(&b'{') {
            j += 1;
        }
        let name_start = j;
        if !matches!(bytes.get(j), Some(b) if b.is_ascii_alphabetic() || *b == b'_') {
            i = start + 1;
            continue;
        }
        while matches!(bytes.get(j), Some(b) if b.is_ascii_alphanumeric() || *b == b'_') {
            j += 1;
        }
        let name = &text[name_start..j];
        if bytes.get(j) == Some(&b'}') {
            j += 1;
        }
        if let Some((_, value)) = vars.iter().rev().find(|(k, _)| k == name) {
            out.push_str(&text[copied..start]);
            out.push_str(value);
            copied = j;
        }
        i = j;
    }
    out.push_str(&text[copied..]);
    out
}

/// A replica or worker count, and where it was written (nowhere for the
/// default).
#[derive(Clone, Copy)]
struct Count<'a> {
    node: Option<&'a Node>,
    value: f64,
}

impl<'a> Count<'a> {
    /// `None` for a value of another type (a schema error).
    fn of(node: &'a Node) -> Option<Self> {
        #[allow(clippy::cast_precision_loss)]
        let value = match node.value {
            Value::Int(i) => i as f64,
            Value::Float(f) => f,
            _ => return None,
        };
        Some(Count {
            node: Some(node),
            value,
        })
    }

    fn shown(self) -> String {
        self.node
            .and_then(Node::python_str)
            .unwrap_or_else(|| "1".to_owned())
    }
}

/// Checks the `service` of a task whose schema was applied.
pub(super) fn check(root: &Node, out: &mut Diagnostics) {
    let Some(service) = root.get_present("service").filter(|s| s.as_map().is_some()) else {
        return;
    };
    check_spec(service, Rule::InvalidService, out);
}

/// Checks a service spec as `SkyServiceSpec.from_yaml_config` does, each
/// finding under `rule`. A top-level `pool` is checked as the spec
/// `{pool: ...}` (`pool.rs`), as SkyPilot does.
pub(super) fn check_spec(service: &Node, rule: Rule, out: &mut Diagnostics) {
    Check { service, rule, out }.run();
}

struct Check<'a, 'o> {
    service: &'a Node,
    /// `invalid-service`, or `invalid-pool` for a pool file.
    rule: Rule,
    out: &'o mut Diagnostics,
}

impl<'a> Check<'a, '_> {
    fn invalid(&self, span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic::new(self.rule, span, message)
    }

    fn field(&self, key: &str) -> Option<&'a Node> {
        self.service.get_present(key)
    }

    fn key(&self, key: &str) -> Option<&'a Entry> {
        self.service.entry(key)
    }

    fn run(mut self) {
        self.unknown_without_value();
        if let (Some(replicas), Some(policy)) = (self.key("replicas"), self.key("replica_policy")) {
            self.out.push(
                self.invalid(
                    policy.key.span,
                    "cannot specify both `replicas` and `replica_policy` in the service YAML",
                )
                .label("a second way to set the replicas")
                .with_secondary(replicas.key.span, "`replicas` set here")
                .help(
                    "use one of them: `replicas` for a fixed count, `replica_policy` to autoscale",
                ),
            );
        }
        let probe = self.readiness_probe();
        self.ports();
        self.replicas(probe);
        self.load_balancing_policy();
    }

    /// Unknown fields with no value pass SkyPilot's schema (it drops
    /// them), and nothing reads them.
    fn unknown_without_value(&mut self) {
        for e in self.service.as_map().unwrap_or_default() {
            let key = e.key.python_str().unwrap_or_default();
            if e.value.is_null() && !FIELDS.contains(&key.as_str()) {
                self.out.push(
                    Diagnostic::new(
                        Rule::IneffectiveSetting,
                        e.key.span,
                        format!(
                            "`{key}` is not a field of `service`; SkyPilot ignores it only because it has no value"
                        ),
                    )
                    .label("unknown field")
                    .help(format!("remove it; the fields are {}", FIELDS.join(", "))),
                );
            }
        }
    }

    /// Checks the readiness path and body; the probe when written in full.
    fn readiness_probe(&mut self) -> Option<&'a Node> {
        let entry = self.key("readiness_probe")?;
        let (path, probe) = match &entry.value.value {
            Value::Null => {
                self.out.push(
                    self.invalid(entry.key.span, "`readiness_probe` has no value")
                        .label("SkyPilot fails on an empty probe")
                        .help(
                            "give the path to probe (`readiness_probe: /health`), or leave the \
                             field out to probe `/`",
                        ),
                );
                return None;
            }
            Value::String(_) => (Some(&entry.value), None),
            Value::Map(_) => (entry.value.get("path"), Some(&entry.value)),
            _ => return None,
        };
        if let Some(path) = path
            && let Some(text) = path.as_str()
            && !text.starts_with('/')
        {
            self.out.push(
                self.invalid(
                    path.span,
                    format!("readiness_path must start with a slash (/), got `{text}`"),
                )
                .label("not an absolute path")
                .help(format!("write `/{text}`")),
            );
        }
        if let Some(post_data) = probe.and_then(|p| p.get("post_data"))
            && let Some(text) = post_data.as_str()
            && let Err(why) = pyjson::loads(text)
        {
            self.out.push(
                self.invalid(
                    post_data.span,
                    "invalid JSON string for `post_data` in the `readiness_probe` section of \
                     your service YAML",
                )
                .label(why)
                .help("write the body as a mapping, or as a JSON string"),
            );
        }
        probe
    }

    fn ports(&mut self) {
        let Some(ports) = self.field("ports") else {
            return;
        };
        match ports.value {
            Value::Int(p) if !(1..=65535).contains(&p) => self.out.push(
                Diagnostic::new(
                    Rule::InvalidPorts,
                    ports.span,
                    "port must be between 1 and 65535",
                )
                .label("out of range"),
            ),
            // An integral float passes the schema, then fails an assertion.
            Value::Float(f) if f.fract() == 0.0 => self.out.push(
                Diagnostic::new(
                    Rule::InvalidPorts,
                    ports.span,
                    "`service.ports` must be an integer written without a fraction",
                )
                .label("a float")
                .help(format!("write `ports: {}`", f.trunc())),
            ),
            _ => {}
        }
    }

    /// Replicas (or pool workers), autoscaling, and what a pool forbids.
    fn replicas(&mut self, probe: Option<&'a Node>) {
        let pool = self.field("pool").filter(|p| p.as_map().is_some());
        let pool_key = self.key("pool").map_or(self.service.span, |e| e.key.span);
        // `pool: {}` is checked as a pool, but the spec treats it as none.
        let is_pool = pool.and_then(Node::as_map).is_some_and(|m| !m.is_empty());
        let policy = self.field("replica_policy");
        let replicas = self.key("replicas").filter(|e| !e.value.is_null());
        let workers = self.key("workers").filter(|e| !e.value.is_null());
        if is_pool && let Some(p) = self.key("replica_policy").filter(|_| policy.is_some()) {
            self.out.push(
                self.invalid(
                    p.key.span,
                    "cannot specify `replica_policy` for cluster pool",
                )
                .label("not for a pool")
                .with_secondary(pool_key, "a pool")
                .help(
                    "only `workers: <num>`, or `min_workers: <num>` with `max_workers: <num>`, \
                     is supported for pool now",
                ),
            );
        }
        if let (Some(r), Some(w)) = (replicas, workers) {
            self.out.push(
                self.invalid(w.key.span, "cannot specify both `replicas` and `workers`")
                    .label("a second count")
                    .with_secondary(r.key.span, "`replicas` set here")
                    .help("use one of them"),
            );
        }
        if let Some(r) = replicas.filter(|_| is_pool) {
            self.out.push(
                self.invalid(r.key.span, "cannot specify `replicas` for pool")
                    .label("not for a pool")
                    .with_secondary(pool_key, "a pool")
                    .help("use `workers` instead"),
            );
        }
        let simplified = replicas.or(workers).map(|e| &e.value);
        let mut workers_count = workers.map(|e| &e.value);
        let pool_field = |k: &str| pool.and_then(|p| p.get_present(k));
        let (min_workers, max_workers) = (pool_field("min_workers"), pool_field("max_workers"));
        if let Some(pool) = pool {
            workers_count = pool.get_present("workers").or(workers_count);
            self.pool_workers(pool, workers_count, pool_key);
        }
        // The counts the spec is built from.
        // `min`: `None` for the default of 1; `Some(None)` when it was
        // written but is no number (a schema error: nothing to compare).
        let (min, max, target) = match policy {
            Some(policy) if simplified.is_none() => (
                Some(policy.get("min_replicas").and_then(Count::of)),
                policy.get_present("max_replicas"),
                policy.get_present("target_qps_per_replica"),
            ),
            _ => {
                if let (Some(p), Some(_), None) = (self.key("replica_policy"), policy, replicas) {
                    self.out.push(
                        Diagnostic::new(
                            Rule::IneffectiveSetting,
                            p.key.span,
                            "`replica_policy` is ignored: SkyPilot takes the replica count from `workers`",
                        )
                        .label("ignored")
                        .help("remove `workers`, or `replica_policy`"),
                    );
                }
                let mut min = simplified.or(workers_count).map(Count::of);
                if pool.is_some() && max_workers.is_some() {
                    min = min_workers.map(Count::of).or(min);
                }
                (min, max_workers, None)
            }
        };
        self.instance_aware(target);
        if is_pool {
            self.unsupported_for_pool(probe, max.is_some(), pool_key);
        }
        let Some(min) = min.unwrap_or(Some(Count {
            node: None,
            value: 1.0,
        })) else {
            return;
        };
        let max = match max.map(Count::of) {
            Some(None) => return,
            Some(Some(max)) => Some(max),
            None => None,
        };
        let service_span = self.service.span;
        let max_span = |max: Count<'_>| max.node.map_or(service_span, |n| n.span);
        // min_workers above max_workers has its own error.
        let from_pool_bounds = min
            .node
            .is_some_and(|n| min_workers.is_some_and(|m| std::ptr::eq(n, m)));
        if let Some(max) = max
            && max.value < min.value
            && !from_pool_bounds
        {
            let mut d = self
                .invalid(
                    max_span(max),
                    format!(
                        "max_replicas must be greater than or equal to min_replicas, found \
                     min_replicas={}, max_replicas={}",
                        min.shown(),
                        max.shown()
                    ),
                )
                .label("below the minimum");
            if let Some(n) = min.node {
                d = d.with_secondary(n.span, "the minimum");
            }
            if pool.is_some() {
                d = d.help(
                    "a pool's minimum is `min_workers`, else `workers`, else 1: raise \
                     `max_workers`, or lower the minimum",
                );
            }
            self.out.push(d);
        }
        match (target, max) {
            (Some(target), None) => {
                let span = self.policy_key_of(target).unwrap_or(target.span);
                self.out.push(
                    self.invalid(
                        span,
                        "max_replicas must be set where target_qps_per_replica is set",
                    )
                    .label("autoscaling without a maximum")
                    .help("add `max_replicas` to `replica_policy`"),
                );
            }
            (None, Some(max)) if !is_pool && max.value != min.value => self.out.push(
                self.invalid(
                    max_span(max),
                    "detected different min_replicas and max_replicas while \
                     target_qps_per_replica is not set",
                )
                .label("differs from `min_replicas`")
                .help(
                    "to enable autoscaling, set `target_qps_per_replica`; for a fixed count, \
                     make them equal",
                ),
            ),
            _ => {}
        }
    }

    /// The key under which `node` sits in `replica_policy`.
    fn policy_key_of(&self, node: &Node) -> Option<Span> {
        self.field("replica_policy")?
            .as_map()?
            .iter()
            .find(|e| std::ptr::eq(&e.value, node))
            .map(|e| e.key.span)
    }

    /// A `pool` mapping's worker counts.
    fn pool_workers(&mut self, pool: &'a Node, workers: Option<&Node>, pool_key: Span) {
        let field = |k: &str| pool.entry(k).filter(|e| !e.value.is_null());
        let (min, max) = (field("min_workers"), field("max_workers"));
        if min.is_none() && max.is_none() && workers.is_none() {
            self.out.push(
                self.invalid(
                    pool_key,
                    "one of workers, or both min_workers and max_workers must be set for pool \
                     autoscaling",
                )
                .label("no worker count")
                .help("e.g. `workers: 2`, or `min_workers: 1` and `max_workers: 4`"),
            );
        }
        for (set, what) in [
            (field("queue_length_threshold"), "queue_length_threshold"),
            (min, "min_workers"),
        ] {
            if let (Some(e), None) = (set, max) {
                self.out.push(
                    self.invalid(
                        e.key.span,
                        format!(
                            "max_workers must be set when {what} is specified for pool autoscaling"
                        ),
                    )
                    .label("needs `max_workers`"),
                );
            }
        }
        if let (Some(min), Some(max)) = (min, max)
            && let (Some(lo), Some(hi)) = (Count::of(&min.value), Count::of(&max.value))
            && lo.value > hi.value
        {
            self.out.push(
                self.invalid(
                    min.value.span,
                    format!(
                        "min_workers ({}) must be <= max_workers ({}) for pool autoscaling",
                        lo.shown(),
                        hi.shown()
                    ),
                )
                .label("above the maximum")
                .with_secondary(max.value.span, "the maximum"),
            );
        }
    }

    /// A per-accelerator `target_qps_per_replica` goes with the
    /// instance-aware policy, both ways.
    fn instance_aware(&mut self, target: Option<&'a Node>) {
        let lb = self.field("load_balancing_policy");
        let by_accelerator = target.is_some_and(|t| t.as_map().is_some());
        let instance_aware = lb.and_then(Node::as_str) == Some(INSTANCE_AWARE);
        if let Some(target) = target.filter(|_| by_accelerator && !instance_aware) {
            // A block mapping's span runs on to the next key: point at its own.
            let span = self.policy_key_of(target).unwrap_or(target.span);
            self.out.push(
                self.invalid(
                    span,
                    "when using dict type target_qps_per_replica, load_balancing_policy must be \
                     \"instance_aware_least_load\"",
                )
                .label("QPS per accelerator")
                .help("add `load_balancing_policy: instance_aware_least_load`"),
            );
        }
        if let Some(lb) = lb.filter(|_| instance_aware && !by_accelerator) {
            self.out.push(
                self.invalid(
                    lb.span,
                    "when using \"instance_aware_least_load\" policy, target_qps_per_replica \
                     must be a dict mapping GPU types to QPS values",
                )
                .label("needs QPS per accelerator")
                .help(
                    "set `replica_policy.target_qps_per_replica` to a mapping such as \
                     `{H100: 10, A100: 5}`",
                ),
            );
        }
    }

    /// What the spec refuses for a pool, named as SkyPilot names it.
    fn unsupported_for_pool(&mut self, probe: Option<&'a Node>, autoscaled: bool, pool_key: Span) {
        let probe_key = |k: &str| probe.and_then(|p| p.entry(k));
        // `post_data` that reads as JSON null is no body at all.
        let post_data = probe_key("post_data").filter(|e| {
            e.value
                .as_str()
                .is_none_or(|t| pyjson::loads(t) != Ok(pyjson::Loaded::Null))
        });
        let pool = self.field("pool");
        let in_pool = |k: &str| pool.and_then(|p| p.entry(k));
        let mut fields = vec![
            ("load_balancing_policy", self.key("load_balancing_policy")),
            ("ports", self.key("ports")),
            ("post_data", post_data),
            ("tls_credential", self.key("tls")),
            ("readiness_headers", probe_key("headers")),
        ];
        if !autoscaled {
            fields.push(("upscale_delay_seconds", in_pool("upscale_delay_seconds")));
            fields.push((
                "downscale_delay_seconds",
                in_pool("downscale_delay_seconds"),
            ));
        }
        for (name, entry) in fields {
            let Some(e) = entry.filter(|e| !e.value.is_null()) else {
                continue;
            };
            let mut d = self
                .invalid(e.key.span, format!("{name} is not supported for pool"))
                .label("not for a pool")
                .with_secondary(pool_key, "a pool");
            if name.ends_with("_delay_seconds") {
                d = d.help("delays apply to an autoscaled pool: set `max_workers`");
            }
            self.out.push(d);
        }
    }

    /// The schema matches a policy in any case; the spec wants it exactly.
    fn load_balancing_policy(&mut self) {
        let Some(text) = self.field("load_balancing_policy").and_then(Node::as_str) else {
            return;
        };
        let lower = text.to_lowercase();
        if !LB_POLICIES.contains(&text) && LB_POLICIES.contains(&lower.as_str()) {
            let span = self
                .field("load_balancing_policy")
                .map_or(self.service.span, |n| n.span);
            self.out.push(
                self.invalid(span, format!("unknown load balancing policy: {text}"))
                    .label("policies are lower-case")
                    .help(format!("write `{lower}`")),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::substitute;
    use crate::{Options, compile};

    /// SkyPilot 0.14.1 accepts the first (the secret's `/ready` is filled
    /// in) and refuses the second (`health` has no leading slash).
    #[test]
    fn an_inline_secret_wins_over_an_env_of_the_same_name() {
        let task = |env: &str, secret: &str| {
            format!(
                "name: a\nenvs:\n  PROBE: {env}\nsecrets:\n  PROBE: {secret}\n\
                 service:\n  readiness_probe: $PROBE\nrun: echo a\n"
            )
        };
        let check = |text: String| compile("t.yaml", text.as_bytes(), &Options::default());
        assert!(!check(task("health", "/ready")).has_errors());
        assert!(check(task("/ready", "health")).has_errors());
    }

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn substitutes_as_skypilot_does() {
        let v = vars(&[("A", "1"), ("B_2", "two"), ("A", "last")]);
        assert_eq!(substitute("$A ${A} $B_2/x", &v), "last last two/x");
        assert_eq!(
            substitute("$UNSET ${UNSET} $$A", &v),
            "$UNSET ${UNSET} $last"
        );
        assert_eq!(substitute("${A $A} $9 ${ A}", &v), "last last $9 ${ A}");
        assert_eq!(substitute("$AB $A_ end$", &v), "$AB $A_ end$");
    }
}
