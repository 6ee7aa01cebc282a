"""tools/convert_prices on real rows of the dated tables (tests/catalog/fixtures/prices):
every published quirk is handled on purpose, nothing is dropped silently."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from cloudgpu_providers.aws.refresh import network_gbps, parse_type

from cloudgpu.catalog import snapshot
from cloudgpu.catalog.offer import (
    FLAG_FRACTIONAL_GPU,
    FLAG_GPU_COUNT_CORRECTED,
    FLAG_PRICE_PREDATES_CUT,
    FLAG_SPOT_ABOVE_ON_DEMAND,
    FLAG_UNKNOWN_GPU,
    Offer,
)
from tools.convert_prices import convert_provider, main, write_snapshot

FIXTURES = Path(__file__).parent / "fixtures" / "prices"
AWS_TYPES = FIXTURES / "aws_instance_types.json"


def offers_of(provider: str, source: Path = FIXTURES) -> tuple[list[Offer], dict[str, int]]:
    ctx = convert_provider(provider, source, AWS_TYPES)
    return ctx.offers, dict(ctx.skipped)


def find(offers: list[Offer], itype: str, market: str, zone: str | None = None) -> list[Offer]:
    return [
        o
        for o in offers
        if o.instance_type == itype and o.market == market and (zone is None or o.zone == zone)
    ]


def test_gcp_machine_and_accelerator_rows_are_summed_per_zone() -> None:
    offers, skipped = offers_of("gcp")
    (a2,) = find(offers, "a2-highgpu-1g", "on_demand")
    assert a2.price_per_hour == pytest.approx(0.73948 + 2.93391)
    assert (a2.gpu, a2.gpu_count, a2.zone) == ("A100-40GB-SXM", 1, "us-central1-a")
    (a2_spot,) = find(offers, "a2-highgpu-1g", "spot")
    assert a2_spot.price_per_hour == pytest.approx(0.29576 + 1.1472)
    # g2-standard-24 carries 2 L4 (documented shape), so it takes the L4 x2 row
    (g2,) = find(offers, "g2-standard-24", "on_demand")
    assert (g2.gpu, g2.gpu_count) == ("L4", 2)
    assert g2.price_per_hour == pytest.approx(0.88075 + 1.12008)
    assert g2.gpu_memory_gb == 24
    # a3-highgpu-8g: 16 local SSDs of 375 GB
    (a3,) = find(offers, "a3-highgpu-8g", "on_demand")
    assert (a3.nvme_count, a3.nvme_size_gb, a3.gpu) == (16, 375.0, "H100-SXM")
    # accelerator rows without a machine row are never priced as GPU-only VMs
    assert not [o for o in offers if o.gpu in ("B200", "T4")]
    assert skipped["accelerator row B200 skipped: no machine row for it"] == 7
    assert skipped["accelerator row T4 skipped: N1 host price not in table"] == 2


def test_gcp_spot_above_on_demand_is_kept_and_flagged() -> None:
    offers, _ = offers_of("gcp")
    (spot,) = find(offers, "a3-highgpu-8g", "spot")
    (od,) = find(offers, "a3-highgpu-8g", "on_demand")
    assert spot.price_per_hour == pytest.approx(8.56847 + 80.15009)
    assert spot.price_per_hour > od.price_per_hour
    assert FLAG_SPOT_ABOVE_ON_DEMAND in spot.flags
    assert FLAG_SPOT_ABOVE_ON_DEMAND not in od.flags


def test_aws_quirks() -> None:
    offers, skipped = offers_of("aws")
    p5 = find(offers, "p5.48xlarge", "on_demand")
    assert p5 and all(FLAG_PRICE_PREDATES_CUT in o.flags for o in p5)
    assert p5[0].price_per_hour == pytest.approx(98.32)
    assert all(FLAG_PRICE_PREDATES_CUT not in o.flags for o in find(offers, "p5.48xlarge", "spot"))
    # local NVMe and network from describe_instance_types
    assert (p5[0].nvme_count, p5[0].nvme_size_gb, p5[0].network_gbps) == (8, 3800.0, 3200.0)
    # empty on-demand price (p5e): skipped and counted, its spot price still offered
    assert not find(offers, "p5e.48xlarge", "on_demand")
    assert find(offers, "p5e.48xlarge", "spot")
    assert skipped["on_demand: empty price in table"] == 2
    assert skipped["spot: empty or zero price in table"] >= 1  # p5e apse2: neither price
    # g5.24xlarge/g5.48xlarge spot above on-demand
    g5 = find(offers, "g5.48xlarge", "spot")
    assert g5 and all(FLAG_SPOT_ABOVE_ON_DEMAND in o.flags for o in g5)
    # L4/A10G memory reported as 22888 MiB snaps to the 24 GB spec
    (g5x,) = find(offers, "g5.xlarge", "on_demand")
    assert (g5x.gpu, g5x.gpu_memory_gb, g5x.nvme_size_gb) == ("A10G", 24.0, 250.0)
    # non-GPU accelerators keep their real name and count
    (inf2,) = find(offers, "inf2.xlarge", "on_demand")
    assert (inf2.gpu, inf2.gpu_count, inf2.gpu_memory_gb) == ("Inferentia2", 1, 32.0)


def test_aws_documented_count_wins_and_is_flagged(tmp_path: Path) -> None:
    types = json.loads(AWS_TYPES.read_text())
    types["g5.xlarge"]["GpuInfo"]["Gpus"][0]["Count"] = 2  # documented: 2, table: 1
    altered = tmp_path / "types.json"
    altered.write_text(json.dumps(types))
    ctx = convert_provider("aws", FIXTURES, altered)
    (g5x,) = find(ctx.offers, "g5.xlarge", "on_demand")
    assert g5x.gpu_count == 2 and FLAG_GPU_COUNT_CORRECTED in g5x.flags


def test_aws_gpu_types_are_read_by_the_providers_own_parser() -> None:
    """The snapshot says of each GPU type what a live refresh would: the AWS provider's
    parse_type reads DescribeInstanceTypes for both (one parser, not two)."""
    types = json.loads(AWS_TYPES.read_text())
    offers, _ = offers_of("aws")
    checked = 0
    for name, doc in types.items():
        info = parse_type(doc)
        if info is None:
            continue  # not a GPU type (inf2): the provider offers none
        for o in find(offers, name, "on_demand"):
            got = (o.nvme_count, o.nvme_size_gb, o.network_gbps, o.vcpus, o.memory_gb)
            want = (info.nvme_count, info.nvme_size_gb, info.network_gbps)
            assert got == (*want, float(info.vcpus), info.memory_gb), name
            checked += 1
    assert checked >= 4


def test_aws_network_is_the_documented_label_not_the_cards_summed() -> None:
    four_cards = [{"PeakBandwidthInGbps": 400.0}] * 4  # g6e.48xlarge as AWS lists it
    assert network_gbps({"NetworkPerformance": "400 Gigabit", "NetworkCards": four_cards}) == 400
    assert network_gbps({"NetworkPerformance": "4x 100 Gigabit"}) == 400
    assert network_gbps({"NetworkPerformance": "Up to 25 Gigabit"}) == 25
    assert network_gbps({"NetworkPerformance": "750 Megabit"}) == 0.75
    assert network_gbps({"NetworkPerformance": "High", "NetworkCards": four_cards[:2]}) == 800


def test_aws_types_unknown_to_moto_keep_table_values() -> None:
    offers, _ = offers_of("aws")
    (p3,) = find(offers, "p3.2xlarge", "on_demand")
    assert (p3.gpu, p3.gpu_count, p3.nvme_count) == ("V100-16GB", 1, 0)


def test_azure_plain_error_uses_documented_count() -> None:
    offers, skipped = offers_of("azure")
    (nd,) = find(offers, "Standard_ND96isr_H100_v5", "on_demand")
    assert (nd.gpu, nd.gpu_count) == ("H100-SXM", 8)
    assert FLAG_GPU_COUNT_CORRECTED in nd.flags
    # the table's "H100" on NC H100 v5 is an H100 NVL; NCC40ads has no AcceleratorName
    assert {o.gpu for o in find(offers, "Standard_NC40ads_H100_v5", "on_demand")} == {"H100-NVL"}
    assert {o.gpu for o in find(offers, "Standard_NCC40ads_H100_v5", "spot")} == {"H100-NVL"}
    # fractional MI25 share: count 1, 2 GB, flagged
    (nv4,) = find(offers, "Standard_NV4as_v4", "on_demand")
    assert nv4.gpu_memory_gb == 2.0 and FLAG_FRACTIONAL_GPU in nv4.flags
    # empty prices skipped with a reason, not silently
    assert not find(offers, "Standard_NC8ads_A10_v4", "on_demand")
    assert skipped["on_demand: empty price in table"] == 1


def test_runpod_lambda_vast_spellings() -> None:
    runpod, _ = offers_of("runpod")
    by_type = {o.instance_type: o.gpu for o in runpod}
    assert by_type["1x_A100-80GB_SECURE"] == "A100-80GB-PCIe"
    assert by_type["1x_A100-80GB-SXM_SECURE"] == "A100-80GB-SXM"
    assert by_type["1x_H100_SECURE"] == "H100-PCIe"
    assert by_type["1x_H100-SXM_SECURE"] == "H100-SXM"
    (l40s_spot,) = find(runpod, "1x_L40S_SECURE", "spot")
    assert FLAG_SPOT_ABOVE_ON_DEMAND in l40s_spot.flags
    lam, _ = offers_of("lambda")
    assert {o.instance_type: o.gpu for o in lam} == {
        "gpu_1x_a100": "A100-40GB-PCIe",
        "gpu_8x_a100_80gb_sxm4": "A100-80GB-SXM",
        "gpu_1x_h100_pcie": "H100-PCIe",
        "gpu_8x_h100_sxm5": "H100-SXM",
    }
    assert {o.market for o in lam} == {"on_demand"}
    vast, skipped = offers_of("vast")
    assert {o.instance_type: o.gpu for o in vast} == {
        "4x-H100_NVL-32-65536": "H100-NVL",
        "1x-H100_SXM-32-65536": "H100-SXM",
    }
    assert {o.market for o in vast} == {"on_demand"}
    assert skipped["spot: 0.00 means not captured (Vast)"] == 2


def test_unknown_gpu_is_kept_and_flagged(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(FIXTURES, src)
    with (src / "runpod.csv").open("a", newline="") as fh:  # a made-up row for this test
        csv.writer(fh, lineterminator="\n").writerow(
            [
                "1x_X9000_SECURE",
                "X9000",
                "1.0",
                "8.0",
                "64.0",
                "X9000",
                "CA",
                "",
                "0.99",
                "CA-MTL-1",
            ]
        )
    ctx = convert_provider("runpod", src, AWS_TYPES)
    (odd,) = find(ctx.offers, "1x_X9000_SECURE", "on_demand")
    assert odd.gpu == "X9000" and FLAG_UNKNOWN_GPU in odd.flags
    assert ctx.unknown_gpus["X9000"] == 1
    path = write_snapshot(ctx, tmp_path / "out")
    data = snapshot.read(path)
    assert data.skipped["kept, flagged unknown_gpu: 'X9000'"] == 1


def test_cli_writes_every_provider_with_origin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main([str(FIXTURES), "--out", str(out), "--aws-instance-types", str(AWS_TYPES)]) == 0
    files = sorted(p.name for p in out.glob("offers-*.json"))
    assert files == [
        f"offers-{p}.json" for p in ("aws", "azure", "gcp", "lambda", "runpod", "vast")
    ]
    data = snapshot.read(out / "offers-gcp.json")
    assert data.origin["repo"] == "skypilot-org/skypilot-catalog"
    assert data.origin["commit"].startswith("017e250")
    assert data.origin["extracted"] == "2026-12-01"
    assert data.observed_at == "2026-12-01T00:00:00Z"
    assert "offers ->" in capsys.readouterr().out


def test_cli_rejects_a_folder_without_the_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path)]) == 2
    assert "missing aws.csv" in capsys.readouterr().err
