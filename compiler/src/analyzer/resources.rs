//! `resources`: every field SkyPilot parses without a catalog, normalised
//! into candidates, and the task's recovery policy.

use crate::ir::{Accelerator, Candidate, Image, Infra, PortRange, Recovery, Resources};
use crate::units;
use crate::yaml::{Node, Value};
use crate::{Diagnostic, Diagnostics, Rule, Span};

/// Strategies SkyPilot ships; others come from plugins.
pub(crate) const STRATEGIES: [&str; 2] = ["EAGER_NEXT_REGION", "FAILOVER"];
pub(crate) const DISK_TIERS: [&str; 5] = ["low", "medium", "high", "ultra", "best"];
pub(crate) const NETWORK_TIERS: [&str; 2] = ["standard", "best"];

pub(super) fn analyze(node: Option<&Node>, out: &mut Diagnostics) -> (Resources, Recovery) {
    let Some(node) = node.filter(|n| n.as_map().is_some()) else {
        return (
            Resources {
                ordered: false,
                candidates: vec![Candidate::default()],
            },
            Recovery::default(),
        );
    };
    check_fields(node, out);
    let any_of = node.entry("any_of").filter(|e| !e.value.is_null());
    let ordered = node.entry("ordered").filter(|e| !e.value.is_null());
    if let (Some(a), Some(o)) = (any_of, ordered) {
        out.push(
            Diagnostic::new(
                Rule::ConflictingFields,
                o.key.span,
                "`any_of` and `ordered` cannot both be set",
            )
            .label("second candidate list")
            .with_secondary(a.key.span, "first candidate list")
            .help("`any_of` takes any candidate; `ordered` tries them in order: pick one"),
        );
    }
    let base = candidate(node, out);
    let accelerators = accelerator_choices(node, out);
    let options = any_of.or(ordered).and_then(|e| e.value.as_seq());
    if let Some(accs) = &accelerators {
        if accs.names.len() > 1 && ordered.is_some() {
            out.push(
                Diagnostic::new(
                    Rule::ConflictingFields,
                    accs.span,
                    "several `accelerators` cannot be combined with `ordered`",
                )
                .label("several accelerators")
                .help("list each accelerator as its own entry of `ordered`"),
            );
        } else if accs.names.len() > 1 && accs.ordered && any_of.is_some() {
            out.push(
                Diagnostic::new(
                    Rule::ConflictingFields,
                    accs.span,
                    "a preference list of `accelerators` cannot be combined with `any_of`",
                )
                .label("a list is an order of preference")
                .help("write the accelerators as a mapping (`{A100: 1, V100: 1}`), or move them into `any_of`"),
            );
        }
    }
    let recovery = recovery(node, options.unwrap_or_default(), out);
    check_priority(node, options.unwrap_or_default(), out);
    let (ordered_flag, candidates) = match options {
        Some(options) if !options.is_empty() => {
            let mut candidates = Vec::new();
            for option in options {
                if option.as_map().is_none() {
                    continue;
                }
                check_fields(option, out);
                check_merged_location(node, option, out);
                let mut c = merge(&base, node, option, out);
                if let Some(choices) =
                    accelerator_choices(option, out).or_else(|| accelerators.clone())
                {
                    for (name, count, span) in choices.names {
                        c.accelerator = Some(Accelerator { name, count, span });
                        candidates.push(c.clone());
                    }
                } else {
                    candidates.push(c);
                }
            }
            (ordered.is_some(), candidates)
        }
        _ => match accelerators {
            Some(choices) => (
                choices.ordered && choices.names.len() > 1,
                choices
                    .names
                    .into_iter()
                    .map(|(name, count, span)| Candidate {
                        accelerator: Some(Accelerator { name, count, span }),
                        ..base.clone()
                    })
                    .collect(),
            ),
            None => (false, vec![base]),
        },
    };
    check_tpus(node, &candidates, out);
    let candidates = if candidates.is_empty() {
        vec![Candidate::default()]
    } else {
        candidates
    };
    (
        Resources {
            ordered: ordered_flag,
            candidates,
        },
        recovery,
    )
}

