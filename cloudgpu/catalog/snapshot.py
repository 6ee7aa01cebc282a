"""The on-disk offer file format shared by the bundled snapshots and the refresh cache.

One JSON document per provider: metadata (source, observation time, what the converter
skipped and why) plus the offers as positional rows in the column order of
:data:`COLUMNS`, which is :class:`Offer`'s own field order, so loading is one
constructor call per row with no per-field lookups. This module only reads and writes
that format; it does not decide which file wins (catalog.py) or how prices are
normalized (tools/convert_prices.py, the providers).
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudgpu import atomicfile
from cloudgpu.catalog.offer import MARKETS, Offer
from cloudgpu.errors import CatalogError

FORMAT_VERSION = 1

# Offer fields after ``provider`` and before ``extra``; flags are stored as a list.
COLUMNS: tuple[str, ...] = (
    "instance_type", "region", "zone", "market", "gpu", "gpu_count", "gpu_memory_gb",
    "vcpus", "memory_gb", "price_per_hour", "nvme_count", "nvme_size_gb", "network_gbps",
    "price_source", "observed_at", "flags",
)  # fmt: skip
_N = len(COLUMNS)


@dataclass
class OfferFile:
    provider: str
    source: str  # one line: where the prices came from
    observed_at: str  # ISO 8601 UTC; default for rows that carry none
    offers: list[Offer]
    origin: dict[str, str] = field(default_factory=dict)  # repo/path/commit/extracted
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> rows skipped
    price_source: str = ""  # default Offer.price_source of the rows; "" = ``source``
    total: int = -1  # rows in the file (offers may hold fewer when read with a GPU filter)
    # Limits every row shares, kept in each Offer's extra (a free tier's session_hours and
    # weekly_quota_hours); empty for priced clouds.
    limits: dict[str, float] = field(default_factory=dict)

    @property
    def default_price_source(self) -> str:
        return self.price_source or self.source


def _row(offer: Offer, default_observed: str, default_source: str) -> list[Any]:
    return [
        offer.instance_type, offer.region, offer.zone, offer.market, offer.gpu,
        offer.gpu_count, offer.gpu_memory_gb, offer.vcpus, offer.memory_gb,
        round(offer.price_per_hour, 6), offer.nvme_count, offer.nvme_size_gb,
        offer.network_gbps,
        "" if offer.price_source == default_source else offer.price_source,
        "" if offer.observed_at == default_observed else offer.observed_at,
        list(offer.flags),
    ]  # fmt: skip


def dump(data: OfferFile) -> str:
    """Serialize; one offer per line so diffs of the bundled files stay readable."""
    head = {
        "format": FORMAT_VERSION,
        "provider": data.provider,
        "source": data.source,
        "observed_at": data.observed_at,
        "price_source": data.default_price_source,
        "origin": data.origin,
        "skipped": data.skipped,
        "columns": list(COLUMNS),
        "count": len(data.offers),
    }
    if data.limits:
        head["limits"] = data.limits
    lines = [json.dumps(head)[:-1] + ', "rows": [']
    rows = [
        json.dumps(_row(o, data.observed_at, data.default_price_source), separators=(",", ":"))
        for o in data.offers
    ]
    lines.append(",\n".join(rows))
    lines.append("]}")
    return "\n".join(lines) + "\n"


def write(path: Path, data: OfferFile) -> None:
    """Write atomically: a crash mid-write leaves the old file, never a truncated one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomicfile.write_text(path, dump(data))


def _check_head(doc: Any, path: Path) -> None:
    if not isinstance(doc, dict):
        raise CatalogError(f"{path}: not an offer file (expected a JSON object)")
    if doc.get("format") != FORMAT_VERSION:
        raise CatalogError(f"{path}: format {doc.get('format')!r}, expected {FORMAT_VERSION}")
    if doc.get("columns") != list(COLUMNS):
        raise CatalogError(f"{path}: unexpected columns")
    rows = doc.get("rows")
    if not isinstance(rows, list) or doc.get("count") != len(rows):
        raise CatalogError(f"{path}: row count does not match 'count' (truncated?)")
    for key in ("provider", "source", "observed_at"):
        if not isinstance(doc.get(key), str):
            raise CatalogError(f"{path}: '{key}' missing or not a string")
    if not isinstance(doc.get("price_source") or "", str):
        raise CatalogError(f"{path}: 'price_source' is not a string")
    for key in ("origin", "skipped"):
        if not isinstance(doc.get(key) or {}, dict):
            raise CatalogError(f"{path}: '{key}' is not an object")


