//! skyc's controller on AWS, as requests to review and send
//! (docs/controller.md, "On AWS"): one small on-demand instance that runs
//! skyc's supervisor and keeps its state on its own volume, so a group
//! goes on when the machine that submitted it is closed.
//!
//! - **The instance**: SkyPilot's jobs-controller resources (`cpus: 4+`,
//!   `memory: 4x`, a 50 GB disk), chosen by SkyPilot's rule from the
//!   catalog ([`super::select`]): the cheapest type of the default
//!   families, on demand; `--controller-instance-type` overrides it.
//!   Stopped, not terminated, when the OS shuts down: the controller
//!   stops itself after its idle time, and its state is on its volume.
//! - **Its credentials**: an instance profile of the role
//!   [`NAME`], whose policy ([`policy`]) allows what a supervisor does on
//!   AWS and no more: EC2 on what skyc tagged ([`RUN_TAG`]) when it
//!   created it, its own instance stopped, S3 on `skyc-*` buckets. No
//!   long-lived key leaves the user's machine.
//! - **How it is reached**: SSH only (tcp/22, key-only), with a key made
//!   on the user's machine; the runtime imports its public half as the
//!   key pair [`NAME`]. skyc itself arrives over that connection (the
//!   static executable), started by the unit the boot script installs.
//!
//! Pure: options and catalog in, a document out.

use super::aws::{API, default_image};
use super::catalog::Catalog;
use super::request::{Bound, Request};
use super::select::{self, Offer};
use serde_json::{Value, json};

/// The name of the controller's role, instance profile, security group
/// and key pair, and the tag its instance carries (value: its region).
pub const NAME: &str = "skyc-controller";

/// The tag every EC2 resource a supervisor creates carries (the run's
/// id): the policy lets the controller act on those alone.
pub const RUN_TAG: &str = "skyc-run";

/// The controller's state directory (its volume).
pub const STATE_DIR: &str = "/var/lib/skyc";

/// Where skyc is delivered on the controller.
pub const BINARY: &str = "/var/lib/skyc/bin/skyc";

/// The environment the controller's service reads (`KEY=VALUE` lines,
/// written by the client that starts it).
pub const ENVIRONMENT: &str = "/var/lib/skyc/controller.env";

/// The systemd unit the boot script installs.
pub const SERVICE: &str = "skyc-controller.service";

/// IAM's API version, as the requests name it.
const IAM_API: &str = "iam 2010-05-08";

/// SkyPilot's jobs-controller resources (`sky/jobs/constants.py`).
const CPUS: f64 = 4.0;
const MEMORY_PER_CPU: f64 = 4.0;
pub const DEFAULT_DISK_GB: u64 = 50;

/// SkyPilot's jobs-controller autostop: stopped after 10 idle minutes.
pub const DEFAULT_IDLE_SECONDS: u64 = 600;

/// How the controller runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Controller {
    /// `None`: the cheapest region offering the instance (`us-*` first).
    pub region: Option<String>,
    /// `None`: SkyPilot's rule for the controller's resources.
    pub instance_type: Option<String>,
    pub disk_gb: u64,
    /// Nothing live for this long: the controller stops its instance.
    pub idle_seconds: u64,
}

impl Default for Controller {
    fn default() -> Self {
        Self {
            region: None,
            instance_type: None,
            disk_gb: DEFAULT_DISK_GB,
            idle_seconds: DEFAULT_IDLE_SECONDS,
        }
    }
}

/// The instance the controller runs on: SkyPilot's rule for its
/// resources, in the region asked (else the cheapest).
pub fn offer(c: &Controller, catalog: &Catalog) -> Result<Offer, String> {
    let request = Request {
        cpus: c.instance_type.is_none().then_some(Bound::AtLeast(CPUS)),
        memory: c
            .instance_type
            .is_none()
            .then_some(Bound::PerCpu(MEMORY_PER_CPU)),
        instance_type: c.instance_type.clone(),
        region: c.region.clone(),
        ..Request::default()
    };
    let offers = select::offers(catalog, &request).map_err(|e| {
        let mut message = format!(
            "the controller's instance ({}): {}",
            request.describe(),
            e.reason
        );
        if !e.did_you_mean.is_empty() {
            message.push_str(&format!(" (did you mean: {}?)", e.did_you_mean.join(", ")));
        }
        message
    })?;
    offers
        .into_iter()
        .next()
        .ok_or_else(|| format!("the catalog offers nothing for {}", request.describe()))
}

