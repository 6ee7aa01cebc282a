"""The "hypervisor" of one sim instance: boots it, runs its sshd, enforces its deadline.

Started detached by instance.spawn(), normally as the first process of a private PID and
mount namespace, so it is the instance's init: when it exits, the kernel kills every
process of the instance, including jobs started over SSH. It

* sets up the instance's view of the filesystem (its own /nvme, /tmp, /run);
* waits the configured boot delay, starts sshd, and marks the instance running;
* stops the instance at its deadline even with no client alive (instance-side deadline);
* simulates spot preemption: writes the notice file the instance reads (like a cloud's
  metadata endpoint), then preempts at the announced time.

It reads its settings from state.json and must not import the provider or the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from cloudgpu_providers.sim.instance import (
    NOTICE,
    PENDING,
    POWEROFF_PID,
    PREEMPTED,
    RUNNING,
    TERMINATED,
    free_port,
    read_state,
    update_state,
    wipe,
)

TICK_S = 0.1


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True)


def setup_namespace(real: str, inside: str, nvme_tmpfs_mb: int) -> None:
    """Give the instance its own /run, /nvme and /tmp; the host keeps its own.

    The login user's home is shared with the host: interpreters (pyenv, conda) often
    live there, and hiding them would break the instance's own tools.
    """
    _mount("-t", "tmpfs", "-o", "mode=755", "cloudgpu-run", "/run")
    os.makedirs("/run/sshd", exist_ok=True)
    os.makedirs(inside, exist_ok=True)
    _mount("--bind", real, inside)
    # /nvme must exist as a mount point; on a host without one this leaves an empty
    # directory behind (the only change outside the data dir).
    os.makedirs("/nvme", exist_ok=True)
    if nvme_tmpfs_mb > 0:  # a size-limited NVMe: "disk full" is then real
        _mount("-t", "tmpfs", "-o", f"size={nvme_tmpfs_mb}m,mode=755", "cloudgpu-nvme", "/nvme")
    else:
        _mount("--bind", f"{inside}/nvme", "/nvme")
    _mount("-t", "tmpfs", "-o", "mode=1777", "cloudgpu-tmp", "/tmp")


def start_sshd(d: Path) -> subprocess.Popen[bytes]:
    log = open(d / "sshd.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(
            [shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    finally:
        log.close()


def wait_listening(d: Path, proc: subprocess.Popen[bytes], limit: float = 10) -> bool:
    """sshd writes its pid file only once it listens: that, not a connect (another
    process may hold the port), says our sshd is up."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if (d / "sshd.pid").read_text().strip() == str(proc.pid):
                return True
        except FileNotFoundError:
            pass
        time.sleep(0.01)
    return False


def boot(d: Path, port: int) -> subprocess.Popen[bytes]:
    """Start sshd; if another process took our port meanwhile, move to a free one (the
    provider reports the port from the state record, as a cloud reports an address)."""
    for _ in range(3):
        (d / "sshd.pid").unlink(missing_ok=True)
        sshd = start_sshd(d)
        if wait_listening(d, sshd):
            return sshd
        if sshd.poll() is None:
            sshd.kill()
        port = free_port()
        config = d / "sshd_config"
        lines = config.read_text().splitlines()
        config.write_text(
            "\n".join(f"Port {port}" if ln.startswith("Port ") else ln for ln in lines) + "\n"
        )
        update_state(d, port=port)
    stop(d, TERMINATED, "sshd failed to start (see sshd.log)", None)


def notice_text(at: float) -> str:
    """The notice, shaped like EC2's spot/instance-action document."""
    when = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return json.dumps({"action": "terminate", "time": when, "unix_time": at}) + "\n"


def stop(d: Path, state: str, reason: str, sshd: subprocess.Popen[bytes] | None) -> NoReturn:
    """Record the end (billing stops now), free instance storage, and exit: as init,
    our exit takes every process of the instance with us."""
    update_state(d, state=state, terminated_at=time.time(), reason=reason)
    if sshd is not None and sshd.poll() is None:
        sshd.kill()  # without a namespace, our exit alone would not stop it
    wipe(d)
    sys.exit(0)


def step(
    d: Path, st: dict[str, Any], sshd: subprocess.Popen[bytes] | None
) -> subprocess.Popen[bytes] | None:
    """One tick of the instance's life; returns the sshd process (once started)."""
    now = time.time()
    deadline = st.get("deadline")
    if st["state"] not in (PENDING, RUNNING):
        sys.exit(0)  # terminated by the client while we slept
    if deadline and now >= deadline:
        stop(d, TERMINATED, "deadline reached (instance-side watchdog)", sshd)
    if st["state"] == PENDING:
        if now < st["created_at"] + st.get("boot_delay", 0):
            return sshd
        sshd = boot(d, int(st["port"]))
        changes: dict[str, Any] = {"state": RUNNING, "launched_at": time.time()}
        if st.get("preempt_after") is not None and st.get("market") == "spot":
            changes["preempt_at"] = changes["launched_at"] + float(st["preempt_after"])
        update_state(d, **changes)
        return sshd
    preempt_at = st.get("preempt_at")
    if preempt_at is not None:
        if not st.get("notice_at") and now >= preempt_at - st.get("preempt_notice", 120):
            (d / NOTICE).parent.mkdir(exist_ok=True)
            (d / NOTICE).write_text(notice_text(preempt_at))
            update_state(d, notice_at=now)
        if now >= preempt_at:
            stop(d, PREEMPTED, "spot instance preempted (simulated)", sshd)
    if sshd is not None and sshd.poll() is not None:
        stop(d, TERMINATED, f"sshd exited with status {sshd.returncode}", None)
    return sshd


def _reap(keep: int | None) -> None:
    """As init we inherit orphans; collect them so they do not pile up as zombies.
    sshd (``keep``) is left for step() to notice."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == keep:
            return
        os.waitpid(info.si_pid, 0)


def main(argv: list[str]) -> int:
    real, inside = argv
    st = read_state(Path(real))
    if st is None:
        return 1
    if st.get("namespaced"):
        setup_namespace(real, inside, int(st.get("nvme_tmpfs_mb", 0)))
    d = Path(inside)
    sshd: subprocess.Popen[bytes] | None = None

    def on_term(signum: int, frame: object) -> None:
        if sshd is not None and sshd.poll() is None:
            sshd.kill()
        sys.exit(0)

    def on_poweroff(signum: int, frame: object) -> None:
        # `$CLOUDGPU_POWEROFF` inside the instance: like `shutdown -h now` on a cloud VM
        # whose shutdown behaviour is terminate, billing stops and the instance is gone.
        stop(d, TERMINATED, "powered off from inside the instance", sshd)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR1, on_poweroff)
    (d / POWEROFF_PID).write_text(str(os.getpid()))
    while True:
        cur = read_state(d)
        if cur is None:
            return 0
        sshd = step(d, cur, sshd)
        _reap(sshd.pid if sshd is not None else None)
        time.sleep(TICK_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
