//! A model of when the JobSet controller creates each replicated Job's
//! Jobs and how the JobSet ends, to prove from the emitted objects alone
//! that a pipeline's steps run one after another and a group's tasks
//! together.
//!
//! Modelled from JobSet v0.12.0 (`pkg/controllers/jobset_controller.go`,
//! `depends_on.go`, `failure_policy.go`): each reconcile first looks at
//! failed Jobs (with no `failurePolicy`, one fails the JobSet), then at the
//! success policy (`All`: every Job of every target succeeded; no targets:
//! every replicated Job), then creates the Jobs of every replicated Job
//! whose `dependsOn` is reached (`Complete`: all Jobs of the named
//! replicated Job succeeded). A finished JobSet creates nothing. Each Job
//! here ends as the test decides, except one with `parallelism: 0` (the
//! delay gate), which never ends by itself.

use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Succeeds,
    Fails,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    Completed,
    Failed,
    /// Nothing left to create and nothing that ends by itself.
    Waiting,
}

#[derive(Debug)]
pub(crate) struct Run {
    /// The replicated Jobs whose Jobs each reconcile created, in order.
    pub waves: Vec<Vec<String>>,
    pub end: End,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Absent,
    Running,
    Ended(Outcome),
}

/// Runs `js`, every Job of replicated Job `r` ending with `outcome(r)`.
/// Errs on what the model (and skyc) does not use.
pub(crate) fn run(js: &Value, outcome: impl Fn(&str) -> Outcome) -> Result<Run, String> {
    let spec = &js["spec"];
    if !spec["failurePolicy"].is_null() {
        return Err("a failurePolicy is not modelled".into());
    }
    if spec["startupPolicy"]["startupPolicyOrder"] != "AnyOrder" {
        return Err("only startupPolicyOrder AnyOrder is modelled".into());
    }
    let rjobs = spec["replicatedJobs"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let name = |r: &Value| r["name"].as_str().unwrap_or_default().to_owned();
    let names: Vec<String> = rjobs.iter().map(name).collect();
    let replicas: Vec<u64> = rjobs
        .iter()
        .map(|r| r["replicas"].as_u64().unwrap_or(1))
        .collect();
    let never_ends: Vec<bool> = rjobs
        .iter()
        .map(|r| r["template"]["spec"]["parallelism"] == 0)
        .collect();
    let mut deps: Vec<Vec<usize>> = Vec::new();
    for (i, r) in rjobs.iter().enumerate() {
        let mut d = Vec::new();
        for entry in r["dependsOn"].as_array().into_iter().flatten() {
            if entry["status"] != "Complete" {
                return Err(format!(
                    "{}: dependsOn status {}",
                    names[i], entry["status"]
                ));
            }
            let target = entry["name"].as_str().unwrap_or_default();
            // The controller knows only the replicated Jobs before this one.
            match names[..i].iter().position(|n| n == target) {
                Some(p) => d.push(p),
                None => return Err(format!("{}: depends on no earlier `{target}`", names[i])),
            }
        }
        deps.push(d);
    }
    let policy = &spec["successPolicy"];
    let targets: Vec<usize> = match policy["targetReplicatedJobs"].as_array() {
        Some(t) if !t.is_empty() => t
            .iter()
            .filter_map(|t| names.iter().position(|n| Some(n.as_str()) == t.as_str()))
            .collect(),
        _ => (0..names.len()).collect(),
    };
    if policy["operator"] != "All" {
        return Err(format!("success operator {}", policy["operator"]));
    }

    let mut state = vec![State::Absent; names.len()];
    let mut waves = Vec::new();
    loop {
        if state.contains(&State::Ended(Outcome::Fails)) {
            return Ok(Run {
                waves,
                end: End::Failed,
            });
        }
        let succeeded: u64 = targets
            .iter()
            .filter(|&&t| state[t] == State::Ended(Outcome::Succeeds))
            .map(|&t| replicas[t])
            .sum();
        let expected: u64 = targets.iter().map(|&t| replicas[t]).sum();
        if succeeded >= expected {
            return Ok(Run {
                waves,
                end: End::Completed,
            });
        }
        let mut wave = Vec::new();
        for i in 0..names.len() {
            let reached = deps[i]
                .iter()
                .all(|&d| state[d] == State::Ended(Outcome::Succeeds));
            if state[i] == State::Absent && reached {
                state[i] = State::Running;
                wave.push(names[i].clone());
            }
        }
        let mut ended = false;
        for i in 0..names.len() {
            if state[i] == State::Running && !never_ends[i] {
                state[i] = State::Ended(outcome(&names[i]));
                ended = true;
            }
        }
        let created = !wave.is_empty();
        if created {
            waves.push(wave);
        }
        if !created && !ended {
            return Ok(Run {
                waves,
                end: End::Waiting,
            });
        }
    }
}
