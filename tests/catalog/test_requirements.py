"""The one requirements filter: the same semantics from a job's resources and from flags."""

from __future__ import annotations

import pytest

from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer
from cloudgpu.catalog.query import OfferQuery, query_offers, requirements
from cloudgpu.catalog.requirements import Requirements, from_resources
from cloudgpu.spec import parse_job

from .helpers import offer

REG = load_registry()
OFFERS: list[Offer] = [
    offer(instance_type="h100-nvl", gpu="H100-NVL", gpu_count=1, gpu_memory_gb=94.0),
    offer(instance_type="gh200", gpu="GH200", gpu_count=1, gpu_memory_gb=96.0),
    offer(instance_type="h200", gpu="H200-SXM", gpu_count=1, gpu_memory_gb=141.0),
    offer(instance_type="b200", gpu="B200", gpu_count=8, gpu_memory_gb=180.0),
    offer(instance_type="l4", gpu="L4", gpu_count=1, gpu_memory_gb=24.0, zone="use1-az4"),
    offer(instance_type="inf1", gpu="Inferentia", gpu_count=1, gpu_memory_gb=8.0),
    offer(instance_type="cpu", gpu="", gpu_count=0, gpu_memory_gb=0.0, region="eu-west-1"),
]  # fmt: skip


def fits(req: Requirements) -> list[str]:
    f = req.compile(REG)
    return [o.instance_type for o in OFFERS if not f.reason(o)]


def job_req(resources: str, needs_gpu: bool = False) -> Requirements:
    job = parse_job(f"name: j\nrun: x\nresources: {resources}\n")
    return from_resources(job.resources, needs_gpu=needs_gpu)


def test_a_100_gb_floor_admits_no_94_or_96_gb_gpu() -> None:
    """Issue 11: the old 0.93 slack let 94 GB H100 NVL and 96 GB GH200 through."""
    assert fits(job_req("{gpu: 100GB+}")) == ["h200", "b200"]
    flags = requirements(OfferQuery(min_gpu_memory=100), REG)
    assert fits(flags) == ["h200", "b200"]
    ranked = query_offers(OFFERS, OfferQuery(gpu="100GB+"), REG)
    assert sorted(o.instance_type for o in ranked) == ["b200", "h200"]
    assert fits(job_req("{gpu: 94GB+}"))[:2] == ["h100-nvl", "gh200"]  # exact figures pass


@pytest.mark.parametrize(
    ("resources", "flag", "expected"),
    [
        ("{gpu: any}", "any", ["h100-nvl", "gh200", "h200", "b200", "l4"]),  # no Inferentia
        ("{gpu: 'any:8'}", "any:8", ["b200"]),
        ("{gpu: 'H100'}", "H100", ["h100-nvl"]),
        ("{gpu: 'Inferentia'}", "Inferentia", ["inf1"]),  # named: allowed
        ("{gpu: 'any:2+'}", "any:2+", ["b200"]),
        ("{gpu: none}", "none", ["cpu"]),
    ],
)
def test_one_gpu_syntax_for_jobs_and_flags(resources: str, flag: str, expected: list[str]) -> None:
    assert fits(job_req(resources)) == expected
    assert fits(requirements(OfferQuery(gpu=flag), REG)) == expected


def test_regions_match_zones_for_jobs_too() -> None:
    """`offers --region` matched zones but a job's `regions:` did not."""
    assert fits(job_req("{gpu: L4, regions: ['use1-az*']}")) == ["l4"]
    assert fits(job_req("{gpu: L4, regions: ['US-EAST-1']}")) == ["l4"]
    assert fits(requirements(OfferQuery(gpu="L4", regions=("use1-az*",)), REG)) == ["l4"]


def test_gpu_omitted_means_any_machine_unless_a_workload_needs_one() -> None:
    assert len(fits(job_req("{}"))) == len(OFFERS)
    assert "cpu" not in fits(job_req("{}", needs_gpu=True))
    assert "inf1" not in fits(job_req("{}", needs_gpu=True))


def test_reasons_name_the_requirement_and_the_offers_value() -> None:
    f = job_req("{gpu: 'H100:2', cpus: 500, spot: true, max_price: 1}").compile(REG)
    nvl = OFFERS[0]
    assert f.reasons(nvl) == [
        "GPU count not 2 (1)",
        "vCPUs < 500 (192)",
        "on-demand; job wants spot",
        "price > max_price $1/h ($55.04/h)",
    ]
    assert f.reason(nvl) == "GPU count not 2 (1)"
