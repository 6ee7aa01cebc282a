"""GCP prices from Cloud Billing Catalog SKUs, and GCP GPU machine shapes as Offers.

GCP has no per-machine price: a VM costs vCPUs x the family's core price + GiB x its
RAM price + GPUs x the GPU price, each a separate SKU of service 6F81-5844-456A
(Compute Engine), per region. SKUs are matched by description, the only place GCP names
the family or GPU. The forms a live catalog uses (tests/fixtures/gcp/skus_list.json cites
where each was seen):

    A2 Instance Core running in Americas              N1 Predefined Instance Ram running in ...
    Spot Preemptible A3Plus Instance Ram running in Tokyo
    Nvidia Tesla T4 GPU running in Americas           H200 141GB GPU running in Americas
    Nvidia Tesla T4 GPU attached to Spot Preemptible VMs running in Americas
    RTX 6000 96GB running in Belgium                  (G4's GPU: no "GPU" word)
    A4 Nvidia B200 (1 gpu slice) running in Americas  (A4: the whole VM per GPU, no core/RAM SKUs)
    Spot Preemptible A4 Nvidia B200 (1 gpu slice) running in Americas

A SKU is Spot when its description says so ("Spot Preemptible ..." or "... attached to
Spot Preemptible VMs ...") or its usage type is ``Preemptible``; else ``OnDemand`` is
on-demand and anything else (commitments) is skipped. Commitment, custom, sole-tenant,
DWS/calendar-mode, reserved and virtual-workstation SKUs are skipped. An offer is made
only when every price it needs exists for its region and market: a missing price is
never guessed (GB200/A4X has no public SKU, so no offer).

GPUs that come with the machine (A2, A3, A4, G2, G4: ``machineType.accelerators``) make
one offer per machine type and zone. GPUs attached to N1 (T4, V100, P100, P4) get one
documented host per GPU count: n1-standard-(4 x count), named
``n1-standard-8+2xnvidia-tesla-t4`` so two GPUs on one host never share an offer key.
This module is pure: it sees plain records, never an SDK object.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import FLAG_UNKNOWN_GPU, Offer

COMPUTE_SERVICE = "services/6F81-5844-456A"
SOURCE = "gcp:cloudbilling-skus"
LOCAL_SSD_GB = 375.0  # each bundled local SSD partition (A2 ultra, A3, A4, G4) is 375 GB
N1_HOST_VCPUS_PER_GPU = 4
_USAGE = {"OnDemand": "on_demand", "Preemptible": "spot"}
_SKIP = re.compile(
    r"commitment|custom|sole tenancy|extended|workstation|premium|reserved|dws|"
    r"defined duration|flex|calendar",
    re.I,
)
_SPOT = re.compile(r"^(?:spot preemptible|preemptible) | attached to spot preemptible vms ", re.I)
# What the SKU prices, once the Spot wording and the "running in <place>" tail are gone.
_STRIP = re.compile(
    r"^(?:spot preemptible |preemptible )|(?: attached to spot preemptible vms)? running in .*$",
    re.I,
)
_CORE = re.compile(r"^(\w+) (?:predefined )?instance core$", re.I)
_RAM = re.compile(r"^(\w+) (?:predefined )?instance ram$", re.I)
_SLICE = re.compile(r"^\w+ (?:nvidia )?(.+?) \(1 gpu slice\)$", re.I)
_GPU = re.compile(r"^(?:nvidia )?(?:tesla )?(.+?)(?: gpu)?$", re.I)
# SKU GPU names whose words differ from the accelerator type's (gpu_key of both sides).
_GPU_ALIASES = {"6000 96gb rtx": "6000 pro rtx"}  # "RTX 6000 96GB" = nvidia-rtx-pro-6000
# Known GPU memory per GCP accelerator name; else the registry's spec, else "NNgb".
_MEMORY = {"nvidia-tesla-a100": 40.0, "nvidia-tesla-p4": 8.0, "nvidia-rtx-pro-6000": 96.0}
# Machine-type prefix -> the family word of its core/RAM SKUs, where the two differ
# ("A3Plus Instance Core" prices a3-megagpu). Others: the first word, upper-cased.
_FAMILIES = {"a3-megagpu": "A3PLUS", "a3-ultragpu": "A3ULTRA"}


@dataclass(frozen=True)
class Sku:
    description: str
    usage_type: str  # OnDemand | Preemptible | Commit1Yr ...
    regions: tuple[str, ...]
    unit_price: float  # USD per unit (h for cores/GPUs, GiBy.h for RAM)
    resource_group: str = ""  # category.resourceGroup: CPU, RAM, GPU, N1Standard, ...


@dataclass(frozen=True)
class MachineType:
    name: str
    zone: str
    vcpus: int
    memory_mb: int
    accelerators: tuple[tuple[str, int], ...] = ()  # (accelerator type, count)
    local_ssds: int = 0


@dataclass(frozen=True)
class AcceleratorType:
    name: str
    zone: str
    max_cards: int


@dataclass
class PriceTable:
    """(kind, key, region, market) -> USD; kind is core/ram (key = family) or gpu."""

    prices: dict[tuple[str, str, str, str], float] = field(default_factory=dict)

    def get(self, kind: str, key: str, region: str, market: str) -> float | None:
        return self.prices.get((kind, key, region, market))


def gpu_key(text: str) -> str:
    """Order-free token key shared by SKU GPU names and accelerator type names:
    "A100 80GB" and "nvidia-a100-80gb" both become "80gb a100"."""
    words = re.split(r"[\s-]+", text.lower())
    return " ".join(sorted(w for w in words if w and w not in ("nvidia", "tesla")))


def sku_market(sku: Sku) -> str | None:
    """on_demand, spot, or None for a SKU that is neither (commitments)."""
    if _SPOT.search(sku.description + " "):
        return "spot"
    return _USAGE.get(sku.usage_type)


def price_table(skus: Iterable[Sku]) -> PriceTable:
    table = PriceTable()
    for sku in skus:
        market = sku_market(sku)
        if market is None or _SKIP.search(sku.description) or sku.unit_price <= 0:
            continue
        entry = _classify(_STRIP.sub("", sku.description.strip()), sku.resource_group)
        if entry is None:
            continue
        for region in sku.regions:
            table.prices.setdefault((*entry, region, market), sku.unit_price)
    return table


def _classify(what: str, group: str) -> tuple[str, str] | None:
    if m := _CORE.match(what):
        return "core", m.group(1).upper()
    if m := _RAM.match(what):
        return "ram", m.group(1).upper()
    if m := _SLICE.match(what):
        return "slice", gpu_key(m.group(1))
    if group in ("GPU", "") and (m := _GPU.match(what)):
        key = gpu_key(m.group(1))
        return "gpu", _GPU_ALIASES.get(key, key)
    return None


def sku_family(machine_type: str) -> str:
    """The family word of a machine type's core/RAM SKUs: a2-highgpu-1g -> A2."""
    for prefix, family in _FAMILIES.items():
        if machine_type.startswith(prefix):
            return family
    return machine_type.split("-", 1)[0].upper()


