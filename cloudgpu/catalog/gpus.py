"""The GPU spec registry: what each accelerator is, and every name it goes by.

Specs come from the bundled ``data/gpus.csv`` (one row per model, each with its source
and date). This module answers four questions: the spec of a name, the canonical name
of a spelling (:meth:`GpuRegistry.canonical`), which canonical names a user's query
means (:meth:`GpuRegistry.matches`), and how much memory a program can really allocate
on a card (:func:`usable_gib`). It must not know about prices, offers, providers or
their APIs: spellings are data (aliases) plus the few rules below that need the memory
size to decide; what a name means at one provider only is that provider's code.
"""

from __future__ import annotations

import csv
import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cloudgpu.errors import CatalogError

DATA_FILE = Path(__file__).resolve().parent / "data" / "gpus.csv"

KIND_GPU = "gpu"  # other kinds: "accelerator" (ASIC), "fpga", "tpu"

GIB = float(2**30)
# A card's "80 GB" is a label, not a unit: the driver reports 81,920 MiB for an A100 80GB
# (HBM: the label is about GiB) but 46,068 MiB = 45.0 GiB for an L40S "48 GB" (GDDR6
# with ECC on, as clouds run it, gives up 1/16). gpus.csv's memory_mib is the driver's
# figure (nvidia-smi memory.total) where a published one was found. Of that, CUDA keeps
# a share the program never sees: PyTorch's "X GiB total capacity" is 79.14-79.25 on an
# A100 80GB (81,920 MiB), 39.50 on a 40GB (40,960), 14.74-14.76 on a T4 (15,360) and
# 23.68 on an RTX 4090 (24,564): 0.9-1.7%, median 1.25% (github.com/lianqi1008/
# Control-GIC/issues/6, levihsu/OOTDiffusion/issues/235, TianheWu/CoSeR/issues/10,
# zai-org/CogVideo/issues/741 and /36).
DRIVER_RESERVED = 0.0125
# A label without a driver figure is read as decimal gigabytes: the least it can mean
# (every card above has at least that much: the L40S's 46,068 MiB is 48.3e9 bytes).
LABEL_BYTES_PER_GB = 1e9
SAME_CARD = 0.10  # an offer's label within 10% of the spec's is the same card


@dataclass(frozen=True, slots=True)
class GpuSpec:
    name: str  # canonical, e.g. "H100-SXM"
    family: str  # "H100", "A100", ...
    vendor: str
    architecture: str
    memory_gb: float
    memory_bw_tbs: float  # 0.0 = not published
    bf16_tflops: float  # dense, no sparsity; FP16 tensor where there is no BF16; 0 = unknown
    fp8_tflops: float | None
    fp32_tflops: float  # 0.0 = not published
    link: str  # scale-up link, e.g. "NVLink4", "PCIe4"
    link_gbps: float  # GB/s per direction per GPU; 0 = not published
    tdp_w: float  # 0.0 = not published
    purchase_usd: float | None
    aliases: tuple[str, ...]
    source: str
    date: str
    kind: str = KIND_GPU
    memory_mib: float | None = None  # what the driver reports (nvidia-smi memory.total)

    @property
    def is_gpu(self) -> bool:
        return self.kind == KIND_GPU


def usable_gib(label_gb: float, spec: GpuSpec | None = None) -> float:
    """GiB a program can allocate on one GPU an offer labels ``label_gb`` (0: unknown).

    A label close to the spec's is that card: the driver's figure when the registry has
    one. A label well below it is a share (a fractional GPU, a MIG slice) and one above
    it a different board (a 48 GB RTX 4090): the card's figure scaled by the labels.
    Without a spec, the label in decimal gigabytes. Less the driver's reserved share."""
    label = label_gb or (spec.memory_gb if spec is not None else 0.0)
    if label <= 0:
        return 0.0
    if spec is not None and spec.memory_gb > 0:
        card = (spec.memory_mib or 0.0) * 2**20 or spec.memory_gb * LABEL_BYTES_PER_GB
        ratio = label / spec.memory_gb
        total = card if abs(ratio - 1.0) <= SAME_CARD else card * ratio
    else:
        total = label * LABEL_BYTES_PER_GB
    return total * (1.0 - DRIVER_RESERVED) / GIB


def compact(name: str) -> str:
    """Spelling-insensitive key: upper case, letters and digits only ("h100 sxm" ->
    "H100SXM"). Both the registry and user input go through it."""
    return re.sub(r"[^A-Z0-9]", "", name.upper())


def _segment_prefixes(name: str) -> list[str]:
    """ "A100-80GB-SXM" -> ["A100", "A100-80GB"]: the dash-bounded groups a name is in."""
    parts = name.split("-")
    return ["-".join(parts[:i]) for i in range(1, len(parts))]


# Spellings that need the memory size to pick a variant. The table's AcceleratorName
# "A100" is 40 GB on AWS p4d / GCP a2-highgpu but 80 GB elsewhere; an "H100" with 94 GB
# is the NVL card. Spellings that mean different cards at different providers (RunPod's
# plain "H100" is its PCIe card) are the provider's to map, in its own parsing code.
def _a100(mem: float | None) -> str:
    return "A100-80GB-SXM" if mem and mem >= 60 else "A100-40GB-SXM"


def _h100(mem: float | None) -> str:
    return "H100-NVL" if mem and mem >= 90 else "H100-SXM"


def _v100(mem: float | None) -> str:
    return "V100-32GB" if mem and mem >= 24 else "V100-16GB"


