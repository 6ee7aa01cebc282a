"""Runner tests on sim: the fake GitHub, the stand-in runner tarball, and a config that
points `cloudgpu runner` at both. Everything stays on 127.0.0.1."""

from __future__ import annotations

import hashlib
import io
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cloudgpu_providers.sim import SimProvider

from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_JOB, ProviderContext
from tests.runners.fake_github import FakeGitHub

STANDIN = Path(__file__).resolve().parent / "standin" / "run.sh"


def runner_tarball(run_sh: str | None = None) -> bytes:
    """A tar.gz laid out like actions-runner-linux-x64-*.tar.gz: ./run.sh at the top."""
    data = (run_sh if run_sh is not None else STANDIN.read_text()).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("./run.sh")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def configure(
    paths: Paths,
    gh: FakeGitHub,
    monkeypatch: pytest.MonkeyPatch,
    *,
    tarball: bytes | None = None,
    online_timeout_s: float = 60,
    extra: str = "",
) -> None:
    blob = tarball if tarball is not None else runner_tarball()
    gh.downloads["runner.tar.gz"] = blob
    paths.config_dir.mkdir(parents=True, exist_ok=True)
    paths.config_file.write_text(
        "[providers.sim]\nenabled = true\nboot_delay = 0\n\n"
        "[runner]\n"
        f'runner_url = "{gh.base_url}/_download/runner.tar.gz"\n'
        f'runner_sha256 = "{hashlib.sha256(blob).hexdigest()}"\n'
        f"online_timeout_s = {online_timeout_s}\n"
        "boot_grace_s = 5\n" + extra
    )
    monkeypatch.setenv("GITHUB_TOKEN", gh.token)
    monkeypatch.setenv("GITHUB_API_URL", gh.base_url)


def sim(paths: Paths) -> SimProvider:
    return SimProvider(ProviderContext(config={"enabled": True}, paths=paths, env={}))


def live_sim(paths: Paths, job_id: str | None = None) -> list[str]:
    p = sim(paths)
    return [i.id for i in p.list_instances({TAG_JOB: job_id} if job_id else {})]


def wait_for(pred: Callable[[], bool], timeout: float = 60.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def kill_all_sim(paths: Paths) -> None:
    p = sim(paths)
    root = paths.data_dir / "sim"
    for d in sorted(root.glob("sim-*")) if root.exists() else []:
        p.terminate(d.name)