/// The controller's document: the instance, the role's policy and every
/// request, in the order they are sent.
pub fn spec(c: &Controller, catalog: &Catalog) -> Result<Value, String> {
    let offer = offer(c, catalog)?;
    let region = offer.region.clone();
    let policy = policy(&region);
    Ok(json!({
        "apiVersion": super::API_VERSION,
        "kind": "CloudController",
        "cloud": "aws",
        "region": region,
        "instance_type": offer.instance_type,
        "vcpus": offer.vcpus,
        "memory_gb": offer.memory_gib,
        "hourly_price": super::select::round_price(offer.price),
        "disk_gb": c.disk_gb,
        "idle_seconds": c.idle_seconds,
        "catalog": {"source": catalog.origin.source, "date": catalog.origin.date},
        "state_dir": STATE_DIR,
        "policy": policy,
        "requests": requests(c, &offer, &policy),
    }))
}

/// The role's trust policy: EC2 instances (its instance profile) assume it.
fn trust() -> Value {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": "ec2.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }],
    })
}

/// The AWS partition of `region`, as ARNs name it.
fn partition(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "aws-cn"
    } else if region.starts_with("us-gov-") {
        "aws-us-gov"
    } else {
        "aws"
    }
}

/// The EC2 actions a supervisor creates resources with; each request
/// tags what it creates with [`RUN_TAG`].
const CREATE: [&str; 4] = [
    "ec2:RunInstances",
    "ec2:CreateSecurityGroup",
    "ec2:CreatePlacementGroup",
    "ec2:ImportKeyPair",
];

/// What the controller's role may do: what the supervisor does on AWS
/// (docs/targets/cloud.md, "Inside the AWS runtime"), on what it made.
///
/// - reading EC2 (`Describe*` takes no resource);
/// - creating instances, volumes, security and placement groups and key
///   pairs only with the run's tag in the request, and tags only as part
///   of those requests;
/// - launching into the account's networks and images;
/// - terminating, stopping, tagging, opening and deleting only what
///   carries the tag;
/// - stopping its own instance (tagged [`NAME`]);
/// - the runs' buckets (`skyc-*`) and their objects.
pub fn policy(region: &str) -> Value {
    let p = partition(region);
    let ec2 = |kind: &str| format!("arn:{p}:ec2:*:*:{kind}/*");
    let tagged: Vec<String> = [
        "instance",
        "volume",
        "security-group",
        "placement-group",
        "key-pair",
    ]
    .iter()
    .map(|k| ec2(k))
    .collect();
    let run_tag = format!("aws:RequestTag/{RUN_TAG}");
    let resource_tag = format!("aws:ResourceTag/{RUN_TAG}");
    json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "SkycRead",
                "Effect": "Allow",
                "Action": [
                    "ec2:DescribeInstances",
                    "ec2:DescribeInstanceAttribute",
                    "ec2:DescribeSecurityGroups",
                    "ec2:DescribeKeyPairs",
                ],
                "Resource": "*",
            },
            {
                "Sid": "SkycCreateTagged",
                "Effect": "Allow",
                "Action": CREATE,
                "Resource": tagged,
                "Condition": {"Null": {run_tag: "false"}},
            },
            {
                "Sid": "SkycTagOnCreate",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": tagged,
                "Condition": {"StringEquals": {"ec2:CreateAction": CREATE.map(|a| a.trim_start_matches("ec2:"))}},
            },
            {
                "Sid": "SkycLaunchInto",
                "Effect": "Allow",
                "Action": ["ec2:RunInstances", "ec2:CreateSecurityGroup"],
                "Resource": [
                    format!("arn:{p}:ec2:*::image/*"),
                    ec2("subnet"),
                    ec2("network-interface"),
                    ec2("vpc"),
                    ec2("spot-instances-request"),
                ],
            },
            {
                "Sid": "SkycActOnTagged",
                "Effect": "Allow",
                "Action": [
                    "ec2:RunInstances",
                    "ec2:TerminateInstances",
                    "ec2:StopInstances",
                    "ec2:CreateTags",
                    "ec2:AuthorizeSecurityGroupIngress",
                    "ec2:DeleteSecurityGroup",
                    "ec2:DeletePlacementGroup",
                    "ec2:DeleteKeyPair",
                ],
                "Resource": tagged,
                "Condition": {"Null": {resource_tag: "false"}},
            },
            {
                "Sid": "SkycStopItself",
                "Effect": "Allow",
                "Action": "ec2:StopInstances",
                "Resource": ec2("instance"),
                "Condition": {"Null": {format!("aws:ResourceTag/{NAME}"): "false"}},
            },
            {
                "Sid": "SkycRunBuckets",
                "Effect": "Allow",
                "Action": ["s3:CreateBucket", "s3:DeleteBucket", "s3:ListBucket"],
                "Resource": format!("arn:{p}:s3:::skyc-*"),
            },
            {
                "Sid": "SkycRunObjects",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                "Resource": format!("arn:{p}:s3:::skyc-*/*"),
            },
        ],
    })
}

