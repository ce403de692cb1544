//! A task's `resources` candidates to one pod shape: requests, limits,
//! node selection, ports, image, labels.
//!
//! A pod has exactly one shape, while SkyPilot lets a task list several
//! (`any_of`, `ordered`, a list of accelerators). When the candidates differ
//! only in the accelerator type, node affinity expresses all of them;
//! otherwise the first one is used and the rest are reported.

use super::Lowerer;
use super::names::is_label_value;
use serde_json::{Map, Value, json};
use skyc_compiler::Rule;
use skyc_compiler::ir::{Accelerator, Candidate, Image, Quantity, Task};

/// The pod shape of one task.
#[derive(Debug, Default)]
pub(super) struct Shape {
    pub requests: Map<String, Value>,
    pub limits: Map<String, Value>,
    /// Accelerator label values the node must have one of, in preference
    /// order.
    pub accelerator_types: Vec<String>,
    /// Whether `accelerator_types` is a preference order.
    pub ordered: bool,
    pub gpus_per_node: u64,
    pub image: String,
    pub ports: Vec<u16>,
    pub labels: Vec<(String, String)>,
}

/// At most this many `containerPorts` per pod. They are informational
/// (a pod may listen on any port), so a wide range is not listed.
const MAX_LISTED_PORTS: usize = 64;

/// Label prefixes skyc, JobSet, the Job controller and Kueue own.
const RESERVED_LABEL_PREFIXES: &[&str] = &[
    "skyc.io/",
    "jobset.sigs.k8s.io/",
    "batch.kubernetes.io/",
    "kueue.x-k8s.io/",
];

