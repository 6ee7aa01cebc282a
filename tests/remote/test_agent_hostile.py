"""The receiving side of a sync treats every byte from the instance as hostile.

Crafted streams go through the client's real download path (cloudgpu.remote.transfer.get
over a stream whose "instance" answers with those bytes); the symlink-then-directory
case also runs over real SSH with two ordinary collects. Each case checks that nothing
outside the destination changed (hashes before/after) and that files the destination
already had survive a refused, cut or corrupt stream.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import tracemalloc
import zlib
from pathlib import Path

import pytest

from cloudgpu.errors import RemoteError
from cloudgpu.remote import SSHMachine, syncwire, transfer


class Crafted:
    """A stream as a hostile agent would send it: entries, then an honest (or not)
    trailer."""

    def __init__(self, total: int | None = None) -> None:
        self.entries: list[bytes] = []
        self.total = total
        self.size = 0

    def file(self, path: bytes, data: bytes, mode: int = 0o644, size: int | None = None) -> None:
        n = len(data) if size is None else size
        self.size += n
        self.entries.append(b"F" + syncwire.FILE.pack(len(path), mode, 0, n) + path + data)

    def dir(self, path: bytes, mode: int = 0o755) -> None:
        self.entries.append(b"D" + syncwire.DIR.pack(len(path), mode) + path)

    def link(self, path: bytes, target: bytes) -> None:
        self.entries.append(b"L" + syncwire.LINK.pack(len(path), len(target)) + path + target)

    def bytes(self, *, digest_ok: bool = True, cut: int = 0) -> bytes:
        total = self.size if self.total is None else self.total
        body = syncwire.MAGIC + syncwire.PRE.pack(len(self.entries), total, 0, 0)
        body += b"".join(self.entries)
        digest = hashlib.sha256(body).digest()
        if not digest_ok:
            digest = bytes(32)
        out = body + b"E" + digest
        return out[: len(out) - cut] if cut else out


class FakeInstance:
    """transfer.Stream whose remote end sends ``payload`` and exits with ``status``."""

    def __init__(self, payload: bytes, status: int = 0) -> None:
        self.payload, self.status, self.pos = payload, status, 0

    def write(self, data: bytes) -> None:
        pass

    def read(self, n: int) -> bytes:
        out = self.payload[self.pos : self.pos + n]
        self.pos += len(out)
        return out

    def close_write(self) -> None:
        pass

    def finish(self) -> tuple[int, str]:
        return self.status, ""


def download(payload: bytes, dst: Path) -> None:
    transfer.get(lambda cmd: FakeInstance(payload), "python3", "/out", dst, None)


def tree_hash(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p)] = "->" + os.readlink(p)
        elif p.is_file():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p)] = "dir"
    return out


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """What a hostile stream would like to overwrite: the user's ~/.ssh, say."""
    v = tmp_path / "home" / ".ssh"
    v.mkdir(parents=True)
    (v / "authorized_keys").write_text("ssh-ed25519 AAAA the-user\n")
    return v


def leftovers(dst: Path) -> list[str]:
    return [p.name for p in dst.rglob("*") if p.name.startswith(".cgpu-")]


def test_file_through_a_symlink_an_earlier_sync_made_is_refused(
    tmp_path: Path, victim: Path
) -> None:
    dst = tmp_path / "results"
    dst.mkdir()
    (dst / "x").symlink_to(victim)  # left by an earlier collect
    before = tree_hash(victim)
    s = Crafted()
    s.file(b"x/authorized_keys", b"ssh-ed25519 AAAA attacker\n")
    with pytest.raises(RemoteError, match="symlink"):
        download(s.bytes(), dst)
    assert tree_hash(victim) == before
    assert leftovers(dst) == []


