#!/bin/sh
# cloudgpu preemption watcher for GCP Spot VMs (runs on the instance).
#
# Polls the metadata server, header "Metadata-Flavor: Google":
#   GET http://metadata.google.internal/computeMetadata/v1/instance/preempted
# which answers FALSE until Compute Engine preempts the VM, then TRUE; the VM then has
# about 30 seconds before it stops (and, with instanceTerminationAction DELETE, is deleted):
# https://cloud.google.com/compute/docs/instances/create-use-spot#detect-preemption
# GPU VMs cannot live-migrate, so a host maintenance event ends them too; it is announced
# at instance/maintenance-event as TERMINATE_ON_HOST_MAINTENANCE (an hour ahead for GPUs):
# https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice
#
# On either it writes {"action": "preempt"|"maintenance", "time": <UTC ISO now>,
# "source": "gcp-metadata"} to $CLOUDGPU_NOTICE_FILE (atomically), runs
# $CLOUDGPU_ON_NOTICE if set (e.g. flush checkpoints) and exits 0. It must not stop or
# kill the job itself: the lifecycle decides what to do with the notice.
#
# Environment (all optional, the same as the other watchers):
#   CLOUDGPU_NOTICE_FILE  where the notice goes   (default /run/cloudgpu/preempt.json)
#   CLOUDGPU_ON_NOTICE    shell command run once after the notice is written
#   CLOUDGPU_POLL_S       seconds between polls   (default 5)
#   GCE_METADATA_HOST     metadata server host[:port] (default metadata.google.internal;
#                         the variable Google's client libraries honour)
#   CLOUDGPU_MAX_POLLS    stop after this many polls, 0 = forever (default 0; tests)
set -u

base="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance"
notice_file="${CLOUDGPU_NOTICE_FILE:-/run/cloudgpu/preempt.json}"
poll="${CLOUDGPU_POLL_S:-5}"
max_polls="${CLOUDGPU_MAX_POLLS:-0}"

get() {  # get PATH: the value, or nothing when the server does not answer 200
    curl -sf -m 3 -H "Metadata-Flavor: Google" "$base/$1" 2>/dev/null || true
}

notify() {
    now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    printf '{"action": "%s", "time": "%s", "source": "gcp-metadata"}\n' "$1" "$now" \
        > "$notice_file.tmp" && mv "$notice_file.tmp" "$notice_file"
    if [ -n "${CLOUDGPU_ON_NOTICE:-}" ]; then
        sh -c "$CLOUDGPU_ON_NOTICE" || true
    fi
    exit 0
}

mkdir -p "$(dirname "$notice_file")"
polls=0
while :; do
    if [ "$(get preempted)" = "TRUE" ]; then
        notify preempt
    fi
    if [ "$(get maintenance-event)" = "TERMINATE_ON_HOST_MAINTENANCE" ]; then
        notify maintenance
    fi
    polls=$((polls + 1))
    if [ "$max_polls" -gt 0 ] && [ "$polls" -ge "$max_polls" ]; then
        exit 1
    fi
    sleep "$poll"
done
