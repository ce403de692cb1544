//! A model of how Kubernetes names pods, to prove from the emitted objects
//! alone that `{task}-{i}.{group}` resolves inside the namespace.
//!
//! Modelled: the JobSet controller (child Jobs, the labels it adds, pod
//! subdomains, the headless Service it creates from `spec.network`), the
//! Job controller (an Indexed Job's pod hostname is overwritten with
//! `{job}-{index}` and the pod labelled with its index; a NonIndexed one
//! keeps the template's hostname), the
//! EndpointSlice controller (an endpoint gets a hostname only when the pod
//! sets `hostname` and its `subdomain` is the Service's name), CoreDNS
//! (`{hostname}.{service}.{ns}.svc.cluster.local` for headless Services)
//! and the pod resolver (ClusterFirst search list, `ndots: 5`).

use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

const ZONE: &str = "cluster.local";

#[derive(Debug)]
pub(crate) struct Pod {
    pub namespace: String,
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    pub labels: Map<String, Value>,
    pub dns_policy: String,
    pub host_network: bool,
}

#[derive(Debug)]
pub(crate) struct Service {
    pub namespace: String,
    pub name: String,
    pub headless: bool,
    pub selector: Map<String, Value>,
    pub publish_not_ready: bool,
    pub object: Value,
}

/// What the controllers make of the emitted objects.
#[derive(Debug, Default)]
pub(crate) struct Cluster {
    pub pods: Vec<Pod>,
    pub services: Vec<Service>,
}

