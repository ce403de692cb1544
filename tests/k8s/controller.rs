//! skyc's controller on Kubernetes as `skyc build --target k8s
//! --controller` prints it: valid against Kubernetes' strict schemas, and
//! in a snapshot to review.

use super::schema;
use crate::support::{skyc, snapshots};
use serde_json::{Value, json};

fn build(args: &[&str]) -> std::process::Output {
    skyc()
        .args(["build", "--target", "k8s", "--controller"])
        .args(args)
        .output()
        .expect("skyc build")
}

#[test]
fn the_controller_s_objects_are_valid_and_reviewed() {
    let out = build(&["--namespace", "ml", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let objects = list["items"].as_array().expect("items").clone();
    let problems = schema::validate(&objects);
    assert!(problems.is_empty(), "{problems:#?}");
    // The strict schemas catch what the API server would refuse.
    let mut typo = objects[6].clone();
    typo["spec"]["template"]["spec"]["serviceAcountName"] = json!("x");
    assert!(!schema::validate(&[typo]).is_empty(), "an unknown field");
    // The pod runs as the account the runner Role and the Lease's are
    // bound to, in the namespace.
    let pod = &objects[6]["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "skyc-controller");
    for binding in objects.iter().filter(|o| o["kind"] == "RoleBinding") {
        assert_eq!(binding["subjects"][0]["name"], "skyc-controller");
        assert_eq!(binding["subjects"][0]["namespace"], "ml");
    }
    let yaml = build(&["--namespace", "ml"]);
    assert!(yaml.status.success());
    snapshots("k8s").bind(|| {
        insta::assert_snapshot!("controller", String::from_utf8_lossy(&yaml.stdout));
    });
}

#[test]
fn controller_options_that_cannot_work_are_refused() {
    let out = build(&["--controller-replicas", "2"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ReadWriteMany"), "{err}");
    let out = skyc()
        .args(["build", "--target", "slurm", "--controller"])
        .output()
        .expect("skyc build");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--controller is for the k8s and aws targets"),
        "{err}"
    );
    // A file and --controller are one or the other.
    let out = skyc()
        .args([
            "build",
            "examples/train-eval.yaml",
            "--target",
            "k8s",
            "--controller",
        ])
        .output()
        .expect("skyc build");
    assert_eq!(out.status.code(), Some(2));
    // Two replicas on a shared claim.
    let out = build(&[
        "--controller-replicas",
        "2",
        "--controller-storage-class",
        "nfs",
        "-o",
        "json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(schema::validate(list["items"].as_array().unwrap()).is_empty());
    assert_eq!(
        list["items"][5]["spec"]["accessModes"],
        json!(["ReadWriteMany"])
    );
}

#[test]
fn status_names_an_api_server_that_does_not_answer() {
    // Bound and dropped: nothing listens there any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let dir = std::env::temp_dir().join(format!("skyc-controller-status-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: \
             https://127.0.0.1:{port}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u, \
             namespace: team}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .unwrap();
    let out = skyc()
        .args(["controller", "status"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("skyc controller status");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(err.contains("the controller's Deployment in team"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