impl Lowerer<'_> {
    pub(super) fn shape(&mut self, task: &Task) -> Option<Shape> {
        let usable: Vec<&Candidate> = task
            .resources
            .candidates
            .iter()
            .filter(|c| runs_on_kubernetes(c))
            .collect();
        let pinned: Vec<String> = task
            .resources
            .candidates
            .iter()
            .filter(|c| !runs_on_kubernetes(c))
            .filter_map(|c| c.infra.as_ref()?.cloud.clone())
            .collect();
        let Some(&first) = usable.first() else {
            self.error(
                Rule::K8sUnsupported,
                task,
                format!(
                    "`{}` may only run on {}, not on Kubernetes",
                    task.name,
                    pinned.join(", ")
                ),
                "pinned to another cloud",
                Some("allow Kubernetes in `resources.infra` (e.g. `infra: k8s`), or build this group for its cloud"),
            );
            return None;
        };
        if !pinned.is_empty() {
            self.warn(
                task,
                format!(
                    "`{}`: the resource choices pinned to {} are dropped; Kubernetes uses the others",
                    task.name,
                    pinned.join(", ")
                ),
            );
        }
        let mut shape = Shape {
            ordered: task.resources.ordered,
            ..Shape::default()
        };
        // Candidates that differ only in the accelerator type become one
        // node affinity over every type.
        let same_but_type = usable.iter().all(|c| {
            let (mut a, mut b) = ((*c).clone(), first.clone());
            if let (Some(x), Some(y)) = (&mut a.accelerator, &mut b.accelerator) {
                x.name.clear();
                y.name.clear();
            }
            a == b
        });
        if !same_but_type {
            self.warn(
                task,
                format!(
                    "`{}` lists {} resource choices; a pod has one shape, so Kubernetes gets the first",
                    task.name,
                    usable.len()
                ),
            );
        }
        let chosen: &[&Candidate] = if same_but_type { &usable } else { &usable[..1] };
        self.candidate_settings(task, first);
        if let Some(acc) = &first.accelerator {
            self.accelerator(task, acc, chosen, &mut shape)?;
        }
        if let Some(cpus) = first.cpus {
            shape
                .requests
                .insert("cpu".into(), json!(cpu_quantity(cpus)));
        }
        if let Some(memory) = first.memory_gb {
            let q = memory_quantity(memory);
            shape.requests.insert("memory".into(), json!(q));
            if !memory.at_least {
                shape.limits.insert("memory".into(), json!(q));
            }
        }
        shape.image = match &first.image {
            Some(Image::Docker(image)) => image.clone(),
            Some(Image::Cloud(id)) => {
                self.warn(
                    task,
                    format!(
                        "`{}`: `image_id: {id}` is not a container image; the pod runs {}",
                        task.name, self.options.image
                    ),
                );
                self.options.image.clone()
            }
            None => self.options.image.clone(),
        };
        let mut ports: Vec<u16> = Vec::new();
        for range in &first.ports {
            let count = usize::from(range.end - range.start) + 1;
            if ports.len() + count > MAX_LISTED_PORTS {
                self.warn(
                    task,
                    format!(
                        "`{}`: ports {}-{} are not listed as containerPorts (more than {MAX_LISTED_PORTS}); the pod can still listen on them",
                        task.name, range.start, range.end
                    ),
                );
                continue;
            }
            ports.extend(range.start..=range.end);
        }
        ports.sort_unstable();
        ports.dedup();
        shape.ports = ports;
        for (k, v) in &first.labels {
            if RESERVED_LABEL_PREFIXES.iter().any(|p| k.starts_with(p)) {
                self.error(
                    Rule::K8sInvalidName,
                    task,
                    format!(
                        "`{}`: the label `{k}` is reserved for skyc, JobSet, Jobs or Kueue",
                        task.name
                    ),
                    "reserved label",
                    Some("use a key outside those prefixes"),
                );
            } else if !super::names::is_qualified_name(k) || !is_label_value(v) {
                self.error(
                    Rule::K8sInvalidName,
                    task,
                    format!("`{}`: `{k}: {v}` is not a valid Kubernetes label", task.name),
                    "invalid label",
                    Some("label keys are `[prefix/]name`, values at most 63 of letters, digits, `-`, `_`, `.`"),
                );
            } else {
                shape.labels.push((k.clone(), v.clone()));
            }
        }
        Some(shape)
    }

    /// Fields of a candidate that mean nothing on Kubernetes: reported, not
    /// applied.
    fn candidate_settings(&mut self, task: &Task, c: &Candidate) {
        let name = &task.name;
        if let Some(infra) = &c.infra {
            if let Some(context) = &infra.region {
                self.warn(task, format!("`{name}`: the Kubernetes context `{context}` is chosen when the manifests are applied (`kubectl --context`), not by them"));
            }
            if let Some(zone) = &infra.zone {
                self.warn(
                    task,
                    format!("`{name}`: the zone `{zone}` has no Kubernetes meaning here"),
                );
            }
        }
        if let Some(t) = &c.instance_type {
            self.warn(task, format!("`{name}`: `instance_type: {t}` has no Kubernetes meaning; the pod asks for `cpus`, `memory` and `accelerators`"));
        }
        if c.use_spot {
            self.warn(task, format!("`{name}`: `use_spot` has no Kubernetes meaning; the pod runs on whatever nodes the scheduler picks"));
        }
        if let Some(size) = c.disk_size_gb {
            self.warn(task, format!("`{name}`: `disk_size: {size}` has no Kubernetes meaning; the pod gets its node's ephemeral storage"));
        }
        if let Some(tier) = &c.disk_tier {
            self.warn(
                task,
                format!("`{name}`: `disk_tier: {tier}` has no Kubernetes meaning"),
            );
        }
        if let Some(tier) = &c.network_tier {
            self.warn(task, format!("`{name}`: `network_tier: {tier}` has no Kubernetes meaning; the pod uses the cluster network"));
        }
    }

    fn accelerator(
        &mut self,
        task: &Task,
        acc: &Accelerator,
        chosen: &[&Candidate],
        shape: &mut Shape,
    ) -> Option<()> {
        let Some(resource) = device_resource(&acc.name) else {
            self.error(
                Rule::K8sUnsupported,
                task,
                format!("`{}`: the accelerator `{}` cannot be requested from Kubernetes by skyc", task.name, acc.name),
                "unsupported accelerator",
                Some("skyc's Kubernetes target requests NVIDIA (`nvidia.com/gpu`) and AMD (`amd.com/gpu`) GPUs"),
            );
            return None;
        };
        if !(acc.count.is_finite() && acc.count > 0.0) {
            self.error(
                Rule::K8sUnsupported,
                task,
                format!(
                    "`{}`: {} accelerators cannot be requested",
                    task.name, acc.count
                ),
                "accelerator count",
                None,
            );
            return None;
        }
        let whole = acc.count.ceil();
        if whole != acc.count {
            self.warn(
                task,
                format!(
                    "`{}`: {} {} rounded up to {whole}: Kubernetes device resources are whole GPUs",
                    task.name, acc.count, acc.name
                ),
            );
        }
        // Counts are small: the IR bounds them far below u64's range.
        let whole = whole as u64;
        shape.gpus_per_node = whole;
        shape
            .requests
            .insert(resource.into(), json!(whole.to_string()));
        shape
            .limits
            .insert(resource.into(), json!(whole.to_string()));
        for c in chosen {
            let Some(a) = &c.accelerator else { continue };
            let value = accelerator_label_value(&self.options.gpu_label_key, &a.name);
            if !is_label_value(&value) {
                self.error(
                    Rule::K8sUnsupported,
                    task,
                    format!(
                        "`{}`: the accelerator `{}` gives no valid value for the node label `{}`",
                        task.name, a.name, self.options.gpu_label_key
                    ),
                    "not a node label value",
                    Some("name the GPU type (e.g. `H100:1`) rather than its memory"),
                );
                return None;
            }
            if !shape.accelerator_types.contains(&value) {
                shape.accelerator_types.push(value);
            }
        }
        Some(())
    }
}

