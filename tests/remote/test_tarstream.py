"""Tar-stream transfers (cloudgpu.remote.tarstream) against a real `sh` + `tar` on this
machine, as a container reached through an exec API would run them."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from cloudgpu.data.select import Selector
from cloudgpu.errors import RemoteError
from cloudgpu.remote import tarstream
from cloudgpu.remote.openssh import ProcStream


def local_sh(command: str) -> ProcStream:
    proc = subprocess.Popen(
        ["sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    return ProcStream(proc)


def tree(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = (
            f"-> {os.readlink(p)}" if p.is_symlink() else (p.read_bytes() if p.is_file() else "dir")
        )
    return out


def test_tree_round_trip_keeps_links_modes_and_times(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub" / "deep").mkdir(parents=True)
    (src / "a.bin").write_bytes(os.urandom(3 << 20))
    (src / "sub" / "deep" / "b.txt").write_text("b")
    (src / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (src / "sub" / "run.sh").chmod(0o755)
    os.utime(src / "a.bin", (1_700_000_000, 1_700_000_000))
    (src / "link").symlink_to("sub/deep/b.txt")
    seen: list[tuple[int, int]] = []
    sent = tarstream.put(
        local_sh, src, str(tmp_path / "remote" / "x"), lambda d, t: seen.append((d, t))
    )
    assert sent.files_sent == 3 and sent.bytes_sent == (3 << 20) + 1 + 10
    assert seen[-1] == (sent.bytes_sent, sent.bytes_sent)
    back = tmp_path / "back"
    got = tarstream.get(local_sh, str(tmp_path / "remote" / "x"), back, None)
    assert got.files_sent == 3 and tree(back) == tree(src)
    assert (back / "sub" / "run.sh").stat().st_mode & 0o777 == 0o755
    assert int((back / "a.bin").stat().st_mtime) == 1_700_000_000


def test_single_file_both_ways(tmp_path: Path) -> None:
    f = tmp_path / "one.txt"
    f.write_text("hello")
    tarstream.put(local_sh, f, str(tmp_path / "r" / "renamed.txt"), None)
    assert (tmp_path / "r" / "renamed.txt").read_text() == "hello"
    tarstream.get(local_sh, str(tmp_path / "r" / "renamed.txt"), tmp_path / "out.txt", None)
    assert (tmp_path / "out.txt").read_text() == "hello"


def test_missing_remote_is_a_remote_error(tmp_path: Path) -> None:
    with pytest.raises(RemoteError, match="get"):
        tarstream.get(local_sh, str(tmp_path / "nope"), tmp_path / "dst", None)
    assert not (tmp_path / "dst").exists() or not list((tmp_path / "dst").iterdir())


def hostile(tmp_path: Path, *members: tuple[tarfile.TarInfo, bytes]) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            t.addfile(info, io.BytesIO(data) if info.isreg() else None)
    path = tmp_path / "hostile.tar"
    path.write_bytes(buf.getvalue())
    return f"cat {path}"


def info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    i = tarfile.TarInfo(name)
    i.type, i.linkname, i.mode = kind, link, 0o644
    return i


@pytest.mark.parametrize("name", ["./../escape", "/etc/evil", "./a/../../escape"])
def test_paths_leaving_the_destination_are_refused(tmp_path: Path, name: str) -> None:
    cmd = hostile(tmp_path, (info("./ok"), b"fine"), (info(name), b"evil"))
    dst = tmp_path / "dst"
    with pytest.raises(RemoteError, match="unsafe path"):
        tarstream.get(lambda _c: local_sh(cmd), "/x", dst, None)
    assert not (tmp_path / "escape").exists()
    assert not (dst / "ok").exists()  # nothing committed from a refused stream


def test_never_writes_through_a_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "sub").symlink_to(outside)  # left by someone else: must not be followed
    cmd = hostile(tmp_path, (info("./sub/f"), b"evil"))
    with pytest.raises(RemoteError, match="symlink"):
        tarstream.get(lambda _c: local_sh(cmd), "/x", dst, None)
    assert not list(outside.iterdir())
    # A link in the stream followed by a file "through" it: refused the same way.
    cmd = hostile(
        tmp_path, (info("./l", tarfile.SYMTYPE, str(outside)), b""), (info("./l/f"), b"e")
    )
    with pytest.raises(RemoteError):
        tarstream.get(lambda _c: local_sh(cmd), "/x", tmp_path / "dst2", None)
    assert not list(outside.iterdir())


def test_devices_and_hard_links_are_skipped(tmp_path: Path) -> None:
    cmd = hostile(
        tmp_path,
        (info("./f"), b"data"),
        (info("./hard", tarfile.LNKTYPE, "/etc/passwd"), b""),
        (info("./fifo", tarfile.FIFOTYPE), b""),
    )
    got = tarstream.get(lambda _c: local_sh(cmd), "/x", tmp_path / "dst", None)
    assert (got.files_sent, got.files_skipped) == (1, 2)
    assert sorted(p.name for p in (tmp_path / "dst").iterdir()) == ["f"]


def test_remote_failure_after_data_commits_nothing(tmp_path: Path) -> None:
    cmd = hostile(tmp_path, (info("./f"), b"data")) + "; echo 'tar: disk on fire' >&2; exit 2"
    with pytest.raises(RemoteError, match="disk on fire"):
        tarstream.get(lambda _c: local_sh(cmd), "/x", tmp_path / "dst", None)
    assert not (tmp_path / "dst" / "f").exists()


def test_excludes_leave_paths_out_of_the_stream(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "node_modules" / "x").mkdir(parents=True)
    (src / "node_modules" / "x" / "big.js").write_text("x" * 1000)
    (src / "keep").mkdir()
    (src / "keep" / "a.txt").write_text("a")
    (src / "keep" / "b.log").write_text("b")
    sel = Selector(["node_modules/", "*.log"])
    sent = tarstream.put(local_sh, src, str(tmp_path / "remote"), None, sel.excluded)
    assert sent.files_sent == 1
    assert tree(tmp_path / "remote") == {"keep": "dir", "keep/a.txt": b"a"}
