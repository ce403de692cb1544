//! Compute Engine requests in the REST API's JSON shape (discovery
//! document `compute/v1`): one `instances.insert` body per node; per
//! group, the firewall rule that lets the group's nodes reach each other
//! (by network tag), one for the tasks' `ports`, and the compact placement
//! policies asked for.
//!
//! Requests use the project's `default` network, as `sky launch` does
//! unless configured otherwise. The project is the runtime's: request
//! paths carry it as `{project}`, bodies refer to resources relative to
//! it, so every body is complete at build time.

use super::families;
use super::node::{Disk, NodeSpec};
use serde_json::{Map, Value, json};

pub(super) const API: &str = "compute v1";

/// The network tag of a group's instances.
pub(super) fn network_tag(group: &str) -> String {
    format!("skyc-{group}")
}

pub(super) fn internal_firewall(group: &str) -> String {
    format!("skyc-{group}-internal")
}

pub(super) fn ports_firewall(group: &str) -> String {
    format!("skyc-{group}-ports")
}

/// The compact placement policy of a task's nodes.
pub(super) fn placement_policy(group: &str, task: &str) -> String {
    format!("skyc-{group}-{task}")
}

/// The requests made once per group, before any node, in order:
/// `(name, vm count)` for each placement policy.
pub(super) fn group_requests(
    group: &str,
    region: &str,
    ports: &[String],
    placement: &[(String, u32)],
) -> Vec<Value> {
    let tag = network_tag(group);
    let mut out = vec![json!({
        "api": API,
        "operation": "firewalls.insert",
        "path": "projects/{project}/global/firewalls",
        "request": {
            "name": internal_firewall(group),
            "network": "global/networks/default",
            "direction": "INGRESS",
            "priority": 1000,
            "sourceTags": [tag],
            "targetTags": [tag],
            "allowed": [{"IPProtocol": "all"}],
        },
    })];
    if !ports.is_empty() {
        out.push(json!({
            "api": API,
            "operation": "firewalls.insert",
            "path": "projects/{project}/global/firewalls",
            "request": {
                "name": ports_firewall(group),
                "network": "global/networks/default",
                "direction": "INGRESS",
                "priority": 1000,
                "sourceRanges": ["0.0.0.0/0"],
                "targetTags": [tag],
                "allowed": [{"IPProtocol": "tcp", "ports": ports}],
            },
        }));
    }
    for (name, count) in placement {
        out.push(json!({
            "api": API,
            "operation": "resourcePolicies.insert",
            "path": format!("projects/{{project}}/regions/{region}/resourcePolicies"),
            "request": {
                "name": name,
                "groupPlacementPolicy": {"collocation": "COLLOCATED", "vmCount": count},
            },
        }));
    }
    out
}

/// The default image: Ubuntu 22.04, or a Deep Learning VM image (which
/// installs the NVIDIA driver at boot when asked) for VMs with GPUs.
pub(super) fn default_image(gpu: bool, arm64: bool) -> &'static str {
    match (gpu, arm64) {
        (true, _) => {
            "projects/deeplearning-platform-release/global/images/family/common-cu128-ubuntu-2204-nvidia-570"
        }
        (false, true) => "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts-arm64",
        (false, false) => "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts",
    }
}

/// Whether `image` can be a `sourceImage` (a path to an image or family).
pub(super) fn is_image(image: &str) -> bool {
    image.contains("/images/")
}

/// Machine series whose boot disk must be a Hyperdisk.
const HYPERDISK_ONLY: &[&str] = &["n4-", "c4-", "c4a-", "c4d-", "a3-ultragpu-", "a4-", "a4x-"];

/// SkyPilot's GCP disk tiers: pd-standard, pd-balanced (medium, the
/// default), pd-ssd, pd-extreme; Hyperdisk Balanced on series that take no
/// Persistent Disk.
fn disk_type(instance_type: &str, disk: &Disk) -> &'static str {
    if HYPERDISK_ONLY.iter().any(|p| instance_type.starts_with(p)) {
        return "hyperdisk-balanced";
    }
    match disk.tier.as_deref() {
        Some("low") => "pd-standard",
        Some("high") => "pd-ssd",
        Some("ultra" | "best") => "pd-extreme",
        _ => "pd-balanced",
    }
}

