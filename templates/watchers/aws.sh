#!/bin/sh
# cloudgpu preemption watcher for AWS EC2 spot instances (runs on the instance; started by
# the bootstrap, read by the lifecycle over SSH: cloudgpu/lifecycle/notice.py).
#
# Polls the instance metadata service with IMDSv2 (a session token from
# PUT /latest/api/token, then GETs with X-aws-ec2-metadata-token):
#   /latest/meta-data/spot/instance-action  404 until AWS schedules the interruption, then
#       200 {"action": "stop|terminate|hibernate", "time": "<UTC ISO>"}, two minutes ahead
#       https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
#   /latest/meta-data/events/recommendations/rebalance  404, or 200 {"noticeTime": "<UTC ISO>"}
#       when the instance is at elevated risk of interruption (often well before a notice)
#       https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html
#
# A rebalance recommendation is written once to $CLOUDGPU_ADVISORY_FILE and the watch goes
# on; an instance-action is written to $CLOUDGPU_NOTICE_FILE as {"action": "preempt",
# "time": ..., "detail": <stop|terminate|hibernate>, "source": "aws-imds"} (atomically) and
# the watcher exits 0. It never stops the job itself: the lifecycle decides.
#
# Environment (all optional):
#   CLOUDGPU_NOTICE_FILE    where the notice goes    (default /run/cloudgpu/preempt.json)
#   CLOUDGPU_ADVISORY_FILE  where a rebalance goes   (default: not watched)
#   CLOUDGPU_POLL_S         seconds between polls    (default 2: IMDS is local and free)
#   CLOUDGPU_DEADLINE       unix seconds; the watcher exits then (the instance is done)
#   IMDS_ENDPOINT           metadata service base    (default http://169.254.169.254)
#   CLOUDGPU_MAX_POLLS      stop after this many polls, 0 = forever (default 0; tests)
set -u

endpoint="${IMDS_ENDPOINT:-http://169.254.169.254}"
notice_file="${CLOUDGPU_NOTICE_FILE:-/run/cloudgpu/preempt.json}"
advisory_file="${CLOUDGPU_ADVISORY_FILE:-}"
poll="${CLOUDGPU_POLL_S:-2}"
max_polls="${CLOUDGPU_MAX_POLLS:-0}"
deadline="${CLOUDGPU_DEADLINE:-}"
token=""

new_token() {
    # Six hours, the longest IMDSv2 allows; renewed on 401 anyway.
    token=$(curl -sf -m 2 -X PUT "$endpoint/latest/api/token" \
        -H "X-aws-ec2-metadata-token-ttl-seconds: 21600") || token=""
}

field() {  # field NAME: a string value of the one-line JSON on stdin, safe characters only
    sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\"\([^\"]*\)\".*/\1/p" | tr -cd 'A-Za-z0-9:._+-'
}

get() {  # get PATH: the body, then the HTTP status on the last line
    curl -s -m 2 -w '\n%{http_code}' -H "X-aws-ec2-metadata-token: $token" \
        "$endpoint/latest/meta-data/$1"
}

write() {  # write FILE JSON: atomically, so a reader never sees half of it
    printf '%s\n' "$2" > "$1.tmp" && mv "$1.tmp" "$1"
}

mkdir -p "$(dirname "$notice_file")"
polls=0
advised=""
while :; do
    [ -n "$token" ] || new_token
    if [ -n "$token" ]; then
        out=$(get spot/instance-action) || out=""
        status=$(printf '%s\n' "$out" | tail -n 1)
        body=$(printf '%s\n' "$out" | sed '$d' | tr -d '\n')
        case "$status" in
            200)
                action=$(printf '%s' "$body" | field action)
                when=$(printf '%s' "$body" | field time)
                write "$notice_file" "{\"action\": \"preempt\", \"time\": \"$when\", \"detail\": \"$action\", \"source\": \"aws-imds\"}"
                exit 0
                ;;
            401) token="" ;;  # the session token expired: a new one on the next round
        esac
        if [ -n "$token" ] && [ -n "$advisory_file" ] && [ -z "$advised" ]; then
            out=$(get events/recommendations/rebalance) || out=""
            if [ "$(printf '%s\n' "$out" | tail -n 1)" = 200 ]; then
                when=$(printf '%s\n' "$out" | sed '$d' | tr -d '\n' | field noticeTime)
                write "$advisory_file" "{\"action\": \"rebalance recommendation\", \"time\": \"$when\", \"source\": \"aws-imds\"}"
                advised=1
            fi
        fi
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
