//! Every request skyc emits, checked against the cloud's own API model
//! (`tests/fixtures/cloud-api/`): the EC2 service model botocore
//! validates with, and the Compute Engine discovery document. A small
//! validator written here: required members, types, enums, patterns, no
//! unknown member, no read-only member (GCP).

use super::{CLOUDS, example_specs, spec};
use crate::support::root;
use serde_json::Value;
use skyc_targets::cloud::Cloud;
use std::sync::OnceLock;

fn model(file: &str) -> Value {
    let text = std::fs::read_to_string(root().join("tests/fixtures/cloud-api").join(file)).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ec2() -> &'static Value {
    static M: OnceLock<Value> = OnceLock::new();
    M.get_or_init(|| model("aws-ec2-2016-11-15.subset.json"))
}

fn iam() -> &'static Value {
    static M: OnceLock<Value> = OnceLock::new();
    M.get_or_init(|| model("aws-iam-2010-05-08.subset.json"))
}

fn compute() -> &'static Value {
    static M: OnceLock<Value> = OnceLock::new();
    M.get_or_init(|| model("gcp-compute-v1.subset.json"))
}

/// Problems of an EC2 request for `operation`, each with its path.
pub(crate) fn check_ec2(operation: &str, request: &Value) -> Vec<String> {
    check_aws(ec2(), "EC2", operation, request)
}

/// Problems of an IAM request for `operation`, each with its path.
pub(crate) fn check_iam(operation: &str, request: &Value) -> Vec<String> {
    check_aws(iam(), "IAM", operation, request)
}

/// Problems of a request of a botocore model's `operation`.
fn check_aws(m: &Value, service: &str, operation: &str, request: &Value) -> Vec<String> {
    let Some(shape) = m["operations"][operation]["input"]["shape"].as_str() else {
        return vec![format!("{service} has no operation {operation}")];
    };
    let mut errors = Vec::new();
    ec2_shape(m, shape, request, operation, &mut errors);
    errors
}

fn ec2_shape(m: &Value, name: &str, v: &Value, path: &str, errors: &mut Vec<String>) {
    let s = &m["shapes"][name];
    let mut bad = |what: &str| errors.push(format!("{path}: {what} (shape {name})"));
    match s["type"].as_str() {
        Some("structure") => {
            let Some(object) = v.as_object() else {
                return bad("not a structure");
            };
            let members = s["members"].as_object().unwrap();
            for required in s["required"].as_array().into_iter().flatten() {
                let required = required.as_str().unwrap();
                if !object.contains_key(required) {
                    bad(&format!("required member {required} is missing"));
                }
            }
            for (k, value) in object {
                match members.get(k) {
                    Some(member) => {
                        let shape = member["shape"].as_str().unwrap();
                        ec2_shape(m, shape, value, &format!("{path}.{k}"), errors);
                    }
                    None => errors.push(format!("{path}: unknown member {k} (shape {name})")),
                }
            }
        }
        Some("list") => {
            let Some(items) = v.as_array() else {
                return bad("not a list");
            };
            let member = s["member"]["shape"].as_str().unwrap();
            for (i, item) in items.iter().enumerate() {
                ec2_shape(m, member, item, &format!("{path}[{i}]"), errors);
            }
        }
        Some("string") => {
            let Some(text) = v.as_str() else {
                return bad("not a string");
            };
            if let Some(allowed) = s["enum"].as_array()
                && !allowed.iter().any(|a| a == text)
            {
                bad(&format!(
                    "`{text}` is not one of its {} values",
                    allowed.len()
                ));
            }
            let chars = text.chars().count() as i64;
            if s["min"].as_i64().is_some_and(|min| chars < min) {
                bad("shorter than its minimum");
            }
            if s["max"].as_i64().is_some_and(|max| chars > max) {
                bad("longer than its maximum");
            }
        }
        Some("integer" | "long") => match v.as_i64() {
            None => bad("not an integer"),
            Some(n) => {
                if s["min"].as_i64().is_some_and(|min| n < min) {
                    bad("below its minimum");
                }
                if s["max"].as_i64().is_some_and(|max| n > max) {
                    bad("above its maximum");
                }
            }
        },
        Some("boolean") => {
            if !v.is_boolean() {
                bad("not a boolean");
            }
        }
        Some("timestamp") => {
            if !v.is_string() {
                bad("not a timestamp");
            }
        }
        other => bad(&format!("the validator cannot check type {other:?}")),
    }
}

