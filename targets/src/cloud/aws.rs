//! EC2 requests in the API's own JSON shape (botocore's service model,
//! 2016-11-15), as `boto3.client('ec2').run_instances(**request)` takes
//! them: one `RunInstances` per node; per group, the security group that
//! lets the group's nodes reach each other and the placement groups asked
//! for.
//!
//! Requests use the region's default VPC, as `sky launch` does unless
//! configured otherwise, so that groups are referred to by name and every
//! request is complete at build time. `UserData` is the boot script as
//! text; the SDKs and the CLI base64-encode it.

use super::node::{Disk, NodeSpec};
use super::request::number;
use serde_json::{Value, json};
use skyc_compiler::ir::PortRange;

pub(super) const API: &str = "ec2 2016-11-15";

/// The security group of a group's nodes.
pub(super) fn security_group(group: &str) -> String {
    format!("skyc-{group}")
}

/// The cluster placement group of a task's nodes.
pub(super) fn placement_group(group: &str, task: &str) -> String {
    format!("skyc-{group}-{task}")
}

fn tag(key: &str, value: &str) -> Value {
    json!({"Key": key, "Value": value})
}

fn group_tags(resource: &str, group: &str) -> Value {
    json!([{"ResourceType": resource, "Tags": [tag("skyc-group", group)]}])
}

/// The requests made once per group, before any node, in order; `kind`
/// is what the group is (`Job Group`, `pipeline`), for the description.
pub(super) fn group_requests(
    group: &str,
    kind: &str,
    ports: &[(PortRange, String)],
    placement: &[String],
) -> Vec<Value> {
    let sg = security_group(group);
    let mut permissions = vec![json!({
        "IpProtocol": "-1",
        "UserIdGroupPairs": [{
            "GroupName": sg,
            "Description": "every node of the group",
        }],
    })];
    for (range, task) in ports {
        permissions.push(json!({
            "IpProtocol": "tcp",
            "FromPort": range.start,
            "ToPort": range.end,
            "IpRanges": [{"CidrIp": "0.0.0.0/0", "Description": format!("ports of task {task}")}],
        }));
    }
    let mut out = vec![
        json!({
            "api": API,
            "operation": "CreateSecurityGroup",
            "request": {
                "GroupName": sg,
                "Description": format!("skyc {kind} {group}: its nodes reach each other"),
                "TagSpecifications": group_tags("security-group", group),
            },
        }),
        json!({
            "api": API,
            "operation": "AuthorizeSecurityGroupIngress",
            "request": {"GroupName": sg, "IpPermissions": permissions},
        }),
    ];
    for name in placement {
        out.push(json!({
            "api": API,
            "operation": "CreatePlacementGroup",
            "request": {
                "GroupName": name,
                "Strategy": "cluster",
                "TagSpecifications": group_tags("placement-group", group),
            },
        }));
    }
    out
}

/// The default image: Ubuntu 22.04, or AWS's Deep Learning Base AMI (with
/// NVIDIA drivers) for instances with GPUs, through the public SSM
/// parameters EC2 resolves at launch.
pub(super) fn default_image(gpu: bool, arm64: bool) -> &'static str {
    match (gpu, arm64) {
        (false, false) => {
            "resolve:ssm:/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id"
        }
        (false, true) => {
            "resolve:ssm:/aws/service/canonical/ubuntu/server/22.04/stable/current/arm64/hvm/ebs-gp2/ami-id"
        }
        (true, false) => {
            "resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
        }
        (true, true) => {
            "resolve:ssm:/aws/service/deeplearning/ami/arm64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
        }
    }
}

/// Whether `image` can be an `ImageId`.
pub(super) fn is_image(image: &str) -> bool {
    image.starts_with("ami-") || image.starts_with("resolve:ssm:")
}

