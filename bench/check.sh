#!/usr/bin/env bash
# Whole-process benchmark of `skyc check` (release build): wall time and
# peak RSS of the RLHF example, of generated groups of 10 to 2,000 tasks,
# and of every non-template SkyPilot example. See bench/README.md.
#
# Usage: bench/check.sh [--enforce] [--runs N] [--instructions]
#   --enforce       exit 1 when a target is missed (default: report only)
#   --runs N        timed runs per case, after warm-up (default 30, at least 30)
#   --instructions  also count instructions (valgrind) and judge linearity by them
#
# Environment: SKYC_EXAMPLES_DIR (default ../shared/reference/skypilot-examples,
# else tests/fixtures/skypilot-examples), CARGO_TARGET_DIR (absolute),
# SKYC_BENCH_BIN (measure this skyc binary instead of building one),
# SKYC_BENCH_NO_HYPERFINE=1 forces the built-in timing loop.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
examples=${SKYC_EXAMPLES_DIR:-$root/../shared/reference/skypilot-examples}
[[ -d $examples ]] || examples=$root/tests/fixtures/skypilot-examples
rlhf=$examples/rl-post-training-jobgroup__rlhf-math-jobgroup.yaml

enforce=0
count_instructions=0
runs=30
warmup=5
while (($#)); do
    case $1 in
        --enforce) enforce=1 ;;
        --instructions) count_instructions=1 ;;
        --runs)
            runs=${2:?--runs needs a number}
            shift
            ;;
        -h | --help)
            sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "check.sh: unknown argument: $1" >&2
            exit 2
            ;;
    esac
    shift
done
if ! [[ $runs =~ ^[0-9]+$ ]] || ((runs < 30)); then
    echo "check.sh: --runs must be a number >= 30" >&2
    exit 2
fi

# Targets. RSS is in KiB, as /usr/bin/time and /proc report it.
target_rlhf_ms=5
target_rlhf_rss_kib=10240 # 10 MiB
target_rlhf_cat_ratio=2   # RLHF check / cat of the same file
target_1000_ms=100
# Per-task cost at 2,000 tasks / at 100 tasks: exact by instruction count;
# wall time also pays for caches, which a 1.4 MB input outgrows.
target_linear_ratio_instr=1.25
target_linear_ratio_wall=1.5
sizes=(10 100 1000 2000)

# ---------------------------------------------------------------- tools

maybe_install() { # maybe_install PACKAGE: apt-get install, as root only
    if ((EUID == 0)) && command -v apt-get >/dev/null; then
        echo "== installing $1 (apt-get)" >&2
        if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null 2>&1; then
            apt-get update -qq >/dev/null 2>&1 || true
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null 2>&1 || true
        fi
    fi
}

use_hyperfine=0
if [[ -z ${SKYC_BENCH_NO_HYPERFINE:-} ]]; then
    command -v hyperfine >/dev/null || maybe_install hyperfine
    command -v hyperfine >/dev/null && use_hyperfine=1
fi
gnu_time=/usr/bin/time
[[ -x $gnu_time ]] || maybe_install time
use_gnu_time=0
if [[ -x $gnu_time ]] && "$gnu_time" -f %M -o /dev/null true 2>/dev/null; then
    use_gnu_time=1
fi

# ---------------------------------------------------------------- build

if [[ -n ${SKYC_BENCH_BIN:-} ]]; then
    bin=$SKYC_BENCH_BIN # a prebuilt skyc, e.g. to compare two builds
else
    echo "== cargo build --release" >&2
    (cd "$root" && cargo build --release --quiet)
    bin=${CARGO_TARGET_DIR:-$root/target}/release/skyc
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/skyc-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# ---------------------------------------------------------------- inputs

