#!/bin/sh
# cloudgpu preemption watcher for GCP VMs (runs on the instance; started by the bootstrap,
# read by the lifecycle over SSH: cloudgpu/lifecycle/notice.py).
#
# Reads the metadata server, header "Metadata-Flavor: Google":
#   GET http://metadata.google.internal/computeMetadata/v1/instance/preempted
# which answers FALSE until Compute Engine preempts a Spot VM, then TRUE; the VM then has
# about 30 seconds before it stops (and, with instanceTerminationAction DELETE, is deleted):
# https://cloud.google.com/compute/docs/instances/create-use-spot#detect-preemption
# Instead of polling, the watcher holds a hanging GET ("?wait_for_change=true" with the
# ETag of the last answer, so a change in between is never missed; "timeout_sec" bounds
# it): https://cloud.google.com/compute/docs/metadata/querying-metadata#waitforchange
# GPU VMs cannot live-migrate, so a host maintenance event ends them too, Spot or not; it
# is announced at instance/maintenance-event as TERMINATE_ON_HOST_MAINTENANCE:
# https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice
#
# On either it writes {"action": "preempt"|"maintenance", "time": <UTC ISO now>,
# "source": "gcp-metadata"} to $CLOUDGPU_NOTICE_FILE (atomically) and exits 0. It never
# stops the job itself: the lifecycle decides.
#
# Environment (all optional):
#   CLOUDGPU_NOTICE_FILE  where the notice goes   (default /run/cloudgpu/preempt.json)
#   CLOUDGPU_WAIT_S       timeout_sec of each hanging GET (default 60)
#   CLOUDGPU_POLL_S       pause after a failed read (default 5)
#   CLOUDGPU_DEADLINE     unix seconds; the watcher exits then (the instance is done)
#   GCE_METADATA_HOST     metadata server host[:port] (default metadata.google.internal;
#                         the variable Google's client libraries honour)
#   CLOUDGPU_MAX_POLLS    stop after this many reads, 0 = forever (default 0; tests)
set -u

base="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance"
notice_file="${CLOUDGPU_NOTICE_FILE:-/run/cloudgpu/preempt.json}"
wait_s="${CLOUDGPU_WAIT_S:-60}"
poll="${CLOUDGPU_POLL_S:-5}"
max_polls="${CLOUDGPU_MAX_POLLS:-0}"
deadline="${CLOUDGPU_DEADLINE:-}"
headers="$(dirname "$notice_file")/.gcp-metadata-headers"

get() {  # get PATH: the value (nothing unless 200); the answer's headers go to $headers
    curl -sf -m "$((wait_s + 10))" -D "$headers" -H "Metadata-Flavor: Google" "$base/$1" \
        2>/dev/null
}

notify() {
    now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    printf '{"action": "%s", "time": "%s", "source": "gcp-metadata"}\n' "$1" "$now" \
        > "$notice_file.tmp" && mv "$notice_file.tmp" "$notice_file"
    exit 0
}

mkdir -p "$(dirname "$notice_file")"
polls=0
etag=""
while :; do
    if [ -n "$etag" ]; then
        value=$(get "preempted?wait_for_change=true&last_etag=$etag&timeout_sec=$wait_s")
    else
        value=$(get preempted)
    fi
    ok=$?
    etag=""
    if [ "$ok" = 0 ]; then
        etag=$(sed -n 's/^[Ee][Tt][Aa][Gg]:[[:space:]]*\([0-9A-Za-z]*\).*/\1/p' "$headers" | head -n 1)
    fi
    [ "$value" = "TRUE" ] && notify preempt
    [ "$(get maintenance-event)" = "TERMINATE_ON_HOST_MAINTENANCE" ] && notify maintenance
    polls=$((polls + 1))
    if [ "$max_polls" -gt 0 ] && [ "$polls" -ge "$max_polls" ]; then
        exit 1
    fi
    if [ -n "$deadline" ] && [ "$(date +%s)" -ge "${deadline%.*}" ]; then
        exit 1
    fi
    # No ETag (an error, or a server that cannot hang): pause instead of spinning.
    [ -n "$etag" ] || sleep "$poll"
done
