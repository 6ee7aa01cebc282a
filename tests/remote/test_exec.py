"""Machine.run over real SSH (and on this machine): status, streaming, env, stop."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from cloudgpu.errors import ConfigError
from cloudgpu.remote import (
    EXIT_STOPPED,
    EXIT_TIMEOUT,
    NVME_ENV,
    LocalMachine,
    Machine,
    SSHMachine,
    connect,
)
from tests.remote.conftest import instance_for
from tests.remote.sshd import SSHDServer


@pytest.fixture(params=["ssh", "local"])
def any_machine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Machine]:
    if request.param == "local":
        yield LocalMachine(tmp_path / "ws")
        return
    server = request.getfixturevalue("sshd_server")
    m = connect(instance_for(server), known_hosts=tmp_path / "kh", use_openssh=False)
    yield m
    m.close()


def collect(m: Machine, command: str, **kw: object) -> tuple[int, str, str]:
    out: list[bytes] = []
    err: list[bytes] = []
    rc = m.run(command, on_stdout=out.append, on_stderr=err.append, **kw)  # type: ignore[arg-type]
    return rc, b"".join(out).decode(), b"".join(err).decode()


@pytest.mark.parametrize("code", [0, 1, 7, 255])
def test_exit_status(machine: SSHMachine, code: int) -> None:
    assert machine.run(f"exit {code}") == code


def test_stdout_stderr_env_cwd(any_machine: Machine, tmp_path: Path) -> None:
    where = Path(any_machine.nvme_path) / "cwd here"  # local: only inside its workspace
    where.mkdir(parents=True, exist_ok=True)
    rc, out, err = collect(
        any_machine,
        'echo "$GREETING"; echo oops >&2; pwd; echo "nvme=$' + NVME_ENV + '"',
        env={"GREETING": "it's a 'quoted' $HOME"},
        cwd=str(where),
    )
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == "it's a 'quoted' $HOME"
    assert lines[1] == str(where)
    assert lines[2] == f"nvme={any_machine.nvme_path}"
    assert err == "oops\n"


def test_output_is_streamed_while_running(any_machine: Machine, tmp_path: Path) -> None:
    # The command waits until the test has seen its first line: without streaming it
    # would run into its timeout instead of finishing.
    flag = tmp_path / "seen"
    seen: list[bytes] = []

    def on_out(data: bytes) -> None:
        seen.append(data)
        if b"ready" in b"".join(seen):
            flag.touch()

    cmd = f"echo ready; while [ ! -e '{flag}' ]; do sleep 0.05; done; echo done"
    assert any_machine.run(cmd, on_stdout=on_out, timeout=60) == 0
    assert b"".join(seen) == b"ready\ndone\n"


def test_no_marker_leaks_into_output(machine: SSHMachine) -> None:
    rc, out, _ = collect(machine, "printf abc")
    assert (rc, out) == (0, "abc")


def test_stop_kills_the_whole_process_group(any_machine: Machine, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    stop = threading.Event()

    def on_out(data: bytes) -> None:
        if b"started" in data:
            stop.set()

    cmd = f"sleep 300 & echo $! > '{pidfile}'; echo started; wait"
    rc = any_machine.run(cmd, on_stdout=on_out, stop=stop, timeout=120)
    assert rc == EXIT_STOPPED
    child = int(pidfile.read_text())
    assert not _running(child), "the job's background child survived stop"


def test_timeout(any_machine: Machine) -> None:
    assert any_machine.run("sleep 300", timeout=0.5) == EXIT_TIMEOUT


def test_bad_env_name_is_a_config_error(machine: SSHMachine) -> None:
    with pytest.raises(ConfigError, match="not a valid environment variable"):
        machine.run("true", env={"BAD NAME": "x"})


def _running(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.05)
    return os.path.exists(f"/proc/{pid}")


def test_stdin_is_closed(any_machine: Machine) -> None:
    rc, out, _ = collect(any_machine, "cat; echo eof", timeout=60)
    assert (rc, out) == (0, "eof\n")


@pytest.mark.parametrize("openssh", [False, True])
def test_launcher_carries_commands_and_transfers(
    sshd_server: SSHDServer, tmp_path: Path, openssh: bool
) -> None:
    """A gateway host: every command and transfer runs through the target's launcher
    (here `env VIA=launcher`, standing in for srun into an allocation)."""
    inst = instance_for(sshd_server)
    assert inst.ssh is not None
    inst = replace(inst, ssh=replace(inst.ssh, launcher=("env", "VIA=launcher")))
    m = connect(inst, known_hosts=tmp_path / "kh", use_openssh=openssh)
    try:
        rc, out, _ = collect(m, 'echo "$VIA $X $(pwd)"', env={"X": "a b'c"}, cwd=str(tmp_path))
        assert (rc, out) == (0, f"launcher a b'c {tmp_path}\n")
        src = tmp_path / "src"
        src.mkdir()
        (src / "f").write_bytes(os.urandom(70000))
        assert m.put_dir(src, str(tmp_path / "dst")).files_sent == 1
        assert (tmp_path / "dst" / "f").read_bytes() == (src / "f").read_bytes()
        pidfile = tmp_path / "child.pid"
        stop = threading.Event()
        cmd = f"sleep 300 & echo $! > '{pidfile}'; echo started; wait"

        def on_out(data: bytes) -> None:
            if b"started" in data:
                stop.set()

        assert m.run(cmd, on_stdout=on_out, stop=stop, timeout=120) == EXIT_STOPPED
        assert not _running(int(pidfile.read_text()))
    finally:
        m.close()
