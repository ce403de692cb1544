//! The cloud targets (`skyc build --target aws|gcp`) without a cloud:
//! snapshots of the spec of SkyPilot's examples on both clouds, the
//! selection rule pinned case by case (`selection`), every emitted request
//! checked against the AWS and GCP API models (`api`), and the boot script
//! and node agent run under bash (`boot`), a task's files placed by
//! the node's own scripts (`files`), and skyc's controller on AWS
//! (`controller`).

mod api;
mod boot;
mod controller;
mod files;
mod selection;

use crate::examples::example_texts;
use crate::support::{render_human, root, skyc, snapshots};
use serde_json::Value;
use skyc_compiler::{Compilation, Options, compile};
use skyc_targets::cloud::{self, Catalog, Cloud};

pub(crate) const CLOUDS: [Cloud; 2] = [Cloud::Aws, Cloud::Gcp];

/// Compiles `text` and builds its spec from the snapshot catalog: the
/// compilation with the target's diagnostics merged, and the spec.
pub(crate) fn build(file: &str, text: &str, cloud: Cloud) -> (Compilation, Option<Value>) {
    let mut c = compile(file, text.as_bytes(), &Options::default());
    let Some(group) = c.group.clone() else {
        return (c, None);
    };
    let built = cloud::build(&group, &Catalog::snapshot(cloud));
    c.diagnostics.extend(built.diagnostics);
    c.diagnostics
        .sort_by_key(|d| (d.primary.span.start, d.primary.span.end, d.rule));
    (c, built.document)
}

/// The spec of `text`, which must build.
pub(crate) fn spec(text: &str, cloud: Cloud) -> Value {
    let (c, doc) = build("g.yaml", text, cloud);
    doc.unwrap_or_else(|| panic!("no spec:\n{}", render_human(&c)))
}

/// The boot script inside a node's launch request.
pub(crate) fn boot_script(node: &Value) -> &str {
    let request = &node["launch"]["request"];
    if let Some(s) = request["UserData"].as_str() {
        return s;
    }
    request["metadata"]["items"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["key"] == "startup-script"))
        .and_then(|i| i["value"].as_str())
        .expect("a boot script")
}

/// SkyPilot's examples are mostly written for Kubernetes (`infra:
/// kubernetes`, or Slurm): moved to `cloud` the way `sky jobs launch
/// --infra` moves them, and whether they were.
pub(crate) fn retarget(text: &str, cloud: Cloud) -> (String, bool) {
    let mut out = text.to_owned();
    for pinned in ["infra: kubernetes", "infra: slurm"] {
        out = out.replace(pinned, &format!("infra: {}", cloud.name()));
    }
    let moved = out != text;
    (out, moved)
}

/// Every accepted example, moved to each cloud, with its spec there
/// (when it builds) and whether it was moved.
pub(crate) fn example_specs() -> Vec<(String, Cloud, Compilation, Option<Value>, bool)> {
    let mut out = Vec::new();
    for (file, text) in example_texts() {
        for cloud in CLOUDS {
            let (text, moved) = retarget(&text, cloud);
            let (c, doc) = build(&file, &text, cloud);
            out.push((file.clone(), cloud, c, doc, moved));
        }
    }
    out
}

/// The spec as reviewed in a snapshot: the first and last node of each
/// task (the others differ only in their rank), and boot scripts without
/// the node agent and launcher, which are the same on every node and
/// snapshotted once (`train-eval.aws.boot`).
fn for_review(doc: &Value) -> Value {
    let mut doc = doc.clone();
    let nodes = doc["nodes"].as_array().cloned().unwrap_or_default();
    let tasks = doc["tasks"].as_array().cloned().unwrap_or_default();
    let kept: Vec<Value> = nodes
        .into_iter()
        .filter(|n| {
            let task = tasks.iter().find(|t| t["name"] == n["task"]).unwrap();
            let last = task["num_nodes"].as_u64().unwrap() - 1;
            let rank = n["rank"].as_u64().unwrap();
            rank == 0 || rank == last
        })
        .map(|mut n| {
            let short = {
                let s = boot_script(&n);
                let cut = s.find("    cat >\"$1/agent.sh\"").unwrap();
                format!(
                    "{}    # ... the node agent and the launcher (train-eval.aws.boot)\n",
                    &s[..cut]
                )
            };
            let request = &mut n["launch"]["request"];
            if request.get("UserData").is_some() {
                request["UserData"] = Value::String(short);
            } else {
                for item in request["metadata"]["items"].as_array_mut().unwrap() {
                    if item["key"] == "startup-script" {
                        item["value"] = Value::String(short.clone());
                    }
                }
            }
            n
        })
        .collect();
    doc["nodes"] = Value::Array(kept);
    doc
}

