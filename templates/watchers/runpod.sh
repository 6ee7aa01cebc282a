#!/bin/sh
# cloudgpu watcher for RunPod pods (runs in the pod).
#
# RunPod has no spot/preemption notice (its interruptible pods are being retired). The
# one advance warning it publishes is a host maintenance window, machine.maintenanceStart
# of the pod, which this script polls through the GraphQL API with the pod-scoped key
# every pod carries (RUNPOD_API_KEY, RUNPOD_POD_ID; https://docs.runpod.io/runpodctl):
#   POST $RUNPOD_API_BASE_URL/graphql  Authorization: Bearer <key>
#   {"query": "query Pod($input: PodFilter!) { pod(input: $input) { desiredStatus
#    machine { maintenanceStart } } }", "variables": {"input": {"podId": "<pod>"}}}
# A window that has been announced, or a pod whose desiredStatus is no longer RUNNING,
# writes {"action": "maintenance"|"stopping", "time": <UTC ISO now>, "detail": ...,
# "source": "runpod-status"} to $CLOUDGPU_NOTICE_FILE, runs $CLOUDGPU_ON_NOTICE and
# exits 0.
#
# It also enforces the deadline, since RunPod has no server-side expiry: once
# CLOUDGPU_DEADLINE (unix seconds) has passed it removes its own pod with
# `runpodctl remove pod $RUNPOD_POD_ID`, which ends billing.
#
# Environment (all optional, the same as the other watchers, plus):
#   CLOUDGPU_NOTICE_FILE  where the notice goes   (default /run/cloudgpu/preempt.json)
#   CLOUDGPU_ON_NOTICE    shell command run once after the notice is written
#   CLOUDGPU_POLL_S       seconds between polls   (default 30: it costs an API call)
#   CLOUDGPU_DEADLINE     unix seconds after which the pod removes itself
#   RUNPOD_API_BASE_URL   API base                (default https://api.runpod.io)
#   RUNPODCTL             the runpodctl command   (default runpodctl)
#   CLOUDGPU_MAX_POLLS    stop after this many polls, 0 = forever (default 0; tests)
set -u

api="${RUNPOD_API_BASE_URL:-https://api.runpod.io}/graphql"
notice_file="${CLOUDGPU_NOTICE_FILE:-/run/cloudgpu/preempt.json}"
poll="${CLOUDGPU_POLL_S:-30}"
max_polls="${CLOUDGPU_MAX_POLLS:-0}"
deadline="${CLOUDGPU_DEADLINE:-0}"
runpodctl="${RUNPODCTL:-runpodctl}"
pod="${RUNPOD_POD_ID:-}"

status() {
    [ -n "$pod" ] && [ -n "${RUNPOD_API_KEY:-}" ] || return 0
    query='query Pod($input: PodFilter!) { pod(input: $input) { desiredStatus machine { maintenanceStart } } }'
    body=$(printf '{"query": "%s", "variables": {"input": {"podId": "%s"}}}' "$query" "$pod")
    # The key goes through curl's config on stdin, never onto a command line (ps).
    printf 'header = "Authorization: Bearer %s"\n' "$RUNPOD_API_KEY" |
        curl -sf -m 10 -K - -H "Content-Type: application/json" -d "$body" "$api" 2>/dev/null ||
        true
}

value() {  # value NAME: the JSON string (or null) of "NAME" in the answer on stdin
    sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\"\\{0,1\\}\\([^\",}]*\\)\"\\{0,1\\}.*/\\1/p" | head -n 1
}

notify() {
    now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    printf '{"action": "%s", "time": "%s", "detail": "%s", "source": "runpod-status"}\n' \
        "$1" "$now" "$2" > "$notice_file.tmp" && mv "$notice_file.tmp" "$notice_file"
    if [ -n "${CLOUDGPU_ON_NOTICE:-}" ]; then
        sh -c "$CLOUDGPU_ON_NOTICE" || true
    fi
    exit 0
}

mkdir -p "$(dirname "$notice_file")"
polls=0
while :; do
    if [ "$deadline" -gt 0 ] && [ "$(date +%s)" -ge "$deadline" ] && [ -n "$pod" ]; then
        $runpodctl remove pod "$pod" || true
    fi
    answer=$(status)
    if [ -n "$answer" ]; then
        maintenance=$(printf '%s' "$answer" | value maintenanceStart)
        desired=$(printf '%s' "$answer" | value desiredStatus)
        if [ -n "$maintenance" ] && [ "$maintenance" != "null" ]; then
            notify maintenance "$maintenance"
        fi
        if [ -n "$desired" ] && [ "$desired" != "RUNNING" ]; then
            notify stopping "$desired"
        fi
    fi
    polls=$((polls + 1))
    if [ "$max_polls" -gt 0 ] && [ "$polls" -ge "$max_polls" ]; then
        exit 1
    fi
    sleep "$poll"
done
