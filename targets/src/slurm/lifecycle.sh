# Runs the Job Group inside the allocation: one `srun --het-group` step per
# task; when the last primary ends, each auxiliary gets SIGTERM after its
# termination delay (at once if a primary failed) and SIGKILL after the
# grace period; failed tasks restart within max_restarts_on_errors, or for
# free on a listed exit code. Everything it decides goes to $SKYC_OUT/status.
# A pipeline's step is the same with one task: this job runs step
# $skyc_step of $skyc_steps, and the pipeline's jobs share the first one's id.
if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 501)); then
    echo "skyc: this batch script needs bash 5.1 or later (wait -n -p)" >&2
    exit 1
fi
skyc_job=${SLURM_JOB_ID:?skyc: submit this script with sbatch}
# Task ids name the group's job, or the pipeline's: its first step's, which
# the submitter passes to later steps as SKYC_PIPELINE_JOB.
if [ -n "${skyc_step:-}" ]; then
    skyc_id=${SKYC_PIPELINE_JOB:-$skyc_job}
    if ! [[ $skyc_id =~ ^[0-9]+$ ]]; then
        echo "skyc: SKYC_PIPELINE_JOB is not a job id: $skyc_id" >&2
        exit 1
    fi
    skyc_out=skyc-$skyc_group-$skyc_id/${skyc_tasks[0]}
    skyc_id_names=("${skyc_steps[@]}") skyc_id_first=$skyc_step
else
    skyc_id=$skyc_job skyc_out=skyc-$skyc_group-$skyc_job
    skyc_id_names=("${skyc_tasks[@]}") skyc_id_first=0
fi
export SKYC_OUT=${SKYC_OUT:-${SLURM_SUBMIT_DIR:-$PWD}/$skyc_out}
skyc_restart=${SLURM_RESTART_COUNT:-0}
# One directory per (re)start of the job: scripts, hosts, node records.
export SKYC_RUN_DIR=$SKYC_OUT/.skyc/r$skyc_restart
export SKYC_HOSTNAMES=$skyc_hostnames
# skyc's files helper, which gives a node its task's files (step.sh).
export SKYC_FILES_HELPER=$skyc_files_helper
rm -rf "$SKYC_RUN_DIR"
# layers: what each node's private memory filesystem covers (step.sh).
mkdir -p "$SKYC_RUN_DIR/layers" "$SKYC_OUT/logs" || exit 1

skyc_status() {
    echo "$EPOCHREALTIME r$skyc_restart $*" >>"$SKYC_OUT/status"
}
skyc_fail() {
    echo "skyc: $*" >&2
    skyc_status error "$*"
    skyc_status group FAILED_SETUP
    exit 1
}
# Cancel, preemption and requeue all start with SIGTERM to this script:
# record it and launch nothing more (Slurm ends the steps itself).
trap 'skyc_status job SIGTERM; exit 143' TERM

for skyc_g in "${!skyc_tasks[@]}"; do
    for skyc_s in ${skyc_secrets[skyc_g]}; do
        [ -n "${!skyc_s+x}" ] ||
            skyc_fail "secret $skyc_s of task ${skyc_tasks[skyc_g]} is not set: export it before sbatch"
    done
done

# The value of Slurm variable $1 for component $2 (plain outside a hetjob).
skyc_het_var() {
    local v=$1
    if [ -n "${SLURM_HET_SIZE:-}" ]; then v=${1}_HET_GROUP_$2; fi
    echo "${!v:-}"
}

# Node IPs in rank order, and the hosts line of every node of every task.
skyc_jobids="" skyc_hosts="" skyc_task_ids=""
for skyc_i in "${!skyc_id_names[@]}"; do
    skyc_task_ids+=${skyc_task_ids:+$'\n'}skyc-slurm-${skyc_id}_${skyc_group}_${skyc_id_names[skyc_i]}-$skyc_i
