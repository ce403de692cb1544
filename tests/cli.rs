//! The `skyc` command line: exit codes, output formats, stdin, `--env`,
//! `schema` and `build --target ir`.

use crate::support::{root, skyc, snapshots};
use std::io::Write;
use std::process::{Output, Stdio};

fn fixture(name: &str) -> String {
    root()
        .join("tests/fixtures/cli")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn run(args: &[&str]) -> Output {
    skyc()
        .args(args)
        .current_dir(root().join("tests/fixtures/cli"))
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn transcript(o: &Output) -> String {
    format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn check_in_every_format() {
    let settings = snapshots("cli");
    settings.bind(|| {
        for format in ["human", "json", "sarif", "github"] {
            let o = run(&["check", "--format", format, "broken.yaml"]);
            assert_eq!(o.status.code(), Some(1), "{format}");
            let mut text = transcript(&o);
            // The SARIF driver names skyc's version; keep the snapshot stable.
            text = text.replace(env!("CARGO_PKG_VERSION"), "[version]");
            insta::assert_snapshot!(format!("check_{format}"), text);
        }
    });
}

#[test]
fn machine_formats_parse() {
    let json: serde_json::Value =
        serde_json::from_slice(&run(&["check", "--format", "json", "broken.yaml"]).stdout).unwrap();
    assert!(json.as_array().is_some_and(|a| !a.is_empty()));
    let sarif: serde_json::Value =
        serde_json::from_slice(&run(&["check", "--format", "sarif", "broken.yaml"]).stdout)
            .unwrap();
    assert_eq!(sarif["version"], "2.1.0");
    assert!(!sarif["runs"][0]["results"].as_array().unwrap().is_empty());
}

#[test]
fn exit_codes() {
    // A null env var is an error unless --env gives it a value.
    assert_eq!(run(&["check", "valid.yaml"]).status.code(), Some(1));
    let ok = run(&["check", "--env", "HF_TOKEN=hf_x", "valid.yaml"]);
    assert_eq!(ok.status.code(), Some(0), "{}", transcript(&ok));
    assert!(ok.stderr.is_empty(), "a clean file prints nothing");
    assert_eq!(run(&["check", "broken.yaml"]).status.code(), Some(1));
    assert_eq!(run(&["check", "no-such-file.yaml"]).status.code(), Some(2));
    assert_eq!(run(&["check", "."]).status.code(), Some(2));
    assert_eq!(
        run(&["check", "--format", "xml", "valid.yaml"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        run(&["check", "--env", "1BAD=x", "valid.yaml"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(run(&["check"]).status.code(), Some(2));
    // An unreadable file among several: still exit 2, the others checked.
    let mixed = run(&["check", "--env", "HF_TOKEN=x", "valid.yaml", "missing.yaml"]);
    assert_eq!(mixed.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&mixed.stderr).contains("missing.yaml"));
}

#[test]
fn reads_standard_input() {
    let mut child = skyc()
        .args(["check", "--env", "HF_TOKEN=x", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let text = std::fs::read(fixture("valid.yaml")).unwrap();
    child.stdin.take().unwrap().write_all(&text).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", transcript(&o));
}

#[test]
fn build_ir_applies_env_overrides() {
    let o = run(&[
        "build",
        "--target",
        "ir",
        "--env",
        "HF_TOKEN=hf_x",
        "valid.yaml",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", transcript(&o));
    let ir: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ir["name"], "train-eval");
    assert_eq!(ir["tasks"][0]["envs"][0]["value"], "hf_x");
    assert_eq!(ir["tasks"][1]["role"], "auxiliary");
    assert_eq!(ir["tasks"][1]["termination_delay_secs"], 30);
    let bad = run(&["build", "--target", "ir", "broken.yaml"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(bad.stdout.is_empty(), "no IR for an invalid group");
}

#[test]
fn schema_validates_documents_for_editors() {
    let o = run(&["schema"]);
    assert_eq!(o.status.code(), Some(0));
    let schema: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the printed schema compiles");
    let header = serde_json::json!({"name": "g", "execution": "parallel", "primary_tasks": ["a"]});
    let task =
        serde_json::json!({"name": "a", "num_nodes": 2, "resources": {"accelerators": "H100:8"}});
    assert!(validator.is_valid(&header));
    assert!(validator.is_valid(&task));
    assert!(!validator.is_valid(&serde_json::json!({"name": "a", "runn": "x"})));
    assert!(!validator.is_valid(&serde_json::json!({"name": "g", "execution": "serial"})));
}

/// A pool file: its IR says it is a pool; targets that cannot take one
/// refuse it at `pool`; `skyc run` refuses it (pools are applied).
#[test]
fn pool_file_is_a_pool_in_the_ir_built_by_targets_and_refused_by_run() {
    let settings = snapshots("cli");
    settings.bind(|| {
        let ir = run(&["build", "--target", "ir", "pool.yaml"]);
        assert_eq!(ir.status.code(), Some(0), "{}", transcript(&ir));
        let json: serde_json::Value = serde_json::from_slice(&ir.stdout).unwrap();
        insta::assert_json_snapshot!("build_ir_pool", json["pool"]);
        assert_eq!(json["tasks"][0]["setup"], "pip install -r requirements.txt");
        // The clouds build one worker's spec, which `pool apply` launches
        // once per worker: it holds after setup (`skyc_hold` in each
        // node's settings) and carries no `run`.
        for target in ["aws", "gcp"] {
            let o = run(&["build", "--target", target, "-o", "json", "pool.yaml"]);
            assert_eq!(o.status.code(), Some(0), "{target}: {}", transcript(&o));
            let spec: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            let shown = serde_json::json!({"pool": spec["pool"], "tasks": spec["tasks"]});
            insta::assert_json_snapshot!(format!("build_pool_{target}"), shown);
            let all = String::from_utf8_lossy(&o.stdout);
            // The setting's line, as the JSON string escapes it.
            assert!(
                all.contains(r"\nskyc_hold=1\n"),
                "{target}: every node holds"
            );
            assert!(
                !all.contains("infer.py"),
                "{target}: the pool's run is left out"
            );
        }
        // Slurm builds a pool's worker (tests/slurm_pools.rs); Kubernetes
        // what `skyc pool apply` would start.
        let pods = run(&["build", "--target", "k8s", "pool.yaml"]);
        assert_eq!(pods.status.code(), Some(0), "{}", transcript(&pods));
        assert!(String::from_utf8_lossy(&pods.stdout).contains("name: gpu-pool-1-gpu-pool-0-0"));
        let state = std::env::temp_dir().join(format!("skyc-cli-pool-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&state);
        let state_flag = state.to_string_lossy().into_owned();
        let o = run(&["run", "--state-dir", &state_flag, "pool.yaml"]);
        assert_eq!(o.status.code(), Some(1), "{}", transcript(&o));
        assert!(!state.exists(), "nothing submitted");
        insta::assert_snapshot!("run_pool_refused", transcript(&o));
    });
}
