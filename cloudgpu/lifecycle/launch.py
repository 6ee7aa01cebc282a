"""From a job file to a ranked list of offers and a job record: what `launch` does first.

Offers come from each enabled provider (restricted by ``resources.providers``): a
provider's own :meth:`offers` when it has them (local, ssh, sim), else the catalog's
(cloud providers). Ranking is cloudgpu.lifecycle.select's hourly-price order. A provider
that fails to load or to list offers is skipped with a note, never fatal to the others.
"""

from __future__ import annotations

import getpass
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CloudGPUError, ConfigError
from cloudgpu.lifecycle import states
from cloudgpu.lifecycle.select import Ranking, nothing_fits, rank
from cloudgpu.provider import Provider
from cloudgpu.spec.model import JobSpec
from cloudgpu.state.store import Store

CatalogFn = Callable[[Sequence[str]], list[Offer]]


@dataclass
class Gathered:
    offers: list[Offer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # providers skipped, and why


def owner() -> str:
    """The cloudgpu-owner tag value: who launched, so sweeps touch only their own."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"[:63]


def gather_offers(
    job: JobSpec,
    provider_names: Sequence[str],
    get_provider: Callable[[str], Provider],
    catalog_offers: CatalogFn,
) -> Gathered:
    wanted = job.resources.providers
    unknown = [p for p in wanted if p not in provider_names]
    if unknown:
        raise ConfigError(
            f"{job.source}: resources.providers: unknown provider(s) {', '.join(unknown)}; "
            f"installed: {', '.join(provider_names)}"
        )
    out = Gathered()
    need_catalog = []
    for name in wanted or provider_names:
        try:
            provider = get_provider(name)
            av = provider.availability()
            if not av.enabled:
                out.notes.append(f"{name}: {av.reason}")
                continue
            own = provider.offers()
        except (CloudGPUError, ImportError, AttributeError) as exc:
            out.notes.append(f"{name}: unavailable ({exc})")
            continue
        if own:
            out.offers += own
        else:
            need_catalog.append(name)
    if need_catalog:
        out.offers += catalog_offers(need_catalog)
    return out


def rank_offers(job: JobSpec, gathered: Gathered, gpus: GpuRegistry) -> Ranking:
    """Fitting offers cheapest first; ConfigError naming the closest when none fits."""
    ranking = rank(job, gathered.offers, gpus)
    if not ranking.fits:
        err = nothing_fits(job, ranking)
        if gathered.notes and len(gathered.notes) <= 3:
            err.hint = "; ".join(gathered.notes) + "; or relax the resources"
        elif gathered.notes:
            names = ", ".join(n.split(":", 1)[0] for n in gathered.notes)
            err.hint = f"not enabled: {names} (`cloudgpu check` says why); or relax the resources"
        raise err
    return ranking


def new_job_id(name: str) -> str:
    return f"{name[:40]}-{uuid.uuid4().hex[:6]}"


def create_job(store: Store, job: JobSpec, job_id: str, log_path: str) -> None:
    spec = asdict(job)
    # Values in env: may be tokens; the store keeps only the names (the detached process
    # re-reads the job file itself).
    spec["env"] = dict.fromkeys(job.env, "***")
    store.add_job(
        job_id, job.name, spec, spec_path=job.source, log_path=log_path, state=states.PENDING
    )
