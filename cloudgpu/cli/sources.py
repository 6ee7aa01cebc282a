"""The inputs of the one gather + plan path, built from the App: where offers come from
(providers and catalog), the startup history in the state store, the job's data size
(local trees walked, remote sources listed).
Shared by plan, launch, runner start and report plan so they cannot drift apart; kept
out of cli/context.py so commands that do not plan (`offers`) do not import the planner.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import click

from cloudgpu.catalog.catalog import bundled_providers, cached_providers, load_catalog
from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer
from cloudgpu.cli.context import App
from cloudgpu.data import pull, uri
from cloudgpu.data.select import selector_for
from cloudgpu.errors import CloudGPUError
from cloudgpu.lifecycle.stage import local_excludes
from cloudgpu.planner.calibrate import RunHistory
from cloudgpu.planner.choose import Choice, OfferSources, local_data_bytes, plan_job
from cloudgpu.planner.overhead import StartupHistory
from cloudgpu.spec.model import DataItem, JobSpec


def warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def offer_sources(app: App) -> OfferSources:
    def catalog(names: Sequence[str]) -> list[Offer]:
        return load_catalog(app.paths, names, warn=warn).offers

    default = app.config.defaults().get("providers")
    return OfferSources(
        capabilities=app.registry.capabilities,
        provider_names=app.registry.names(),
        provider=app.registry.get,
        catalog=catalog,
        catalog_names=sorted(set(bundled_providers()) | set(cached_providers(app.paths))),
        provider_regions=app.config.provider_regions(),
        default_providers=tuple(default) if isinstance(default, list) else (),
        configured=tuple(app.config.data.get("providers", {})),
        whatif=app.registry.whatif_names(),
    )


def remote_size(app: App, job: JobSpec) -> Callable[[DataItem], int | None]:
    """A remote data source's size as staging will pull it: its listing (metadata only,
    with the client's credentials) after the item's excludes and .cloudgpuignore."""

    def size(item: DataItem) -> int | None:
        try:
            selector = selector_for(item.exclude, Path(job.base_dir or "."))
            return pull.list_source(item.src, selector, app.env).bytes
        except (CloudGPUError, ValueError) as exc:
            shown = str(uri.parse(item.src)) if uri.is_remote(item.src) else item.src
            warn(f"{shown}: size not known ({exc}); the plan counts no staging time for it")
            return None

    return size


def startup_history(app: App) -> StartupHistory:
    """Measured startup times from the state store, and each provider's own typical
    figure where there are none (read from its class when first asked for)."""

    def default_of(name: str) -> float:
        return app.registry.capabilities(name).startup_s

    if not app.paths.state_db.exists():
        return StartupHistory(default_of=default_of)
    store = app.store()
    try:
        return StartupHistory.from_store(store).with_defaults(default_of)
    finally:
        store.close()


def run_history(app: App) -> RunHistory:
    """The user's measured runs (jobs that reported tokens/s), which correct estimates."""
    if not app.paths.state_db.exists():
        return RunHistory()
    store = app.store()
    try:
        return RunHistory.from_store(store)
    finally:
        store.close()


def choose(
    app: App, job: JobSpec, *, objective: str = "cheapest", all_providers: bool = False
) -> Choice:
    """The job's plan exactly as launch will use it."""
    return plan_job(
        job,
        offer_sources(app),
        registry=load_registry(),
        history=startup_history(app),
        runs=run_history(app),
        data_bytes=local_data_bytes(
            job, warn, remote_size(app, job), lambda item, path: local_excludes(job, item, path)
        ),
        objective=objective,
        all_providers=all_providers,
    )