/// SkyPilot's AWS disk tiers (`_get_disk_specs`): `standard` for low,
/// `gp3` with 3500/7000 IOPS for medium (the default) and high, `io2`
/// with 20000 IOPS for ultra and best.
fn ebs(disk: &Disk) -> Value {
    let (kind, iops) = match disk.tier.as_deref() {
        Some("low") => ("standard", None),
        Some("high") => ("gp3", Some(7000)),
        Some("ultra" | "best") => ("io2", Some(20000)),
        _ => ("gp3", Some(3500)),
    };
    let mut ebs = serde_json::Map::new();
    ebs.insert("VolumeSize".into(), json!(disk.size_gb));
    ebs.insert("VolumeType".into(), json!(kind));
    if let Some(iops) = iops {
        ebs.insert("Iops".into(), json!(iops));
        if kind == "gp3" {
            ebs.insert("Throughput".into(), json!(iops / 16));
        }
    }
    ebs.insert("DeleteOnTermination".into(), json!(true));
    Value::Object(ebs)
}

/// The `RunInstances` request of one node.
pub(super) fn run_instances(node: &NodeSpec) -> Value {
    let offer = node.offer;
    let mut tags = vec![
        tag("Name", &node.name),
        tag("skyc-group", node.group),
        tag("skyc-task", node.task),
        tag("skyc-rank", &node.rank.to_string()),
    ];
    for (k, v) in node.labels {
        match tags.iter_mut().find(|t| t["Key"] == k.as_str()) {
            Some(t) => *t = tag(k, v),
            None => tags.push(tag(k, v)),
        }
    }
    let mut r = serde_json::Map::new();
    let gpu = offer.accelerator.is_some();
    let arm64 = offer.arch.as_deref() == Some("arm64");
    r.insert(
        "ImageId".into(),
        json!(node.image.unwrap_or_else(|| default_image(gpu, arm64))),
    );
    r.insert("InstanceType".into(), json!(offer.instance_type));
    r.insert("MinCount".into(), json!(1));
    r.insert("MaxCount".into(), json!(1));
    r.insert("SecurityGroups".into(), json!([security_group(node.group)]));
    let mut placement = serde_json::Map::new();
    let zone = offer.zone.clone().or_else(|| {
        node.placement
            .as_ref()
            .and_then(|_| offer.zones.first().cloned())
    });
    if let Some(z) = zone {
        placement.insert("AvailabilityZoneId".into(), json!(z));
    }
    if let Some(pg) = &node.placement {
        placement.insert("GroupName".into(), json!(pg));
    }
    if !placement.is_empty() {
        r.insert("Placement".into(), Value::Object(placement));
    }
    if offer.use_spot {
        r.insert(
            "InstanceMarketOptions".into(),
            json!({
                "MarketType": "spot",
                "SpotOptions": {
                    "SpotInstanceType": "one-time",
                    "InstanceInterruptionBehavior": "terminate",
                },
            }),
        );
    }
    r.insert(
        "BlockDeviceMappings".into(),
        json!([{"DeviceName": "/dev/sda1", "Ebs": ebs(&node.disk)}]),
    );
    r.insert(
        "MetadataOptions".into(),
        json!({"HttpTokens": "required", "HttpEndpoint": "enabled"}),
    );
    r.insert(
        "InstanceInitiatedShutdownBehavior".into(),
        json!("terminate"),
    );
    r.insert(
        "TagSpecifications".into(),
        json!([
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": [tag("skyc-group", node.group), tag("skyc-task", node.task)]},
        ]),
    );
    r.insert("UserData".into(), json!(node.boot));
    json!({"api": API, "operation": "RunInstances", "request": Value::Object(r)})
}

/// SkyPilot's AWS label rule (`is_label_valid`): a key of 1 to 127
/// non-space characters not starting with `aws:`, a value of at most 255.
pub(super) fn label_problem(key: &str, value: &str) -> Option<String> {
    let spaceless = |s: &str| !s.chars().any(char::is_whitespace);
    if key.is_empty() || key.chars().count() > 127 || !spaceless(key) || key.starts_with("aws:") {
        return Some(format!(
            "the label key `{}` is not an AWS tag key (1 to 127 characters, no spaces, not `aws:...`)",
            key.escape_debug()
        ));
    }
    if value.chars().count() > 255 || !spaceless(value) {
        return Some(format!(
            "the value of label `{key}` is not an AWS tag value (at most 255 characters, no spaces)"
        ));
    }
    None
}

/// Tag values are at most 256 characters.
pub(super) fn name_problem(name: &str) -> Option<String> {
    (name.len() > 255).then(|| {
        format!(
            "the node name `{name}` is {} characters; an EC2 tag value holds 256",
            number(name.len() as f64)
        )
    })
}