/// Problems of a Compute request body for method `operation`.
fn check_compute(operation: &str, path: &str, body: &Value) -> Vec<String> {
    let d = compute();
    let method = &d["methods"][operation];
    let Some(schema) = method["request"]["$ref"].as_str() else {
        return vec![format!("Compute has no method {operation}")];
    };
    let mut errors = Vec::new();
    // The path: the method's template, `{project}` left to the runtime.
    let template: Vec<&str> = method["path"].as_str().unwrap().split('/').collect();
    let given: Vec<&str> = path.split('/').collect();
    if template.len() != given.len() {
        errors.push(format!("{path}: not of the form {}", method["path"]));
    }
    for (t, g) in template.iter().zip(&given) {
        match t.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            Some("project") if *g == "{project}" => {}
            Some(param) => {
                let pattern = method["parameters"][param]["pattern"]
                    .as_str()
                    .unwrap_or("");
                if !matches(pattern, g).unwrap_or(false) {
                    errors.push(format!("{path}: `{g}` is not a {param}"));
                }
            }
            None if t == g => {}
            None => errors.push(format!("{path}: `{g}` where {t} belongs")),
        }
    }
    compute_schema(
        d,
        &serde_json::json!({"$ref": schema}),
        body,
        operation,
        schema,
        &mut errors,
    );
    errors
}

fn compute_schema(
    d: &Value,
    schema: &Value,
    v: &Value,
    method: &str,
    path: &str,
    errors: &mut Vec<String>,
) {
    if let Some(name) = schema["$ref"].as_str() {
        let resolved = &d["schemas"][name];
        if resolved.is_null() {
            errors.push(format!("{path}: no schema {name}"));
            return;
        }
        return compute_schema(d, resolved, v, method, path, errors);
    }
    let mut bad = |what: &str| errors.push(format!("{path}: {what}"));
    if schema["readOnly"] == true {
        return bad("a read-only member is set");
    }
    match schema["type"].as_str() {
        Some("object") => {
            let Some(object) = v.as_object() else {
                return bad("not an object");
            };
            if let Some(properties) = schema["properties"].as_object() {
                for (k, p) in properties {
                    let required = p["annotations"]["required"]
                        .as_array()
                        .is_some_and(|ms| ms.iter().any(|m| m == &format!("compute.{method}")));
                    if required && !object.contains_key(k) {
                        errors.push(format!("{path}: required member {k} is missing"));
                    }
                }
                for (k, value) in object {
                    match properties.get(k) {
                        Some(p) => {
                            compute_schema(d, p, value, method, &format!("{path}.{k}"), errors)
                        }
                        None => errors.push(format!("{path}: unknown member {k}")),
                    }
                }
            } else if let Some(values) = schema.get("additionalProperties") {
                for (k, value) in object {
                    compute_schema(d, values, value, method, &format!("{path}.{k}"), errors);
                }
            } else if !object.is_empty() {
                bad("members where the schema allows none");
            }
        }
        Some("array") => {
            let Some(items) = v.as_array() else {
                return bad("not an array");
            };
            for (i, item) in items.iter().enumerate() {
                let at = format!("{path}[{i}]");
                // Tags put the items' pattern on the array.
                if let Some(p) = schema["pattern"].as_str() {
                    check_pattern(p, item, &at, errors);
                }
                compute_schema(d, &schema["items"], item, method, &at, errors);
            }
        }
        Some("string") => {
            let Some(text) = v.as_str() else {
                return bad("not a string");
            };
            if let Some(allowed) = schema["enum"].as_array()
                && !allowed.iter().any(|a| a == text)
            {
                bad(&format!("`{text}` is not one of {allowed:?}"));
            }
            if matches!(schema["format"].as_str(), Some("int64" | "uint64"))
                && text.parse::<i64>().is_err()
            {
                bad(&format!("`{text}` is not an int64 in a string"));
            }
            if let Some(p) = schema["pattern"].as_str() {
                check_pattern(p, v, path, errors);
            }
        }
        Some("integer") => {
            let ok = v
                .as_i64()
                .is_some_and(|n| schema["format"] != "int32" || i32::try_from(n).is_ok());
            if !ok {
                bad("not an integer of its format");
            }
        }
        Some("boolean") => {
            if !v.is_boolean() {
                bad("not a boolean");
            }
        }
        Some("number") => {
            if !v.is_number() {
                bad("not a number");
            }
        }
        other => bad(&format!("the validator cannot check type {other:?}")),
    }
}

fn check_pattern(pattern: &str, v: &Value, path: &str, errors: &mut Vec<String>) {
    let text = v.as_str().unwrap_or_default();
    match matches(pattern, text) {
        Some(true) => {}
        Some(false) => errors.push(format!("{path}: `{text}` does not match {pattern}")),
        None => errors.push(format!(
            "{path}: the validator cannot check the pattern {pattern}"
        )),
    }
}

