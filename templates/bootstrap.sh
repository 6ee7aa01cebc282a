#!/bin/sh
# cloudgpu instance bootstrap: prepare local NVMe at $CLOUDGPU_NVME and arm the deadline.
#
# Run by the lifecycle as `sh -c "$(cat bootstrap.sh)" bootstrap` with these variables:
#   CLOUDGPU_NVME       where the job expects local NVMe (/nvme on real machines)
#   CLOUDGPU_INSTANCE   the instance id every job process carries in its environment
#   CLOUDGPU_DEADLINE   unix seconds; at that time the job's processes are stopped (empty: none)
#   CLOUDGPU_DISPOSABLE 1: the machine is a fresh VM made for this job (provider capability
#                       `disposable`): its empty NVMe disks may be formatted and it is powered
#                       off at the deadline. Never set for machines the user owns, this
#                       computer, or simulated instances sharing a host.
#   CLOUDGPU_POWEROFF   (set by the instance itself, e.g. sim) a command that powers it off;
#                       used at the deadline instead of shutdown(8)
#   CLOUDGPU_WATCHER    (optional) the provider's preemption-notice watcher, a whole sh
#                       script: written to $NVME/.cloudgpu/notice-watcher.sh and started
#                       detached, like the deadline watchdog, with CLOUDGPU_NOTICE_FILE,
#                       CLOUDGPU_ADVISORY_FILE and CLOUDGPU_NOTICE_ACK pointing into
#                       $NVME/.cloudgpu (the lifecycle reads the notice there over SSH)
#
# NVMe: on a disposable machine where we are root (or have passwordless sudo) and
# $CLOUDGPU_NVME is not mounted yet, every
# local NVMe disk that has no partitions, filesystem or mount is put into one RAID0 array
# (or used directly when there is one), formatted ext4 and mounted there. Elsewhere (this
# computer, a simulated instance, a machine without spare NVMe) it is a plain directory.
# Prints "nvme=<path> free_gb=<n> devices=<n>" last; exit 0 on success.
set -eu

NVME="${CLOUDGPU_NVME:-/nvme}"
DEVICES=0

# Disk and power work needs root: directly when we are root, through passwordless sudo
# when we log in as the image's default user (ubuntu, azureuser, ...: cloud images give
# it one), and not at all otherwise (then NVMe is a plain directory we can write).
if [ "$(id -u)" = 0 ]; then
    AS_ROOT=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    AS_ROOT="sudo -n"
else
    AS_ROOT="none"
fi

nvme_candidates() {
    # Whole NVMe disks with no partitions, no filesystem signature and not mounted.
    command -v lsblk >/dev/null 2>&1 || return 0
    lsblk -dpno NAME,TYPE 2>/dev/null | while read -r dev type; do
        case "$dev" in /dev/nvme*n[0-9]*) ;; *) continue ;; esac
        [ "$type" = disk ] || continue
        [ "$(lsblk -no NAME "$dev" | wc -l)" -eq 1 ] || continue
        [ -z "$(lsblk -no FSTYPE,MOUNTPOINT "$dev" | tr -d ' \n')" ] || continue
        echo "$dev"
    done
}

prepare_nvme() {
    if [ "${CLOUDGPU_DISPOSABLE:-0}" = 1 ] && [ "$AS_ROOT" != none ] \
        && ! mountpoint -q "$NVME" 2>/dev/null; then
        devs=$(nvme_candidates | tr '\n' ' ')
        set -- $devs
        DEVICES=$#
        if [ "$DEVICES" -ge 2 ] && command -v mdadm >/dev/null 2>&1; then
            $AS_ROOT mdadm --create /dev/md/cloudgpu --run --level=0 --raid-devices="$DEVICES" "$@" >/dev/null
            target=/dev/md/cloudgpu
        elif [ "$DEVICES" -ge 1 ]; then
            target=$1
        else
            target=""
        fi
        if [ -n "$target" ]; then
            $AS_ROOT mkfs.ext4 -q -F -E nodiscard -m 0 "$target"
            $AS_ROOT mkdir -p "$NVME"
            $AS_ROOT mount -o noatime "$target" "$NVME"
            $AS_ROOT chmod 1777 "$NVME"
        fi
    fi
    if ! mkdir -p "$NVME" 2>/dev/null && [ "${CLOUDGPU_DISPOSABLE:-0}" = 1 ] \
        && [ "$AS_ROOT" != none ]; then
        $AS_ROOT mkdir -p "$NVME" && $AS_ROOT chmod 1777 "$NVME"
    fi
    probe="$NVME/.cloudgpu-write-test.$$"
    if ! : > "$probe" 2>/dev/null; then
        echo "cloudgpu bootstrap: $NVME is not writable" >&2
        exit 3
    fi
    rm -f "$probe"
}