# A Job Group of N tasks, 8 nodes each, with realistic bodies: resources,
# envs, setup, and a run script naming other tasks' hosts
# (`task-12-3.${SKYPILOT_JOBGROUP_NAME}`). Keep in sync with
# `generate_group` in compiler/benches/compile.rs (same bytes).
generate() {
    # shellcheck disable=SC2016 # `$` here is YAML/shell text, not awk's.
    awk -v n="$1" 'BEGIN {
        printf "---\nname: bench-%d\nexecution: parallel\nprimary_tasks: [task-0]\ntermination_delay: 30s\n", n
        split("H100:8 A100-80GB:8 L4:8", acc, " ")
        for (i = 0; i < n; i++) {
            printf "---\nname: task-%d\nnum_nodes: 8\nresources:\n  cpus: 8+\n  memory: 64+\n  accelerators: %s\n  infra: kubernetes\n", i, acc[i % 3 + 1]
            printf "envs:\n  MODEL_NAME: Qwen/Qwen2.5-7B-Instruct\n  PEER_HOST: task-%d-3.${SKYPILOT_JOBGROUP_NAME}\n  BATCH_SIZE: 64\n", (7 * i + 12) % n
            printf "setup: |\n  uv pip install torch transformers accelerate --system\n"
            printf "run: |\n  echo \"task-%d: node ${SKYPILOT_NODE_RANK} of ${SKYPILOT_NUM_NODES}\"\n", i
            printf "  HEAD=\"task-%d-0.${SKYPILOT_JOBGROUP_NAME}:29500\"\n", i
            printf "  NEXT=\"task-%d-3.${SKYPILOT_JOBGROUP_NAME}:8000\"\n", (i + 1) % n
            printf "  PREV=\"task-%d-7.${SKYPILOT_JOBGROUP_NAME}:8000\"\n", (i + n - 1) % n
            printf "  if [ \"${SKYPILOT_NODE_RANK}\" == \"0\" ]; then\n"
            printf "    python train.py --head \"$HEAD\" --next \"$NEXT\" --prev \"$PREV\" \\\n"
            printf "      --peer \"$PEER_HOST\" --batch-size \"$BATCH_SIZE\"\n"
            printf "  else\n    sleep infinity\n  fi\n"
        }
    }'
}

for n in 1 "${sizes[@]}"; do
    generate "$n" >"$work/group-$n.yaml"
    if ! "$bin" check "$work/group-$n.yaml" >"$work/out" 2>&1; then
        echo "check.sh: the generated $n-task group does not check clean:" >&2
        head -n 20 "$work/out" >&2
        exit 1
    fi
done

# ---------------------------------------------------------------- timing

# time_ms CMD...: prints "median min max" wall time in ms.
time_ms() {
    if ((use_hyperfine)); then
        local cmd="" arg
        for arg in "$@"; do cmd+=$(printf '%q ' "$arg"); done
        hyperfine --shell=none --ignore-failure --warmup "$warmup" --runs "$runs" \
            --style none --export-csv "$work/hf.csv" "$cmd" >/dev/null 2>&1
        # command,mean,stddev,median,user,system,min,max (seconds); the
        # command may hold commas, so count fields from the end.
        awk -F, 'NR == 2 { printf "%.3f %.3f %.3f\n", $(NF-4) * 1e3, $(NF-1) * 1e3, $NF * 1e3 }' "$work/hf.csv"
        return
    fi
    local i t0 t1
    local -a samples=()
    for ((i = 0; i < warmup; i++)); do "$@" >/dev/null 2>&1 || true; done
    for ((i = 0; i < runs; i++)); do
        if [[ -n ${EPOCHREALTIME:-} ]]; then
            # bash 5: a clock read without forking `date`.
            t0=${EPOCHREALTIME/[.,]/}000
            "$@" >/dev/null 2>&1 || true
            t1=${EPOCHREALTIME/[.,]/}000
        else
            t0=$(date +%s%N)
            "$@" >/dev/null 2>&1 || true
            t1=$(date +%s%N)
        fi
        samples+=($((10#$t1 - 10#$t0)))
    done
    printf '%s\n' "${samples[@]}" | sort -n | awk '
        { v[NR] = $1 }
        END {
            m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "%.3f %.3f %.3f\n", m / 1e6, v[1] / 1e6, v[NR] / 1e6
        }'
}

# rss_kib CMD...: prints the peak RSS in KiB (largest of 3 runs).
rss_kib() {
    local i best=0 v
    for ((i = 0; i < 3; i++)); do
        if ((use_gnu_time)); then
            "$gnu_time" -f %M -o "$work/rss" "$@" >/dev/null 2>&1 || true
            v=$(tail -n 1 "$work/rss")
        else
            # Poll VmHWM while the process lives: a lower bound, since a
            # process of a few ms may end between two polls.
            v=0
            "$@" >/dev/null 2>&1 &
            local pid=$! key val state
            while :; do
                state=""
                while read -r key val _; do
                    case $key in
                        VmHWM:) ((val > v)) && v=$val ;;
                        State:) state=$val ;;
                    esac
                done <"/proc/$pid/status" || break
                [[ -z $state || $state == Z ]] && break
            done 2>/dev/null
            wait "$pid" || true
        fi
        [[ $v =~ ^[0-9]+$ ]] && ((v > best)) && best=$v
    done
    echo "$best"
}

le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }

# ratio_to_cat FILE CMD...: median over $runs pairs of CMD's time / that
# of `cat FILE`, each pair timed by one hyperfine (5 runs of each, medians)
# so both see the same load. Needs hyperfine: a shell loop's own fork
# and exec would be timed with each and pull the ratio toward 1.
ratio_to_cat() {
    local file=$1 i cmd="" arg
    shift
    ((use_hyperfine)) || {
        echo "n/a"
        return
    }
    for arg in "$@"; do cmd+=$(printf '%q ' "$arg"); done
    for ((i = 0; i < runs; i++)); do
        hyperfine --shell=none --ignore-failure --warmup 2 --runs 5 --style none \
            --export-csv "$work/pair.csv" "cat $(printf '%q' "$file")" "$cmd" >/dev/null 2>&1
        # command,mean,stddev,median,...: the median is 4th from the end.
        awk -F, 'NR == 2 { a = $(NF-4) } NR == 3 { printf "%.4f\n", $(NF-4) / a }' "$work/pair.csv"
    done | sort -g | awk '
        { v[NR] = $1 }
        END { printf "%.2f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

misses=0
namew=34 # width of the case column
row() { printf "%-${namew}s %9s %19s %9s  %-22s %s\n" "$@"; }
header() { row case "median ms" "min-max ms" "RSS MiB" target result; }

# measure NAME TARGET_MS TARGET_RSS_KIB CMD...: one table row; "-" for no target.
measure() {
    local name=$1 tms=$2 trss=$3
    shift 3
    local med min max rss target="" result="-"
    read -r med min max < <(time_ms "$@")
    rss=$(rss_kib "$@")
    LAST_MEDIAN=$med
    if [[ $tms != - ]]; then
        target="<= $tms ms"
        if le "$med" "$tms"; then result=pass; else result=FAIL; misses=$((misses + 1)); fi
    fi
    if [[ $trss != - ]]; then
        target+="${target:+, }<= $((trss / 1024)) MiB"
        if ((rss <= trss)); then
            [[ $result == FAIL ]] || result=pass
        else
            result=FAIL
            misses=$((misses + 1))
        fi
    fi
    row "$name" "$med" "$min-$max" "$(awk -v k="$rss" 'BEGIN { printf "%.2f", k / 1024 }')" \
        "${target:--}" "$result"
}

engine="built-in loop"
((use_hyperfine)) && engine=$(hyperfine --version)
echo
echo "skyc check, whole process, release build: $runs runs after $warmup warm-up ($engine);"
echo "peak RSS: $( ((use_gnu_time)) && echo '/usr/bin/time %M' || echo 'VmHWM polling (lower bound)'), largest of 3 runs"
echo
header
measure "skyc --version (process floor)" - - "$bin" --version
if [[ -f $rlhf ]]; then
    measure "cat of the RLHF example" - - cat "$rlhf"
    measure "rlhf-math-jobgroup (5 tasks)" "$target_rlhf_ms" "$target_rlhf_rss_kib" "$bin" check "$rlhf"
    # Start-up against the cheapest process that reads the same file.
    ratio=$(ratio_to_cat "$rlhf" "$bin" check "$rlhf")
    version_ratio=$(ratio_to_cat "$rlhf" "$bin" --version)
    if [[ $ratio == n/a ]]; then
        result="n/a: needs hyperfine"
    elif le "$ratio" "$target_rlhf_cat_ratio"; then
        result=pass
    else
        result=FAIL
        misses=$((misses + 1))
    fi
    echo "rlhf-math-jobgroup / cat, median of $runs pairs: ${ratio}x (target <= ${target_rlhf_cat_ratio}x): $result;" \
        "skyc --version / cat: ${version_ratio}x"
else
    echo "(RLHF example not found at $rlhf)"
fi

declare -A median
for n in 1 "${sizes[@]}"; do
    t=-
    ((n == 1000)) && t=$target_1000_ms
    label="generated $n task$( ((n == 1)) || echo s) x 8 nodes"
    measure "$label" "$t" - "$bin" check "$work/group-$n.yaml"
    median[$n]=$LAST_MEDIAN
done

# Linearity: the cost of a task, net of what a 1-task group costs
# (process start, schema compilation), should not grow with the group.
# Wall time on a busy machine is noisy; --instructions adds instruction
# counts (callgrind), which are exact, and judges linearity by them.
declare -A instr
if ((count_instructions)); then
    if command -v valgrind >/dev/null; then
        for n in 1 "${sizes[@]}"; do
            instr[$n]=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
                "$bin" check "$work/group-$n.yaml" 2>&1 >/dev/null |
                sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
        done
    else
        echo "(--instructions: valgrind not found; wall time only)"
        count_instructions=0
    fi
fi
echo
echo "Linearity (net = minus the 1-task group: ${median[1]} ms$( ((count_instructions)) && echo ", ${instr[1]} instructions")):"
printf '%8s %8s %10s %10s %12s' tasks KiB "median ms" "net ms" "net us/task"
((count_instructions)) && printf ' %12s %16s' "Minstr" "net kinstr/task"
echo
for n in "${sizes[@]}"; do
    bytes=$(wc -c <"$work/group-$n.yaml")
    awk -v n="$n" -v b="$bytes" -v m="${median[$n]}" -v f="${median[1]}" \
        'BEGIN { printf "%8d %8.0f %10.3f %10.3f %12.2f", n, b / 1024, m, m - f, (m - f) * 1e3 / (n - 1) }'
    if ((count_instructions)); then
        awk -v n="$n" -v i="${instr[$n]}" -v f="${instr[1]}" \
            'BEGIN { printf " %12.1f %16.1f", i / 1e6, (i - f) / 1e3 / (n - 1) }'
    fi
    echo
done
# per_task_ratio COST_1 COST_100 COST_2000: net per-task cost at 2,000 / at 100.
per_task_ratio() {
    awk -v f="$1" -v b="$2" -v a="$3" \
        'BEGIN { x = (b - f) / 99; if (x > 0) printf "%.2f", ((a - f) / 1999) / x; else print "n/a" }'
}
ratio=$(per_task_ratio "${median[1]}" "${median[100]}" "${median[2000]}")
basis="wall time"
target=$target_linear_ratio_wall
if ((count_instructions)); then
    echo "per-task wall time, 2000 tasks / 100 tasks: ${ratio}x"
    ratio=$(per_task_ratio "${instr[1]}" "${instr[100]}" "${instr[2000]}")
    basis="instructions"
    target=$target_linear_ratio_instr
fi
if [[ $ratio == n/a ]]; then
    result="n/a: timings too noisy, try --instructions"
elif le "$ratio" "$target"; then
    result=pass
else
    result=FAIL
    misses=$((misses + 1))
fi
echo "per-task cost ($basis), 2000 tasks / 100 tasks: ${ratio}x (target <= ${target}x): $result"

if [[ -d $examples ]]; then
    echo
    echo "SkyPilot examples (non-template) in $examples:"
    namew=66
    header
    for f in "$examples"/*.yaml; do
        grep -q '{{' "$f" && continue # Jinja templates: not YAML until rendered
        status=0
        "$bin" check "$f" >/dev/null 2>&1 || status=$?
        measure "$(basename "$f" .yaml) [$status]" - - "$bin" check "$f"
    done
    echo "([N] = exit status of skyc check; 1 = the file has errors, as expected for volume specs)"
fi

echo
if ((misses)); then
    echo "$misses target(s) missed"
    ((enforce)) && exit 1
else
    echo "all targets met"
fi
exit 0