/// TPUs exist only on GCP and Kubernetes (SkyPilot's test: `tpu` anywhere
/// in the accelerator name).
fn check_tpus(node: &Node, candidates: &[Candidate], out: &mut Diagnostics) {
    for c in candidates {
        let (Some(acc), Some(cloud)) = (
            &c.accelerator,
            c.infra.as_ref().and_then(|i| i.cloud.as_deref()),
        ) else {
            continue;
        };
        if acc.name.to_ascii_lowercase().contains("tpu") && !matches!(cloud, "gcp" | "kubernetes") {
            let span = node
                .get_present("accelerators")
                .or_else(|| node.get_present("gpus"))
                .map_or(node.span, |n| n.span);
            out.push(
                Diagnostic::new(
                    Rule::InvalidAccelerators,
                    span,
                    format!(
                        "the TPU `{}` cannot run on {cloud}: TPUs are on GCP or Kubernetes only",
                        acc.name
                    ),
                )
                .label("TPU on a cloud without TPUs")
                .help("use `infra: gcp` or `infra: kubernetes` for this candidate"),
            );
            return;
        }
    }
}

/// Field rules of one resources mapping (the base, or an `any_of` or
/// `ordered` entry).
fn check_fields(node: &Node, out: &mut Diagnostics) {
    if let Some(n) = node.get_present("infra")
        && let Some(s) = n.as_str()
        && let Err(why) = infra(s)
    {
        out.push(
            Diagnostic::new(
                Rule::InvalidInfra,
                n.span,
                format!("invalid infra `{s}`: {why}"),
            )
            .label("empty part")
            .help("use `cloud[/region[/zone]]` or `kubernetes[/context]`"),
        );
    }
    check_local_disk(node, out);
    check_image(node, out);
    if let (Some(g), Some(a)) = (node.entry("gpus"), node.entry("accelerators")) {
        out.push(
            Diagnostic::new(
                Rule::ConflictingFields,
                g.key.span,
                "`gpus` and `accelerators` cannot both be set",
            )
            .label("`gpus` is an alias of `accelerators`")
            .with_secondary(a.key.span, "already set here"),
        );
    }
    let legacy: Vec<&crate::yaml::Entry> = ["cloud", "region", "zone"]
        .iter()
        .filter_map(|k| node.entry(k))
        .filter(|e| !e.value.is_null())
        .collect();
    if let (Some(infra), Some(first)) = (
        node.entry("infra").filter(|e| !e.value.is_null()),
        legacy.first(),
    ) {
        out.push(
            Diagnostic::new(
                Rule::ConflictingFields,
                first.key.span,
                "`infra` cannot be combined with `cloud`, `region` or `zone`",
            )
            .label("deprecated location field")
            .with_secondary(infra.key.span, "`infra` set here")
            .help("write the whole location in `infra: cloud/region/zone`"),
        );
    } else if let Some(first) = legacy.first() {
        let part = |k: &str| node.get_present(k).and_then(Node::python_str);
        let infra = match (part("cloud"), part("region"), part("zone")) {
            (c, r, Some(z)) => format!(
                "{}/{}/{z}",
                c.unwrap_or_else(|| "*".into()),
                r.unwrap_or_else(|| "*".into())
            ),
            (c, Some(r), None) => format!("{}/{r}", c.unwrap_or_else(|| "*".into())),
            (c, None, None) => c.unwrap_or_else(|| "*".into()),
        };
        out.push(
            Diagnostic::new(
                Rule::DeprecatedField,
                first.key.span,
                "`cloud`, `region` and `zone` are deprecated",
            )
            .label("deprecated")
            .help(format!(
                "write `infra: {}` instead",
                infra.to_ascii_lowercase()
            )),
        );
    }
    for (field, allowed) in [
        ("disk_tier", &DISK_TIERS[..]),
        ("network_tier", &NETWORK_TIERS[..]),
    ] {
        if let Some(n) = node.get(field)
            && let Some(s) = n.as_str()
            && !allowed.contains(&s.to_ascii_lowercase().as_str())
        {
            out.push(
                Diagnostic::new(Rule::InvalidValue, n.span, format!("invalid {field} `{s}`"))
                    .label("unknown tier")
                    .help(format!("`{field}` is one of: {}", allowed.join(", "))),
            );
        }
    }
}