#[test]
fn spec_of_every_accepted_example_on_both_clouds() {
    let settings = snapshots("cloud");
    settings.bind(|| {
        let specs = example_specs();
        assert!(specs.len() > 40);
        let mut built = 0;
        for (file, cloud, c, doc, moved) in &specs {
            let mut snap = String::new();
            if *moved {
                snap.push_str(&format!(
                    "# moved to {}: `infra: kubernetes` and `infra: slurm` replaced by `infra: {}`\n",
                    cloud.display(),
                    cloud.name()
                ));
            }
            snap.push_str(&render_human(c));
            if let Some(doc) = doc {
                built += 1;
                check_nodes(doc);
                snap.push_str(&skyc_targets::k8s::yaml::document(&for_review(doc)));
            }
            let name = format!("{}.{}", file.trim_end_matches(".yaml"), cloud.name());
            insta::assert_snapshot!(name, snap);
        }
        // Most examples pin no cloud; those pinned to Kubernetes do not build.
        assert!(built > 20, "only {built} specs built");
        let text = std::fs::read_to_string(root().join("examples/train-eval.yaml")).unwrap();
        let doc = spec(&text, Cloud::Aws);
        insta::assert_snapshot!("train-eval.aws.boot", boot_script(&doc["nodes"][0]));
    });
}

/// The pipelines of `tests/fixtures/pipelines/` on both clouds: each step
/// its own instances, the spec saying they run one after another.
#[test]
fn pipelines_build_on_both_clouds() {
    let settings = snapshots("cloud");
    settings.bind(|| {
        let dir = root().join("tests/fixtures/pipelines");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        files.sort();
        assert!(files.len() >= 3);
        for path in files {
            let file = path.file_name().unwrap().to_str().unwrap().to_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            for cloud in CLOUDS {
                let (c, doc) = build(&file, &text, cloud);
                let mut snap = render_human(&c);
                if let Some(doc) = &doc {
                    assert_eq!(doc["execution"], "serial", "{file}");
                    check_nodes(doc);
                    snap.push_str(&skyc_targets::k8s::yaml::document(&for_review(doc)));
                }
                let name = format!(
                    "pipeline__{}.{}",
                    file.trim_end_matches(".yaml"),
                    cloud.name()
                );
                insta::assert_snapshot!(name, snap);
            }
        }
    });
}

/// One node per rank of every task, in task and rank order, whose
/// requests differ only where the rank shows.
fn check_nodes(doc: &Value) {
    let nodes = doc["nodes"].as_array().unwrap();
    let mut i = 0;
    for task in doc["tasks"].as_array().unwrap() {
        let name = task["name"].as_str().unwrap();
        let n = task["num_nodes"].as_u64().unwrap();
        let first = &nodes[i];
        for rank in 0..n {
            let node = &nodes[i];
            assert_eq!(node["task"], name);
            assert_eq!(node["rank"], rank);
            assert_eq!(
                node["hostname"],
                format!("{name}-{rank}.{}", doc["group"].as_str().unwrap())
            );
            let mine = serde_json::to_string(&node["launch"]).unwrap();
            let group = doc["group"].as_str().unwrap();
            let theirs = serde_json::to_string(&first["launch"])
                .unwrap()
                .replace(
                    &format!("node {name}-0.{group} (task {name}, rank 0 of"),
                    &format!("node {name}-{rank}.{group} (task {name}, rank {rank} of"),
                )
                .replace(
                    &format!("\"{group}-{name}-0\""),
                    &format!("\"{group}-{name}-{rank}\""),
                )
                .replace("skyc_rank=0\\n", &format!("skyc_rank={rank}\\n"))
                .replace(
                    "\"Key\":\"skyc-rank\",\"Value\":\"0\"",
                    &format!("\"Key\":\"skyc-rank\",\"Value\":\"{rank}\""),
                )
                .replace("\"skyc-rank\":\"0\"", &format!("\"skyc-rank\":\"{rank}\""));
            assert_eq!(mine, theirs, "{name}-{rank} differs beyond its rank");
            i += 1;
        }
    }
    assert_eq!(i, nodes.len());
}

