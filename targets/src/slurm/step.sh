# skyc step wrapper: one node of one task attempt, started by srun as
# `bash step.sh G ATTEMPT`. Makes the group hostnames resolve, runs setup
# then run, records how they ended (srun's own exit code is not the
# user's), and leaves nothing of the task running on the node (Slurm's
# process tracking may not: proctrack/linuxproc loses orphans, pgid
# loses new sessions). Written into the job's output directory by the
# batch script.
set -u
g=$1 a=$2 rank=${SLURM_PROCID:-0}
d=$SKYC_RUN_DIR
if [ -z "${SKYC_IN_NS:-}" ]; then
    export SKYC_IN_NS=1
    # Run again inside namespaces: a PID namespace whose init is this
    # script, so that when it exits the kernel kills whatever the task
    # left, however it detached; and a mount namespace where /etc/hosts is
    # this node's own plus every group hostname. As root directly;
    # otherwise in a user namespace, with a nested one mapping the user
    # back. unshare's outer process waits (SIGTERM blocked) and returns
    # the script's status.
    h=""
    if [ "$SKYC_HOSTNAMES" != off ]; then
        h=$(mktemp) && cat /etc/hosts "$d/hosts" >"$h" || exit 1
    fi
    # The task's files: skyc's files helper mounts them in the namespace
    # (never in this one, which it is told), then runs this script again.
    view="" files=""
    if [ -e "$d/$g.files" ]; then
        view=$(cat "$d/$g.files") || exit 1
        SKYC_HOST_NS=$(readlink /proc/self/ns/mnt) || exit 1
        # Where the helper records a failure: the node's setup failed.
        export SKYC_HOST_NS SKYC_FILES_LAYERS=$d/layers SKYC_FILES_EXIT=$d/exit.$g.$a.$rank
        # shellcheck disable=SC2016 # expanded by the inner sh, on purpose
        files='"$7" __node-files "$8" -- '
    fi
    # shellcheck disable=SC2016 # expanded by the inner sh, on purpose
    if [ "$(id -u)" = 0 ]; then
        ns=(--mount --propagation private)
        inner="exec $files"'bash "$4" "$5" "$6"'
    else
        ns=(--user --map-root-user --mount)
        inner="exec $files"'unshare --user --map-user="$2" --map-group="$3" bash "$4" "$5" "$6"'
    fi
    # shellcheck disable=SC2016 # expanded by the inner sh, on purpose
    hosts='if [ -n "$1" ]; then mount --bind "$1" /etc/hosts && rm -f "$1" || exit 1; fi; '
    # A PID namespace needs its own /proc, or `$$` and /proc disagree.
    for pid in "--pid --fork --kill-child --mount-proc" ""; do
        # shellcheck disable=SC2086 # $pid is a list of options
        if unshare "${ns[@]}" $pid true 2>/dev/null; then
            # shellcheck disable=SC2086 # the same list
            exec unshare "${ns[@]}" $pid sh -c "$hosts$inner" \
                sh "$h" "$(id -u)" "$(id -g)" "$0" "$g" "$a" "${SKYC_FILES_HELPER:-}" "$view"
        fi
    done
    if [ -n "$view" ]; then
        echo "skyc: the task's workdir and file mounts cannot be given to $(hostname): a mount namespace needs root or unprivileged user namespaces, and neither is available here" >&2
        echo "setup 1" >"$d/exit.$g.$a.$rank"
        exit 1
    fi
    if [ -n "$h" ]; then
        rm -f "$h"
        echo "skyc: group hostnames ({task}-{i}.{group}) cannot resolve on $(hostname): a private /etc/hosts needs root or unprivileged user namespaces, and neither is available here" >&2
        if [ "$SKYC_HOSTNAMES" = required ]; then
            echo "setup 1" >"$d/exit.$g.$a.$rank"
            exit 1
        fi
    fi
fi
echo "$EPOCHREALTIME" >"$d/start.$g.$a.$rank"
export SKYPILOT_NODE_RANK=$rank
# Every process of the task inherits this marker (this script's own
# environment does not hold it): without a PID namespace, it finds what
# the task left on this node.
mark=$d/$g
# Without a PID namespace: kills, until none is left, every process
# carrying the marker and, when this script leads its process group (srun
# makes each task one), every other process of that group (those that
# cleared their environment). The scan runs in a session of its own,
# outside the group.
skyc_sweep() {
    local round pids p kill pgid=none stat
    read -r stat </proc/$$/stat
    stat=${stat##*) }
    read -r _ _ p _ <<<"$stat"
    if [ "$p" = $$ ]; then pgid=$p; fi
    for ((round = 0; round < 50; round++)); do
        # shellcheck disable=SC2016 # expanded by the inner sh, on purpose
        mapfile -t pids <<<"$(setsid sh -c '
            grep -lzxsF -e "$1" /proc/[0-9]*/environ
            grep -lsE "^[0-9]+ \(.*\) [^ZX] [0-9]+ $2 " /proc/[0-9]*/stat' sh "SKYC_TASK_MARK=$mark" "$pgid")"
        kill=()
        for p in "${pids[@]}"; do
            p=${p#/proc/} p=${p%%/*}
            if [ -n "$p" ] && [ "$p" != $$ ]; then kill+=("$p"); fi
        done
        ((${#kill[@]})) || return 0
        kill -KILL "${kill[@]}" 2>/dev/null
    done
}
# What an earlier attempt left when it was killed before its own sweep.
if [ "$$" != 1 ]; then skyc_sweep; fi
# On SIGTERM, let the user's processes (which Slurm signals too: every
# process tracking reaches the step's process group, which they share)
# end first, then record how they ended. A PID 1 ignores signals it has
# no handler for; this one has.
trap : TERM
phase=setup code=0
if [ -e "$d/$g.setup" ]; then
    SKYPILOT_SETUP_NODE_RANK=$rank SKYPILOT_SETUP_NODE_IPS=$SKYPILOT_NODE_IPS \
        SKYPILOT_SETUP_NUM_GPUS_PER_NODE=$SKYPILOT_NUM_GPUS_PER_NODE SKYC_TASK_MARK=$mark bash "$d/$g.setup"
    code=$?
fi
if [ "$code" = 0 ]; then
    phase=run
    if [ -e "$d/$g.run" ]; then
        SKYC_TASK_MARK=$mark bash "$d/$g.run"
        code=$?
    fi
fi
# In a PID namespace the kernel kills the rest when this script exits.
if [ "$$" != 1 ]; then skyc_sweep; fi
echo "$phase $code" >"$d/exit.$g.$a.$rank"
exit "$code"
