"""Gather offers for a job and plan it: the one path `plan`, `launch`, `runner start` and
`report plan` share, so a preview shows exactly what a launch will try.

:func:`gather_offers` collects the offers of the providers a job may use: by default the
*enabled* ones (what a launch can provision; a provider's own offers for local, ssh and
sim, the catalog's for the clouds), or with ``all_providers`` every provider the catalog
knows, enabled or not (a what-if over the whole market). :func:`plan_job` plans them with
the state store's startup history and the job's local data size, and
:func:`local_data_bytes` measures that size the way staging sends it. Everything it reads
is passed in (:class:`OfferSources`, the history); the CLI only parses and renders.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cloudgpu.catalog.gpus import GpuRegistry
from cloudgpu.catalog.offer import Offer, describe_offer
from cloudgpu.catalog.requirements import from_resources
from cloudgpu.errors import CloudGPUError, ConfigError
from cloudgpu.planner.calibrate import RunHistory
from cloudgpu.planner.candidate import Candidate, Plan
from cloudgpu.planner.overhead import StartupHistory
from cloudgpu.planner.rank import plan
from cloudgpu.provider import Capabilities, Provider
from cloudgpu.spec.model import DataItem, JobSpec

Warn = Callable[[str], None]


@dataclass(frozen=True)
class OfferSources:
    """Where offers come from, handed in by whoever owns the registry and the catalog."""

    provider_names: Sequence[str]  # installed providers (entry points)
    provider: Callable[[str], Provider]  # an instance by name (Registry.get)
    catalog: Callable[[Sequence[str]], list[Offer]]  # catalog offers of these providers
    catalog_names: Sequence[str]  # providers the catalog has a table for
    provider_regions: Mapping[str, Sequence[str]] = field(default_factory=dict)
    default_providers: Sequence[str] = ()  # [defaults] providers in config.toml
    configured: Sequence[str] = ()  # providers with a [providers.NAME] table
    # Providers a what-if asks even unnamed (declared in metadata: Registry.whatif_names).
    whatif: Sequence[str] = ()
    # A plugin's capabilities by name (its class; default: ask an instance).
    capabilities: Callable[[str], Capabilities] | None = None

    def caps(self, name: str) -> Capabilities:
        if self.capabilities is not None:
            return self.capabilities(name)
        return self.provider(name).capabilities


@dataclass
class Gathered:
    offers: list[Offer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # providers skipped, and why
    left_out: list[str] = field(default_factory=list)  # offers no launch could use, and why


@dataclass
class Choice:
    """A job's plan and where its offers came from."""

    job: JobSpec
    plan: Plan
    gathered: Gathered
    registry: GpuRegistry
    provider_regions: Mapping[str, Sequence[str]] = field(default_factory=dict)
    all_providers: bool = False

    @property
    def candidates(self) -> list[Candidate]:
        """What a launch tries, in order: the fitting candidates, each at the node count
        the planner chose (the job's num_nodes, or its pick within a range)."""
        return list(self.plan.candidates)

    @property
    def tokens_per_s(self) -> dict[str, float]:
        """Offer key -> the estimated tokens/s there (only where the workload gives one)."""
        return {c.offer.key: c.tokens_per_s for c in self.candidates if c.tokens_per_s}

    @property
    def nodes(self) -> dict[str, int]:
        """Offer key -> nodes to provision of it."""
        return {c.offer.key: c.num_nodes for c in self.candidates}

    @property
    def offers(self) -> list[Offer]:
        return [c.offer for c in self.candidates]

    def require(self) -> list[Offer]:
        """The offers to try, best first; ConfigError saying why when none fits."""
        offers = self.offers
        if not offers:
            raise nothing_fits(self)
        return offers


def wanted_providers(job: JobSpec, sources: OfferSources, all_providers: bool) -> list[str]:
    """The providers a job may use: its ``resources.providers``, else config's
    ``[defaults] providers``, else every installed (or, for a what-if, catalogued) one."""
    known = list(dict.fromkeys([*sources.provider_names, *sources.catalog_names]))
    listed = list(job.resources.providers) or list(sources.default_providers)
    allowed = known if all_providers else list(sources.provider_names)
    unknown = [p for p in listed if p not in allowed]
    if unknown:
        where = "resources.providers" if job.resources.providers else "defaults.providers"
        raise ConfigError(
            f"{job.source or job.name}: {where}: unknown provider(s) {', '.join(unknown)}; "
            f"installed: {', '.join(sources.provider_names)}"
        )
    return listed or (known if all_providers else list(sources.provider_names))


