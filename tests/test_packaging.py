"""The hand-written package list in pyproject.toml must cover every package directory."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _dotted(path: Path) -> str:
    rel = path.relative_to(ROOT)
    parts = list(rel.parts)
    if parts[0] == "providers":
        parts[0] = "cloudgpu_providers"
    elif parts[0] == "templates":
        parts = ["cloudgpu", "templates", *parts[1:]]
    return ".".join(parts)


def test_every_package_dir_is_listed() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = set()
    for top in ("cloudgpu", "providers", "templates"):
        for init in (ROOT / top).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.add(_dotted(init.parent))
    missing = sorted(found - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_core_imports_no_cloud_sdk_at_module_level() -> None:
    import subprocess
    import sys

    code = (
        "import sys, cloudgpu, cloudgpu.provider, cloudgpu.registry, cloudgpu.cli;"
        "bad=[m for m in sys.modules if m.split('.')[0] in "
        "('boto3','botocore','google','azure','runpod')];print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
