#!/usr/bin/env bash
# Slurm target latency on a real cluster: (1) sbatch to every step of a
# 3-task, 4-node group running; (2) a primary's exit to an auxiliary's
# SIGTERM handler (termination_delay 0); through `skyc run --target slurm`,
# as `skyc status` reports them: (3) `skyc run -d` to every task RUNNING,
# (4) `skyc cancel` to the group CANCELLED. Prints median, min and max of N
# runs.
#
# Usage: bench/slurm.sh [RUNS]      (default 5)
# Uses the cluster of SLURM_CONF; without one (and as root) it starts a
# local 8-node cluster with scripts/slurm-cluster and stops it afterwards.
# SKYC_BENCH_BIN: the skyc binary to use (default: a fresh `cargo build`).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-5}
work=$(mktemp -d /tmp/skyc-bench-slurm.XXXXXX)
chmod 755 "$work" # munged (user munge) reaches the cluster dir inside
cleanup() {
    if [ -n "${started:-}" ]; then "$root/scripts/slurm-cluster" stop "$work/cluster" >/dev/null; fi
    rm -rf "$work"
}
trap cleanup EXIT
if [ -z "${SLURM_CONF:-}" ]; then
    "$root/scripts/slurm-cluster" install >/dev/null
    "$root/scripts/slurm-cluster" start "$work/cluster" 8 | sed -n 1p
    started=1
    export SLURM_CONF=$work/cluster/slurm.conf
fi
skyc=${SKYC_BENCH_BIN:-}
if [ -z "$skyc" ]; then
    (cd "$root" && cargo build -q)
    skyc=${CARGO_TARGET_DIR:-$root/target}/debug/skyc
fi

cat >"$work/start.yaml" <<'YAML'
name: bench-start
execution: parallel
---
name: a
num_nodes: 2
run: sleep 1
---
name: b
run: sleep 1
---
name: c
run: sleep 1
YAML
sed 's/sleep 1/sleep 60/; s/bench-start/bench-run/' "$work/start.yaml" >"$work/run.yaml"
cat >"$work/term.yaml" <<'YAML'
name: bench-term
execution: parallel
primary_tasks: [main]
---
name: main
run: |
  sleep 1
  echo "$EPOCHREALTIME" > "$SKYC_OUT/primary-exit"
---
name: aux
run: |
  trap 'echo "$EPOCHREALTIME" > "$SKYC_OUT/aux-sigterm"; exit 0' TERM
  while :; do sleep 0.05; done
YAML
"$skyc" build --target slurm --out "$work/start.sh" "$work/start.yaml"
"$skyc" build --target slurm --out "$work/term.sh" "$work/term.yaml"

minus() { awk -v a="$1" -v b="$2" 'BEGIN { print a - b }'; }
stats() { # label values...: median min max in ms
    local label=$1
    shift
    printf '%s\n' "$@" | sort -g | awk -v l="$label" '{ v[NR] = $1 * 1000 }
        END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
              printf "%-44s median %6.0f ms  min %6.0f  max %6.0f  (n=%d)\n", l, m, v[1], v[NR], NR }'
}

# Polls `skyc status ID` until the statuses of the group and its tasks, on
# one line (`CANCELLED: a=CANCELLED b=...`), match the pattern $2.
until_status() {
    until "$skyc" status "$1" --json --state-dir "$work/state" |
        python3 -c 'import json, sys; g = json.load(sys.stdin)[0]
print(g["status"] + ":", " ".join(t["name"] + "=" + t["status"] for t in g["tasks"]))' |
        grep -Eq "$2"; do
        sleep 0.02
    done
}

start_lat=() term_lat=() run_lat=() cancel_lat=()
for i in $(seq "$runs"); do
    out=$work/start-$i
    t0=$EPOCHREALTIME
    SKYC_OUT=$out sbatch --parsable --wait -o /dev/null "$work/start.sh" >/dev/null
    last=$(cat "$out"/.skyc/r0/start.* | sort -g | tail -1)
    start_lat+=("$(minus "$last" "$t0")")

    out=$work/term-$i
    SKYC_OUT=$out sbatch --parsable --wait -o /dev/null "$work/term.sh" >/dev/null
    term_lat+=("$(minus "$(cat "$out/aux-sigterm")" "$(cat "$out/primary-exit")")")

    t0=$EPOCHREALTIME
    id=$("$skyc" run -d --target slurm --state-dir "$work/state" "$work/run.yaml")
    until_status "$id" 'a=RUNNING b=RUNNING c=RUNNING'
    run_lat+=("$(minus "$EPOCHREALTIME" "$t0")")
    t0=$EPOCHREALTIME
    "$skyc" cancel "$id" --state-dir "$work/state" 2>/dev/null
    until_status "$id" '^CANCELLED:'
    cancel_lat+=("$(minus "$EPOCHREALTIME" "$t0")")
done
echo "Slurm $(sinfo -V | awk '{print $2}'), $(sinfo -h -N -o %N | sort -u | wc -l) nodes, $runs runs each"
stats "sbatch -> all 4 steps running (3 tasks)" "${start_lat[@]}"
stats "primary exit -> auxiliary SIGTERM (delay 0)" "${term_lat[@]}"
stats "skyc run -d -> status: every task RUNNING" "${run_lat[@]}"
stats "skyc cancel -> status: group CANCELLED" "${cancel_lat[@]}"
