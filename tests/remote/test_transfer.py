"""Tree/file sync over real SSH (paramiko and ssh-binary data paths) and on this machine."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, cast

import pytest

from cloudgpu.data.select import Selector
from cloudgpu.errors import RemoteError
from cloudgpu.lifecycle.stage import PACK_STREAMS, stage_data
from cloudgpu.remote import LocalMachine, Machine, SSHMachine, TransferStats, connect
from cloudgpu.remote.transfer import split
from cloudgpu.spec.model import DataItem, JobSpec
from tests.lifecycle.helpers import Lines
from tests.remote.conftest import instance_for
from tests.remote.sshd import SSHDServer


def make_tree(root: Path) -> None:
    (root / "a" / "b").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "top.txt").write_text("top\n")
    (root / "a" / "one.bin").write_bytes(os.urandom(100_000))
    (root / "a" / "b" / "two.txt").write_text("two\n" * 1000)
    (root / "a" / "b" / "name with spaces é.txt").write_text("odd name\n")
    (root / "a" / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 17))  # spans chunks
    (root / "a" / "exec.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "a" / "exec.sh").chmod(0o755)
    (root / "link").symlink_to("a/b/two.txt")


def snapshot(root: Path) -> dict[str, tuple[str, bytes, int, int]]:
    """Everything a sync must preserve: kind, content/target, mode, whole-second mtime."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = ("l", os.readlink(p).encode(), 0, 0)
        elif p.is_dir():
            out[rel] = ("d", b"", 0, 0)
        else:
            out[rel] = ("f", p.read_bytes(), stat.S_IMODE(st.st_mode), int(st.st_mtime))
    return out


def test_put_get_roundtrip_and_incremental(machine: SSHMachine, tmp_path: Path) -> None:
    src, back = tmp_path / "src", tmp_path / "back"
    make_tree(src)
    remote = str(tmp_path / "remote" / "data")
    seen: list[tuple[int, int]] = []
    first = machine.put_dir(src, remote, progress=lambda d, t: seen.append((d, t)))
    assert first.files_sent == 6 and first.files_skipped == 0
    assert first.bytes_sent == sum(
        p.stat().st_size for p in src.rglob("*") if p.is_file() and not p.is_symlink()
    )
    assert seen and seen[-1][0] == seen[-1][1] == first.bytes_sent
    assert snapshot(Path(remote)) == snapshot(src)

    again = machine.put_dir(src, remote)
    assert (again.files_sent, again.files_skipped) == (0, 6)

    (src / "top.txt").write_text("changed, longer\n")
    (src / "a" / "new.txt").write_text("new\n")
    third = machine.put_dir(src, remote)
    assert (third.files_sent, third.files_skipped) == (2, 5)
    assert snapshot(Path(remote)) == snapshot(src)

    got = machine.get_dir(remote, back)
    assert got.files_sent == 7
    assert snapshot(back) == snapshot(src)
    assert machine.get_dir(remote, back).files_sent == 0


def test_put_get_single_file(machine: SSHMachine, tmp_path: Path) -> None:
    f = tmp_path / "model.bin"
    f.write_bytes(os.urandom(2_000_000))
    remote = str(tmp_path / "r" / "deep" / "model.bin")
    assert machine.put_file(f, remote).bytes_sent == 2_000_000
    assert Path(remote).read_bytes() == f.read_bytes()
    assert machine.put_file(f, remote).files_skipped == 1
    out = tmp_path / "o" / "model.bin"
    assert machine.get_file(remote, out).files_sent == 1
    assert out.read_bytes() == f.read_bytes()


