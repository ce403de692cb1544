//! Putting a group on the cluster: the checks that refuse it before
//! anything is created, and the server-side apply of what the build
//! emits.
//!
//! Refusals, each naming what to do: the JobSet API is not installed; the
//! user may not do something the runtime needs (RBAC, checked with one
//! SelfSubjectRulesReview, confirmed per permission when the authorizer
//! cannot list its rules); a JobSet, ConfigMap or Secret of the group's
//! names exists that this run did not create.
//!
//! Ownership: the JobSet is applied first and the ConfigMap and Secret
//! after it, owned by it (an `ownerReference` to its uid), so whoever
//! deletes the JobSet (skyc, a user with kubectl, the next run of the
//! group) deletes them with it through the garbage collector, as it
//! deletes the pods. The reference does not block the owner's deletion,
//! which would need a further permission (`update` on
//! `jobsets/finalizers`); setting a reference at all needs `delete` on the
//! ConfigMap and Secret where the API server enforces owner-reference
//! permissions, which the runner's Role grants. An earlier run's
//! ConfigMap and Secret, left to the garbage collector, are deleted
//! before this run's are applied, so the collector never takes the new
//! ones; and a group whose ConfigMap or Secret is refused for good has its
//! JobSet deleted too.

use super::jobset::JobSet;
use super::objects;
use super::plan::{FIELD_MANAGER, GROUP_LABEL, Plan, RUN_ANNOTATION};
use super::retry;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, ResourceRule, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    SelfSubjectRulesReview, SelfSubjectRulesReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde_json::{Value, json};
use skyc_targets::k8s::rbac::{self, Permission};

/// The API group and version of JobSet.
pub const JOBSET_API: &str = "jobset.x-k8s.io/v1alpha2";

/// Why a group cannot be put on the cluster.
#[derive(Debug)]
pub enum Refusal {
    /// Final: the group ends FAILED_SETUP with this.
    Refused(String),
    /// The API server could not be asked; try again.
    Retry(kube::Error),
}

impl From<kube::Error> for Refusal {
    fn from(e: kube::Error) -> Self {
        Refusal::Retry(e)
    }
}

/// The objects as the runtime applies them: the plan's, in its
/// namespace, marked with the run's token.
pub fn prepare(plan: &Plan) -> Vec<Value> {
    plan.objects
        .iter()
        .map(|o| {
            let mut o = o.clone();
            o["metadata"]["namespace"] = json!(plan.namespace);
            o["metadata"]["annotations"][RUN_ANNOTATION] = json!(plan.token);
            o
        })
        .collect()
}

/// What adoption found.
#[derive(Debug)]
pub enum Found {
    /// This run's JobSet is there already (a supervisor restarted).
    Ours(Box<JobSet>),
    /// No JobSet of the group's name.
    Absent,
    /// The finished JobSet of an earlier skyc run of this group: replaced
    /// by this run (a managed job's cluster is gone once it ends; the
    /// JobSet stays only until the group runs again).
    Finished(Box<JobSet>),
}

/// The checks every adoption makes, in order: the JobSet API, the
/// user's permissions, the JobSet of the group's name.
pub async fn check(client: &Client, plan: &Plan) -> Result<Found, Refusal> {
    check_api(client).await?;
    check_permissions(client, plan).await?;
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &plan.namespace);
    match jobsets.get_opt(&plan.group).await? {
        None => Ok(Found::Absent),
        Some(js) if objects::run_of(&js.metadata) == Some(plan.token.as_str()) => {
            Ok(Found::Ours(Box::new(js)))
        }
        Some(js)
            if objects::run_of(&js.metadata).is_some()
                && js.metadata.labels.as_ref().and_then(|l| l.get(GROUP_LABEL))
                    == Some(&plan.group)
                && js.terminal_state().is_some() =>
        {
            Ok(Found::Finished(Box::new(js)))
        }
        Some(js) => Err(Refusal::Refused(taken(
            plan,
            "JobSet",
            &plan.group,
            &js.metadata,
        ))),
    }
}

