"""`cloudgpu gpus`: specs with the cheapest $/GPU-hour per market."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloudgpu.catalog.catalog import write_cache
from cloudgpu.catalog.offer import FLAG_FRACTIONAL_GPU, FLAG_SPOT_ABOVE_ON_DEMAND
from cloudgpu.cli import cli
from cloudgpu.cli.gpus import cheapest_per_gpu
from cloudgpu.paths import Paths
from tests.catalog.helpers import offer


def run(*args: str) -> str:
    res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.stdout


def test_spec_table_lists_gpus_with_prices() -> None:
    lines = run("gpus").splitlines()
    assert lines[0].split()[:3] == ["GPU", "VENDOR", "ARCH"]
    h100 = next(line for line in lines if line.startswith("H100-SXM "))
    assert "989" in h100 and "NVLink4" in h100
    assert not any(line.startswith("Inferentia2 ") for line in lines)  # GPUs only by default
    assert any(
        line.startswith("Inferentia2 ") for line in run("gpus", "--all-accelerators").splitlines()
    )


def test_json_names_filter_and_cheapest_prices(paths: Paths) -> None:
    write_cache(
        paths, "aws", [offer(price_per_hour=16.0), offer(market="spot", price_per_hour=8.0)], "t"
    )
    rows = json.loads(run("gpus", "H100", "--provider", "aws", "--json"))
    assert {r["name"] for r in rows} == {"H100-SXM", "H100-PCIe", "H100-NVL"}
    sxm = next(r for r in rows if r["name"] == "H100-SXM")
    assert sxm["cheapest_on_demand_gpu_hour"] == 2.0 and sxm["cheapest_spot_gpu_hour"] == 1.0
    assert sxm["cheapest_on_demand_provider"] == "aws"
    assert sxm["source"] and sxm["date"] == "2026-12-01"
    pcie = next(r for r in rows if r["name"] == "H100-PCIe")
    assert pcie["cheapest_on_demand_gpu_hour"] is None


def test_stale_cheapest_price_is_marked(paths: Paths) -> None:
    old = datetime.now(UTC) - timedelta(days=60)
    write_cache(paths, "aws", [offer(price_per_hour=8.0, observed_at="")], "t", now=old)
    (row,) = json.loads(run("gpus", "H100-SXM", "--provider", "aws", "--json"))
    assert row["cheapest_on_demand_gpu_hour"] == 1.0 and row["cheapest_on_demand_stale"] is True
    assert "1.000 aws (stale)" in run("gpus", "H100-SXM", "--provider", "aws")


def test_priced_filter_and_markdown() -> None:
    names = {r["name"] for r in json.loads(run("gpus", "--priced", "--json"))}
    assert "H100-SXM" in names and "RTX5060" not in names
    md = run("gpus", "L4", "--markdown").splitlines()
    assert md[0].startswith("| GPU |") and md[2].startswith("| L4 |")


def test_odd_prices_do_not_count_as_cheapest() -> None:
    offers = [
        offer(gpu="MI25", gpu_count=1, price_per_hour=0.2, flags=(FLAG_FRACTIONAL_GPU,)),
        offer(gpu="MI25", gpu_count=1, price_per_hour=1.8),
        offer(
            gpu="L40S",
            gpu_count=1,
            market="spot",
            price_per_hour=0.1,
            flags=(FLAG_SPOT_ABOVE_ON_DEMAND,),
        ),
    ]
    best = cheapest_per_gpu(offers)
    assert best["MI25"]["on_demand"] == (1.8, "aws", False)
    assert "L40S" not in best


def test_unknown_name_is_an_error() -> None:
    res = CliRunner().invoke(cli, ["gpus", "H10"])
    assert res.exit_code != 0 and "unknown GPU 'H10'" in str(res.exception)


@pytest.mark.slow
def test_gpus_subprocess(tmp_path: Path) -> None:
    env = {**os.environ, "CLOUDGPU_HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "cloudgpu", "gpus", "A100", "--json"],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 4
