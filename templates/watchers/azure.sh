#!/bin/sh
# cloudgpu preemption watcher for Azure Spot VMs (runs on the instance).
#
# Polls Azure Instance Metadata Service Scheduled Events:
#   GET http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01
#   header "Metadata: true"
# which answers {"DocumentIncarnation": N, "Events": [...]}. Azure schedules a Spot
# eviction as an event with "EventType": "Preempt" and "NotBefore" (an RFC 1123 time, at
# least 30 s ahead):
# https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events
# The first request enables Scheduled Events on the VM and can take a while to answer,
# hence the generous first timeout. Events are not acknowledged (no StartRequests POST):
# that would only bring the eviction forward.
#
# On a Preempt event it writes {"action": "preempt", "time": NotBefore, "event_id": ...,
# "source": "azure-scheduled-events"} to $CLOUDGPU_NOTICE_FILE (atomically), runs
# $CLOUDGPU_ON_NOTICE if set (e.g. flush checkpoints) and exits 0. It must not stop or
# kill the job itself: the lifecycle decides what to do with the notice.
#
# Environment (all optional, the same as the other watchers):
#   CLOUDGPU_NOTICE_FILE  where the notice goes   (default /run/cloudgpu/preempt.json)
#   CLOUDGPU_ON_NOTICE    shell command run once after the notice is written
#   CLOUDGPU_POLL_S       seconds between polls   (default 5)
#   IMDS_ENDPOINT         metadata service base   (default http://169.254.169.254)
#   CLOUDGPU_MAX_POLLS    stop after this many polls, 0 = forever (default 0; tests)
set -u

endpoint="${IMDS_ENDPOINT:-http://169.254.169.254}"
notice_file="${CLOUDGPU_NOTICE_FILE:-/run/cloudgpu/preempt.json}"
poll="${CLOUDGPU_POLL_S:-5}"
max_polls="${CLOUDGPU_MAX_POLLS:-0}"
url="$endpoint/metadata/scheduledevents?api-version=2020-07-01"
timeout=120

# One event object per line, so a Preempt event's own fields can be read with sed.
split_events() {
    tr -d '\n' | sed 's/}[[:space:]]*,[[:space:]]*{/}\n{/g'
}

field() {  # field NAME: the string value of "NAME" in the event on stdin
    sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\"\\([^\"]*\\)\".*/\\1/p" | head -n 1
}

mkdir -p "$(dirname "$notice_file")"
polls=0
while :; do
    body=$(curl -sf -m "$timeout" -H "Metadata: true" "$url") || body=""
    timeout=10
    event=$(printf '%s' "$body" | split_events | grep '"EventType"[[:space:]]*:[[:space:]]*"Preempt"' | head -n 1)
    if [ -n "$event" ]; then
        not_before=$(printf '%s' "$event" | field NotBefore)
        event_id=$(printf '%s' "$event" | field EventId)
        printf '{"action": "preempt", "time": "%s", "event_id": "%s", "source": "azure-scheduled-events"}\n' \
            "$not_before" "$event_id" > "$notice_file.tmp" && mv "$notice_file.tmp" "$notice_file"
        if [ -n "${CLOUDGPU_ON_NOTICE:-}" ]; then
            sh -c "$CLOUDGPU_ON_NOTICE" || true
        fi
        exit 0
    fi
    polls=$((polls + 1))
    if [ "$max_polls" -gt 0 ] && [ "$polls" -ge "$max_polls" ]; then
        exit 1
    fi
    sleep "$poll"
done
