# shellcheck shell=bash disable=SC2154 # the skyc_* settings come from node.env
# skyc node agent: one node of a Job Group task on a cloud VM, started by
# the boot script as `bash agent.sh DIR`. It waits for what only the
# runtime can deliver (the group's hosts, secrets), keeps the group's
# hostnames in /etc/hosts, runs setup then run, and records everything in
# DIR (docs/targets/cloud.md, "The node's directory").
set -u
skyc_dir=$1
# shellcheck source=/dev/null
. "$skyc_dir/node.env"
# Tests point this elsewhere; on a node it is /etc/hosts.
skyc_etc_hosts=${SKYC_ETC_HOSTS:-/etc/hosts}
# A systemd unit starts with no HOME; tasks expect one.
export HOME="${HOME:-/root}"
echo "$$" >"$skyc_dir/agent.pid"

skyc_status() {
    echo "$EPOCHREALTIME $*" >>"$skyc_dir/status"
}

# The hosts file's well-formed lines, each tagged as this group's.
skyc_hosts_lines() {
    [ -e "$skyc_dir/hosts" ] || return 0
    awk -v g="$skyc_group" 'NF == 2 && $1 ~ /^[0-9A-Fa-f:.]+$/ && $2 ~ /^[A-Za-z0-9._-]+$/ {
        print $1 " " $2 " # skyc-group " g
    }' "$skyc_dir/hosts"
}

# Rewrites this group's lines of /etc/hosts when they differ from the
# hosts file (also when something else rewrote /etc/hosts), in place:
# /etc/hosts may be a bind mount.
skyc_install_hosts() {
    local skyc_want skyc_have skyc_tmp
    skyc_want=$(skyc_hosts_lines)
    skyc_have=$(awk -v g="$skyc_group" 'NF >= 4 && $(NF-2) == "#" && $(NF-1) == "skyc-group" && $NF == g' "$skyc_etc_hosts")
    [ "$skyc_want" = "$skyc_have" ] && return 0
    skyc_tmp=$(mktemp) || return 1
    {
        awk -v g="$skyc_group" '!(NF >= 4 && $(NF-2) == "#" && $(NF-1) == "skyc-group" && $NF == g)' "$skyc_etc_hosts"
        [ -z "$skyc_want" ] || printf '%s\n' "$skyc_want"
    } >"$skyc_tmp" && cat "$skyc_tmp" >"$skyc_etc_hosts"
    rm -f "$skyc_tmp"
}

# The addresses of this task's nodes in rank order, one per line.
skyc_task_ips() {
    local skyc_i skyc_ip
    for ((skyc_i = 0; skyc_i < skyc_num_nodes; skyc_i++)); do
        skyc_ip=$(skyc_hosts_lines | awk -v n="$skyc_task-$skyc_i.$skyc_group" '$2 == n { print $1; exit }')
        if [ -z "$skyc_ip" ] && [ "$skyc_i" = "$skyc_rank" ]; then
            skyc_ip=$(hostname -I 2>/dev/null | awk '{ print $1 }')
        fi
        echo "$skyc_ip"
    done
}

skyc_status agent start

