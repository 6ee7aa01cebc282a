"""Google Colab: its free GPU tier as an offer row, and its paid tiers as documented.

Colab has no public API to run a job (notebooks run in a browser session; the REST
surface Google documents is for Colab Enterprise on Vertex AI, a different product
priced like Compute Engine). So this provider only reports rows for comparison: it is
never enabled, so `plan` and `launch` never pick it, and ``create`` refuses with the
reason. ``cloudgpu offers --free`` and buy-vs-rent show the rows.

Sources (checked 2026-12-01):

* free tier: a T4 GPU when available, no guaranteed resources, sessions of at most 12
  hours, idle sessions disconnected: https://research.google.com/colaboratory/faq.html
  ("What are the usage limits of Colab?"). Google publishes no weekly GPU quota for the
  free tier ("usage limits ... fluctuate"), so ``weekly_quota_hours`` is 0 = unknown.
* 2 vCPUs and 12.7 GB RAM in a free T4 session: commonly reported by users (not
  documented by Google); treat as approximate.
* paid tiers: compute units at $9.99 per 100 (pay as you go; Colab Pro $9.99/month
  includes 100, Pro+ $49.99/month 500): https://colab.research.google.com/signup and
  https://techcrunch.com/2022/09/29/google-colaboratory-launches-a-pay-as-you-go-option-premium-gpu-access/.
  Google does not publish how many units an hour of each GPU uses (the notebook UI
  shows it), so paid GPUs get no hourly price here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from cloudgpu.catalog.offer import FLAG_FREE_TIER, Offer
from cloudgpu.catalog.snapshot import OfferFile
from cloudgpu.errors import ConfigError
from cloudgpu.provider import (
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
)

PROVIDER = "colab"
OBSERVED = "2026-12-01T00:00:00Z"
SOURCE = "colab:faq (free tier; https://research.google.com/colaboratory/faq.html)"
NO_API = (
    "Colab has no public API to run a job: open the notebook in a browser "
    "(its rows are for comparison: `cloudgpu offers --free`)"
)
# Documented paid tiers: (name, USD per month or per purchase, compute units included).
PAID_TIERS: tuple[tuple[str, float, int], ...] = (
    ("Pay As You Go", 9.99, 100),
    ("Colab Pro", 9.99, 100),
    ("Colab Pro+", 49.99, 500),
)
USD_PER_COMPUTE_UNIT = 9.99 / 100
LIMITS = {"session_hours": 12.0, "weekly_quota_hours": 0.0}


def free_offers() -> list[Offer]:
    return [
        Offer(
            provider=PROVIDER,
            instance_type="free-T4",
            region="colab",
            zone="",
            market="on_demand",
            gpu="T4",
            gpu_count=1,
            gpu_memory_gb=16.0,
            vcpus=2,
            memory_gb=12.7,
            price_per_hour=0.0,
            price_source=SOURCE,
            observed_at=OBSERVED,
            flags=(FLAG_FREE_TIER,),
            extra=dict(LIMITS),
        )
    ]


def offer_file() -> OfferFile:
    """The row as the bundled catalog keeps it (tools/free_tiers.py writes it)."""
    return OfferFile(
        provider=PROVIDER,
        source=SOURCE,
        observed_at=OBSERVED,
        offers=free_offers(),
        origin={"checked": OBSERVED[:10]},
        price_source=SOURCE,
        limits=dict(LIMITS),
    )


class ColabProvider(Provider):
    name: ClassVar[str] = PROVIDER
    capabilities: ClassVar[Capabilities] = Capabilities()

    def availability(self) -> Availability:
        return Availability(False, NO_API)

    def offers(self) -> list[Offer]:
        return free_offers()

    def create(self, request: CreateRequest) -> Instance:
        raise ConfigError(NO_API)

    def describe(self, instance_id: str) -> Instance:
        return Instance(id=instance_id, provider=PROVIDER, state=InstanceState.TERMINATED)

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        return []

    def terminate(self, instance_id: str) -> None:
        return None


def paid_tiers_note() -> str:
    tiers = "; ".join(f"{n} ${p:.2f} for {u} units" for n, p, u in PAID_TIERS)
    return (
        f"Colab paid tiers: compute units at ${USD_PER_COMPUTE_UNIT:.4f} each ({tiers}); "
        "Google does not publish units per GPU-hour, so they have no $/h here"
    )
