# shellcheck shell=bash disable=SC2154 # skyc_dir is the agent's
# skyc node files: sourced by the node agent (agent.sh) before setup, in a
# subshell whose every `skyc_place` line exits it on failure, when the node's task has files
# (docs/targets/cloud.md, "Code and data"). Its `skyc_place` lines, after
# these functions, place each snapshot: fetched once from the URL the
# runtime delivered (files/DIGEST.url: S3, presigned), checked against
# the SHA-256 the submission recorded, and unpacked: a directory's
# entries into its destination (merged with what is there, as rsync
# would), a file as its destination. The agent removes the fetched
# streams once everything is placed.
skyc_get() {
    if command -v curl >/dev/null 2>&1; then
        # A transfer slower than 1 KiB/s for a minute is given up on.
        curl -fsS --connect-timeout 20 --speed-limit 1024 --speed-time 60 \
            --retry 5 --retry-connrefused --retry-delay 2 -o "$2" -- "$1"
    else
        wget -q -T 60 -t 5 -O "$2" -- "$1"
    fi
}

skyc_fetch() {
    local skyc_part="$skyc_dir/files/$1.part" skyc_url
    IFS= read -r skyc_url <"$skyc_dir/files/$1.url" || return 1
    if ! skyc_get "$skyc_url" "$skyc_part"; then
        echo "skyc: the task's files ($1) could not be fetched from ${skyc_url%%\?*}" >&2
        return 1
    fi
    if ! echo "$2  $skyc_part" | sha256sum -c --status; then
        echo "skyc: the task's files ($1) fetched are not the submitted ones (their SHA-256 differs)" >&2
        return 1
    fi
    mv -f -- "$skyc_part" "$skyc_dir/files/$1.tar"
}

skyc_place() {
    local skyc_tar="$skyc_dir/files/$1.tar" skyc_tmp
    [ -e "$skyc_tar" ] || skyc_fetch "$1" "$2" || return 1
    if [ "$3" = dir ]; then
        # Directories already there keep their modes and times.
        mkdir -p -- "$4" && tar -x --no-overwrite-dir -f "$skyc_tar" -C "$4"
    else
        if [ -d "$4" ] && [ ! -L "$4" ]; then
            echo "skyc: $4 is a directory: a file mount does not replace it" >&2
            return 1
        fi
        skyc_tmp=$(mktemp -d "$skyc_dir/files/place.XXXXXX") || return 1
        tar -x -f "$skyc_tar" -C "$skyc_tmp" && mkdir -p -- "$(dirname -- "$4")" &&
            rm -f -- "$4" && mv -f -- "$skyc_tmp/file" "$4"
        local skyc_code=$?
        rm -rf -- "$skyc_tmp"
        return "$skyc_code"
    fi
}

# The workdir is the node's work directory; ~/sky_workdir names it too,
# as on SkyPilot's nodes (unless the image has one of its own).
skyc_link_workdir() {
    [ -e "$1" ] || [ -L "$1" ] || ln -s -- "$skyc_dir/workdir" "$1"
}

