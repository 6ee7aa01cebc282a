#!/bin/sh
# cloudgpu preemption watcher for AWS EC2 spot instances (runs on the instance).
#
# Polls the instance metadata service (IMDSv2: a session token from
# PUT /latest/api/token, then GET with X-aws-ec2-metadata-token) for
# /latest/meta-data/spot/instance-action. It answers 404 until AWS schedules an
# interruption, then 200 with {"action": "stop|terminate|hibernate", "time": "<UTC ISO>"},
# about two minutes ahead:
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
#
# On a notice it writes {"action": "preempt", "time": <AWS's time>, "aws_action":
# <stop|terminate|hibernate>, "source": "aws-imds"} to $CLOUDGPU_NOTICE_FILE (atomically,
# the same shape as the other clouds' watchers), runs $CLOUDGPU_ON_NOTICE if set (e.g.
# flush checkpoints), and exits 0. It must not stop or kill the job itself: the
# lifecycle decides what to do with the notice.
#
# Environment (all optional):
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
token=""

new_token() {
    # Six hours, the longest IMDSv2 allows; renewed on 401 anyway.
    token=$(curl -sf -m 2 -X PUT "$endpoint/latest/api/token" \
        -H "X-aws-ec2-metadata-token-ttl-seconds: 21600") || token=""
}

field() {  # field NAME: a string value of the one-line JSON on stdin
    sed -n "s/.*\"$1\"[[:space:]]*:[[:space:]]*\"\([^\"]*\)\".*/\1/p"
}

fetch_action() {
    # Prints the body; the HTTP status goes to the last line.
    curl -s -m 2 -w '\n%{http_code}' -H "X-aws-ec2-metadata-token: $token" \
        "$endpoint/latest/meta-data/spot/instance-action"
}

mkdir -p "$(dirname "$notice_file")"
polls=0
while :; do
    [ -n "$token" ] || new_token
    if [ -n "$token" ]; then
        out=$(fetch_action) || out=""
        status=$(printf '%s\n' "$out" | tail -n 1)
        body=$(printf '%s\n' "$out" | sed '$d')
        case "$status" in
            200)
                action=$(printf '%s' "$body" | field action)
                when=$(printf '%s' "$body" | field time)
                printf '{"action": "preempt", "time": "%s", "aws_action": "%s", "source": "aws-imds"}\n' \
                    "$when" "$action" > "$notice_file.tmp" && mv "$notice_file.tmp" "$notice_file"
                if [ -n "${CLOUDGPU_ON_NOTICE:-}" ]; then
                    sh -c "$CLOUDGPU_ON_NOTICE" || true
                fi
                exit 0
                ;;
            401) token="" ;;  # token expired: get a new one on the next round
        esac
    fi
    polls=$((polls + 1))
    if [ "$max_polls" -gt 0 ] && [ "$polls" -ge "$max_polls" ]; then
        exit 1
    fi
    sleep "$poll"
done
