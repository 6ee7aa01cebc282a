"""LocalMachine: the Machine for providers whose instances are this very computer.

The instance is a workspace directory; ``/nvme/...``, ``~/...`` and relative paths map
into it, so a job file written for real machines runs unchanged (its commands also get
CLOUDGPU_NVME), and no path outside the workspace is ever read or written for the job.

A job's environment is what it declares plus cloudgpu's variables, over the login basics
of this machine (:data:`LOGIN_ENV`: PATH, HOME, locale, ...), as an SSH login gives on a
cloud VM: never the client's credentials (AWS_*, GITHUB_TOKEN, ...). Each command runs
under cloudgpu/remote/subreaper.py, in its own session: every process it starts stays
below that subreaper, even one that detaches with ``setsid``, so stopping the command or
tearing the instance down ends all of them.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from cloudgpu.errors import RemoteError
from cloudgpu.remote import syncdest, syncwire
from cloudgpu.remote.machine import (
    EXIT_STOPPED,
    EXIT_TIMEOUT,
    NVME_ENV,
    ExcludeFn,
    MissingSource,
    OutputFn,
    ProgressFn,
    TransferStats,
    byte_paths,
)

KILL_GRACE_S = 5.0
SUBREAPER = Path(__file__).resolve().with_name("subreaper.py")
# What a job sees of this machine's environment on `local`: what a login shell has, and
# where to find CA bundles, compilers' runtimes and GPUs. Not secrets: nothing else.
LOGIN_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "TZ", "TMPDIR",
    "PYENV_ROOT", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH", "CUDA_HOME",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "SSL_CERT_FILE", "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
)  # fmt: skip


def login_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of ``environ`` a job may see (LOGIN_ENV and the LC_* locale)."""
    return {k: v for k, v in environ.items() if k in LOGIN_ENV or k.startswith("LC_")}


