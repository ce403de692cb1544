//! The pod template of a task's node, or of every node of a pipeline step:
//! hostname and subdomain, the container (image, entrypoint, SkyPilot's
//! environment contract, resources, ports, volumes) and node selection.

use super::names::{self, COMPLETION_INDEX, CONTAINER, SCRIPTS_DIR};
use super::resources::Shape;
use super::{Lowerer, Parts, secret_name};
use serde_json::{Map, Value, json};
use skyc_compiler::ir::{Execution, Role, Task};

/// The pods one Job template stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pods {
    /// Node `i` of a Job Group's task: a 1-pod NonIndexed Job whose pod
    /// has the group hostname `{task}-{i}` and rank `i`.
    Node(u32),
    /// Every node of a pipeline step: one Indexed Job. The rank is the
    /// pod's completion index, the hostname the Job controller's
    /// `{job}-{index}` (steps have no group hostnames).
    Step,
}

/// Environment variables skyc sets; a task's `envs` cannot replace them.
const CONTRACT: &[&str] = &[
    "SKYPILOT_JOBGROUP_NAME",
    "SKYPILOT_NODE_RANK",
    "SKYPILOT_NUM_NODES",
    "SKYPILOT_NUM_GPUS_PER_NODE",
    "SKYPILOT_JOB_RANK",
    "SKYPILOT_CLUSTER_INFO",
    "SKYPILOT_TASK_ID",
    "SKYPILOT_TASK_IDS",
    "SKYPILOT_NODE_IPS",
    "SKYC_TASK",
    "SKYC_JOBSET_UID",
];

fn role(task: &Task) -> &'static str {
    match task.role {
        Role::Primary => "primary",
        Role::Auxiliary => "auxiliary",
    }
}

/// The labels of a Job and its pods: group, task, node index, role. A
/// step's pods share one template; their index is the Job controller's
/// `batch.kubernetes.io/job-completion-index` label.
pub(super) fn node_labels(group: &str, task: &Task, pods: Pods) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("skyc.io/group".into(), json!(group));
    m.insert("skyc.io/task".into(), json!(task.name));
    if let Pods::Node(i) = pods {
        m.insert("skyc.io/node-index".into(), json!(i.to_string()));
    }
    m.insert("skyc.io/role".into(), json!(role(task)));
    m
}

/// Kubernetes expands `$(VAR)` in env values; `$$` is its escape, so every
/// `$` is doubled to keep values exactly as written.
pub(super) fn literal_env_value(v: &str) -> String {
    v.replace('$', "$$")
}

