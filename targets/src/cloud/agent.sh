# shellcheck shell=bash disable=SC2154 # the skyc_* settings come from node.env
# skyc node agent: one node of a Job Group task on a cloud VM, started by
# the boot script as `bash agent.sh DIR`. It waits for what only the
# runtime can deliver (the group's hosts, secrets), keeps the group's
# hostnames in /etc/hosts, runs setup then run, and records everything in
# DIR (docs/targets/cloud.md, "The node's directory").
set -u
d=$1
# shellcheck source=/dev/null
. "$d/node.env"
# Tests point this elsewhere; on a node it is /etc/hosts.
etc_hosts=${SKYC_ETC_HOSTS:-/etc/hosts}
# A systemd unit starts with no HOME; tasks expect one.
export HOME="${HOME:-/root}"
echo "$$" >"$d/agent.pid"

skyc_status() {
    echo "$EPOCHREALTIME $*" >>"$d/status"
}

# The hosts file's well-formed lines, each tagged as this group's.
skyc_hosts_lines() {
    [ -e "$d/hosts" ] || return 0
    awk -v g="$skyc_group" 'NF == 2 && $1 ~ /^[0-9A-Fa-f:.]+$/ && $2 ~ /^[A-Za-z0-9._-]+$/ {
        print $1 " " $2 " # skyc-group " g
    }' "$d/hosts"
}

# Rewrites this group's lines of /etc/hosts when they differ from the
# hosts file (also when something else rewrote /etc/hosts), in place:
# /etc/hosts may be a bind mount.
skyc_install_hosts() {
    local want have tmp
    want=$(skyc_hosts_lines)
    have=$(awk -v g="$skyc_group" 'NF >= 4 && $(NF-2) == "#" && $(NF-1) == "skyc-group" && $NF == g' "$etc_hosts")
    [ "$want" = "$have" ] && return 0
    tmp=$(mktemp) || return 1
    {
        awk -v g="$skyc_group" '!(NF >= 4 && $(NF-2) == "#" && $(NF-1) == "skyc-group" && $NF == g)' "$etc_hosts"
        [ -z "$want" ] || printf '%s\n' "$want"
    } >"$tmp" && cat "$tmp" >"$etc_hosts"
    rm -f "$tmp"
}

# The addresses of this task's nodes in rank order, one per line.
skyc_task_ips() {
    local i ip
    for ((i = 0; i < skyc_num_nodes; i++)); do
        ip=$(skyc_hosts_lines | awk -v n="$skyc_task-$i.$skyc_group" '$2 == n { print $1; exit }')
        if [ -z "$ip" ] && [ "$i" = "$skyc_rank" ]; then
            ip=$(hostname -I 2>/dev/null | awk '{ print $1 }')
        fi
        echo "$ip"
    done
}

skyc_status agent start
# The inputs only the runtime can deliver, waited for together: the hosts
# file (when the task has several nodes, or the group's hostnames are on),
# and one file per secret.
need_hosts=0
if [ "$skyc_num_nodes" -gt 1 ] || { [ "$skyc_hostnames" != off ] && [ "$skyc_group_nodes" -gt 1 ]; }; then
    need_hosts=1
fi
waited=0
while :; do
    missing=""
    if [ "$need_hosts" = 1 ] && [ ! -e "$d/hosts" ]; then missing="hosts"; fi
    for s in $skyc_secrets; do
        [ -e "$d/secrets/$s" ] || missing="$missing secrets/$s"
    done
    [ -z "$missing" ] && break
    if [ "$waited" -ge "$skyc_wait_secs" ]; then break; fi
    sleep 1
    waited=$((waited + 1))
done
failure=""
if [ "$need_hosts" = 1 ]; then
    if [ -e "$d/hosts" ]; then
        skyc_status hosts ready
    else
        skyc_status hosts missing after "$skyc_wait_secs" s
        if [ "$skyc_hostnames" = required ] || [ "$skyc_num_nodes" -gt 1 ]; then
            failure="skyc: the runtime did not deliver $d/hosts within $skyc_wait_secs s, so the group's hostnames cannot resolve"
        fi
    fi
fi
for s in $skyc_secrets; do
    if [ -e "$d/secrets/$s" ]; then
        IFS= read -r -d '' "$s" <"$d/secrets/$s"
        export "${s?}"
    else
        failure="skyc: secret $s was not delivered to $d/secrets/$s"
    fi
done

keeper=""
if [ "$need_hosts" = 1 ] && [ "$skyc_hostnames" != off ]; then
    # Recreated nodes get new addresses: the runtime rewrites the hosts
    # file, and this loop follows it.
    (while :; do
        skyc_install_hosts
        sleep 1
    done) </dev/null >/dev/null 2>&1 &
    keeper=$!
    skyc_install_hosts
fi

ips=$(skyc_task_ips)
export SKYPILOT_JOBGROUP_NAME="$skyc_group" SKYPILOT_NUM_NODES="$skyc_num_nodes" \
    SKYPILOT_TASK_ID="$skyc_task_id" SKYPILOT_TASK_IDS="$skyc_task_ids" \
    SKYPILOT_CLUSTER_INFO="$skyc_cluster_info"

child=""
trap '[ -z "$child" ] || kill -TERM -- "-$child" 2>/dev/null' TERM
# Runs $d/PHASE.sh in its own process group from the work directory,
# appending its output to PHASE.log; writes PHASE.exit atomically.
skyc_phase() {
    local phase=$1 code=0
    skyc_status "$phase" start
    if [ -n "$failure" ]; then
        echo "$failure" >>"$d/$phase.log"
        code=1
    elif [ -e "$d/$phase.sh" ]; then
        (
            cd "$d/workdir" || exit 1
            if [ "$phase" = setup ]; then
                export SKYPILOT_SETUP_NODE_RANK="$skyc_rank" SKYPILOT_SETUP_NODE_IPS="$ips" \
                    SKYPILOT_SETUP_NUM_GPUS_PER_NODE="$skyc_gpus"
            else
                export SKYPILOT_NODE_RANK="$skyc_rank" SKYPILOT_NODE_IPS="$ips" \
                    SKYPILOT_NUM_GPUS_PER_NODE="$skyc_gpus"
            fi
            exec setsid bash "$d/$phase.sh"
        ) >>"$d/$phase.log" 2>&1 </dev/null &
        child=$!
        wait "$child"
        code=$?
        # A signal interrupts wait; the phase itself decides when it ends.
        while kill -0 "$child" 2>/dev/null; do
            wait "$child"
            code=$?
        done
        child=""
    fi
    echo "$code" >"$d/$phase.exit.tmp" && mv -f "$d/$phase.exit.tmp" "$d/$phase.exit"
    skyc_status "$phase" exit "$code"
    return "$code"
}

if [ -z "$failure" ] && [ -n "$skyc_git_url" ]; then
    skyc_status workdir clone
    if ! git clone --quiet -- "$skyc_git_url" "$d/workdir" >>"$d/setup.log" 2>&1 ||
        { [ -n "$skyc_git_ref" ] &&
            ! git -C "$d/workdir" checkout --quiet --end-of-options "$skyc_git_ref" -- >>"$d/setup.log" 2>&1; }; then
        failure="skyc: cloning the git workdir failed"
    fi
fi
skyc_phase setup && skyc_phase run
code=$?
if [ -n "$keeper" ]; then
    kill "$keeper" 2>/dev/null
    wait "$keeper" 2>/dev/null
fi
skyc_status agent end "$code"
exit "$code"
