"""The offer invariants of cloudgpu.testing (the contract suite every provider passes,
over its own, live and bundled offers) catch what they claim to: each broken field is
named, a sane GPU or CPU-only offer passes, and a spot row counts against a provider
that creates no spot instances only when the plugin itself produced it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from cloudgpu.provider import Capabilities
from cloudgpu.testing import offer_problems
from tests.planner.helpers import offer

GOOD = replace(offer("aws", "g6.xlarge", "L4", 1, 22.4, 0.805), observed_at="2026-12-01T00:00:00Z")
SPOT = Capabilities(spot=True)


def test_a_sane_gpu_offer_and_a_cpu_only_one_pass() -> None:
    assert offer_problems(GOOD, "aws", SPOT) == []
    cpu = replace(GOOD, instance_type="m7i.large", gpu="", gpu_count=0, gpu_memory_gb=0.0)
    assert offer_problems(cpu, "aws", SPOT) == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"provider": "gcp"}, "provider 'gcp'"),
        ({"market": "reserved"}, "market 'reserved'"),
        ({"instance_type": ""}, "no instance type"),
        ({"gpu": ""}, "GPU '' x 1"),
        ({"gpu_count": 0}, "GPU 'L4' x 0"),
        ({"price_per_hour": math.nan}, "price nan"),
        ({"price_per_hour": 0.0}, "price 0.0"),
        ({"gpu_memory_gb": 0.0}, "GPU memory 0.0"),
        ({"vcpus": 0.0}, "vCPUs 0.0"),
        ({"nvme_count": -1}, "NVMe -1"),
        ({"observed_at": ""}, "no observed_at"),
    ],
)
def test_each_broken_field_is_named(change: dict[str, object], named: str) -> None:
    problems = offer_problems(replace(GOOD, **change), "aws", SPOT)  # type: ignore[arg-type]
    assert len(problems) == 1 and named in problems[0], problems


def test_spot_rows_count_only_when_the_plugin_made_them() -> None:
    spot = replace(GOOD, market="spot")
    assert offer_problems(spot, "aws", Capabilities(spot=False)) == [
        f"{spot.key}: spot offer, but capabilities.spot is False"
    ]
    # A bundled table may list a retired spot market: the planner leaves those out.
    assert offer_problems(spot, "aws", Capabilities(spot=False), bundled=True) == []