impl Lowerer<'_> {
    /// Whether skyc sets the variable `name` in this group's pods.
    fn sets(&self, name: &str) -> bool {
        CONTRACT.contains(&name)
            && (name != "SKYPILOT_JOBGROUP_NAME" || self.group.execution == Execution::Parallel)
    }

    /// Task-wide parts of the container, checked once per task: the env
    /// after the contract, and volumes. Warnings for what cannot be
    /// carried are reported here.
    pub(super) fn task_parts(&mut self, task: &Task) -> Parts {
        let mut env = Vec::new();
        for e in &task.envs {
            if self.sets(&e.name) {
                self.warn(
                    task,
                    format!(
                        "`{}`: `envs.{}` is set by skyc (SkyPilot's environment contract); the task's value is not used",
                        task.name, e.name
                    ),
                );
                continue;
            }
            // A secret of the same name wins, as in SkyPilot; the API
            // server refuses a name listed twice.
            if task.secrets.contains(&e.name) {
                continue;
            }
            env.push(json!({"name": e.name, "value": literal_env_value(&e.value)}));
        }
        let secret = secret_name(self.group, self.options);
        for s in &task.secrets {
            if !names::is_secret_key(s) {
                self.error(
                    skyc_compiler::Rule::K8sInvalidName,
                    task,
                    format!("`{}`: the secret `{s}` cannot be a Secret key", task.name),
                    "invalid Secret key",
                    None,
                );
                continue;
            }
            env.push(json!({
                "name": s,
                "valueFrom": {"secretKeyRef": {"name": secret, "key": s}},
            }));
        }
        let (mut mounts, mut volumes) = self.volumes(task);
        let index = self
            .group
            .tasks
            .iter()
            .position(|t| std::ptr::eq(t, task))
            .unwrap_or_default();
        let files = self.task_files(index);
        mounts.extend(files.mounts);
        volumes.extend(files.volumes);
        let buckets = self.bucket_parts(task, index);
        mounts.extend(buckets.mounts);
        volumes.extend(buckets.volumes);
        let delivers = self.delivers();
        let workdir = match &task.workdir {
            Some(skyc_compiler::ir::Workdir::Local { .. }) if delivers => None,
            Some(skyc_compiler::ir::Workdir::Local { path, .. }) => {
                Some(format!("`workdir: {path}`"))
            }
            Some(skyc_compiler::ir::Workdir::Git { url, .. }) => {
                Some(format!("the git workdir `{url}`"))
            }
            None => None,
        };
        if let Some(what) = workdir {
            self.warn(
                task,
                format!(
                    "`{}`: {what} is not in the manifests; the pod starts without it (bake it into the image or use a volume)",
                    task.name
                ),
            );
        }
        let taken: Vec<crate::files::Mount> = self
            .files()
            .map(|f| f.of(index).to_vec())
            .unwrap_or_default();
        for m in &task.file_mounts {
            // A mounted bucket is the sidecar's, or an error already.
            if crate::files::carries(&taken, m) || crate::storage::to_mount(m).is_some() {
                continue;
            }
            let from = m
                .source
                .clone()
                .or_else(|| {
                    m.storage
                        .as_ref()
                        .and_then(|s| s.get("name")?.as_str().map(str::to_owned))
                })
                .unwrap_or_else(|| "a storage spec".to_owned());
            self.warn(
                task,
                format!(
                    "`{}`: the file mount `{}` (from `{from}`) is not in the manifests; the pod starts without it",
                    task.name, m.destination
                ),
            );
        }
        if task.config.as_ref().is_some_and(|c| !c.is_null()) {
            self.warn(
                task,
                format!(
                    "`{}`: the per-task `config` overrides are not applied by the Kubernetes target",
                    task.name
                ),
            );
        }
        Parts {
            env,
            mounts,
            volumes,
            init: files.init,
            sidecars: buckets.sidecars,
            uploads: buckets.cached,
        }
    }

    /// Volumes: a name is an existing PersistentVolumeClaim; an inline spec
    /// with a `size` is a generic ephemeral volume, created and deleted
    /// with the pod (SkyPilot's ephemeral volumes).
    fn volumes(&mut self, task: &Task) -> (Vec<Value>, Vec<Value>) {
        let mut mounts =
            vec![json!({"name": "skyc-scripts", "mountPath": SCRIPTS_DIR, "readOnly": true})];
        let mut volumes = vec![json!({
            "name": "skyc-scripts",
            "configMap": {"name": names::config_map(&self.group.name), "defaultMode": 0o555},
        })];
        for (k, v) in task.volumes.iter().enumerate() {
            let name = format!("volume-{k}");
            let source = match &v.volume {
                Value::String(claim) if names::is_dns1123_subdomain(claim) => {
                    json!({"persistentVolumeClaim": {"claimName": claim}})
                }
                Value::String(claim) => {
                    self.error(
                        skyc_compiler::Rule::K8sInvalidName,
                        task,
                        format!(
                            "`{}`: the volume `{claim}` cannot name a PersistentVolumeClaim",
                            task.name
                        ),
                        "not a DNS-1123 subdomain",
                        None,
                    );
                    continue;
                }
                Value::Object(spec) => match self.ephemeral(task, &v.path, spec) {
                    Some(s) => s,
                    None => continue,
                },
                other => {
                    self.error(
                        skyc_compiler::Rule::K8sUnsupported,
                        task,
                        format!(
                            "`{}`: the volume at `{}` ({other}) is neither a name nor a spec",
                            task.name, v.path
                        ),
                        "unsupported volume",
                        None,
                    );
                    continue;
                }
            };
            mounts.push(json!({"name": name, "mountPath": v.path}));
            let mut vol = Map::new();
            vol.insert("name".into(), json!(name));
            if let Value::Object(s) = source {
                vol.extend(s);
            }
            volumes.push(Value::Object(vol));
        }
        (mounts, volumes)
    }

    fn ephemeral(&mut self, task: &Task, path: &str, spec: &Map<String, Value>) -> Option<Value> {
        let size = spec.get("size").and_then(storage_quantity);
        let Some(size) = size else {
            self.error(
                skyc_compiler::Rule::K8sUnsupported,
                task,
                format!(
                    "`{}`: the inline volume at `{path}` has no usable `size`; skyc creates only ephemeral volumes inline",
                    task.name
                ),
                "unsupported volume",
                Some("give `size: 100Gi`, or create the volume and mount it by name"),
            );
            return None;
        };
        let mut claim = Map::new();
        claim.insert("accessModes".into(), json!(["ReadWriteOnce"]));
        for (k, v) in spec {
            match (k.as_str(), v) {
                ("size", _) => {}
                ("storage_class" | "storage_class_name", Value::String(c)) => {
                    claim.insert("storageClassName".into(), json!(c));
                }
                _ => self.warn(
                    task,
                    format!(
                        "`{}`: `{k}` of the volume at `{path}` is not applied",
                        task.name
                    ),
                ),
            }
        }
        claim.insert("resources".into(), json!({"requests": {"storage": size}}));
        Some(json!({"ephemeral": {"volumeClaimTemplate": {"spec": claim}}}))
    }

    /// The pod template of `pods`.
    pub(super) fn pod(&self, task: &Task, pods: Pods, shape: &Shape, parts: &Parts) -> Value {
        let g = &self.group.name;
        let Parts {
            env: user_env,
            mounts,
            volumes,
            init,
            sidecars,
            uploads,
        } = parts;
        let cluster_info = json!({
            "cluster_name": format!("{g}-{}", task.name),
            "cloud": "Kubernetes",
            "region": null,
            "zone": null,
        });
        let mut env = Vec::new();
        // A Job Group's own; a pipeline's steps are plain managed-job tasks.
        if self.group.execution == Execution::Parallel {
            env.push(json!({"name": "SKYPILOT_JOBGROUP_NAME", "value": g}));
        }
        env.push(match pods {
            Pods::Node(i) => json!({"name": "SKYPILOT_NODE_RANK", "value": i.to_string()}),
            Pods::Step => json!({
                "name": "SKYPILOT_NODE_RANK",
                "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.annotations['{COMPLETION_INDEX}']")}},
            }),
        });
        env.extend([
            json!({"name": "SKYPILOT_NUM_NODES", "value": task.num_nodes.to_string()}),
            json!({"name": "SKYPILOT_NUM_GPUS_PER_NODE", "value": shape.gpus_per_node.to_string()}),
            json!({"name": "SKYPILOT_JOB_RANK", "value": "0"}),
            json!({"name": "SKYPILOT_CLUSTER_INFO", "value": literal_env_value(&cluster_info.to_string())}),
            json!({"name": "SKYC_TASK", "value": task.name}),
            json!({
                "name": "SKYC_JOBSET_UID",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/jobset-uid']"}},
            }),
        ]);
        env.extend(user_env.iter().cloned());
        let mut container = Map::new();
        container.insert("name".into(), json!(CONTAINER));
        container.insert("image".into(), json!(shape.image));
        container.insert(
            "command".into(),
            json!(["/bin/bash", format!("{SCRIPTS_DIR}/entrypoint.sh")]),
        );
        container.insert("env".into(), json!(env));
        let mut res = Map::new();
        if !shape.requests.is_empty() {
            res.insert("requests".into(), Value::Object(shape.requests.clone()));
        }
        if !shape.limits.is_empty() {
            res.insert("limits".into(), Value::Object(shape.limits.clone()));
        }
        if !res.is_empty() {
            container.insert("resources".into(), Value::Object(res));
        }
        if !shape.ports.is_empty() {
            let ports: Vec<Value> = shape
                .ports
                .iter()
                .map(|p| json!({"containerPort": p}))
                .collect();
            container.insert("ports".into(), json!(ports));
        }
        container.insert("volumeMounts".into(), json!(mounts));

        let mut spec = Map::new();
        // The two fields that make `{task}-{i}.{group}` resolve through the
        // JobSet's headless Service `{group}`. An Indexed Job's pod gets
        // its hostname from the Job controller, which overwrites any other.
        if let Pods::Node(i) = pods {
            spec.insert("hostname".into(), json!(names::node_name(&task.name, i)));
        }
        spec.insert("subdomain".into(), json!(g));
        // Required by podFailurePolicy; the JobSet webhook would otherwise
        // default it to OnFailure.
        spec.insert("restartPolicy".into(), json!("Never"));
        spec.insert("dnsPolicy".into(), json!("ClusterFirst"));
        // Service links would add variables SkyPilot's contract lacks.
        spec.insert("enableServiceLinks".into(), json!(false));
        // A sidecar that waits for cached writes is given their time.
        let grace = if *uploads {
            super::buckets::UPLOAD_GRACE_SECONDS
        } else {
            30
        };
        spec.insert("terminationGracePeriodSeconds".into(), json!(grace));
        self.node_selection(shape, &mut spec);
        // The files are in place before the buckets' sidecars start.
        let inits: Vec<Value> = init.iter().chain(sidecars).cloned().collect();
        if !inits.is_empty() {
            spec.insert("initContainers".into(), json!(inits));
        }
        spec.insert("containers".into(), json!([Value::Object(container)]));
        spec.insert("volumes".into(), json!(volumes));

        let mut labels = node_labels(g, task, pods);
        for (k, v) in &shape.labels {
            labels.insert(k.clone(), json!(v));
        }
        json!({"metadata": {"labels": labels}, "spec": spec})
    }

    /// One accelerator type: a node selector. Several: node affinity over
    /// all, preferring the earlier ones when the list is ordered.
    fn node_selection(&self, shape: &Shape, spec: &mut Map<String, Value>) {
        let key = &self.options.gpu_label_key;
        match shape.accelerator_types.as_slice() {
            [] => {}
            [one] => {
                spec.insert("nodeSelector".into(), json!({ key: one }));
            }
            many => {
                let mut affinity = Map::new();
                affinity.insert(
                    "requiredDuringSchedulingIgnoredDuringExecution".into(),
                    json!({"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": key, "operator": "In", "values": many}
                    ]}]}),
                );
                if shape.ordered {
                    let preferred: Vec<Value> = many
                        .iter()
                        .enumerate()
                        .map(|(n, v)| {
                            json!({
                                "weight": 100usize.saturating_sub(n).max(1),
                                "preference": {"matchExpressions": [
                                    {"key": key, "operator": "In", "values": [v]}
                                ]},
                            })
                        })
                        .collect();
                    affinity.insert(
                        "preferredDuringSchedulingIgnoredDuringExecution".into(),
                        json!(preferred),
                    );
                }
                spec.insert("affinity".into(), json!({ "nodeAffinity": affinity }));
            }
        }
    }
}

