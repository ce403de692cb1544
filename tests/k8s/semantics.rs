//! Rules the API server and the JobSet webhook enforce that no JSON Schema
//! states: name shapes and lengths, podFailurePolicy consistency, labels,
//! env names, volume references, Indexed Jobs, `dependsOn`.

use serde_json::Value;
use skyc_targets::k8s::names::{
    is_dns1035_label, is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name,
};
use std::collections::BTreeSet;

fn labels(problems: &mut Vec<String>, at: &str, m: &Value) {
    for key in ["labels", "annotations"] {
        for (k, v) in m[key].as_object().into_iter().flatten() {
            if !is_qualified_name(k) {
                problems.push(format!("{at}: {key} key `{k}` is not a qualified name"));
            }
            if key == "labels" && !v.as_str().is_some_and(is_label_value) {
                problems.push(format!(
                    "{at}: label `{k}` has value {v}, not a label value"
                ));
            }
        }
    }
}

fn env_name_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && !b[0].is_ascii_digit()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn pod(problems: &mut Vec<String>, at: &str, job: &Value) {
    let pod = &job["template"];
    labels(problems, at, &pod["metadata"]);
    let spec = &pod["spec"];
    if spec["restartPolicy"] != "Never" {
        problems.push(format!(
            "{at}: restartPolicy {} (must be written, and Never: the webhook would default OnFailure)",
            spec["restartPolicy"]
        ));
    }
    if let Some(h) = spec["hostname"].as_str()
        && !is_dns1123_label(h)
    {
        problems.push(format!("{at}: hostname `{h}` is not a DNS-1123 label"));
    }
    if let Some(s) = spec["subdomain"].as_str()
        && !is_dns1123_label(s)
    {
        problems.push(format!("{at}: subdomain `{s}` is not a DNS-1123 label"));
    }
    let containers = spec["containers"].as_array().cloned().unwrap_or_default();
    if containers.is_empty() {
        problems.push(format!("{at}: no container"));
    }
    let volumes: Vec<&str> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    if volumes.iter().collect::<BTreeSet<_>>().len() != volumes.len() {
        problems.push(format!("{at}: duplicate volume names"));
    }
    for c in &containers {
        let mut envs = BTreeSet::new();
        for e in c["env"].as_array().into_iter().flatten() {
            let n = e["name"].as_str().unwrap_or_default();
            if !env_name_ok(n) || !envs.insert(n.to_owned()) {
                problems.push(format!("{at}: env `{n}` invalid or duplicated"));
            }
        }
        let mut paths = BTreeSet::new();
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            let n = m["name"].as_str().unwrap_or_default();
            if !volumes.contains(&n) {
                problems.push(format!("{at}: mount of unknown volume `{n}`"));
            }
            if !paths.insert(m["mountPath"].as_str().unwrap_or_default().to_owned()) {
                problems.push(format!("{at}: two mounts at {}", m["mountPath"]));
            }
        }
        let mut ports = BTreeSet::new();
        for p in c["ports"].as_array().into_iter().flatten() {
            let port = p["containerPort"].as_u64().unwrap_or(0);
            if !(1..=65535).contains(&port) || !ports.insert(port) {
                problems.push(format!("{at}: containerPort {port} invalid or duplicated"));
            }
        }
    }
    let names: Vec<&str> = containers
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    if let Some(rules) = job["podFailurePolicy"]["rules"].as_array() {
        for r in rules {
            if let Some(on) = r.get("onExitCodes") {
                let values: Vec<u64> = on["values"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_u64)
                    .collect();
                if on["operator"] == "In" && values.contains(&0) {
                    problems.push(format!("{at}: exit code 0 in an `In` list"));
                }
                if values.is_empty() || values.len() > 255 || !values.is_sorted() {
                    problems.push(format!("{at}: onExitCodes values must be 1..255 sorted"));
                }
                if values.windows(2).any(|w| w[0] == w[1]) {
                    problems.push(format!("{at}: duplicate exit codes"));
                }
                if let Some(c) = on["containerName"].as_str()
                    && !names.contains(&c)
                {
                    problems.push(format!("{at}: onExitCodes names no container `{c}`"));
                }
            }
        }
    }
}

/// Every rule broken by `objects`.
pub(crate) fn check(objects: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    for o in objects {
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        labels(&mut problems, name, &o["metadata"]);
        if let Some(ns) = o["metadata"]["namespace"].as_str()
            && !is_dns1123_label(ns)
        {
            problems.push(format!("{name}: namespace `{ns}`"));
        }
        match o["kind"].as_str() {
            Some("ConfigMap" | "Secret") => {
                if !is_dns1123_subdomain(name) {
                    problems.push(format!("{name}: not a DNS-1123 subdomain"));
                }
                for k in o["data"].as_object().into_iter().flatten().map(|(k, _)| k) {
                    if !k
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
                    {
                        problems.push(format!("{name}: data key `{k}`"));
                    }
                }
            }
            Some("JobSet") => jobset(&mut problems, o),
            _ => {}
        }
    }
    problems
}

