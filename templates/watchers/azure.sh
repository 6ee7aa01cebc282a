#!/bin/sh
# cloudgpu preemption watcher for Azure Spot VMs (runs on the VM; started by the
# bootstrap, read by the lifecycle over SSH: cloudgpu/lifecycle/notice.py).
#
# Polls Azure Instance Metadata Service Scheduled Events:
#   GET http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01
#   header "Metadata: true" (IMDS refuses requests without it)
# which answers {"DocumentIncarnation": N, "Events": [...]}. Azure schedules a Spot
# eviction as an event with "EventType": "Preempt", "Resources": [<VM names>] and
# "NotBefore" (an RFC 1123 time, at least 30 s ahead):
# https://learn.microsoft.com/azure/virtual-machines/linux/scheduled-events
# The first request enables Scheduled Events on the VM and can take a while to answer,
# hence the generous first timeout.
#
# On a Preempt event for this VM ($CLOUDGPU_VM_NAME; any VM when unset) it writes
# {"action": "preempt", "time": NotBefore, "detail": <EventId>, "source":
# "azure-scheduled-events"} to $CLOUDGPU_NOTICE_FILE (atomically), then waits for
# $CLOUDGPU_NOTICE_ACK, which the lifecycle creates once the checkpoint is flushed, and
# only then acknowledges the event (POST {"StartRequests": [{"EventId": ...}]}), letting
# Azure evict at once instead of at NotBefore; without the ack in CLOUDGPU_ACK_WAIT_S it
# leaves the event alone. It never stops the job itself: the lifecycle decides.
#
# Environment (all optional):
#   CLOUDGPU_NOTICE_FILE  where the notice goes   (default /run/cloudgpu/preempt.json)
#   CLOUDGPU_NOTICE_ACK   appears when the lifecycle is done with the VM (default: none)
#   CLOUDGPU_ACK_WAIT_S   how long to wait for it (default 120)
#   CLOUDGPU_VM_NAME      this VM's name, to skip events for other VMs
#   CLOUDGPU_POLL_S       seconds between polls   (default 2: IMDS is local and free)
#   CLOUDGPU_DEADLINE     unix seconds; the watcher exits then (the VM is done)
#   IMDS_ENDPOINT         metadata service base   (default http://169.254.169.254)
#   CLOUDGPU_MAX_POLLS    stop after this many polls, 0 = forever (default 0; tests)
set -u

endpoint="${IMDS_ENDPOINT:-http://169.254.169.254}"
notice_file="${CLOUDGPU_NOTICE_FILE:-/run/cloudgpu/preempt.json}"
ack_file="${CLOUDGPU_NOTICE_ACK:-}"
ack_wait="${CLOUDGPU_ACK_WAIT_S:-120}"
vm="${CLOUDGPU_VM_NAME:-}"
poll="${CLOUDGPU_POLL_S:-2}"
max_polls="${CLOUDGPU_MAX_POLLS:-0}"
deadline="${CLOUDGPU_DEADLINE:-}"
url="$endpoint/metadata/scheduledevents?api-version=2020-07-01"
timeout=120

# One event object per line, so a Preempt event's own fields can be read with sed.
split_events() {
    tr -d '\n' | sed 's/}[[:space:]]*,[[:space:]]*{/}\n{/g'
}

field() {  # field NAME: the string value of "NAME" in the event on stdin, safe characters
    sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\"\\([^\"]*\\)\".*/\\1/p" | head -n 1 |
        tr -cd 'A-Za-z0-9:,._ +-'
}

ours() {  # ours: the Preempt events on stdin that name this VM (all when the name is unknown)
    grep '"EventType"[[:space:]]*:[[:space:]]*"Preempt"' | {
        if [ -n "$vm" ]; then grep -F "\"$vm\""; else cat; fi
    }
}

acknowledge() {  # acknowledge EVENT_ID, once the lifecycle says the checkpoint is flushed
    [ -n "$ack_file" ] || return 0
    case "$1" in "" | *[!0-9A-Fa-f-]*) return 0 ;; esac
    waited=0
    while [ ! -e "$ack_file" ]; do
        [ "$waited" -lt "$ack_wait" ] || return 0
        sleep 1
        waited=$((waited + 1))
    done
    curl -sf -m 10 -X POST -H "Metadata: true" -H "Content-Type: application/json" \
        -d "{\"StartRequests\": [{\"EventId\": \"$1\"}]}" "$url" >/dev/null || true
}

mkdir -p "$(dirname "$notice_file")"
polls=0
while :; do
    body=$(curl -sf -m "$timeout" -H "Metadata: true" "$url") || body=""
    timeout=10
    event=$(printf '%s' "$body" | split_events | ours | head -n 1)
    if [ -n "$event" ]; then
        not_before=$(printf '%s' "$event" | field NotBefore)
        event_id=$(printf '%s' "$event" | field EventId)
        printf '{"action": "preempt", "time": "%s", "detail": "%s", "source": "azure-scheduled-events"}\n' \
            "$not_before" "$event_id" > "$notice_file.tmp" && mv "$notice_file.tmp" "$notice_file"
        acknowledge "$event_id"
        exit 0
    fi
    polls=$((polls + 1))
    if [ "$max_polls" -gt 0 ] && [ "$polls" -ge "$max_polls" ]; then
        exit 1
    fi
    if [ -n "$deadline" ] && [ "$(date +%s)" -ge "${deadline%.*}" ]; then
        exit 1
    fi
    sleep "$poll"
done