# The task's files (docs/targets/cloud.md, "Code and data"): files.sh,
# written only for a task that has some, fetches, checks and places them.
# Placed as soon as their URLs are here: they come with the secrets, at
# the runtime's first visit (the hosts file may come much later), and a
# URL lasts only as long as the credentials that signed it.
skyc_files_failure=""
skyc_files_placed=0
skyc_place_files() {
    local skyc_digest
    for skyc_digest in ${skyc_files:-}; do
        [ -e "$skyc_dir/files/$skyc_digest.url" ] || return 0
    done
    skyc_files_placed=1
    [ -f "$skyc_dir/files.sh" ] || return 0
    skyc_status files fetch
    # Each line of files.sh exits the subshell when it fails; the URLs
    # (each one a read of its object for a while) go with the streams.
    # shellcheck source=/dev/null
    (. "$skyc_dir/files.sh") >>"$skyc_dir/setup.log" 2>&1
    local skyc_code=$?
    rm -f -- "$skyc_dir"/files/*.tar "$skyc_dir"/files/*.part "$skyc_dir"/files/*.url
    if [ "$skyc_code" = 0 ]; then
        skyc_status files ready
    else
        skyc_files_failure="skyc: the task's files could not be put in place"
    fi
}

# The inputs only the runtime can deliver, waited for together: the hosts
# file (when the task has several nodes, or the group's hostnames are on),
# one file per secret, and the URL of each snapshot of the task's files.
skyc_need_hosts=0
if [ "$skyc_num_nodes" -gt 1 ] || { [ "$skyc_hostnames" != off ] && [ "$skyc_group_nodes" -gt 1 ]; }; then
    skyc_need_hosts=1
fi
skyc_waited=0
while :; do
    skyc_missing=""
    if [ "$skyc_need_hosts" = 1 ] && [ ! -e "$skyc_dir/hosts" ]; then skyc_missing="hosts"; fi
    for skyc_secret in $skyc_secrets; do
        [ -e "$skyc_dir/secrets/$skyc_secret" ] || skyc_missing="$skyc_missing secrets/$skyc_secret"
    done
    if [ "${skyc_mounts:-0}" -gt 0 ]; then
        for skyc_need in mounts.sh aws/credentials.json; do
            [ -e "$skyc_dir/$skyc_need" ] || skyc_missing="$skyc_missing $skyc_need"
        done
    fi
    if [ "$skyc_files_placed" = 0 ]; then
        skyc_place_files
        for skyc_digest in ${skyc_files:-}; do
            [ "$skyc_files_placed" = 1 ] || [ -e "$skyc_dir/files/$skyc_digest.url" ] ||
                skyc_missing="$skyc_missing files/$skyc_digest.url"
        done
    fi
    [ -z "$skyc_missing" ] && break
    if [ "$skyc_waited" -ge "$skyc_wait_secs" ]; then break; fi
    sleep 1
    skyc_waited=$((skyc_waited + 1))
done
skyc_failure=""
if [ "$skyc_need_hosts" = 1 ]; then
    if [ -e "$skyc_dir/hosts" ]; then
        skyc_status hosts ready
    else
        skyc_status hosts missing after "$skyc_wait_secs" s
        if [ "$skyc_hostnames" = required ] || [ "$skyc_num_nodes" -gt 1 ]; then
            skyc_failure="skyc: the runtime did not deliver $skyc_dir/hosts within $skyc_wait_secs s, so the group's hostnames cannot resolve"
        fi
    fi
fi
for skyc_secret in $skyc_secrets; do
    [ -e "$skyc_dir/secrets/$skyc_secret" ] ||
        skyc_failure="skyc: secret $skyc_secret was not delivered to $skyc_dir/secrets/$skyc_secret"
done
if [ "${skyc_mounts:-0}" -gt 0 ] && { [ ! -e "$skyc_dir/mounts.sh" ] || [ ! -e "$skyc_dir/aws/credentials.json" ]; }; then
    skyc_failure="skyc: the runtime did not deliver the task's bucket mounts and their credentials ($skyc_dir/mounts.sh, $skyc_dir/aws/credentials.json) within $skyc_wait_secs s"
fi
if [ "$skyc_files_placed" = 0 ] && [ -n "${skyc_files:-}" ]; then
    skyc_failure="skyc: the runtime did not deliver where to fetch the task's files ($skyc_dir/files/*.url) within $skyc_wait_secs s"
fi
[ -z "$skyc_files_failure" ] || skyc_failure=$skyc_files_failure

skyc_keeper=""
if [ "$skyc_need_hosts" = 1 ] && [ "$skyc_hostnames" != off ]; then
    # Recreated nodes get new addresses: the runtime rewrites the hosts
    # file, and this loop follows it.
    # Installed once here, then only by the loop: two writers at once
    # could read the file while the other had truncated it.
    skyc_install_hosts
    (while :; do
        sleep 1
        skyc_install_hosts
    done) </dev/null >/dev/null 2>&1 &
    skyc_keeper=$!
fi

skyc_ips=$(skyc_task_ips)
export SKYPILOT_NUM_NODES="$skyc_num_nodes" \
    SKYPILOT_TASK_ID="$skyc_task_id" SKYPILOT_TASK_IDS="$skyc_task_ids" \
    SKYPILOT_CLUSTER_INFO="$skyc_cluster_info"
# A pipeline's step has no group name, as in SkyPilot.
if [ "${skyc_execution:-parallel}" != serial ]; then
    export SKYPILOT_JOBGROUP_NAME="$skyc_group"
fi

skyc_child=""
trap '[ -z "$skyc_child" ] || kill -TERM -- "-$skyc_child" 2>/dev/null' TERM
# Runs $skyc_dir/PHASE.sh in its own process group from the work directory,
# appending its output to PHASE.log; writes PHASE.exit atomically.
skyc_phase() {
    local skyc_phase_name=$1 skyc_code=0
    skyc_status "$skyc_phase_name" start
    if [ -n "$skyc_failure" ]; then
        echo "$skyc_failure" >>"$skyc_dir/$skyc_phase_name.log"
        skyc_code=1
    elif [ -e "$skyc_dir/$skyc_phase_name.sh" ]; then
        (
            cd "$skyc_dir/workdir" || exit 1
            if [ "$skyc_phase_name" = setup ]; then
                export SKYPILOT_SETUP_NODE_RANK="$skyc_rank" SKYPILOT_SETUP_NODE_IPS="$skyc_ips" \
                    SKYPILOT_SETUP_NUM_GPUS_PER_NODE="$skyc_gpus"
            else
                export SKYPILOT_NODE_RANK="$skyc_rank" SKYPILOT_NODE_IPS="$skyc_ips" \
                    SKYPILOT_NUM_GPUS_PER_NODE="$skyc_gpus"
            fi
            # Secrets exist only here, in the phase's own shell, just before
            # it runs: a secret named like one of the agent's variables (or
            # IFS) cannot change what the agent does. The loop's words are
            # expanded once, before the first secret is read.
            for skyc_secret in $skyc_secrets; do
                IFS= read -r -d '' "$skyc_secret" <"$skyc_dir/secrets/$skyc_secret"
                export "${skyc_secret?}"
            done
            exec setsid bash "$skyc_dir/$skyc_phase_name.sh"
        ) >>"$skyc_dir/$skyc_phase_name.log" 2>&1 </dev/null &
        skyc_child=$!
        wait "$skyc_child"
        skyc_code=$?
        # A signal interrupts wait; the phase itself decides when it ends.
        while kill -0 "$skyc_child" 2>/dev/null; do
            wait "$skyc_child"
            skyc_code=$?
        done
        skyc_child=""
    fi
    # The node ends with this phase (its run, or a failed setup): its
    # buckets' writes are uploaded before its end is written, since the
    # runtime ends the instance then.
    if { [ "$skyc_phase_name" = run ] || [ "$skyc_code" != 0 ]; } && declare -F skyc_unmount_all >/dev/null; then
        skyc_unmount_all
    fi
    echo "$skyc_code" >"$skyc_dir/$skyc_phase_name.exit.tmp" && mv -f "$skyc_dir/$skyc_phase_name.exit.tmp" "$skyc_dir/$skyc_phase_name.exit"
    skyc_status "$skyc_phase_name" exit "$skyc_code"
    return "$skyc_code"
}

if [ -z "$skyc_failure" ] && [ -n "$skyc_git_url" ]; then
    skyc_status workdir clone
    if ! git clone --quiet -- "$skyc_git_url" "$skyc_dir/workdir" >>"$skyc_dir/setup.log" 2>&1 ||
        { [ -n "$skyc_git_ref" ] &&
            ! git -C "$skyc_dir/workdir" checkout --quiet --end-of-options "$skyc_git_ref" -- >>"$skyc_dir/setup.log" 2>&1; }; then
        skyc_failure="skyc: cloning the git workdir failed"
    fi
fi

# The task's mounted buckets: mounts.sh, delivered by the runtime with
# the credentials they are read with, mounts them (docs/targets/cloud.md,
# "Mounted S3 buckets on AWS instances") and defines skyc_unmount_all.
if [ -z "$skyc_failure" ] && [ "${skyc_mounts:-0}" -gt 0 ]; then
    skyc_status buckets mount
    # shellcheck source=/dev/null
    if . "$skyc_dir/mounts.sh" >>"$skyc_dir/setup.log" 2>&1; then
        skyc_status buckets ready
    else
        skyc_failure="skyc: the task's buckets could not be mounted (the lines above say why)"
    fi
fi

# A pool's worker (skyc_hold=1) holds after a setup that ended well and
# runs each job the runtime hands it: a directory jobs/ID/ moved into
# place whole (job.sh: the worker's envs.sh sourced, then the job's envs
# and run; grace: seconds between SIGTERM and SIGKILL), started once
# (`started` is written first), in its own process group from the work
# directory with the node's environment, as `run` would be. Its output
# goes to jobs/ID/run.log, its exit code to jobs/ID/run.exit (atomically;
# 128+N when killed by signal N); jobs/ID/stop asks it to end.
skyc_job() {
    local skyc_job_dir=$1 skyc_code=0 skyc_pid
    (
        cd "$skyc_dir/workdir" || exit 1
        for skyc_secret in $skyc_secrets; do
            IFS= read -r -d '' "$skyc_secret" <"$skyc_dir/secrets/$skyc_secret"
            export "${skyc_secret?}"
        done
        exec env SKYPILOT_NODE_RANK="$skyc_rank" SKYPILOT_NODE_IPS="$skyc_ips" \
            SKYPILOT_NUM_GPUS_PER_NODE="$skyc_gpus" setsid bash "$skyc_job_dir/job.sh"
    ) >>"$skyc_job_dir/run.log" 2>&1 </dev/null &
    skyc_pid=$!
    echo "$skyc_pid" >"$skyc_job_dir/pid"
    wait "$skyc_pid"
    skyc_code=$?
    echo "$skyc_code" >"$skyc_job_dir/run.exit.tmp" && mv -f "$skyc_job_dir/run.exit.tmp" "$skyc_job_dir/run.exit"
}

# Ends a job: SIGTERM to its process group, SIGKILL after its grace.
skyc_stop_job() {
    local skyc_job_dir=$1 skyc_pid skyc_grace skyc_i
    skyc_pid=$(cat "$skyc_job_dir/pid")
    skyc_grace=$(cat "$skyc_job_dir/grace" 2>/dev/null)
    case "$skyc_grace" in '' | *[!0-9]*) skyc_grace=10 ;; esac
    # Before its `setsid`, the job is not yet a process group of its own.
    kill -TERM -- "-$skyc_pid" 2>/dev/null || kill -TERM "$skyc_pid" 2>/dev/null
    for ((skyc_i = 0; skyc_i < skyc_grace * 5; skyc_i++)); do
        [ -e "$skyc_job_dir/run.exit" ] && return 0
        sleep 0.2
    done
    kill -KILL -- "-$skyc_pid" 2>/dev/null
}

skyc_hold() {
    local skyc_j
    mkdir -p "$skyc_dir/jobs"
    skyc_status hold
    while :; do
        for skyc_j in "$skyc_dir"/jobs/*/; do
            skyc_j=${skyc_j%/}
            [ -e "$skyc_j/job.sh" ] || continue
            if [ ! -e "$skyc_j/started" ]; then
                : >"$skyc_j/started"
                if [ -e "$skyc_j/stop" ]; then
                    # Stopped before it started: it never runs.
                    echo 143 >"$skyc_j/run.exit.tmp" && mv -f "$skyc_j/run.exit.tmp" "$skyc_j/run.exit"
                else
                    skyc_job "$skyc_j" &
                fi
            elif [ -e "$skyc_j/stop" ] && [ ! -e "$skyc_j/stopping" ] && [ -s "$skyc_j/pid" ] &&
                [ ! -e "$skyc_j/run.exit" ]; then
                : >"$skyc_j/stopping"
                skyc_stop_job "$skyc_j" &
            fi
        done
        sleep 0.2
    done
}

if [ "${skyc_hold:-0}" = 1 ]; then
    skyc_phase setup && skyc_hold
else
    skyc_phase setup && skyc_phase run
fi
skyc_code=$?
if [ -n "$skyc_keeper" ]; then
    kill "$skyc_keeper" 2>/dev/null
    wait "$skyc_keeper" 2>/dev/null
fi
skyc_status agent end "$skyc_code"
exit "$skyc_code"
