//! The observer and the typed JobSet on their own, over objects the
//! script's controllers write.

use super::DELAYED;
use super::driver::plan;
use super::fake::World;
use crate::backend::Report;
use crate::k8s::jobset::JobSet;
use crate::k8s::objects::Objects;
use crate::k8s::observe::observe;
use crate::k8s::{LAUNCHED_ANNOTATION, Plan};
use crate::policy::{Engine, Event, Phase};
use crate::reconciler::goal::Goal;
use serde_json::{Value, json};

/// The world's objects as the backend's cache holds them.
fn objects(w: &World) -> Objects {
    let mut o = Objects::default();
    for name in w.names("jobsets") {
        o.jobset = serde_json::from_value(w.get("jobsets", &name).unwrap().clone()).ok();
    }
    for name in w.names("jobs") {
        o.jobs.insert(
            name.clone(),
            serde_json::from_value(w.get("jobs", &name).unwrap().clone()).unwrap(),
        );
    }
    for name in w.names("pods") {
        // As the watcher keeps it: what the runtime reads of a pod must
        // be what it keeps.
        o.pods.insert(
            name.clone(),
            std::sync::Arc::new(crate::k8s::watch::slim(
                serde_json::from_value(w.get("pods", &name).unwrap().clone()).unwrap(),
            )),
        );
    }
    o
}

/// The group applied, every task launched at attempt 0: recorded on the
/// JobSet and its pods created.
fn applied(plan: &Plan) -> World {
    let mut w = World::default();
    for o in crate::k8s::apply::prepare(plan) {
        let resource = match o["kind"].as_str() {
            Some("JobSet") => "jobsets",
            Some("ConfigMap") => "configmaps",
            _ => "secrets",
        };
        w.put(resource, o);
    }
    w.reconcile_cluster();
    for t in 0..plan.spec.tasks.len() {
        w.update("jobsets", "g", |js| {
            js["metadata"]["annotations"][format!("{LAUNCHED_ANNOTATION}{t}")] = json!("0");
        });
        let js: JobSet = serde_json::from_value(w.get("jobsets", "g").unwrap().clone()).unwrap();
        for rank in 0..plan.spec.tasks[t].num_nodes {
            let mut pod = plan.node_pod(t, rank, 0, &js);
            pod["status"] = json!({"phase": "Pending"});
            w.put("pods", pod);
        }
    }
    w
}

fn events(plan: &Plan, w: &World) -> Vec<Event> {
    let mut engine = Engine::new(plan.spec.clone());
    engine.start();
    observe(plan, &objects(w), &Goal::from_engine(&engine))
        .into_iter()
        .filter_map(|r| match r {
            Report::Event { event, .. } => Some(event),
            _ => None,
        })
        .collect()
}

#[test]
fn a_failed_setup_is_told_as_setup() {
    let plan = plan(DELAYED);
    let mut w = applied(&plan);
    let pod = "g-trainer-0-0".to_owned();
    w.run(&pod);
    w.exit_with(&pod, 3, Some("setup\n"));
    assert!(events(&plan, &w).contains(&Event::NodeExited {
        task: 0,
        attempt: 0,
        node: 0,
        phase: Phase::Setup,
        code: 3,
    }));
}

