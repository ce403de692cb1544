//! The ConfigMap every pod of the group (or pipeline) runs from: one entrypoint, and
//! each task's `setup` and `run` as written.
//!
//! Scripts live in a ConfigMap rather than in the JobSet so the JobSet
//! (one pod template per node) stays small, and so the scripts are read
//! verbatim, with no quoting for YAML, JSON or `$(VAR)` expansion.

use super::names::{self, config_map};
use super::{Layout, Lowerer, MAX_CONFIG_MAP_BYTES, metadata};
use serde_json::{Map, Value, json};
use skyc_compiler::ir::{Execution, InterConnection};
use skyc_compiler::{Diagnostic, Rule};

/// ConfigMap keys of a task's scripts.
pub(super) fn setup_key(task: &str) -> String {
    format!("{task}.setup.sh")
}

pub(super) fn run_key(task: &str) -> String {
    format!("{task}.run.sh")
}

/// The key of what places a task's files under the home (`files.rs`).
pub(super) fn files_key(task: &str) -> String {
    format!("{task}.files.sh")
}

impl Lowerer<'_> {
    pub(super) fn config_map(&mut self) -> Value {
        let g = self.group;
        let mut data = Map::new();
        data.insert("entrypoint.sh".into(), json!(self.entrypoint()));
        if let Some(script) = self.bucket_script() {
            data.insert(super::buckets::SCRIPT_KEY.into(), json!(script));
        }
        for (index, task) in g.tasks.iter().enumerate() {
            if let Some(files) = self.home_script(index) {
                data.insert(files_key(&task.name), json!(files));
            }
            if let Some(setup) = &task.setup {
                data.insert(setup_key(&task.name), json!(setup));
            }
            if let Some(run) = &task.run {
                data.insert(run_key(&task.name), json!(run));
            }
        }
        let size: usize = data
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if size > MAX_CONFIG_MAP_BYTES {
            self.push(
                Diagnostic::new(
                    Rule::K8sTooLarge,
                    self.group_span(),
                    format!(
                        "the scripts of this {} take {size} bytes; a ConfigMap holds at most {MAX_CONFIG_MAP_BYTES}",
                        self.what()
                    ),
                )
                .label("scripts too large")
                .help("move large scripts into the image or a volume"),
            );
        }
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": metadata(&config_map(&g.name), self.options, json!({"skyc.io/group": g.name})),
            "data": data,
        })
    }

    /// The container command of every task pod. Tasks are named by
    /// `SKYC_TASK`; the node's rank and the task's size come from the env.
    fn entrypoint(&self) -> String {
        let g = self.group;
        let tasks: Vec<String> = g.tasks.iter().map(|t| t.name.clone()).collect();
        // Only a Job Group's tasks wait for each other; a pipeline's steps
        // never run together.
        let networking = u8::from(
            g.execution == Execution::Parallel && g.inter_connection != InterConnection::Disabled,
        );
        let (kind, hosts, node_host) = match (g.execution, self.layout) {
            (Execution::Parallel, _) => ("Job Group", "the group's hostnames", "$task-$i.$group"),
            // The runtime names every node's pod as a group's.
            (Execution::Serial, Layout::Pods) => (
                "pipeline",
                "the hostnames of the step's nodes",
                "$task-$i.$group",
            ),
            // The Job controller's hostname of an Indexed Job's pod,
            // `{job}-{i}`, under the JobSet's subdomain.
            (Execution::Serial, Layout::JobSet) => (
                "pipeline",
                "the hostnames of the step's nodes",
                "$group-$task-0-$i.$group",
            ),
        };
        ENTRYPOINT
            .replace("@KIND@", kind)
            .replace("@HOSTS@", hosts)
            .replace("@NODE_HOST@", node_host)
            .replace("@GROUP@", &g.name)
            .replace("@TASKS@", &tasks.join(" "))
            .replace("@NETWORKING@", &networking.to_string())
            .replace("@DIR@", names::SCRIPTS_DIR)
            .replace("@FILES@", &self.files_prelude())
    }
}