/// The `instances.insert` request of one node.
pub(super) fn insert(node: &NodeSpec, region: &str) -> Value {
    let offer = node.offer;
    let zone = offer.zone.as_deref().unwrap_or_default();
    let gpu = offer.accelerator.is_some();
    let arm64 = offer.instance_type.starts_with("t2a-") || offer.instance_type.starts_with("c4a-");
    let mut labels = Map::new();
    labels.insert("skyc-group".into(), json!(node.group));
    labels.insert("skyc-task".into(), json!(node.task));
    labels.insert("skyc-rank".into(), json!(node.rank.to_string()));
    for (k, v) in node.labels {
        labels.insert(k.clone(), json!(v));
    }
    let mut b = Map::new();
    b.insert("name".into(), json!(node.name));
    b.insert(
        "machineType".into(),
        json!(format!("zones/{zone}/machineTypes/{}", offer.instance_type)),
    );
    b.insert("labels".into(), Value::Object(labels));
    b.insert("tags".into(), json!({"items": [network_tag(node.group)]}));
    b.insert(
        "disks".into(),
        json!([{
            "boot": true,
            "autoDelete": true,
            "initializeParams": {
                "sourceImage": node.image.unwrap_or_else(|| default_image(gpu, arm64)),
                "diskSizeGb": node.disk.size_gb.to_string(),
                "diskType": format!("zones/{zone}/diskTypes/{}", disk_type(&offer.instance_type, &node.disk)),
            },
        }]),
    );
    b.insert(
        "networkInterfaces".into(),
        json!([{
            "network": "global/networks/default",
            "accessConfigs": [{"name": "External NAT", "type": "ONE_TO_ONE_NAT"}],
        }]),
    );
    if let (Some((name, count)), true) = (&offer.accelerator, offer.attached) {
        b.insert(
            "guestAccelerators".into(),
            json!([{
                "acceleratorType": format!("zones/{zone}/acceleratorTypes/{}", families::gcp_accelerator_type(name)),
                "acceleratorCount": *count as i64,
            }]),
        );
    }
    if offer.use_spot {
        b.insert(
            "scheduling".into(),
            json!({
                "provisioningModel": "SPOT",
                "instanceTerminationAction": "DELETE",
                "onHostMaintenance": "TERMINATE",
                "automaticRestart": false,
            }),
        );
    } else if gpu {
        // GPU VMs cannot live-migrate; a VM stopped by maintenance is
        // replaced by the runtime, not restarted.
        b.insert(
            "scheduling".into(),
            json!({"onHostMaintenance": "TERMINATE", "automaticRestart": false}),
        );
    }
    let mut items = vec![json!({"key": "startup-script", "value": node.boot})];
    if gpu {
        items.push(json!({"key": "install-nvidia-driver", "value": "True"}));
    }
    b.insert("metadata".into(), json!({"items": items}));
    if let Some(policy) = &node.placement {
        b.insert(
            "resourcePolicies".into(),
            json!([format!("regions/{region}/resourcePolicies/{policy}")]),
        );
    }
    json!({
        "api": API,
        "operation": "instances.insert",
        "path": format!("projects/{{project}}/zones/{zone}/instances"),
        "request": Value::Object(b),
    })
}

/// A GCP resource name: `[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?`.
pub(super) fn is_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && *b.last().unwrap_or(&b'-') != b'-'
}

/// SkyPilot's GCP label rule: a key `[a-z][a-z0-9_-]{0,62}`, a value
/// `[a-z0-9_-]{0,63}`.
pub(super) fn label_problem(key: &str, value: &str) -> Option<String> {
    let ok = |s: &str| {
        s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-')
    };
    let key_ok = key.len() <= 63 && key.starts_with(|c: char| c.is_ascii_lowercase()) && ok(key);
    if !key_ok {
        return Some(format!(
            "the label key `{}` is not a GCP label key (lower-case letters, digits, `_` and `-`, starting with a letter, at most 63)",
            key.escape_debug()
        ));
    }
    if value.len() > 63 || !ok(value) {
        return Some(format!(
            "the value of label `{key}` is not a GCP label value (lower-case letters, digits, `_` and `-`, at most 63)"
        ));
    }
    None
}
