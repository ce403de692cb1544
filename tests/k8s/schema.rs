//! Structural validation of emitted objects: every JobSet against the
//! JobSet CRD's schema made strict, every Job template, Service, ConfigMap,
//! Secret, PersistentVolumeClaim and the controller's objects (Deployment,
//! ServiceAccount, Role, RoleBinding) against Kubernetes v1.33's strict
//! JSON Schemas.

use crate::support::root;
use serde_json::{Value, json};
use skyc_compiler::yaml::{Budget, Node, Reader, Value as Y};
use std::sync::OnceLock;

fn dir() -> std::path::PathBuf {
    root().join("tests/fixtures/k8s-schemas")
}

fn yaml_to_json(n: &Node) -> Value {
    match &n.value {
        Y::Null => Value::Null,
        Y::Bool(b) => json!(b),
        Y::Int(i) => json!(i),
        Y::Float(f) => json!(f),
        Y::String(s) => json!(s),
        Y::Seq(items) => Value::Array(items.iter().map(yaml_to_json).collect()),
        Y::Map(entries) => Value::Object(
            entries
                .iter()
                .map(|e| (e.key.as_str().unwrap().to_owned(), yaml_to_json(&e.value)))
                .collect(),
        ),
    }
}

/// The API server's strict field validation, as a JSON Schema: every
/// object schema that lists `properties` and does not preserve unknown
/// fields rejects the others.
pub(crate) fn make_strict(schema: &mut Value) {
    let Value::Object(m) = schema else { return };
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        props.values_mut().for_each(make_strict);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v @ Value::Object(_)) = m.get_mut(key) {
            make_strict(v);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = m.get_mut(key) {
            branches.iter_mut().for_each(make_strict);
        }
    }
    let preserves = m.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if m.contains_key("properties") && !preserves && !m.contains_key("additionalProperties") {
        m.insert("additionalProperties".into(), json!(false));
    }
}

/// The CRD's `openAPIV3Schema`, strict.
pub(crate) fn jobset_schema() -> Value {
    let text = std::fs::read_to_string(dir().join("jobset.x-k8s.io_jobsets.yaml")).unwrap();
    let mut diagnostics = skyc_compiler::Diagnostics::default();
    let budget = Budget {
        max_depth: 256,
        max_nodes: 4_000_000,
        max_bytes: 64 << 20,
    };
    let docs = Reader::read(&text, budget, &mut diagnostics);
    assert!(!diagnostics.has_errors(), "the CRD reads");
    let crd = yaml_to_json(&docs[0].root);
    let version = &crd["spec"]["versions"][0];
    assert_eq!(version["name"], "v1alpha2");
    let mut schema = version["schema"]["openAPIV3Schema"].clone();
    make_strict(&mut schema);
    schema
}

pub(crate) struct Validators {
    jobset: jsonschema::Validator,
    job: jsonschema::Validator,
    service: jsonschema::Validator,
    config_map: jsonschema::Validator,
    secret: jsonschema::Validator,
    claim: jsonschema::Validator,
    deployment: jsonschema::Validator,
    service_account: jsonschema::Validator,
    role: jsonschema::Validator,
    role_binding: jsonschema::Validator,
}

pub(crate) fn validators() -> &'static Validators {
    static V: OnceLock<Validators> = OnceLock::new();
    V.get_or_init(|| {
        let defs: Value = serde_json::from_str(
            &std::fs::read_to_string(dir().join("_definitions.json")).unwrap(),
        )
        .unwrap();
        let registry = jsonschema::Registry::new()
            .add("https://kubernetes.io/api/_definitions.json", defs)
            .unwrap()
            .prepare()
            .unwrap();
        let kind = |file: &str| {
            let schema: Value =
                serde_json::from_str(&std::fs::read_to_string(dir().join(file)).unwrap()).unwrap();
            jsonschema::options()
                .with_registry(&registry)
                .build(&schema)
                .unwrap_or_else(|e| panic!("{file}: {e}"))
        };
        // A kind with no file of its own: its definition.
        let definition = |name: &str| {
            let schema = json!({
                "$ref": format!("https://kubernetes.io/api/_definitions.json#/$defs/{name}")
            });
            jsonschema::options()
                .with_registry(&registry)
                .build(&schema)
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        };
        Validators {
            jobset: jsonschema::validator_for(&jobset_schema()).unwrap(),
            job: kind("job-batch-v1.json"),
            service: kind("service-v1.json"),
            config_map: kind("configmap-v1.json"),
            secret: kind("secret-v1.json"),
            claim: kind("persistentvolumeclaim-v1.json"),
            deployment: definition("io.k8s.api.apps.v1.Deployment"),
            service_account: definition("io.k8s.api.core.v1.ServiceAccount"),
            role: definition("io.k8s.api.rbac.v1.Role"),
            role_binding: definition("io.k8s.api.rbac.v1.RoleBinding"),
        }
    })
}

