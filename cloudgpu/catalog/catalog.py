"""The offer catalog: every provider's offers, from its refresh cache or bundled snapshot.

For each provider a valid cache file (written by `cloudgpu catalog refresh`) replaces the
bundled snapshot; a corrupt or truncated cache is reported as a warning and the snapshot
is used instead. Offers older than the staleness threshold are marked stale. This module
must not import provider plugins or cloud SDKs: `cloudgpu offers` reads files only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cloudgpu.catalog import snapshot
from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CatalogError
from cloudgpu.paths import Paths

SNAPSHOT_DIR = Path(__file__).resolve().parent / "data"
SNAPSHOT_PREFIX = "offers-"
DEFAULT_STALE_DAYS = 30.0


@dataclass(frozen=True)
class SourceInfo:
    provider: str
    source: str
    offer_count: int
    observed_at: str  # ISO 8601 UTC
    from_cache: bool
    stale: bool
    path: str
    skipped: dict[str, int] = field(default_factory=dict)
    age_days: float = 0.0


@dataclass
class Catalog:
    offers: list[Offer]
    sources: dict[str, SourceInfo]
    now: datetime
    stale_after_days: float = DEFAULT_STALE_DAYS
    warnings: list[str] = field(default_factory=list)
    _stale_memo: dict[str, bool] = field(default_factory=dict, repr=False)

    def is_stale(self, offer: Offer) -> bool:
        """Whether the offer's price was observed longer ago than the threshold."""
        key = offer.observed_at
        hit = self._stale_memo.get(key)
        if hit is None:
            hit = is_stale(key, self.now, self.stale_after_days)
            self._stale_memo[key] = hit
        return hit

    def providers(self) -> list[str]:
        return sorted(self.sources)

    def total_offers(self) -> int:
        """Offers in every loaded source (including those a GPU filter left unread)."""
        return sum(info.offer_count for info in self.sources.values())


def parse_time(text: str) -> datetime | None:
    if not text:
        return None
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


def is_stale(observed_at: str, now: datetime, stale_after_days: float) -> bool:
    """Unknown observation time counts as stale: an undated price cannot be trusted."""
    dt = parse_time(observed_at)
    return dt is None or now - dt > timedelta(days=stale_after_days)


def age_days(observed_at: str, now: datetime) -> float:
    dt = parse_time(observed_at)
    return (now - dt).total_seconds() / 86400.0 if dt else float("inf")


def bundled_providers(snapshot_dir: Path = SNAPSHOT_DIR) -> list[str]:
    """Providers with a bundled snapshot file."""
    return sorted(
        p.name[len(SNAPSHOT_PREFIX) : -len(".json")]
        for p in snapshot_dir.glob(f"{SNAPSHOT_PREFIX}*.json")
    )


def snapshot_path(provider: str, snapshot_dir: Path = SNAPSHOT_DIR) -> Path:
    return snapshot_dir / f"{SNAPSHOT_PREFIX}{provider}.json"


def cache_path(paths: Paths, provider: str) -> Path:
    return paths.catalog_cache / f"{provider}.json"


def cached_providers(paths: Paths) -> list[str]:
    d = paths.catalog_cache
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


def _stderr_warning(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _load_one(
    paths: Paths,
    provider: str,
    snapshot_dir: Path,
    warnings: list[str],
    gpus: Collection[str] | None,
) -> tuple[snapshot.OfferFile, Path, bool] | None:
    """The provider's cache when valid, else its bundled snapshot, else None."""
    cpath = cache_path(paths, provider)
    if cpath.is_file():
        try:
            data = snapshot.read(cpath, gpus)
            if data.provider != provider:
                raise CatalogError(f"{cpath}: holds offers of '{data.provider}'")
            return data, cpath, True
        except CatalogError as exc:
            warnings.append(f"{exc}; using the bundled snapshot for {provider}")
    spath = snapshot_path(provider, snapshot_dir)
    if spath.is_file():
        return snapshot.read(spath, gpus), spath, False
    return None


def load_catalog(
    paths: Paths,
    providers: Iterable[str] | None = None,
    *,
    now: datetime | None = None,
    stale_after_days: float = DEFAULT_STALE_DAYS,
    snapshot_dir: Path = SNAPSHOT_DIR,
    warn: Callable[[str], None] | None = _stderr_warning,
    gpus: Collection[str] | None = None,
) -> Catalog:
    """Load the offers of ``providers`` (default: every bundled or cached provider).

    ``gpus`` (canonical names) keeps only those GPUs' offers, a fast path for queries
    that name a GPU; ``SourceInfo.offer_count`` still counts every offer of the source.

    ``warn`` receives each fallback warning (default: printed to stderr); they are also
    kept in ``Catalog.warnings``. A provider with neither cache nor snapshot is skipped.
    """
    now = now or datetime.now(UTC)
    names = (
        sorted(set(bundled_providers(snapshot_dir)) | set(cached_providers(paths)))
        if providers is None
        else list(dict.fromkeys(providers))
    )
    catalog = Catalog(offers=[], sources={}, now=now, stale_after_days=stale_after_days)
    for name in names:
        loaded = _load_one(paths, name, snapshot_dir, catalog.warnings, gpus)
        if loaded is None:
            continue
        data, path, from_cache = loaded
        catalog.offers.extend(data.offers)
        catalog.sources[name] = SourceInfo(
            provider=name,
            source=data.source,
            offer_count=data.total if data.total >= 0 else len(data.offers),
            observed_at=data.observed_at,
            from_cache=from_cache,
            stale=is_stale(data.observed_at, now, stale_after_days),
            path=str(path),
            skipped=data.skipped,
            age_days=age_days(data.observed_at, now),
        )
    if warn is not None:
        for message in catalog.warnings:
            warn(message)
    return catalog


def write_cache(
    paths: Paths,
    provider: str,
    offers: list[Offer],
    source: str,
    *,
    now: datetime | None = None,
) -> Path:
    """Store freshly fetched offers; they replace the provider's snapshot from now on.

    Refuses an empty list: a refresh that found nothing must not hide the snapshot.
    """
    if not offers:
        raise CatalogError(f"{provider}: refresh returned no offers; cache left unchanged")
    wrong = {o.provider for o in offers} - {provider}
    if wrong:
        raise CatalogError(f"{provider}: refresh returned offers of {', '.join(sorted(wrong))}")
    observed = (now or datetime.now(UTC)).isoformat(timespec="seconds").replace("+00:00", "Z")
    kept = [o for o in offers if snapshot.possible(o)]  # a negative price is no offer
    if not kept:
        raise CatalogError(f"{provider}: refresh returned no possible offers; cache unchanged")
    skipped = {"impossible values (negative price, NaN)": len(offers) - len(kept)}
    path = cache_path(paths, provider)
    snapshot.write(
        path,
        snapshot.OfferFile(
            provider=provider,
            source=source,
            observed_at=observed,
            offers=kept,
            skipped=skipped if len(kept) < len(offers) else {},
        ),
    )
    return path