def _fixed(name: str) -> Callable[[float | None], str]:
    return lambda mem: name


_CONTEXT_RULES: dict[str, Callable[[float | None], str]] = {
    "A100": _a100,
    "A10080GB": _fixed("A100-80GB-SXM"),
    "A10040GB": _fixed("A100-40GB-SXM"),
    "H100": _h100,
    "H100PCIE": _fixed("H100-PCIe"),
    "V100": _v100,
    "H200": _fixed("H200-SXM"),
    "NVIDIA": _fixed(""),  # AWS GpuInfo for some instance types: not a model name
}


class GpuRegistry:
    """Immutable set of specs with lookup by name, alias and family."""

    def __init__(self, specs: list[GpuSpec]) -> None:
        self._specs = {s.name: s for s in specs}
        self._names = {compact(s.name): s.name for s in specs}
        self._aliases: dict[str, str] = {}
        self._groups: dict[str, set[str]] = {}
        for s in specs:
            for alias in s.aliases:
                self._aliases.setdefault(compact(alias), s.name)
            for group in {s.family, *_segment_prefixes(s.name)}:
                self._groups.setdefault(compact(group), set()).add(s.name)

    def all(self) -> list[GpuSpec]:
        return list(self._specs.values())

    def families(self) -> list[str]:
        return sorted({s.family for s in self._specs.values()})

    def spec(self, name: str) -> GpuSpec | None:
        """Spec of a canonical name or alias (case and punctuation forgiven)."""
        key = compact(name)
        canon = self._names.get(key) or self._aliases.get(key)
        return self._specs[canon] if canon else None

    def require(self, name: str) -> GpuSpec:
        spec = self.spec(name)
        if spec is None:
            raise self._unknown(name)
        return spec

    def canonical(self, raw: str, memory_gb: float | None = None) -> str | None:
        """Canonical name of a provider's spelling, or None when unknown.

        ``memory_gb`` (per GPU) tells A100 40 GB from 80 GB and V100 16 from 32 GB.
        """
        if not raw or not raw.strip():
            return None
        key = compact(raw)
        rule = _CONTEXT_RULES.get(key)
        if rule is not None:
            return rule(memory_gb) or None
        if key in self._names:
            return self._names[key]
        if key in self._aliases:
            return self._aliases[key]
        # A name that is a family with one model ("L4", "T4") is the model itself.
        group = self._groups.get(key)
        if group and len(group) == 1:
            return next(iter(group))
        return None

    def matches(self, query: str) -> frozenset[str]:
        """Canonical names a user's query means.

        A full canonical name matches only itself; a family or dash-bounded prefix
        matches every variant under it ("H100" -> SXM, PCIe, NVL; "A100-80GB" -> its SXM
        and PCIe); an alias matches its model. Unknown -> CatalogError with the closest.
        """
        key = compact(query)
        if not key:
            raise CatalogError("empty GPU name", hint=f"known: {', '.join(self.families())}")
        if key in self._names:
            return frozenset({self._names[key]})
        if key in self._groups:
            return frozenset(self._groups[key])
        if key in self._aliases:
            return frozenset({self._aliases[key]})
        raise self._unknown(query)

    def closest(self, name: str, n: int = 4) -> list[str]:
        candidates = {compact(c): c for c in [*self._specs, *self.families()]}
        close = difflib.get_close_matches(compact(name), list(candidates), n=n, cutoff=0.5)
        return [candidates[c] for c in close]

    def _unknown(self, name: str) -> CatalogError:
        close = self.closest(name)
        hint = (
            f"did you mean {', '.join(close)}?"
            if close
            else "run `cloudgpu gpus` for the known names"
        )
        return CatalogError(f"unknown GPU '{name}'", hint=hint)


def _opt_float(text: str) -> float | None:
    return float(text) if text.strip() else None


def _row_to_spec(row: dict[str, str]) -> GpuSpec:
    return GpuSpec(
        name=row["name"],
        family=row["family"],
        vendor=row["vendor"],
        architecture=row["architecture"],
        memory_gb=float(row["memory_gb"]),
        memory_bw_tbs=_opt_float(row["memory_bw_tbs"]) or 0.0,
        bf16_tflops=_opt_float(row["bf16_tflops"]) or 0.0,
        fp8_tflops=_opt_float(row["fp8_tflops"]),
        fp32_tflops=_opt_float(row["fp32_tflops"]) or 0.0,
        link=row["link"],
        link_gbps=_opt_float(row["link_gbps"]) or 0.0,
        tdp_w=_opt_float(row["tdp_w"]) or 0.0,
        purchase_usd=_opt_float(row["purchase_usd"]),
        aliases=tuple(a for a in row["aliases"].split("|") if a),
        source=row["source"],
        date=row["date"],
        kind=row["kind"] or KIND_GPU,
        memory_mib=_opt_float(row.get("memory_mib") or ""),
    )


def read_registry(path: Path) -> GpuRegistry:
    """Parse a gpus.csv; any malformed row is a CatalogError naming file and line."""
    specs = []
    with path.open(newline="", encoding="utf-8") as fh:
        for lineno, row in enumerate(csv.DictReader(fh), start=2):
            try:
                specs.append(_row_to_spec(row))
            except (KeyError, ValueError, TypeError) as exc:
                raise CatalogError(f"{path}:{lineno}: bad GPU spec row: {exc}") from exc
    return GpuRegistry(specs)


@cache
def load_registry() -> GpuRegistry:
    """The bundled registry (parsed once per process; the object is never mutated)."""
    return read_registry(DATA_FILE)