/// Every action [`policy`] allows, in its order, without repeats.
pub fn policy_actions(policy: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for statement in policy["Statement"].as_array().into_iter().flatten() {
        let actions = match &statement["Action"] {
            Value::String(a) => vec![a.clone()],
            Value::Array(list) => list
                .iter()
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        for a in actions {
            if !out.contains(&a) {
                out.push(a);
            }
        }
    }
    out
}

fn tag(key: &str, value: &str) -> Value {
    json!({"Key": key, "Value": value})
}

/// The boot script: the state directory, and the unit that runs skyc's
/// controller once the client has delivered skyc (and again at every
/// boot: a controller started after a stop goes on with its state).
pub fn boot_script() -> String {
    format!(
        r#"#!/bin/sh
# skyc's controller: its state directory, and the service that runs skyc
# once the client has delivered it ({BINARY}). Without systemd the
# client starts skyc itself.
set -eu
install -d -m 0700 {STATE_DIR} {STATE_DIR}/bin
[ -d /run/systemd/system ] || exit 0
cat > /etc/systemd/system/{SERVICE} <<'UNIT'
[Unit]
Description=skyc controller
ConditionPathExists={BINARY}
After=network-online.target
Wants=network-online.target

[Service]
EnvironmentFile=-{ENVIRONMENT}
ExecStart={BINARY} controller serve --target aws --state-dir {STATE_DIR}
StandardOutput=append:{STATE_DIR}/supervisor.log
StandardError=append:{STATE_DIR}/supervisor.log
Restart=always
RestartSec=2
# A restart (a new skyc) leaves the supervisor it started at work.
KillMode=process

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable {SERVICE}
"#
    )
}

/// The requests that make the controller, in order: its role and
/// instance profile (IAM is global), its security group, and the
/// instance. The key pair [`NAME`] is imported before the instance from
/// the key made on the user's machine (not here: it is not known when
/// building).
fn requests(c: &Controller, offer: &Offer, policy: &Value) -> Vec<Value> {
    let compact = |v: &Value| serde_json::to_string(v).unwrap_or_default();
    let arm64 = offer.arch.as_deref() == Some("arm64");
    vec![
        json!({"api": IAM_API, "operation": "CreateRole", "request": {
            "RoleName": NAME,
            "AssumeRolePolicyDocument": compact(&trust()),
            "Description": "skyc's controller: supervises skyc's runs",
            "Tags": [tag(NAME, "role")],
        }}),
        json!({"api": IAM_API, "operation": "PutRolePolicy", "request": {
            "RoleName": NAME,
            "PolicyName": NAME,
            "PolicyDocument": compact(policy),
        }}),
        json!({"api": IAM_API, "operation": "CreateInstanceProfile", "request": {
            "InstanceProfileName": NAME,
        }}),
        json!({"api": IAM_API, "operation": "AddRoleToInstanceProfile", "request": {
            "InstanceProfileName": NAME,
            "RoleName": NAME,
        }}),
        json!({"api": API, "operation": "CreateSecurityGroup", "request": {
            "GroupName": NAME,
            "Description": "skyc's controller: SSH from its clients",
            "TagSpecifications": [{"ResourceType": "security-group", "Tags": [tag(NAME, &offer.region)]}],
        }}),
        json!({"api": API, "operation": "AuthorizeSecurityGroupIngress", "request": {
            "GroupName": NAME,
            "IpPermissions": [{
                "IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
                "IpRanges": [{"CidrIp": "0.0.0.0/0", "Description": "SSH, key only"}],
            }],
        }}),
        json!({"api": API, "operation": "RunInstances", "request": {
            "ImageId": default_image(false, arm64),
            "InstanceType": offer.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "KeyName": NAME,
            "SecurityGroups": [NAME],
            "IamInstanceProfile": {"Name": NAME},
            "BlockDeviceMappings": [{"DeviceName": "/dev/sda1", "Ebs": {
                "VolumeSize": c.disk_gb, "VolumeType": "gp3", "DeleteOnTermination": true,
            }}],
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
            "InstanceInitiatedShutdownBehavior": "stop",
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": [tag("Name", NAME), tag(NAME, &offer.region)]},
                {"ResourceType": "volume", "Tags": [tag(NAME, &offer.region)]},
            ],
            "UserData": boot_script(),
        }}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::Cloud;

    #[test]
    fn the_controller_is_the_cheapest_type_with_4_cpus_and_4_gib_each() {
        let catalog = Catalog::snapshot(Cloud::Aws);
        let o = offer(&Controller::default(), &catalog).unwrap();
        assert!(o.vcpus.unwrap() >= 4.0, "{o:?}");
        assert!(o.memory_gib.unwrap() >= 4.0 * o.vcpus.unwrap(), "{o:?}");
        assert!(!o.use_spot);
        // Nothing cheaper fits, in that region.
        for row in catalog.rows.iter().filter(|r| r.region == o.region) {
            let default_family = row.instance_type.as_deref().is_some_and(|t| {
                super::super::families::AWS_DEFAULT_FAMILIES
                    .iter()
                    .any(|f| t.starts_with(&format!("{f}.")))
            });
            let fits = row.vcpus.is_some_and(|c| c >= 4.0)
                && row
                    .memory_gib
                    .zip(row.vcpus)
                    .is_some_and(|(m, c)| m >= 4.0 * c)
                && default_family;
            if fits && let Some(p) = row.price_for(false) {
                assert!(
                    p >= o.price,
                    "{:?} at {p} is cheaper than {o:?}",
                    row.instance_type
                );
            }
        }
    }

    #[test]
    fn an_unknown_region_or_type_is_refused_with_close_names() {
        let catalog = Catalog::snapshot(Cloud::Aws);
        let e = offer(
            &Controller {
                region: Some("us-east-9".into()),
                ..Controller::default()
            },
            &catalog,
        )
        .unwrap_err();
        assert!(e.contains("us-east-9") && e.contains("did you mean"), "{e}");
        let e = offer(
            &Controller {
                instance_type: Some("m6i.larg".into()),
                ..Controller::default()
            },
            &catalog,
        )
        .unwrap_err();
        assert!(e.contains("no instance type `m6i.larg`"), "{e}");
    }

    #[test]
    fn the_policy_names_actions_not_wildcards_in_its_partition() {
        let actions = policy_actions(&policy("us-east-1"));
        assert!(actions.contains(&"ec2:StopInstances".to_owned()));
        assert!(!actions.iter().any(|a| a.contains('*')), "{actions:?}");
        assert!(policy("cn-north-1").to_string().contains("arn:aws-cn:"));
    }
}
