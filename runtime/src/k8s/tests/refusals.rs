//! What is refused before anything is created, the cluster that does not
//! answer, and logs kept in the state directory.

use super::driver::{self, Driver, tuning};
use super::fake::Fake;
use super::{DELAYED, RULES, launched, running};
use crate::backend::Report;
use crate::k8s::client;
use serde_json::json;

fn refused(d: &Driver) -> String {
    d.reports
        .iter()
        .find_map(|r| match r {
            Report::Refused(m) => Some(m.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("not refused: {:?}", d.reports))
}

fn start(setup: impl FnOnce(&mut super::fake::World)) -> Driver {
    let fake = Fake::default();
    setup(&mut fake.world());
    Driver::start_with(fake, driver::plan(DELAYED), tuning())
}

#[test]
fn a_cluster_without_jobset_is_refused_naming_the_crd() {
    let mut d = start(|w| w.crd = false);
    let m = refused(&d);
    assert!(m.contains("jobsets.jobset.x-k8s.io"), "{m}");
    assert!(m.contains("kubectl apply --server-side"), "{m}");
    assert!(d.writes().is_empty(), "nothing is created");
}

#[test]
fn rbac_denial_names_each_verb_and_resource() {
    let mut d = start(|w| {
        w.rules = json!([
            {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["*"]},
            {"apiGroups": [""], "resources": ["pods/log", "configmaps"], "verbs": ["*"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]},
        ]);
    });
    let m = refused(&d);
    assert!(
        m.contains("may not patch jobs.batch, create pods in"),
        "{m}"
    );
    assert!(m.contains("namespace `team`"), "{m}");
    assert!(m.contains("skyc build --target k8s --rbac"), "{m}");
    assert_eq!(d.writes(), [RULES], "nothing is created");
}

#[test]
fn an_incomplete_rules_list_is_confirmed_per_permission() {
    let mut d = start(|w| {
        w.incomplete = true;
        w.rules = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]}]);
    });
    // Everything is granted but nothing asked again; now with a gap.
    assert!(d.reports.iter().all(|r| !matches!(r, Report::Refused(_))));
    drop(d.writes());
    let mut d = start(|w| {
        w.incomplete = true;
        w.rules = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch", "create", "patch"]}]);
    });
    let m = refused(&d);
    assert!(
        m.contains("may not delete jobsets.jobset.x-k8s.io, delete pods, delete configmaps in"),
        "{m}"
    );
    let reviews = d
        .writes()
        .iter()
        .filter(|w| w.contains("selfsubjectaccessreviews"))
        .count();
    assert_eq!(reviews, 3);
}

#[test]
fn a_jobset_skyc_did_not_create_is_refused() {
    let mut d = start(|w| {
        w.put(
            "jobsets",
            json!({"metadata": {"name": "g"}, "spec": {"replicatedJobs": []}}),
        );
    });
    let m = refused(&d);
    assert!(m.contains("a JobSet `g` that skyc did not create"), "{m}");
    assert!(m.contains("kubectl delete jobset g -n team"), "{m}");
    assert_eq!(d.writes(), [RULES]);
    // One of another run of the same group: refused, saying so.
    let mut d = start(|w| {
        w.put(
            "jobsets",
            json!({"metadata": {"name": "g", "labels": {"skyc.io/group": "g"},
                   "annotations": {"skyc.io/run": "run-0"}}, "spec": {"replicatedJobs": []}}),
        );
    });
    assert!(refused(&d).contains("from another skyc run"));
    assert_eq!(d.writes(), [RULES]);
    // A ConfigMap of the group's name that is not skyc's.
    let mut d = start(|w| {
        w.put(
            "configmaps",
            json!({"metadata": {"name": "g-skyc"}, "data": {}}),
        );
    });
    assert!(refused(&d).contains("a ConfigMap `g-skyc` that skyc did not create"));
    assert_eq!(d.writes(), [RULES]);
}