/// The patterns the Compute subset uses, matched whole (RE2 semantics of
/// the discovery format); `None` for one this validator does not know.
fn matches(pattern: &str, s: &str) -> Option<bool> {
    let b = s.as_bytes();
    match pattern {
        // Resource names.
        "[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?" => Some(
            !b.is_empty()
                && b.len() <= 63
                && b[0].is_ascii_lowercase()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && (b.len() == 1 || b[b.len() - 1] != b'-'),
        ),
        // Metadata keys.
        "[a-zA-Z0-9-_]{1,128}" => Some(
            !b.is_empty()
                && b.len() <= 128
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_'),
        ),
        _ => None,
    }
}

/// Problems of one request entry of a spec (`api`, `operation`,
/// `request`, and `path` for GCP).
fn check_entry(cloud: Cloud, entry: &Value) -> Vec<String> {
    let op = entry["operation"].as_str().unwrap_or_default();
    match cloud {
        Cloud::Aws => {
            assert_eq!(entry["api"], "ec2 2016-11-15");
            check_ec2(op, &entry["request"])
        }
        Cloud::Gcp => {
            assert_eq!(entry["api"], "compute v1");
            check_compute(
                op,
                entry["path"].as_str().unwrap_or_default(),
                &entry["request"],
            )
        }
    }
}

/// Every request of a spec: the group's, then each node's launch.
pub(crate) fn check_spec(cloud: Cloud, doc: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for entry in doc["requests"].as_array().unwrap() {
        problems.extend(check_entry(cloud, entry));
    }
    for node in doc["nodes"].as_array().unwrap() {
        let launch = &node["launch"];
        let expected = match cloud {
            Cloud::Aws => "RunInstances",
            Cloud::Gcp => "instances.insert",
        };
        assert_eq!(launch["operation"], expected);
        problems.extend(
            check_entry(cloud, launch)
                .into_iter()
                .map(|p| format!("{}: {p}", node["hostname"].as_str().unwrap())),
        );
    }
    problems
}

/// Groups that use what the examples do not: spot, GPUs attached and
/// built in, placement, ports, labels, disk tiers, images, zones.
pub(crate) fn feature_groups() -> Vec<(&'static str, String)> {
    vec![
        (
            "spot-gpu-placement",
            "name: feat\nexecution: parallel\n---\nname: trainer\nnum_nodes: 3\nresources:\n  accelerators: {T4: 1, A100: 1}\n  use_spot: true\n  network_tier: best\n  disk_size: 512\n  disk_tier: high\n  ports: [8080, 9000-9010]\n  labels: {team: ml, project: rl}\nrun: echo train\n---\nname: cpu\nresources:\n  cpus: 4+\n  memory: 16+\n  disk_tier: low\n  ports: 8080\nrun: echo cpu\n".to_owned(),
        ),
        (
            "ultra-disk-images",
            "name: imgs\nexecution: parallel\n---\nname: a\nresources:\n  disk_tier: ultra\n  image_id: ami-0123456789abcdef0\n  any_of:\n    - {infra: aws}\n    - {infra: gcp, image_id: projects/my-proj/global/images/my-image}\nrun: echo a\n---\nname: b\nresources:\n  cpus: 4+\n  disk_tier: best\nrun: echo b\n".to_owned(),
        ),
        (
            "fixed-hosts-and-zones",
            "name: zones\nexecution: parallel\n---\nname: h\nresources:\n  accelerators: H100:8\nrun: echo h\n---\nname: l\nresources:\n  accelerators: L4:1\n  ordered:\n    - {infra: aws/us-east-1}\n    - {infra: gcp/us-east4}\nrun: echo l\n".to_owned(),
        ),
    ]
}