# What each column holds (numbers may be int or float); rows are checked as they are
# built, with one tuple lookup for the common, well-formed case.
_NUMERIC = (6, 7, 8, 9, 11, 12)  # gpu_memory_gb, vcpus, memory_gb, price, nvme size, network
_WANT: tuple[type, ...] = (str, str, str, str, str, int, float, float, float, float, int,
                           float, float, str, str, list)  # fmt: skip
_ROW_TYPES = frozenset(
    tuple(
        (float if (mask >> _NUMERIC.index(i)) & 1 else int) if i in _NUMERIC else want
        for i, want in enumerate(_WANT)
    )
    for mask in range(1 << len(_NUMERIC))
)
MAX_QUANTITY = 1e9  # no GB, vCPU, $/h or Gbit/s figure of a real machine comes near


def check_row(row: Any) -> None:
    """ValueError naming the field when a row is not what :func:`dump` writes: text where
    text is due, whole counts, finite numbers >= 0 (a negative price is impossible)."""
    if not isinstance(row, list) or len(row) != _N:
        raise ValueError(f"expected a list of {_N} fields")
    if tuple(map(type, row)) not in _ROW_TYPES:
        for i, (value, want) in enumerate(zip(row, _WANT, strict=True)):
            ok = type(value) in (int, float) if i in _NUMERIC else type(value) is want
            if not ok:
                raise ValueError(f"{COLUMNS[i]}: expected {want.__name__}, got {value!r:.60}")
    cols = (*_NUMERIC, 5, 10)
    if not (min(row[i] for i in cols) >= 0 and math.fsum(row[i] for i in cols) < MAX_QUANTITY):
        i = next((i for i in cols if not 0 <= row[i] < MAX_QUANTITY), 9)  # NaN fails both
        raise ValueError(f"{COLUMNS[i]}: impossible value {row[i]!r} (negative, NaN or huge)")
    if row[3] not in MARKETS or not all(isinstance(f, str) for f in row[15]):
        raise ValueError(f"market {row[3]!r:.30} or flags are not what an offer holds")


def possible(offer: Offer) -> bool:
    """Whether an offer passes :func:`check_row` (what a reader will accept)."""
    try:
        check_row(_row(offer, "", ""))
    except (TypeError, ValueError):
        return False
    return True


def read(path: Path, gpus: Collection[str] | None = None) -> OfferFile:
    """Parse an offer file; anything malformed is a CatalogError naming the file.

    ``gpus``: build Offers only for rows of these GPU names (``total`` still counts all);
    building the records is most of the load time, and most queries name a GPU.
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CatalogError(f"{path}: unreadable offer file: {exc}") from exc
    _check_head(doc, path)
    provider, default_obs = doc["provider"], doc["observed_at"]
    default_src = doc.get("price_source") or doc["source"]
    limits = doc.get("limits") or {}
    if not isinstance(limits, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in limits.values()
    ):
        raise CatalogError(f"{path}: 'limits' must map names to numbers")
    offers = []
    try:
        for row in doc["rows"]:
            if gpus is not None and isinstance(row, list) and len(row) == _N and row[4] not in gpus:
                continue
            check_row(row)
            # Positional, in COLUMNS order: the cheapest way to build 10^4..10^6 records.
            offers.append(
                Offer(
                    provider,
                    row[0],
                    row[1],
                    row[2],
                    row[3],
                    row[4],
                    row[5],
                    row[6],
                    row[7],
                    row[8],
                    row[9],
                    row[10],
                    row[11],
                    row[12],
                    row[13] or default_src,
                    row[14] or default_obs,
                    tuple(row[15]),
                    dict(limits),
                )
            )
    except (TypeError, ValueError) as exc:
        raise CatalogError(f"{path}: bad offer row {len(offers) + 1}: {exc}") from exc
    return OfferFile(
        provider=provider,
        source=doc["source"],
        observed_at=default_obs,
        offers=offers,
        origin=dict(doc.get("origin") or {}),
        skipped=dict(doc.get("skipped") or {}),
        price_source=default_src,
        total=len(doc["rows"]),
        limits=dict(limits),
    )
