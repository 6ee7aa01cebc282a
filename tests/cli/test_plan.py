"""`cloudgpu plan` and `cloudgpu estimate` through click's runner (bundled catalog in an
isolated CLOUDGPU_HOME) and once each as a real subprocess."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cloudgpu.cli import cli
from cloudgpu.errors import CatalogError, ConfigError
from cloudgpu.paths import Paths
from cloudgpu.state.store import InstanceRecord, Store
from tests.lifecycle.helpers import main_exit

JSON_KEYS = {
    "provider",
    "instance_type",
    "region",
    "market",
    "gpu",
    "gpu_count",
    "num_nodes",
    "fits",
    "memory_per_gpu_gib",
    "est_hours",
    "est_gpu_hours",
    "est_cost",
    "price_per_hour",
    "reason",
}

FINETUNE = """\
name: ft
resources:
  gpu: A100
  regions: ["us-*"]
workload:
  kind: finetune
  model: llama-3-8b
  tokens: 2B
  seq_len: 4096
run: echo hi
"""


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "job.yaml"
    p.write_text(text)
    return str(p)


def test_plan_table_shows_candidates_and_why_others_do_not_fit(tmp_path: Path) -> None:
    res = invoke("plan", "--all-providers", write(tmp_path, FINETUNE), "--limit", "3")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "ranked by cheapest" in lines[0]
    assert lines[1].startswith("workload: finetune llama-3-8b, 8.03B params")
    header = lines[2]
    for col in ("GPUs", "fits", "mem/GPU GiB", "est hours", "est total $", "$/h"):
        assert col in header
    assert lines[4].startswith("1  ") and "A100" in lines[4]
    assert any(line.startswith("Not fitting") for line in lines)
    assert any("needs " in line and "fix:" in line for line in lines)  # a too-small A100
    assert any("offer(s): region not in us-*" in line for line in lines)


def test_plan_json_is_best_first_with_the_documented_keys(tmp_path: Path) -> None:
    res = invoke("plan", "--all-providers", write(tmp_path, FINETUNE), "--json", "--limit", "50")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert rows and all(set(r) >= JSON_KEYS for r in rows)
    fitting = [r for r in rows if r["fits"]]
    costs = [r["est_cost"] for r in fitting]
    assert costs == sorted(costs) and rows[: len(fitting)] == fitting
    assert all(r["gpu"].startswith("A100") for r in rows)
    assert all(r["reason"] for r in rows if not r["fits"])
    fastest = json.loads(
        invoke(
            "plan", "--all-providers", write(tmp_path, FINETUNE), "--json", "--objective", "fastest"
        ).output
    )
    hours = [r["est_hours"] for r in fastest if r["fits"]]
    assert hours == sorted(hours)


def test_plan_without_workload_ranks_by_hourly_price(tmp_path: Path) -> None:
    res = invoke(
        "plan",
        "--all-providers",
        write(tmp_path, "name: x\nresources: {gpu: 'H100:8'}\nrun: echo\n"),
        "--json",
    )
    rows = json.loads(res.output)
    prices = [r["price_per_hour"] for r in rows]
    assert prices == sorted(prices) and all(r["gpu_count"] == 8 for r in rows)
    assert all(r["est_cost"] is None for r in rows)


def test_estimate_without_a_job_file() -> None:
    res = invoke(
        "estimate", "--model", "llama-3-70b", "--kind", "qlora", "--tokens", "1B", "--limit", "2"
    )
    assert res.exit_code == 0, res.output
    assert "workload: qlora llama-3-70b" in res.output
    rows = json.loads(
        invoke(
            "estimate",
            "--model",
            "llama-3-70b",
            "--kind",
            "qlora",
            "--tokens",
            "1B",
            "--gpu",
            "L40S",
            "--json",
        ).output
    )
    assert rows and all(r["gpu"] == "L40S" for r in rows)
    # An L40S "48 GB" gives a program 44.4 GiB (46,068 MiB less the driver's share).
    assert all(r["memory_per_gpu_gib"] <= 44.5 for r in rows if r["fits"])


def test_estimate_and_plan_leave_out_the_same_unbuyable_spot_rows(tmp_path: Path) -> None:
    """The bundled RunPod table still lists spot rows its plugin cannot buy (they were the
    cheapest RTX 4090s estimate ranked): estimate leaves them out by the plan's own rule
    (choose.buyable) and says so; plan's what-if keeps the same rows."""
    args = ["--model", "llama-3-8b", "--kind", "lora", "--tokens", "200M", "--gpu", "RTX4090"]
    res = invoke("estimate", *args, "--provider", "runpod", "--json", "--all")
    assert res.exit_code == 0, res.output
    runpod = [r for r in json.loads(res.stdout) if r["provider"] == "runpod"]
    assert runpod and all(r["market"] == "on_demand" for r in runpod)
    text = invoke("estimate", *args, "--limit", "1")
    assert "note: runpod: " in text.stderr and "spot offer(s) left out" in text.stderr
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: x\nresources: {gpu: RTX4090, providers: [runpod]}\n"
        "workload: {kind: lora, model: llama-3-8b, tokens: 200M}\nrun: echo\n"
    )
    planned = invoke("plan", str(job), "--all-providers", "--json", "--all")
    assert planned.exit_code == 0, planned.output
    planned_rows = [r for r in json.loads(planned.stdout) if r["provider"] == "runpod"]
    assert planned_rows and all(r["market"] == "on_demand" for r in planned_rows)