def test_corrupted_stream_is_detected_and_not_kept(machine: SSHMachine, tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_tree(src)
    remote = tmp_path / "remote"
    # A faulty pipe on the instance: flips one bit in the middle of what the agent reads.
    flipper = tmp_path / "flaky-python"
    flipper.write_text(
        "#!/bin/sh\n"
        "python3 -c 'import sys; d = sys.stdin.buffer.read(); i = len(d) // 2\n"
        "sys.stdout.buffer.write(d[:i] + bytes([d[i] ^ 1]) + d[i + 1:] if d else d)'"
        ' | python3 "$@"\n'
    )
    flipper.chmod(0o755)
    machine.python = str(flipper)
    with pytest.raises(RemoteError, match="integrity check failed"):
        machine.put_dir(src, str(remote))
    assert not [p for p in remote.rglob("*") if p.is_file()], "corrupted files were kept"
    machine.python = "python3"
    assert machine.put_dir(src, str(remote)).files_sent == 6
    assert snapshot(remote) == snapshot(src)


def test_missing_paths_are_clear_errors(machine: SSHMachine, tmp_path: Path) -> None:
    with pytest.raises(RemoteError, match="not a directory"):
        machine.put_dir(tmp_path / "nope", "/tmp/x")
    with pytest.raises(RemoteError, match="no such file or directory"):
        machine.get_dir(str(tmp_path / "absent"), tmp_path / "out")


def test_unwritable_destination_is_one_line(machine: SSHMachine, tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_tree(src)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RemoteError) as err:
        machine.put_dir(src, str(blocker / "sub"))
    assert "\n" not in str(err.value)


def test_local_machine_maps_nvme_and_syncs(tmp_path: Path) -> None:
    m = LocalMachine(tmp_path / "ws")
    assert m.path("/nvme/data") == tmp_path / "ws" / "nvme" / "data"
    assert m.path("out") == tmp_path / "ws" / "out"
    assert m.path("~/x") == tmp_path / "ws" / "x"
    for outside in ("/etc/hosts", "/nvme/../../etc", "../x", "/"):  # never outside it
        with pytest.raises(RemoteError, match="outside this local instance"):
            m.path(outside)
    src = tmp_path / "src"
    make_tree(src)
    assert m.put_dir(src, "/nvme/data").files_sent == 6
    assert snapshot(tmp_path / "ws" / "nvme" / "data") == snapshot(src)
    assert m.put_dir(src, "/nvme/data").files_skipped == 6
    out: list[bytes] = []
    assert m.run("cat $CLOUDGPU_NVME/data/top.txt", on_stdout=out.append) == 0
    assert out == [b"top\n"]
    assert m.get_dir("/nvme/data", tmp_path / "back").files_sent == 6
    assert snapshot(tmp_path / "back") == snapshot(src)


def test_falls_back_to_paramiko_when_the_ssh_binary_fails(
    sshd_server: SSHDServer, tmp_path: Path
) -> None:
    machine = connect(instance_for(sshd_server), known_hosts=tmp_path / "kh", use_openssh=True)
    assert isinstance(machine, SSHMachine) and machine.openssh is not None
    broken = tmp_path / "broken-ssh"
    broken.write_text("#!/bin/sh\necho 'Permission denied (publickey).' >&2\nexit 255\n")
    broken.chmod(0o755)
    machine.openssh.binary = str(broken)
    src = tmp_path / "src"
    make_tree(src)
    assert machine.put_dir(src, str(tmp_path / "remote")).files_sent == 6
    assert machine.openssh is None  # no second try of a binary that cannot connect
    assert snapshot(tmp_path / "remote") == snapshot(src)
    machine.close()


def test_symlinked_roots_are_followed(machine: SSHMachine, tmp_path: Path) -> None:
    real = tmp_path / "real"
    make_tree(real)
    (tmp_path / "alias").symlink_to(real)
    (tmp_path / "remote-real").mkdir()
    (tmp_path / "remote-alias").symlink_to(tmp_path / "remote-real")
    assert machine.put_dir(tmp_path / "alias", str(tmp_path / "remote-alias")).files_sent == 6
    assert snapshot(tmp_path / "remote-real") == snapshot(real)
    assert machine.put_dir(tmp_path / "alias", str(tmp_path / "remote-alias")).files_sent == 0


def test_corrupted_download_is_detected_and_not_kept(machine: SSHMachine, tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_tree(src)
    machine.put_dir(src, str(tmp_path / "remote"))
    # A faulty pipe on the way back: one bit of what the agent sends is flipped.
    flipper = tmp_path / "flaky-python"
    flipper.write_text(
        '#!/bin/sh\npython3 "$@" | python3 -c \'import sys; d = sys.stdin.buffer.read()\n'
        "i = len(d) // 2\n"
        "sys.stdout.buffer.write(d[:i] + bytes([d[i] ^ 1]) + d[i + 1:] if d else d)'\n"
    )
    flipper.chmod(0o755)
    machine.python = str(flipper)
    with pytest.raises(RemoteError, match="integrity check failed"):
        machine.get_dir(str(tmp_path / "remote"), tmp_path / "back")
    assert not [p for p in (tmp_path / "back").rglob("*") if p.is_file()]


def _excluded_tree(root: Path) -> None:
    make_tree(root)
    (root / ".git" / "objects").mkdir(parents=True)
    (root / ".git" / "objects" / "pack").write_bytes(os.urandom(1000))
    (root / "a" / "scratch.tmp").write_text("tmp\n")
    locked = root / "unreadable-but-excluded"
    locked.mkdir()
    (locked / "x").write_text("x")
    locked.chmod(0)  # never walked: an excluded directory is not even opened


EXCLUDE = [".git/", "*.tmp", "unreadable-but-excluded/", "a/b/", "!a/b/two.txt"]
KEPT = {"a", "a/one.bin", "a/big.bin", "a/exec.sh", "empty", "top.txt", "link"}


def _put_excluded(m: SSHMachine | LocalMachine, tmp_path: Path, remote: str) -> int:
    src = tmp_path / "src"
    _excluded_tree(src)
    try:
        return m.put_dir(src, remote, exclude=Selector(EXCLUDE).excluded).files_sent
    finally:
        (src / "unreadable-but-excluded").chmod(0o755)


def _names(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_excluded_paths_are_neither_walked_nor_sent(machine: SSHMachine, tmp_path: Path) -> None:
    sent = _put_excluded(machine, tmp_path, str(tmp_path / "remote"))
    assert _names(tmp_path / "remote") == KEPT
    assert sent == 4  # a/b/two.txt stays out: a file in an excluded directory cannot return


def test_excluded_paths_on_this_machine(tmp_path: Path) -> None:
    m = LocalMachine(tmp_path / "ws")
    assert _put_excluded(m, tmp_path, "/nvme/data") == 4
    assert _names(Path(m.nvme_path, "data")) == KEPT


def test_packed_tree_goes_as_parallel_shards_and_lands_whole(
    machine: SSHMachine, tmp_path: Path
) -> None:
    """pack: true: four streams to four agents at once; the tree is the same as one
    stream makes, dirs included, and a second sync sends nothing."""
    src = tmp_path / "src"
    make_tree(src)
    for i in range(300):
        d = src / "many" / f"d{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_text(f"{i}\n" * (i % 50))
    remote = str(tmp_path / "remote")
    seen: list[tuple[int, int]] = []
    first = machine.put_dir(src, remote, streams=4, progress=lambda d, t: seen.append((d, t)))
    assert first.files_sent == 306 and snapshot(Path(remote)) == snapshot(src)
    assert seen[-1][0] == seen[-1][1] == first.bytes_sent
    again = machine.put_dir(src, remote, streams=4)
    assert (again.files_sent, again.files_skipped) == (0, 306)
    # A link there that is a directory here now: replaced, never written through.
    (src / "link").unlink()
    (src / "link").mkdir()
    for i in range(40):  # in every shard
        (src / "link" / f"in{i}.txt").write_text("in\n" * i)
    outside = tmp_path / "outside"
    outside.mkdir()
    (Path(remote) / "link").unlink()
    (Path(remote) / "link").symlink_to(outside)
    machine.put_dir(src, remote, streams=4)
    assert snapshot(Path(remote)) == snapshot(src) and not any(outside.iterdir())


def test_shards_balance_bytes_and_keep_dirs_first() -> None:
    mine = {b"d": (b"d", 0, 0, 0o755), b"d/a": (b"f", 900, 0, 0o644)}
    mine |= {f"d/s{i}".encode(): (b"f", 100, 0, 0o644) for i in range(9)}
    paths = sorted(mine)
    shards = split(paths, mine, 2)
    assert shards[0][0] == b"d" and sorted(shards[0] + shards[1]) == paths
    cost = [sum(mine[p][1] + 512 for p in s) for s in shards]  # bytes + a per-file cost
    assert abs(cost[0] - cost[1]) <= 900 + 512  # within the largest file


class _Streams:
    """The machine, noting the streams each put_dir asks for."""

    def __init__(self, m: SSHMachine) -> None:
        self.m = m
        self.asked: list[int] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.m, name)

    def put_dir(self, *args: Any, **kw: Any) -> TransferStats:
        self.asked.append(kw.get("streams", 1))
        return self.m.put_dir(*args, **kw)


def test_stage_sends_a_packed_item_in_shards_with_its_excludes(
    machine: SSHMachine, tmp_path: Path
) -> None:
    src = tmp_path / "job" / "tree"
    _excluded_tree(src)
    items = (
        DataItem("tree", str(tmp_path / "packed"), tuple(EXCLUDE), pack=True),
        DataItem("tree", str(tmp_path / "plain"), tuple(EXCLUDE)),
    )
    job = JobSpec(name="x", data=items, base_dir=str(tmp_path / "job"))
    spy = _Streams(machine)
    try:
        stage_data(cast(Machine, spy), job, Lines(), tmp_path / "cache", {})
    finally:
        (src / "unreadable-but-excluded").chmod(0o755)
    assert spy.asked == [PACK_STREAMS, 1]
    assert _names(tmp_path / "packed") == _names(tmp_path / "plain") == KEPT
