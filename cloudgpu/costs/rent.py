"""The rent side of buy-versus-rent: what the same GPUs cost from each provider.

From a list of catalog Offers (passed in; this module loads nothing) it picks the
cheapest on-demand and spot offer per provider for the same GPU and count, adds a
committed-use option when a discount is given, and prices the renter's overheads (idle
hours, failed runs, storage, egress). It must not decide the verdict (cloudgpu.costs.
compare does that).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cloudgpu.catalog.offer import FLAG_PRICE_PREDATES_CUT, Offer
from cloudgpu.costs.defaults import TcoInputs
from cloudgpu.errors import CatalogError

MARKET_COMMITTED = "committed"


@dataclass(frozen=True)
class RentOption:
    provider: str
    market: str  # on_demand | spot | committed
    instance_type: str
    region: str
    price_per_gpu_hour: float  # the list price (after any committed-use discount)
    effective_per_gpu_hour: float  # per busy GPU-hour, after idle and failed-run losses
    fixed_per_year: float  # storage and egress, paid whatever the utilization
    price_source: str = ""
    observed_at: str = ""
    flags: tuple[str, ...] = ()  # the catalog's flags on the offer, e.g. price_predates_cut

    @property
    def label(self) -> str:
        return f"{self.provider} {self.market.replace('_', '-')}"


def effective_price(price_per_gpu_hour: float, inputs: TcoInputs) -> float:
    """Price per *busy* GPU-hour: paid-but-idle and failed hours are paid for too."""
    useful = (1.0 - inputs.idle_fraction) * (1.0 - inputs.failed_fraction)
    if useful <= 0:
        raise CatalogError(
            "--idle-fraction/--failed-fraction: no rented hour would do useful work",
            hint="both must stay below 100%",
        )
    return price_per_gpu_hour / useful


def _option(offer: Offer, market: str, price: float, inputs: TcoInputs) -> RentOption:
    return RentOption(
        provider=offer.provider,
        market=market,
        instance_type=offer.instance_type,
        region=offer.region,
        price_per_gpu_hour=price,
        effective_per_gpu_hour=effective_price(price, inputs),
        fixed_per_year=12.0 * (inputs.storage_month + inputs.egress_month),
        price_source=offer.price_source,
        observed_at=offer.observed_at,
        flags=offer.flags,
    )


def _current_first(o: Offer) -> tuple[bool, float]:
    """A current price beats one known to predate a published price cut."""
    return (FLAG_PRICE_PREDATES_CUT in o.flags, o.price_per_hour)


def cheapest_per_provider(offers: Iterable[Offer]) -> dict[tuple[str, str], Offer]:
    """The cheapest offer per (provider, market), at current prices where the catalog
    has them: a price from before a published cut is used only when it is all there is
    (and then carries its flag into the verdict)."""
    best: dict[tuple[str, str], Offer] = {}
    for o in offers:
        key = (o.provider, o.market)
        if key not in best or _current_first(o) < _current_first(best[key]):
            best[key] = o
    return best


def rent_options(
    offers: Iterable[Offer], gpu: str, count: int, inputs: TcoInputs
) -> list[RentOption]:
    """Rent options for ``count`` x ``gpu``, cheapest first; CatalogError when none."""
    pool = list(offers)
    same = [o for o in pool if o.gpu == gpu and o.gpu_count == count and o.price_per_hour > 0]
    if not same:
        raise CatalogError(
            f"no rent offers for {count}x {gpu} in the catalog",
            hint="nearest: " + nearest_offers(pool, gpu, count),
        )
    options: list[RentOption] = []
    for (_, market), offer in sorted(cheapest_per_provider(same).items()):
        options.append(_option(offer, market, offer.price_per_gpu_hour, inputs))
        if market == "on_demand" and inputs.commit_discount > 0:
            price = offer.price_per_gpu_hour * (1.0 - inputs.commit_discount)
            options.append(_option(offer, MARKET_COMMITTED, price, inputs))
    return sorted(options, key=lambda o: (o.effective_per_gpu_hour, o.provider, o.market))


def nearest_offers(offers: list[Offer], gpu: str, count: int, limit: int = 3) -> str:
    """A short list of what the catalog does have: same GPU at other counts first."""
    offers = [o for o in offers if o.price_per_hour > 0]  # free tiers are not rentals
    same_gpu = sorted(
        (o for o in offers if o.gpu == gpu),
        key=lambda o: (abs(o.gpu_count - count), o.price_per_gpu_hour),
    )
    picks: list[str] = []
    seen: set[tuple[str, int]] = set()
    for o in same_gpu:
        if (o.gpu, o.gpu_count) not in seen:
            seen.add((o.gpu, o.gpu_count))
            picks.append(f"{o.gpu_count}x {o.gpu} from ${o.price_per_gpu_hour:.2f}/GPU-h")
    if len(picks) < limit:
        others = sorted(
            (o for o in offers if o.gpu != gpu and o.gpu_count == count),
            key=lambda o: o.price_per_gpu_hour,
        )
        for o in others:
            if (o.gpu, o.gpu_count) not in seen:
                seen.add((o.gpu, o.gpu_count))
                picks.append(f"{o.gpu_count}x {o.gpu} from ${o.price_per_gpu_hour:.2f}/GPU-h")
    if not picks:
        return "the catalog has no GPU offers at all (run `cloudgpu catalog refresh`)"
    return "; ".join(picks[:limit]) + " (try --count or --gpu)"
