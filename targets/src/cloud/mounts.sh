# shellcheck shell=bash disable=SC2154,SC2016,SC1003 # skyc_dir and skyc_status are the agent's; skyc_mount's words are quoted on purpose
# skyc bucket mounts: the functions of a node's mounts.sh, which the
# runtime delivers to a node whose task mounts S3 buckets and the agent
# sources before setup (docs/targets/cloud.md, "Mounted S3 buckets on AWS
# instances"). After them, mounts.sh checks rclone, writes the program
# that serves a mount (bucket-mount.sh) and mounts each bucket; each of
# its lines returns from the sourcing when it fails.
# Each bucket is served by bucket-mount.sh (rclone, in a session of its
# own), reading the credentials the runtime delivers and renews
# (aws/credentials.json, through the AWS configuration's
# credential_process); mounted before setup, and ended, its cached
# writes uploaded, before the node's end is written.
skyc_mount_pids=""
skyc_mount() { # INDEX CACHED REMOTE DESTINATION [NAME=VALUE]...
    local skyc_i=$1 skyc_cached=$2 skyc_remote=$3 skyc_at=$4 skyc_t
    shift 4
    mkdir -p -- "$skyc_at" || return 1
    # The runtime's credentials alone: not a key the image or root has.
    env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN -u AWS_PROFILE \
        "$@" AWS_CONFIG_FILE="$skyc_dir/aws/config" AWS_SDK_LOAD_CONFIG=1 \
        AWS_SHARED_CREDENTIALS_FILE=/dev/null \
        SKYC_REMOTE="$skyc_remote" SKYC_AT="$skyc_at" SKYC_CACHED="$skyc_cached" \
        SKYC_LOG="$skyc_dir/mounts/$skyc_i.log" SKYC_CACHE="$skyc_dir/mounts/$skyc_i.cache" \
        setsid sh "$skyc_dir/bucket-mount.sh" >>"$skyc_dir/mounts/$skyc_i.out" 2>&1 </dev/null &
    skyc_mount_pids="$skyc_mount_pids $!"
    for ((skyc_t = 0; skyc_t < 300; skyc_t++)); do
        if findmnt -n -M "$skyc_at" -t fuse.rclone >/dev/null 2>&1; then
            # rclone mounts before it asks S3 anything: a listing says
            # now, not at the task's first read, that it cannot.
            ls -- "$skyc_at" >/dev/null 2>&1 && return 0
            break
        fi
        kill -0 "$!" 2>/dev/null || break
        sleep 0.1
    done
    echo "skyc: $skyc_remote could not be mounted at $skyc_at: $(tail -n 3 "$skyc_dir/mounts/$skyc_i.log" 2>/dev/null)" >&2
    return 1
}
skyc_mount_ready() {
    if ! command -v rclone >/dev/null 2>&1 || [ ! -e /dev/fuse ]; then
        # The image's packages, when it has none (SkyPilot's images are
        # Ubuntu's).
        if command -v apt-get >/dev/null 2>&1; then
            # A new image's own upgrades may hold dpkg's lock a while.
            DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq rclone fuse3 >/dev/null 2>&1 ||
                { apt-get -o DPkg::Lock::Timeout=300 update -qq &&
                    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq rclone fuse3 >/dev/null; }
        fi
        if ! command -v rclone >/dev/null 2>&1 || [ ! -e /dev/fuse ]; then
            echo "skyc: mounting buckets needs rclone and FUSE on the node (Debian and Ubuntu: apt-get install rclone fuse3)" >&2
            return 1
        fi
    fi
    mkdir -p "$skyc_dir/mounts" || return 1
    printf '[default]\ncredential_process = cat %s/aws/credentials.json\n' "$skyc_dir" >"$skyc_dir/aws/config"
}
# Ends every mount: SIGTERM, then their uploads are waited for (at most
# 10 minutes in all, as on every target), then what is left is killed.
skyc_unmount_all() {
    local skyc_pid skyc_t skyc_left
    [ -n "$skyc_mount_pids" ] || return 0
    skyc_status buckets unmount
    for skyc_pid in $skyc_mount_pids; do
        kill -TERM "$skyc_pid" 2>/dev/null
    done
    for ((skyc_t = 0; skyc_t < 6000; skyc_t++)); do
        skyc_left=""
        for skyc_pid in $skyc_mount_pids; do
            kill -0 "$skyc_pid" 2>/dev/null && skyc_left=1
        done
        [ -n "$skyc_left" ] || break
        sleep 0.1
    done
    for skyc_pid in $skyc_mount_pids; do
        kill -KILL "$skyc_pid" 2>/dev/null
    done
    skyc_mount_pids=""
}

