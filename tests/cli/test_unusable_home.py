"""A read-only or full CLOUDGPU_HOME: reading commands still work (the store opens
read-only), writing ones stop with one line saying why (exit 2), never a traceback.

The home is a small tmpfs in a private mount namespace (root and util-linux unshare
needed: CI runs as root), remounted read-only, then filled up."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare -m"
    ),
]

SCRIPT = """
set -u
mount -t tmpfs -o size=4m tmpfs "$H"
run() {{ echo "== $1"; shift; "$PY" -m cloudgpu "$@" > /dev/null 2> "$H.err"; echo "rc=$?";
        head -c 400 "$H.err"; echo; }}
run setup launch quickstart.yaml --yes
mount -o remount,ro "$H"
run ro-status status
run ro-spend report spend --format md
run ro-launch launch quickstart.yaml --yes
mount -o remount,rw "$H"
dd if=/dev/zero of="$H/fill" bs=64k 2>/dev/null
run full-status status
run full-launch launch quickstart.yaml --yes
"""


def test_read_only_and_full_home(tmp_path: Path) -> None:
    shutil.copy(TEMPLATES / "quickstart.yaml", tmp_path)
    shutil.copytree(TEMPLATES / "quickstart-data", tmp_path / "quickstart-data")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = {**os.environ, "H": str(mnt), "PY": sys.executable, "CLOUDGPU_HOME": str(mnt / "h")}
    proc = subprocess.run(
        ["unshare", "-m", "bash", "-c", SCRIPT.format()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    runs = dict(_runs(proc.stdout))
    assert runs["setup"][0] == "0", proc.stdout + proc.stderr
    for name in ("ro-status", "ro-spend", "full-status"):
        assert runs[name][0] == "0", (name, runs[name])
    for name, why in (("ro-launch", "read-only"), ("full-launch", "no space left")):
        code, err = runs[name]
        assert code == "2" and "cannot write the state store" in err and why in err, (name, err)
        assert "Traceback" not in err and "internal error" not in err


def _runs(out: str) -> list[tuple[str, tuple[str, str]]]:
    blocks = out.split("== ")[1:]
    parsed = []
    for block in blocks:
        name, rc, *err = block.splitlines()
        parsed.append((name, (rc.removeprefix("rc="), "\n".join(err))))
    return parsed