done
skyc_nnodes=() skyc_ips=()
for skyc_g in "${!skyc_tasks[@]}"; do
    skyc_name=${skyc_tasks[skyc_g]}
    skyc_jobids+=${skyc_jobids:+,}$(skyc_het_var SLURM_JOB_ID "$skyc_g")
    mapfile -t skyc_nodes < <(scontrol show hostnames "$(skyc_het_var SLURM_JOB_NODELIST "$skyc_g")")
    skyc_list=""
    for skyc_i in "${!skyc_nodes[@]}"; do
        skyc_addr=$(scontrol show node -o "${skyc_nodes[skyc_i]}" | sed -n 's/.* NodeAddr=\([^ ]*\).*/\1/p')
        # NodeAddr is often a name on real clusters.
        skyc_ip=$(getent ahostsv4 "$skyc_addr" | awk 'NR == 1 { print $1 }')
        skyc_ip=${skyc_ip:-$skyc_addr}
        skyc_list+=${skyc_list:+$'\n'}$skyc_ip
        skyc_hosts+="$skyc_ip $skyc_name-$skyc_i.$skyc_group"$'\n'
    done
    [ "${#skyc_nodes[@]}" = "${skyc_want_nodes[skyc_g]}" ] ||
        skyc_fail "task $skyc_name got ${#skyc_nodes[@]} nodes, not ${skyc_want_nodes[skyc_g]}"
    skyc_nnodes[skyc_g]=${#skyc_nodes[@]}
    skyc_ips[skyc_g]=$skyc_list
done
echo -n "$skyc_hosts" >"$SKYC_RUN_DIR/hosts"
skyc_write_task_files "$SKYC_RUN_DIR"
skyc_write_step "$SKYC_RUN_DIR/step.sh"
skyc_status job START "$skyc_job" "components=$skyc_jobids"

declare -A skyc_wait=() # pid -> "task G" | "delay G" | "grace G"
skyc_attempt=() skyc_used=() skyc_state=() skyc_final=() skyc_srun=() skyc_timer=()
skyc_primaries_left=0 skyc_primary_failed=0

skyc_launch() { # G
    local g=$1 name=${skyc_tasks[$1]} het=()
    if [ -n "${SLURM_HET_SIZE:-}" ]; then het=(--het-group="$g"); fi
    (
        # A pipeline's steps are plain managed-job tasks: no Job Group.
        if [ -n "${skyc_step:-}" ]; then
            unset SKYPILOT_JOBGROUP_NAME
        else
            export SKYPILOT_JOBGROUP_NAME=$skyc_group
        fi
        export SKYPILOT_NUM_NODES=${skyc_nnodes[g]} \
            SKYPILOT_NODE_IPS=${skyc_ips[g]} SKYPILOT_NUM_GPUS_PER_NODE=${skyc_gpus[g]} \
            SKYPILOT_TASK_ID=skyc-slurm-${skyc_id}_${skyc_group}_$name-$((skyc_id_first + g)) \
            SKYPILOT_TASK_IDS=$skyc_task_ids SKYC_TASK=$name SKYC_ATTEMPT=${skyc_attempt[g]}
        exec srun "${het[@]}" --job-name="$name" --nodes="${skyc_nnodes[g]}" \
            --ntasks-per-node=1 --kill-on-bad-exit=1 --open-mode=append \
            --output="$SKYC_OUT/logs/$name-%t.log" \
            bash "$SKYC_RUN_DIR/step.sh" "$g" "${skyc_attempt[g]}"
    ) &
    skyc_srun[g]=$!
    skyc_wait[$!]="task $g"
    skyc_state[g]=running
    skyc_status task "$name" "${skyc_attempt[g]}" RUNNING
}

skyc_cancel_timer() { # G
    local t=${skyc_timer[$1]:-}
    if [ -n "$t" ]; then
        kill "$t" 2>/dev/null
        unset "skyc_wait[$t]"
        skyc_timer[$1]=""
    fi
}

skyc_set_timer() { # G KIND SECONDS
    sleep "$3" &
    skyc_timer[$1]=$!
    skyc_wait[$!]="$2 $1"
}

# Running steps of the task named $1, as componentJobId.stepId.
skyc_step_ids() {
    squeue -h -s -j "$skyc_jobids" -o '%i %j' 2>/dev/null | awk -v n="$1" '$2 == n { print $1 }'
}

skyc_terminate() { # G: SIGTERM now, SIGKILL after the grace period
    local g=$1 name=${skyc_tasks[$1]} ids
    skyc_cancel_timer "$g"
    skyc_state[g]=terminating
    skyc_status task "$name" "${skyc_attempt[g]}" CANCELLING
    mapfile -t ids < <(skyc_step_ids "$name")
    if ((${#ids[@]})); then
        scancel --signal=TERM "${ids[@]}"
    else
        # No step yet: srun is still creating it, and stops on SIGTERM.
        kill -TERM "${skyc_srun[g]}" 2>/dev/null
    fi
    skyc_set_timer "$g" grace "$skyc_grace"
}

skyc_kill() { # G
    local g=$1 name=${skyc_tasks[$1]} ids
    skyc_timer[g]=""
    [ "${skyc_state[g]}" = terminating ] || return 0
    skyc_status task "$name" "${skyc_attempt[g]}" SIGKILL
    mapfile -t ids < <(skyc_step_ids "$name")
    # scancel without --signal kills the step at once.
    if ((${#ids[@]})); then scancel "${ids[@]}"; fi
}

skyc_primaries_finished() {
    local g
    for g in "${!skyc_tasks[@]}"; do
        if [ "${skyc_primary[g]}" = 0 ] && [ "${skyc_state[g]}" = running ]; then
            if [ "$skyc_primary_failed" = 1 ] || [ "${skyc_delay[g]}" = 0 ]; then
                skyc_terminate "$g"
            else
                skyc_set_timer "$g" delay "${skyc_delay[g]}"
            fi
        fi
    done
}

skyc_finish() { # G STATUS
    local g=$1
    skyc_cancel_timer "$g"
    skyc_state[g]=finished
    skyc_final[g]=$2
    skyc_status task "${skyc_tasks[g]}" "${skyc_attempt[g]}" "$2"
    if [ "${skyc_primary[g]}" = 1 ]; then
        [ "$2" = SUCCEEDED ] || skyc_primary_failed=1
        skyc_primaries_left=$((skyc_primaries_left - 1))
        if [ "$skyc_primaries_left" = 0 ]; then skyc_primaries_finished; fi
    fi
}

skyc_restart_task() { # G WHY
    local g=$1
    skyc_cancel_timer "$g"
    skyc_status task "${skyc_tasks[g]}" "${skyc_attempt[g]}" RECOVERING "$2"
    skyc_attempt[g]=$((skyc_attempt[g] + 1))
    skyc_launch "$g"
}

skyc_task_exited() { # G SRUN_STATUS
    local g=$1 rc=$2 name=${skyc_tasks[$1]} a=${skyc_attempt[$1]}
    local r f phase code failed=0 in_setup=0 listed=0
    for ((r = 0; r < skyc_nnodes[g]; r++)); do
        f=$SKYC_RUN_DIR/exit.$g.$a.$r
        if [ -r "$f" ]; then
            read -r phase code <"$f"
        else
            # The node never reported: lost, or killed before it could.
            phase=lost code=$rc
            [ "$code" != 0 ] || code=255
        fi
        skyc_status node "$name" "$a" "$r" "$phase" "$code"
        if [ "$code" != 0 ]; then
            failed=1
            [ "$phase" != setup ] || in_setup=1
            [[ " ${skyc_recover_codes[g]} " != *" $code "* ]] || listed=1
        fi
    done
    if [ "${skyc_state[g]}" = terminating ]; then
        skyc_finish "$g" CANCELLED
    elif [ "$failed" = 0 ]; then
        skyc_finish "$g" SUCCEEDED
    elif [ "${skyc_primary[g]}" = 0 ] && [ "$skyc_primaries_left" = 0 ]; then
        # An auxiliary past its primaries is not restarted.
        skyc_finish "$g" FAILED
    elif [ "$listed" = 1 ]; then
        skyc_restart_task "$g" "exit code in recover_on_exit_codes"
    elif [ "${skyc_used[g]}" -lt "${skyc_max_restarts[g]}" ]; then
        skyc_used[g]=$((skyc_used[g] + 1))
        skyc_restart_task "$g" "restart ${skyc_used[g]} of ${skyc_max_restarts[g]}"
    elif [ "$in_setup" = 1 ]; then
        skyc_finish "$g" FAILED_SETUP
    else
        skyc_finish "$g" FAILED
    fi
}

for skyc_g in "${!skyc_tasks[@]}"; do
    skyc_attempt[skyc_g]=0 skyc_used[skyc_g]=0
    if [ "${skyc_primary[skyc_g]}" = 1 ]; then skyc_primaries_left=$((skyc_primaries_left + 1)); fi
done
for skyc_g in "${!skyc_tasks[@]}"; do skyc_launch "$skyc_g"; done

while ((${#skyc_wait[@]})); do
    skyc_pid=""
    wait -n -p skyc_pid "${!skyc_wait[@]}"
    skyc_rc=$?
    [ -n "$skyc_pid" ] || continue
    read -r skyc_kind skyc_g <<<"${skyc_wait[$skyc_pid]}"
    unset "skyc_wait[$skyc_pid]"
    case $skyc_kind in
        task) skyc_task_exited "$skyc_g" "$skyc_rc" ;;
        delay)
            skyc_timer[skyc_g]=""
            skyc_terminate "$skyc_g"
            ;;
        grace) skyc_kill "$skyc_g" ;;
    esac
done

# The group's status: the first primary that did not succeed.
skyc_result=SUCCEEDED
for skyc_g in "${!skyc_tasks[@]}"; do
    if [ "${skyc_primary[skyc_g]}" = 1 ] && [ "${skyc_final[skyc_g]}" != SUCCEEDED ]; then
        skyc_result=${skyc_final[skyc_g]}
        break
    fi
done
skyc_status group "$skyc_result"
[ "$skyc_result" = SUCCEEDED ]
