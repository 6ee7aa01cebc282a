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


# Floors `make test-lowest` cannot install: the test tools (moto's Flask, cfn-lint) need
# newer releases than cloudgpu itself does (see constraints-lowest.txt).
UNPINNED_FLOORS = {"click", "pyyaml"}


def _floors() -> dict[str, str]:
    """name -> lower bound of every runtime and cloud-extra requirement in pyproject."""
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra, items in project["optional-dependencies"].items():
        if extra not in ("dev", "all"):
            reqs += items
    out = {}
    for text in reqs:
        req = Requirement(text)
        (low,) = [s.version for s in req.specifier if s.operator == ">="]
        out[req.name.lower()] = low
    return out


def test_lowest_constraints_pin_every_floor() -> None:
    from packaging.version import Version

    pins = {}
    for line in (ROOT / "constraints-lowest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.strip().lower()] = version.strip()
    floors = _floors()
    for name, low in floors.items():
        if name in UNPINNED_FLOORS:
            assert name not in pins
            continue
        assert name in pins, f"constraints-lowest.txt: pin {name}=={low}"
        assert Version(pins[name]) == Version(low), (
            f"{name}: pyproject >={low}, pinned {pins[name]}"
        )
    assert set(pins) <= set(floors), f"pinned but not a dependency: {set(pins) - set(floors)}"


def test_every_extra_is_installable_and_meaningful() -> None:
    """An extra that installs nothing only misleads (`pip install cloudgpu[runpod]`)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert all(extras[name] for name in extras), "an empty extra"
    assert "runpod" not in extras