/// A volume size as a Kubernetes quantity: SkyPilot's `GB` is GiB; a bare
/// number is GiB.
fn storage_quantity(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => n.as_u64().filter(|&n| n > 0).map(|n| format!("{n}Gi")),
        Value::String(s) => {
            let s = s.trim();
            let digits = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
            let unit = &s[digits.len()..];
            let number_ok = !digits.is_empty()
                && digits.bytes().all(|c| c.is_ascii_digit())
                && digits.bytes().any(|c| c != b'0');
            let unit = match unit.to_ascii_uppercase().as_str() {
                "" | "G" | "GB" | "GI" | "GIB" => "Gi",
                "M" | "MB" | "MI" | "MIB" => "Mi",
                "T" | "TB" | "TI" | "TIB" => "Ti",
                _ => return None,
            };
            number_ok.then(|| format!("{digits}{unit}"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(storage_quantity(&json!("100Gi")).as_deref(), Some("100Gi"));
        assert_eq!(storage_quantity(&json!("10GB")).as_deref(), Some("10Gi"));
        assert_eq!(storage_quantity(&json!(5)).as_deref(), Some("5Gi"));
        assert_eq!(storage_quantity(&json!("1.5Gi")), None);
        assert_eq!(storage_quantity(&json!("0")), None);
        assert_eq!(storage_quantity(&json!("x")), None);
    }

    #[test]
    fn env_values_are_literal() {
        assert_eq!(literal_env_value("$(HOME) $$ ${X}"), "$$(HOME) $$$$ $${X}");
    }
}
