"""The GPU spec registry: data file integrity, provider spellings, user matching."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from cloudgpu_providers.azure.sizes import size_gpu
from cloudgpu_providers.runpod.offers import runpod_gpu

from cloudgpu.catalog.gpus import (
    DATA_FILE,
    GIB,
    GpuRegistry,
    compact,
    load_registry,
    read_registry,
    usable_gib,
)
from cloudgpu.errors import CatalogError

# Every AcceleratorName of the dated price tables the snapshot was built from
# (skypilot-catalog subsets, extracted 2026-12-01), including common/accelerators.csv.
TABLE_NAMES = [
    *[
        "A10",
        "A100",
        "A100-80GB",
        "A100-80GB-SXM",
        "A10G",
        "A40",
        "A4000",
        "A6000",
        "B200",
        "GH200",
        "H100",
        "H100-MEGA",
        "H100-NVL",
        "H100-NVLINK",
        "H100-SXM",
        "H200",
        "H200-SXM",
        "K80",
        "L4",
        "L40",
        "L40S",
        "M4000",
        "M60",
        "MI300X",
        "P100",
        "P4",
        "P4000",
        "RTX3060",
        "RTX3080",
        "RTX3090",
        "RTX4000-Ada",
        "RTX4060",
        "RTX4080",
        "RTX4090",
        "RTX5060",
        "RTX5090",
        "RTX6000",
        "RTX6000-Ada",
        "RTXA4000",
        "RTXA4500",
        "RTXA5000",
        "RTXA6000",
        "T4",
        "T4g",
        "V100",
        "V100-32GB",
        "Inferentia",
        "Inferentia2",
        "Trainium",
        "tpu-v2",
        "tpu-v3",
        "tpu-v4",
        "tpu-v5litepod",
        "tpu-v5p",
        "tpu-v6e",
    ],
    "Gaudi HL-205",
    "Qualcomm AI100",
    "Radeon MI25",
    "Radeon Pro V520",
    "Virtex UltraScale (VU9P)",
    "Virtex UltraScale+ (VU47P)",
]


@pytest.fixture(scope="module")
def reg() -> GpuRegistry:
    return load_registry()


def test_every_row_has_source_date_and_sane_numbers(reg: GpuRegistry) -> None:
    specs = reg.all()
    assert len({s.name for s in specs}) == len(specs)
    for s in specs:
        assert s.source and s.date == "2026-12-01", s.name
        assert s.memory_gb > 0, s.name
        if s.is_gpu:
            assert s.bf16_tflops > 0 and s.fp32_tflops > 0 and s.memory_bw_tbs > 0, s.name
            assert s.tdp_w > 0 and s.link and s.link_gbps > 0, s.name
        if s.fp8_tflops is not None:
            assert s.fp8_tflops >= s.bf16_tflops, s.name


def test_reference_section_1_figures(reg: GpuRegistry) -> None:
    h100 = reg.require("H100-SXM")
    assert (h100.memory_gb, h100.bf16_tflops, h100.fp8_tflops, h100.link_gbps) == (
        80,
        989,
        1979,
        450,
    )
    assert reg.require("A100-80GB-PCIe").memory_bw_tbs == pytest.approx(1.935, abs=0.01)
    assert reg.require("MI300X").memory_gb == 192
    assert reg.require("T4").fp8_tflops is None


def test_usable_memory_is_what_the_driver_gives_not_the_label(reg: GpuRegistry) -> None:
    # An L40S "48 GB" is 46,068 MiB with ECC on (as clouds run it), less the driver's
    # share: 44.4 GiB, not 48 (the planner once took the label as GiB: +8%).
    l40s = reg.require("L40S")
    assert usable_gib(48, l40s) == pytest.approx(46068 / 1024 * (1 - 0.0125), abs=1e-6)
    assert usable_gib(48, l40s) < 48e9 / GIB < 48
    a100 = reg.require("A100-80GB-SXM")
    assert usable_gib(80, a100) == pytest.approx(79.0, abs=0.05)
    # The same card in another unit is the same card: the local provider's nvidia-smi
    # MiB read as decimal GB (85.9), AWS's MiB / 1024 (80.0), a table's missing 0.
    assert usable_gib(85.9, a100) == usable_gib(80, a100) == usable_gib(0, a100)
    # A share of a card (Azure's third of an A10) scales with the labels; so does a
    # different board under the same name (a 48 GB RTX 4090).
    a10 = reg.require("A10")
    assert usable_gib(8, a10) == pytest.approx(usable_gib(24, a10) / 3)
    rtx = reg.require("RTX4090")
    assert usable_gib(47.99, rtx) == pytest.approx(usable_gib(24, rtx) * 47.99 / 24)
    # Without a driver figure (or a spec) the label counts as decimal gigabytes.
    assert usable_gib(141, reg.require("H200-SXM")) == pytest.approx(141e9 * 0.9875 / GIB)
    assert usable_gib(80, None) == pytest.approx(80e9 * 0.9875 / GIB)
    assert usable_gib(0, None) == 0.0


def test_driver_memory_figures_are_sourced_and_the_fallback_never_overstates() -> None:
    with DATA_FILE.open(newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["memory_mib"]]
    assert len(rows) >= 12
    for r in rows:
        assert "http" in r["memory_mib_source"], r["name"]
        mib, label = float(r["memory_mib"]), float(r["memory_gb"])
        # Decimal gigabytes, the reading used without a figure, is at most what every
        # measured card has (to 0.1%: AWS's 22,888 MiB for an A10G is 23.9998e9 bytes);
        # and no card has more than its label read as GiB.
        assert label * 1e9 <= mib * 2**20 * 1.001, r["name"]
        assert mib * 2**20 <= label * GIB, r["name"]


def test_aliases_do_not_point_at_two_models(reg: GpuRegistry) -> None:
    owner: dict[str, str] = {}
    for s in reg.all():
        for alias in (s.name, *s.aliases):
            key = compact(alias)
            assert owner.setdefault(key, s.name) == s.name, f"{alias}: {owner[key]} vs {s.name}"


@pytest.mark.parametrize("name", TABLE_NAMES)
def test_every_table_name_is_known(reg: GpuRegistry, name: str) -> None:
    assert reg.canonical(name, None) is not None, name


@pytest.mark.parametrize(
    ("raw", "memory", "provider", "expected"),
    [
        # AWS GpuInfo names (memory decides A100 40 vs 80 GB; p4de's GpuInfo says "A100")
        ("A100", 40.0, "aws", "A100-40GB-SXM"),
        ("A100", 80.0, "aws", "A100-80GB-SXM"),
        ("H100", 80.0, "aws", "H100-SXM"),
        ("H200", 141.0, "aws", "H200-SXM"),
        ("A10G", 22.35, "aws", "A10G"),
        ("V100", 32.0, "aws", "V100-32GB"),
        ("V100", 16.0, "aws", "V100-16GB"),
        ("NVIDIA", None, "aws", None),
        # GCP accelerator types (API names) and catalog names
        ("nvidia-tesla-a100", None, "gcp", "A100-40GB-SXM"),
        ("nvidia-a100-80gb", None, "gcp", "A100-80GB-SXM"),
        ("nvidia-h100-80gb", None, "gcp", "H100-SXM"),
        ("nvidia-h100-mega-80gb", None, "gcp", "H100-SXM"),
        ("H100-MEGA", None, "gcp", "H100-SXM"),
        ("nvidia-h200-141gb", None, "gcp", "H200-SXM"),
        ("nvidia-l4", None, "gcp", "L4"),
        ("nvidia-tesla-t4", None, "gcp", "T4"),
        ("nvidia-tesla-p4", None, "gcp", "P4"),
        # Azure size names
        ("Standard_ND96isr_H100_v5", None, "azure", "H100-SXM"),
        ("Standard_NC40ads_H100_v5", None, "azure", "H100-NVL"),
        ("Standard_NCC40ads_H100_v5", None, "azure", "H100-NVL"),
        ("Standard_ND96amsr_A100_v4", None, "azure", "A100-80GB-SXM"),
        ("Standard_ND96asr_v4", None, "azure", "A100-40GB-SXM"),
        ("Standard_NC24ads_A100_v4", None, "azure", "A100-80GB-PCIe"),
        ("Standard_NC4as_T4_v3", None, "azure", "T4"),
        ("Standard_NV36ads_A10_v5", None, "azure", "A10"),
        ("Standard_ND40rs_v2", None, "azure", "V100-32GB"),
        ("Standard_NC6s_v3", None, "azure", "V100-16GB"),
        ("Standard_NC24r_Promo", None, "azure", "K80"),
        ("Standard_D4s_v5", None, "azure", None),
        # RunPod: plain A100-80GB / H100 are its PCIe cards
        ("A100-80GB", None, "runpod", "A100-80GB-PCIe"),
        ("A100-80GB-SXM", None, "runpod", "A100-80GB-SXM"),
        ("H100", None, "runpod", "H100-PCIe"),
        ("H100-SXM", None, "runpod", "H100-SXM"),
        ("H100-NVL", None, "runpod", "H100-NVL"),
        ("NVIDIA H100 80GB HBM3", None, "runpod", "H100-SXM"),
        ("NVIDIA A100-SXM4-80GB", None, "runpod", "A100-80GB-SXM"),
        ("NVIDIA GeForce RTX 4090", None, "runpod", "RTX4090"),
        ("AMD Instinct MI300X OAM", None, "runpod", "MI300X"),
        # SkyPilot AcceleratorName and others
        ("A6000", None, "lambda", "RTXA6000"),
        ("RTX6000", None, "lambda", "RTX6000"),
        ("H100", 93.6, "vast", "H100-NVL"),
        ("Gaudi HL-205", None, "aws", "Gaudi-HL205"),
        ("unobtainium-9000", None, None, None),
        ("", None, None, None),
    ],
)
def test_canonical(
    reg: GpuRegistry, raw: str, memory: float | None, provider: str | None, expected: str | None
) -> None:
    """Each provider reads its spellings with its own parsing code (Azure's size names,
    RunPod's PCIe names); the registry alone reads the rest."""
    if provider == "azure":
        assert (size_gpu(raw) or reg.canonical(raw, memory)) == expected
    elif provider == "runpod":
        assert runpod_gpu(raw, memory, reg) == expected
    else:
        assert reg.canonical(raw, memory) == expected


def test_no_provider_knowledge_in_the_registry(reg: GpuRegistry) -> None:
    """Names that mean a card only at one provider are not the registry's to decide."""
    assert reg.canonical("Standard_ND96isr_H100_v5") is None
    assert reg.canonical("H100") == "H100-SXM" and reg.canonical("A100-80GB") == "A100-80GB-SXM"


def test_azure_size_table_ignores_non_gpu_sizes() -> None:
    assert size_gpu("Standard_NP10s") is None
    assert size_gpu("standard_nd96isr_h200_v5") == "H200-SXM"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("H100", {"H100-SXM", "H100-PCIe", "H100-NVL"}),
        ("h100", {"H100-SXM", "H100-PCIe", "H100-NVL"}),
        ("A100", {"A100-40GB-SXM", "A100-40GB-PCIe", "A100-80GB-SXM", "A100-80GB-PCIe"}),
        ("A100-80GB", {"A100-80GB-SXM", "A100-80GB-PCIe"}),
        ("a100-80gb", {"A100-80GB-SXM", "A100-80GB-PCIe"}),
        ("A100-80GB-SXM", {"A100-80GB-SXM"}),
        ("H100-SXM", {"H100-SXM"}),
        ("h100 sxm", {"H100-SXM"}),
        ("nvidia-h100-80gb", {"H100-SXM"}),
        ("V100", {"V100-16GB", "V100-32GB"}),
        ("RTX6000", {"RTX6000"}),  # a full name matches only itself, not RTX6000-Ada
        ("RTX 6000 Ada", {"RTX6000-Ada"}),
        ("A10", {"A10"}),  # not A100: families match at dash boundaries only
        ("rtx4090", {"RTX4090"}),
        ("L4", {"L4"}),
    ],
)
def test_matches(reg: GpuRegistry, query: str, expected: set[str]) -> None:
    assert reg.matches(query) == expected


def test_unknown_query_names_the_closest(reg: GpuRegistry) -> None:
    with pytest.raises(CatalogError) as err:
        reg.matches("H10")
    assert "unknown GPU 'H10'" in str(err.value)
    assert err.value.hint and "H100" in err.value.hint
    with pytest.raises(CatalogError, match="unknown GPU"):
        reg.require("A1OO")


def test_spec_lookup_by_alias_and_case(reg: GpuRegistry) -> None:
    spec = reg.spec("nvidia-tesla-t4")
    assert spec is not None and spec.name == "T4"
    assert reg.spec("t4") is spec
    assert reg.spec("nope") is None


def test_load_registry_is_cached_and_reads_the_bundled_file(reg: GpuRegistry) -> None:
    assert load_registry() is reg
    assert DATA_FILE.is_file()


def test_bad_data_row_is_a_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "gpus.csv"
    header = DATA_FILE.read_text().splitlines()[0]
    bad.write_text(header + "\nX,X,V,A,gpu,lots,1,1,,1,L,1,1,,,src,2026-12-01\n")
    with pytest.raises(CatalogError, match=r"gpus.csv:2: bad GPU spec row"):
        read_registry(bad)