#[test]
fn unschedulable_pods_and_a_suspended_jobset_queue_their_tasks() {
    let plan = plan(DELAYED);
    let mut w = applied(&plan);
    let pod = "g-trainer-0-0".to_owned();
    w.update("pods", &pod, |p| {
        p["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]);
    });
    assert_eq!(
        events(&plan, &w),
        [Event::TaskQueued {
            task: 0,
            attempt: 0
        }]
    );
    // Why, in the scheduler's words; the other task's pod is not
    // scheduled yet, with no word of why: no reason.
    assert_eq!(
        waiting(&plan, &w),
        [
            Some("Kubernetes: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu.".into()),
            None
        ]
    );
    // Kueue holds the whole JobSet.
    w.update("jobsets", "g", |js| js["spec"]["suspend"] = json!(true));
    assert_eq!(
        events(&plan, &w),
        [
            Event::TaskQueued {
                task: 0,
                attempt: 0
            },
            Event::TaskQueued {
                task: 1,
                attempt: 0
            }
        ]
    );
    let suspended = waiting(&plan, &w);
    assert!(
        suspended.iter().all(|w| w
            .as_deref()
            .is_some_and(|w| w.contains("the JobSet is suspended"))),
        "{suspended:?}"
    );
    // Running: no reason.
    w.update("jobsets", "g", |js| js["spec"]["suspend"] = json!(false));
    for pod in w.names("pods") {
        w.run(&pod);
    }
    assert_eq!(waiting(&plan, &w), [None, None]);
}

/// Each task's waiting reason, as observed.
fn waiting(plan: &Plan, w: &World) -> Vec<Option<String>> {
    let mut engine = Engine::new(plan.spec.clone());
    engine.start();
    observe(plan, &objects(w), &Goal::from_engine(&engine))
        .into_iter()
        .filter_map(|r| match r {
            Report::Waiting { why, .. } => Some(why),
            _ => None,
        })
        .collect()
}

/// A pod missing once its attempt is launched was taken away: lost. An
/// attempt not launched yet has no pods: waiting.
#[test]
fn a_missing_pod_is_lost_once_launched_and_waited_for_before() {
    let plan = plan(DELAYED);
    let mut w = applied(&plan);
    w.remove("pods", "g-trainer-0-0");
    assert!(events(&plan, &w).contains(&Event::NodeLost {
        task: 0,
        attempt: 0,
        node: 0
    }));
    w.update("jobsets", "g", |js| {
        js["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(&format!("{LAUNCHED_ANNOTATION}0"));
    });
    assert!(events(&plan, &w).is_empty());
}

/// Every accepted example and conformance fixture that lowers: its
/// JobSet reads into the typed resource and writes back unchanged.
#[test]
fn the_typed_jobset_round_trips_every_lowered_group() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["examples", "tests/fixtures/check/accept"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "yaml") {
                files.push(entry.path());
            }
        }
    }
    let mut checked = 0;
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let c = skyc_compiler::compile(
            "f.yaml",
            text.as_bytes(),
            &skyc_compiler::Options::default(),
        );
        let Some(group) = c.group else { continue };
        let options = skyc_targets::k8s::Options::default();
        // The build's JobSet, and the runtime's anchor.
        let mut objects = skyc_targets::k8s::lower(&group, &options).objects;
        objects.extend(skyc_targets::k8s::pods::lower(&group, &options).objects);
        for o in objects.iter().filter(|o| o["kind"] == "JobSet") {
            let typed: JobSet = serde_json::from_value(o.clone())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let back: Value = serde_json::to_value(&typed).unwrap();
            assert_eq!(&back, o, "{}", path.display());
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} JobSets checked");
}

/// A pipeline's node is its own pod, named and hosted as a group's: an
/// end is told for that rank only.
#[test]
fn a_step_node_is_read_from_its_own_pod() {
    let plan = plan(
        "name: g\nexecution: serial\n---\nname: train\nnum_nodes: 3\nrun: t\n---\nname: eval\nrun: e\n",
    );
    assert_eq!(plan.pod_of(0, 2, 0), "g-train-2-0");
    assert_eq!(plan.hostname(0, 2), "train-2.g");
    let mut w = applied(&plan);
    assert_eq!(w.names("jobs"), ["g-skyc-gate-0"]);
    let pod = plan.pod_of(0, 1, 0);
    let meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta =
        serde_json::from_value(w.get("pods", &pod).unwrap()["metadata"].clone()).unwrap();
    assert_eq!(crate::k8s::objects::node_of(&meta), Some(("train", 1)));
    w.run(&pod);
    w.exit(&pod, 3);
    assert_eq!(
        events(&plan, &w),
        [Event::NodeExited {
            task: 0,
            attempt: 0,
            node: 1,
            phase: Phase::Run,
            code: 3,
        }]
    );
}

/// A pod held back by an init container (a bucket's sidecar restarting
/// because it cannot mount) says so, by the container's name; the task's
/// own container says it plainly; starting says nothing.
#[test]
fn a_pods_wait_names_the_init_container_that_holds_it() {
    let pod = |status: Value| -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": status})).unwrap()
    };
    let waiting = |name: &str, reason: &str, message: Option<&str>| {
        json!({"name": name, "ready": false, "restartCount": 3, "image": "i", "imageID": "",
               "state": {"waiting": {"reason": reason, "message": message}}})
    };
    let held = pod(json!({
        "phase": "Pending",
        "initContainerStatuses": [waiting("skyc-bucket-0", "CrashLoopBackOff",
                                          Some("back-off 40s restarting failed container"))],
        "containerStatuses": [waiting("main", "PodInitializing", None)],
    }));
    assert_eq!(
        crate::k8s::objects::container_waiting(&held).as_deref(),
        Some("skyc-bucket-0: CrashLoopBackOff: back-off 40s restarting failed container")
    );
    let own = pod(json!({
        "phase": "Pending",
        "containerStatuses": [waiting("main", "ImagePullBackOff", None)],
    }));
    assert_eq!(
        crate::k8s::objects::container_waiting(&own).as_deref(),
        Some("ImagePullBackOff")
    );
    let starting = pod(json!({
        "phase": "Pending",
        "initContainerStatuses": [waiting("skyc-files", "PodInitializing", None)],
        "containerStatuses": [waiting("main", "ContainerCreating", None)],
    }));
    assert_eq!(crate::k8s::objects::container_waiting(&starting), None);
}