class LocalMachine:
    """A workspace on this machine; see cloudgpu.remote.machine.Machine."""

    def __init__(self, workdir: Path, *, base_env: Mapping[str, str] | None = None) -> None:
        self.workdir = workdir
        self.nvme_dir = workdir / "nvme"
        self.nvme_dir.mkdir(parents=True, exist_ok=True)
        self.nvme_path = str(self.nvme_dir)
        self.base_env = login_env(os.environ) if base_env is None else dict(base_env)

    def path(self, remote: str) -> Path:
        """Where an instance path lives here: /nvme and ~ map into the workspace, relative
        paths are under it; any other path must already be inside it (RemoteError)."""
        if remote == "/nvme" or remote.startswith("/nvme/"):
            p = self.nvme_dir / remote[len("/nvme") :].lstrip("/")
        elif remote == "~" or remote.startswith("~/"):
            p = self.workdir / remote[1:].lstrip("/")
        else:
            p = Path(remote) if Path(remote).is_absolute() else self.workdir / remote
        p = Path(os.path.normpath(p))
        root = Path(os.path.normpath(self.workdir))
        if p != root and root not in p.parents:
            raise RemoteError(
                f"{remote}: outside this local instance; on local a job's files live only "
                f"under /nvme and ~ (its workspace {root})"
            )
        return p

    def run(
        self,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        on_stdout: OutputFn | None = None,
        on_stderr: OutputFn | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> int:
        full_env = {**self.base_env, NVME_ENV: self.nvme_path, **(env or {})}
        where = self.path(cwd) if cwd else self.workdir
        shell = shutil.which("bash") or "/bin/sh"
        status_r, status_w = os.pipe()
        reaper = [sys.executable, "-I", "-S", str(SUBREAPER), str(status_w), "--"]
        try:
            proc = subprocess.Popen(
                [*reaper, shell, "-c", command],
                cwd=where,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(status_w,),
                start_new_session=True,  # its own process group, killed as a whole
            )
        except OSError as exc:
            os.close(status_r)
            raise RemoteError(f"cannot run in {where}: {exc.strerror}") from exc
        finally:
            os.close(status_w)
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            ended = _pump(proc, on_stdout, on_stderr, stop, deadline)
            if ended is not None:
                _kill_group(proc)
                return ended
            return _exit_status(status_r, proc)
        finally:
            os.close(status_r)

    def put_dir(
        self,
        local: Path,
        remote: str,
        *,
        progress: ProgressFn | None = None,
        exclude: ExcludeFn | None = None,
        streams: int = 1,
    ) -> TransferStats:
        if not local.is_dir():
            raise RemoteError(f"{local}: not a directory")
        return copy_tree(local, self.path(remote), progress, exclude)  # one stream here

    def get_dir(
        self, remote: str, local: Path, *, progress: ProgressFn | None = None
    ) -> TransferStats:
        src = self.path(remote)
        if not src.is_dir():
            raise MissingSource(f"get {remote}: no such directory")
        return copy_tree(src, local, progress)

    def put_file(
        self, local: Path, remote: str, *, progress: ProgressFn | None = None
    ) -> TransferStats:
        if not local.is_file():
            raise RemoteError(f"{local}: not a file")
        return copy_tree(local, self.path(remote), progress)

    def get_file(
        self, remote: str, local: Path, *, progress: ProgressFn | None = None
    ) -> TransferStats:
        src = self.path(remote)
        if not src.is_file():
            raise MissingSource(f"get {remote}: no such file")
        return copy_tree(src, local, progress)

    def close(self) -> None:
        """Nothing to release: the workspace stays until the provider removes it."""


def _pump(
    proc: subprocess.Popen[bytes],
    on_stdout: OutputFn | None,
    on_stderr: OutputFn | None,
    stop: threading.Event | None,
    deadline: float | None,
) -> int | None:
    """Forward output until the process ends (None) or must be stopped (its status)."""
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    sel.register(proc.stdout, selectors.EVENT_READ, on_stdout)
    sel.register(proc.stderr, selectors.EVENT_READ, on_stderr)
    open_pipes = 2
    try:
        while open_pipes:
            if stop is not None and stop.is_set():
                return EXIT_STOPPED
            if deadline is not None and time.monotonic() >= deadline:
                return EXIT_TIMEOUT
            for key, _ in sel.select(0.1):
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    open_pipes -= 1
                elif key.data is not None:
                    key.data(data)
    finally:
        sel.close()
    return None


def _exit_status(status_r: int, proc: subprocess.Popen[bytes]) -> int:
    """The command's exit status as its subreaper reported it; the subreaper itself may
    live on while processes the command left behind run (until teardown)."""
    got = b""
    while not got.endswith(b"\n"):
        chunk = os.read(status_r, 16)
        if not chunk:
            break
        got += chunk
    if got.strip().isdigit():
        return int(got)
    return proc.wait()  # it died before reporting: its own status says how


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    for f in (proc.stdout, proc.stderr):
        if f:
            f.close()


def copy_tree(
    src: Path, dst: Path, progress: ProgressFn | None, exclude: ExcludeFn | None = None
) -> TransferStats:
    """Copy a file or tree, skipping files whose kind, size and mtime already match.

    The same stream as a remote sync, through a pipe: the job may have left symlinks
    in its outputs, and the receiving side never writes through one, never replaces a
    file before the whole copy verified.
    """
    t0 = time.perf_counter()
    mine = syncwire.scan(os.fsencode(src), byte_paths(exclude))
    if not mine:
        raise RemoteError(f"{src}: no such file or directory")
    theirs = syncwire.decode_manifest(syncwire.encode_manifest(syncwire.scan(os.fsencode(dst))))
    paths = syncwire.changed(mine, theirs)
    r, w = os.pipe()
    failed: list[BaseException] = []

    def send() -> None:
        try:
            syncwire.pack(
                os.fsencode(src), mine, paths, syncwire.Writer(lambda b: syncwire.write_all(w, b))
            )
        except (OSError, syncwire.SyncError) as exc:
            failed.append(exc)
        finally:
            os.close(w)

    sender = threading.Thread(target=send, name="cloudgpu-copy", daemon=True)
    sender.start()
    try:
        got = syncdest.unpack(os.fsencode(dst), syncwire.Reader(lambda n: os.read(r, n)), progress)
    except (OSError, syncwire.SyncError) as exc:
        reason = failed[0] if failed else exc
        why = getattr(reason, "strerror", None) or reason
        raise RemoteError(f"copy {src} -> {dst}: {why}") from exc
    finally:
        os.close(r)  # a sender still writing gets EPIPE and stops
        sender.join()
    return TransferStats(
        got["files"],
        got["bytes"],
        got["skipped_files"],
        got["skipped_bytes"],
        time.perf_counter() - t0,
    )
