"""`cloudgpu schema` through click's runner and as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from cloudgpu.cli import cli

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def test_schema_prints_json_schema() -> None:
    res = CliRunner().invoke(cli, ["schema"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["title"] == "cloudgpu job"
    assert "limits" in doc["properties"]


def test_schema_check_ok_and_bad(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["schema", "--check", str(TEMPLATES / "quickstart.yaml")])
    assert res.exit_code == 0 and "ok" in res.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nrun: y\nresources: {gpux: H100}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "cloudgpu", "schema", "--check", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") <= 2 and "Traceback" not in proc.stderr
    assert f"{bad}:3: resources.gpux: unknown key; did you mean 'gpu'?" in proc.stderr
