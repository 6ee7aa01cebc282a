"""Kaggle's free GPU accelerators as offers, each with its limits and where they come from.

Kaggle sells no GPU time: notebooks and script kernels get GPUs at no cost within a
weekly GPU quota that Kaggle sets per user and changes from week to week (a "floating"
quota, 30 hours in a usual week), and within a per-session time limit. The figures
below are what Kaggle documents or what real sessions report; the live quota of the
signed-in user comes from the API (``GetAcceleratorQuotaStatistics``, shown by
``cloudgpu check --verify``), and the planner uses the documented figures offline.

Sources (checked 2026-12-01):

* accelerators and their API names: Kaggle/kaggle-api docs/kernels.md, "Accelerators
  available as of Feb 2026" (NvidiaTeslaP100 = the default GPU, NvidiaTeslaT4 = two T4s);
  https://github.com/Kaggle/kaggle-api/blob/main/docs/kernels.md
* weekly quota (floating, usually 30 GPU-hours) and 12-hour sessions:
  https://www.kaggle.com/docs/notebooks ("Technical specifications") and Kaggle's
  floating-quota announcement https://www.kaggle.com/product-feedback/173129
* 20 GB of saved output (/kaggle/working): https://www.kaggle.com/docs/notebooks
* CPU and RAM: what GPU sessions report to wandb (4 logical CPUs, 31.4 GiB RAM; P100
  16 GB or 2 x T4 16 GB), e.g. huggingface.co/Femboyuwu2000/bloomz-1b1-vn-chat
  wandb-metadata.json (2024-04); Kaggle's docs give no per-accelerator RAM figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloudgpu.catalog.offer import FLAG_FREE_TIER, Offer
from cloudgpu.catalog.snapshot import OfferFile

PROVIDER = "kaggle"
OBSERVED = "2026-12-01T00:00:00Z"  # when the figures below were last checked
SOURCE = "kaggle:docs (free tier; https://www.kaggle.com/docs/notebooks)"
WEEKLY_GPU_HOURS = 30.0  # floating; the API reports the user's own figure
SESSION_HOURS = 12.0
OUTPUT_GB = 20.0  # /kaggle/working, saved with the kernel's output


@dataclass(frozen=True)
class Accelerator:
    machine_shape: str  # the API's name (ApiSaveKernelRequest.machine_shape)
    gpu: str  # canonical GPU name in cloudgpu's registry
    gpu_count: int
    gpu_memory_gb: float


ACCELERATORS: tuple[Accelerator, ...] = (
    Accelerator("NvidiaTeslaT4", "T4", 2, 16.0),
    Accelerator("NvidiaTeslaP100", "P100", 1, 16.0),
)


def limits() -> dict[str, float]:
    """The free tier's limits, as every Kaggle offer carries them in ``extra``."""
    return {
        "session_hours": SESSION_HOURS,
        "weekly_quota_hours": WEEKLY_GPU_HOURS,
        "output_gb": OUTPUT_GB,
    }


def free_offers() -> list[Offer]:
    return [
        Offer(
            provider=PROVIDER,
            instance_type=a.machine_shape,
            region="kaggle",
            zone="",
            market="on_demand",
            gpu=a.gpu,
            gpu_count=a.gpu_count,
            gpu_memory_gb=a.gpu_memory_gb,
            vcpus=4,
            memory_gb=31.4,
            price_per_hour=0.0,
            price_source=SOURCE,
            observed_at=OBSERVED,
            flags=(FLAG_FREE_TIER,),
            extra=limits(),
        )
        for a in ACCELERATORS
    ]


def machine_shape(instance_type: str) -> str:
    """The accelerator to ask for; an unknown offer name is refused by Kaggle itself."""
    return instance_type


def offer_file() -> OfferFile:
    """The rows as the bundled catalog keeps them (tools/free_tiers.py writes it)."""
    return OfferFile(
        provider=PROVIDER,
        source=f"{SOURCE}; Kaggle/kaggle-api docs/kernels.md accelerators (Feb 2026)",
        observed_at=OBSERVED,
        offers=free_offers(),
        origin={"checked": OBSERVED[:10]},
        price_source=SOURCE,
        limits=limits(),
    )