def gather_offers(job: JobSpec, sources: OfferSources, *, all_providers: bool = False) -> Gathered:
    """Offers of the providers ``job`` may use (see the module docstring). A provider that
    fails to load or to list its offers is skipped with a note, never fatal."""
    names = wanted_providers(job, sources, all_providers)
    out = Gathered()
    from_catalog: list[str] = []
    for name in names:
        if all_providers and name in sources.catalog_names:
            from_catalog.append(name)  # a what-if: enabled or not
            continue
        if all_providers and not _worth_asking(name, job, sources):
            continue
        try:
            provider = sources.provider(name)
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
        elif name in sources.catalog_names:
            from_catalog.append(name)
    if from_catalog:
        out.offers += sources.catalog(from_catalog)
    return _buyable(out, sources)


def _buyable(out: Gathered, sources: OfferSources) -> Gathered:
    out.offers, left_out = buyable(out.offers, sources.caps)
    out.left_out += left_out
    return out


def buyable(
    offers: Sequence[Offer], caps_of: Callable[[str], Capabilities]
) -> tuple[list[Offer], list[str]]:
    """Leave out the spot offers of providers that create no spot instances (a bundled
    table may still list a retired spot market): a launch could only fail over them.
    The offers kept, and a note per provider for what was left out."""
    spot = Counter(o.provider for o in offers if o.market == "spot")
    no_spot = {name for name in spot if not caps_of(name).spot}
    kept = [o for o in offers if not (o.market == "spot" and o.provider in no_spot)]
    notes = [
        f"{name}: {spot[name]} spot offer(s) left out (it creates no spot instances)"
        for name in sorted(no_spot)
    ]
    return kept, notes


def _worth_asking(name: str, job: JobSpec, sources: OfferSources) -> bool:
    """In a what-if, a provider without a catalog table (ssh, sim) is asked for its own
    machines only when the job names it, the config has a table for it, or it declares
    them cheap to list (local: this machine): loading the others (ssh imports paramiko)
    would cost more than the plan."""
    return name in job.resources.providers or name in sources.configured or name in sources.whatif


def plan_job(
    job: JobSpec,
    sources: OfferSources,
    *,
    registry: GpuRegistry,
    history: StartupHistory | None = None,
    runs: RunHistory | None = None,
    data_bytes: int | None = None,
    objective: str = "cheapest",
    all_providers: bool = False,
) -> Choice:
    """Gather and plan: the ranked candidates every command shows or launches, sized with
    the state store's startup ``history`` and measured ``runs`` and the job's data size."""
    gathered = gather_offers(job, sources, all_providers=all_providers)
    result = plan(
        job,
        gathered.offers,
        registry=registry,
        objective=objective,
        history=history,
        runs=runs,
        data_bytes=data_bytes,
        provider_regions=sources.provider_regions,
        capabilities=sources.caps,
    )
    return Choice(job, result, gathered, registry, sources.provider_regions, all_providers)