/// `local_disk`: `mode[:size[+]]` or `size[+]`, mode `nvme` or `ssd`.
fn check_local_disk(node: &Node, out: &mut Diagnostics) {
    let Some(n) = node.get_present("local_disk") else {
        return;
    };
    let Some(text) = n.as_str() else { return };
    let lower = text.trim().to_ascii_lowercase();
    let parts: Vec<&str> = lower.split(':').collect();
    let size_ok = |s: &str| {
        let s = s.strip_suffix('+').unwrap_or(s);
        units::python_float(s).is_some_and(|v| v > 0.0)
    };
    let mode_ok = |m: &str| matches!(m, "nvme" | "ssd");
    let valid = match parts.as_slice() {
        [one] => mode_ok(one) || size_ok(one),
        [mode, size] => mode_ok(mode) && size_ok(size),
        _ => false,
    };
    if !valid {
        out.push(
            Diagnostic::new(
                Rule::InvalidValue,
                n.span,
                format!("invalid `local_disk` `{text}`"),
            )
            .label("expected `mode:size[+]`, `mode` or `size[+]`")
            .help("mode is `nvme` or `ssd`; size is positive GB, e.g. `nvme:1000+`, `ssd`, `500`"),
        );
    }
}

/// `image_id` as a per-region mapping: string values, and the Docker
/// image given one way only.
fn check_image(node: &Node, out: &mut Diagnostics) {
    let Some(entries) = node.get_present("image_id").and_then(Node::as_map) else {
        return;
    };
    let docker_key = entries.iter().find(|e| e.key.as_str() == Some("docker"));
    for e in entries {
        let Some(value) = e.value.as_str() else {
            out.push(
                Diagnostic::new(
                    Rule::InvalidValue,
                    e.value.span,
                    "each `image_id` entry must be an image name (a string)",
                )
                .label(format!("found {}", e.value.type_name())),
            );
            continue;
        };
        if let Some(docker) = docker_key
            && e.key.as_str() != Some("docker")
            && value.trim().starts_with("docker:")
        {
            out.push(
                Diagnostic::new(
                    Rule::ConflictingFields,
                    e.value.span,
                    "`image_id` gives a Docker image both with the `docker` key and as a `docker:` region value",
                )
                .label("`docker:` region value")
                .with_secondary(docker.key.span, "`docker` key")
                .help("use only one way to name the Docker image"),
            );
        }
    }
}

/// The scalar fields of one resources mapping.
fn candidate(node: &Node, out: &mut Diagnostics) -> Candidate {
    let mut c = Candidate {
        infra: location(node, None).infra,
        ..Candidate::default()
    };
    apply(&mut c, node, out);
    c
}

/// `option` merged over `base` (the candidate of `base_node`), as
/// SkyPilot's `_override_resources` does (labels merged key by key).
fn merge(base: &Candidate, base_node: &Node, option: &Node, out: &mut Diagnostics) -> Candidate {
    let mut c = base.clone();
    c.infra = location(base_node, Some(option)).infra;
    let base_labels = std::mem::take(&mut c.labels);
    apply(&mut c, option, out);
    let mut labels = base_labels;
    for (k, v) in std::mem::take(&mut c.labels) {
        match labels.iter_mut().find(|(key, _)| *key == k) {
            Some(slot) => slot.1 = v,
            None => labels.push((k, v)),
        }
    }
    c.labels = labels;
    c
}