#[test]
fn the_finished_jobset_of_an_earlier_run_is_replaced() {
    let old_uid = std::cell::RefCell::new(String::new());
    let old_cm = std::cell::RefCell::new(String::new());
    let mut d = start(|w| {
        let js = w.put(
            "jobsets",
            json!({"metadata": {"name": "g", "labels": {"skyc.io/group": "g"},
                   "annotations": {"skyc.io/run": "run-0"}},
                   "spec": {"replicatedJobs": []},
                   "status": {"terminalState": "Completed"}}),
        );
        *old_uid.borrow_mut() = js["metadata"]["uid"].as_str().unwrap().to_owned();
        // Its ConfigMap, which the garbage collector has not taken yet.
        let cm = w.put(
            "configmaps",
            json!({"metadata": {"name": "g-skyc", "labels": {"skyc.io/group": "g"},
                   "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                        "kind": "JobSet", "name": "g", "uid": js["metadata"]["uid"]}]},
                   "data": {"entrypoint.sh": "old"}}),
        );
        *old_cm.borrow_mut() = cm["metadata"]["uid"].as_str().unwrap().to_owned();
    });
    // Applied once the old JobSet is seen gone.
    std::thread::sleep(std::time::Duration::from_millis(700));
    d.settle();
    assert!(d.reports.iter().all(|r| !matches!(r, Report::Refused(_))));
    let mut want = vec![
        RULES.to_owned(),
        format!(
            "DELETE /apis/jobset.x-k8s.io/v1alpha2/namespaces/team/jobsets/g Background uid={}",
            old_uid.borrow()
        ),
        RULES.to_owned(),
        // The old ConfigMap is deleted before the new one is applied: the
        // collector, about to delete it, can never take the new one.
        format!(
            "DELETE {}/g-skyc Background uid={}",
            super::CM,
            old_cm.borrow()
        ),
    ];
    want.extend(super::applied().into_iter().skip(1));
    want.extend(launched(&d, 0, "trainer", 1, 0));
    want.extend(launched(&d, 1, "buffer", 1, 0));
    assert_eq!(d.writes(), want);
    let w = d.fake.world();
    let js = w.get("jobsets", "g").unwrap();
    assert_eq!(js["metadata"]["annotations"]["skyc.io/run"], "run-1");
    let cm = w.get("configmaps", "g-skyc").unwrap();
    assert_ne!(cm["metadata"]["uid"], old_cm.borrow().as_str());
    assert_eq!(
        cm["metadata"]["ownerReferences"][0]["uid"],
        js["metadata"]["uid"]
    );
}

#[test]
fn a_configmap_refused_for_good_takes_its_jobset_away() {
    let d = start(|w| w.fail("PATCH", "/configmaps/", Some(422), 1));
    let m = refused(&d);
    assert!(m.contains("ConfigMap `g-skyc`"), "{m}");
    assert!(
        d.fake.world().everything().is_empty(),
        "nothing of the refused group is left: {:?}",
        d.fake.world().everything()
    );
}

#[test]
fn a_supervisor_that_died_between_the_jobset_and_its_configmap_applies_the_configmap() {
    let plan = driver::plan(DELAYED);
    let fake = Fake::default();
    // This run's JobSet, applied; its ConfigMap never was.
    let jobset = crate::k8s::apply::prepare(&plan)
        .into_iter()
        .find(|o| o["kind"] == "JobSet")
        .unwrap();
    let uid = fake.world().put("jobsets", jobset)["metadata"]["uid"].clone();
    let mut d = Driver::start_with(fake, plan, tuning());
    let writes = d.writes();
    assert_eq!(
        writes[..2],
        [
            RULES.to_owned(),
            format!(
                "PATCH {}/g-skyc apply ConfigMap g-skyc manager=skyc",
                super::CM
            )
        ],
        "{writes:#?}"
    );
    let w = d.fake.world();
    let cm = w.get("configmaps", "g-skyc").expect("applied");
    assert_eq!(cm["metadata"]["ownerReferences"][0]["uid"], uid);
    assert_eq!(w.names("pods").len(), 2, "then the pods");
}

#[test]
fn a_group_already_applied_is_never_refused_by_its_next_supervisor() {
    let mut d = running(DELAYED);
    d.kill_supervisor();
    // The user's token lost its rights meanwhile.
    d.fake.world().rules = json!([]);
    d.restart_supervisor();
    assert!(d.reports.iter().all(|r| !matches!(r, Report::Refused(_))));
    assert!(
        d.reports
            .iter()
            .any(|r| matches!(r, Report::Error(m) if m.contains("RBAC"))),
        "{:?}",
        d.reports
    );
    // Rights back: supervision resumes; the trainer's end is seen.
    d.fake.world().rules = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pod = super::pod("trainer", 0, 0);
    d.cluster(|w| {
        w.exit(&pod, 0);
        w.reconcile_cluster();
    });
    assert_eq!(
        d.statuses(),
        [
            crate::policy::Status::Succeeded,
            crate::policy::Status::Running
        ]
    );
}

#[test]
fn a_cancel_before_the_group_was_applied_creates_nothing() {
    let fake = Fake::default();
    fake.world().down = true;
    let mut d = Driver::start_with(fake, driver::plan(DELAYED), tuning());
    d.cancel();
    d.cluster(|w| w.down = false);
    std::thread::sleep(std::time::Duration::from_millis(300));
    d.settle();
    assert!(!d.writes().iter().any(|w| w.contains("PATCH")));
    assert!(d.settled());
    assert_eq!(d.engine.group_status(), crate::policy::Status::Cancelled);
}

#[test]
fn an_unreachable_cluster_is_an_error_naming_its_api_server() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let message = rt.block_on(async {
        // Nothing listens on port 1 of the loopback address.
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let cluster = client::from_config(config).unwrap();
        client::probe(&cluster).await.unwrap_err()
    });
    assert!(message.contains("https://127.0.0.1:1/"), "{message}");
    assert!(message.contains("did not answer"), "{message}");
}