async fn check_api(client: &Client) -> Result<(), Refusal> {
    let install = "install JobSet (v0.8 or later), e.g. `kubectl apply --server-side -f https://github.com/kubernetes-sigs/jobset/releases/download/v0.12.0/manifests.yaml`";
    match client.list_api_group_resources(JOBSET_API).await {
        Ok(list) if list.resources.iter().any(|r| r.name == "jobsets") => Ok(()),
        Ok(_) => Err(Refusal::Refused(format!(
            "the cluster serves {JOBSET_API} without `jobsets`: the JobSet CRD (jobsets.jobset.x-k8s.io) is missing; {install}"
        ))),
        Err(e) if retry::not_found(&e) => Err(Refusal::Refused(format!(
            "the cluster does not serve {JOBSET_API}: the JobSet CRD (jobsets.jobset.x-k8s.io) is not installed; {install}"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// Every permission the group needs, from the user's rules in the
/// namespace; those the rules do not show are asked one by one when the
/// authorizer says its list is incomplete.
async fn check_permissions(client: &Client, plan: &Plan) -> Result<(), Refusal> {
    let reviews: Api<SelfSubjectRulesReview> = Api::all(client.clone());
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(plan.namespace.clone()),
        },
        ..SelfSubjectRulesReview::default()
    };
    let answer = reviews.create(&PostParams::default(), &review).await?;
    let status = answer.status.unwrap_or_default();
    let secrets = plan.object("Secret").is_some();
    let mut missing = Vec::new();
    let execs = plan.hold || plan.pool_job.is_some() || plan.files_pod.is_some();
    for p in rbac::needed(secrets, execs) {
        for verb in p.verbs {
            if !status.resource_rules.iter().any(|r| grants(r, p, verb)) {
                missing.push((p, *verb));
            }
        }
    }
    if status.incomplete && !missing.is_empty() {
        let access: Api<SelfSubjectAccessReview> = Api::all(client.clone());
        let mut still = Vec::new();
        for (p, verb) in missing {
            let (resource, subresource) = match p.resource.split_once('/') {
                Some((r, s)) => (r, Some(s.to_owned())),
                None => (p.resource, None),
            };
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(p.group.to_owned()),
                        resource: Some(resource.to_owned()),
                        subresource,
                        verb: Some((*verb).to_owned()),
                        namespace: Some(plan.namespace.clone()),
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            let answer = access.create(&PostParams::default(), &review).await?;
            if !answer.status.is_some_and(|s| s.allowed) {
                still.push((p, verb));
            }
        }
        missing = still;
    }
    if missing.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = missing
        .iter()
        .map(|(p, verb)| format!("{verb} {}", p.display_resource()))
        .collect();
    Err(Refusal::Refused(format!(
        "RBAC: the Kubernetes user{} may not {} in namespace `{}`; `skyc build --target k8s --rbac` prints the Role ({}) skyc needs there",
        plan.context
            .as_deref()
            .map(|c| format!(" of context `{c}`"))
            .unwrap_or_default(),
        list.join(", "),
        plan.namespace,
        rbac::ROLE,
    )))
}

/// Whether a rule of a rules review grants `verb` on `p`. Rules limited
/// to some resource names grant nothing here: the runtime creates and
/// lists.
fn grants(rule: &ResourceRule, p: &Permission, verb: &str) -> bool {
    let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    let resources = rule.resources.as_deref().unwrap_or_default();
    let resource_ok = match p.resource.split_once('/') {
        Some((parent, _)) => resources
            .iter()
            .any(|r| r == "*" || r == p.resource || *r == format!("{parent}/*")),
        None => any(resources, p.resource),
    };
    rule.resource_names.as_ref().is_none_or(Vec::is_empty)
        && any(groups, p.group)
        && resource_ok
        && any(&rule.verbs, verb)
}

/// The refusal for an object of the group's names that this run did not
/// create.
fn taken(plan: &Plan, kind: &str, name: &str, meta: &ObjectMeta) -> String {
    let ns = &plan.namespace;
    let skyc = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(GROUP_LABEL))
        .is_some();
    let remove = format!("`kubectl delete {} {name} -n {ns}`", kind.to_lowercase());
    if skyc {
        format!(
            "a {kind} `{name}` from another skyc run of this group is in namespace `{ns}`; cancel that run, or remove it ({remove}), then run again"
        )
    } else {
        format!(
            "a {kind} `{name}` that skyc did not create is in namespace `{ns}`; rename the group, choose another --namespace, or remove it ({remove})"
        )
    }
}

/// Deletes the finished JobSet of an earlier run (its uid as
/// precondition, so a JobSet made since is never touched); gone already
/// is done.
pub async fn remove_finished(client: &Client, plan: &Plan, old: &JobSet) -> Result<(), Refusal> {
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), &plan.namespace);
    let params = kube::api::DeleteParams::background().preconditions(kube::api::Preconditions {
        uid: old.metadata.uid.clone(),
        resource_version: None,
    });
    match jobsets.delete(&plan.group, &params).await {
        Ok(_) => Ok(()),
        Err(e) if retry::not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Applies the group's objects (server-side, field manager `skyc`) after
/// checking that no ConfigMap or Secret of theirs belongs to something
/// else: the JobSet, then what it owns ([`apply_owned`]). Returns the
/// JobSet as created.
pub async fn apply(client: &Client, plan: &Plan) -> Result<JobSet, Refusal> {
    let objects = prepare(plan);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let ns = &plan.namespace;
    for o in &objects {
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        match o["kind"].as_str() {
            Some("ConfigMap") => {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
                let meta = api.get_opt(name).await?.map(|c| c.metadata);
                ensure_free(plan, "ConfigMap", name, meta.as_ref())?;
                remove_orphan(&api, name, meta.as_ref()).await?;
            }
            Some("Secret") => {
                let api: Api<Secret> = Api::namespaced(client.clone(), ns);
                let meta = api.get_opt(name).await?.map(|s| s.metadata);
                ensure_free(plan, "Secret", name, meta.as_ref())?;
                remove_orphan(&api, name, meta.as_ref()).await?;
            }
            _ => {}
        }
    }
    if let Some(other) = objects
        .iter()
        .map(|o| o["kind"].as_str())
        .find(|k| !matches!(k, Some("ConfigMap" | "Secret" | "JobSet")))
    {
        return Err(Refusal::Refused(format!(
            "the plan holds an object of kind {other:?}, which skyc does not apply"
        )));
    }
    let Some(o) = objects.iter().find(|o| o["kind"] == "JobSet") else {
        return Err(Refusal::Refused("the plan holds no JobSet".into()));
    };
    let name = o["metadata"]["name"].as_str().unwrap_or_default();
    let jobset = patch::<JobSet>(client, ns, name, &params, o).await?;
    match apply_owned(client, plan, &jobset).await {
        Err(Refusal::Refused(why)) => {
            // Refused for good: the JobSet goes too, so that nothing of
            // the refused group is left to stand in the way of its next
            // run (asked once; the group ends either way).
            let _ = remove_finished(client, plan, &jobset).await;
            Err(Refusal::Refused(why))
        }
        Err(e) => Err(e),
        Ok(()) => Ok(jobset),
    }
}

/// An earlier run's ConfigMap or Secret, owned by its JobSet, which is
/// gone (this run's is not applied yet): the garbage collector may be
/// about to delete it. Deleted now (its uid as precondition), so that it
/// can never take this run's, applied next, with it.
async fn remove_orphan<K>(
    api: &Api<K>,
    name: &str,
    meta: Option<&ObjectMeta>,
) -> Result<(), Refusal>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some(meta) = meta.filter(|m| m.owner_references.as_ref().is_some_and(|r| !r.is_empty()))
    else {
        return Ok(());
    };
    let params = kube::api::DeleteParams::background().preconditions(kube::api::Preconditions {
        uid: meta.uid.clone(),
        resource_version: None,
    });
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(e) if retry::not_found(&e) || retry::code(&e) == Some(409) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Applies the group's ConfigMap and Secret owned by its JobSet, those
/// not there yet as such: when the JobSet was just applied, and when a
/// supervisor adopts a run whose JobSet is there (one that died between
/// the two applies left them missing). What is there already, owned by
/// this JobSet, is not written again.
pub async fn apply_owned(client: &Client, plan: &Plan, jobset: &JobSet) -> Result<(), Refusal> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let ns = &plan.namespace;
    let owner = owner_reference(jobset);
    let owned = |meta: Option<ObjectMeta>| {
        meta.and_then(|m| m.owner_references).is_some_and(|refs| {
            refs.iter()
                .any(|r| Some(&r.uid) == jobset.metadata.uid.as_ref())
        })
    };
    for mut o in prepare(plan) {
        let name = o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        o["metadata"]["ownerReferences"] = json!([owner]);
        match o["kind"].as_str() {
            Some("ConfigMap") => {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
                if !owned(api.get_opt(&name).await?.map(|c| c.metadata)) {
                    patch::<ConfigMap>(client, ns, &name, &params, &o).await?;
                }
            }
            Some("Secret") => {
                let api: Api<Secret> = Api::namespaced(client.clone(), ns);
                if !owned(api.get_opt(&name).await?.map(|c| c.metadata)) {
                    patch::<Secret>(client, ns, &name, &params, &o).await?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A reference to the JobSet as the owner of what the group needs.
pub fn owner_reference(jobset: &JobSet) -> Value {
    json!({
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "name": jobset.metadata.name,
        "uid": jobset.metadata.uid,
    })
}

/// A ConfigMap or Secret of the group's name may be replaced only if
/// skyc made it for this group (an earlier run's).
fn ensure_free(
    plan: &Plan,
    kind: &str,
    name: &str,
    meta: Option<&ObjectMeta>,
) -> Result<(), Refusal> {
    match meta {
        Some(meta)
            if meta.labels.as_ref().and_then(|l| l.get(GROUP_LABEL)) != Some(&plan.group) =>
        {
            Err(Refusal::Refused(taken(plan, kind, name, meta)))
        }
        _ => Ok(()),
    }
}

async fn patch<K>(
    client: &Client,
    ns: &str,
    name: &str,
    params: &PatchParams,
    o: &Value,
) -> Result<K, Refusal>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    api.patch(name, params, &Patch::Apply(o))
        .await
        .map_err(|e| {
            if retry::is_transient(&e) {
                Refusal::Retry(e)
            } else {
                Refusal::Refused(format!(
                    "applying {} `{name}` in namespace `{ns}`: {}",
                    K::kind(&()),
                    retry::describe(&e)
                ))
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(resource: &'static str, group: &'static str) -> Permission {
        Permission {
            group,
            resource,
            verbs: &["get"],
            secrets_only: false,
            exec_only: false,
            optional: false,
        }
    }

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> ResourceRule {
        let s = |v: &[&str]| Some(v.iter().map(|x| (*x).to_owned()).collect());
        ResourceRule {
            api_groups: s(groups),
            resources: s(resources),
            verbs: verbs.iter().map(|x| (*x).to_owned()).collect(),
            resource_names: None,
        }
    }

    #[test]
    fn rules_grant_by_group_resource_and_verb_with_wildcards() {
        let jobsets = perm("jobsets", "jobset.x-k8s.io");
        assert!(grants(
            &rule(&["jobset.x-k8s.io"], &["jobsets"], &["get"]),
            &jobsets,
            "get"
        ));
        assert!(grants(&rule(&["*"], &["*"], &["*"]), &jobsets, "delete"));
        assert!(!grants(
            &rule(&["batch"], &["jobsets"], &["get"]),
            &jobsets,
            "get"
        ));
        assert!(!grants(
            &rule(&["jobset.x-k8s.io"], &["jobsets"], &["list"]),
            &jobsets,
            "get"
        ));
        let log = perm("pods/log", "");
        assert!(grants(&rule(&[""], &["pods/log"], &["get"]), &log, "get"));
        assert!(grants(&rule(&[""], &["pods/*"], &["get"]), &log, "get"));
        assert!(!grants(&rule(&[""], &["pods"], &["get"]), &log, "get"));
        let mut named = rule(&[""], &["pods/log"], &["get"]);
        named.resource_names = Some(vec!["one".into()]);
        assert!(!grants(&named, &log, "get"));
    }
}
