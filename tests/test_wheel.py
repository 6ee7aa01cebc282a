"""Build the wheel and install it, with no extras, into a fresh virtualenv outside the
checkout: it builds without a setuptools warning, carries its licence, py.typed and
templates, and `offers`/`plan`/`launch` work on `local` with no cloud SDK installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        **kw,  # type: ignore[call-overload]
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*-results")
    for name in ("cloudgpu", "providers", "templates"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    build = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp / "dist"), str(src)]
    )
    assert build.returncode == 0, build.stderr[-3000:]
    wheels = list((tmp / "dist").glob("cloudgpu-*.whl"))
    assert len(wheels) == 1
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    pip = _run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", str(wheels[0])])
    assert pip.returncode == 0, pip.stderr[-3000:]
    return env_dir, build.stdout + build.stderr


def _cloudgpu(env_dir: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["CLOUDGPU_HOME"] = str(cwd / ".home")
    return _run([str(env_dir / "bin" / "cloudgpu"), *args], cwd=cwd, env=env)


def test_wheel_builds_without_setuptools_warnings(installed: tuple[Path, str]) -> None:
    _, log = installed
    for marker in ("BuildBackendWarning", "SetuptoolsDeprecationWarning", "is absent from"):
        assert marker not in log, log[log.find(marker) - 500 :][:1500]


def test_wheel_metadata_licence_and_typing(installed: tuple[Path, str]) -> None:
    env_dir, _ = installed
    code = (
        "import importlib.metadata as m, importlib.resources as r, json;"
        "md = m.metadata('cloudgpu');"
        "d = m.distribution('cloudgpu');"
        "print(json.dumps({'license': md['License-Expression'],"
        " 'urls': md.get_all('Project-URL'), 'classifiers': md.get_all('Classifier'),"
        " 'files': [str(f) for f in d.files],"
        " 'typed': r.files('cloudgpu').joinpath('py.typed').is_file()}))"
    )
    # cwd outside the checkout: python -c puts cwd first on sys.path.
    out = _run([str(env_dir / "bin" / "python"), "-c", code], cwd=env_dir)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["license"] == "Apache-2.0"
    assert doc["typed"] is True
    assert any(f.endswith(".dist-info/licenses/LICENSE") for f in doc["files"])
    assert any(u.startswith("Source, https://") for u in doc["urls"])
    assert "Typing :: Typed" in doc["classifiers"]


def test_no_extras_launches_quickstart_from_the_wheel(
    installed: tuple[Path, str], tmp_path: Path
) -> None:
    env_dir, _ = installed
    sdk = _run([str(env_dir / "bin" / "python"), "-c", "import boto3"], cwd=tmp_path)
    assert sdk.returncode != 0  # really no cloud extra in this environment
    res = _cloudgpu(env_dir, ["--version"], tmp_path)
    assert res.returncode == 0 and "0.1.0" in res.stdout
    res = _cloudgpu(env_dir, ["launch", "quickstart", "--yes"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "quickstart-results" / "summary.json").is_file()
    res = _cloudgpu(env_dir, ["offers", "--provider", "local", "--json"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert [o["provider"] for o in json.loads(res.stdout)] == ["local"]
    res = _cloudgpu(env_dir, ["init", "finetune"], tmp_path)
    assert res.returncode == 0, res.stderr
    res = _cloudgpu(
        env_dir, ["plan", "finetune.yaml", "--all-providers", "--json", "--limit", "1"], tmp_path
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["gpu_count"] == 8


def test_no_extras_means_not_enabled_with_the_install_hint(
    installed: tuple[Path, str], tmp_path: Path
) -> None:
    """With credentials but without the SDK extras, `check` names the extra to install."""
    env_dir, _ = installed
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(
        CLOUDGPU_HOME=str(tmp_path / ".home"),
        AWS_ACCESS_KEY_ID="AKIAEXAMPLE",
        AWS_SECRET_ACCESS_KEY="example-secret",
    )
    res = _run([str(env_dir / "bin" / "cloudgpu"), "check"], cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    lines = {ln.split()[0]: ln for ln in res.stdout.splitlines() if ln.strip()}
    for name in ("aws", "gcp", "azure"):
        assert f"not enabled: install cloudgpu[{name}]" in lines[name], lines[name]
    assert "not enabled: install" not in lines["runpod"]  # no extra needed


@pytest.mark.skipif(shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists(),
                    reason="needs OpenSSH's sshd")  # fmt: skip
def test_no_extras_launches_on_an_ssh_host_from_the_wheel(
    installed: tuple[Path, str], tmp_path: Path
) -> None:
    from tests.providers.test_ssh import host_table, write_config
    from tests.remote.sshd import start_sshd

    env_dir, _ = installed
    server = start_sshd(tmp_path / "sshd")
    try:
        write_config(tmp_path / ".home", [host_table(server, tmp_path / "nvme")])
        assert _cloudgpu(env_dir, ["init", "quickstart"], tmp_path).returncode == 0
        job = (tmp_path / "quickstart.yaml").read_text()
        job = job.replace("providers: [local]", "providers: [ssh]").replace(
            "gpu: none", "gpu: A100-80GB:2"
        )
        (tmp_path / "quickstart.yaml").write_text(job)
        res = _cloudgpu(env_dir, ["offers", "--provider", "ssh", "--json"], tmp_path)
        assert res.returncode == 0, res.stderr
        assert [o["provider"] for o in json.loads(res.stdout)] == ["ssh"]
        res = _cloudgpu(env_dir, ["launch", "quickstart.yaml", "--yes", "--json"], tmp_path)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["provider"] == "ssh" and doc["state"] == "succeeded"
        assert (tmp_path / "quickstart-results" / "summary.json").is_file()
    finally:
        server.stop()


def test_the_example_plugin_installs_beside_the_wheel_and_passes_its_tests(
    installed: tuple[Path, str], tmp_path: Path
) -> None:
    """docs/providers.md's out-of-tree provider: pip-installed next to cloudgpu (no
    checkout on sys.path), found through its entry point, its own tests green."""
    env_dir, _ = installed
    example = tmp_path / "cloudgpu-scratch"
    shutil.copytree(
        ROOT / "docs" / "examples" / "cloudgpu-scratch",
        example,
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"),
    )
    python = str(env_dir / "bin" / "python")
    pip = _run([python, "-m", "pip", "install", "-q", f"{example}[test]"], cwd=tmp_path)
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.pop("CLOUDGPU_HOME", None)
    res = _run(
        [python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(example / "tests")],
        cwd=tmp_path,
        env=env,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    # Its own 3 tests and the 5 of the shared contract suite the wheel ships
    # (cloudgpu.testing); only the replace_node check skipped, for its stated reason.
    assert "8 passed, 1 skipped" in res.stdout, res.stdout[-1500:]
    assert "scratch does not claim Capabilities.replace_node" in res.stdout, res.stdout[-1500:]