#[test]
fn pod_logs_are_kept_in_the_state_directory() {
    let fake = Fake::default();
    let mut t = tuning();
    t.logs = true;
    let mut d = Driver::start_with(fake, driver::plan(DELAYED), t);
    d.cluster(|w| w.reconcile_cluster());
    let pod = super::pod("trainer", 0, 0);
    d.cluster(|w| {
        // The API server puts each line's time before it.
        w.logs.insert(pod.clone(), "epoch 1\ndone\n".into());
        w.run_pending();
        w.exit(&pod, 0);
    });
    let dir = crate::paths::group_dir(&d.dir, driver::GID);
    let text = std::fs::read_to_string(crate::paths::log(&dir, "trainer", 0)).unwrap();
    assert_eq!(text, "epoch 1\ndone\n");
    let requested = d
        .fake
        .world()
        .requests
        .iter()
        .find(|r| r.path.ends_with("/log"))
        .map(|r| r.query.clone())
        .unwrap();
    assert!(requested.contains("container=main"), "{requested}");
    assert!(requested.contains("follow=true"), "{requested}");
    assert!(requested.contains("timestamps=true"), "{requested}");
}

#[test]
fn running_groups_report_where_each_node_runs() {
    let d = running(DELAYED);
    let nodes: Vec<_> = d
        .reports
        .iter()
        .filter_map(|r| match r {
            Report::Node(n) if !n.ip.is_empty() => Some(n.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    let trainer = nodes.iter().find(|n| n.task == 0).unwrap();
    assert_eq!(trainer.handle, "g-trainer-0-0");
    assert_eq!(trainer.hostname, "trainer-0.g");
    assert!(trainer.machine.starts_with("node-"));
    assert!(trainer.ip.starts_with("10.0.0."));
    assert_eq!(
        (trainer.rank, trainer.attempt, trainer.exit_code),
        (0, 0, None)
    );
}

#[test]
fn a_jobset_deleted_outside_skyc_ends_the_group_cancelled() {
    let mut d = running(DELAYED);
    d.cluster(|w| {
        w.remove("jobsets", "g");
        for job in w.names("jobs") {
            w.remove("jobs", &job);
        }
        for pod in w.names("pods") {
            w.remove("pods", &pod);
        }
    });
    assert!(d.reports.contains(&Report::Error(
        "the JobSet g was deleted outside skyc".into()
    )));
    assert_eq!(d.engine.group_status(), crate::policy::Status::Cancelled);
    assert_eq!(d.engine.restarts(0), (0, 0), "nothing restarted");
    assert!(d.writes().is_empty());
    assert!(d.settled());
}

#[test]
fn the_kubeconfig_of_the_plan_and_its_context_are_used() {
    let dir = std::env::temp_dir().join(format!("skyc-kubeconfig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n\
         clusters:\n- name: a\n  cluster: {server: 'https://127.0.0.1:1'}\n\
         - name: b\n  cluster: {server: 'https://127.0.0.2:1'}\n\
         users:\n- name: u\n  user: {token: t}\n\
         contexts:\n- name: a\n  context: {cluster: a, user: u, namespace: team-a}\n\
         - name: b\n  context: {cluster: b, user: u}\n",
    )
    .unwrap();
    let path = file.display().to_string();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (a, b, missing) = rt.block_on(async {
        (
            client::connect(Some(&path), None).await.unwrap(),
            client::connect(Some(&path), Some("b")).await.unwrap(),
            client::connect(Some(&path), Some("c")).await.unwrap_err(),
        )
    });
    assert_eq!(
        (a.server.as_str(), a.namespace.as_str()),
        ("https://127.0.0.1:1/", "team-a")
    );
    assert_eq!(
        (b.server.as_str(), b.namespace.as_str()),
        ("https://127.0.0.2:1/", "default")
    );
    assert!(missing.contains("context `c`"), "{missing}");
    // The check a client makes before submitting: no answer, the server named.
    let err = client::reach(Some(&path), Some("a")).unwrap_err();
    assert!(err.contains("https://127.0.0.1:1/"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