def nothing_fits(choice: Choice) -> ConfigError:
    """The error for a job nothing fits: the planner's explanation (budget, runtime,
    memory), else the closest offer and everything it lacks."""
    job, p = choice.job, choice.plan
    where = job.source or job.name
    hint = "relax resources in the job file, or enable more providers (`cloudgpu check`)"
    notes = choice.gathered.notes
    if notes and len(notes) <= 3:  # few enough to say why each is out
        hint = "; ".join(notes) + "; or relax the resources"
    elif notes:
        names = ", ".join(n.split(":", 1)[0] for n in notes)
        hint = f"not enabled: {names} (`cloudgpu check` says why); or relax the resources"
    if notes and not choice.all_providers:
        hint += "; `cloudgpu plan --all-providers` compares every provider's offers"
    if p.needs:
        return ConfigError(f"{where}: no offer fits: {p.needs}", hint=hint)
    if not p.rejected:
        # Why the wanted providers gave none (e.g. "gcp: not enabled: install cloudgpu[gcp]").
        why = "; ".join(notes[:3]) + "; " if notes else ""
        return ConfigError(
            f"{where}: no offers to choose from",
            hint=f"{why}enable a provider (`cloudgpu check`) or remove resources.providers",
        )
    costed = [c for c in p.rejected if c.memory_per_gpu_gib is not None or c.est_cost is not None]
    if costed:  # met the resources; the workload or the limits rejected them
        reasons = sorted({c.reason for c in costed if c.reason})[:3]
        return ConfigError(f"{where}: no offer fits: {'; '.join(reasons)}", hint=hint)
    reqs = from_resources(
        job.resources, needs_gpu=p.workload is not None, provider_regions=choice.provider_regions
    ).compile(choice.registry)
    # The closest: the fewest requirements missed, then the cheapest.
    missed = [(reqs.reasons(c.offer), c.offer) for c in p.rejected]
    reasons, offer = min(missed, key=lambda m: (len(m[0]), m[1].price_per_hour, m[1].key))
    return ConfigError(
        f"{where}: no offer fits resources ({len(p.rejected)} considered); closest is "
        f"{describe_offer(offer)}: {'; '.join(reasons)}",
        hint=hint,
    )


# -- the data a job stages --------------------------------------------------------------


Exclude = Callable[[str, bool], bool]  # (path under the source, is a directory)


def local_data_bytes(
    job: JobSpec,
    warn: Warn | None = None,
    remote: Callable[[DataItem], int | None] | None = None,
    exclude_of: Callable[[DataItem, Path], Exclude | None] | None = None,
) -> int | None:
    """Bytes staging will move for the job's data sources; None when a source is missing
    or remote without ``remote`` (the planner then uses the workload's ``data_size``).
    ``remote`` gives a remote source's size as its listing says (None: not known); the
    caller owns the stores' credentials, this module reaches no store itself.
    ``exclude_of`` gives what a local tree leaves out (its ``exclude:`` and
    .cloudgpuignore files), so the size is what staging sends.

    Counted as staging sends them: regular files; symlinks inside a source are copied as
    links (no bytes, never followed, so a loop cannot trap the walk); sockets, FIFOs and
    devices are not sent. An entry that vanishes or cannot be read is skipped with a
    warning naming it instead of failing the plan."""
    if not job.data:
        return None
    total = 0
    for i, item in enumerate(job.data):
        if "://" in item.src:
            size = remote(item) if remote is not None else None
            if size is None:
                return None
            total += size
            continue
        path = Path(job.base_dir or ".", os.path.expanduser(item.src))
        exclude = exclude_of(item, path) if exclude_of is not None and path.is_dir() else None
        size = _tree_bytes(path, f"data[{i}].src", warn or _no_warning, exclude)
        if size is None:
            return None
        total += size
    return total


def _no_warning(message: str) -> None:
    return None


def _tree_bytes(root: Path, what: str, warn: Warn, exclude: Exclude | None = None) -> int | None:
    """Bytes of regular files under ``root`` (followed itself, as staging does), less
    what ``exclude`` names (an excluded directory is not walked)."""
    try:
        top = root.stat()
    except OSError:
        return None  # missing or dangling: the job file's validation reports it
    if stat.S_ISREG(top.st_mode):
        return top.st_size
    if not stat.S_ISDIR(top.st_mode):
        return 0
    total = 0
    skipped: list[str] = []
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if exclude is not None:
                        rel = os.path.relpath(entry.path, root)
                        if exclude(rel, entry.is_dir(follow_symlinks=False)):
                            continue
                    total += _entry_bytes(entry, stack, skipped)
        except OSError as exc:
            skipped.append(f"{folder} ({exc.strerror or exc})")
    if skipped:
        more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        warn(
            f"{what}: {len(skipped)} unreadable entr{'y' if len(skipped) == 1 else 'ies'} "
            f"left out of the data size: {', '.join(skipped[:3])}{more}"
        )
    return total


def _entry_bytes(entry: os.DirEntry[str], stack: list[str], skipped: list[str]) -> int:
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError as exc:
        skipped.append(f"{entry.path} ({exc.strerror or exc})")
        return 0
    if stat.S_ISDIR(st.st_mode):
        stack.append(entry.path)
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0
