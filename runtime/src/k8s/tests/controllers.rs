//! The cluster's controllers as script steps, writing what the real ones
//! write: the JobSet controller (child Jobs from the templates with its
//! labels and owner reference, success over the targeted replicated Jobs,
//! failure on a failed Job, deletion of active Jobs once finished,
//! recreation of a deleted Job), the Job controller (pods from the
//! template, replacement only after the old pod is terminal, scale-down,
//! `Complete` and `DeadlineExceeded`), and the kubelet (running, exits,
//! termination of deleted pods), the scheduler when no node fits, the
//! garbage collector (an object whose owners are all gone goes too), and
//! Kueue (a Workload per JobSet, owned by it, saying why it is not
//! admitted; the JobSet resumed once it is).

use super::fake::World;
use serde_json::{Value, json};
use skyc_targets::k8s::names::COMPLETION_INDEX;

fn deleting(o: &Value) -> bool {
    !o["metadata"]["deletionTimestamp"].is_null()
}

fn condition(o: &Value, type_: &str) -> bool {
    o["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

fn owned_by(o: &Value, uid: &Value) -> bool {
    o["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|rs| rs.iter().any(|r| r["uid"] == *uid))
}

fn terminal(pod: &Value) -> bool {
    matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    )
}

/// A pod's completion index (an Indexed Job's).
fn index_of(pod: &Value) -> Option<u32> {
    pod["metadata"]["annotations"][COMPLETION_INDEX]
        .as_str()?
        .parse()
        .ok()
}

/// Pod `i` of an Indexed Job as its controller makes it: named
/// `{job}-{i}-xxxxx`, hostname `{job}-{i}`, the completion index as label
/// and annotation.
fn indexed_pod(job: &Value, name: &str, i: u32, n: u64) -> Value {
    let mut spec = job["spec"]["template"]["spec"].clone();
    spec["nodeName"] = Value::Null;
    spec["hostname"] = json!(format!("{name}-{i}"));
    let index = json!({COMPLETION_INDEX: i.to_string()});
    let mut labels = job["spec"]["template"]["metadata"]["labels"].clone();
    super::fake::merge(
        &mut labels,
        &json!({
            "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
            "batch.kubernetes.io/job-name": name,
            "controller-uid": job["metadata"]["uid"],
            "job-name": name,
        }),
    );
    super::fake::merge(&mut labels, &index);
    let mut annotations = job["spec"]["template"]["metadata"]["annotations"].clone();
    super::fake::merge(&mut annotations, &index);
    json!({
        "metadata": {
            "name": format!("{name}-{i}-x{n:04}"),
            "labels": labels,
            "annotations": annotations,
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": name,
                "uid": job["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    })
}

impl World {
    fn owned(&self, resource: &str, owner: &Value) -> Vec<Value> {
        let uid = owner["metadata"]["uid"].clone();
        self.names(resource)
            .iter()
            .filter_map(|n| self.get(resource, n))
            .filter(|o| owned_by(o, &uid))
            .cloned()
            .collect()
    }

    /// Foreground deletion as the garbage collector does it: mark.
    fn delete_foreground(&mut self, resource: &str, name: &str) {
        let now = self.now();
        self.update(resource, name, |o| {
            if o["metadata"]["deletionTimestamp"].is_null() {
                o["metadata"]["deletionTimestamp"] = json!(now);
                o["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
            }
        });
    }

    fn delete_pod(&mut self, name: &str) {
        let now = self.now();
        self.update("pods", name, |p| {
            if p["metadata"]["deletionTimestamp"].is_null() {
                p["metadata"]["deletionTimestamp"] = json!(now);
            }
        });
    }

    /// One pass of the JobSet controller.
    pub(super) fn jobset_controller(&mut self) {
        for name in self.names("jobsets") {
            let Some(js) = self.get("jobsets", &name).cloned() else {
                continue;
            };
            let jobs = self.owned("jobs", &js);
            if deleting(&js) {
                // The garbage collector, in the foreground: every
                // dependent (Jobs, and the runtime's pods) goes first.
                for job in &jobs {
                    let n = job["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    self.delete_foreground("jobs", &n);
                }
                let pods = self.owned("pods", &js);
                for pod in &pods {
                    let n = pod["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    self.delete_pod(&n);
                }
                if jobs.is_empty() && pods.is_empty() && !super::fake::has_foreign_finalizer(&js) {
                    self.remove("jobsets", &name);
                }
                continue;
            }
            if !js["status"]["terminalState"].is_null() {
                for job in jobs.iter().filter(|j| {
                    !condition(j, "Complete") && !condition(j, "Failed") && !deleting(j)
                }) {
                    let n = job["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    self.delete_foreground("jobs", &n);
                }
                continue;
            }
            // The headless Service that publishes the pods' hostnames,
            // owned by the JobSet, as `network.enableDNSHostnames` makes it.
            let subdomain = js["spec"]["network"]["subdomain"]
                .as_str()
                .unwrap_or(&name)
                .to_owned();
            if js["spec"]["network"]["enableDNSHostnames"] != false
                && self.get("services", &subdomain).is_none()
            {
                self.put(
                    "services",
                    json!({
                        "metadata": {
                            "name": subdomain,
                            "ownerReferences": [{
                                "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                "name": name, "uid": js["metadata"]["uid"],
                                "controller": true, "blockOwnerDeletion": true,
                            }],
                        },
                        "spec": {"clusterIP": "None", "publishNotReadyAddresses": true,
                                 "selector": {"jobset.sigs.k8s.io/jobset-name": name}},
                    }),
                );
            }
            // Failed Jobs are looked at before succeeded ones.
            if let Some(failed) = jobs.iter().find(|j| condition(j, "Failed") && !deleting(j)) {
                let job = failed["metadata"]["name"].clone();
                self.finish_jobset(
                    &name,
                    "Failed",
                    "FailedJobs",
                    &format!("jobset failed: job {job} failed"),
                );
                continue;
            }
            let targets: Vec<String> = js["spec"]["successPolicy"]["targetReplicatedJobs"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let complete = |rjob: &str| {
                jobs.iter().any(|j| {
                    j["metadata"]["name"] == format!("{name}-{rjob}-0") && condition(j, "Complete")
                })
            };
            if !targets.is_empty() && targets.iter().all(|t| complete(t)) {
                self.finish_jobset(
                    &name,
                    "Completed",
                    "AllJobsCompleted",
                    "jobset completed successfully",
                );
                continue;
            }
            let rjobs = js["spec"]["replicatedJobs"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for rjob in rjobs {
                let rname = rjob["name"].as_str().unwrap_or_default();
                let job_name = format!("{name}-{rname}-0");
                if self.get("jobs", &job_name).is_some() {
                    continue;
                }
                // `dependsOn`: only once every Job of the named replicated
                // Job is Complete.
                let waits = rjob["dependsOn"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|dep| {
                        let dep_job =
                            format!("{name}-{}-0", dep["name"].as_str().unwrap_or_default());
                        !jobs.iter().any(|j| {
                            j["metadata"]["name"] == dep_job
                                && condition(j, dep["status"].as_str().unwrap_or("Complete"))
                        })
                    });
                if waits {
                    continue;
                }
                let mut labels = rjob["template"]["metadata"]["labels"].clone();
                let jobset_labels = json!({
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/jobset-uid": js["metadata"]["uid"],
                    "jobset.sigs.k8s.io/replicatedjob-name": rname,
                    "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
                    "jobset.sigs.k8s.io/job-index": "0",
                    "jobset.sigs.k8s.io/job-global-index": "0",
                    "jobset.sigs.k8s.io/restart-attempt": "0",
                });
                super::fake::merge(&mut labels, &jobset_labels);
                let mut annotations = rjob["template"]["metadata"]["annotations"].clone();
                super::fake::merge(&mut annotations, &jobset_labels);
                let mut spec = rjob["template"]["spec"].clone();
                super::fake::merge(&mut spec["template"]["metadata"]["labels"], &jobset_labels);
                spec["suspend"] = json!(false);
                let job = json!({
                    "metadata": {
                        "name": job_name,
                        "labels": labels,
                        "annotations": annotations,
                        "ownerReferences": [{
                            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                            "name": name, "uid": js["metadata"]["uid"],
                            "controller": true, "blockOwnerDeletion": true,
                        }],
                    },
                    "spec": spec,
                    "status": {},
                });
                self.put("jobs", job);
            }
        }
    }

    fn finish_jobset(&mut self, name: &str, state: &str, reason: &str, message: &str) {
        let now = self.now();
        self.update("jobsets", name, |js| {
            js["status"]["terminalState"] = json!(state);
            js["status"]["conditions"] = json!([{
                "type": state, "status": "True", "reason": reason, "message": message,
                "lastTransitionTime": now,
            }]);
        });
    }

    /// One pass of the Job controller over every Job.
    pub(super) fn job_controller(&mut self) {
        for name in self.names("jobs") {
            let Some(job) = self.get("jobs", &name).cloned() else {
                continue;
            };
            let pods = self.owned("pods", &job);
            if deleting(&job) {
                for p in &pods {
                    let n = p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    self.delete_pod(&n);
                }
                if pods.is_empty() {
                    self.remove("jobs", &name);
                }
                continue;
            }
            if condition(&job, "Complete") || condition(&job, "Failed") {
                continue;
            }
            let active: Vec<&Value> = pods
                .iter()
                .filter(|p| !terminal(p) && !deleting(p))
                .collect();
            if job["spec"]["activeDeadlineSeconds"]
                .as_i64()
                .is_some_and(|d| d <= 1)
            {
                for p in &active {
                    let n = p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    self.delete_pod(&n);
                }
                let now = self.now();
                self.update("jobs", &name, |j| {
                    j["status"]["conditions"] = json!([
                        {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded", "lastTransitionTime": now},
                        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                         "message": "Job was active longer than specified deadline", "lastTransitionTime": now},
                    ]);
                });
                continue;
            }
            let indexed = job["spec"]["completionMode"] == "Indexed";
            let completions = job["spec"]["completions"].as_u64().unwrap_or(1) as u32;
            let succeeded_index = |i: u32| {
                pods.iter()
                    .any(|p| p["status"]["phase"] == "Succeeded" && index_of(p) == Some(i))
            };
            let complete = if indexed {
                (0..completions).all(succeeded_index)
            } else {
                pods.iter().any(|p| p["status"]["phase"] == "Succeeded")
            };
            if complete {
                let now = self.now();
                self.update("jobs", &name, |j| {
                    j["status"]["succeeded"] = json!(completions);
                    j["status"]["active"] = json!(0);
                    j["status"]["completionTime"] = json!(now);
                    j["status"]["conditions"] = json!([
                        {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": now},
                        {"type": "Complete", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": now},
                    ]);
                });
                continue;
            }
            let parallelism = job["spec"]["parallelism"].as_i64().unwrap_or(1) as usize;
            if active.len() > parallelism {
                for p in &active[parallelism..] {
                    let n = p["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    self.delete_pod(&n);
                }
            }
            if indexed {
                // One pod per index that has neither succeeded nor a pod
                // still running or terminating (podReplacementPolicy:
                // Failed), up to `parallelism` at once.
                let mut running = active.len();
                for i in 0..completions {
                    let busy = pods.iter().any(|p| index_of(p) == Some(i) && !terminal(p));
                    if running >= parallelism || busy || succeeded_index(i) {
                        continue;
                    }
                    running += 1;
                    let n = self.version();
                    self.put("pods", indexed_pod(&job, &name, i, n));
                }
            }
            // podReplacementPolicy: Failed: no new pod while one terminates.
            let terminating = pods.iter().any(|p| deleting(p) && !terminal(p));
            if !indexed && active.len() < parallelism && !terminating {
                let n = pods.len() + 1;
                let mut spec = job["spec"]["template"]["spec"].clone();
                spec["nodeName"] = Value::Null;
                let mut labels = job["spec"]["template"]["metadata"]["labels"].clone();
                super::fake::merge(
                    &mut labels,
                    &json!({
                        "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
                        "batch.kubernetes.io/job-name": name,
                        "controller-uid": job["metadata"]["uid"],
                        "job-name": name,
                    }),
                );
                let pod = json!({
                    "metadata": {
                        "name": format!("{name}-p{n}"),
                        "labels": labels,
                        "finalizers": ["batch.kubernetes.io/job-tracking"],
                        "ownerReferences": [{
                            "apiVersion": "batch/v1", "kind": "Job", "name": name,
                            "uid": job["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
                        }],
                    },
                    "spec": spec,
                    "status": {"phase": "Pending", "qosClass": "Burstable"},
                });
                self.put("pods", pod);
            }
            let failed = pods
                .iter()
                .filter(|p| p["status"]["phase"] == "Failed")
                .count();
            let active = self
                .owned("pods", &job)
                .iter()
                .filter(|p| !terminal(p))
                .count();
            let (old_active, old_failed) = (
                job["status"]["active"].as_u64().unwrap_or(0) as usize,
                job["status"]["failed"].as_u64().unwrap_or(0) as usize,
            );
            if (active, failed) != (old_active, old_failed) {
                self.update("jobs", &name, |j| {
                    j["status"]["active"] = json!(active);
                    j["status"]["failed"] = json!(failed);
                });
            }
        }
    }

    /// The kubelet: a deleted pod's containers get SIGTERM and end (143),
    /// or SIGKILL with no grace (137); a terminal deleted pod goes (its
    /// Job's tracking finalizer removed).
    pub(super) fn kubelet(&mut self) {
        for name in self.names("pods") {
            let Some(pod) = self.get("pods", &name).cloned() else {
                continue;
            };
            if !deleting(&pod) || self.unreachable.contains(&name) {
                continue;
            }
            if terminal(&pod)
                || pod["status"]["phase"] == "Pending" && pod["spec"]["nodeName"].is_null()
            {
                self.remove("pods", &name);
            } else {
                let code = if pod["metadata"]["deletionGracePeriodSeconds"] == 0 {
                    137
                } else {
                    143
                };
                self.exit(&name, code);
            }
        }
    }

    /// The garbage collector: an object that has owners, none of which is
    /// there any more (by uid), is deleted; a pod as any deleted pod is
    /// (its kubelet ends it), anything else at once.
    pub(super) fn garbage_collector(&mut self) {
        let uids: std::collections::BTreeSet<String> = self
            .everything()
            .iter()
            .filter_map(|key| {
                let (r, n) = key.split_once('/')?;
                Some(self.get(r, n)?["metadata"]["uid"].as_str()?.to_owned())
            })
            .collect();
        for key in self.everything() {
            let Some((resource, name)) = key.split_once('/') else {
                continue;
            };
            let Some(refs) = self
                .get(resource, name)
                .and_then(|o| o["metadata"]["ownerReferences"].as_array().cloned())
            else {
                continue;
            };
            if refs.is_empty()
                || refs
                    .iter()
                    .any(|r| r["uid"].as_str().is_some_and(|u| uids.contains(u)))
            {
                continue;
            }
            if resource == "pods" {
                if self.get("pods", name).is_some_and(|p| !deleting(p)) {
                    self.delete_pod(name);
                }
            } else {
                self.remove(resource, name);
            }
        }
    }

    /// Runs the controllers until nothing changes (pods that are not
    /// deleted stay as they are: the script runs and ends them).
    pub(super) fn reconcile_cluster(&mut self) {
        for _ in 0..20 {
            let before = self.version();
            self.jobset_controller();
            self.job_controller();
            self.kubelet();
            self.garbage_collector();
            self.kueue_controller();
            if self.version() == before {
                return;
            }
        }
    }

    /// Schedules and starts a pod.
    pub(super) fn run(&mut self, pod: &str) {
        let now = self.now();
        let n = self
            .names("pods")
            .iter()
            .position(|p| p == pod)
            .unwrap_or(0);
        self.update("pods", pod, |p| {
            // A container with a readiness probe is not ready until the
            // probe succeeds ([`World::probe_succeeds`]).
            let probed = p["spec"]["containers"][0].get("readinessProbe").is_some();
            let ready = if probed { "False" } else { "True" };
            p["spec"]["nodeName"] = json!(format!("node-{n}"));
            p["status"] = json!({
                "phase": "Running",
                "podIP": format!("10.0.0.{}", n + 10),
                "hostIP": format!("192.0.2.{}", n + 10),
                "startTime": now,
                "qosClass": "Burstable",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
                    {"type": "Ready", "status": ready, "lastTransitionTime": now},
                ],
                "containerStatuses": [{
                    "name": "main", "ready": ready == "True", "started": true, "restartCount": 0,
                    "image": "ubuntu:24.04", "imageID": "docker.io/library/ubuntu@sha256:0",
                    "containerID": format!("containerd://{pod}"),
                    "state": {"running": {"startedAt": now}},
                }],
            });
        });
    }

    /// The kubelet's readiness probe of the pod's container succeeds (a
    /// worker's node has written its marker after setup): the container
    /// and the pod become `Ready`.
    pub(super) fn probe_succeeds(&mut self, pod: &str) {
        self.update("pods", pod, |p| {
            for c in p["status"]["conditions"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                if c["type"] == "Ready" || c["type"] == "ContainersReady" {
                    c["status"] = json!("True");
                }
            }
            p["status"]["containerStatuses"][0]["ready"] = json!(true);
        });
    }

    /// Starts every pod that waits; with no node that fits, the
    /// scheduler says so on each instead.
    pub(super) fn run_pending(&mut self) {
        for name in self.names("pods") {
            let Some(pod) = self.get("pods", &name) else {
                continue;
            };
            if pod["status"]["phase"] != "Pending" || deleting(pod) {
                continue;
            }
            match self.no_node.clone() {
                None => self.run(&name),
                Some(message) if !condition(pod, "PodScheduled") => {
                    let said = pod["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "PodScheduled" && c["message"] == message.as_str());
                    if !said {
                        let now = self.now();
                        self.update("pods", &name, |p| {
                            p["status"]["conditions"] = json!([{
                                "type": "PodScheduled", "status": "False",
                                "reason": "Unschedulable", "message": message,
                                "lastTransitionTime": now,
                            }]);
                        });
                    }
                }
                Some(_) => {}
            }
        }
    }

    /// Kueue: each JobSet gets its Workload, which says why it is not
    /// admitted; once it is, the JobSet is resumed.
    pub(super) fn kueue_controller(&mut self) {
        let Some(kueue) = self.kueue.clone() else {
            return;
        };
        for name in self.names("jobsets") {
            let Some(js) = self.get("jobsets", &name).cloned() else {
                continue;
            };
            if deleting(&js) {
                continue;
            }
            let uid = js["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let workload = format!("jobset-{name}-{}", &uid[uid.len().saturating_sub(5)..]);
            let reserved = json!({"type": "QuotaReserved", "status": "True",
                "reason": "QuotaReserved", "message": "Quota reserved in ClusterQueue team",
                "lastTransitionTime": "2026-11-28T00:00:00Z"});
            let (conditions, checks, admitted) = match (&kueue.no_quota, &kueue.check) {
                (Some(why), _) => (
                    json!([{"type": "QuotaReserved", "status": "False", "reason": "Pending",
                            "message": why, "lastTransitionTime": "2026-11-28T00:00:00Z"}]),
                    json!([]),
                    false,
                ),
                (None, Some((check, message))) => (
                    json!([reserved, {"type": "Admitted", "status": "False",
                        "reason": "NoChecks", "message": "The workload has not all checks ready",
                        "lastTransitionTime": "2026-11-28T00:00:00Z"}]),
                    json!([{"name": check, "state": "Pending", "message": message,
                            "lastTransitionTime": "2026-11-28T00:00:00Z"}]),
                    false,
                ),
                (None, None) => (
                    json!([reserved, {"type": "Admitted", "status": "True",
                        "reason": "Admitted", "message": "The workload is admitted",
                        "lastTransitionTime": "2026-11-28T00:00:00Z"}]),
                    json!([]),
                    true,
                ),
            };
            let status = json!({"conditions": conditions, "admissionChecks": checks});
            match self.get("workloads", &workload) {
                None => {
                    self.put(
                        "workloads",
                        json!({
                            "metadata": {"name": workload,
                                "labels": {"kueue.x-k8s.io/job-uid": uid},
                                "ownerReferences": [{
                                "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                "name": name, "uid": uid, "controller": true,
                                "blockOwnerDeletion": true}]},
                            "spec": {"queueName": "team", "podSets": []},
                            "status": status,
                        }),
                    );
                }
                Some(w) if w["status"] != status => {
                    self.update("workloads", &workload, |w| w["status"] = status);
                }
                Some(_) => {}
            }
            if admitted && js["spec"]["suspend"] == true {
                self.update("jobsets", &name, |js| js["spec"]["suspend"] = json!(false));
            }
        }
    }

    /// The pod's container ends with `code`; `message` is its
    /// termination message.
    pub(super) fn exit_with(&mut self, pod: &str, code: i32, message: Option<&str>) {
        let now = self.now();
        self.update("pods", pod, |p| {
            let started = p["status"]["startTime"].clone();
            p["status"]["phase"] = json!(if code == 0 { "Succeeded" } else { "Failed" });
            let mut terminated = json!({
                "exitCode": code,
                "reason": if code == 0 { "Completed" } else { "Error" },
                "startedAt": started, "finishedAt": now,
                "containerID": format!("containerd://{pod}"),
            });
            if let Some(m) = message {
                terminated["message"] = json!(m);
            }
            if let Some(cs) = p["status"]["containerStatuses"].as_array_mut() {
                for c in cs {
                    c["ready"] = json!(false);
                    c["started"] = json!(false);
                    c["state"] = json!({"terminated": terminated.clone()});
                }
            } else {
                p["status"]["containerStatuses"] = json!([{
                    "name": "main", "ready": false, "restartCount": 0, "image": "ubuntu:24.04",
                    "imageID": "", "state": {"terminated": terminated},
                }]);
            }
            if let Some(cs) = p["status"]["conditions"].as_array_mut() {
                for c in cs
                    .iter_mut()
                    .filter(|c| c["type"] == "Ready" || c["type"] == "ContainersReady")
                {
                    c["status"] = json!("False");
                    c["reason"] = json!("PodCompleted");
                }
            }
        });
    }

    pub(super) fn exit(&mut self, pod: &str, code: i32) {
        self.exit_with(pod, code, None);
    }

    /// Kubernetes takes the pod away (preemption, eviction, a lost node):
    /// the `DisruptionTarget` condition, then the kill.
    pub(super) fn disrupt(&mut self, pod: &str, reason: &str) {
        let now = self.now();
        self.update("pods", pod, |p| {
            let cs = p["status"]["conditions"].as_array_mut();
            let c = json!({"type": "DisruptionTarget", "status": "True", "reason": reason,
                           "message": "Kubernetes is taking the pod away", "lastTransitionTime": now});
            match cs {
                Some(cs) => cs.push(c),
                None => p["status"]["conditions"] = json!([c]),
            }
            p["metadata"]["deletionTimestamp"] = json!(now);
        });
    }

    /// The current pod of a node Job (the newest).
    pub(super) fn pod_of(&self, job: &str) -> String {
        let Some(j) = self.get("jobs", job) else {
            panic!("no Job {job}: {:?}", self.names("jobs"));
        };
        let uid = j["metadata"]["uid"].clone();
        self.names("pods")
            .into_iter()
            .rfind(|n| self.get("pods", n).is_some_and(|p| owned_by(p, &uid)))
            .unwrap_or_else(|| panic!("Job {job} has no pod"))
    }

    pub(super) fn uid(&self, resource: &str, name: &str) -> String {
        self.get(resource, name)
            .and_then(|o| o["metadata"]["uid"].as_str())
            .unwrap_or_else(|| panic!("no {resource} {name}"))
            .to_owned()
    }
}
