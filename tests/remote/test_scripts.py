"""The programs shipped to instances (sync agent, puller, pusher) run where no cloudgpu
is installed: their modules import only the standard library and each other."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from cloudgpu.remote import scripts, transfer

SHIPPED = scripts.PROGRAMS


def _imports(name: str) -> set[str]:
    """What the module imports when loaded (a function's guarded optional import, such as
    the puller's google_crc32c, falls back when missing)."""
    tree = ast.parse((scripts.HERE / f"{name}.py").read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


@pytest.mark.parametrize("main", sorted(SHIPPED))
def test_shipped_modules_import_only_the_stdlib_and_each_other(main: str) -> None:
    mods = (*SHIPPED[main], main)
    allowed = {f"cloudgpu.remote.{m}" for m in mods}
    for m in mods:
        bad = {
            i
            for i in _imports(m)
            if i not in allowed and i.split(".")[0] not in sys.stdlib_module_names
        }
        assert not bad, f"{m}.py imports {sorted(bad)}: the instance has no such module"


def test_the_agent_program_runs_without_cloudgpu(tmp_path: Path) -> None:
    # -I -S: no site-packages, no current directory: nothing of this checkout to import.
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-c", transfer.AGENT_SOURCE, "bogus", "x"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 2, run.stderr
    assert "usage: agent recv|send ROOT" in run.stderr