fn jobset(problems: &mut Vec<String>, js: &Value) {
    let name = js["metadata"]["name"].as_str().unwrap_or_default();
    if !is_dns1035_label(name) {
        problems.push(format!("JobSet `{name}` is not a DNS-1035 label"));
    }
    let spec = &js["spec"];
    // What the webhook would default, written out.
    for (path, want) in [
        ("/network/enableDNSHostnames", Some(Value::Bool(true))),
        ("/network/publishNotReadyAddresses", Some(Value::Bool(true))),
        (
            "/startupPolicy/startupPolicyOrder",
            Some(Value::from("AnyOrder")),
        ),
        ("/successPolicy/operator", None),
    ] {
        match (spec.pointer(path), want) {
            (None, _) => problems.push(format!("{name}: {path} not written")),
            (Some(v), Some(w)) if *v != w => {
                problems.push(format!("{name}: {path} is {v}, expected {w}"))
            }
            _ => {}
        }
    }
    let subdomain = spec["network"]["subdomain"].as_str().unwrap_or(name);
    if !is_dns1035_label(subdomain) || !is_dns1123_subdomain(subdomain) {
        problems.push(format!("{name}: subdomain `{subdomain}`"));
    }
    let rjobs = spec["replicatedJobs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut seen = BTreeSet::new();
    for r in &rjobs {
        let rname = r["name"].as_str().unwrap_or_default();
        if !seen.insert(rname.to_owned()) {
            problems.push(format!("{name}: replicated Job `{rname}` twice"));
        }
        if !is_dns1123_label(rname) {
            problems.push(format!(
                "{name}: replicated Job `{rname}` is not a DNS label"
            ));
        }
        let replicas = r["replicas"].as_u64().unwrap_or(1);
        let job = format!("{name}-{rname}-{}", replicas.saturating_sub(1));
        if !is_dns1035_label(&job) {
            problems.push(format!(
                "{name}: Job name `{job}` is not a DNS-1035 label of 63"
            ));
        }
        let indexed = r["template"]["spec"]["completionMode"] == "Indexed";
        if indexed {
            // The webhook: the longest pod name, with its random suffix.
            let completions = r["template"]["spec"]["completions"].as_u64();
            let parallelism = r["template"]["spec"]["parallelism"].as_u64();
            let pod = format!("{job}-{}-abcde", completions.unwrap_or(1).saturating_sub(1));
            if !is_dns1035_label(&pod) {
                problems.push(format!(
                    "{name}: pod `{pod}` of an Indexed Job is not a DNS-1035 label of 63"
                ));
            }
            // The API server: an Indexed Job has completions, and at most
            // 100000 pods at once.
            if completions.is_none() || parallelism.is_none_or(|p| p > 100_000) {
                problems.push(format!(
                    "{name}/{rname}: Indexed with completions {completions:?}, parallelism {parallelism:?}"
                ));
            }
        }
        // dependsOn: not on the first replicated Job, only on an earlier
        // one (the webhook), one entry (JobSet v0.8's CRD), and never with
        // `startupPolicy: InOrder` (a CEL rule).
        if let Some(deps) = r.get("dependsOn") {
            let entries = deps.as_array().cloned().unwrap_or_default();
            if seen.len() == 1 {
                problems.push(format!("{name}: the first replicated Job has dependsOn"));
            }
            if entries.len() != 1 {
                problems.push(format!(
                    "{name}/{rname}: {} dependsOn entries; JobSet v0.8 takes one",
                    entries.len()
                ));
            }
            for e in &entries {
                let target = e["name"].as_str().unwrap_or_default();
                if target == rname || !seen.contains(target) {
                    problems.push(format!(
                        "{name}/{rname}: depends on `{target}`, not an earlier replicated Job"
                    ));
                }
            }
            if spec["startupPolicy"]["startupPolicyOrder"] == "InOrder" {
                problems.push(format!("{name}: dependsOn with startupPolicy InOrder"));
            }
        }
        let at = format!("{name}/{rname}");
        labels(problems, &at, &r["template"]["metadata"]);
        let job = &r["template"]["spec"];
        if job["completionMode"].is_null() {
            problems.push(format!(
                "{at}: completionMode not written (the webhook would default Indexed)"
            ));
        }
        if job["template"]["spec"]["hostname"].is_string() && job["completionMode"] == "Indexed" {
            problems.push(format!("{at}: an Indexed Job overwrites the pod hostname"));
        }
        pod(problems, &at, job);
    }
    for t in spec["successPolicy"]["targetReplicatedJobs"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if !seen.contains(t.as_str().unwrap_or_default()) {
            problems.push(format!(
                "{name}: success policy names no replicated Job {t}"
            ));
        }
    }
}