def test_estimate_pins_a_configuration_to_compare_with_a_published_run() -> None:
    # Meta's Llama 3.1 405B model card: ~15.6T tokens, 30.84M H100 GPU-hours.
    res = invoke(
        "estimate",
        "--model",
        "llama-3.1-405b",
        "--kind",
        "train",
        "--tokens",
        "15.6T",
        "--seq-len",
        "8192",
        "--gpu",
        "H100-SXM",
        "--count",
        "8",
        "--nodes",
        "2048",
        "--json",
    )
    assert res.exit_code == 0, res.output
    [row] = json.loads(res.output)
    assert (row["provider"], row["gpu_count"], row["num_nodes"]) == ("estimate", 8, 2048)
    assert row["est_gpu_hours"] == pytest.approx(30.84e6, rel=0.2)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (
            ["--model", "lama-3-70b", "--kind", "qlora", "--tokens", "1B"],
            ConfigError,
            "unknown model 'lama-3-70b'",
        ),
        (
            ["--model", "llama-3-8b", "--kind", "qlora", "--tokens", "1B", "--precision", "fp32"],
            ConfigError,
            "qlora keeps the base model in 4-bit NF4",
        ),
        (
            ["--model", "llama-3-8b", "--kind", "finetune"],
            ConfigError,
            "workload.tokens: required for kind: finetune",
        ),
        (
            [
                "--model",
                "llama-3-8b",
                "--kind",
                "lora",
                "--tokens",
                "1B",
                "--gpu",
                "H1000",
                "--count",
                "8",
            ],
            CatalogError,
            "unknown GPU 'H1000'",
        ),
        (
            ["--model", "llama-3-8b", "--kind", "lora", "--tokens", "1B", "--gpu", "H1000"],
            CatalogError,
            "unknown GPU 'H1000'",
        ),
    ],
)
def test_estimate_bad_input(args: list[str], error: type, message: str) -> None:
    res = invoke("estimate", *args)
    assert isinstance(res.exception, error) and message in str(res.exception)
    assert "\n" not in str(res.exception)


def test_nothing_fits_says_what_is_needed(tmp_path: Path) -> None:
    job = FINETUNE.replace("llama-3-8b", "llama-3.1-405b").replace("gpu: A100", "gpu: A100:1")
    res = invoke("plan", "--all-providers", write(tmp_path, job))
    assert isinstance(res.exception, ConfigError)
    assert str(res.exception).startswith("nothing fits: needs ")
    # 405B needs many nodes: the layout that fits them splits the model (TP in a node, PP
    # across nodes)
    assert re.search(r"needs \d+x\d+ GB with .*TP=\d.*PP=\d", str(res.exception))


def _cloudgpu(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cloudgpu", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
        cwd=cwd,
    )


def test_plan_and_estimate_as_real_subprocesses(tmp_path: Path) -> None:
    ok = _cloudgpu(
        "plan", "--all-providers", write(tmp_path, FINETUNE), "--json", "--limit", "1", cwd=tmp_path
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)[0]["fits"] is True
    bad = _cloudgpu(
        "estimate", "--model", "lama-3-8b", "--kind", "lora", "--tokens", "1B", cwd=tmp_path
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("error: estimate: workload.model: unknown model 'lama-3-8b'")
    assert "hint: did you mean llama-3-8b" in bad.stderr and "Traceback" not in bad.stderr


def test_plan_uses_the_store_history_and_local_data_size(tmp_path: Path, paths: Paths) -> None:
    store = Store.open(paths.state_db)
    try:
        store.add_instance(
            InstanceRecord(
                id="i1",
                job_id="j",
                provider="aws",
                state="terminated",
                created_at=10.0,
                launched_at=46.0,
            )
        )
    finally:
        store.close()
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-0.bin").write_bytes(b"x" * 3_000_000)
    job = FINETUNE + "data:\n  - src: ./data\n    dst: /nvme/data\n"
    rows = json.loads(
        invoke("plan", "--all-providers", write(tmp_path, job), "--json", "--limit", "200").output
    )
    aws = [r for r in rows if r["provider"] == "aws" and r["fits"]]
    others = [r for r in rows if r["provider"] != "aws" and r["fits"]]
    assert aws and all(r["startup_hours"] == pytest.approx(36 / 3600, abs=1e-4) for r in aws)
    assert others and all(r["startup_hours"] > 36 / 3600 for r in others)
    assert all(r["staging_hours"] > 0 for r in aws)


def test_estimate_a_family_shows_each_variant() -> None:
    res = invoke(
        "estimate", "--model", "llama-3-8b", "--kind", "lora", "--tokens", "200M",
        "--gpu", "A100-80GB", "--count", "8", "--json",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert sorted(r["gpu"] for r in rows) == ["A100-80GB-PCIe", "A100-80GB-SXM"]
    assert all(r["gpu_count"] == 8 and r["fits"] for r in rows)
    res = invoke("estimate", "--model", "llama-3-8b", "--kind", "lora", "--tokens", "200M",
                 "--gpu", "H100", "--count", "8")  # fmt: skip
    assert res.exit_code == 0, res.output
    assert {"8x H100-SXM", "8x H100-PCIe", "8x H100-NVL"} <= set(res.output.split("  "))


def test_estimate_json_says_fits_false_and_why() -> None:
    code, out, err = main_exit(
        ["estimate", "--model", "llama-3-70b", "--kind", "train", "--tokens", "1T",
         "--gpu", "T4", "--count", "1", "--json"]
    )  # fmt: skip
    assert code == 2 and "nothing fits" in err
    rows = json.loads(out)
    assert rows[0]["fits"] is False and rows[0]["reason"] and rows[0]["needs"]
    assert rows[0]["gpu"] == "T4"
