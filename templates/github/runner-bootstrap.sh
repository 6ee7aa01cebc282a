#!/usr/bin/env bash
# cloudgpu: start a single-use GitHub Actions runner on this instance, then power off.
#
# Runs as root on the instance, started (detached) by `cloudgpu runner start` over SSH.
# The just-in-time runner configuration is a secret: it arrives as a 0600 file
# ($RUNNER_DIR/.jit), is read into the runner's *environment* (ACTIONS_RUNNER_INPUT_
# JITCONFIG, which the runner reads like its --jitconfig flag; environments are not
# world-readable the way command lines are) and the file is deleted before the runner
# starts. Nothing here prints it.
#
# The instance powers itself off (ends billing where the provider terminates on
# shutdown) when: the runner exits (its one job is done), no job has started within
# IDLE_TIMEOUT_S, or TTL_S has passed since boot of the runner.
#
# Inputs (environment):
#   RUNNER_VERSION   pinned runner version            (default below)
#   RUNNER_SHA256    sha256 of the runner tarball     (default below, for linux-x64)
#   RUNNER_URL       tarball URL                      (default: GitHub's release asset)
#   RUNNER_DIR       install directory                (default /opt/cloudgpu-runner)
#   IDLE_TIMEOUT_S   seconds to wait for a job        (default 600)
#   TTL_S            hard lifetime in seconds         (default 10800)
#   POWEROFF_CMD     how this machine powers off      (default: $CLOUDGPU_POWEROFF when the
#                    provider sets it, "shutdown -h now" on a disposable VM, else nothing:
#                    a machine the user owns is never powered off)
#   CLOUDGPU_DISPOSABLE  1 on a VM made for this runner
set -euo pipefail

# actions/runner v2.324.0, linux-x64. The checksum is the one GitHub's install
# instructions print for this release, as found in public install scripts; it could not be
# re-fetched from this build machine, so pin your own with [runner] runner_version and
# runner_sha256 (config.toml) after checking the release page.
RUNNER_VERSION="${RUNNER_VERSION:-2.324.0}"
RUNNER_SHA256="${RUNNER_SHA256:-e8e24a3477da17040b4d6fa6d34c6ecb9a2879e800aa532518ec21e49e21d7b4}"
RUNNER_URL="${RUNNER_URL:-https://github.com/actions/runner/releases/download/v${RUNNER_VERSION}/actions-runner-linux-x64-${RUNNER_VERSION}.tar.gz}"
RUNNER_DIR="${RUNNER_DIR:-/opt/cloudgpu-runner}"
IDLE_TIMEOUT_S="${IDLE_TIMEOUT_S:-600}"
TTL_S="${TTL_S:-10800}"
if [ -z "${POWEROFF_CMD:-}" ]; then
  if [ -n "${CLOUDGPU_POWEROFF:-}" ]; then
    POWEROFF_CMD="$CLOUDGPU_POWEROFF"
  elif [ "${CLOUDGPU_DISPOSABLE:-0}" = 1 ]; then
    if [ "$(id -u)" = 0 ]; then POWEROFF_CMD="shutdown -h now"; else POWEROFF_CMD="sudo -n shutdown -h now"; fi
  fi
fi

log() { printf '%s cloudgpu-runner: %s\n' "$(date -u +%FT%TZ)" "$*" >>"$RUNNER_DIR/bootstrap.log"; }
poweroff_now() {
  if [ -n "${POWEROFF_CMD:-}" ]; then
    log "powering off: $1"
    sh -c "$POWEROFF_CMD" || true
  else
    log "stopping the runner (this machine is not disposable, so it stays on): $1"
    for f in .runner.pid .watchdog.pid; do
      [ -f "$RUNNER_DIR/$f" ] && kill "$(cat "$RUNNER_DIR/$f")" 2>/dev/null || true
    done
  fi
}
fetch() {  # URL FILE: curl, else wget, else Python (one of them is on every image we use)
  if command -v curl >/dev/null 2>&1; then curl -fsSL --retry 5 -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then wget -q -O "$2" "$1"
  else python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$1" "$2"
  fi
}

mkdir -p "$RUNNER_DIR"
cd "$RUNNER_DIR"
[ -s .jit ] || { log "no JIT configuration"; poweroff_now "no configuration"; exit 2; }

# Watchdog: TTL and idle timeout hold even if the runner hangs or never gets a job.
(
  start=$(date +%s)
  while sleep 1; do
    now=$(date +%s)
    if [ $((now - start)) -ge "$TTL_S" ]; then poweroff_now "ttl ${TTL_S}s reached"; exit 0; fi
    if [ ! -e .job-started ] && [ $((now - start)) -ge "$IDLE_TIMEOUT_S" ]; then
      poweroff_now "no job within ${IDLE_TIMEOUT_S}s"; exit 0
    fi
  done
) </dev/null >/dev/null 2>&1 &
echo $! > .watchdog.pid

if [ ! -x ./run.sh ]; then
  log "downloading runner ${RUNNER_VERSION}"
  fetch "$RUNNER_URL" runner.tar.gz
  echo "${RUNNER_SHA256}  runner.tar.gz" | sha256sum -c --quiet - \
    || { log "runner checksum mismatch"; poweroff_now "checksum mismatch"; exit 3; }
  tar xzf runner.tar.gz
  rm -f runner.tar.gz
fi

# The hook marks that a job started, so the idle watchdog stands down.
cat > job-started.sh <<HOOK
#!/bin/sh
touch "$RUNNER_DIR/.job-started"
HOOK
chmod 755 job-started.sh
export ACTIONS_RUNNER_HOOK_JOB_STARTED="$RUNNER_DIR/job-started.sh"
export RUNNER_ALLOW_RUNASROOT=1

ACTIONS_RUNNER_INPUT_JITCONFIG="$(cat .jit)"
export ACTIONS_RUNNER_INPUT_JITCONFIG
rm -f .jit

log "starting runner"
set +e
./run.sh >>"$RUNNER_DIR/runner.log" 2>&1 &
echo $! > .runner.pid
wait $!
status=$?
set -e
unset ACTIONS_RUNNER_INPUT_JITCONFIG
log "runner exited with status $status"
poweroff_now "runner finished"
