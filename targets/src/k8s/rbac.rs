//! What `skyc run --target k8s` may do in the group's namespace, as one
//! list: the runtime checks it before creating anything, and
//! `skyc build --target k8s --rbac` prints it as a Role to bind.

use serde_json::{Value, json};

/// Verbs on one resource of one API group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permission {
    /// The API group (`""` for the core group).
    pub group: &'static str,
    /// The resource, or `resource/subresource`.
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
    /// Needed only by groups with `secrets`.
    pub secrets_only: bool,
    /// Needed only where the runtime runs commands in pods: pools (their
    /// workers and jobs) and groups with files (their files pod).
    pub exec_only: bool,
    /// Used when granted, not needed: without it the runtime says less.
    pub optional: bool,
}

impl Permission {
    /// `jobsets.jobset.x-k8s.io`, `pods/log`: as kubectl names them.
    pub fn display_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_owned()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

/// Everything the runtime does, and why:
/// - JobSets: server-side apply creates and updates the group's; it is
///   read and watched for its status; cancel deletes it;
/// - Jobs (JobSet's children, the delay gate): watched; the gate opened
///   (or failed) at the group's end;
/// - pods: one created per node attempt; watched; deleted to stop an
///   attempt (SIGTERM, then the grace) and at the end of the grace;
///   `pods/log` streamed into the state directory; `pods/exec` starts a
///   pool's job in a worker's pod and reads its state and log, and fills
///   a group's files pod with its files;
/// - ConfigMaps: the group's scripts, applied; Secrets: the values of
///   `secrets` given at run time, applied; both owned by the JobSet (an
///   `ownerReference`, which an API server that enforces owner-reference
///   permissions lets only a user who may delete the object set), and an
///   earlier run's left to the garbage collector deleted before this
///   run's is applied;
/// - Kueue's Workloads (optional): read while the JobSet is suspended,
///   for why Kueue has not admitted it yet (a namespace whose Kueue
///   queues every JobSet); without them the group waits all the same,
///   saying only that the JobSet is suspended.
pub const PERMISSIONS: &[Permission] = &[
    Permission {
        group: "jobset.x-k8s.io",
        resource: "jobsets",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        secrets_only: false,
        exec_only: false,
        optional: false,
    },
    Permission {
        group: "batch",
        resource: "jobs",
        verbs: &["get", "list", "watch", "patch"],
        secrets_only: false,
        exec_only: false,
        optional: false,
    },
    Permission {
        group: "",
        resource: "pods",
        verbs: &["get", "list", "watch", "create", "delete"],
        secrets_only: false,
        exec_only: false,
        optional: false,
    },
    Permission {
        group: "",
        resource: "pods/log",
        verbs: &["get"],
        secrets_only: false,
        exec_only: false,
        optional: false,
    },
    Permission {
        group: "",
        resource: "pods/exec",
        // An exec is a WebSocket upgrade of a GET: authorized as `get`,
        // and as `create` too by newer API servers.
        verbs: &["get", "create"],
        secrets_only: false,
        exec_only: true,
        optional: false,
    },
    Permission {
        group: "",
        resource: "configmaps",
        verbs: &["get", "create", "patch", "delete"],
        secrets_only: false,
        exec_only: false,
        optional: false,
    },
    Permission {
        group: "",
        resource: "secrets",
        verbs: &["get", "create", "patch", "delete"],
        secrets_only: true,
        exec_only: false,
        optional: false,
    },
    Permission {
        group: "kueue.x-k8s.io",
        resource: "workloads",
        verbs: &["get", "list", "watch"],
        secrets_only: false,
        exec_only: false,
        optional: true,
    },
];

/// The permissions a group needs (`execs`: the runtime runs commands in
/// its pods); the optional ones are not among them.
pub fn needed(secrets: bool, execs: bool) -> impl Iterator<Item = &'static Permission> {
    PERMISSIONS
        .iter()
        .filter(move |p| !p.optional && (secrets || !p.secrets_only) && (execs || !p.exec_only))
}

/// The Role granting [`PERMISSIONS`] in `namespace` (kubectl's when
/// `None`), named `skyc-runner`. Bind it to the user or service account
/// that runs `skyc run --target k8s`:
/// `kubectl create rolebinding skyc-runner --role=skyc-runner --user=NAME`.
pub fn role(namespace: Option<&str>) -> Value {
    let mut metadata = serde_json::Map::new();
    metadata.insert("name".into(), json!(ROLE));
    if let Some(ns) = namespace {
        metadata.insert("namespace".into(), json!(ns));
    }
    let rules: Vec<Value> = PERMISSIONS
        .iter()
        .map(|p| {
            json!({
                "apiGroups": [p.group],
                "resources": [p.resource],
                "verbs": p.verbs,
            })
        })
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata,
        "rules": rules,
    })
}

/// The Role's name.
pub const ROLE: &str = "skyc-runner";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_lists_every_permission_once() {
        let team = role(Some("team-a"));
        assert_eq!(team["metadata"]["namespace"], "team-a");
        let rules = team["rules"].as_array().unwrap();
        assert_eq!(rules.len(), PERMISSIONS.len());
        assert_eq!(rules[0]["apiGroups"][0], "jobset.x-k8s.io");
        assert_eq!(rules[0]["resources"][0], "jobsets");
        assert!(
            rules[0]["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v == "delete")
        );
        assert!(role(None)["metadata"].get("namespace").is_none());
    }

    #[test]
    fn secrets_are_needed_only_with_secrets() {
        assert!(!needed(false, false).any(|p| p.resource == "secrets"));
        assert!(needed(true, false).any(|p| p.resource == "secrets"));
        assert_eq!(PERMISSIONS[0].display_resource(), "jobsets.jobset.x-k8s.io");
        assert_eq!(PERMISSIONS[3].display_resource(), "pods/log");
    }

    #[test]
    fn exec_is_needed_only_where_the_runtime_runs_commands() {
        assert!(!needed(false, false).any(|p| p.resource == "pods/exec"));
        let exec = needed(false, true).find(|p| p.resource == "pods/exec");
        // kube's exec is a WebSocket GET: authorized as `get`, and as
        // `create` by newer API servers.
        assert_eq!(exec.map(|p| p.verbs), Some(&["get", "create"][..]));
        let rules = role(None)["rules"].as_array().unwrap().clone();
        let rule = rules.iter().find(|r| r["resources"][0] == "pods/exec");
        assert_eq!(rule.unwrap()["verbs"], json!(["get", "create"]));
    }

    #[test]
    fn kueue_workloads_are_in_the_role_but_not_needed() {
        let workloads = |p: &&Permission| p.display_resource() == "workloads.kueue.x-k8s.io";
        assert!(!needed(true, true).any(|p| workloads(&p)));
        assert_eq!(
            PERMISSIONS.iter().find(workloads).map(|p| p.verbs),
            Some(&["get", "list", "watch"][..])
        );
        let rules = role(None)["rules"].as_array().unwrap().clone();
        assert!(rules.iter().any(|r| r["apiGroups"][0] == "kueue.x-k8s.io"
            && r["resources"][0] == "workloads"
            && r["verbs"] == json!(["get", "list", "watch"])));
    }
}
