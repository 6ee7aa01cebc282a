"""`plan --json`, `launch --dry-run --json` and `runner start --dry-run --json` go through
the one gather + plan path, so for the same job they pick the same offer, in the same
order. Providers in play: local, sim (CLOUDGPU_SIM=1) and AWS's catalog (enabled by
credentials in the environment; nothing talks to AWS)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cloudgpu.cli import cli

KEYS = ("provider", "instance_type", "region", "zone", "market")

# (job file resources, the same as `runner start` flags or None when flags cannot say it)
JOBS: list[tuple[str, list[str] | None]] = [
    ("{gpu: 'A10G:1', spot: false, providers: [sim]}", ["--gpu", "A10G:1", "--providers", "sim"]),
    ("{gpu: any, spot: false, providers: [aws]}", ["--gpu", "any", "--providers", "aws"]),
    ("{gpu: 'L4', spot: true, max_price: 2}", ["--gpu", "L4", "--spot", "--max-price", "2"]),
    ("{gpu: '24GB+:4', spot: false}", ["--gpu", "24GB+:4"]),
    (
        "{gpu: 'H100:8+', spot: true, providers: [aws]}",
        ["--gpu", "H100:8+", "--spot", "--providers", "aws"],
    ),
    ("{gpu: none}", None),
    ("{gpu: A100, regions: ['us-west-*'], memory: 1TB+}", None),
    ("{gpu: 'L4:1', regions: ['use1-az*']}", None),  # zone globs, as `offers --region`
]


@pytest.fixture
def clouds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLOUDGPU_SIM", "1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-a-real-secret")


def _json(args: list[str]) -> list[dict[str, Any]]:
    res = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    rows: list[dict[str, Any]] = doc["candidates"] if isinstance(doc, dict) else doc
    return rows


def _keys(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(r[k] for k in KEYS) for r in rows]


@pytest.mark.parametrize(("resources", "flags"), JOBS)
def test_plan_launch_and_runner_pick_the_same_offer(
    tmp_path: Path, clouds: None, resources: str, flags: list[str] | None
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(f"name: same\nresources: {resources}\nrun: echo hi\n")
    planned = [r for r in _json(["plan", str(job), "--json", "--limit", "100000"]) if r["fits"]]
    launched = _json(["launch", str(job), "--dry-run", "--json"])
    assert planned, "nothing fits: the case proves nothing"
    assert _keys(launched) == _keys(planned)  # every candidate, in the same order
    if flags is not None:
        runner = _json(["runner", "start", "--repo", "acme/models", "--dry-run", "--json", *flags])
        assert _keys(runner) == _keys(launched)


def test_any_gpu_is_never_an_inferentia(tmp_path: Path, clouds: None) -> None:
    rows = _json(["runner", "start", "--repo", "a/b", "--dry-run", "--json", "--providers", "aws"])
    assert rows[0]["gpu"] in ("T4", "V520")  # the cheapest real GPUs on AWS
    assert not any(r["instance_type"].startswith(("inf", "trn", "dl1", "f1")) for r in rows)


def test_cpu_only_job_never_lands_on_a_gpu_machine(tmp_path: Path, clouds: None) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: cpu\nresources: {gpu: none}\nrun: echo hi\n")
    rows = _json(["launch", str(job), "--dry-run", "--json"])
    assert rows and all(r["gpu_count"] == 0 for r in rows)


def test_configured_regions_are_honoured_by_every_command(
    tmp_path: Path, clouds: None, cloudgpu_home: Path
) -> None:
    """README's `[providers.aws] regions = [...]`: the AWS offers elsewhere are neither
    planned nor tried, so launch fails over within the configured regions."""
    config = cloudgpu_home / "config" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[providers.aws]\nregions = ["us-east-1", "us-west-2"]\n')
    job = tmp_path / "job.yaml"
    job.write_text("name: r\nresources: {gpu: 'L4:1', providers: [aws]}\nrun: echo hi\n")
    planned = _json(["plan", str(job), "--json", "--all", "--limit", "5000"])
    fits = [r for r in planned if r["fits"]]
    assert fits and {r["region"] for r in fits} <= {"us-east-1", "us-west-2"}
    assert any("providers.aws.regions" in r["reason"] for r in planned if not r["fits"])
    launched = _json(["launch", str(job), "--dry-run", "--json"])
    assert _keys(launched) == _keys(fits)
    offers = _json(["offers", "--gpu", "L4", "--provider", "aws", "--json", "--limit", "0"])
    assert offers and {r["region"] for r in offers} <= {"us-east-1", "us-west-2"}
