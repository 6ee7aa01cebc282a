"""plan() with a workload: fit, total-cost ranking, objectives, budget, spot, needs, and
the ranking checked against a brute-force search over the offers."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from cloudgpu.catalog import Offer, load_catalog, load_registry
from cloudgpu.catalog.gpus import usable_gib
from cloudgpu.costs import billing
from cloudgpu.errors import ConfigError
from cloudgpu.paths import Paths
from cloudgpu.planner import Candidate, Estimates, StartupHistory, plan
from cloudgpu.provider import Capabilities
from cloudgpu.spec.model import GpuRequest, JobSpec
from tests.planner.helpers import MARKET, job, offer

REG = load_registry()
FINETUNE_8B = {"kind": "finetune", "model": "llama-3-8b", "tokens": "2B", "seq_len": 4096}


def test_cheapest_counts_the_whole_job_not_the_hourly_price() -> None:
    p = plan(job(FINETUNE_8B), MARKET, registry=REG)
    best = p.best
    assert best is not None and best.fits
    hourly = plan(job(FINETUNE_8B), MARKET, registry=REG, objective="hourly").best
    assert hourly is not None
    # The cheapest $/h machine that fits is not the cheapest job.
    assert hourly.price_per_hour < best.price_per_hour
    assert hourly.est_cost is not None and best.est_cost is not None
    assert best.est_cost < hourly.est_cost
    costs = [c.est_cost for c in p.candidates]
    assert costs == sorted(costs)


def test_candidate_cost_is_hours_times_price_with_overheads() -> None:
    p = plan(job(FINETUNE_8B), MARKET, registry=REG, data_bytes=500 * 10**9)
    for c in p.candidates:
        assert c.est_hours is not None and c.est_cost is not None
        # Billed per started second (MARKET's providers bill per second here).
        assert c.est_cost == pytest.approx(c.est_hours * c.price_per_hour, rel=1e-4)
        assert c.staging_hours > 0 and c.startup_hours >= 0
        assert c.est_gpu_hours == pytest.approx(c.est_hours * c.gpu_count)
        assert c.memory_per_gpu_gib is not None
        assert c.memory_per_gpu_gib <= usable_gib(c.offer.gpu_memory_gb, REG.spec(c.offer.gpu))


def test_estimated_cost_is_billed_as_the_provider_bills() -> None:
    """The plan prices its hours the way the watcher and status will charge them
    (cloudgpu.costs.billing): a provider billing whole hours, at least two, costs two
    hours for a short job; the same job billed per second costs its hours x price."""
    short = {"kind": "finetune", "model": "llama-3-8b", "tokens": "20M", "seq_len": 4096}
    first = plan(job(short), MARKET, registry=REG, objective="hourly").best
    assert first is not None
    machine = first.offer
    per_second = plan(job(short), [machine], registry=REG).best
    assert per_second is not None and per_second.est_hours is not None
    assert per_second.est_hours < 1.0 and per_second.est_cost is not None
    assert per_second.est_cost == pytest.approx(per_second.est_hours * machine.price_per_hour, 1e-3)
    hourly = Capabilities(billing_granularity_s=3600, minimum_billed_s=7200)
    billed = plan(job(short), [machine], registry=REG, capabilities=lambda name: hourly).best
    assert billed is not None and billed.est_hours == per_second.est_hours
    assert billed.est_cost == pytest.approx(2 * machine.price_per_hour)
    assert billed.est_cost == pytest.approx(
        billing.estimate(machine.price_per_hour, billed.est_hours, hourly)
    )
    # The budget check reads the billed figure: under budget by the hour, not billed.
    capped = plan(
        job(short, max_cost=1.5 * machine.price_per_hour),
        [machine],
        registry=REG,
        capabilities=lambda name: hourly,
    )
    assert capped.best is None and "max_cost" in capped.rejected[0].reason


def test_fastest_prefers_big_nodes() -> None:
    fastest = plan(job(FINETUNE_8B), MARKET, registry=REG, objective="fastest")
    hours = [c.est_hours for c in fastest.candidates]
    assert hours == sorted(hours)
    assert fastest.best is not None and fastest.best.offer.gpu_count == 8


def test_max_cost_rejects_and_fastest_stays_under_budget() -> None:
    free = plan(job(FINETUNE_8B), MARKET, registry=REG, objective="fastest")
    assert free.best is not None and free.best.est_cost is not None
    budget = free.best.est_cost * 0.9
    capped = plan(job(FINETUNE_8B, max_cost=budget), MARKET, registry=REG, objective="fastest")
    assert capped.best is not None
    assert all((c.est_cost or 0) <= budget for c in capped.candidates)
    assert any("limits.max_cost" in c.reason for c in capped.rejected)


def test_max_runtime_rejects_runs_that_would_be_stopped_unfinished() -> None:
    free = plan(job(FINETUNE_8B), MARKET, registry=REG, objective="cheapest")
    hours = sorted(c.est_hours for c in free.candidates if c.est_hours is not None)
    limit_s = (hours[0] + hours[-1]) / 2 * 3600.0  # some candidates finish in time, some not
    capped = plan(job(FINETUNE_8B, max_runtime_s=limit_s), MARKET, registry=REG)
    assert capped.candidates
    assert all((c.est_hours or 0) * 3600.0 <= limit_s for c in capped.candidates)
    slow = [c for c in capped.rejected if "limits.max_runtime" in c.reason]
    assert slow and all((c.est_hours or 0) * 3600.0 > limit_s for c in slow)
    nothing = plan(job(FINETUNE_8B, max_runtime_s=hours[0] * 3600.0 / 2), MARKET, registry=REG)
    assert not nothing.candidates
    assert "fastest estimate" in nothing.needs and "limits.max_runtime" in nothing.needs


def test_spot_carries_an_interruption_penalty() -> None:
    w = {"kind": "lora", "model": "llama-3-8b", "tokens": "1B"}
    on = offer("aws", "x", "H100-SXM", 1, 80, 4.0)
    spot = offer("aws", "x", "H100-SXM", 1, 80, 4.0, market="spot")
    p = plan(job(w), [on, spot], registry=REG)
    by_market = {c.offer.market: c for c in p.candidates}
    assert by_market["spot"].spot_penalty_hours > 0 == by_market["on_demand"].spot_penalty_hours
    assert by_market["spot"].est_cost > by_market["on_demand"].est_cost  # type: ignore[operator]
    heavy = plan(job({**w, "spot_interruptions_per_hour": 0.5}), [spot], registry=REG).best
    assert heavy is not None and heavy.spot_penalty_hours > by_market["spot"].spot_penalty_hours


def test_rejected_offers_say_why_and_what_would_fit() -> None:
    p = plan(job(FINETUNE_8B), MARKET, registry=REG)
    t4 = next(c for c in p.rejected if c.offer.gpu == "T4")
    assert t4.reason.startswith("needs ") and "> 14.8 GiB usable" in t4.reason  # 15,360 MiB
    l40s = next(c for c in p.rejected if c.offer.instance_type == "g6e.xlarge")
    assert l40s.fix.startswith("kind: lora")
    pinned = {**FINETUNE_8B, "checkpointing": "none", "micro_batch": 4, "tensor_parallel": 1}
    p = plan(job(pinned), MARKET, registry=REG)
    a100x8 = next(c for c in p.rejected if c.offer.instance_type == "8x_A100-80GB")
    assert a100x8.fix.startswith("checkpointing: full")
    a100 = next(c for c in p.rejected if c.offer.instance_type == "1x_A100-80GB")
    assert a100.fix.startswith("a GPU with >= ")  # no single setting is enough on one GPU


def test_nothing_fits_says_what_is_needed() -> None:
    w = {"kind": "finetune", "model": "llama-3-70b", "tokens": "1B", "seq_len": 4096}
    singles = [o for o in MARKET if o.gpu_count == 1]
    p = plan(job(w), singles, registry=REG)
    assert not p.candidates
    # 70B's states need 16+ GPUs: the layout that fits them is named (TP/PP/ZeRO)
    assert re.match(r"needs \d+x80 GB with .*(TP=|ZeRO-3)", p.needs), p.needs


def test_learned_startup_time_replaces_the_default() -> None:
    w = {"kind": "lora", "model": "llama-3-8b", "tokens": "100M"}
    o = offer("aws", "x", "H100-SXM", 1, 80, 4.0)
    default = plan(job(w), [o], registry=REG).best
    learned = plan(
        job(w), [o], registry=REG, history=StartupHistory({"aws": (30.0, 40.0, 50.0)})
    ).best
    assert default is not None and learned is not None
    assert learned.startup_hours == pytest.approx(40 / 3600)
    assert learned.est_cost < default.est_cost  # type: ignore[operator]


def test_data_stall_slows_a_disk_bound_image_job() -> None:
    w = {
        "kind": "train",
        "params": "25M",
        "tokens": "1B",
        "samples_per_s": 3000,
        "bytes_per_sample": "110KB",
    }
    disk = offer("aws", "disk", "A100-80GB-SXM", 8, 80, 10.0)
    nvme = offer("aws", "nvme", "A100-80GB-SXM", 8, 80, 10.0, nvme=8)
    by = {c.offer.instance_type: c for c in plan(job(w), [disk, nvme], registry=REG).candidates}
    assert by["disk"].stall_fraction > 0.5 and by["nvme"].stall_fraction == 0
    assert by["nvme"].est_cost < by["disk"].est_cost  # type: ignore[operator]


def test_bad_workload_is_one_config_error_naming_the_file() -> None:
    bad = JobSpec(
        name="t",
        workload={"kind": "qlora", "model": "llama-3-8b", "tokens": "1B", "precision": "fp32"},
        source="job.yaml",
    )
    with pytest.raises(ConfigError, match=r"^job.yaml: workload.precision: qlora"):
        plan(bad, MARKET, registry=REG)
    with pytest.raises(ConfigError, match="unknown objective"):
        plan(job(None), MARKET, registry=REG, objective="best")
    cpu = job(
        {"kind": "lora", "model": "llama-3-8b", "tokens": "1B"}, gpu=GpuRequest(cpu_only=True)
    )
    with pytest.raises(ConfigError, match="sizing needs GPUs"):
        plan(cpu, MARKET, registry=REG)


# -- exactness: the chosen candidate equals a brute-force search -------------------------

SUITE: list[dict[str, Any]] = [
    {"workload": FINETUNE_8B},
    {"workload": {"kind": "qlora", "model": "llama-3-70b", "tokens": "500M"}},
    {
        "workload": {"kind": "lora", "model": "mistral-7b", "tokens": "1B", "micro_batch": 4},
        "spot": "true",
    },
    {"workload": {"kind": "inference", "model": "llama-3.1-8b", "requests": "100K", "batch": 32}},
    {
        "workload": {"kind": "train", "params": "1.3B", "tokens": "20B", "sharding": "zero2"},
        "gpu": GpuRequest(name="A100"),
    },
    {
        "workload": {
            "kind": "finetune",
            "model": "qwen2.5-7b",
            "tokens": "300M",
            "optimizer": "adam8bit",
        },
        "max_price": 40.0,
    },
]


def _objective_key(objective: str, c: Candidate) -> tuple[float, ...]:
    cost = c.est_cost if c.est_cost is not None else math.inf
    hours = c.est_hours if c.est_hours is not None else math.inf
    return {
        "cheapest": (cost, c.price_per_hour, hours),
        "fastest": (hours, cost, c.price_per_hour),
        "hourly": (c.price_per_hour, cost, hours),
    }[objective]


def _judged_one_by_one(
    spec: JobSpec, offers: list[Offer], estimates: Estimates | None
) -> list[Candidate]:
    """Every offer planned on its own (a plan of one offer judges only that offer). With
    ``estimates`` shared, each distinct machine shape's layout search runs once; without,
    every offer gets a fresh planner, which also checks that sharing changes nothing."""
    out = []
    for o in offers:
        out += plan(spec, [o], registry=REG, estimates=estimates).candidates
    return out


def _check_suite(offers: list[Offer], *, share: bool) -> None:
    for case in SUITE:
        kw = dict(case)
        spec = job(kw.pop("workload"), **kw)
        # A candidate does not depend on the objective: judge every offer once per job.
        judged = _judged_one_by_one(spec, offers, Estimates() if share else None)
        assert judged, case
        for objective in ("cheapest", "fastest", "hourly"):
            ranked = plan(spec, offers, registry=REG, objective=objective).best
            brute = min(judged, key=lambda c, o=objective: _objective_key(o, c))
            assert ranked is not None, case
            assert _objective_key(objective, ranked) == _objective_key(objective, brute), case


def _catalog_offers(paths: Paths) -> list[Offer]:
    return load_catalog(paths, warn=None).offers


def test_ranking_equals_brute_force_on_a_catalog_sample(paths: Paths) -> None:
    offers = _catalog_offers(paths)
    assert len(offers) > 1000
    _check_suite(offers[::40] + MARKET, share=False)


@pytest.mark.slow
def test_ranking_equals_brute_force_on_the_full_catalog(paths: Paths) -> None:
    offers = _catalog_offers(paths)
    assert len(offers) > 8000
    _check_suite(offers, share=True)


def test_missing_gpu_memory_falls_back_to_the_datasheet() -> None:
    w = {"kind": "lora", "model": "llama-3-8b", "tokens": "100M"}
    p = plan(job(w), [offer("vast", "x", "H100-SXM", 1, 0, 2.0)], registry=REG)
    assert p.best is not None and p.best.memory_per_gpu_gib is not None


def test_unknown_gpu_fits_by_memory_but_ranks_after_estimated_ones() -> None:
    w = {"kind": "lora", "model": "llama-3-8b", "tokens": "100M"}
    mystery = offer("vast", "m", "Mystery-9000", 1, 80, 0.10)
    known = offer("vast", "k", "A100-80GB-SXM", 1, 80, 1.50)
    p = plan(job(w), [mystery, known], registry=REG)
    assert [c.offer.instance_type for c in p.candidates] == ["k", "m"]
    assert p.candidates[1].est_cost is None and "no performance data" in p.candidates[1].reason


def test_fits_by_what_the_card_gives_not_its_label() -> None:
    # 30 sequences of 8k tokens of Llama-3.1-8B: ~47 GiB, under an L40S's "48 GB" label
    # but over the 44.4 GiB a program gets (46,068 MiB less the driver's share); an
    # A100 80GB (79 GiB) holds it.
    w = {
        "kind": "inference",
        "model": "llama-3.1-8b",
        "framework": "hf-generate",
        "seq_len": 8192,
        "batch": 30,
        "requests": 1000,
    }
    l40s = offer("aws", "g6e.xlarge", "L40S", 1, 48, 1.861)
    a100 = offer("runpod", "1x_A100-80GB", "A100-80GB-SXM", 1, 80, 1.39)
    p = plan(job(w), [l40s, a100], registry=REG)
    assert [c.offer.gpu for c in p.candidates] == ["A100-80GB-SXM"]
    (rejected,) = p.rejected
    assert rejected.memory_per_gpu_gib is not None and 44.4 < rejected.memory_per_gpu_gib < 48
    assert "> 44.4 GiB usable" in rejected.reason
