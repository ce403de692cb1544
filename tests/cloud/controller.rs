//! skyc's controller on AWS as `skyc build --target aws --controller`
//! prints it: every request against the EC2 and IAM models, its boot
//! script through shellcheck, the policy's actions against what the AWS
//! runtime calls, and the whole document in a snapshot to review.

use super::api::{check_ec2, check_iam};
use crate::support::{root, skyc, snapshots};
use serde_json::Value;

fn build(args: &[&str]) -> std::process::Output {
    skyc()
        .args(["build", "--target", "aws", "--controller"])
        .args(args)
        .output()
        .expect("skyc build")
}

fn spec(args: &[&str]) -> Value {
    let out = build(&[args, &["-o", "json"]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

#[test]
fn the_controller_s_requests_are_valid_and_reviewed() {
    let doc = spec(&[]);
    let mut problems = Vec::new();
    for entry in doc["requests"].as_array().expect("requests") {
        let operation = entry["operation"].as_str().expect("operation");
        problems.extend(match entry["api"].as_str() {
            Some("ec2 2016-11-15") => check_ec2(operation, &entry["request"]),
            Some("iam 2010-05-08") => check_iam(operation, &entry["request"]),
            other => vec![format!("{operation}: unknown api {other:?}")],
        });
    }
    assert!(problems.is_empty(), "{problems:#?}");
    // The role's policy is the one reviewed, as IAM is sent it.
    let put = doc["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["operation"] == "PutRolePolicy")
        .expect("PutRolePolicy");
    let sent: Value =
        serde_json::from_str(put["request"]["PolicyDocument"].as_str().unwrap()).unwrap();
    assert_eq!(sent, doc["policy"]);
    // SkyPilot's controller resources: 4+ vCPUs, 4 GiB each, on demand,
    // stopped (not terminated) when it shuts itself down.
    assert!(doc["vcpus"].as_f64().unwrap() >= 4.0);
    assert!(doc["memory_gb"].as_f64().unwrap() >= 4.0 * doc["vcpus"].as_f64().unwrap());
    let run = &doc["requests"].as_array().unwrap().last().unwrap()["request"];
    assert_eq!(run["InstanceInitiatedShutdownBehavior"], "stop");
    assert_eq!(run["IamInstanceProfile"]["Name"], "skyc-controller");
    assert!(run.get("InstanceMarketOptions").is_none());
    let yaml = build(&[]);
    assert!(yaml.status.success());
    snapshots("cloud").bind(|| {
        insta::assert_snapshot!("controller.aws", String::from_utf8_lossy(&yaml.stdout));
    });
}

#[test]
fn the_controller_s_boot_script_passes_shellcheck() {
    let doc = spec(&[]);
    let run = &doc["requests"].as_array().unwrap().last().unwrap()["request"];
    let dir = std::env::temp_dir().join(format!("skyc-controller-boot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("boot.sh");
    std::fs::write(&path, run["UserData"].as_str().unwrap()).unwrap();
    let out = std::process::Command::new("shellcheck")
        .arg(&path)
        .output()
        .expect("shellcheck");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every EC2 action the AWS runtime's code calls is one the controller's
/// policy allows: a call added to the runtime without its action in the
/// policy would be refused to the controller by IAM.
#[test]
fn the_policy_allows_every_ec2_action_the_runtime_calls() {
    let doc = spec(&[]);
    let allowed = skyc_targets::cloud::controller::policy_actions(&doc["policy"]);
    let mut called = std::collections::BTreeSet::new();
    let mut files = vec![
        root().join("runtime/src/aws"),
        root().join("runtime/src/cloud"),
    ];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                let entry = entry.unwrap().path();
                // The tests call what the runtime does not (to stop an
                // instance as a user would, for one).
                if entry.file_name().is_some_and(|n| n != "tests") {
                    files.push(entry);
                }
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            for (prefix, end) in [("action(\"", '"'), ("send(ec2, \"", '"')] {
                for (at, _) in text.match_indices(prefix) {
                    let rest = &text[at + prefix.len()..];
                    if let Some(name) = rest.split(end).next() {
                        called.insert(name.to_owned());
                    }
                }
            }
        }
    }
    assert!(called.contains("RunInstances") && called.contains("DescribeInstances"));
    let missing: Vec<_> = called
        .iter()
        .filter(|a| !allowed.contains(&format!("ec2:{a}")))
        .collect();
    assert!(missing.is_empty(), "not in the policy: {missing:?}");
}

#[test]
fn options_reach_the_controller_and_bad_ones_are_refused() {
    let doc = spec(&[
        "--controller-region",
        "us-west-2",
        "--controller-instance-type",
        "m6id.large",
        "--controller-disk",
        "80",
    ]);
    assert_eq!(doc["region"], "us-west-2");
    assert_eq!(doc["instance_type"], "m6id.large");
    let run = &doc["requests"].as_array().unwrap().last().unwrap()["request"];
    assert_eq!(run["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"], 80);
    let out = build(&["--controller-region", "mars-1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no region `mars-1`"), "{err}");
    let out = skyc()
        .args(["build", "--target", "slurm", "--controller"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