fn errors(v: &jsonschema::Validator, what: &str, instance: &Value) -> Vec<String> {
    v.iter_errors(instance)
        .map(|e| format!("{what}: {} at {}", e, e.instance_path()))
        .collect()
}

/// The Job JobSet makes of a replicated Job (index 0), as the API server
/// would receive it.
pub(crate) fn child_job(jobset: &Value, rjob: &Value) -> Value {
    let mut metadata = rjob["template"]["metadata"].clone();
    let name = format!(
        "{}-{}-0",
        jobset["metadata"]["name"].as_str().unwrap(),
        rjob["name"].as_str().unwrap()
    );
    metadata["name"] = json!(name);
    if let Some(ns) = jobset["metadata"].get("namespace") {
        metadata["namespace"] = ns.clone();
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": rjob["template"]["spec"],
    })
}

/// Every schema error of `objects`, by kind; Jobs for each replicated Job
/// of a JobSet.
pub(crate) fn validate(objects: &[Value]) -> Vec<String> {
    let v = validators();
    let mut out = Vec::new();
    for o in objects {
        match o["kind"].as_str() {
            Some("JobSet") => {
                out.extend(errors(&v.jobset, "JobSet", o));
                for rjob in o["spec"]["replicatedJobs"].as_array().into_iter().flatten() {
                    let job = child_job(o, rjob);
                    out.extend(errors(
                        &v.job,
                        &format!("Job {}", job["metadata"]["name"]),
                        &job,
                    ));
                }
            }
            // A pod, as the template of a Job: the Job schema holds the
            // pod's (PodTemplateSpec's metadata and spec are a pod's).
            Some("Pod") => {
                let job = json!({
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": o["metadata"]["name"]},
                    "spec": {"template": {"metadata": o["metadata"], "spec": o["spec"]}},
                });
                out.extend(errors(
                    &v.job,
                    &format!("Pod {}", o["metadata"]["name"]),
                    &job,
                ));
            }
            Some("Service") => out.extend(errors(&v.service, "Service", o)),
            Some("ConfigMap") => out.extend(errors(&v.config_map, "ConfigMap", o)),
            Some("Secret") => out.extend(errors(&v.secret, "Secret", o)),
            Some("PersistentVolumeClaim") => out.extend(errors(&v.claim, "PVC", o)),
            Some("Deployment") => out.extend(errors(&v.deployment, "Deployment", o)),
            Some("ServiceAccount") => {
                out.extend(errors(&v.service_account, "ServiceAccount", o));
            }
            Some("Role") => out.extend(errors(&v.role, "Role", o)),
            Some("RoleBinding") => out.extend(errors(&v.role_binding, "RoleBinding", o)),
            other => out.push(format!("unexpected kind {other:?}")),
        }
    }
    out
}

#[test]
fn strict_schemas_reject_what_the_api_server_rejects() {
    let v = validators();
    let base = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "g"},
        "spec": {"replicatedJobs": [{"name": "a-0", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "main", "image": "x"}]}}}}}]},
    });
    assert!(v.jobset.is_valid(&base));
    let mut typo = base.clone();
    typo["spec"]["netwrk"] = json!({});
    assert!(!v.jobset.is_valid(&typo), "unknown field");
    let mut bad_enum = base.clone();
    bad_enum["spec"]["successPolicy"] = json!({"operator": "Most"});
    assert!(!v.jobset.is_valid(&bad_enum), "bad enum");
    let mut no_rule_name = base.clone();
    no_rule_name["spec"]["failurePolicy"] = json!({"rules": [{"action": "FailJobSet"}]});
    assert!(
        !v.jobset.is_valid(&no_rule_name),
        "rules[].name is required"
    );
    // Inside the embedded pod template too.
    let mut pod_typo = base.clone();
    pod_typo["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["hostnme"] =
        json!("x");
    assert!(!v.jobset.is_valid(&pod_typo), "unknown pod field");
    let job = child_job(&base, &base["spec"]["replicatedJobs"][0]);
    assert!(
        v.job.is_valid(&job),
        "{:?}",
        validate(std::slice::from_ref(&base))
    );
    let mut job_typo = job.clone();
    job_typo["spec"]["backofLimit"] = json!(1);
    assert!(!v.job.is_valid(&job_typo));
    assert!(v.config_map.is_valid(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}})
    ));
    assert!(!v.config_map.is_valid(
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": 1}})
    ));
}
