"""Shared pieces of the provider lifecycle tests: `cloudgpu launch` end to end against a
provider's loopback fake, with a real loopback sshd standing in for the machine.

The job file, the config write, the reaping of the bootstrap's deadline watchdog (which
outlives SSH by design: a real machine is thrown away with it, this one is not) and the
checks every provider's happy path shares. The ``sshd`` and ``scratch`` fixtures built on
these live in tests/providers/conftest.py. Nothing here knows any one provider.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from cloudgpu.paths import default_paths
from tests.lifecycle.helpers import cli_proc, main_exit, store
from tests.remote.sshd import SSHDServer

FakeT = TypeVar("FakeT")

# The run lines a lifecycle job ends with: where it ran, and that its scratch dir is there.
SCRATCH_PROBE = '  test -d "$CLOUDGPU_NVME" && echo "scratch ok"\n'


def launch_job(
    name: str, gpu: str, provider: str, *, resources: str = "", probe: str = SCRATCH_PROBE
) -> str:
    """A small on-demand job for ``provider``; ``resources`` adds lines to that block."""
    return (
        f"name: {name}\nresources:\n  gpu: {gpu}\n  spot: false\n  providers: [{provider}]\n"
        f'{resources}run: |\n  echo "ran in $CLOUDGPU_INSTANCE"\n{probe}'
        "limits:\n  max_runtime: 5m\n  max_cost: 5\n"
    )


def write_config(cloudgpu_home: Path, text: str) -> None:
    """Write config.toml as a user would, under the test's CLOUDGPU_HOME."""
    default_paths({"CLOUDGPU_HOME": str(cloudgpu_home)}).ensure().config_file.write_text(text)


def api_provider_config(
    section: str, url_key: str, url: str, sshd: SSHDServer, scratch: Path, extra: str = ""
) -> str:
    """config.toml for an API-key provider whose machines are the loopback ``sshd``."""
    return (
        f'[providers.{section}]\n{url_key} = "{url}"\n'
        f'ssh_user = "{sshd.user}"\nscratch_dir = "{scratch}"\npoll_s = 0\n{extra}'
        "[launch]\nssh_timeout = 30\n"
    )


@contextlib.contextmanager
def machines_on(fake: FakeT, sshd: SSHDServer, *, report_port: bool = True) -> Iterator[FakeT]:
    """Run ``fake`` (a loopback API fake) with its machines standing on ``sshd``: it reports
    the sshd's address (and port, unless the provider is configured with it) and
    authorizes launch keys in the sshd's authorized_keys, as the cloud's boot does."""
    fake.ssh_host = "127.0.0.1"
    if report_port:
        fake.ssh_port = sshd.port
    fake.authorized_keys = sshd.dir / "authorized_keys"
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def stop_watchdog(scratch: Path) -> None:
    """Stop the deadline watchdog and the notice watcher the bootstrap started in
    ``scratch`` (setsid, each its own group)."""
    for name in ("deadline.pid", "watcher.pid"):
        pid_file = scratch / ".cloudgpu" / name
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(pid_file.read_text().strip()), signal.SIGTERM)


@contextlib.contextmanager
def reaped(scratch: Path) -> Iterator[Path]:
    """``scratch`` for the block; its deadline watchdog is stopped afterwards."""
    try:
        yield scratch
    finally:
        stop_watchdog(scratch)


def launch_succeeds(job: Path, cloudgpu_home: Path, provider: str) -> tuple[Any, Any, str]:
    """Launch in-process and check the shared happy path; (job record, instance, stdout)."""
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    assert "ran in" in out
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "succeeded" and rec.provider == provider
    (inst,) = store(cloudgpu_home).instances(rec.id)
    assert inst.state == "terminated"
    return rec, inst, out


def launch_in_subprocess(
    job: Path, cloudgpu_home: Path, env: Mapping[str, str], secret: str
) -> subprocess.CompletedProcess[str]:
    """`cloudgpu launch` as a real process: it succeeds and ``secret`` is never printed."""
    res = cli_proc(["launch", str(job), "--yes"], cloudgpu_home, env=dict(env))
    assert res.returncode == 0, res.stderr
    assert "ran in" in res.stdout
    assert secret not in res.stdout + res.stderr
    return res


def launch_fails_cleanly(job: Path) -> str:
    """Launch in-process; it must fail with a message, not a traceback. Returns stderr."""
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code != 0
    assert "Traceback" not in err, err
    return err


# A job that checkpoints its progress, as the preemption tests need. The first run takes
# 0.5 s a step (15 s in all), time for a notice or a vanished machine to be seen mid-run;
# a run resumed from a checkpoint has nothing left to wait for and steps at 0.05 s.
RESUMABLE_RUN = """checkpoint: /nvme/ckpt
run: |
  mkdir -p "$CLOUDGPU_CHECKPOINT"
  step=$(cat "$CLOUDGPU_CHECKPOINT/step" 2>/dev/null || echo 0)
  echo "starting at step $step"
  pace=0.5; [ "$step" -gt 0 ] && pace=0.05
  while [ "$step" -lt 30 ]; do
    step=$((step + 1)); echo "$step" > "$CLOUDGPU_CHECKPOINT/step"; sleep $pace
  done
  echo "done at step $step"
limits:
  max_runtime: 5m
  max_cost: 5
"""


@contextlib.contextmanager
def announce_when_progressed(scratch: Path, announce: Any, step: int = 3) -> Iterator[None]:
    """Call ``announce()`` (the cloud's metadata service turning its notice on) once the
    job has checkpointed ``step`` steps in ``scratch``, from a thread, as a cloud would
    while the client is busy."""
    import threading

    done = threading.Event()

    def watch() -> None:
        marker = scratch / "ckpt" / "step"
        while not done.wait(0.1):
            try:
                if int(marker.read_text() or 0) >= step:
                    announce()
                    return
            except (OSError, ValueError):
                continue

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(5)


def resumed_after_inside_notice(out: str, err: str) -> None:
    """The job started twice, the second time from its checkpoint, because of a notice
    the instance-side watcher wrote (not the outside poll)."""
    starts = [int(ln.split()[-1]) for ln in out.splitlines() if ln.startswith("starting at")]
    assert starts[0] == 0 and len(starts) == 2 and 0 < starts[1] < 30, out
    assert "from the instance" in err and "re-provisioning without" in err, err
