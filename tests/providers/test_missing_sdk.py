"""A cloud provider whose SDK extra is not installed is "not enabled: install cloudgpu[x]",
even with credentials: `check` says so, `launch` skips it with that hint (no
ModuleNotFoundError, no "internal error"), `down --orphans` says it skipped it.

The CLI runs in a child Python in which the SDK's import fails exactly as for a package
that is not installed: ``sys.modules[name] = None`` is the import system's own "this
module does not exist" (``import name`` raises ModuleNotFoundError). The wheel test
(tests/test_wheel.py) checks the same in a real virtualenv without any extra.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lifecycle.helpers import job_file
from tests.providers.lifecycle_kit import write_config

# provider -> (the SDK module whose absence is simulated, credentials in env, config)
CASES = {
    "aws": (
        "boto3",
        {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "example-secret"},
        "",
    ),
    "gcp": (
        "google.cloud.compute_v1",
        {},
        '[providers.gcp]\nproject = "p"\nanonymous = true\nendpoint_url = "http://127.0.0.1:9"\n',
    ),
    "azure": (
        "azure.mgmt.compute",
        {
            "AZURE_CLIENT_ID": "00000000-0000-0000-0000-000000000001",
            "AZURE_CLIENT_SECRET": "example-secret",
            "AZURE_TENANT_ID": "00000000-0000-0000-0000-000000000002",
            "AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000003",
        },
        "",
    ),
}


def cli_without(
    module: str, args: list[str], home: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        f"sys.modules[{module!r}] = None\n"
        "from cloudgpu.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **env, "CLOUDGPU_HOME": str(home)},
    )


@pytest.mark.parametrize("provider", sorted(CASES))
def test_check_says_install_the_extra(provider: str, cloudgpu_home: Path) -> None:
    module, env, config = CASES[provider]
    write_config(cloudgpu_home, config)
    res = cli_without(module, ["check"], cloudgpu_home, env)
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith(provider + " "))
    assert "disabled" in line and f"not enabled: install cloudgpu[{provider}]" in line
    # The same credentials with the SDK present: enabled (the case that used to mislead).
    res = subprocess.run(
        [sys.executable, "-m", "cloudgpu", "check"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env, "CLOUDGPU_HOME": str(cloudgpu_home)},
    )
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith(provider + " "))
    assert "enabled " in line, line


@pytest.mark.parametrize("provider", sorted(CASES))
def test_launch_skips_it_with_the_hint(provider: str, cloudgpu_home: Path, tmp_path: Path) -> None:
    module, env, config = CASES[provider]
    write_config(cloudgpu_home, config)
    job = job_file(
        tmp_path,
        f"name: t\nresources:\n  gpu: L4\n  providers: [{provider}]\nrun: echo hi\n",
    )
    res = cli_without(module, ["launch", str(job), "--yes"], cloudgpu_home, env)
    assert res.returncode == 2, res.stderr
    assert f"install cloudgpu[{provider}]" in res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    assert "ModuleNotFoundError" not in res.stderr


@pytest.mark.parametrize("provider", sorted(CASES))
def test_down_orphans_says_what_it_skipped(provider: str, cloudgpu_home: Path) -> None:
    module, env, config = CASES[provider]
    write_config(cloudgpu_home, config)
    res = cli_without(module, ["down", "--orphans"], cloudgpu_home, env)
    assert res.returncode == 0, res.stderr
    assert f"{provider}: skipped (not enabled: install cloudgpu[{provider}]" in res.stderr
    assert "Traceback" not in res.stderr