arm_deadline() {
    [ -n "${CLOUDGPU_DEADLINE:-}" ] || return 0
    state="$NVME/.cloudgpu"
    mkdir -p "$state"
    # Re-arming (a later bootstrap, or --keep's idle timeout) replaces the old watchdog.
    if [ -f "$state/deadline.pid" ]; then
        kill "$(cat "$state/deadline.pid")" 2>/dev/null || true
    fi
    now=$(date +%s)
    wait_s=$(( ${CLOUDGPU_DEADLINE%.*} - now ))
    [ "$wait_s" -gt 0 ] || wait_s=1
    # The watchdog is its own session and ignores hangups: it outlives the SSH login
    # and the client. It carries CLOUDGPU_DEADLINE_OF instead of the instance id, so it
    # does not count itself among the job's processes, yet terminating the instance on a
    # machine that stays up (this computer, an owned host) still finds and ends it.
    setsid env -u CLOUDGPU_INSTANCE CLOUDGPU_DEADLINE_OF="${CLOUDGPU_INSTANCE:-none}" sh -c '
        sleep "$1"
        echo "deadline reached at $(date -u +%FT%TZ)" > "$3/deadline.fired"
        for f in /proc/[0-9]*/environ; do
            if tr "\0" "\n" < "$f" 2>/dev/null | grep -qx "CLOUDGPU_INSTANCE=$2"; then
                pid=${f#/proc/}; kill -TERM "${pid%/environ}" 2>/dev/null || true
            fi
        done
        sleep 5
        for f in /proc/[0-9]*/environ; do
            if tr "\0" "\n" < "$f" 2>/dev/null | grep -qx "CLOUDGPU_INSTANCE=$2"; then
                pid=${f#/proc/}; kill -KILL "${pid%/environ}" 2>/dev/null || true
            fi
        done
        if [ -n "${CLOUDGPU_POWEROFF:-}" ] && [ -x "$CLOUDGPU_POWEROFF" ]; then
            "$CLOUDGPU_POWEROFF"
        elif [ "$4" = 1 ] && [ "$5" != none ]; then
            $5 shutdown -h now 2>/dev/null || $5 poweroff 2>/dev/null || $5 halt -p
        fi
    ' cloudgpu-deadline "$wait_s" "${CLOUDGPU_INSTANCE:-none}" "$state" \
        "${CLOUDGPU_DISPOSABLE:-0}" "$AS_ROOT" </dev/null >/dev/null 2>&1 &
    echo $! > "$state/deadline.pid"
}

arm_watcher() {
    state="$NVME/.cloudgpu"
    mkdir -p "$state"
    # A re-run replaces the old watcher, and a notice of an earlier instance is not this one's.
    if [ -f "$state/watcher.pid" ]; then
        kill -TERM "-$(cat "$state/watcher.pid")" 2>/dev/null || true  # its whole group
        rm -f "$state/watcher.pid"
    fi
    rm -f "$state/preempt.json" "$state/advisory.json" "$state/notice.handled"
    WATCHER=off
    [ -n "${CLOUDGPU_WATCHER:-}" ] || return 0
    printf '%s\n' "$CLOUDGPU_WATCHER" > "$state/notice-watcher.sh"
    # Its own session, like the deadline watchdog; CLOUDGPU_DEADLINE_OF lets a machine
    # that stays up (sim, a test's sshd) find and end it with the instance.
    setsid env -u CLOUDGPU_INSTANCE -u CLOUDGPU_WATCHER \
        CLOUDGPU_DEADLINE_OF="${CLOUDGPU_INSTANCE:-none}" \
        CLOUDGPU_NOTICE_FILE="$state/preempt.json" \
        CLOUDGPU_ADVISORY_FILE="$state/advisory.json" \
        CLOUDGPU_NOTICE_ACK="$state/notice.handled" \
        sh "$state/notice-watcher.sh" </dev/null >"$state/notice-watcher.log" 2>&1 &
    echo $! > "$state/watcher.pid"
    WATCHER=on
}

WATCHER=off
prepare_nvme
arm_deadline
arm_watcher
free_kb=$(df -Pk "$NVME" | awk 'NR==2 {print $4}')
echo "nvme=$NVME free_gb=$(( free_kb / 1000000 )) devices=$DEVICES watcher=$WATCHER"
