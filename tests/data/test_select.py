"""The exclude matcher follows the gitignore pattern rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudgpu.data.select import Selector, selector_for


@pytest.mark.parametrize(
    ("patterns", "path", "excluded"),
    [
        (["*.tmp"], "a/b/c.tmp", True),
        (["*.tmp"], "a/b/c.tmpx", False),
        (["/top.txt"], "top.txt", True),
        (["/top.txt"], "sub/top.txt", False),
        (["logs/"], "logs/x.txt", True),
        (["logs/"], "a/logs/x.txt", True),
        (["logs/"], "logs", False),  # a file named logs: dir-only rule
        (["a/**/z"], "a/z", True),
        (["a/**/z"], "a/b/c/z", True),
        (["**/cache"], "x/cache/f", True),
        (["data/*.bin", "!data/keep.bin"], "data/keep.bin", False),
        (["data/*.bin", "!data/keep.bin"], "data/drop.bin", True),
        (["skip/", "!skip/keep"], "skip/keep", True),  # no re-include inside an excluded dir
        (["f?le[0-9]"], "dir/file7", True),
        (["f?le[!0-9]"], "dir/file7", False),
        (["# comment", "", "\\#lit"], "#lit", True),
        (["*"], "anything/at/all", True),
    ],
)
def test_gitignore_rules(patterns: list[str], path: str, excluded: bool) -> None:
    assert Selector(patterns).excluded(path) is excluded


def test_ignore_files_and_exclude_list_combine(tmp_path: Path) -> None:
    (tmp_path / ".cloudgpuignore").write_text("*.log\n!important.log\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / ".cloudgpuignore").write_text("scratch/\n")
    sel = selector_for(["*.ckpt"], tmp_path, src)
    assert sel.excluded("a.log") and not sel.excluded("important.log")
    assert sel.excluded("scratch/x") and sel.excluded("m.ckpt") and not sel.excluded("m.pt")


def test_a_bad_ignore_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / ".cloudgpuignore").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="not UTF-8"):
        selector_for([], tmp_path)
