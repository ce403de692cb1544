//! skyc's controller on Kubernetes, as objects to review and apply: the
//! supervisor and its state run in the cluster, so a group goes on (its
//! recovery, its auxiliaries stopped after the primaries, its end) when
//! the machine that submitted it is closed (docs/controller.md).
//!
//! - a ServiceAccount the controller's pod runs as, bound to the Role
//!   `skyc run --target k8s` needs ([`super::rbac::role`]) and to a Role of
//!   its own for its Lease;
//! - a PersistentVolumeClaim for the state directory (the store, logs,
//!   snapshots), which outlives the pod;
//! - a Deployment of `skyc controller serve`. Its replicas elect a leader
//!   with the Lease [`LEASE`] (`coordination.k8s.io`); only the holder
//!   supervises, and its client sends no write once it has not renewed
//!   within the renew deadline, shorter than the time another replica
//!   waits, so a second replica, or an old pod still running on a node
//!   cut off from the cluster, does not act on the groups beside the
//!   leader. One replica (the default) is restarted by the Deployment;
//!   two need a claim every node can mount (`ReadWriteMany`, a storage
//!   class that provides it).
//!
//! Pure: options in, objects out.

use super::rbac;
use serde_json::{Value, json};

/// The name of every object of the controller.
pub const NAME: &str = "skyc-controller";

/// The Lease the controller's replicas elect their leader with.
pub const LEASE: &str = "skyc-controller";

/// The state claim.
pub const CLAIM: &str = "skyc-controller-state";

/// The binding of the `skyc-runner` Role to the controller's account
/// (not `skyc-runner`: that is the users' binding an administrator makes).
pub const RUNNER_BINDING: &str = "skyc-controller-runner";

/// The container of the controller's pods.
pub const CONTAINER: &str = "controller";

/// Where the controller's pod mounts its state.
pub const STATE_DIR: &str = "/var/lib/skyc";

/// The image `deploy/controller/Dockerfile` builds, tagged with this
/// version.
pub const DEFAULT_IMAGE: &str = concat!("skyc:", env!("CARGO_PKG_VERSION"));

/// How the controller is run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Controller {
    /// `None`: kubectl's (the context's) namespace.
    pub namespace: Option<String>,
    pub image: String,
    /// Pods of the Deployment; more than one needs `ReadWriteMany`.
    pub replicas: u32,
    /// CPU and memory, requested and limited (Kubernetes quantities).
    pub cpu: String,
    pub memory: String,
    /// The state claim's size, and its storage class (`None`: the
    /// cluster's default).
    pub storage: String,
    pub storage_class: Option<String>,
}

impl Default for Controller {
    fn default() -> Self {
        Self {
            namespace: None,
            image: DEFAULT_IMAGE.to_owned(),
            replicas: 1,
            // The supervisor of 500 nodes holds about 17 MiB: this is
            // room for thousands of groups and their log copies.
            cpu: "500m".to_owned(),
            memory: "512Mi".to_owned(),
            storage: "10Gi".to_owned(),
            storage_class: None,
        }
    }
}

/// Every object of the controller, in the order `kubectl apply` takes
/// them (what a pod needs before the pod).
pub fn objects(c: &Controller) -> Result<Vec<Value>, String> {
    if c.replicas == 0 {
        return Err("the controller needs at least one replica".into());
    }
    if c.replicas > 1 && c.storage_class.is_none() {
        return Err(format!(
            "{} replicas share one state claim, which must be ReadWriteMany: \
             name a storage class that provides it (`--controller-storage-class`)",
            c.replicas
        ));
    }
    Ok(vec![
        service_account(c),
        rbac::role(c.namespace.as_deref()),
        lease_role(c),
        binding(c, RUNNER_BINDING, rbac::ROLE),
        binding(c, NAME, NAME),
        claim(c),
        deployment(c),
    ])
}

fn metadata(c: &Controller, name: &str) -> Value {
    let mut m = json!({
        "name": name,
        "labels": {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "skyc"},
    });
    if let Some(ns) = &c.namespace {
        m["namespace"] = json!(ns);
    }
    m
}

fn service_account(c: &Controller) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(c, NAME),
    })
}