/// Waits for the group's hostnames (as SkyPilot's networking prelude
/// does), derives the rest of SkyPilot's environment contract, then runs
/// setup and run, each in its own process group so that pod termination
/// (SIGTERM) reaches every process they started: bash as PID 1 neither
/// forwards signals nor dies of an untrapped SIGTERM.
const ENTRYPOINT: &str = r#"#!/bin/bash
# skyc entrypoint for the @KIND@ @GROUP@: wait for @HOSTS@,
# then run the task's setup and run, as SkyPilot does on every node.
set -uo pipefail
dir=@DIR@
group=@GROUP@
tasks=(@TASKS@)
networking=@NETWORKING@
task=$SKYC_TASK

child=
# shellcheck disable=SC2317 # called by the trap below
on_term() {
  if [ -n "$child" ]; then
    kill -TERM -- "-$child" 2>/dev/null
  else
    exit 143
  fi
}
trap on_term TERM INT

# Runs a script in its own process group; returns its exit code.
step() {
  set -m
  bash "$1" &
  child=$!
  set +m
  while kill -0 "$child" 2>/dev/null; do
    wait "$child"
  done
  wait "$child"
  local code=$?
  child=
  return "$code"
}

# Prints the address of $1 once it resolves; gives up after $2 seconds.
await() {
  local deadline=$((SECONDS + $2)) ip rest
  until read -r ip rest < <(getent hosts "$1") && [ -n "$ip" ]; do
    if ((SECONDS >= deadline)); then
      echo "skyc: $1 did not resolve within $2 s" >&2
      return 1
    fi
    sleep 1
  done
  printf '%s\n' "$ip"
}

# Task ids are stable across restarts: the JobSet's uid does not change.
ids=()
for i in "${!tasks[@]}"; do
  ids+=("skyc-${SKYC_JOBSET_UID}_${group}_${tasks[$i]}-$i")
  if [ "${tasks[$i]}" = "$task" ]; then
    export SKYPILOT_TASK_ID="${ids[$i]}"
  fi
done
SKYPILOT_TASK_IDS=$(printf '%s\n' "${ids[@]}")
export SKYPILOT_TASK_IDS

# The task's own nodes, in rank order, as SKYPILOT_NODE_IPS.
ips=()
for ((i = 0; i < SKYPILOT_NUM_NODES; i++)); do
  ip=$(await "@NODE_HOST@" 300) || exit 1
  ips+=("$ip")
done
SKYPILOT_NODE_IPS=$(printf '%s\n' "${ips[@]}")
export SKYPILOT_NODE_IPS

# Every other task's head node must resolve before setup, as in SkyPilot.
if ((networking)); then
  for peer in "${tasks[@]}"; do
    if [ "$peer" != "$task" ]; then
      await "$peer-0.$group" 300 >/dev/null || exit 1
    fi
  done
fi

cd "${HOME:-/}" 2>/dev/null || cd /
@FILES@
if [ -f "$dir/$task.setup.sh" ]; then
  export SKYPILOT_SETUP_NODE_RANK=$SKYPILOT_NODE_RANK
  export SKYPILOT_SETUP_NODE_IPS=$SKYPILOT_NODE_IPS
  export SKYPILOT_SETUP_NUM_GPUS_PER_NODE=$SKYPILOT_NUM_GPUS_PER_NODE
  step "$dir/$task.setup.sh"
  code=$?
  if ((code != 0)); then
    echo "skyc: setup of $task failed with exit code $code" >&2
    # The runtime tells a failed setup (FAILED_SETUP) from a failed run by
    # the container's termination message.
    echo setup >/dev/termination-log 2>/dev/null
    exit "$code"
  fi
  unset SKYPILOT_SETUP_NODE_RANK SKYPILOT_SETUP_NODE_IPS SKYPILOT_SETUP_NUM_GPUS_PER_NODE
fi

if [ -f "$dir/$task.run.sh" ]; then
  step "$dir/$task.run.sh"
  exit $?
fi
exit 0
"#;
