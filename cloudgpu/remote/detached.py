"""A job's command run detached on the machine, so a dropped SSH connection is not the
end of it: reconnect and follow it again.

:func:`start` launches the command in its own session (``setsid``), its output into
``RUN_DIR/out`` and ``RUN_DIR/err``, its exit status into ``RUN_DIR/rc`` once it ends,
and its process group into ``RUN_DIR/pgid``; it returns at once. :class:`Follower`
streams that output through any Machine (cloudgpu.remote.follow on the machine), counts
the bytes it delivered, and after a ConnectionLost follows again over a new connection
from where it was. `stop_run` ends the run's whole process group (TERM, then KILL).
Starting twice in one RUN_DIR starts the command once. Nothing here knows jobs.
"""

from __future__ import annotations

import shlex
import threading
from pathlib import Path

from cloudgpu.remote import follow
from cloudgpu.remote.groupkill import KILL_GRACE_S, kill_group
from cloudgpu.remote.machine import EXIT_STOPPED, Machine, OutputFn

FOLLOW_SOURCE = Path(follow.__file__).read_text(encoding="utf-8")

# Run by `sh -c "$CLOUDGPU_RUNNER" cloudgpu-run RUN_DIR`, itself detached: the command
# ($CLOUDGPU_RUN_CMD) gets a session of its own, so its group can be killed while this
# wrapper lives on to record the status.
_RUNNER = """d="$1"
cmd="$CLOUDGPU_RUN_CMD"; unset CLOUDGPU_RUN_CMD CLOUDGPU_RUNNER
job='echo $$ > "$1/pgid"; command -v bash >/dev/null 2>&1 && exec bash -c "$2"; exec sh -c "$2"'
setsid sh -c "$job" cloudgpu-job "$d" "$cmd" > "$d/out" 2> "$d/err" < /dev/null &
wait $!
echo $? > "$d/rc.tmp" && mv "$d/rc.tmp" "$d/rc"
"""
_START = (
    'mkdir -p "$CLOUDGPU_RUN_DIR" && if [ ! -e "$CLOUDGPU_RUN_DIR/started" ]; then '
    ': > "$CLOUDGPU_RUN_DIR/started"; '
    'setsid sh -c "$CLOUDGPU_RUNNER" cloudgpu-run "$CLOUDGPU_RUN_DIR" '
    "> /dev/null 2>&1 < /dev/null & fi"
)


def start(machine: Machine, run_dir: str, command: str, env: dict[str, str]) -> None:
    """Start ``command`` detached in ``run_dir`` (once); returns as soon as it runs."""
    full = {
        **env,
        "CLOUDGPU_RUN_DIR": run_dir,
        "CLOUDGPU_RUN_CMD": command,
        "CLOUDGPU_RUNNER": _RUNNER,
    }
    rc = machine.run(_START, env=full, timeout=60)
    if rc != 0:
        raise RuntimeError(f"could not start the command in {run_dir} (status {rc})")


def stop_run(machine: Machine, run_dir: str) -> None:
    """TERM the run's process group, KILL what is left after a grace period."""
    d = shlex.quote(run_dir)
    machine.run(
        f"g=$(cat {d}/pgid 2>/dev/null) || exit 0; {kill_group('$g')}",
        timeout=KILL_GRACE_S + 30,
    )


class Follower:
    """Streams a detached run's output; resumable from the bytes already delivered."""

    def __init__(
        self, run_dir: str, on_stdout: OutputFn | None, on_stderr: OutputFn | None
    ) -> None:
        self.run_dir = run_dir
        self._out, self._err = on_stdout, on_stderr
        self.out_off = self.err_off = 0

    def _take_out(self, data: bytes) -> None:
        self.out_off += len(data)
        if self._out:
            self._out(data)

    def _take_err(self, data: bytes) -> None:
        self.err_off += len(data)
        if self._err:
            self._err(data)

    def follow(self, machine: Machine, stop: threading.Event | None) -> int:
        """Follow until the run ends; its exit status. ``stop`` set: the run's group is
        killed (over its own channel) and its end followed; raises ConnectionLost when
        the connection breaks (the run goes on: follow again on a new one)."""
        python = getattr(machine, "python", "python3")
        cmd = (
            f"exec {python} -c {shlex.quote(FOLLOW_SOURCE)} {shlex.quote(self.run_dir)} "
            f"{self.out_off} {self.err_off}"
        )
        stopped = threading.Event()
        done = threading.Event()

        def watch_stop() -> None:
            if stop is not None and not done.is_set():
                while not done.wait(0.2):
                    if stop.is_set():
                        stopped.set()
                        stop_run(machine, self.run_dir)
                        return

        watcher = threading.Thread(target=watch_stop, name="cloudgpu-run-stop", daemon=True)
        watcher.start()
        try:
            rc = machine.run(cmd, on_stdout=self._take_out, on_stderr=self._take_err)
        finally:
            done.set()
            watcher.join()
        return EXIT_STOPPED if stopped.is_set() else rc