@pytest.mark.parametrize(
    "path",
    [b"../escape", b"/abs/path", b"a/../../escape", b"a//b", b"./a", b"a/.", b"nul\0x"],
    ids=["dotdot", "absolute", "nested-dotdot", "empty-part", "dot", "trailing-dot", "nul"],
)
def test_unsafe_paths_are_refused(tmp_path: Path, victim: Path, path: bytes) -> None:
    dst = tmp_path / "home" / "results"
    before = tree_hash(tmp_path / "home")
    s = Crafted()
    s.file(path, b"owned\n")
    with pytest.raises(RemoteError, match="unsafe path"):
        download(s.bytes(), dst)
    after = {k: v for k, v in tree_hash(tmp_path / "home").items() if not k.startswith(str(dst))}
    assert after == before
    assert not (tmp_path / "escape").exists() and not Path("/abs/path").exists()


def test_symlink_as_the_root_is_refused(tmp_path: Path, victim: Path) -> None:
    s = Crafted()
    s.link(b"", str(victim).encode())
    with pytest.raises(RemoteError, match="unsafe path"):
        download(s.bytes(), tmp_path / "results")
    assert not (tmp_path / "results").is_symlink()


def test_symlinks_are_recreated_never_followed(tmp_path: Path, victim: Path) -> None:
    dst = tmp_path / "results"
    dst.mkdir()
    (dst / "keys").symlink_to(victim / "authorized_keys")
    before = tree_hash(victim)
    s = Crafted()
    s.link(b"elsewhere", str(victim).encode())  # as rsync -a would: a link, kept as one
    s.file(b"keys", b"replaced the link, not its target\n")
    download(s.bytes(), dst)
    assert tree_hash(victim) == before
    assert os.readlink(dst / "elsewhere") == str(victim)
    assert not (dst / "keys").is_symlink()
    assert (dst / "keys").read_text() == "replaced the link, not its target\n"


def test_device_and_fifo_in_the_way_are_replaced_not_opened(tmp_path: Path) -> None:
    dst = tmp_path / "results"
    dst.mkdir()
    os.mkfifo(dst / "pipe")  # opening it for writing would hang
    s = Crafted()
    s.file(b"pipe", b"data\n")
    download(s.bytes(), dst)
    assert stat.S_ISREG((dst / "pipe").lstat().st_mode)
    assert (dst / "pipe").read_text() == "data\n"


def test_setuid_and_setgid_bits_are_dropped(tmp_path: Path) -> None:
    s = Crafted()
    s.file(b"tool", b"#!/bin/sh\n", mode=0o6755)
    s.dir(b"d", mode=0o7777)
    download(s.bytes(), tmp_path / "results")
    assert stat.S_IMODE((tmp_path / "results" / "tool").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "results" / "d").stat().st_mode) == 0o777


@pytest.mark.parametrize("fault", ["cut", "digest", "oversize"])
def test_a_bad_stream_keeps_every_file_the_user_had(tmp_path: Path, fault: str) -> None:
    dst = tmp_path / "results"
    (dst / "sub").mkdir(parents=True)
    (dst / "model.pt").write_bytes(b"previous good model" * 1000)
    (dst / "sub" / "log.txt").write_text("previous log\n")
    before = tree_hash(dst)
    s = Crafted()
    s.file(b"model.pt", os.urandom(200_000))
    s.file(b"sub/log.txt", b"new log\n")
    s.file(b"sub/new.txt", b"new\n")
    if fault == "oversize":  # more bytes than the header announced
        s.total = 10
    payload = s.bytes(cut=40_000 if fault == "cut" else 0, digest_ok=fault != "digest")
    with pytest.raises(RemoteError):
        download(payload, dst)
    assert tree_hash(dst) == before
    assert leftovers(dst) == []


def test_announcing_more_than_the_free_space_writes_nothing(tmp_path: Path) -> None:
    s = Crafted(total=1 << 62)
    s.file(b"huge", b"x", size=1)
    with pytest.raises(RemoteError, match="No space left"):
        download(s.bytes(), tmp_path / "results")
    assert not list((tmp_path / "results").glob("*")) if (tmp_path / "results").exists() else True