def compose_type(host: str, accelerator: str | None, count: int) -> str:
    return f"{host}+{count}x{accelerator}" if accelerator else host


def split_type(instance_type: str) -> tuple[str, str | None, int]:
    """Inverse of compose_type: (machine type, attached accelerator or None, count)."""
    host, plus, rest = instance_type.partition("+")
    if not plus:
        return host, None, 0
    count, _, accel = rest.partition("x")
    return host, accel, int(count)


def gpu_memory(accelerator: str, canonical: str | None, registry: GpuRegistry) -> float:
    if accelerator in _MEMORY:
        return _MEMORY[accelerator]
    spec = registry.spec(canonical) if canonical else None
    if spec is not None and spec.memory_gb:
        return spec.memory_gb
    m = re.search(r"(\d+)gb", accelerator)
    return float(m.group(1)) if m else 0.0


def shapes(
    machine_types: Iterable[MachineType], accelerators: Iterable[AcceleratorType]
) -> list[tuple[MachineType, str, int]]:
    """(machine, accelerator, count) for every GPU shape: bundled, then N1 + attached."""
    machines = list(machine_types)
    out = [(m, *m.accelerators[0]) for m in machines if m.accelerators]
    bundled = {a for m in machines for a, _ in m.accelerators}
    by_zone = {(m.zone, m.name): m for m in machines}
    for acc in accelerators:
        if acc.name in bundled or acc.name.endswith("-vws") or not acc.name.startswith("nvidia"):
            continue
        for count in (1, 2, 4, 8):
            host = by_zone.get((acc.zone, f"n1-standard-{N1_HOST_VCPUS_PER_GPU * count}"))
            if count <= acc.max_cards and host is not None:
                out.append((host, acc.name, count))
    return out


