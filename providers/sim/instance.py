"""One sim instance on disk: its files, its state record, and starting/stopping it.

Each instance lives in ``<data_dir>/sim/<id>/``: sshd_config, host key, authorized_keys,
an optional generated client key, ``state.json`` (written atomically under a lock, by the
client and by the instance's watchdog), logs and ``nvme/``. The instance is a
detached process tree (see watchdog.py) that outlives the client that created it.
This module never talks SSH.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cloudgpu import atomicfile
from cloudgpu.errors import ProviderError

# Where the instance's own directory appears inside its private mount namespace.
INSIDE = "/run/cloudgpu-instance"
NOTICE = "meta/preemption-notice"
# The watchdog's pid as the instance sees it; `$CLOUDGPU_POWEROFF` signals it.
POWEROFF_PID = "watchdog.pid"
PENDING, RUNNING, PREEMPTED, TERMINATED = "pending", "running", "preempted", "terminated"
LIVE = (PENDING, RUNNING)


def state_path(d: Path) -> Path:
    return d / "state.json"


def read_state(d: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(state_path(d).read_text())
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):
        return None  # half-created instance dir: treated as gone
    return data if isinstance(data, dict) else None


def write_state(d: Path, data: dict[str, Any]) -> None:
    atomicfile.write_json(state_path(d), data, indent=1, sort_keys=True)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path`` (a lock file), across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def update_state(d: Path, **changes: Any) -> dict[str, Any] | None:
    """Apply ``changes`` to the state record under the instance lock; None if gone."""
    with locked(d / "state.lock"):
        data = read_state(d)
        if data is None:
            return None
        data.update(changes)
        write_state(d, data)
        return data


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path, comment: str) -> str:
    """An ed25519 key pair at ``path``; returns its OpenSSH SHA256 fingerprint."""
    try:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
            check=True,
            capture_output=True,
        )
        out = subprocess.run(
            ["ssh-keygen", "-l", "-E", "sha256", "-f", str(path)], check=True, capture_output=True
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ProviderError(f"ssh-keygen failed: {exc}", provider="sim") from exc
    return out.split()[1]


def sshd_config(d: Path, inside: str, port: int, user: str, env: dict[str, str]) -> str:
    """sshd_config text; paths as the instance's sshd sees them (``inside``)."""
    setenv = " ".join(_q(f"{k}={v}") for k, v in env.items())
    return f"""# cloudgpu sim instance {d.name}: loopback only, key login only
Port {port}
ListenAddress 127.0.0.1
HostKey {_q(inside + "/host_ed25519")}
PidFile {_q(inside + "/sshd.pid")}
AuthorizedKeysFile {_q(inside.replace("%", "%%") + "/authorized_keys")}
AllowUsers {user}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
UsePAM no
StrictModes no
MaxStartups 100:30:200
MaxSessions 100
Subsystem sftp internal-sftp
SetEnv {setenv}
LogLevel INFO
"""


def _q(arg: str) -> str:
    """One sshd_config argument, spaces and all (sshd splits unquoted ones)."""
    if '"' in arg:
        raise ProviderError(f"sim: unsupported character in path {arg!r}", provider="sim")
    return f'"{arg}"'


def spawn(d: Path, inside: str, namespaced: bool) -> int:
    """Start the instance's watchdog detached (new session, reparented away from us);
    return the pid of its outermost process, which is what terminate() kills."""
    cmd = [sys.executable, "-m", "cloudgpu_providers.sim.watchdog", str(d), inside]
    if namespaced:
        # A private PID + mount namespace: when its first process dies the kernel kills
        # everything inside, exactly like powering a machine off.
        cmd = [
            "unshare", "--pid", "--fork", "--kill-child", "--mount", "--mount-proc",
            "--propagation", "private", *cmd,
        ]  # fmt: skip
    pidfile = d / "launcher.pid"
    pidfile.unlink(missing_ok=True)
    with open(d / "watchdog.log", "ab") as log:
        subprocess.run(
            ["setsid", "-f", "sh", "-c", 'echo $$ > "$0"; exec "$@"', str(pidfile), *cmd],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd="/",
            check=True,
        )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pid = launcher_pid(d)
        if pid is not None:
            return pid
        time.sleep(0.01)
    raise ProviderError("sim instance launcher did not start", provider="sim")


def launcher_pid(d: Path) -> int | None:
    """The launcher's pid as it wrote it at spawn; found even when the client died
    before recording it in state.json."""
    try:
        return int((d / "launcher.pid").read_text())
    except (OSError, ValueError):
        return None


def start_time(pid: int | None) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22):
    with the pid it names one process for good, across exec and pid reuse."""
    if not pid:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def alive(pid: int | None, d: Path, started: str | None = None) -> bool:
    """Whether ``pid`` is still this instance's launcher (not a zombie, not reused).

    With ``started`` (recorded at spawn) the pid and start time identify it. Without it,
    the command line must name the instance directory; /proc/PID/cmdline reads empty
    while the process is inside execve (sh -> unshare -> python at spawn), so an empty
    read is retried rather than taken as "gone" (that race marked fresh instances
    terminated under load).
    """
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] in ("Z", "X"):
        return False
    if started is not None:
        return start_time(pid) == started
    for _ in range(50):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        if cmdline:
            return os.fsencode(str(d)) in cmdline
        time.sleep(0.01)
    return False


def kill(
    pid: int | None, d: Path, namespaced: bool, port: int | None, started: str | None = None
) -> None:
    """Stop the instance's whole process tree and verify it is gone."""
    if alive(pid, d, started):
        assert pid is not None
        # Namespaced: SIGKILL of the launcher takes the namespace down (--kill-child).
        # Otherwise TERM lets the watchdog stop its sshd first.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL if namespaced else signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not alive(pid, d, started) and not (port and _listening(port)):
            return
        if not namespaced and pid and time.monotonic() > deadline - 5:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    raise ProviderError(f"instance {d.name} did not stop within 10 s", provider="sim")


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def wipe(d: Path) -> None:
    """Instance storage does not survive the instance (as on clouds): free its disk."""
    for sub in ("nvme",):
        shutil.rmtree(d / sub, ignore_errors=True)