#[test]
fn every_emitted_request_matches_the_cloud_api_models() {
    let mut checked = 0;
    let mut problems = Vec::new();
    for (file, cloud, _, doc, _) in example_specs() {
        let Some(doc) = doc else { continue };
        checked += 1;
        problems.extend(
            check_spec(cloud, &doc)
                .into_iter()
                .map(|p| format!("{file} ({}): {p}", cloud.name())),
        );
    }
    for (name, text) in feature_groups() {
        for cloud in CLOUDS {
            let doc = spec(&text, cloud);
            checked += 1;
            problems.extend(
                check_spec(cloud, &doc)
                    .into_iter()
                    .map(|p| format!("{name} ({}): {p}", cloud.name())),
            );
        }
    }
    assert!(checked > 25, "only {checked} specs");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_features_reach_the_requests() {
    let text = &feature_groups()[0].1;
    let aws = spec(text, Cloud::Aws);
    let node = &aws["nodes"][0]["launch"]["request"];
    assert_eq!(node["InstanceMarketOptions"]["MarketType"], "spot");
    assert_eq!(node["Placement"]["GroupName"], "skyc-feat-trainer");
    assert!(node["Placement"]["AvailabilityZoneId"].is_string());
    assert_eq!(node["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"], 512);
    assert_eq!(node["BlockDeviceMappings"][0]["Ebs"]["Iops"], 7000);
    let tags = node["TagSpecifications"][0]["Tags"].as_array().unwrap();
    assert!(
        tags.iter()
            .any(|t| t["Key"] == "team" && t["Value"] == "ml")
    );
    let requests = aws["requests"].as_array().unwrap();
    assert_eq!(requests[2]["operation"], "CreatePlacementGroup");
    let rules = requests[1]["request"]["IpPermissions"].as_array().unwrap();
    assert_eq!(rules.len(), 3, "the group, 8080, 9000-9010");
    assert_eq!(rules[2]["FromPort"], 9000);

    let gcp = spec(text, Cloud::Gcp);
    let body = &gcp["nodes"][0]["launch"]["request"];
    assert_eq!(body["scheduling"]["provisioningModel"], "SPOT");
    assert_eq!(body["labels"]["team"], "ml");
    assert!(
        body["resourcePolicies"][0]
            .as_str()
            .unwrap()
            .ends_with("/resourcePolicies/skyc-feat-trainer")
    );
    assert_eq!(body["disks"][0]["initializeParams"]["diskSizeGb"], "512");
    let requests = gcp["requests"].as_array().unwrap();
    assert_eq!(
        requests[1]["request"]["allowed"][0]["ports"],
        serde_json::json!(["8080", "9000-9010"])
    );
    assert_eq!(requests[2]["request"]["groupPlacementPolicy"]["vmCount"], 3);
    // The cheaper GPU of the set wins on each cloud: T4 (attached on GCP).
    assert_eq!(gcp["tasks"][0]["accelerator"], "T4:1");
    assert_eq!(body["guestAccelerators"][0]["acceleratorCount"], 1);
    assert_eq!(aws["tasks"][0]["instance_type"], "g4dn.xlarge");

    // Candidates pinned per cloud, each with its own image.
    let text = &feature_groups()[1].1;
    let aws = spec(text, Cloud::Aws);
    assert_eq!(
        aws["nodes"][0]["launch"]["request"]["ImageId"],
        "ami-0123456789abcdef0"
    );
    assert_eq!(
        aws["nodes"][0]["launch"]["request"]["BlockDeviceMappings"][0]["Ebs"]["VolumeType"],
        "io2"
    );
    let gcp = spec(text, Cloud::Gcp);
    assert_eq!(
        gcp["nodes"][0]["launch"]["request"]["disks"][0]["initializeParams"]["sourceImage"],
        "projects/my-proj/global/images/my-image"
    );
}

#[test]
fn the_validator_finds_what_it_should() {
    let good = serde_json::json!({"MinCount": 1, "MaxCount": 1, "InstanceType": "m6i.large"});
    assert!(check_ec2("RunInstances", &good).is_empty());
    let bad = serde_json::json!({
        "MinCount": "1",
        "InstanceType": "m6i.huge",
        "Placement": {"Zone": "x"},
        "InstanceMarketOptions": {"MarketType": "spott"},
    });
    let problems = check_ec2("RunInstances", &bad).join("\n");
    for expected in [
        "required member MaxCount is missing",
        "RunInstances.MinCount: not an integer",
        "`m6i.huge` is not one of",
        "unknown member Zone",
        "`spott` is not one of",
    ] {
        assert!(problems.contains(expected), "{expected} in:\n{problems}");
    }
    let path = "projects/{project}/zones/us-central1-a/instances";
    let good = serde_json::json!({"name": "a-b-0", "machineType": "zones/us-central1-a/machineTypes/n1-highmem-8"});
    assert!(check_compute("instances.insert", path, &good).is_empty());
    let bad = serde_json::json!({
        "name": "Bad_Name",
        "status": "RUNNING",
        "disks": [{"diskSizeGb": 10}],
        "scheduling": {"provisioningModel": "CHEAP"},
        "tags": {"items": ["ok", "-no"]},
        "metadata": {"items": [{"key": "a b", "value": "x"}]},
        "labels": {"a": 1},
        "frobnicate": true,
    });
    let problems = check_compute(
        "instances.insert",
        "projects/{project}/zones/US/instances",
        &bad,
    )
    .join("\n");
    for expected in [
        "`Bad_Name` does not match",
        "read-only member",
        "diskSizeGb: not a string",
        "`CHEAP` is not one of",
        "`-no` does not match",
        "`a b` does not match",
        "labels.a: not a string",
        "unknown member frobnicate",
        "`US` is not a zone",
    ] {
        assert!(problems.contains(expected), "{expected} in:\n{problems}");
    }
    let problems = check_compute("instances.insert", path, &serde_json::json!({})).join("\n");
    assert!(
        problems.contains("required member name is missing"),
        "{problems}"
    );
}
