"""`launch --retry-until-up` and `resources.retry`: when no offer has capacity the ranked
list is walked again, with growing waits, until one frees up or the deadline passes.
End to end on sim, whose capacity is real: a live instance of the type holds the slot."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cloudgpu_providers.sim import SimProvider

from cloudgpu.lifecycle.provision import Retry
from cloudgpu.paths import default_paths
from cloudgpu.provider import ProviderContext
from tests.lifecycle.helpers import cli_proc, job_file, main_exit, store, wait_for

SIM_OFFER = {
    "instance_type": "sim.one",
    "gpu": "L4",
    "gpu_count": 1,
    "gpu_memory_gb": 24,
    "vcpus": 4,
    "memory_gb": 16,
    "price_per_hour": 0.5,
    "market": "on_demand",
}


class _Share(random.Random):
    """Randomness that always draws the same share of the range asked for."""

    def __init__(self, share: float) -> None:
        super().__init__(0)
        self.share = share

    def uniform(self, a: float, b: float) -> float:
        return a + self.share * (b - a)


def test_waits_double_with_jitter_and_stop_at_the_deadline() -> None:
    r = Retry(until=1000.0, first_s=10.0, max_s=60.0, rng=_Share(0.0))
    assert [r.wait(n, 0.0) for n in (1, 2, 3, 4, 5)] == [10.0, 20.0, 40.0, 60.0, 60.0]
    assert r.wait(3, 990.0) == 10.0  # never past the deadline
    assert r.wait(1, 1000.0) is None
    low = Retry(until=math.inf, first_s=10.0, rng=_Share(1.0))
    assert low.wait(1, 0.0) == pytest.approx(6.0)  # up to 40% less, so clients spread out
    assert low.until_text() == "until interrupted"
    assert Retry(until=math.inf, first_s=10.0, rng=_Share(0.0)).wait(10_000, 0.0) == 300.0


def configure(home: Path, capacity: int) -> None:
    offer = "\n".join(f"{k} = {json.dumps(v)}" for k, v in SIM_OFFER.items())
    cfg = home / "config" / "config.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(
        "[launch]\nssh_timeout = 60\ndeadline_grace = 1\nretry_backoff = 0.3\n\n"
        "[providers.local]\nenabled = false\n\n"
        f'[providers.sim]\nenabled = true\n\n[providers.sim.capacity]\n"sim.one" = {capacity}'
        f"\n\n[[providers.sim.offers]]\n{offer}\n"
    )


def _sim(home: Path) -> SimProvider:
    paths = default_paths({"CLOUDGPU_HOME": str(home)})
    return SimProvider(ProviderContext(config={"enabled": True}, paths=paths, env={}))


@pytest.fixture
def sweep(cloudgpu_home: Path) -> Iterator[None]:
    yield
    p = _sim(cloudgpu_home)
    for d in sorted((cloudgpu_home / "data" / "sim").glob("sim-*")):
        p.terminate(d.name)


def _log(home: Path, job_id: str) -> str:
    return Path(store(home).job(job_id).log_path).read_text()


@pytest.mark.slow
@pytest.mark.usefixtures("sweep")
def test_retry_until_up_launches_when_capacity_frees(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(cloudgpu_home, capacity=1)
    holder = job_file(tmp_path, "name: holder\nresources: {gpu: L4}\nrun: 'true'\n", "h.yaml")
    code, _, err = main_exit(["launch", str(holder), "--yes", "--keep"])
    assert code == 0, err  # its kept instance takes the only slot
    job = job_file(tmp_path, "name: waiter\nresources: {gpu: L4}\nrun: echo got-a-machine\n")
    res = cli_proc(
        ["launch", str(job), "--yes", "--detach", "--retry-until-up", "--json"], cloudgpu_home
    )
    assert res.returncode == 0, res.stderr
    waiter: dict[str, Any] = json.loads(res.stdout)
    wid = waiter["job_id"]
    wait_for(lambda: "round 3:" in _log(cloudgpu_home, wid), timeout=60, what="three rounds")
    text = _log(cloudgpu_home, wid)
    assert "round 1: no capacity on 1 offer(s); next round in" in text
    assert "(until interrupted)" in text
    assert store(cloudgpu_home).job(wid).state == "provisioning"
    code, _, err = main_exit(["down", "holder", "--yes"])  # the slot frees up
    assert code == 0, err
    wait_for(lambda: store(cloudgpu_home).job(wid).state == "succeeded", timeout=90, what="launch")
    assert "got-a-machine" in _log(cloudgpu_home, wid)
    kinds = [e["kind"] for e in store(cloudgpu_home).events(wid)]
    assert kinds.count("retry_round") >= 2


@pytest.mark.slow
@pytest.mark.usefixtures("sweep")
def test_resources_retry_gives_up_at_its_deadline(tmp_path: Path, cloudgpu_home: Path) -> None:
    configure(cloudgpu_home, capacity=0)
    job = job_file(tmp_path, "name: bounded\nresources: {gpu: L4, retry: 2s}\nrun: echo never\n")
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 4
    assert "round 2: trying the ranked offers again" in err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "no capacity on any of 1 fitting offer" in errors[0]
    assert "hint: gave up after" in err
    (rec,) = store(cloudgpu_home).jobs()
    assert rec.state == "failed"
    assert _sim(cloudgpu_home).list_instances({}) == []
