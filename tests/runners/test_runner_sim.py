"""`cloudgpu runner start | stop | gc` end to end: sim instances (real sshd), the real
runner bootstrap script, a stand-in runner binary, and a fake GitHub on loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cloudgpu.cli import cli, main
from cloudgpu.paths import Paths
from cloudgpu.runners.naming import runner_job_id
from tests.runners.fake_github import FakeGitHub, serve_fake_github
from tests.runners.harness import configure, kill_all_sim, live_sim, runner_tarball, sim, wait_for

pytestmark = pytest.mark.slow
REPO = "acme/models"


@pytest.fixture
def gh(paths: Paths) -> Iterator[FakeGitHub]:
    with serve_fake_github() as fake:
        yield fake
    kill_all_sim(paths)


def run(args: list[str]) -> Result:
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def run_main(args: list[str]) -> tuple[int, str]:
    """Through cloudgpu.cli.main, as the console script: errors become one line + status."""
    runner = CliRunner()
    try:
        result = runner.invoke(_Main(), args, catch_exceptions=True)
    finally:
        pass
    code = result.exit_code if isinstance(result.exit_code, int) else 1
    return code, result.output


class _Main:
    name = "cloudgpu"

    def main(self, args: list[str], prog_name: str | None = None, **_: object) -> object:
        return main(args)


def start_args(tag: str, *extra: str) -> list[str]:
    return [
        "runner",
        "start",
        "--repo",
        REPO,
        "--gpu",
        "A10G:1",
        "--providers",
        "sim",
        "--run-tag",
        tag,
        "--ttl",
        "10m",
        "--idle-timeout",
        "2m",
        *extra,
    ]


def test_happy_path_job_runs_and_instance_powers_itself_off(
    gh: FakeGitHub, paths: Paths, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    configure(paths, gh, monkeypatch)
    out_file = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out_file))
    res = run(start_args("run-1", "--github-output", "--labels", "gpu-a10g"))
    assert res.exit_code == 0, res.output
    outputs = dict(line.split("=", 1) for line in out_file.read_text().splitlines())
    label = outputs["label"]
    assert label == runner_job_id(REPO, "run-1")
    runner = gh.runner_by_name(label)
    assert runner is not None and runner.status == "online"
    assert set(runner.labels) == {label, "gpu-a10g"}
    assert live_sim(paths, label) == [outputs["instance-id"]]
    job = gh.queue_job(REPO, ["self-hosted", label], script="echo gpu tests passed")
    wait_for(lambda: gh.jobs[job].status == "completed", 60, "the job to complete")
    assert gh.jobs[job].conclusion == "success"
    # single use: the runner exits after its job and the instance powers itself off
    wait_for(lambda: not live_sim(paths, label), 60, "the instance to power off")
    assert sim(paths).describe(outputs["instance-id"]).state.is_gone
    res = run(["runner", "stop", "--repo", REPO, "--run-tag", "run-1"])
    assert res.exit_code == 0, res.output
    assert gh.runners == {} and live_sim(paths) == []
    # neither the token nor the JIT configuration reached the terminal, a log, the state
    # store or any file left under CLOUDGPU_HOME
    secrets = [gh.token, *gh.issued_jit]
    assert gh.issued_jit
    home = paths.data_dir.parent
    for f in home.rglob("*"):
        if f.is_file():
            blob = f.read_bytes()
            assert not any(s.encode() in blob for s in secrets), f
    assert not any(s in res.output for s in secrets)


def test_start_killed_after_instance_exists_stop_finds_it_by_tag(
    gh: FakeGitHub, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the runner never comes online, so start is still waiting when it is killed
    configure(paths, gh, monkeypatch, tarball=runner_tarball("#!/bin/sh\nsleep 600\n"))
    env = {**os.environ}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudgpu", *start_args("run-2")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    label = runner_job_id(REPO, "run-2")
    try:
        wait_for(lambda: bool(live_sim(paths, label)), 60, "the instance to exist")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert live_sim(paths, label) and gh.runner_by_name(label) is not None
    res = run(["runner", "stop", "--repo", REPO, "--run-tag", "run-2"])
    assert res.exit_code == 0, res.output
    assert "terminated" in res.output and "removed" in res.output
    assert live_sim(paths) == [] and gh.runners == {}


def test_instance_lost_mid_job_gc_cleans_up(
    gh: FakeGitHub, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(paths, gh, monkeypatch)
    assert run(start_args("run-3")).exit_code == 0
    label = runner_job_id(REPO, "run-3")
    job = gh.queue_job(REPO, [label], script="sleep 60")
    wait_for(lambda: gh.jobs[job].status == "in_progress", 60, "the job to start")
    runner = gh.runner_by_name(label)
    assert runner is not None and runner.busy
    res = run(["runner", "gc", "--repo", REPO])  # busy inside its TTL: never touched
    assert res.exit_code == 0 and live_sim(paths, label)
    for iid in live_sim(paths, label):
        sim(paths).terminate(iid)  # the machine is lost
    runner.status, runner.busy = "offline", False  # as GitHub marks a runner that vanished
    res = run(["runner", "gc", "--repo", REPO])
    assert res.exit_code == 0, res.output
    assert "no instance" in res.output
    assert gh.runners == {} and live_sim(paths) == []


def test_no_job_arrives_idle_timeout_powers_off(
    gh: FakeGitHub, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(paths, gh, monkeypatch)
    args = start_args("run-4")
    args[args.index("--idle-timeout") + 1] = "3s"
    assert run(args).exit_code == 0
    label = runner_job_id(REPO, "run-4")
    wait_for(lambda: not live_sim(paths, label), 60, "the idle instance to power off")
    runner = gh.runner_by_name(label)
    assert runner is not None
    runner.status = "offline"  # GitHub notices the runner stopped polling
    res = run(["runner", "gc", "--repo", REPO])
    assert res.exit_code == 0, res.output
    assert gh.runners == {} and live_sim(paths) == []


def test_registration_never_online_leaves_nothing(
    gh: FakeGitHub, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(
        paths, gh, monkeypatch, tarball=runner_tarball("#!/bin/sh\nexit 1\n"), online_timeout_s=5
    )
    code, output = run_main(start_args("run-5"))
    assert code != 0
    assert "never came online" in output and "Traceback" not in output
    assert gh.runners == {} and live_sim(paths) == []


def test_checksum_mismatch_never_runs_the_download(
    gh: FakeGitHub, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(paths, gh, monkeypatch, online_timeout_s=5)
    gh.downloads["runner.tar.gz"] = runner_tarball("#!/bin/sh\necho tampered\n")
    code, output = run_main(start_args("run-6"))
    assert code != 0 and "never came online" in output
    assert gh.runners == {} and live_sim(paths) == []


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--labels", "self-hosted"], "default runner labels"),
        (["--ttl", "2s"], "expected boot time"),
        (["--gpu", "H200:8"], "H200"),
        (["--repo", "nobody/nothing"], "not found"),
        (["--repo", "justname"], "OWNER/NAME"),
    ],
)
def test_bad_input_provisions_nothing(
    gh: FakeGitHub, paths: Paths, monkeypatch: pytest.MonkeyPatch, args: list[str], expect: str
) -> None:
    configure(paths, gh, monkeypatch)
    full = start_args("run-bad")
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag in full:
            full[full.index(flag) + 1] = value
        else:
            full += [flag, value]
    code, output = run_main(full)
    assert code != 0
    assert expect in output and "Traceback" not in output
    assert gh.runners == {} and live_sim(paths) == []


def test_missing_permission_is_named(
    gh: FakeGitHub, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(paths, gh, monkeypatch)
    monkeypatch.setenv("GITHUB_TOKEN", gh.readonly_token)
    code, output = run_main(start_args("run-7"))
    assert code != 0 and "Administration: write" in output
    assert gh.readonly_token not in output
    assert live_sim(paths) == []


def test_public_repository_refused_unless_opted_in(
    gh: FakeGitHub, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(paths, gh, monkeypatch)
    gh.repos["acme/public"] = False
    args = start_args("run-8")
    args[args.index("--repo") + 1] = "acme/public"
    code, output = run_main(args)
    assert code != 0 and "public" in output
    assert gh.runners == {} and live_sim(paths) == []
