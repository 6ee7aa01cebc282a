"""`runner serve` end to end: 50 queued jobs through signed webhooks, runners on sim
instances, at most 10 starting at once; every job is served and nothing is left."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from cloudgpu.cli.context import App
from cloudgpu.cli.runner import _Dispatch
from cloudgpu.paths import Paths
from cloudgpu.runners.pools import Pool, ServeConfig
from cloudgpu.runners.serve import RunnerService, WebhookServer
from tests.runners.fake_github import FakeGitHub, serve_fake_github
from tests.runners.harness import configure, kill_all_sim, live_sim, wait_for
from tests.runners.test_serve import payload, post

pytestmark = pytest.mark.slow
REPO = "acme/models"
SECRET = b"s3cret-for-tests"
JOBS = 50
CAP = 10


@pytest.fixture
def gh(paths: Paths) -> Iterator[FakeGitHub]:
    with serve_fake_github() as fake:
        yield fake
    kill_all_sim(paths)


def _completed(job_id: int, runner_name: str) -> bytes:
    import json

    body = json.loads(payload(job_id, action="completed", labels=("self-hosted", "gpu-a10g")))
    body["workflow_job"]["runner_name"] = runner_name
    return json.dumps(body).encode()


def test_fifty_jobs_with_a_cap_of_ten(
    gh: FakeGitHub, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(paths, gh, monkeypatch, extra='\n[providers.sim.capacity]\n"g5.xlarge" = 100\n')
    pool = Pool(
        "a10g",
        frozenset({"gpu-a10g"}),
        "A10G:1",
        providers=("sim",),
        max_concurrent=CAP,
        ttl_s=600,
        idle_timeout_s=5,
    )
    config = ServeConfig(pools=(pool,), max_concurrency=CAP)
    service = RunnerService(config, SECRET, _Dispatch(App(env=dict(os.environ)), threading.Lock()))
    server = WebhookServer(("127.0.0.1", 0), service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        jobs = [gh.queue_job(REPO, ["self-hosted", "gpu-a10g"], "true") for _ in range(JOBS)]
        for job in jobs:
            status, _ = post(server.url, payload(job, labels=("self-hosted", "gpu-a10g")))
            assert status == 202
        wait_for(
            lambda: all(gh.jobs[j].status == "completed" for j in jobs),
            600,
            "all 50 jobs to be served",
        )
        for job in jobs:
            post(server.url, _completed(job, gh.jobs[job].runner_name or ""))
        assert service.drain(300)
    finally:
        server.shutdown()
        server.server_close()
        service.close()
    assert all(gh.jobs[j].conclusion == "success" for j in jobs)
    assert service.counters.peak_active <= CAP
    assert service.counters.start_failed == 0
    # Runners started for jobs another runner took sit idle, then power off at the idle
    # timeout; GitHub then shows them offline and gc removes the registration.
    wait_for(lambda: not live_sim(paths), 120, "every instance to be gone")
    for runner in gh.runners.values():
        runner.status = "offline"
    from click.testing import CliRunner

    from cloudgpu.cli import cli

    res = CliRunner().invoke(cli, ["runner", "gc", "--repo", REPO], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert gh.runners == {} and live_sim(paths) == []


def test_completed_jobs_never_reap_runners_this_service_did_not_make(
    gh: FakeGitHub, paths: Paths, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's own persistent runner, and a cloudgpu-named runner of another store,
    finish jobs too: their `completed` webhooks must leave them registered."""
    from tests.runners.fake_github import FakeRunner

    configure(paths, gh, monkeypatch)
    gh.runners[901] = FakeRunner(901, "build-box", ["gpu"], "x", status="online")
    gh.runners[902] = FakeRunner(902, "ghr-0123456789abcdef", ["gpu"], "x", status="online")
    config = ServeConfig(pools=(Pool("a10g", frozenset({"gpu-a10g"}), "A10G:1"),))
    service = RunnerService(config, SECRET, _Dispatch(App(env=dict(os.environ)), threading.Lock()))
    server = WebhookServer(("127.0.0.1", 0), service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for job, name in ((1, "build-box"), (2, "ghr-0123456789abcdef")):
            status, _ = post(server.url, _completed(job, name))
            assert status == 202
        assert service.drain(60)
    finally:
        server.shutdown()
        server.server_close()
        service.close()
    assert sorted(gh.runners) == [901, 902]
    assert not [r for r in gh.requests if r[0] == "DELETE"]
