//! A pool on Kubernetes (`skyc pool apply --target k8s`): each worker a
//! group of the runtime's layout whose nodes hold after setup
//! (`skyc_targets::k8s::worker`), and each job started in its worker's
//! pods ([`super::exec`]).
//!
//! Every worker is made from one stored plan (the supervisor hands each
//! new worker the pool's plan as it is), but each is its own JobSet, so
//! it needs its own name: the pool is lowered under a placeholder as long
//! as any worker's name ([`worker::placeholder`]), and the backend names
//! each worker's plan after its row (`{pool}-{n}`) when it adopts it
//! ([`Plan::named`]).

use super::plan::{Lowering, Plan, WithKubeconfig};
use crate::pool::{PoolSpec, Room};
use serde_json::Value;
use skyc_compiler::ir::{self, Group};
use skyc_compiler::{Diagnostic, Rule, Severity};
use skyc_targets::k8s::{self, worker};
use std::time::Duration;

/// A pool as the Kubernetes target runs it.
pub type PoolPlan = crate::pool::PoolPlan<Plan>;

impl WithKubeconfig for PoolPlan {
    fn set_kubeconfig(&mut self, kubeconfig: Option<String>) {
        self.worker.kubeconfig = kubeconfig;
    }
}

/// What `skyc pool apply` needs to plan a pool on a cluster.
pub struct PoolInput<'a> {
    pub group: &'a Group,
    pub pool: &'a ir::Pool,
    /// The pool's name (`-p`).
    pub name: &'a str,
    pub options: &'a k8s::Options,
    pub kubeconfig: Option<&'a str>,
    pub context: Option<&'a str>,
    pub grace: Duration,
    pub secrets: &'a [(String, String)],
    pub token: String,
}

impl PoolPlan {
    /// The pool's plan once the cluster answers (a pool that cannot reach
    /// it is never recorded), as [`Plan::for_run`].
    pub fn for_apply(input: &PoolInput<'_>) -> Result<(Option<Self>, Vec<Diagnostic>), String> {
        worker::check_pool_name(input.name)?;
        Plan::reached(
            input.group,
            input.options,
            (input.kubeconfig, input.context),
            input.grace,
            input.secrets,
            input.token.clone(),
            |group, lowering| Self::new(group, input.pool, input.name, lowering),
        )
    }

    /// The pool `pool` of the pool file `group`, named `name`, as
    /// `skyc build POOLFILE --target k8s` lowers its workers.
    pub fn new(
        group: &Group,
        pool: &ir::Pool,
        name: &str,
        lowering: &Lowering<'_>,
    ) -> Result<Self, Vec<Diagnostic>> {
        let placeholder = worker::placeholder(name);
        let mut named = group.clone();
        named.name.clone_from(&placeholder);
        let manifests = worker::lower(group, &placeholder, lowering.options);
        let mut plan = Plan::of(&named, manifests, lowering)?;
        // A worker whose setup fails is replaced by the pool, not
        // restarted.
        for t in &mut plan.spec.tasks {
            t.max_restarts_on_errors = 0;
            t.recover_on_exit_codes.clear();
        }
        let task = &group.tasks[0];
        let first = task.resources.candidates.first();
        let offer = Room {
            cpus: first.and_then(|c| c.cpus).map_or(0.0, |q| q.value),
            memory_gb: first.and_then(|c| c.memory_gb).map_or(0.0, |q| q.value),
            gpus: first
                .and_then(|c| c.accelerator.as_ref())
                .map_or(0.0, |a| a.count),
        };
        let mut templates = serde_json::to_value(&plan.templates).unwrap_or_default();
        rename(&mut templates, &placeholder, "");
        let made_of = serde_json::json!({
            "setup": task.setup,
            "templates": templates,
            "objects": plan.objects.iter().filter(|o| o["kind"] != "JobSet").collect::<Vec<_>>(),
        });
        let spec = PoolSpec::new(pool, task.num_nodes, offer, &made_of);
        Ok(Self {
            pool: spec,
            worker: plan,
        })
    }

    /// Every object of the first worker (`{pool}-1`) as the runtime starts
    /// it, for review.
    pub fn manifests(&self, pool: &str) -> Vec<Value> {
        let worker = self.worker.named(&worker::worker_name(pool, 1));
        let mut all = worker.objects.clone();
        for (task, t) in worker.spec.tasks.iter().enumerate() {
            let Some(template) = worker.templates.get(task) else {
                continue;
            };
            all.extend(
                (0..t.num_nodes).map(|rank| k8s::pods::node_pod(template, &worker.group, rank, 0)),
            );
        }
        all
    }
}

