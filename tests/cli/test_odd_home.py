"""A CLOUDGPU_HOME that cannot hold cloudgpu's directories (a file, a dangling symlink, a
file where data/ goes) or holds a broken state store: one line naming the path, exit 2,
never "internal error"."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lifecycle.helpers import main_exit


def _file(home: Path) -> Path:
    home.write_text("x")
    return home


def _dangling(home: Path) -> Path:
    home.symlink_to(home.parent / "nowhere")
    return home


def _data_is_a_file(home: Path) -> Path:
    home.mkdir()
    (home / "data").write_text("x")
    return home / "data"


def _garbage_store(home: Path) -> Path:
    (home / "data").mkdir(parents=True)
    (home / "data" / "state.db").write_bytes(b"not sqlite at all\n" * 10)
    return home / "data" / "state.db"


@pytest.mark.parametrize("make", [_file, _dangling, _data_is_a_file, _garbage_store])
@pytest.mark.parametrize("command", [["status"], ["report", "spend", "--format", "md"]])
def test_unusable_home_is_one_line(cloudgpu_home: Path, make: object, command: list[str]) -> None:
    named = make(cloudgpu_home)  # type: ignore[operator]
    code, _, err = main_exit(command)
    assert code == 2, err
    lines = err.splitlines()
    assert lines[0].startswith(f"error: {named}") and "internal error" not in err, err
    assert len(lines) <= 2