impl Cluster {
    pub(crate) fn from_objects(objects: &[Value], default_namespace: &str) -> Self {
        let mut c = Cluster::default();
        for o in objects.iter().filter(|o| o["kind"] == "JobSet") {
            c.add_jobset(o, default_namespace);
        }
        // The pods skyc's runtime creates itself, as they are written.
        for o in objects.iter().filter(|o| o["kind"] == "Pod") {
            let spec = &o["spec"];
            c.pods.push(Pod {
                namespace: o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or(default_namespace)
                    .to_owned(),
                hostname: spec["hostname"].as_str().map(str::to_owned),
                subdomain: spec["subdomain"].as_str().map(str::to_owned),
                labels: o["metadata"]["labels"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
                dns_policy: spec["dnsPolicy"]
                    .as_str()
                    .unwrap_or("ClusterFirst")
                    .to_owned(),
                host_network: spec["hostNetwork"].as_bool().unwrap_or(false),
            });
        }
        c
    }

    fn add_jobset(&mut self, js: &Value, default_namespace: &str) {
        let name = js["metadata"]["name"].as_str().unwrap().to_owned();
        let ns = js["metadata"]["namespace"]
            .as_str()
            .unwrap_or(default_namespace)
            .to_owned();
        let network = &js["spec"]["network"];
        // The webhook defaults enableDNSHostnames and publishNotReadyAddresses
        // to true; skyc writes them, so read them as written.
        let dns = network["enableDNSHostnames"].as_bool().unwrap_or(false);
        let subdomain = network["subdomain"].as_str().unwrap_or(&name).to_owned();
        if dns {
            let object = json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": subdomain, "namespace": ns},
                "spec": {
                    "clusterIP": "None",
                    "selector": {"jobset.sigs.k8s.io/jobset-name": name},
                    "publishNotReadyAddresses": network["publishNotReadyAddresses"].as_bool().unwrap_or(false),
                },
            });
            self.services.push(Service {
                namespace: ns.clone(),
                name: subdomain.clone(),
                headless: true,
                selector: object["spec"]["selector"].as_object().unwrap().clone(),
                publish_not_ready: object["spec"]["publishNotReadyAddresses"] == json!(true),
                object,
            });
        }
        for rjob in js["spec"]["replicatedJobs"].as_array().unwrap() {
            let rname = rjob["name"].as_str().unwrap();
            let replicas = rjob["replicas"].as_u64().unwrap_or(1);
            let job = &rjob["template"]["spec"];
            let indexed = job["completionMode"].as_str().unwrap_or("NonIndexed") == "Indexed";
            let parallelism = job["parallelism"].as_u64().unwrap_or(1);
            let pod = &job["template"];
            for j in 0..replicas {
                let job_name = format!("{name}-{rname}-{j}");
                for p in 0..parallelism {
                    let mut labels = pod["metadata"]["labels"]
                        .as_object()
                        .cloned()
                        .unwrap_or_default();
                    for (k, v) in [
                        ("jobset.sigs.k8s.io/jobset-name", name.clone()),
                        ("jobset.sigs.k8s.io/replicatedjob-name", rname.to_owned()),
                        ("jobset.sigs.k8s.io/job-index", j.to_string()),
                        ("batch.kubernetes.io/job-name", job_name.clone()),
                    ] {
                        labels.insert(k.into(), json!(v));
                    }
                    if indexed {
                        // The PodIndexLabel gate: beta from 1.28, GA in 1.32.
                        labels.insert(
                            "batch.kubernetes.io/job-completion-index".into(),
                            json!(p.to_string()),
                        );
                    }
                    let spec = &pod["spec"];
                    let hostname = if indexed {
                        Some(format!("{job_name}-{p}"))
                    } else {
                        spec["hostname"].as_str().map(str::to_owned)
                    };
                    self.pods.push(Pod {
                        namespace: ns.clone(),
                        hostname,
                        subdomain: if dns {
                            Some(subdomain.clone())
                        } else {
                            spec["subdomain"].as_str().map(str::to_owned)
                        },
                        labels,
                        dns_policy: spec["dnsPolicy"]
                            .as_str()
                            .unwrap_or("ClusterFirst")
                            .to_owned(),
                        host_network: spec["hostNetwork"].as_bool().unwrap_or(false),
                    });
                }
            }
        }
    }

    /// CoreDNS's A records for pods behind headless Services (published
    /// before readiness only with `publishNotReadyAddresses`; skyc needs
    /// that, as peers wait for each other's names before they are ready).
    pub(crate) fn records(&self) -> BTreeMap<String, Vec<usize>> {
        let mut records: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for s in self
            .services
            .iter()
            .filter(|s| s.headless && s.publish_not_ready)
        {
            for (i, p) in self.pods.iter().enumerate() {
                let selected = s.selector.iter().all(|(k, v)| p.labels.get(k) == Some(v));
                if p.namespace == s.namespace
                    && selected
                    && p.subdomain.as_deref() == Some(&s.name)
                    && let Some(h) = &p.hostname
                {
                    records
                        .entry(format!("{h}.{}.{}.svc.{ZONE}", s.name, s.namespace))
                        .or_default()
                        .push(i);
                }
            }
        }
        records
    }

    /// The pods a lookup of `name` from pod `from` answers with.
    pub(crate) fn resolve(&self, from: &Pod, name: &str) -> Vec<usize> {
        Self::resolve_in(&self.records(), from, name)
    }

    /// [`Cluster::resolve`] over records made once (a large group's).
    pub(crate) fn resolve_in(
        records: &BTreeMap<String, Vec<usize>>,
        from: &Pod,
        name: &str,
    ) -> Vec<usize> {
        assert!(
            !from.host_network && from.dns_policy == "ClusterFirst",
            "only ClusterFirst pods use the cluster search path"
        );
        let dots = name.matches('.').count();
        let mut candidates = Vec::new();
        if dots < 5 {
            for suffix in [
                format!("{}.svc.{ZONE}", from.namespace),
                format!("svc.{ZONE}"),
                ZONE.to_owned(),
            ] {
                candidates.push(format!("{name}.{suffix}"));
            }
        }
        candidates.push(name.to_owned());
        candidates
            .iter()
            .find_map(|c| records.get(c).cloned())
            .unwrap_or_default()
    }
}