fn apply(c: &mut Candidate, node: &Node, out: &mut Diagnostics) {
    let text = |n: &Node| -> Option<String> {
        match &n.value {
            Value::String(s) => Some(s.clone()),
            Value::Int(_) | Value::Float(_) => n.python_str(),
            _ => None,
        }
    };
    if let Some(n) = node.get_present("cpus")
        && let Some(t) = text(n)
    {
        match units::parse_cpus(&t) {
            Ok(q) => c.cpus = Some(q),
            Err(why) => out.push(
                Diagnostic::new(Rule::InvalidCpus, n.span, format!("invalid `cpus`: {why}"))
                    .label("expected a positive number or `N+`")
                    .help("e.g. `cpus: 4` (exactly 4) or `cpus: 4+` (at least 4)"),
            ),
        }
    }
    if let Some(n) = node.get_present("memory")
        && let Some(t) = text(n)
    {
        // Slurm takes `memory: 0` to mean "whatever the node has".
        let on_slurm = c.infra.as_ref().and_then(|i| i.cloud.as_deref()) == Some("slurm");
        match units::parse_memory(&t, on_slurm) {
            Ok(q) => c.memory_gb = Some(q),
            Err(why) => out.push(
                Diagnostic::new(
                    Rule::InvalidMemory,
                    n.span,
                    format!("invalid `memory`: {why}"),
                )
                .label("expected a positive size"),
            ),
        }
    }
    if let Some(n) = node.get_present("disk_size")
        && let Some(t) = text(n)
    {
        match units::parse_disk_size(&t) {
            // 256 GB is SkyPilot's default and means "unset".
            Ok(256) => c.disk_size_gb = None,
            Ok(gb) => c.disk_size_gb = Some(gb),
            Err(why) => out.push(
                Diagnostic::new(
                    Rule::InvalidDiskSize,
                    n.span,
                    format!("invalid `disk_size`: {why}"),
                )
                .label("expected a positive whole number of GB"),
            ),
        }
    }
    if let Some(n) = node.get_present("ports") {
        c.ports = ports(n, out);
    }
    if let Some(s) = node.get_present("instance_type").and_then(Node::as_str) {
        c.instance_type = Some(s.to_owned());
    }
    if let Some(Value::Bool(b)) = node.get_present("use_spot").map(|n| &n.value) {
        c.use_spot = *b;
    }
    if let Some(s) = node.get_present("disk_tier").and_then(Node::as_str) {
        c.disk_tier = Some(s.to_ascii_lowercase());
    }
    if let Some(s) = node.get_present("network_tier").and_then(Node::as_str) {
        c.network_tier = Some(s.to_ascii_lowercase());
    }
    if let Some(n) = node.get_present("image_id") {
        c.image = image(n);
    }
    if let Some(labels) = node.get_present("labels").and_then(Node::as_map) {
        c.labels = labels
            .iter()
            .filter_map(|e| Some((e.key.python_str()?, e.value.as_str()?.to_owned())))
            .collect();
    }
}

/// Where one resource option asks to run.
pub(super) struct Location {
    /// `None` when neither `infra` nor `cloud`, `region`, `zone` is set.
    pub infra: Option<Infra>,
    /// The `infra` (or `cloud`) value that says so; the mapping otherwise.
    pub span: Span,
}

/// The locations of a task's resource options (SkyPilot's
/// `task.resources`, whose accelerators share their option's location):
/// one per `any_of` or `ordered` entry, else the base mapping's.
pub(super) fn locations(resources: Option<&Node>) -> Vec<Location> {
    let Some(node) = resources.filter(|n| n.as_map().is_some()) else {
        return Vec::new();
    };
    let options = node
        .get_present("any_of")
        .or_else(|| node.get_present("ordered"))
        .and_then(Node::as_seq)
        .unwrap_or_default();
    if options.is_empty() {
        return vec![location(node, None)];
    }
    options
        .iter()
        .filter(|o| o.as_map().is_some())
        .map(|o| location(node, Some(o)))
        .collect()
}

