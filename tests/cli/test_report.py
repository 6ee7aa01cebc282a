"""`cloudgpu report offers|spend|buy-vs-rent|plan` through click's runner (and one real
subprocess), against hand-made offers in the catalog cache and a real Store file."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloudgpu.catalog import write_cache
from cloudgpu.cli import cli
from cloudgpu.errors import ConfigError
from cloudgpu.paths import Paths
from cloudgpu.state.store import Store
from tests.costs.helpers import spend
from tests.reports.samples import OFFERS

PROVIDERS = ("aws", "azure", "gcp", "runpod")
ONLY = [arg for p in PROVIDERS for arg in ("--provider", p)]


@pytest.fixture
def catalog(paths: Paths) -> Paths:
    for p in PROVIDERS:
        write_cache(paths, p, [o for o in OFFERS if o.provider == p], "test:hand-made")
    return paths


@pytest.fixture
def history(paths: Paths) -> Paths:
    store = Store.open(paths.state_db)
    now = time.time()
    for i, (job, provider, price, hours) in enumerate(
        [
            ("train", "aws", 55.04, 10.0),
            ("train", "runpod", 21.52, 3.3),
            ("eval", "runpod", 2.69, 0.7),
            ("sweep", "gcp", 87.84, 1 / 3),
        ]
    ):
        store.record_spend(
            spend(
                f"i-{i}",
                job,
                provider=provider,
                price_per_hour=price,
                hours=hours,
                started_at=now - (10 - i) * 86400,
            )
        )
    store.record_spend(spend("i-old", "ancient", started_at=now - 200 * 86400, hours=1))
    store.close()
    return paths


def invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_offers_report_all_formats(catalog: Paths, tmp_path: Path) -> None:
    for fmt in ("html", "md", "json"):
        out = tmp_path / f"offers.{fmt}"
        invoke("report", "offers", *ONLY, "--out", str(out))  # format from the suffix
        assert out.stat().st_size > 500
    doc = json.loads((tmp_path / "offers.json").read_text())
    prices = {(r["gpu"], r["provider"]): r for r in doc["tables"]["prices"]["rows"]}
    assert prices[("H100-SXM", "aws")]["on_demand"] == 6.88
    assert prices[("H100-SXM", "aws")]["spot"] == 3.1
    html = (tmp_path / "offers.html").read_text()
    assert "$6.88" in html and "test:hand-made" in html and "<svg" in html
    assert "| H100-SXM | aws | $6.88 |" in (tmp_path / "offers.md").read_text()


def test_csv_is_one_table_per_file_that_pandas_loads(catalog: Paths, tmp_path: Path) -> None:
    import pandas as pd

    out = tmp_path / "offers.csv"
    text = invoke("report", "offers", *ONLY, "--out", str(out))
    files = sorted(p.name for p in tmp_path.glob("offers-*.csv"))
    assert files == ["offers-offers.csv", "offers-prices.csv", "offers-value.csv"], text
    prices = pd.read_csv(tmp_path / "offers-prices.csv")
    aws = prices[(prices.gpu == "H100-SXM") & (prices.provider == "aws")].iloc[0]
    assert aws.on_demand == 6.88 and aws.spot == 3.1
    offers = pd.read_csv(tmp_path / "offers-offers.csv")
    assert {"zone", "price_per_gpu_hour", "price_flags"} <= set(offers.columns)
    one = invoke("report", "offers", *ONLY, "--format", "csv", "--table", "value")
    assert pd.read_csv(io.StringIO(one)).columns[0] == "gpu"
    res = CliRunner().invoke(cli, ["report", "offers", *ONLY, "--format", "csv"])
    assert isinstance(res.exception, ConfigError)
    assert "--table NAME (prices, value, offers)" in str(res.exception)
    res = CliRunner().invoke(cli, ["report", "offers", *ONLY, "--table", "nope"])
    assert isinstance(res.exception, ConfigError) and "tables are prices" in str(res.exception)


def test_offers_report_filters(catalog: Paths) -> None:
    doc = json.loads(invoke("report", "offers", *ONLY, "--gpu", "T4", "--format", "json"))
    assert {r["gpu"] for r in doc["tables"]["offers"]["rows"]} == {"T4"}


def test_spend_reconciles(history: Paths) -> None:
    doc = json.loads(invoke("report", "spend", "--since", "90d", "--format", "json"))
    total = doc["tables"]["total"]["rows"][0]["cost"]
    expected = 55.04 * 10 + 21.52 * 3.3 + 2.69 * 0.7 + 87.84 / 3
    assert total == pytest.approx(expected, abs=0.005)
    for table in ("by_job", "by_provider", "by_gpu"):
        cents = sum(round(r["cost"] * 100) for r in doc["tables"][table]["rows"])
        assert cents == round(total * 100), table
    assert "ancient" not in {r["key"] for r in doc["tables"]["by_job"]["rows"]}
    everything = json.loads(invoke("report", "spend", "--format", "json"))
    assert "ancient" in {r["key"] for r in everything["tables"]["by_job"]["rows"]}


def test_spend_price_survives_catalog_refresh(history: Paths, catalog: Paths) -> None:
    # The catalog now says aws H100 costs something else; spend keeps the launch price.
    doc = json.loads(invoke("report", "spend", "--since", "90d", "--format", "json"))
    rows = doc["tables"]["instances"]["rows"]
    assert next(r for r in rows if r["instance_id"] == "i-0")["price_per_hour"] == 55.04


def test_buy_vs_rent_report(catalog: Paths, tmp_path: Path) -> None:
    out = tmp_path / "bvr.html"
    invoke(
        "report",
        "buy-vs-rent",
        "--gpu",
        "H100-SXM",
        "--utilization",
        "60%",
        *ONLY,
        "--out",
        str(out),
    )
    html = out.read_text()
    assert "Renting on runpod (on-demand, $3.99/GPU-h) is cheaper below 53%" in html
    assert "aws on-demand: 18 mo" in html  # break-even marked on the cumulative chart
    doc = json.loads(
        invoke("report", "buy-vs-rent", "--gpu", "H100-SXM", *ONLY, "--format", "json")
    )
    assert {"options", "cumulative", "owned", "sens_years", "sens_power", "inputs"} <= set(
        doc["tables"]
    )


def test_plan_report(catalog: Paths, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: ft\nresources:\n  gpu: H100-SXM:8\n  providers: [aws, runpod]\n"
        "workload:\n  kind: finetune\n  params: 8B\n  tokens: 1B\n  precision: bf16\n"
        "run: echo hi\n"
    )
    doc = json.loads(invoke("report", "plan", str(job), "--all-providers", "--format", "json"))
    rows = doc["tables"]["candidates"]["rows"]
    assert rows and {r["provider"] for r in rows} <= {"aws", "runpod"}
    assert all(r["gpus"] == 8 for r in rows)
    costs = [r["est_cost"] for r in rows]
    assert costs == sorted(costs)  # cheapest objective
    assert doc["summary"][0].startswith("Best: ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["report", "spend"], "no spend recorded"),
        (["report", "spend", "--since", "lately"], "--since: expected a window"),
        (["report", "offers", "--gpu", "Z9000"], "unknown GPU"),
        (["report", "buy-vs-rent", "--gpu", "H100-SXM", "--years", "-1"], "--years"),
        (["report", "offers", "--out", "/nonexistent-dir/x.html"], "does not exist"),
    ],
)
def test_bad_input_one_line(catalog: Paths, args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0
    assert message in str(result.exception) + result.output


@pytest.mark.slow
def test_subprocess_writes_html(history: Paths, tmp_path: Path) -> None:
    out = tmp_path / "spend.html"
    proc = subprocess.run(
        [sys.executable, "-m", "cloudgpu", "report", "spend", "--out", str(out)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stderr and out.read_text().startswith("<!DOCTYPE html>")
    empty = subprocess.run(
        [sys.executable, "-m", "cloudgpu", "report", "spend", "--since", "1h"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert empty.returncode != 0 and "Traceback" not in empty.stderr
    assert empty.stderr.startswith("error: no spend recorded since")
