"""`cloudgpu offers` through click's runner and as real subprocesses: formats agree,
JSON keys are stable, bad input is one line, and no cloud SDK is imported."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from cloudgpu.catalog.catalog import cache_path, write_cache
from cloudgpu.cli import cli, main
from cloudgpu.paths import Paths
from tests.catalog.helpers import offer

JSON_KEYS = {
    "provider", "instance_type", "region", "zone", "market", "gpu", "gpu_count",
    "gpu_memory_gb", "vcpus", "memory_gb", "nvme_gb", "price_per_hour", "price_per_gpu_hour",
    "observed_at", "stale",
}  # fmt: skip
SDK_ROOTS = ("boto3", "botocore", "google", "azure", "runpod", "paramiko", "cloudgpu_providers")


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Through the console entry point, which turns errors into one line + exit status."""
    with pytest.raises(SystemExit) as done:
        main(list(args))
    captured = capsys.readouterr()
    return int(done.value.code or 0), captured.out, captured.err


def test_json_is_a_list_with_the_documented_keys() -> None:
    code, out, _ = run("offers", "--gpu", "H100", "--limit", "5", "--json")
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 5
    for row in rows:
        assert set(row) >= JSON_KEYS
        assert row["gpu"] in {"H100-SXM", "H100-PCIe", "H100-NVL"}
        assert row["market"] in ("on_demand", "spot")
        assert row["price_per_gpu_hour"] == pytest.approx(
            row["price_per_hour"] / row["gpu_count"], rel=1e-3
        )
        datetime.fromisoformat(row["observed_at"].replace("Z", "+00:00"))
    prices = [r["price_per_hour"] for r in rows]
    assert prices == sorted(prices)


def test_every_format_shows_the_same_rows() -> None:
    args = ["offers", "--gpu", "A100-80GB:8", "--sort", "gpu-hour", "--limit", "7"]
    rows = json.loads(run(*args, "--json")[1])
    keys = [(r["provider"], r["instance_type"], r["region"], r["zone"], r["market"]) for r in rows]
    csv_rows = list(csv.DictReader(io.StringIO(run(*args, "--csv")[1])))
    assert [
        (r["provider"], r["instance_type"], r["region"], r["zone"], r["market"]) for r in csv_rows
    ] == keys
    table = run(*args)[1].splitlines()
    markdown = run(*args, "--markdown")[1].splitlines()
    assert len(table) == len(rows) + 1 and len(markdown) == len(rows) + 2
    for (provider, itype, *_), line, md in zip(keys, table[1:], markdown[2:], strict=True):
        assert line.split()[:2] == [provider, itype]
        assert md.startswith(f"| {provider} | {itype} |")


def test_filters_reach_the_engine() -> None:
    args = ["--gpu", "L4", "--provider", "gcp", "--region", "us-*", "--spot", "--cpus", "8+"]
    rows = json.loads(run("offers", *args, "--memory", "32GB+", "--limit", "0", "--json")[1])
    assert rows and all(
        r["provider"] == "gcp" and r["region"].startswith("us-") and r["market"] == "spot"
        and r["vcpus"] >= 8 and r["memory_gb"] >= 32 and r["gpu"] == "L4"
        for r in rows
    )  # fmt: skip
    nvme = json.loads(run("offers", "--nvme", "3000", "--on-demand", "--json")[1])
    assert nvme and all(r["nvme_gb"] >= 3000 and r["market"] == "on_demand" for r in nvme)
    cheap = json.loads(run("offers", "--gpus", "8", "--max-price", "20", "--json")[1])
    assert cheap and all(r["gpu_count"] == 8 and r["price_per_hour"] <= 20 for r in cheap)


