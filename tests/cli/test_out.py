"""report --out writes where the user pointed, the way they pointed: a regular file
atomically, through a symlink they named, into a FIFO or device in place (never
replacing it with a regular file); what cannot be written is one line, exit 2."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from tests.lifecycle.helpers import main_exit

REPORT = ["report", "offers", "--gpu", "H100", "--format", "md"]


def test_dev_stdout_prints() -> None:
    code, out, err = main_exit([*REPORT, "--out", "/dev/stdout"])
    assert code == 0 and out.startswith("# GPU offers"), err


def test_dev_null_stays_a_device() -> None:
    code, _, err = main_exit([*REPORT, "--out", "/dev/null"])
    assert code == 0, err
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_symlink_is_written_through(tmp_path: Path) -> None:
    target = tmp_path / "real.md"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.md"
    link.symlink_to(target)
    code, _, err = main_exit([*REPORT, "--out", str(link)])
    assert code == 0, err
    assert link.is_symlink() and target.read_text().startswith("# GPU offers")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.md", "real.md"]


def test_a_fifo_gets_the_bytes_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    code, _, err = main_exit([*REPORT, "--out", str(fifo)])
    reader.join(10)
    assert code == 0, err
    assert got and got[0].startswith(b"# GPU offers")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize(
    ("out", "words"),
    [("/dev/full", "No space left"), ("{tmp}/nope/r.md", "does not exist"), ("{tmp}", "directory")],
)
def test_unwritable_is_one_line(tmp_path: Path, out: str, words: str) -> None:
    code, _, err = main_exit([*REPORT, "--out", out.format(tmp=tmp_path)])
    assert code == 2 and words in err.splitlines()[0], err
    assert "internal error" not in err and len(err.splitlines()) <= 2


def test_a_regular_file_is_replaced_atomically(tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    out.write_text("old")
    code, _, err = main_exit([*REPORT, "--out", str(out)])
    assert code == 0 and out.read_text().startswith("# GPU offers"), err
    assert [p.name for p in tmp_path.iterdir()] == ["r.md"]  # no temp file left