/// Whether a candidate allows Kubernetes: no cloud, `*`, or `kubernetes`.
fn runs_on_kubernetes(c: &Candidate) -> bool {
    c.infra
        .as_ref()
        .and_then(|i| i.cloud.as_deref())
        .is_none_or(|cloud| cloud == "kubernetes")
}

/// The extended resource a GPU type is requested as.
fn device_resource(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    if upper.starts_with("TPU") {
        None
    } else if upper.starts_with("MI") && upper[2..].starts_with(|c: char| c.is_ascii_digit()) {
        Some("amd.com/gpu")
    } else {
        Some("nvidia.com/gpu")
    }
}

/// GKE's `cloud.google.com/gke-accelerator` values, as SkyPilot's GKE label
/// formatter maps its accelerator names.
const GKE_ACCELERATORS: &[(&str, &str)] = &[
    ("A100", "nvidia-tesla-a100"),
    ("A100-80GB", "nvidia-a100-80gb"),
    ("B200", "nvidia-b200"),
    ("GB200", "nvidia-gb200"),
    ("H100", "nvidia-h100-80gb"),
    ("H100-MEGA", "nvidia-h100-mega-80gb"),
    ("H200", "nvidia-h200-141gb"),
    ("K80", "nvidia-tesla-k80"),
    ("L4", "nvidia-l4"),
    ("P100", "nvidia-tesla-p100"),
    ("P4", "nvidia-tesla-p4"),
    ("T4", "nvidia-tesla-t4"),
    ("V100", "nvidia-tesla-v100"),
];

pub(super) const GKE_LABEL_KEY: &str = "cloud.google.com/gke-accelerator";

/// The node label value for an accelerator: GKE's names under GKE's key,
/// otherwise the lower-cased name (SkyPilot's `skypilot.co/accelerator`
/// convention, also what most labelling scripts write).
pub(super) fn accelerator_label_value(key: &str, name: &str) -> String {
    if key == GKE_LABEL_KEY {
        if let Some((_, v)) = GKE_ACCELERATORS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            return (*v).to_owned();
        }
        return format!("nvidia-{}", name.to_ascii_lowercase());
    }
    name.to_ascii_lowercase()
}

/// `4` → `"4"`, `0.5` → `"500m"`; a minimum (`4+`) is requested as is.
fn cpu_quantity(q: Quantity) -> String {
    if q.value.fract() == 0.0 {
        format!("{}", q.value as u64)
    } else {
        format!("{}m", (q.value * 1000.0).ceil() as u64)
    }
}

/// GiB (SkyPilot's `GB`) → `"16Gi"`, fractions in whole MiB.
fn memory_quantity(q: Quantity) -> String {
    if q.value.fract() == 0.0 {
        format!("{}Gi", q.value as u64)
    } else {
        format!("{}Mi", (q.value * 1024.0).ceil() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        let q = |value, at_least| Quantity { value, at_least };
        assert_eq!(cpu_quantity(q(4.0, false)), "4");
        assert_eq!(cpu_quantity(q(0.5, true)), "500m");
        assert_eq!(cpu_quantity(q(0.0001, false)), "1m");
        assert_eq!(memory_quantity(q(16.0, true)), "16Gi");
        assert_eq!(memory_quantity(q(0.5, false)), "512Mi");
    }

    #[test]
    fn accelerator_labels() {
        assert_eq!(
            accelerator_label_value(GKE_LABEL_KEY, "H100"),
            "nvidia-h100-80gb"
        );
        assert_eq!(
            accelerator_label_value(GKE_LABEL_KEY, "t4"),
            "nvidia-tesla-t4"
        );
        assert_eq!(
            accelerator_label_value(GKE_LABEL_KEY, "RTX4090"),
            "nvidia-rtx4090"
        );
        assert_eq!(
            accelerator_label_value("skypilot.co/accelerator", "H100"),
            "h100"
        );
        assert_eq!(device_resource("MI300X"), Some("amd.com/gpu"));
        assert_eq!(device_resource("H100"), Some("nvidia.com/gpu"));
        assert_eq!(device_resource("tpu-v5-lite-podslice"), None);
    }
}