/// The location of `option` merged over `base` (or of `base` alone):
/// SkyPilot overrides the base key by key, then reads `infra`, else the
/// deprecated `cloud`, `region`, `zone` (a region without a cloud pins no
/// cloud).
fn location(base: &Node, option: Option<&Node>) -> Location {
    let field = |k: &str| {
        option
            .and_then(|o| o.get_present(k))
            .or_else(|| base.get_present(k))
    };
    let own_span = option.unwrap_or(base).span;
    if let Some(n) = field("infra") {
        return Location {
            infra: n.as_str().and_then(|s| infra(s).ok()),
            span: n.span,
        };
    }
    let text = |k: &str| field(k).and_then(Node::as_str).map(str::to_owned);
    let cloud = field("cloud").filter(|n| n.as_str().is_some());
    let infra = match (cloud.and_then(Node::as_str), text("region"), text("zone")) {
        (None, None, None) => None,
        (cloud, region, zone) => Some(Infra {
            cloud: cloud.map(normalise_cloud),
            region,
            zone,
        }),
    };
    Location {
        infra,
        span: cloud.map_or(own_span, |n| n.span),
    }
}

/// `infra` on one side of an `any_of`/`ordered` merge and `cloud`,
/// `region` or `zone` on the other: SkyPilot refuses the merged option as
/// it refuses both in one mapping (which [`check_fields`] reports).
fn check_merged_location(base: &Node, option: &Node, out: &mut Diagnostics) {
    fn legacy(n: &Node) -> Option<&crate::yaml::Entry> {
        ["cloud", "region", "zone"]
            .iter()
            .find_map(|k| n.entry(k).filter(|e| !e.value.is_null()))
    }
    fn infra_entry(n: &Node) -> Option<&crate::yaml::Entry> {
        n.entry("infra").filter(|e| !e.value.is_null())
    }
    let (here, there) = match (
        infra_entry(option),
        legacy(base),
        legacy(option),
        infra_entry(base),
    ) {
        (Some(i), Some(l), None, _) => (i, l),
        (None, _, Some(l), Some(i)) => (l, i),
        _ => return,
    };
    out.push(
        Diagnostic::new(
            Rule::ConflictingFields,
            here.key.span,
            "`infra` cannot be combined with `cloud`, `region` or `zone`, even across the base and a candidate",
        )
        .label("set in this candidate")
        .with_secondary(
            there.key.span,
            format!("`{}` set for every candidate here", there.key.as_str().unwrap_or_default()),
        )
        .help("write the whole location in `infra: cloud/region/zone`, in the base or in each candidate"),
    );
}

fn normalise_cloud(cloud: &str) -> String {
    let lower = cloud.to_ascii_lowercase();
    if lower == "k8s" {
        "kubernetes".to_owned()
    } else {
        lower
    }
}

/// `cloud[/region[/zone]]`, `*` wildcards, `kubernetes[/context]` and
/// `ssh[/pool]` (the context or pool may itself contain `/`), read as
/// SkyPilot's `InfraInfo.from_str` reads them: parts trimmed, `*` for any.
/// The form was checked by the schema's pattern.
fn infra(text: &str) -> Result<Infra, String> {
    let text = text.trim().trim_matches('/');
    let parts: Vec<&str> = text.split('/').map(str::trim).collect();
    if parts.iter().any(|part| part.is_empty()) {
        return Err("a part between slashes is empty".to_owned());
    }
    let wildcard = |s: String| (s != "*").then_some(s);
    let cloud = normalise_cloud(parts[0]);
    let rest = (parts.len() > 1).then(|| parts[1..].join("/"));
    let (region, zone) = match cloud.as_str() {
        "kubernetes" => (rest, None),
        // The pool is a context named `ssh-<pool>` (so `ssh/*` names one).
        "ssh" => (rest.map(|pool| format!("ssh-{pool}")), None),
        _ => (
            parts.get(1).map(|r| (*r).to_owned()),
            parts.get(2).map(|z| (*z).to_owned()),
        ),
    };
    Ok(Infra {
        cloud: wildcard(cloud),
        region: region.and_then(wildcard),
        zone: zone.and_then(wildcard),
    })
}

fn image(node: &Node) -> Option<Image> {
    let s = match &node.value {
        Value::String(s) => s.as_str(),
        // A per-region map: the `docker` key, or any value, stands for all.
        Value::Map(entries) => entries
            .iter()
            .find(|e| e.key.as_str() == Some("docker"))
            .or_else(|| entries.first())
            .and_then(|e| e.value.as_str())?,
        _ => return None,
    };
    Some(match s.strip_prefix("docker:") {
        Some(image) => Image::Docker(image.to_owned()),
        None => Image::Cloud(s.to_owned()),
    })
}

