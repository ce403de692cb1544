# skyc step wrapper: one node of one task attempt, started by srun as
# `bash step.sh G ATTEMPT`. Makes the group hostnames resolve, runs setup
# then run, and records how they ended (srun's own exit code is not the
# user's). Written into the job's output directory by the batch script.
set -u
g=$1 a=$2 rank=${SLURM_PROCID:-0}
d=$SKYC_RUN_DIR
if [ -z "${SKYC_IN_NS:-}" ] && [ "$SKYC_HOSTNAMES" != off ]; then
    export SKYC_IN_NS=1
    # This node's own hosts file plus every group hostname, private to the
    # step: a mount namespace as root, a user namespace otherwise.
    h=$(mktemp) && cat /etc/hosts "$d/hosts" >"$h" || exit 1
    if [ "$(id -u)" = 0 ] && unshare --mount --propagation private true 2>/dev/null; then
        # shellcheck disable=SC2016 # expanded by the inner sh, on purpose
        exec unshare --mount --propagation private sh -c \
            'mount --bind "$1" /etc/hosts && rm -f "$1" && exec bash "$2" "$3" "$4"' \
            sh "$h" "$0" "$g" "$a"
    elif unshare --user --map-root-user --mount true 2>/dev/null; then
        # Root inside to mount, then a nested namespace maps the user back.
        # shellcheck disable=SC2016 # expanded by the inner sh, on purpose
        exec unshare --user --map-root-user --mount sh -c \
            'mount --bind "$1" /etc/hosts && rm -f "$1" && exec unshare --user --map-user="$2" --map-group="$3" bash "$4" "$5" "$6"' \
            sh "$h" "$(id -u)" "$(id -g)" "$0" "$g" "$a"
    fi
    rm -f "$h"
    echo "skyc: group hostnames ({task}-{i}.{group}) cannot resolve on $(hostname): a private /etc/hosts needs root or unprivileged user namespaces, and neither is available here" >&2
    if [ "$SKYC_HOSTNAMES" = required ]; then
        echo "setup 1" >"$d/exit.$g.$a.$rank"
        exit 1
    fi
fi
echo "$EPOCHREALTIME" >"$d/start.$g.$a.$rank"
export SKYPILOT_NODE_RANK=$rank
# On SIGTERM, let the user's processes (which Slurm signals too) end
# first, then record how they ended.
trap : TERM
phase=setup code=0
if [ -e "$d/$g.setup" ]; then
    SKYPILOT_SETUP_NODE_RANK=$rank SKYPILOT_SETUP_NODE_IPS=$SKYPILOT_NODE_IPS \
        SKYPILOT_SETUP_NUM_GPUS_PER_NODE=$SKYPILOT_NUM_GPUS_PER_NODE bash "$d/$g.setup"
    code=$?
fi
if [ "$code" = 0 ]; then
    phase=run
    if [ -e "$d/$g.run" ]; then
        bash "$d/$g.run"
        code=$?
    fi
fi
echo "$phase $code" >"$d/exit.$g.$a.$rank"
exit "$code"
