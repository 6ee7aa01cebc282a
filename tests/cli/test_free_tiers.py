"""Free tiers through the CLI: `offers --free`, `gpus --free`, the free-tier line of
buy-vs-rent and of plan, and the bundled rows kept equal to the providers' own."""

from __future__ import annotations

import json
from pathlib import Path

from cloudgpu_providers.colab import provider as colab
from cloudgpu_providers.kaggle import tiers as kaggle

from cloudgpu.catalog import snapshot
from cloudgpu.catalog.catalog import snapshot_path
from tests.lifecycle.helpers import cli_proc, invoke, job_file


def test_bundled_free_tier_rows_equal_the_providers_own() -> None:
    for make in (kaggle.offer_file, colab.offer_file):
        want = make()
        have = snapshot.read(snapshot_path(want.provider))
        assert have.offers == want.offers, "run `python -m tools.free_tiers`"
        assert have.limits == want.limits
        assert [o.extra for o in have.offers] == [o.extra for o in want.offers]


def test_offers_free_lists_only_free_tiers_with_their_limits() -> None:
    res = invoke(["offers", "--free", "--json"])
    rows = json.loads(res.stdout)
    assert {r["provider"] for r in rows} == {"kaggle", "colab"}
    assert all(r["price_per_hour"] == 0 for r in rows)
    table = invoke(["offers", "--free"])
    assert "kaggle: sessions of at most 12 h, 30 GPU-h/week" in table.stderr


def test_plain_offers_leave_free_tiers_out() -> None:
    rows = json.loads(invoke(["offers", "--gpu", "T4", "--limit", "0", "--json"]).stdout)
    assert rows and all(r["price_per_hour"] > 0 for r in rows)
    named = json.loads(invoke(["offers", "--provider", "kaggle", "--json"]).stdout)
    assert {r["instance_type"] for r in named} == {"NvidiaTeslaT4", "NvidiaTeslaP100"}


def test_gpus_shows_a_free_column_and_keeps_prices_real() -> None:
    rows = {r["name"]: r for r in json.loads(invoke(["gpus", "T4", "P100", "--json"]).stdout)}
    assert rows["T4"]["free_tier"] == "colab,kaggle" and rows["P100"]["free_tier"] == "kaggle"
    assert rows["T4"]["cheapest_on_demand_gpu_hour"] > 0  # $0 is a quota, not a price
    assert [r["name"] for r in json.loads(invoke(["gpus", "--free", "--json"]).stdout)] == [
        "P100",
        "T4",
    ]


def test_buy_vs_rent_shows_a_free_tier_that_covers_the_hours() -> None:
    args = ["buy-vs-rent", "--gpu", "T4", "--count", "1", "--server-price", "3000"]
    out = invoke([*args, "--utilization", "15%"]).stdout
    assert "Free tier: kaggle NvidiaTeslaT4 (2x T4) at $0 covers your 25 h/week" in out
    assert "colab free-T4" in out and "publishes no weekly quota" in out
    doc = json.loads(invoke([*args, "--utilization", "50%", "--json"]).stdout)
    assert [f["provider"] for f in doc["free_tiers"]] == ["colab"]  # 84 h/week > 30


def test_plan_names_the_free_tier_beside_the_rentals(tmp_path: Path, cloudgpu_home: Path) -> None:
    job = job_file(
        tmp_path,
        "name: lora\nresources: {gpu: T4}\nworkload: {kind: lora, params: 1B, tokens: 2B}\n"
        "checkpoint: /nvme/ckpt\nrun: python train.py\n",
    )
    res = cli_proc(["plan", str(job), "--limit", "2", "--all-providers"], cloudgpu_home)
    assert res.returncode == 0, res.stderr
    assert "Also fits a free tier (add colab or kaggle to resources.providers" in res.stdout
    assert "kaggle NvidiaTeslaT4 (2x T4): $0" in res.stdout and "sessions" in res.stdout