fn ports(node: &Node, out: &mut Diagnostics) -> Vec<PortRange> {
    let items: Vec<&Node> = match &node.value {
        Value::Seq(items) => items.iter().collect(),
        _ => vec![node],
    };
    let mut ranges: Vec<PortRange> = Vec::new();
    for item in items {
        let Some(text) = item.python_str() else {
            continue;
        };
        for token in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            match units::parse_port_range(token) {
                Ok(r) => ranges.push(r),
                Err(why) => out.push(
                    Diagnostic::new(
                        Rule::InvalidPorts,
                        item.span,
                        format!("invalid `ports`: {why}"),
                    )
                    .label("expected a port (1-65535) or a `from-to` range"),
                ),
            }
        }
    }
    // Merge overlapping and adjacent ranges, as SkyPilot's simplify_ports.
    ranges.sort_by_key(|r| (r.start, r.end));
    let mut merged: Vec<PortRange> = Vec::new();
    for r in ranges {
        match merged.last_mut() {
            Some(last) if u32::from(r.start) <= u32::from(last.end) + 1 => {
                last.end = last.end.max(r.end);
            }
            _ => merged.push(r),
        }
    }
    merged
}

#[derive(Clone)]
struct Choices {
    span: Span,
    ordered: bool,
    /// Each with where it is written.
    names: Vec<(String, f64, Span)>,
}

/// `accelerators` (or `gpus`): one, several unordered (a mapping), or a
/// preference list.
fn accelerator_choices(node: &Node, out: &mut Diagnostics) -> Option<Choices> {
    let n = node
        .get_present("accelerators")
        .or_else(|| node.get_present("gpus"))?;
    let mut names = Vec::new();
    let mut push =
        |text: &str, span: Span, out: &mut Diagnostics| match units::parse_accelerator(text) {
            Ok((name, count)) => {
                if !names
                    .iter()
                    .any(|(n, c, _): &(String, f64, Span)| *n == name && *c == count)
                {
                    names.push((name, count, span));
                }
            }
            Err(why) => out.push(
                Diagnostic::new(
                    Rule::InvalidAccelerators,
                    span,
                    format!("invalid `accelerators`: {why}"),
                )
                .label("expected `NAME` or `NAME:COUNT`"),
            ),
        };
    let ordered = match &n.value {
        Value::String(s) => {
            push(s, n.span, out);
            false
        }
        Value::Map(entries) => {
            for e in entries {
                let Some(name) = e.key.python_str() else {
                    continue;
                };
                let text = match &e.value.value {
                    Value::Null => name,
                    Value::Int(_) | Value::Float(_) => {
                        format!("{name}:{}", e.value.python_str().unwrap_or_default())
                    }
                    _ => continue,
                };
                push(&text, e.key.span, out);
            }
            false
        }
        Value::Seq(items) => {
            for item in items {
                if let Some(s) = item.as_str() {
                    push(s, item.span, out);
                }
            }
            true
        }
        _ => return None,
    };
    (!names.is_empty()).then_some(Choices {
        span: n.span,
        ordered,
        names,
    })
}

/// `job_recovery`: one policy per task. Each candidate's is its own or the
/// base's, with SkyPilot's launch default filled in; all must agree.
fn recovery(base: &Node, options: &[Node], out: &mut Diagnostics) -> Recovery {
    let base_node = base.get_present("job_recovery");
    let base_policy = base_node.map(|n| policy(n, out));
    let mut first: Option<(Recovery, Span)> = None;
    let effective: Vec<(Recovery, Span)> = if options.is_empty() {
        vec![(
            base_policy.clone().unwrap_or_default(),
            base_node.map_or(base.span, |n| n.span),
        )]
    } else {
        options
            .iter()
            .map(|o| match o.get_present("job_recovery") {
                Some(n) => (policy(n, out), n.span),
                None => (
                    base_policy.clone().unwrap_or_default(),
                    base_node.map_or(o.span, |n| n.span),
                ),
            })
            .collect()
    };
    for (policy, span) in effective {
        match &first {
            None => first = Some((policy, span)),
            Some((p, first_span)) if *p != policy => out.push(
                Diagnostic::new(
                    Rule::InvalidJobRecovery,
                    span,
                    "every resource candidate of a task must use the same `job_recovery`",
                )
                .label("differs from the first candidate's")
                .with_secondary(*first_span, "first candidate's recovery")
                .help("set `job_recovery` once, at the top of `resources`"),
            ),
            Some(_) => {}
        }
    }
    first.map(|(p, _)| p).unwrap_or_default()
}