impl Plan {
    /// The plans of `num_jobs` jobs of `group` (`skyc run --pool`) on a
    /// pool whose workers are made from `self`, in rank order (`job` gives
    /// each its rank): the job's one task without its setup (the workers
    /// ran the pool's), where the workers are, with the values of its
    /// `secrets` (`secrets` over the file's, as for a group). `None` with
    /// the errors that prevent them; the lowering's warnings either way
    /// (what a job on this target does not apply, as for a group).
    pub fn pool_jobs(
        &self,
        group: &Group,
        grace: Duration,
        secrets: &[(String, String)],
        token: String,
        num_jobs: u32,
        job: impl Fn(u32) -> crate::pool::JobSpec,
    ) -> (Option<Vec<Plan>>, Vec<Diagnostic>) {
        let mut group = group.clone();
        let mut diagnostics = Vec::new();
        for t in &mut group.tasks {
            t.setup = None;
            // The job runs in its worker's pod, made before it: nothing
            // of its own is mounted there.
            let mut ignored = Vec::new();
            if t.workdir.take().is_some() {
                ignored.push("`workdir`");
            }
            if !std::mem::take(&mut t.file_mounts).is_empty() {
                ignored.push("`file_mounts`");
            }
            if !std::mem::take(&mut t.volumes).is_empty() {
                ignored.push("`volumes`");
            }
            if !ignored.is_empty() {
                diagnostics.push(
                    Diagnostic::new(
                        Rule::K8sIgnoredSetting,
                        t.name_span,
                        format!(
                            "`{}`: its {} not applied: a job on a Kubernetes pool runs in its \
                             worker's pod, where the pool's setup ran (give them to the pool)",
                            t.name,
                            if ignored.len() == 1 {
                                format!("{} is", ignored[0])
                            } else {
                                format!("{} are", ignored.join(" and "))
                            }
                        ),
                    )
                    .label("in this task")
                    .severity(Severity::Warning),
                );
            }
        }
        let options = k8s::Options {
            namespace: Some(self.namespace.clone()),
            ..Default::default()
        };
        let mut values = Vec::new();
        diagnostics.extend(crate::secrets::merge(&mut values, &group, secrets));
        let manifests = k8s::pods::lower(&group, &options);
        diagnostics.extend(manifests.diagnostics.iter().cloned());
        let plan = Plan::of(
            &group,
            manifests,
            &Lowering {
                options: &options,
                namespace: &self.namespace,
                context: self.context.clone(),
                grace,
                secrets: &values,
                token,
            },
        );
        let plan = match plan {
            Ok(plan) if !diagnostics.iter().any(Diagnostic::is_error) => plan,
            _ => return (None, diagnostics),
        };
        let plans = (0..num_jobs)
            .map(|rank| {
                let mut plan = plan.clone();
                plan.kubeconfig.clone_from(&self.kubeconfig);
                plan.pool_job = Some(job(rank));
                plan
            })
            .collect();
        (Some(plans), diagnostics)
    }

    /// This worker plan under the worker's own name (its row's name): the
    /// placeholder it was lowered under replaced everywhere it names
    /// something, and nowhere in the pool's scripts or secret values.
    pub fn named(&self, name: &str) -> Plan {
        let from = self.group.clone();
        let Ok(mut value) = serde_json::to_value(self) else {
            return self.clone();
        };
        // The user's scripts and values are carried verbatim.
        let mut kept = Vec::new();
        if let Some(objects) = value["objects"].as_array_mut() {
            for (i, o) in objects.iter_mut().enumerate() {
                let keep = match o["kind"].as_str() {
                    Some("Secret") => vec!["stringData", "data"],
                    Some("ConfigMap") => vec!["data"],
                    _ => Vec::new(),
                };
                for field in keep {
                    if let Some(v) = o.get_mut(field) {
                        kept.push((i, field, std::mem::take(v)));
                    }
                }
            }
        }
        rename(&mut value, &from, name);
        for (i, field, mut v) in kept {
            if field == "data"
                && let Some(entry) = v.get_mut("entrypoint.sh")
            {
                rename(entry, &from, name);
            }
            value["objects"][i][field] = v;
        }
        // What is not stored (`hold`, the role's) is carried over.
        let mut named: Plan = serde_json::from_value(value).unwrap_or_else(|_| self.clone());
        named.hold = self.hold;
        named
    }
}

/// Replaces `from` by `to` in every string of `value`.
fn rename(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(s) if s.contains(from) => *s = s.replace(from, to),
        Value::Array(items) => items.iter_mut().for_each(|v| rename(v, from, to)),
        Value::Object(map) => {
            let renamed: serde_json::Map<String, Value> = std::mem::take(map)
                .into_iter()
                .map(|(k, mut v)| {
                    rename(&mut v, from, to);
                    (k.replace(from, to), v)
                })
                .collect();
            *map = renamed;
        }
        _ => {}
    }
}