def build_offers(
    shape_list: Iterable[tuple[MachineType, str, int]],
    table: PriceTable,
    registry: GpuRegistry,
    observed_at: str,
    regions: frozenset[str] | None = None,
) -> list[Offer]:
    offers = []
    for machine, accel, count in shape_list:
        region = machine.zone.rsplit("-", 1)[0]
        if regions and region not in regions:
            continue
        canonical = registry.canonical(accel, None)
        memory = gpu_memory(accel, canonical, registry)
        if memory <= 0:
            continue  # an accelerator we cannot size is not offered (invariant: memory > 0)
        attached = None if machine.accelerators else accel
        for market in ("on_demand", "spot"):
            price = machine_price(table, machine, accel, count, region, market)
            if price is None:
                continue
            offers.append(
                Offer(
                    provider="gcp",
                    instance_type=compose_type(machine.name, attached, count),
                    region=region,
                    zone=machine.zone,
                    market=market,
                    gpu=canonical or accel,
                    gpu_count=count,
                    gpu_memory_gb=memory,
                    vcpus=float(machine.vcpus),
                    memory_gb=round(machine.memory_mb / 1024, 2),
                    price_per_hour=round(price, 6),
                    nvme_count=machine.local_ssds,
                    nvme_size_gb=LOCAL_SSD_GB if machine.local_ssds else 0.0,
                    price_source=SOURCE,
                    observed_at=observed_at,
                    flags=() if canonical else (FLAG_UNKNOWN_GPU,),
                    extra={"machine_type": machine.name, "accelerator_type": accel},
                )
            )
    return offers


def machine_price(
    table: PriceTable, machine: MachineType, accel: str, count: int, region: str, market: str
) -> float | None:
    """The VM's hourly price: cores + RAM + GPUs, or GPUs x the per-GPU slice price
    where GCP sells the whole VM by the GPU (A4); None when any part is unpriced."""
    key = gpu_key(accel)
    whole = table.get("slice", key, region, market)
    if whole is not None:
        return count * whole
    family = sku_family(machine.name)
    core = table.get("core", family, region, market)
    ram = table.get("ram", family, region, market)
    gpu = table.get("gpu", key, region, market)
    if core is None or ram is None or gpu is None:
        return None
    return machine.vcpus * core + machine.memory_mb / 1024 * ram + count * gpu


# GPUs that GCP attaches to N1 hosts, by canonical name (for offers from the snapshot,
# whose instance type is the bare host).
ATTACHABLE = {
    "T4": "nvidia-tesla-t4",
    "V100-16GB": "nvidia-tesla-v100",
    "P100": "nvidia-tesla-p100",
    "P4": "nvidia-tesla-p4",
}


def accelerator_for(offer: Offer) -> tuple[str, str | None, int]:
    """(machine type, accelerator to attach or None when bundled, count) for create()."""
    host, accel, count = split_type(offer.instance_type)
    if accel:
        return host, accel, count
    if host.startswith("n1-") and offer.gpu_count:
        named = offer.extra.get("accelerator_type") if offer.extra else None
        attach = str(named) if named else ATTACHABLE.get(offer.gpu)
        if attach:
            return host, attach, offer.gpu_count
    return host, None, 0