/// `priority`: one per task, like `job_recovery` (unset candidates agree
/// with any).
fn check_priority(base: &Node, options: &[Node], out: &mut Diagnostics) {
    let base_priority = base.get_present("priority");
    let priorities = options
        .iter()
        .filter_map(|o| o.get_present("priority").or(base_priority));
    for (first, differing) in disagreements(priorities) {
        out.push(
            Diagnostic::new(
                Rule::ConflictingFields,
                differing.span,
                "every resource candidate of a task must use the same `priority`",
            )
            .label("differs from the first candidate's")
            .with_secondary(first.span, "first priority"),
        );
    }
}

/// Each value that differs from the first one, paired with that first one.
pub(super) fn disagreements<'n>(
    mut values: impl Iterator<Item = &'n Node>,
) -> impl Iterator<Item = (&'n Node, &'n Node)> {
    let first = values.next();
    values.filter_map(move |v| first.filter(|f| f.value != v.value).map(|f| (f, v)))
}

fn policy(node: &Node, out: &mut Diagnostics) -> Recovery {
    let mut r = Recovery::default();
    let strategy_node = match &node.value {
        Value::String(_) => Some(node),
        Value::Map(_) => node.get("strategy"),
        _ => None,
    };
    if let Some(s) = strategy_node.and_then(Node::as_str) {
        let upper = s.to_ascii_uppercase();
        if s == "none" {
            out.push(
                Diagnostic::new(
                    Rule::IneffectiveSetting,
                    strategy_node.map_or(node.span, |n| n.span),
                    "`job_recovery: none` does not turn recovery off: SkyPilot fills in EAGER_NEXT_REGION when it launches a managed job",
                )
                .label("ignored at launch")
                .help("to stop restarts on errors, leave `max_restarts_on_errors` at 0"),
            );
        } else {
            if !STRATEGIES.contains(&upper.as_str()) {
                out.push(
                    Diagnostic::new(
                        Rule::UnknownRecoveryStrategy,
                        strategy_node.map_or(node.span, |n| n.span),
                        format!("`{s}` is not a recovery strategy SkyPilot ships"),
                    )
                    .label("unknown strategy")
                    .help(format!(
                        "the built-in strategies are {}, or `none`; a SkyPilot API server \
                         without the plugin that provides `{upper}` rejects it",
                        STRATEGIES.join(", ")
                    )),
                );
            }
            r.strategy = upper;
        }
    }
    if let Some(n) = node
        .get_present("max_restarts_on_errors")
        .and_then(Node::as_i64)
    {
        r.max_restarts_on_errors = u32::try_from(n).unwrap_or(0);
    }
    if let Some(n) = node.get_present("recover_on_exit_codes") {
        let codes: Vec<&Node> = match &n.value {
            Value::Seq(items) => items.iter().collect(),
            _ => vec![n],
        };
        r.recover_on_exit_codes = codes
            .iter()
            .filter_map(|c| c.as_i64().and_then(|i| u8::try_from(i).ok()))
            .collect();
        if r.recover_on_exit_codes.contains(&0) {
            out.push(
                Diagnostic::new(
                    Rule::InvalidJobRecovery,
                    n.span,
                    "exit code 0 is success; it cannot trigger a recovery",
                )
                .severity(crate::Severity::Warning)
                .label("includes 0"),
            );
        }
    }
    r
}