#[test]
fn the_same_input_gives_the_same_bytes() {
    let file = root().join("examples/train-eval.yaml");
    for target in ["aws", "gcp"] {
        for output in ["yaml", "json"] {
            let run = || {
                let out = skyc()
                    .args(["build", "--target", target, "-o", output])
                    .arg(&file)
                    .env_remove("SKYC_CATALOG")
                    .env("HOME", "/nonexistent")
                    .output()
                    .unwrap();
                assert_eq!(
                    out.status.code(),
                    Some(0),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                out.stdout
            };
            let first = run();
            assert!(!first.is_empty());
            assert_eq!(first, run(), "{target} -o {output}");
        }
    }
}

fn tmp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("cloud")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_catalog_comes_from_the_flag_the_environment_skypilot_or_the_snapshot() {
    let file = root().join("examples/train-eval.yaml");
    let dir = tmp_dir("catalogs");
    let source = |args: &[&str], env: &[(&str, &std::path::Path)]| {
        let mut cmd = skyc();
        cmd.args(["build", "--target", "aws", "-o", "json"])
            .args(args)
            .arg(&file)
            .env_remove("SKYC_CATALOG")
            .env("HOME", dir.join("home"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["catalog"].clone()
    };
    // Nothing given, no SkyPilot: the snapshot, with its date.
    let snap = source(&[], &[]);
    assert!(snap["source"].as_str().unwrap().contains("snapshot"));
    assert_eq!(snap["date"], cloud::SNAPSHOT_DATE);
    // SkyPilot's own copy.
    let sky = dir.join("home/.sky/catalogs/v8/aws");
    std::fs::create_dir_all(&sky).unwrap();
    std::fs::copy(
        root().join("targets/catalog/v8/aws/vms.csv"),
        sky.join("vms.csv"),
    )
    .unwrap();
    let got = source(&[], &[]);
    assert!(
        got["source"]
            .as_str()
            .unwrap()
            .ends_with(".sky/catalogs/v8/aws/vms.csv")
    );
    assert!(got["date"].as_str().unwrap().starts_with("20"));
    // $SKYC_CATALOG over it, --catalog over both.
    let env_dir = root().join("targets/catalog/v8");
    let got = source(&[], &[("SKYC_CATALOG", &env_dir)]);
    assert!(
        got["source"]
            .as_str()
            .unwrap()
            .contains("targets/catalog/v8/aws/vms.csv")
    );
    let flag_dir = dir.join("flag");
    std::fs::create_dir_all(flag_dir.join("aws")).unwrap();
    std::fs::copy(
        root().join("targets/catalog/v8/aws/vms.csv"),
        flag_dir.join("aws/vms.csv"),
    )
    .unwrap();
    let got = source(
        &["--catalog", flag_dir.to_str().unwrap()],
        &[("SKYC_CATALOG", &env_dir)],
    );
    assert!(got["source"].as_str().unwrap().contains("flag/aws/vms.csv"));
}

#[test]
fn unreadable_catalogs_are_usage_errors() {
    let file = root().join("examples/train-eval.yaml");
    let dir = tmp_dir("bad-catalogs");
    std::fs::create_dir_all(dir.join("aws")).unwrap();
    let run = |catalog: &std::path::Path| {
        let out = skyc()
            .args(["build", "--target", "aws", "--catalog"])
            .arg(catalog)
            .arg(&file)
            .output()
            .unwrap();
        assert!(out.stdout.is_empty());
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&dir.join("nowhere"));
    assert_eq!(code, Some(2));
    assert!(err.contains("no aws/vms.csv there"), "{err}");
    std::fs::write(
        dir.join("aws/vms.csv"),
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,AvailabilityZone\n\
         m6i.large,,,2,8,0.1,,us-east-1,use1-az1\n\
         m6i.xlarge,,,4,16,\"unclosed\n",
    )
    .unwrap();
    let (code, err) = run(&dir);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("vms.csv: line 3: a quoted field is not closed"),
        "{err}"
    );
    std::fs::write(dir.join("aws/vms.csv"), "Region,Price\nus-east-1,1\n").unwrap();
    let (code, err) = run(&dir);
    assert_eq!(code, Some(2));
    assert!(err.contains("no `InstanceType` column"), "{err}");
}

#[test]
fn out_dir_holds_the_groups_spec() {
    let file = root().join("examples/train-eval.yaml");
    let dir = tmp_dir("out");
    for (target, output) in [("aws", "yaml"), ("gcp", "json")] {
        let out = skyc()
            .args(["build", "--target", target, "-o", output, "--out"])
            .arg(&dir)
            .arg(&file)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert!(out.stdout.is_empty());
        let text =
            std::fs::read_to_string(dir.join(format!("train-eval.{target}.{output}"))).unwrap();
        assert!(text.contains("CloudInstances"));
    }
}

#[test]
fn an_infeasible_task_is_a_located_error_with_skypilots_did_you_mean() {
    let dir = tmp_dir("infeasible");
    let file = dir.join("g.yaml");
    std::fs::write(
        &file,
        "name: g\nexecution: parallel\n---\nname: ok\nrun: echo\n---\nname: big\nresources:\n  accelerators: H100:3\nrun: echo\n",
    )
    .unwrap();
    let out = skyc()
        .args(["build", "--target", "aws", "--color", "never"])
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(out.stdout.is_empty());
    assert!(err.contains("error[cloud-no-instance]"), "{err}");
    assert!(err.contains("g.yaml:7:7"), "located at the task: {err}");
    assert!(err.contains("the AWS catalog has no H100:3"), "{err}");
    assert!(err.contains("help: did you mean: H100:8"), "{err}");
}

#[test]
fn names_and_labels_the_cloud_cannot_use_are_located_errors() {
    // Upper case and `_` are fine on AWS, not in GCP names.
    let text = "name: Demo_1\nexecution: parallel\n---\nname: t\nrun: echo\n";
    assert!(build("n.yaml", text, Cloud::Aws).1.is_some());
    let (c, doc) = build("n.yaml", text, Cloud::Gcp);
    assert!(doc.is_none());
    let out = render_human(&c);
    assert!(out.contains("error[cloud-invalid-name]"), "{out}");
    assert!(out.contains("n.yaml:1:7"), "{out}");
    let text = "name: demo\nexecution: parallel\n---\nname: t\nresources:\n  labels: {Team: ML, skyc-task: x}\nrun: echo\n";
    let (c, doc) = build("l.yaml", text, Cloud::Gcp);
    assert!(doc.is_none());
    let out = render_human(&c);
    assert!(
        out.contains("the label key `Team` is not a GCP label key"),
        "{out}"
    );
    assert!(
        out.contains("the label key `skyc-task` is reserved"),
        "{out}"
    );
    let (c, doc) = build("l.yaml", text, Cloud::Aws);
    assert!(doc.is_none(), "skyc-* is reserved on AWS too");
    assert_eq!(c.diagnostics.iter().filter(|d| d.is_error()).count(), 1);
}

#[test]
fn settings_a_cloud_does_not_apply_are_reported_at_the_task() {
    let text = "name: demo\nexecution: parallel\n---\nname: t\nworkdir: .\n\
                file_mounts:\n  /data: s3://bucket\nresources:\n  image_id: docker:ubuntu:22.04\nconfig:\n  aws:\n    use_internal_ips: true\nrun: echo\n";
    for cloud in CLOUDS {
        let (c, doc) = build("w.yaml", text, cloud);
        assert!(doc.is_some());
        let out = render_human(&c);
        for expected in [
            "`file_mounts` are not applied",
            "the local `workdir` `.` is not uploaded",
            "`image_id: docker:ubuntu:22.04` is not applied",
            "the per-task `config` overrides are not applied",
        ] {
            assert!(
                out.contains(expected),
                "{expected} ({}):\n{out}",
                cloud.name()
            );
        }
        assert!(c.diagnostics.iter().all(|d| !d.is_error()));
        assert!(out.contains("w.yaml:4:7"), "at the task: {out}");
    }
    // GCP reads one config key: compact placement.
    let text = "name: demo\nexecution: parallel\n---\nname: t\nnum_nodes: 2\nconfig:\n  gcp:\n    placement_policy: compact\nrun: echo\n";
    let (c, doc) = build("p.yaml", text, Cloud::Gcp);
    assert!(c.diagnostics.is_empty(), "{}", render_human(&c));
    assert_eq!(doc.unwrap()["tasks"][0]["placement"], "skyc-demo-t");
}
