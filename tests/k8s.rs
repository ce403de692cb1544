//! The Kubernetes target (`skyc build --target k8s`): manifests of every
//! example and pipeline, validated against the JobSet CRD and Kubernetes'
//! schemas, the rules no schema states, a DNS model proving that every
//! node's `{task}-{i}.{group}` (a pipeline step's node: its Indexed pod's
//! name) resolves, and a model of the JobSet controller proving when each
//! task or step starts and how the JobSet ends.

mod client;
mod controller;
mod dns;
mod order;
mod schema;
mod semantics;

use crate::examples::{example_texts as examples, examples_dir};
use crate::support::{render_human, root, skyc, snapshots, yaml_files};
use serde_json::{Value, json};
use skyc_compiler::ir::{Execution, Group};
use skyc_compiler::{Compilation, Options, Rule, compile};
use skyc_targets::k8s::{self, Manifests, emit};

/// Compiles and lowers; the lowering's diagnostics are merged into the
/// compilation, as the CLI does.
fn build(name: &str, text: &str, options: &k8s::Options) -> (Compilation, Option<Manifests>) {
    let mut c = compile(name, text.as_bytes(), &Options::default());
    let manifests = c.group.as_ref().map(|g| k8s::lower(g, options));
    if let Some(m) = &manifests {
        c.diagnostics.extend(m.diagnostics.iter().cloned());
        c.diagnostics
            .sort_by_key(|d| (d.primary.span.start, d.primary.span.end, d.rule));
        if m.has_errors() {
            c.group = None;
        }
    }
    (c, manifests)
}

/// Everything the emitted objects must satisfy.
fn problems(group: &Group, options: &k8s::Options, objects: &[Value]) -> Vec<String> {
    let mut out = schema::validate(objects);
    out.extend(semantics::check(objects));
    out.extend(dns_problems(group, objects));
    out.extend(order_problems(group, objects));
    out.extend(contract_problems(group, objects));
    if !group.tasks.iter().all(|t| t.secrets.is_empty()) {
        let values: Vec<(String, String)> = group
            .tasks
            .iter()
            .flat_map(|t| t.secrets.iter().map(|s| (s.clone(), "value".to_owned())))
            .collect();
        out.extend(schema::validate(&[k8s::secret(group, options, &values)]));
    }
    // What a kubectl apply reads back must be what was built.
    let text = emit::render(objects, emit::Format::Yaml);
    let mut d = skyc_compiler::Diagnostics::default();
    let docs = skyc_compiler::yaml::Reader::read(
        &text,
        skyc_compiler::yaml::Budget {
            max_nodes: 10_000_000,
            max_bytes: 256 << 20,
            ..Default::default()
        },
        &mut d,
    );
    if d.has_errors() || docs.len() != objects.len() {
        out.push("the YAML stream does not read back".to_owned());
    }
    out
}

/// The name the entrypoint waits for as node `i` of `task`: its
/// `await "..."` of the task's own nodes, with the shell's variables set.
fn entrypoint_host(objects: &[Value], group: &str, task: &str, i: u32) -> Option<String> {
    let script = objects[0]["data"]["entrypoint.sh"].as_str()?;
    let line = script
        .lines()
        .find(|l| l.trim_start().starts_with("ip=$(await \""))?;
    let form = line.split('"').nth(1)?;
    Some(
        form.replace("$group", group)
            .replace("$task", task)
            .replace("$i", &i.to_string()),
    )
}

/// For every node of every task, the name the entrypoint waits for
/// (`{task}-{i}.{group}`; in a pipeline, the step's Indexed pod
/// `{group}-{step}-0-{i}.{group}`) resolves, from every pod of the group,
/// to exactly that node's pod; and no other name exists.
fn dns_problems(group: &Group, objects: &[Value]) -> Vec<String> {
    let cluster = dns::Cluster::from_objects(objects, "default");
    let mut out = Vec::new();
    for s in &cluster.services {
        out.extend(schema::validate(std::slice::from_ref(&s.object)));
    }
    let mut expected = 0;
    for task in &group.tasks {
        for i in 0..task.num_nodes {
            expected += 1;
            let name = match group.execution {
                Execution::Parallel => format!("{}-{i}.{}", task.name, group.name),
                Execution::Serial => format!("{}-{}-0-{i}.{}", group.name, task.name, group.name),
            };
            let waited = entrypoint_host(objects, &group.name, &task.name, i);
            if waited.as_deref() != Some(name.as_str()) {
                out.push(format!("the entrypoint waits for {waited:?}, not {name}"));
            }
            let index = match group.execution {
                Execution::Parallel => "skyc.io/node-index",
                Execution::Serial => "batch.kubernetes.io/job-completion-index",
            };
            for from in &cluster.pods {
                let answer = cluster.resolve(from, &name);
                let ok = match answer.as_slice() {
                    [p] => {
                        let l = &cluster.pods[*p].labels;
                        l["skyc.io/task"] == json!(task.name) && l[index] == json!(i.to_string())
                    }
                    _ => false,
                };
                if !ok {
                    out.push(format!("{name} resolves to pods {answer:?} from a pod"));
                    break;
                }
            }
        }
    }
    let records = cluster.records();
    if records.len() != expected || records.values().any(|pods| pods.len() != 1) {
        out.push(format!(
            "{} DNS names for {expected} nodes: {:?}",
            records.len(),
            records.keys().collect::<Vec<_>>()
        ));
    }
    out
}

