#!/usr/bin/env python3
"""Stand-in for the GitHub Actions runner's run.sh, for tests on sim instances.

Behaves like a single-use (JIT) runner as seen from outside: reads its configuration
from ACTIONS_RUNNER_INPUT_JITCONFIG (or --jitconfig), goes online, takes one queued job
whose labels it matches (busy), runs the job's script with the job-started hook, reports
completion (GitHub then removes the runner) and exits. It talks to the fake GitHub
server named inside the JIT configuration (tests/runners/fake_github.py).
"""

import base64
import json
import os
import subprocess
import sys
import time
import urllib.request


def call(cfg, action, **body):
    body["secret"] = cfg["secret"]
    req = urllib.request.Request(
        f"{cfg['server_url']}/_runner/{cfg['runner_id']}/{action}",
        data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read()
        return resp.status, (json.loads(raw) if raw else None)


def main():
    encoded = os.environ.pop("ACTIONS_RUNNER_INPUT_JITCONFIG", "")
    if "--jitconfig" in sys.argv:
        encoded = sys.argv[sys.argv.index("--jitconfig") + 1]
    if not encoded:
        print("no jit config", file=sys.stderr)
        return 2
    cfg = json.loads(base64.b64decode(encoded))
    call(cfg, "online")
    print(f"runner {cfg['name']} online", flush=True)
    while True:
        status, job = call(cfg, "acquire")
        if status == 200 and job:
            break
        time.sleep(0.2)
    hook = os.environ.get("ACTIONS_RUNNER_HOOK_JOB_STARTED")
    if hook:
        subprocess.run([hook], check=False)
    print(f"running job {job['job_id']}", flush=True)
    code = subprocess.run(["sh", "-c", job["script"]], check=False).returncode
    call(cfg, "complete", job_id=job["job_id"], exit_code=code)
    print(f"job {job['job_id']} finished with {code}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
