"""`cloudgpu buy-vs-rent` through click's runner and once as a real subprocess, with
hand-made offers written to the catalog cache of an isolated CLOUDGPU_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from cloudgpu.catalog import write_cache
from cloudgpu.cli import cli
from cloudgpu.paths import Paths
from cloudgpu.state.store import Store
from tests.costs.helpers import REFERENCE_OFFERS, spend

PROVIDERS = ("aws", "azure", "gcp", "runpod")
ONLY = [arg for p in PROVIDERS for arg in ("--provider", p)]


@pytest.fixture
def catalog(paths: Paths) -> Paths:
    for p in PROVIDERS:
        write_cache(paths, p, [o for o in REFERENCE_OFFERS if o.provider == p], "test:hand-made")
    return paths


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def main_run(*args: str) -> tuple[int, str, str]:
    """Through cloudgpu.cli.main, which turns errors into one line (as the script does)."""
    proc = subprocess.run(
        [sys.executable, "-m", "cloudgpu", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_verdict_first_then_tables(catalog: Paths) -> None:
    code, out = run(
        "buy-vs-rent",
        "--gpu",
        "H100-SXM",
        "--count",
        "8",
        "--utilization",
        "60%",
        "--years",
        "4",
        *ONLY,
    )
    assert code == 0, out
    first = out.splitlines()[0]
    assert first.startswith("Renting on runpod (on-demand, $3.99/GPU-h) is cheaper below 53%")
    assert "Rent options" in out and "Owned $/GPU-hour by utilization" in out
    aws = next(line for line in out.splitlines() if line.split()[:2] == ["aws", "on_demand"])
    assert "30.3%" in aws


def test_json_fields(catalog: Paths) -> None:
    code, out = run("buy-vs-rent", "--gpu", "h100 sxm", "--utilization", "1", "--json", *ONLY)
    assert code == 0, out
    doc = json.loads(out)
    assert doc["owned_per_gpu_hour"] == pytest.approx(2.14, abs=0.005)
    aws = next(
        o for o in doc["rent_options"] if o["provider"] == "aws" and o["market"] == "on_demand"
    )
    assert set(aws) >= {
        "provider",
        "market",
        "price_per_gpu_hour",
        "breakeven_utilization",
        "payback_months",
    }
    assert aws["price_per_gpu_hour"] == 6.88
    assert aws["breakeven_utilization"] == pytest.approx(0.303, abs=0.002)


def test_config_and_flags_override(catalog: Paths) -> None:
    catalog.config_file.write_text("[buy_vs_rent]\npue = 1.6\nelectricity = 0.2\n")
    code, out = run("buy-vs-rent", "--gpu", "H100-SXM", "--pue", "1.1", "--json", *ONLY)
    assert code == 0, out
    inputs = {r["key"]: r for r in json.loads(out)["inputs"]}
    assert inputs["pue"]["value"] == 1.1 and inputs["pue"]["source"] == "given"
    assert inputs["electricity"]["value"] == 0.2
    assert inputs["colocation"]["source"].startswith("North America colocation")


def test_committed_discount_and_overheads(catalog: Paths) -> None:
    code, out = run(
        "buy-vs-rent",
        "--gpu",
        "H100-SXM",
        "--commit-discount",
        "30%",
        "--idle-fraction",
        "10%",
        "--storage-month",
        "1000",
        "--json",
        *ONLY,
    )
    assert code == 0, out
    opts = json.loads(out)["rent_options"]
    aws = next(o for o in opts if o["provider"] == "aws" and o["market"] == "committed")
    assert aws["price_per_gpu_hour"] == pytest.approx(6.88 * 0.7, abs=1e-4)
    assert aws["effective_per_gpu_hour"] == pytest.approx(6.88 * 0.7 / 0.9, abs=1e-4)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--utilization", "150%"], "--utilization: expected 0-100%"),
        (["--years", "0"], "--years: must be greater than 0"),
        (["--electricity", "-1"], "--electricity: must not be negative"),
        (["--count", "3"], "no rent offers for 3x H100-SXM"),
        (["--gpu", "H100-PCIe"], "no purchase price known"),
        (["--gpu", "Z9000"], "unknown GPU"),
        (["--gpu", "A100"], "means several GPU models"),
        (["--from-history", "90d"], "no GPU spend recorded"),
        (["--from-history", "soon"], "--from-history: expected a window"),
    ],
)
def test_bad_input_is_one_line(catalog: Paths, args: list[str], message: str) -> None:
    argv = ["buy-vs-rent", "--gpu", "H100-SXM", *ONLY]
    if "--gpu" in args:
        argv = ["buy-vs-rent", *ONLY]
    code, out, err = main_run(*argv, *args)
    assert code != 0
    assert message in err
    assert "Traceback" not in err and out == ""
    assert len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 1


def test_from_history(catalog: Paths) -> None:
    store = Store.open(catalog.state_db)
    now = time.time()
    store.record_spend(spend("i-1", "job-a", started_at=now - 5 * 86400, hours=100))
    store.record_spend(
        spend(
            "i-2",
            "job-b",
            gpu="A100-80GB",
            gpu_count=8,
            provider="runpod",
            price_per_hour=11.12,
            started_at=now - 3 * 86400,
            hours=20,
        )
    )
    store.close()
    code, out = run("buy-vs-rent", "--gpu", "H100-SXM", "--from-history", "30d", "--json", *ONLY)
    assert code == 0, out
    hist = json.loads(out)["history"]
    rows = {r["gpu"]: r for r in hist["rows"]}
    assert rows["H100-SXM"]["gpu_hours"] == pytest.approx(800)
    assert rows["H100-SXM"]["rented_cost"] == pytest.approx(5504)
    assert rows["H100-SXM"]["utilization"] == pytest.approx(800 / (8 * 24 * 30), abs=1e-3)
    assert rows["A100-80GB"]["owned_cost"] is not None or rows["A100-80GB"]["note"]
    code, text = run("buy-vs-rent", "--gpu", "H100-SXM", "--from-history", "30d", *ONLY)
    assert "Your last 30 days: rented vs owned" in text


@pytest.mark.slow
def test_subprocess_prints_verdict(catalog: Paths) -> None:
    code, out, err = main_run("buy-vs-rent", "--gpu", "H100-SXM", "--utilization", "90%", *ONLY)
    assert code == 0, err
    assert "so buy." in out.splitlines()[0]