def test_huge_lengths_are_refused_without_allocating(tmp_path: Path) -> None:
    raw = (
        syncwire.MAGIC
        + syncwire.PRE.pack(1, 1, 0, 0)
        + b"F"
        + syncwire.FILE.pack(1 << 31, 0o644, 0, 1)
    )
    with pytest.raises(RemoteError, match="a path of"):
        download(raw, tmp_path / "results")
    # A deflate stream of just over MAX_MANIFEST bytes, built as a peer would: one 1 MiB
    # block repeated (each full flush resets the window, so the block's bytes recur),
    # not by compressing a gigabyte here.
    z = zlib.compressobj(9)
    head = z.compress(b"f1 1 ") + z.flush(zlib.Z_FULL_FLUSH)
    block = z.compress(b"a" * (1 << 20)) + z.flush(zlib.Z_FULL_FLUSH)
    bomb = head + block * (syncwire.MAX_MANIFEST // (1 << 20) + 1)
    tracemalloc.start()
    try:
        with pytest.raises(syncwire.SyncError, match="manifest record over"):
            syncwire.decode_manifest(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Refused at the first record longer than a path can be: a few inflated chunks held,
    # never the gigabyte.
    assert peak < 16 << 20, peak
    # Well-formed records past the limit are refused too, at the limit.
    many = zlib.compress(b"\0".join(b"f1 1 p%d" % i for i in range(200_000)))
    with pytest.raises(syncwire.SyncError, match="manifest over 65536 bytes"):
        syncwire.decode_manifest(many, limit=1 << 16)
    # Under it, records cut across inflated chunks all come back.
    back = syncwire.decode_manifest(many)
    assert len(back) == 200_000 and back[b"p199999"] == (b"f", 1, 1)
    with pytest.raises(syncwire.SyncError, match="unreadable manifest"):
        syncwire.decode_manifest(b"not zlib")


def test_two_collects_symlink_then_directory_over_ssh(
    machine: SSHMachine, tmp_path: Path, victim: Path
) -> None:
    # The case: first the instance's output holds `x -> <a local path>`, then a
    # real directory `x/` with a file. rsync -a semantics: the link is replaced by the
    # directory; the file lands in the destination, never through the link.
    remote = tmp_path / "instance" / "out"
    remote.mkdir(parents=True)
    (remote / "x").symlink_to(victim)
    dst = tmp_path / "results"
    machine.get_dir(str(remote), dst)
    assert os.readlink(dst / "x") == str(victim)
    before = tree_hash(victim)
    (remote / "x").unlink()
    (remote / "x").mkdir()
    (remote / "x" / "authorized_keys").write_text("ssh-ed25519 AAAA attacker\n")
    machine.get_dir(str(remote), dst)
    assert tree_hash(victim) == before
    assert (dst / "x").is_dir() and not (dst / "x").is_symlink()
    assert (dst / "x" / "authorized_keys").read_text() == "ssh-ed25519 AAAA attacker\n"


def test_partials_of_a_killed_transfer_are_cleared_by_the_next(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    dst = tmp_path / "results"
    (dst / "sub").mkdir(parents=True)
    stale = dst / "sub" / f".cgpu-{dead.pid}-7.part"  # a collect killed with -9 left it
    stale.write_bytes(b"half a file")
    live = dst / "sub" / f".cgpu-{os.getpid()}-1.part"  # a transfer still under way
    live.write_bytes(b"in flight")
    assert syncwire.scan(os.fsencode(dst)).keys() == {b"", b"sub"}  # never synced
    s = Crafted()
    s.file(b"sub/out.txt", b"fresh\n")
    download(s.bytes(), dst)
    assert not stale.exists() and live.exists()
    assert (dst / "sub" / "out.txt").read_text() == "fresh\n"