/// A group's tasks start together; a pipeline's steps one after another,
/// each once the one before succeeded. The JobSet completes when every
/// primary (every step) succeeded, and fails, creating nothing more, when
/// a Job fails for good; with a delay gate it waits for the runtime.
fn order_problems(group: &Group, objects: &[Value]) -> Vec<String> {
    let js = &objects[1];
    let names: Vec<String> = group.tasks.iter().map(|t| t.name.clone()).collect();
    let step = |rjob: &str| names.iter().position(|n| n == rjob);
    let mut out = Vec::new();
    let mut check =
        |what: &str, run: Result<order::Run, String>, waves: Vec<Vec<String>>, end| match run {
            Ok(r) if r.waves == waves && r.end == end => {}
            Ok(r) => out.push(format!(
                "{what}: created {:?} and ended {:?}; expected {waves:?}, {end:?}",
                r.waves, r.end
            )),
            Err(e) => out.push(format!("{what}: {e}")),
        };
    match group.execution {
        Execution::Serial => {
            let waves = |upto: usize| names[..=upto].iter().map(|n| vec![n.clone()]).collect();
            check(
                "every step succeeds",
                order::run(js, |_| order::Outcome::Succeeds),
                waves(names.len() - 1),
                order::End::Completed,
            );
            for k in 0..names.len() {
                check(
                    &format!("step {k} fails"),
                    order::run(js, |r| {
                        if step(r) == Some(k) {
                            order::Outcome::Fails
                        } else {
                            order::Outcome::Succeeds
                        }
                    }),
                    waves(k),
                    order::End::Failed,
                );
            }
        }
        Execution::Parallel => {
            let all: Vec<String> = js["spec"]["replicatedJobs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| r["name"].as_str().unwrap_or_default().to_owned())
                .collect();
            let gated = all.iter().any(|r| r == skyc_targets::k8s::names::GATE);
            check(
                "every task succeeds",
                order::run(js, |_| order::Outcome::Succeeds),
                vec![all.clone()],
                if gated {
                    order::End::Waiting
                } else {
                    order::End::Completed
                },
            );
            check(
                "every Job fails",
                order::run(js, |_| order::Outcome::Fails),
                vec![all],
                order::End::Failed,
            );
        }
    }
    out
}

/// SkyPilot's environment contract in every pod template: a Job Group's
/// pods know the group and their fixed rank; a step's pods no group, and
/// the rank the Job controller gives them.
fn contract_problems(group: &Group, objects: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for r in objects[1]["spec"]["replicatedJobs"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let job = &r["template"]["spec"];
        let labels = &job["template"]["metadata"]["labels"];
        let Some(task) = group
            .tasks
            .iter()
            .find(|t| labels["skyc.io/task"] == json!(t.name))
        else {
            continue;
        };
        let env = job["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let var = |n: &str| env.iter().find(|e| e["name"] == n).cloned();
        let at = r["name"].as_str().unwrap_or_default();
        let (group_name, rank, size) = match group.execution {
            Execution::Parallel => (
                Some(json!({"name": "SKYPILOT_JOBGROUP_NAME", "value": group.name})),
                Some(json!({"name": "SKYPILOT_NODE_RANK", "value": labels["skyc.io/node-index"]})),
                1,
            ),
            Execution::Serial => (
                None,
                Some(
                    json!({"name": "SKYPILOT_NODE_RANK", "valueFrom": {"fieldRef": {
                    "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}),
                ),
                task.num_nodes,
            ),
        };
        if var("SKYPILOT_JOBGROUP_NAME") != group_name || var("SKYPILOT_NODE_RANK") != rank {
            out.push(format!(
                "{at}: SKYPILOT_JOBGROUP_NAME or SKYPILOT_NODE_RANK"
            ));
        }
        if var("SKYPILOT_NUM_NODES")
            != Some(json!({"name": "SKYPILOT_NUM_NODES", "value": task.num_nodes.to_string()}))
        {
            out.push(format!("{at}: SKYPILOT_NUM_NODES"));
        }
        if job["completions"] != json!(size) || job["parallelism"] != json!(size) {
            out.push(format!("{at}: {size} pods expected"));
        }
        if group.execution == Execution::Serial
            && (!r["template"]["metadata"]["annotations"]["skyc.io/termination-delay-seconds"]
                .is_null()
                || job["template"]["spec"]["hostname"].is_string())
        {
            out.push(format!("{at}: a step has a delay or a group hostname"));
        }
    }
    out
}

#[test]
fn manifests_of_every_example() {
    let settings = snapshots("k8s");
    // Buckets mounted through the sidecar (without it they are refused:
    // `a_mounted_bucket_is_refused_unless_the_sidecar_is_allowed`).
    let options = k8s::Options {
        bucket_mounts: k8s::BucketMounts::Sidecar {
            image: k8s::DEFAULT_RCLONE_IMAGE.into(),
        },
        ..k8s::Options::default()
    };
    settings.bind(|| {
        for (file, text) in examples() {
            let (c, manifests) = build(&file, &text, &options);
            let manifests = manifests.unwrap_or_else(|| panic!("{file}: {}", render_human(&c)));
            let mut snap = render_human(&c);
            if manifests.has_errors() {
                assert!(manifests.objects.is_empty());
            } else {
                let group = c.group.as_ref().unwrap();
                let p = problems(group, &options, &manifests.objects);
                assert!(p.is_empty(), "{file}:\n{}", p.join("\n"));
                snap.push_str(&emit::render(&manifests.objects, emit::Format::Yaml));
            }
            insta::assert_snapshot!(file.trim_end_matches(".yaml").to_owned(), snap);
        }
    });
}

#[test]
fn manifests_of_pipelines() {
    let settings = snapshots("k8s");
    let options = k8s::Options::default();
    settings.bind(|| {
        for path in yaml_files(&root().join("tests/fixtures/k8s-pipelines")) {
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            let (c, manifests) = build(&file, &text, &options);
            let group = c
                .group
                .as_ref()
                .unwrap_or_else(|| panic!("{file}: {}", render_human(&c)));
            assert_eq!(group.execution, Execution::Serial, "{file}");
            let manifests = manifests.unwrap();
            let p = problems(group, &options, &manifests.objects);
            assert!(p.is_empty(), "{file}:\n{}", p.join("\n"));
            let mut snap = render_human(&c);
            snap.push_str(&emit::render(&manifests.objects, emit::Format::Yaml));
            let stem = file.trim_end_matches(".yaml");
            insta::assert_snapshot!(format!("pipeline__{stem}"), snap);
        }
    });
}

#[test]
fn a_pipeline_is_a_chain_of_indexed_jobs() {
    let text = "name: p\n---\nname: a\nnum_nodes: 2\nresources:\n  job_recovery:\n    max_restarts_on_errors: 3\n    recover_on_exit_codes: [29, 0, 3]\nrun: x\n---\nname: b\nrun: x\n---\nrun: x\n";
    let (_, m) = lower_text(text, &k8s::Options::default());
    assert!(rules(&m).is_empty(), "{:?}", m.diagnostics);
    let spec = &m.objects[1]["spec"];
    let rjobs = spec["replicatedJobs"].as_array().unwrap();
    let names: Vec<&str> = rjobs.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b", "p-2"]);
    assert!(rjobs[0].get("dependsOn").is_none());
    assert_eq!(
        rjobs[1]["dependsOn"],
        json!([{"name": "a", "status": "Complete"}])
    );
    assert_eq!(
        rjobs[2]["dependsOn"],
        json!([{"name": "b", "status": "Complete"}])
    );
    assert_eq!(
        spec["successPolicy"],
        json!({"operator": "All", "targetReplicatedJobs": ["a", "b", "p-2"]})
    );
    assert!(spec.get("failurePolicy").is_none());
    let a = &rjobs[0]["template"]["spec"];
    assert_eq!(a["completionMode"], "Indexed");
    assert_eq!(
        (&a["completions"], &a["parallelism"]),
        (&json!(2), &json!(2))
    );
    // The step's budget and free exit codes, as a group task's.
    assert_eq!(a["backoffLimit"], 3);
    assert_eq!(a["podReplacementPolicy"], "Failed");
    assert_eq!(
        a["podFailurePolicy"]["rules"][1]["onExitCodes"]["values"],
        json!([3, 29])
    );
    let script = m.objects[0]["data"]["entrypoint.sh"].as_str().unwrap();
    assert!(script.contains("networking=0\n"), "steps wait for no peer");
    assert!(
        script.contains("tasks=(a b p-2)\n"),
        "task ids cover every step"
    );
}

#[test]
fn pipeline_names_that_cannot_name_jobs_or_pods_are_errors() {
    let o = k8s::Options::default();
    let (c, m) = lower_text(
        "name: p\n---\nname: a_b\nrun: x\n---\nname: c\nrun: x\n",
        &o,
    );
    assert_eq!(rules(&m), [Rule::K8sInvalidName]);
    assert!(
        render_human(&c).contains("g.yaml:3:7"),
        "{}",
        render_human(&c)
    );
    // No header: the pipeline is named after its first step.
    let (c, m) = lower_text("name: A\nrun: x\n---\nname: b\nrun: x\n", &o);
    assert_eq!(rules(&m), [Rule::K8sInvalidName]);
    assert!(render_human(&c).contains("named after its first step"));
    // The pods `{pipeline}-{step}-0-{i}-xxxxx`: 20 + 1 + 32 + 2 + 2 + 6 = 63 fits.
    let fits = format!(
        "name: {}\n---\nname: {}\nnum_nodes: 10\nrun: x\n---\nname: b\nrun: x\n",
        "p".repeat(20),
        "s".repeat(32)
    );
    assert!(rules(&lower_text(&fits, &o).1).is_empty());
    let long = fits.replace("num_nodes: 10", "num_nodes: 11");
    let (c, m) = lower_text(&long, &o);
    assert_eq!(rules(&m), [Rule::K8sInvalidName]);
    assert!(render_human(&c).contains("shorten the pipeline or step name by 1"));
    let huge = "name: p\n---\nname: a\nnum_nodes: 100001\nrun: x\n---\nname: b\nrun: x\n";
    assert_eq!(rules(&lower_text(huge, &o).1), [Rule::K8sUnsupported]);
    let most = huge.replace("100001", "100000");
    assert!(rules(&lower_text(&most, &o).1).is_empty());
}

#[test]
fn a_step_pinned_off_kubernetes_is_an_error_at_the_step() {
    let text = "name: p\n---\nname: a\nrun: x\n---\nname: b\nresources:\n  infra: aws\nrun: x\n";
    let (c, m) = lower_text(text, &k8s::Options::default());
    assert_eq!(rules(&m), [Rule::K8sUnsupported]);
    assert!(m.objects.is_empty());
    assert!(
        render_human(&c).contains("g.yaml:6:7"),
        "{}",
        render_human(&c)
    );
}

#[test]
fn namespace_and_queue() {
    let options = k8s::Options {
        namespace: Some("team-a".into()),
        queue: Some("user-queue".into()),
        ..k8s::Options::default()
    };
    let text = std::fs::read_to_string(
        examples_dir().join("rl-post-training-jobgroup__rlhf-math-jobgroup-cpu.yaml"),
    )
    .unwrap();
    let (c, m) = build("cpu.yaml", &text, &options);
    let m = m.unwrap();
    let group = c.group.as_ref().unwrap();
    assert!(problems(group, &options, &m.objects).is_empty());
    for o in &m.objects {
        assert_eq!(o["metadata"]["namespace"], "team-a");
    }
    let js = &m.objects[1];
    assert_eq!(
        js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
        "user-queue"
    );
    // Names resolve in the JobSet's namespace.
    let cluster = dns::Cluster::from_objects(&m.objects, "default");
    assert!(cluster.pods.iter().all(|p| p.namespace == "team-a"));
    assert!(
        cluster
            .records()
            .keys()
            .all(|k| k.ends_with(".rlhf-math-cpu.team-a.svc.cluster.local"))
    );
}

/// Every accepted conformance fixture either builds valid manifests or
/// fails with located diagnostics; none panics.
#[test]
fn every_accepted_fixture_builds_or_fails_located() {
    let options = k8s::Options {
        queue: Some("q".into()),
        ..k8s::Options::default()
    };
    let mut built = 0;
    let mut refused = 0;
    for path in yaml_files(&root().join("tests/fixtures/check/accept")) {
        let text = std::fs::read_to_string(&path).unwrap();
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let (c, m) = build(&file, &text, &options);
        c.check_invariants()
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let Some(m) = m else { continue };
        if m.has_errors() {
            refused += 1;
            assert!(m.objects.is_empty(), "{file}");
            for d in m.diagnostics.iter().filter(|d| d.is_error()) {
                assert!(
                    !d.primary.span.is_empty(),
                    "{file}: {} has no location",
                    d.rule
                );
            }
        } else {
            built += 1;
            let p = problems(c.group.as_ref().unwrap(), &options, &m.objects);
            assert!(p.is_empty(), "{file}:\n{}", p.join("\n"));
        }
    }
    assert!(
        built > 100 && refused > 0,
        "{built} built, {refused} refused"
    );
}

fn lower_text(text: &str, options: &k8s::Options) -> (Compilation, Manifests) {
    let (c, m) = build("g.yaml", text, options);
    let m = m.unwrap_or_else(|| panic!("{}", render_human(&c)));
    (c, m)
}

fn rules(m: &Manifests) -> Vec<Rule> {
    m.diagnostics.iter().map(|d| d.rule).collect()
}

#[test]
fn names_that_cannot_be_dns_labels_or_are_too_long_are_errors() {
    let o = k8s::Options::default();
    let (c, m) = lower_text(
        "name: My_Group\nexecution: parallel\n---\nname: a\nrun: x\n",
        &o,
    );
    assert_eq!(rules(&m), [Rule::K8sInvalidName]);
    assert!(render_human(&c).contains("My_Group"));
    let (_, m) = lower_text("name: g\nexecution: parallel\n---\nname: a_b\nrun: x\n", &o);
    assert_eq!(rules(&m), [Rule::K8sInvalidName]);
    // The Job `{group}-{task}-{i}-0`: 20 + 1 + 38 + 2 + 2 = 63 fits, one more does not.
    let fits = format!(
        "name: {}\nexecution: parallel\n---\nname: {}\nrun: x\n",
        "g".repeat(20),
        "t".repeat(38)
    );
    assert!(!lower_text(&fits, &o).1.has_errors());
    let long = fits.replace(&"t".repeat(38), &"t".repeat(39));
    let (c, m) = lower_text(&long, &o);
    assert_eq!(rules(&m), [Rule::K8sInvalidName]);
    assert!(render_human(&c).contains("shorten the group or task name by 1"));
    // The node index counts: 10 nodes make the last one `-9`, 11 make `-10`.
    let ten = fits.replace("run: x", "num_nodes: 10\nrun: x");
    assert!(!lower_text(&ten, &o).1.has_errors());
    let nodes = fits.replace("run: x", "num_nodes: 11\nrun: x");
    assert_eq!(rules(&lower_text(&nodes, &o).1), [Rule::K8sInvalidName]);
}

#[test]
fn recovery_maps_to_the_node_jobs() {
    let text = "name: g\nexecution: parallel\n---\nname: a\nnum_nodes: 2\nresources:\n  job_recovery:\n    max_restarts_on_errors: 3\n    recover_on_exit_codes: [29, 0, 3]\nrun: x\n";
    let (_, m) = lower_text(text, &k8s::Options::default());
    assert!(!m.has_errors());
    let rjobs = m.objects[1]["spec"]["replicatedJobs"].as_array().unwrap();
    assert_eq!(rjobs.len(), 2);
    for r in rjobs {
        let job = &r["template"]["spec"];
        assert_eq!(job["backoffLimit"], 3);
        assert_eq!(job["podReplacementPolicy"], "Failed");
        assert_eq!(job["template"]["spec"]["restartPolicy"], "Never");
        assert_eq!(
            job["podFailurePolicy"]["rules"],
            json!([
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {"action": "Ignore", "onExitCodes": {"containerName": "main", "operator": "In", "values": [3, 29]}},
            ])
        );
    }
}

#[test]
fn success_policy_and_delay_gate() {
    let o = k8s::Options::default();
    let all_primary = "name: g\nexecution: parallel\n---\nname: a\nrun: x\n---\nname: b\nrun: x\n";
    let (_, m) = lower_text(all_primary, &o);
    assert_eq!(
        m.objects[1]["spec"]["successPolicy"],
        json!({"operator": "All", "targetReplicatedJobs": ["a-0", "b-0"]})
    );
    let no_delay = "name: g\nexecution: parallel\nprimary_tasks: [a]\n---\nname: a\nnum_nodes: 2\nrun: x\n---\nname: b\nrun: x\n";
    let (_, m) = lower_text(no_delay, &o);
    assert_eq!(
        m.objects[1]["spec"]["successPolicy"]["targetReplicatedJobs"],
        json!(["a-0", "a-1"])
    );
    let delay = no_delay.replace(
        "primary_tasks: [a]",
        "primary_tasks: [a]\ntermination_delay: 30s",
    );
    let (_, m) = lower_text(&delay, &o);
    let spec = &m.objects[1]["spec"];
    assert_eq!(
        spec["successPolicy"]["targetReplicatedJobs"],
        json!(["a-0", "a-1", "skyc-gate"])
    );
    let gate = spec["replicatedJobs"].as_array().unwrap().last().unwrap();
    assert_eq!(gate["name"], "skyc-gate");
    assert_eq!(gate["template"]["spec"]["parallelism"], 0);
    let b = &spec["replicatedJobs"][2];
    assert_eq!(
        b["template"]["metadata"]["annotations"]["skyc.io/termination-delay-seconds"],
        "30"
    );
}

/// Past the API server's limit the JobSet is an error at the file's name,
/// found without building a pod template per node or step: 50 million
/// nodes would otherwise take far more memory than the machine has.
#[test]
fn jobsets_over_the_limit_are_errors_without_being_built() {
    let o = k8s::Options::default();
    let nodes = "name: g\nexecution: parallel\n---\nname: a\nnum_nodes: 50000000\nrun: x\n";
    let (c, m) = lower_text(nodes, &o);
    assert_eq!(rules(&m), [Rule::K8sTooLarge]);
    assert!(m.objects.is_empty());
    let human = render_human(&c);
    assert!(
        human.contains("larger than the 1572864 bytes") && human.contains("50000000 nodes"),
        "{human}"
    );
    let mut steps = String::from("name: p\n");
    for _ in 0..2000 {
        steps.push_str("---\nrun: x\n");
    }
    let (c, m) = lower_text(&steps, &o);
    assert_eq!(rules(&m), [Rule::K8sTooLarge]);
    assert!(render_human(&c).contains("this pipeline would be larger"));
    // Steps after the limit are still checked.
    steps.push_str("---\nresources:\n  infra: aws\nrun: x\n");
    let (_, m) = lower_text(&steps, &o);
    assert_eq!(rules(&m), [Rule::K8sTooLarge, Rule::K8sUnsupported]);
}

#[test]
fn kueue_podset_cap_is_a_warning() {
    let text = "name: g\nexecution: parallel\n---\nname: a\nnum_nodes: 9\nrun: x\n";
    let (_, m) = lower_text(text, &k8s::Options::default());
    assert!(rules(&m).is_empty(), "no queue, no Kueue");
    let queued = k8s::Options {
        queue: Some("q".into()),
        ..k8s::Options::default()
    };
    let (_, m) = lower_text(text, &queued);
    assert_eq!(rules(&m), [Rule::K8sPodSetCap]);
    assert!(!m.has_errors() && !m.objects.is_empty());
    let eight = text.replace("num_nodes: 9", "num_nodes: 8");
    assert!(rules(&lower_text(&eight, &queued).1).is_empty());
}

#[test]
fn pods_carry_resources_accelerators_volumes_ports_and_secrets() {
    let text = r#"name: g
execution: parallel
---
name: a
resources:
  infra: k8s
  cpus: 4+
  memory: 16
  accelerators: {H100: 1, A100-80GB: 1}
  ports: [8080, 9000-9001]
  labels: {team: ml}
volumes:
  /ckpt: ckpt-volume
  /scratch: {size: 100GB}
envs:
  COST: "$(price) $5"
secrets:
  HF_TOKEN: null
run: echo $COST
"#;
    let (_, m) = lower_text(text, &k8s::Options::default());
    assert!(!m.has_errors(), "{:?}", m.diagnostics);
    let pod = &m.objects[1]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"];
    let c = &pod["spec"]["containers"][0];
    assert_eq!(
        c["resources"],
        json!({"requests": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"},
               "limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}})
    );
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["values"],
        json!(["nvidia-h100-80gb", "nvidia-a100-80gb"])
    );
    assert_eq!(
        c["ports"],
        json!([{"containerPort": 8080}, {"containerPort": 9000}, {"containerPort": 9001}])
    );
    assert_eq!(pod["metadata"]["labels"]["team"], "ml");
    let env = c["env"].as_array().unwrap();
    assert!(env.contains(&json!({"name": "COST", "value": "$$(price) $$5"})));
    assert!(env.contains(&json!({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "g-secrets", "key": "HF_TOKEN"}}})));
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    assert_eq!(
        volumes[1],
        json!({"name": "volume-0", "persistentVolumeClaim": {"claimName": "ckpt-volume"}})
    );
    assert_eq!(
        volumes[2]["ephemeral"]["volumeClaimTemplate"]["spec"]["resources"]["requests"]["storage"],
        "100Gi"
    );
    // No secret value appears anywhere in the output.
    assert!(!emit::render(&m.objects, emit::Format::Yaml).contains("value: value"));
}

#[test]
fn settings_without_kubernetes_meaning_are_reported_at_the_task() {
    let text = "name: g\nexecution: parallel\n---\nname: a\nworkdir: .\nfile_mounts:\n  /data: s3://bucket\nresources:\n  use_spot: true\n  disk_tier: high\n  accelerators: T4:0.5\nrun: x\n";
    let (c, m) = lower_text(text, &k8s::Options::default());
    assert!(!m.has_errors());
    let human = render_human(&c);
    for needle in [
        "use_spot",
        "disk_tier",
        "workdir",
        "/data",
        "rounded up to 1",
    ] {
        assert!(human.contains(needle), "{needle}:\n{human}");
    }
    assert!(
        m.diagnostics
            .iter()
            .all(|d| d.rule == Rule::K8sIgnoredSetting)
    );
    let pinned = "name: g\nexecution: parallel\n---\nname: a\nresources:\n  infra: aws\nrun: x\n";
    assert_eq!(
        rules(&lower_text(pinned, &k8s::Options::default()).1),
        [Rule::K8sUnsupported]
    );
}

/// The bucket sidecar's program is POSIX sh (rclone's image has no bash)
/// and shellcheck-clean.
#[test]
fn the_bucket_sidecar_is_shellcheck_clean_sh() {
    let path = std::env::temp_dir().join(format!("skyc-k8s-bucket-{}.sh", std::process::id()));
    std::fs::write(&path, k8s::BUCKET_SIDECAR_SCRIPT).unwrap();
    if let Ok(status) = std::process::Command::new("dash")
        .arg("-n")
        .arg(&path)
        .status()
    {
        assert!(status.success(), "dash -n rejects the sidecar");
    }
    match std::process::Command::new("shellcheck")
        .args(["-s", "sh"])
        .arg(&path)
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "shellcheck:\n{}",
            String::from_utf8_lossy(&out.stdout)
        ),
        Err(_) => eprintln!("!!! SKIPPED: shellcheck is not installed"),
    }
    let _ = std::fs::remove_file(&path);
}

/// Without `--bucket-mounts sidecar` a mounted bucket is refused at the
/// mount; with it, each mounted bucket is a privileged rclone sidecar
/// whose `emptyDir` the task's container mounts at the destination, a
/// MOUNT_CACHED one with its cache and the grace period for its uploads;
/// the manifests are valid for Kubernetes' and JobSet's schemas.
#[test]
fn a_mounted_bucket_is_refused_unless_the_sidecar_is_allowed() {
    let text = "name: g\nexecution: parallel\n---\nname: trainer\nfile_mounts:\n  /policy:\n    \
                name: policy\n    mode: MOUNT\n  /ckpt:\n    source: s3://ckpts/run-1\n    mode: \
                MOUNT_CACHED\n  ~/data:\n    source: s3://data\n    mode: MOUNT\nrun: x\n---\n\
                name: eval\nfile_mounts:\n  /policy:\n    name: policy\nrun: x\n";
    let (c, m) = build("g.yaml", text, &k8s::Options::default());
    assert!(m.unwrap().has_errors());
    snapshots("k8s").bind(|| insta::assert_snapshot!("bucket_mounts_refused", render_human(&c)));

    let options = k8s::Options {
        bucket_mounts: k8s::BucketMounts::Sidecar {
            image: k8s::DEFAULT_RCLONE_IMAGE.into(),
        },
        ..k8s::Options::default()
    };
    // `~/data` cannot be a pod's volume: the one error left.
    let (c, m) = build("g.yaml", text, &options);
    let m = m.unwrap();
    assert_eq!(rules(&m), [Rule::K8sBucketMount], "{}", render_human(&c));
    let text = text.replace("~/data", "/data");
    let (c, m) = build("g.yaml", &text, &options);
    let m = m.unwrap();
    assert!(!m.has_errors(), "{}", render_human(&c));
    let group = c.group.as_ref().unwrap();
    let p = problems(group, &options, &m.objects);
    assert!(p.is_empty(), "{}", p.join("\n"));
    snapshots("k8s").bind(|| {
        insta::assert_snapshot!(
            "bucket_mounts_sidecar",
            emit::render(&m.objects, emit::Format::Yaml)
        )
    });
}

/// A GCS bucket is mounted by the same sidecar, through rclone's `:gcs:`
/// remote with the pod's Application Default Credentials (its service
/// account, by Workload Identity); the manifests stay valid.
#[test]
fn a_mounted_gcs_bucket_is_the_same_sidecar_on_rclones_gcs_remote() {
    let text = "name: g\nexecution: parallel\n---\nname: trainer\nfile_mounts:\n  /policy:\n    \
                name: policy\n    store: gcs\n  /models:\n    source: gs://models/v1\n    mode: \
                MOUNT_CACHED\nrun: x\n";
    let options = k8s::Options {
        bucket_mounts: k8s::BucketMounts::Sidecar {
            image: k8s::DEFAULT_RCLONE_IMAGE.into(),
        },
        ..k8s::Options::default()
    };
    let (c, m) = build("g.yaml", text, &options);
    let m = m.unwrap();
    assert!(!m.has_errors(), "{}", render_human(&c));
    let group = c.group.as_ref().unwrap();
    let p = problems(group, &options, &m.objects);
    assert!(p.is_empty(), "{}", p.join("\n"));
    let yaml = emit::render(&m.objects, emit::Format::Yaml);
    for remote in [":gcs:policy", ":gcs:models/v1"] {
        assert!(yaml.contains(remote), "{remote} not in\n{yaml}");
    }
    assert!(!yaml.contains("RCLONE_S3_"), "{yaml}");
    snapshots("k8s").bind(|| insta::assert_snapshot!("bucket_mounts_sidecar_gcs", yaml));
}

#[test]
fn the_entrypoint_is_valid_bash_and_shellcheck_clean() {
    let dir = std::env::temp_dir().join(format!("skyc-k8s-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (what, text) in [
        (
            "group",
            "name: g\nexecution: parallel\n---\nname: a\nrun: x\n",
        ),
        (
            "pipeline",
            "name: p\n---\nname: a\nrun: x\n---\nname: b\nrun: x\n",
        ),
    ] {
        let (_, m) = lower_text(text, &k8s::Options::default());
        let script = m.objects[0]["data"]["entrypoint.sh"].as_str().unwrap();
        let path = dir.join(format!("{what}.sh"));
        std::fs::write(&path, script).unwrap();
        if let Ok(status) = std::process::Command::new("bash")
            .arg("-n")
            .arg(&path)
            .status()
        {
            assert!(status.success(), "bash -n rejects the {what} entrypoint");
        }
        match std::process::Command::new("shellcheck").arg(&path).output() {
            Ok(out) => assert!(
                out.status.success(),
                "shellcheck, {what}:\n{}",
                String::from_utf8_lossy(&out.stdout)
            ),
            Err(_) => eprintln!("!!! SKIPPED: shellcheck is not installed"),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cli_builds_yaml_json_and_files() {
    let group = examples_dir().join("job-group-sdk__job_group.yaml");
    let group = group.to_str().unwrap();
    let o = skyc()
        .args(["build", group, "--target", "k8s", "--namespace", "ns"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let yaml = String::from_utf8(o.stdout).unwrap();
    assert!(yaml.starts_with("---\napiVersion: v1\nkind: ConfigMap\n"));
    assert_eq!(yaml.matches("\n---\n").count(), 1);

    let o = skyc()
        .args(["build", group, "--target", "k8s", "-o", "json"])
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().unwrap().len(), 2);

    let dir = std::env::temp_dir().join(format!("skyc-k8s-out-{}", std::process::id()));
    let o = skyc()
        .args(["build", group, "--target", "k8s", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        files,
        [
            "00-configmap-server-client-skyc.yaml",
            "01-jobset-server-client.yaml"
        ]
    );
}

#[test]
fn cli_exit_codes() {
    let run = |args: &[&str], stdin: &str| {
        use std::io::Write;
        let mut child = skyc()
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A usage error exits before reading: the pipe may be closed.
        let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
        child.wait_with_output().unwrap()
    };
    let bad = "name: g\nexecution: parallel\n---\nname: a_b\nrun: x\n";
    let o = run(&["build", "-", "--target", "k8s"], bad);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("error[k8s-invalid-name]") && err.contains("<stdin>:4:7"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    let warn = "name: g\nexecution: parallel\n---\nname: a\nresources:\n  use_spot: true\nrun: x\n";
    let o = run(&["build", "-", "--target", "k8s"], warn);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stderr).contains("warning[k8s-ignored-setting]"));
    let o = run(
        &["build", "-", "--target", "k8s", "--namespace", "Bad_NS"],
        warn,
    );
    assert_eq!(o.status.code(), Some(2));
    let pipeline = "name: p\n---\nname: a\nrun: x\n---\nname: b\nrun: x\n";
    let o = run(&["build", "-", "--target", "k8s"], pipeline);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("dependsOn:\n"));
}

mod shapes {
    //! Random IR shapes, beyond what the fixtures hold: lowering never
    //! panics, and either builds valid manifests or reports located errors.

    use super::problems;
    use proptest::prelude::*;
    use serde_json::json;
    use skyc_compiler::Span;
    use skyc_compiler::ir::*;
    use skyc_targets::k8s;

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            30 => "[a-z][a-z0-9-]{0,8}[a-z0-9]",
            1 => Just("x".repeat(40)),
            1 => Just("Bad_Name".to_owned()),
            1 => Just("0lead".to_owned()),
        ]
    }

    fn candidate() -> impl Strategy<Value = Candidate> {
        (
            prop_oneof![6 => Just(None), 6 => Just(Some("kubernetes")), 1 => Just(Some("aws"))],
            proptest::option::of((
                prop_oneof![
                    8 => Just("H100"),
                    8 => Just("T4"),
                    4 => Just("MI300X"),
                    1 => Just("tpu-v5"),
                    1 => Just("80GB+")
                ],
                prop_oneof![Just(0.5), Just(1.0), Just(8.0)],
            )),
            proptest::option::of((0.25f64..64.0, any::<bool>())),
            proptest::option::of((0.5f64..512.0, any::<bool>())),
            any::<bool>(),
            proptest::collection::vec((1u16..20000, 0u16..100), 0..3),
            proptest::option::of(prop_oneof![
                Just(Image::Docker("nvcr.io/nvidia/pytorch:24.01".into())),
                Just(Image::Cloud("ami-123".into())),
            ]),
            proptest::collection::vec(
                prop_oneof![
                    10 => Just(("team", "ml")),
                    1 => Just(("skyc.io/x", "y")),
                    1 => Just(("a b", "c"))
                ],
                0..2,
            ),
        )
            .prop_map(
                |(cloud, acc, cpus, mem, spot, ports, image, labels)| Candidate {
                    infra: cloud.map(|c| Infra {
                        cloud: Some(c.to_owned()),
                        region: None,
                        zone: None,
                    }),
                    accelerator: acc.map(|(n, c)| Accelerator {
                        name: n.to_owned(),
                        count: c,
                        span: Span::default(),
                    }),
                    cpus: cpus.map(|(value, at_least)| Quantity { value, at_least }),
                    memory_gb: mem.map(|(value, at_least)| Quantity { value, at_least }),
                    use_spot: spot,
                    ports: ports
                        .into_iter()
                        .map(|(s, w)| PortRange {
                            start: s,
                            end: s.saturating_add(w),
                        })
                        .collect(),
                    image,
                    labels: labels
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .collect(),
                    ..Candidate::default()
                },
            )
    }

    fn task() -> impl Strategy<Value = Task> {
        (
            name(),
            any::<bool>(),
            1u32..4,
            proptest::option::of(0u64..100),
            proptest::collection::vec(candidate(), 1..3),
            (0u32..4, proptest::collection::vec(any::<u8>(), 0..4)),
            proptest::option::of("[a-z $\n]{0,20}"),
            proptest::option::of("[a-z $(){}\n]{0,20}"),
            any::<bool>(),
            proptest::collection::vec(
                prop_oneof![
                    8 => Just(json!("ckpt")),
                    8 => Just(json!({"size": "10Gi", "storage_class": "fast"})),
                    1 => Just(json!({"type": "k8s-pvc"})),
                    1 => Just(json!("Not_A_Claim")),
                    1 => Just(json!(3)),
                ],
                0..2,
            ),
        )
            .prop_map(
                |(
                    name,
                    primary,
                    nodes,
                    delay,
                    candidates,
                    (restarts, codes),
                    setup,
                    run,
                    mounts,
                    vols,
                )| Task {
                    name,
                    name_span: Span::new(0, 1),
                    role: if primary {
                        Role::Primary
                    } else {
                        Role::Auxiliary
                    },
                    num_nodes: nodes,
                    termination_delay_secs: if primary { None } else { delay },
                    resources: Resources {
                        ordered: primary,
                        candidates,
                    },
                    recovery: Recovery {
                        max_restarts_on_errors: restarts,
                        recover_on_exit_codes: codes,
                        ..Recovery::default()
                    },
                    envs: vec![EnvVar {
                        name: "SKYPILOT_NODE_RANK".into(),
                        value: "$x".into(),
                    }],
                    secrets: vec!["TOKEN".into()],
                    setup,
                    run,
                    workdir: mounts.then(|| Workdir::Local {
                        path: ".".into(),
                        at: Default::default(),
                    }),
                    file_mounts: if mounts {
                        vec![FileMount {
                            destination: "/d".into(),
                            source: None,
                            storage: Some(json!({"name": "b"})),
                            at: Default::default(),
                        }]
                    } else {
                        Vec::new()
                    },
                    volumes: vols
                        .into_iter()
                        .enumerate()
                        .map(|(i, volume)| VolumeMount {
                            path: format!("/v{i}"),
                            volume,
                            at: Default::default(),
                        })
                        .collect(),
                    config: mounts.then(|| json!({"kubernetes": {}})),
                },
            )
    }

    fn group() -> impl Strategy<Value = Group> {
        (
            name(),
            proptest::collection::vec(task(), 1..4),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(name, mut tasks, net, pipeline)| {
                // Task names are unique and at least one task is primary, as
                // the front end guarantees.
                for (i, t) in tasks.iter_mut().enumerate() {
                    t.name = format!("{}{i}", t.name);
                }
                tasks[0].role = Role::Primary;
                tasks[0].termination_delay_secs = None;
                if pipeline {
                    // A pipeline's steps are all primary, with no delay.
                    for t in &mut tasks {
                        t.role = Role::Primary;
                        t.termination_delay_secs = None;
                    }
                }
                Group {
                    name,
                    name_span: Some(Span::new(0, 1)),
                    inter_connection: if net && !pipeline {
                        InterConnection::Auto
                    } else {
                        InterConnection::Disabled
                    },
                    execution: if pipeline {
                        Execution::Serial
                    } else {
                        Execution::Parallel
                    },
                    tasks,
                    pool: None,
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn any_group_builds_valid_manifests_or_fails_located(g in group(), queue in any::<bool>()) {
            let options = k8s::Options {
                queue: queue.then(|| "q".to_owned()),
                namespace: Some("ns".into()),
                ..k8s::Options::default()
            };
            let m = k8s::lower(&g, &options);
            if m.has_errors() {
                prop_assert!(m.objects.is_empty());
                prop_assert!(m.diagnostics.iter().all(|d| !d.primary.span.is_empty()));
            } else {
                let p = problems(&g, &options, &m.objects);
                prop_assert!(p.is_empty(), "{}", p.join("\n"));
            }
        }
    }
}

/// The layout skyc's runtime applies (`build --layout pods`): a small
/// anchor JobSet and one pod per node, each valid against the JobSet CRD
/// and Kubernetes' schemas, each node's `{task}-{i}.{group}` resolving to
/// exactly its pod, whatever the group's size.
mod runtime_layout {
    use super::*;
    use skyc_targets::k8s::{MAX_OBJECT_BYTES, pods};

    /// Every problem of the runtime's objects of `group`; `from` limits
    /// the pods each name is resolved from (all pods: quadratic).
    fn problems(group: &Group, objects: &[Value], from: usize) -> Vec<String> {
        // The pods of a task differ only in name, hostname and rank: the
        // first and last of each are validated (a schema check of every
        // pod of a 2,000-node group would take minutes in a debug build).
        let mut sample: Vec<Value> = Vec::new();
        for o in objects {
            let last_of_task = |o: &Value| {
                let task = o["metadata"]["labels"]["skyc.io/task"].as_str()?;
                let rank: u32 = o["metadata"]["labels"]["skyc.io/node-index"]
                    .as_str()?
                    .parse()
                    .ok()?;
                let t = group.tasks.iter().find(|t| t.name == task)?;
                Some(rank == 0 || rank + 1 == t.num_nodes)
            };
            if o["kind"] != "Pod" || last_of_task(o) == Some(true) {
                sample.push(o.clone());
            }
        }
        let mut out = schema::validate(&sample);
        for o in objects {
            let size = o.to_string().len();
            if size > MAX_OBJECT_BYTES {
                out.push(format!("{} is {size} bytes", o["metadata"]["name"]));
            }
        }
        let cluster = dns::Cluster::from_objects(objects, "default");
        let nodes: u32 = group.tasks.iter().map(|t| t.num_nodes).sum();
        let records = cluster.records();
        if records.len() != nodes as usize || records.values().any(|p| p.len() != 1) {
            out.push(format!("{} DNS names for {nodes} nodes", records.len()));
        }
        for task in &group.tasks {
            for i in 0..task.num_nodes {
                let name = format!("{}-{i}.{}", task.name, group.name);
                for pod in cluster.pods.iter().take(from) {
                    let answer = dns::Cluster::resolve_in(&records, pod, &name);
                    let ok = matches!(answer.as_slice(), [p] if {
                        let l = &cluster.pods[*p].labels;
                        l["skyc.io/task"] == json!(task.name)
                            && l["skyc.io/node-index"] == json!(i.to_string())
                    });
                    if !ok {
                        out.push(format!("{name} resolves to pods {answer:?}"));
                        break;
                    }
                }
            }
        }
        out
    }

    fn lowered(text: &str) -> (Group, Vec<Value>) {
        let c = compile("g.yaml", text.as_bytes(), &Options::default());
        let Some(group) = c.group.clone() else {
            panic!("{}", render_human(&c))
        };
        let m = pods::lower(&group, &k8s::Options::default());
        assert!(!m.has_errors(), "{:?}", m.diagnostics);
        let all = m.manifests(&group.name);
        (group, all)
    }

    #[test]
    fn every_example_and_pipeline() {
        let mut files: Vec<(String, String)> = examples();
        for path in yaml_files(&root().join("tests/fixtures/k8s-pipelines")) {
            let text = std::fs::read_to_string(&path).unwrap();
            files.push((path.display().to_string(), text));
        }
        let mut checked = 0;
        for (file, text) in files {
            let c = compile(&file, text.as_bytes(), &Options::default());
            let Some(group) = c.group else { continue };
            let m = pods::lower(&group, &k8s::Options::default());
            if m.has_errors() {
                assert!(m.objects.is_empty() && m.templates.is_empty(), "{file}");
                continue;
            }
            let all = m.manifests(&group.name);
            let p = problems(&group, &all, usize::MAX);
            assert!(p.is_empty(), "{file}:\n{}", p.join("\n"));
            checked += 1;
        }
        assert!(checked >= 10, "only {checked} groups checked");
    }

    /// The README's example group in the runtime's layout, for review.
    #[test]
    fn snapshot_of_the_example_group() {
        let text = std::fs::read_to_string(root().join("examples/train-eval.yaml")).unwrap();
        let (_, all) = lowered(&text);
        snapshots("k8s").bind(|| {
            insta::assert_snapshot!(
                "runtime-layout-train-eval",
                emit::render(&all, emit::Format::Yaml)
            );
        });
    }

    /// 1,024 trainer nodes, 256 rollout nodes and a replay buffer: the
    /// RL group one JobSet per node could not hold.
    #[test]
    fn an_rl_group_of_1281_nodes() {
        let text = "\
name: rl
execution: parallel
primary_tasks: [trainer]
---
name: trainer
num_nodes: 1024
resources:
  accelerators: H100:8
run: python train.py --peers ${SKYPILOT_NUM_NODES}
---
name: rollout
num_nodes: 256
resources:
  accelerators: L4:1
run: python serve.py --trainer trainer-0.${SKYPILOT_JOBGROUP_NAME}
---
name: replay-buffer
resources:
  cpus: 32+
  memory: 256+
run: python buffer.py
";
        let (group, all) = lowered(text);
        assert_eq!(all.iter().filter(|o| o["kind"] == "Pod").count(), 1281);
        let p = problems(&group, &all, 3);
        assert!(p.is_empty(), "{}", p.join("\n"));
        // The JobSet build of the same group is refused at its size, with
        // the way that works.
        let m = k8s::lower(&group, &k8s::Options::default());
        assert!(rules(&m).contains(&Rule::K8sTooLarge));
        refused_as_built("rl-1281-nodes", text);
    }

    /// `skyc build --target k8s` of a group too large for the
    /// self-contained JobSet: the refusal, as a user reads it.
    fn refused_as_built(name: &str, text: &str) {
        let dir =
            std::env::temp_dir().join(format!("skyc-k8s-refusal-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("group.yaml"), text).unwrap();
        let out = crate::support::skyc()
            .args(["build", "group.yaml", "--target", "k8s"])
            .current_dir(&dir)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let refusal: String = stderr
            .split("\n\n")
            .filter(|d| d.contains("k8s-too-large"))
            .collect();
        crate::support::snapshots("k8s").bind(|| {
            insta::assert_snapshot!(format!("refusal-{name}"), refusal);
        });
    }

    /// A pipeline of 1,500 steps: too many for one self-contained JobSet.
    #[test]
    fn a_pipeline_too_long_for_one_jobset_is_refused_with_the_way_that_works() {
        let mut text = String::from("name: long\n");
        for i in 0..1500 {
            text.push_str(&format!("---\nname: step{i}\nrun: echo step {i}\n"));
        }
        let c = compile("long.yaml", text.as_bytes(), &Options::default());
        let group = c.group.expect("a pipeline");
        let m = k8s::lower(&group, &k8s::Options::default());
        assert!(rules(&m).contains(&Rule::K8sTooLarge));
        // It runs: the runtime's layout holds it.
        let (_, all) = lowered(&text);
        assert!(all.iter().filter(|o| o["kind"] == "Pod").count() >= 1);
        refused_as_built("pipeline-1500-steps", &text);
    }

    /// 2,000 nodes in two tasks.
    #[test]
    fn a_group_of_2000_nodes() {
        let text = "\
name: big
execution: parallel
---
name: workers
num_nodes: 1999
run: echo work
---
name: head
run: echo head
";
        let (group, all) = lowered(text);
        assert_eq!(all.iter().filter(|o| o["kind"] == "Pod").count(), 2000);
        let p = problems(&group, &all, 2);
        assert!(p.is_empty(), "{}", p.join("\n"));
        let largest = all.iter().map(|o| o.to_string().len()).max().unwrap();
        assert!(largest < 64 * 1024, "largest object {largest} bytes");
    }
}

/// A pool file on the Kubernetes target (`skyc build POOLFILE --target
/// k8s`): what `skyc pool apply` would start, the first worker of the pool named
/// as the file's task, valid against the schemas; its hold script and
/// the scripts a job is started and read with are valid bash and
/// shellcheck-clean.
mod pools {
    use super::schema;
    use crate::support::{root, skyc, snapshots};
    use serde_json::Value;
    use skyc_runtime::k8s::{PoolPlan, job_scripts};
    use skyc_targets::k8s::{self, emit};
    use std::time::Duration;

    const POOL: &str = "\
name: gpus
num_nodes: 2
pool:
  workers: 2
resources:
  cpus: 4
  memory: 16
  accelerators: H100:1
envs:
  MODEL: llama
setup: pip install -r requirements.txt
";

    fn worker0(text: &str) -> Vec<Value> {
        let c = skyc_compiler::compile("pool.yaml", text.as_bytes(), &Default::default());
        let group = c.group.expect("a valid pool file");
        let options = k8s::Options {
            namespace: Some("team".into()),
            ..Default::default()
        };
        let pool = group.pool.clone().unwrap();
        let plan = PoolPlan::new(
            &group,
            &pool,
            "gpus",
            &skyc_runtime::k8s::Lowering {
                options: &options,
                namespace: "team",
                context: None,
                grace: Duration::from_secs(10),
                secrets: &[],
                token: String::new(),
            },
        )
        .unwrap_or_else(|d| panic!("{d:?}"));
        assert_eq!(plan.pool.nodes, 2);
        assert_eq!(plan.pool.offer.gpus, 1.0);
        plan.manifests("gpus")
    }

    #[test]
    fn worker_manifests_are_valid_and_hold_after_setup() {
        let all = worker0(POOL);
        let problems = schema::validate(&all);
        assert!(problems.is_empty(), "{problems:#?}");
        let kinds: Vec<&str> = all.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(kinds, ["ConfigMap", "JobSet", "Pod", "Pod"]);
        let names: Vec<&str> = all
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "gpus-1-skyc",
                "gpus-1",
                "gpus-1-gpus-0-0",
                "gpus-1-gpus-1-0"
            ]
        );
        let run = all[0]["data"]["gpus.run.sh"].as_str().unwrap();
        assert_eq!(run, k8s::worker::HOLD);
        for pod in &all[2..] {
            let c = &pod["spec"]["containers"][0];
            assert_eq!(c["readinessProbe"]["exec"]["command"][1], "/tmp/skyc/ready");
            assert_eq!(c["resources"]["limits"]["nvidia.com/gpu"], "1");
        }
        snapshots("k8s").bind(|| {
            insta::assert_snapshot!("pool-worker", emit::render(&all, emit::Format::Yaml));
        });
    }

    #[test]
    fn the_hold_and_job_scripts_are_valid_bash_and_shellcheck_clean() {
        let dir = std::env::temp_dir().join(format!("skyc-k8s-pool-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let env = [("A".to_owned(), "b".to_owned())];
        let scripts = [
            ("hold", k8s::worker::HOLD.to_owned()),
            (
                "start",
                job_scripts::start("/tmp/skyc/jobs/1.0", "x", &env).argv[2].clone(),
            ),
            (
                "poll",
                job_scripts::poll("/tmp/skyc/jobs/1.0", 0).argv[2].clone(),
            ),
            (
                "signal",
                job_scripts::signal("/tmp/skyc/jobs/1.0", true).argv[2].clone(),
            ),
        ];
        for (what, script) in scripts {
            let path = dir.join(format!("{what}.sh"));
            std::fs::write(&path, format!("#!/bin/bash\n{script}")).unwrap();
            let status = std::process::Command::new("bash")
                .arg("-n")
                .arg(&path)
                .status();
            assert!(status.is_ok_and(|s| s.success()), "bash -n rejects {what}");
            match std::process::Command::new("shellcheck").arg(&path).output() {
                Ok(out) => assert!(
                    out.status.success(),
                    "shellcheck, {what}:\n{}",
                    String::from_utf8_lossy(&out.stdout)
                ),
                Err(_) => eprintln!("!!! SKIPPED: shellcheck is not installed"),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn build_prints_what_pool_apply_would_start_and_its_role() {
        let dir = std::env::temp_dir().join(format!("skyc-k8s-pool-build-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("gpus.yaml");
        std::fs::write(&file, POOL).unwrap();
        let o = skyc()
            .args(["build", "--target", "k8s", "--rbac", "--namespace", "team"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let out = String::from_utf8(o.stdout).unwrap();
        let built = emit::render(&worker0(POOL), emit::Format::Yaml);
        assert!(out.contains("pods/exec"), "the Role names exec");
        assert!(out.ends_with(&built), "{out}");
        // A name that cannot name workers' objects is refused.
        std::fs::write(&file, POOL.replace("name: gpus", "name: GPUs")).unwrap();
        let o = skyc()
            .args(["build", "--target", "k8s"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("pool `GPUs`: on the k8s target"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
        let _ = root();
    }
}

/// A group's files in the manifests: the init container that puts each
/// snapshot in place, the main container's mounts and the placing under
/// the home, in both layouts; the manifests' ConfigMap of streams, and the
/// located error when they do not fit in one. Valid against the schemas,
/// the scripts valid sh and bash and shellcheck-clean.
mod files {
    use super::{lower_text, schema};
    use crate::support::{render_human, snapshots};
    use serde_json::Value;
    use skyc_compiler::{Options, Rule, compile};
    use skyc_targets::files::{Mount, Taken};
    use skyc_targets::k8s::{self, emit, files};

    const GROUP: &str = "\
name: g
execution: parallel
---
name: trainer
num_nodes: 2
workdir: ./work
file_mounts:
  /code: ./code
  ~/conf/settings.yaml: ./settings.yaml
  /data: s3://bucket/data
run: python train.py
---
name: evaluator
run: python eval.py
";

    fn mount(destination: &str, digest: char, dir: bool, workdir: bool) -> Mount {
        Mount {
            destination: destination.into(),
            source: format!("/home/u/{destination}"),
            workdir,
            taken: Taken {
                digest: digest.to_string().repeat(64),
                dir,
                files: 1,
                bytes: 10,
            },
        }
    }

    fn options(bytes: usize) -> k8s::Options {
        let tasks = vec![
            vec![
                mount("~/sky_workdir", 'a', true, true),
                mount("/code", 'b', true, false),
                mount("~/conf/settings.yaml", 'c', false, false),
            ],
            Vec::new(),
        ];
        let packs = ['a', 'b', 'c']
            .into_iter()
            .map(|d| {
                (
                    d.to_string().repeat(64),
                    files::Pack {
                        sha256: format!("{d}{}", "0".repeat(63)),
                        bytes: bytes as u64,
                        data: Some(vec![b'x'; bytes]),
                    },
                )
            })
            .collect();
        k8s::Options {
            namespace: Some("team".into()),
            files: Some(files::Files {
                tasks,
                packs,
                buckets: Vec::new(),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_manifests_carry_the_files_and_are_valid() {
        let (c, m) = lower_text(GROUP, &options(48));
        assert!(!m.has_errors(), "{:?}", m.diagnostics);
        // Only the bucket is said not to be delivered.
        let said: Vec<&str> = m.diagnostics.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains("`/data` (from `s3://bucket/data`)"),
            "{said:?}"
        );
        assert_eq!(schema::validate(&m.objects), Vec::<String>::new());
        let kinds: Vec<&str> = m
            .objects
            .iter()
            .filter_map(|o| o["kind"].as_str())
            .collect();
        assert_eq!(kinds, ["ConfigMap", "ConfigMap", "JobSet"]);
        assert_eq!(
            m.objects[1]["binaryData"]
                .as_object()
                .map(|d| d.keys().cloned().collect::<Vec<_>>()),
            Some(vec![
                format!("{}.tar", "a".repeat(64)),
                format!("{}.tar", "b".repeat(64)),
                format!("{}.tar", "c".repeat(64)),
            ])
        );
        let pods = k8s::pods::lower(c.group.as_ref().unwrap(), &options(48));
        assert!(!pods.has_errors(), "{:?}", pods.diagnostics);
        let all = pods.manifests("g");
        assert_eq!(schema::validate(&all), Vec::<String>::new());
        snapshots("k8s/files").bind(|| {
            insta::assert_snapshot!(
                "jobset_layout",
                emit::render(&m.objects, emit::Format::Yaml)
            );
            insta::assert_snapshot!("pods_layout", emit::render(&all, emit::Format::Yaml));
        });
    }

    #[test]
    fn the_files_scripts_are_valid_and_shellcheck_clean() {
        let (c, m) = lower_text(GROUP, &options(16));
        let pods = k8s::pods::lower(c.group.as_ref().unwrap(), &options(16));
        let dir = std::env::temp_dir().join(format!("skyc-k8s-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let jobset_pod = &m.objects[2]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"];
        let init = |pod: &Value| pod["spec"]["initContainers"][0]["command"][2].clone();
        let scripts = [
            ("init-jobset.sh", "sh", init(jobset_pod)),
            ("init-pods.sh", "sh", init(&pods.templates[0])),
            (
                "entrypoint.sh",
                "bash",
                m.objects[0]["data"]["entrypoint.sh"].clone(),
            ),
            (
                "files.sh",
                "bash",
                m.objects[0]["data"]["trainer.files.sh"].clone(),
            ),
            ("fill-part.sh", "sh", files::FILL_PART.into()),
            ("fill-done.sh", "sh", files::FILL_DONE.into()),
        ];
        for (name, shell, text) in scripts {
            let text = text.as_str().unwrap_or_else(|| panic!("{name} is missing"));
            let path = dir.join(name);
            std::fs::write(&path, format!("#!/bin/{shell}\n{text}")).unwrap();
            let status = std::process::Command::new(shell)
                .arg("-n")
                .arg(&path)
                .status();
            assert!(
                status.is_ok_and(|s| s.success()),
                "{shell} -n rejects {name}"
            );
            match std::process::Command::new("shellcheck").arg(&path).output() {
                Ok(out) => assert!(
                    out.status.success(),
                    "shellcheck, {name}:\n{}",
                    String::from_utf8_lossy(&out.stdout)
                ),
                Err(_) => eprintln!("!!! SKIPPED: shellcheck is not installed"),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn files_too_large_for_a_configmap_are_an_error_at_the_largest() {
        let name = "group.yaml";
        let c = compile(name, GROUP.as_bytes(), &Options::default());
        let mut options = options(300 << 10);
        // The workdir's stream is the largest.
        if let Some(f) = options.files.as_mut() {
            let a = "a".repeat(64);
            f.packs.get_mut(&a).unwrap().bytes = 500 << 10;
            f.packs.get_mut(&a).unwrap().data = Some(vec![0; 500 << 10]);
        }
        let m = k8s::lower(c.group.as_ref().unwrap(), &options);
        assert!(m.objects.is_empty());
        let errors: Vec<_> = m.diagnostics.iter().filter(|d| d.is_error()).collect();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].rule, Rule::K8sTooLarge);
        let mut c = c;
        c.diagnostics = m.diagnostics.clone();
        snapshots("k8s/files").bind(|| {
            insta::assert_snapshot!("too_large", render_human(&c));
        });
    }
}
