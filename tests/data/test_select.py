"""The exclude matcher follows the gitignore pattern rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudgpu.data.select import Selector, selector_for
from cloudgpu.lifecycle.stage import stage_data
from cloudgpu.remote import LocalMachine
from cloudgpu.spec.model import DataItem, JobSpec
from tests.lifecycle.helpers import Lines


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


def test_local_trees_are_staged_without_what_the_job_excludes(tmp_path: Path) -> None:
    """The job directory's .cloudgpuignore, the tree's own and the item's exclude: all
    three leave files out of a local tree's staging, as for object-store sources."""
    job_dir = tmp_path / "job"
    tree = job_dir / "dataset"
    for rel in ("train/a.bin", "train/b.tmp", "cache/x", "notes.md", "val/c.bin"):
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(b"x" * 10)
    (job_dir / ".cloudgpuignore").write_text("cache/\n")
    (tree / ".cloudgpuignore").write_text("*.md\n")
    item = DataItem("dataset", "/nvme/data", exclude=("*.tmp", "val/"))
    job = JobSpec(name="x", data=(item,), base_dir=str(job_dir))
    m = LocalMachine(tmp_path / "ws")
    stats = stage_data(m, job, Lines(), tmp_path / "cache", {})
    got = {str(p.relative_to(m.nvme_dir / "data")) for p in (m.nvme_dir / "data").rglob("*")}
    assert got == {"train", "train/a.bin", ".cloudgpuignore"}
    assert stats.files_sent == 2