/// The Lease, and nothing else of `coordination.k8s.io`: made once
/// (`create` cannot name its object), then read and renewed by name.
fn lease_role(c: &Controller) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(c, NAME),
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [LEASE],
                "verbs": ["get", "update"],
            },
        ],
    })
}

/// The binding `name` of `role` to the controller's account: not named
/// after the Role, whose own binding (to the users who run groups) a
/// cluster administrator names so.
fn binding(c: &Controller, name: &str, role: &str) -> Value {
    let mut subject = json!({"kind": "ServiceAccount", "name": NAME});
    if let Some(ns) = &c.namespace {
        subject["namespace"] = json!(ns);
    }
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(c, name),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [subject],
    })
}

fn claim(c: &Controller) -> Value {
    let mode = if c.replicas > 1 {
        "ReadWriteMany"
    } else {
        "ReadWriteOnce"
    };
    let mut spec = json!({
        "accessModes": [mode],
        "resources": {"requests": {"storage": c.storage}},
    });
    if let Some(class) = &c.storage_class {
        spec["storageClassName"] = json!(class);
    }
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(c, CLAIM),
        "spec": spec,
    })
}

fn deployment(c: &Controller) -> Value {
    let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
    let resources = json!({"cpu": c.cpu, "memory": c.memory});
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(c, NAME),
        "spec": {
            "replicas": c.replicas,
            // The old pod goes before the new one starts; the Lease fences
            // one that does not (its node cut off).
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "skyc"}},
                "spec": {
                    "serviceAccountName": NAME,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "fsGroup": 65532,
                        // The claim's files are the pod's group's once, not
                        // walked again at every start.
                        "fsGroupChangePolicy": "OnRootMismatch",
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [{
                        "name": CONTAINER,
                        "image": c.image,
                        "command": ["skyc", "controller", "serve", "--state-dir", STATE_DIR],
                        "env": [
                            // The Lease's holder: the pod, by name.
                            {"name": "SKYC_CONTROLLER_ID", "valueFrom": field("metadata.name")},
                        ],
                        "resources": {"requests": resources, "limits": resources},
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "volumeMounts": [
                            {"name": "state", "mountPath": STATE_DIR},
                            // SQLite's and the runtime's scratch files (the
                            // root filesystem is read-only).
                            {"name": "tmp", "mountPath": "/tmp"},
                        ],
                    }],
                    "volumes": [
                        {"name": "state", "persistentVolumeClaim": {"claimName": CLAIM}},
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_replica_claims_its_state_read_write_once() {
        let all = objects(&Controller::default()).unwrap();
        let kinds: Vec<&str> = all.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "ServiceAccount",
                "Role",
                "Role",
                "RoleBinding",
                "RoleBinding",
                "PersistentVolumeClaim",
                "Deployment"
            ]
        );
        assert_eq!(all[5]["spec"]["accessModes"], json!(["ReadWriteOnce"]));
        assert!(all.iter().all(|o| o["metadata"].get("namespace").is_none()));
        assert_eq!(
            all[6]["spec"]["template"]["spec"]["serviceAccountName"],
            NAME
        );
    }

    #[test]
    fn replicas_share_a_claim_every_node_mounts_or_are_refused() {
        let two = Controller {
            replicas: 2,
            ..Controller::default()
        };
        assert!(objects(&two).unwrap_err().contains("ReadWriteMany"));
        assert!(
            objects(&Controller {
                replicas: 0,
                ..Controller::default()
            })
            .is_err()
        );
        let shared = Controller {
            storage_class: Some("nfs".into()),
            namespace: Some("ml".into()),
            ..two
        };
        let all = objects(&shared).unwrap();
        assert_eq!(all[5]["spec"]["accessModes"], json!(["ReadWriteMany"]));
        assert_eq!(all[5]["spec"]["storageClassName"], "nfs");
        assert_eq!(all[6]["spec"]["replicas"], 2);
        assert!(all.iter().all(|o| o["metadata"]["namespace"] == "ml"));
        assert_eq!(all[3]["subjects"][0]["namespace"], "ml");
        // Not the name an administrator gives the users' binding.
        assert_eq!(all[3]["metadata"]["name"], "skyc-controller-runner");
        assert_eq!(all[3]["roleRef"]["name"], rbac::ROLE);
    }
}