def test_cheapest_per_provider() -> None:
    rows = json.loads(run("offers", "--gpu", "H100", "--cheapest-per", "provider", "--json")[1])
    providers = [r["provider"] for r in rows]
    assert len(providers) == len(set(providers)) >= 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "H10"], "unknown GPU 'H10'"),
        (["--spot", "--on-demand"], "--spot and --on-demand contradict"),
        (["--gpu", "A100:8", "--gpus", "4"], "--gpu asks for 8 GPUs but --gpus asks for 4"),
        (
            ["--gpu", "L4", "--max-price", "0.05"],
            "no offers left: --max-price 0.05 removed the last",
        ),
        (["--gpu", "P4"], "no offers left: --gpu P4 matches none"),
        (["--provider", "awz"], "--provider awz: no such provider"),
        (["--cpus", "many"], "--cpus: 'many' is not a number"),
        (["--json", "--csv"], "choose one output format"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = run_main(capsys, "offers", *args)
    assert code != 0 and out == ""
    first = err.splitlines()[0]
    assert message in first and "Traceback" not in err


def test_unknown_gpu_suggests_closest(capsys: pytest.CaptureFixture[str]) -> None:
    _, _, err = run_main(capsys, "offers", "--gpu", "A1OO-80GB")
    assert "hint: did you mean" in err and "A100-80GB" in err


def test_stale_prices_are_marked_in_every_format(paths: Paths) -> None:
    old = datetime.now(UTC) - timedelta(days=90)
    write_cache(paths, "runpod", [offer(provider="runpod", observed_at="")], "test", now=old)
    args = ["offers", "--provider", "runpod"]
    (row,) = json.loads(run(*args, "--json")[1])
    assert row["stale"] is True and "stale" in row["flags"]
    assert next(iter(csv.DictReader(io.StringIO(run(*args, "--csv")[1]))))["stale"] == "true"
    _code, out, err = run(*args)
    assert "stale" in out.splitlines()[1] and "STALE" in err
    assert "| stale |" in run(*args, "--markdown")[1]
    assert json.loads(run(*args, "--stale-days", "365", "--json")[1])[0]["stale"] is False


def test_corrupt_cache_warns_and_still_answers(paths: Paths) -> None:
    path = cache_path(paths, "aws")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"format": 1, "rows": [')
    code, out, err = run("offers", "--provider", "aws", "--gpu", "H100", "--json")
    assert code == 0 and json.loads(out)
    assert err.startswith("warning: ") and "using the bundled snapshot for aws" in err


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "CLOUDGPU_HOME": str(home)}


@pytest.mark.slow
def test_real_subprocess(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "cloudgpu", "offers", "--gpu", "h100", "--limit", "3", "--json"],
        capture_output=True, text=True, check=False, env=_env(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 3
    bad = subprocess.run(
        [sys.executable, "-m", "cloudgpu", "offers", "--gpu", "H10"],
        capture_output=True, text=True, check=False, env=_env(tmp_path),
    )  # fmt: skip
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("error: unknown GPU 'H10'")


PROBE = """
import json, sys
from cloudgpu.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
roots = {roots!r}
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in roots)), file=sys.stderr)
"""


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["offers", "--gpu", "H100", "--limit", "20"], ["gpus"], ["catalog", "info"]],
)
def test_no_cloud_sdk_is_imported(tmp_path: Path, argv: list[str]) -> None:
    """Structural check of the startup budget: these commands read files only."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(roots=SDK_ROOTS), *argv],
        capture_output=True, text=True, check=False, env=_env(tmp_path),
    )  # fmt: skip
    imported = json.loads(proc.stderr.strip().splitlines()[-1])
    assert imported == [], f"{argv} imported {imported}"


def test_footer_says_where_prices_come_from(paths: Paths) -> None:
    _, _, err = run("offers", "--provider", "vast,aws", "--gpu", "H100", "--limit", "40")
    assert "aws: snapshot 2026-12-01" in err
    assert "compare only" not in err  # vast has a provider plugin now
    # Prices of a provider no installed plugin can launch on (e.g. a cache left by a
    # third-party plugin since removed) are labelled compare-only.
    write_cache(paths, "acme", [offer(provider="acme")], "test")
    _, _, err = run("offers", "--provider", "acme,aws", "--gpu", "H100", "--limit", "40")
    assert "No provider plugin installed for acme: compare only." in err


def test_json_and_csv_are_never_cut_short_silently() -> None:
    code, out, err = run("offers", "--gpu", "H100", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) > 100 and "note:" not in err  # all of them, no limit
    code, out, _ = run("offers", "--gpu", "H100", "--csv")
    assert len(list(csv.DictReader(io.StringIO(out)))) == len(rows)
    code, out, err = run("offers", "--gpu", "H100")
    assert len(out.splitlines()) == 31  # a table shows 30 by default and says so
    assert "30 offers shown (more match: --limit N or 0 for all)" in err
    code, out, err = run("offers", "--gpu", "H100", "--json", "--limit", "7")
    assert len(json.loads(out)) == 7 and "note: first 7 rows (--limit)" in err
