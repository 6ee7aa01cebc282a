"""The Vast.ai provider: GPU containers rented on Vast's marketplace through its REST API.

Plain HTTP (providers/vast/api.py); the ``vastai`` CLI is not needed. Config
(``[providers.vast]``; all optional):

* ``api_url``: API base, default ``VAST_API_BASE_URL`` or https://console.vast.ai/api/v0
* ``image``: container image (default below; job.yaml's ``image`` overrides it)
* ``ssh_user`` (default root) and ``scratch_dir`` (default /workspace: the container
  disk is the machine's local disk; there is no raw NVMe to mount)
* ``offer_limit``: asks fetched per market on refresh (default 1000)
* ``storage_gb``: disk priced into refreshed offers (default 100, a job's default
  ``disk_gb``); a launch searches again with its job's own disk
* ``bid_factor``: an interruptible instance bids ``min_bid x bid_factor`` (default 1.0)
* ``attempts``, ``backoff_s``, ``poll_s``: retry and polling
* ``api_key``: discouraged; prefer ``VAST_API_KEY`` or the vastai CLI's key file

What it creates: one instance (a "contract") per request, labelled with the job's tags,
with the public key attached to it; terminate() destroys it and checks it is gone.
Spot = Vast's interruptible instances (a bid); an outbid instance reads as PREEMPTED.
It must not print, log or store the API key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from cloudgpu_providers.apikey import (
    ApiKeySource,
    api_base,
    probed,
    read_plain_key,
    retry_options,
)
from cloudgpu_providers.configkeys import API_KEYS, URL, count
from cloudgpu_providers.vast import instances as inst_mod
from cloudgpu_providers.vast import offers as offers_mod
from cloudgpu_providers.vast.api import DEFAULT_BASE_URL, PROVIDER, VastClient
from cloudgpu_providers.verify import verify_gone

from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer, iso_utc
from cloudgpu.errors import (
    CapacityError,
    ConfigError,
    NotFoundError,
    ProviderError,
    TransientError,
)
from cloudgpu.provider import (
    TAG_INSTANCE,
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
)
from cloudgpu.spec.fields import Node, number
from cloudgpu.sshkeys import ensure_keypair

DEFAULT_IMAGE = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"
DEFAULT_STORAGE_GB = 100  # a job's default resources.disk_gb
# Sent on every instance read, as the official CLI does (vast-ai/vast-python: show
# instance(s) call /instances with {"owner": "me"}).
OWNER_ME = {"owner": "me"}
# The vastai CLI's key files, new and old.
KEY_FILES = (".config/vastai/vast_api_key", ".vast_api_key")
API_KEY = ApiKeySource(
    "Vast.ai", "VAST_API_KEY", PROVIDER, tuple((f, read_plain_key) for f in KEY_FILES)
)


class VastProvider(Provider):
    name: ClassVar[str] = "vast"
    config_keys: ClassVar[Mapping[str, Node]] = {
        **API_KEYS, "api_url": URL, "offer_limit": count(1, 100_000),
        "bid_factor": number("a factor on the asking price", 0, 100),
        "storage_gb": number("GB of disk priced into offers", 1, 100_000),
    }  # fmt: skip
    capabilities: ClassVar[Capabilities] = Capabilities(
        startup_s=300.0,  # create -> ready: a marketplace container, image pull included
        spot=True,  # interruptible (bid) instances
        preemption_notice=False,  # Vast gives none; an outbid instance is just stopped
        billing_granularity_s=1,
        disposable=False,  # a container on someone's host: nothing to format or power off
    )

    # -- credentials -----------------------------------------------------------------

    def availability(self) -> Availability:
        return API_KEY.availability(self.ctx)

    def _base_url(self) -> str:
        return api_base(self.ctx, "api_url", "VAST_API_BASE_URL", DEFAULT_BASE_URL)

    def _client(self) -> VastClient:
        key = API_KEY.require(self.ctx)
        return VastClient(self._base_url(), key, self.ctx.sleep, **retry_options(self.ctx.config))

    def check(self) -> Availability:
        return probed(
            self.availability(),
            lambda: self._client().call("GET", "/users/current/"),
            "GET /users/current/",
        )

    # -- offers ----------------------------------------------------------------------

    def _search(self, client: VastClient, market: str, storage_gb: float) -> list[dict[str, Any]]:
        limit = int(self.ctx.config.get("offer_limit", 1000))
        body = offers_mod.search_query(market, limit, storage_gb)
        data = client.call("POST", "/bundles/", body)
        return [a for a in data.get("offers") or [] if isinstance(a, dict)]

    def _storage_gb(self) -> float:
        raw = self.ctx.config.get("storage_gb", DEFAULT_STORAGE_GB)
        if isinstance(raw, bool) or not isinstance(raw, int | float) or not 1 <= raw <= 100_000:
            raise ConfigError(
                f"providers.vast.storage_gb: expected GB from 1 to 100000, got {raw!r}"
            )
        return float(raw)

    def fetch_offers(self) -> list[Offer]:
        client = self._client()
        observed = iso_utc(self.ctx.clock())
        registry = load_registry()
        storage = self._storage_gb()
        out: list[Offer] = []
        for market in ("on_demand", "spot"):
            asks = self._search(client, market, storage)
            out += offers_mod.offers_from_asks(
                asks, market, registry, observed_at=observed, storage_gb=storage
            )
        return out

    # -- instances -------------------------------------------------------------------

    def create(self, request: CreateRequest) -> Instance:
        client = self._client()
        idem = request.tags.get(TAG_INSTANCE) or request.idempotency_token
        if idem:
            existing = self._find(client, {TAG_INSTANCE: idem})
            if existing is not None:
                return existing
        ask_id, bid = self._ask(client, request.offer, float(request.disk_gb))
        tags = {**request.tags, TAG_INSTANCE: idem} if idem else dict(request.tags)
        label_tags = {**tags, "cloudgpu-instance-type": request.offer.instance_type}
        body = inst_mod.create_body(
            request,
            label=inst_mod.encode_label(label_tags),
            image=request.image or str(self.ctx.config.get("image") or DEFAULT_IMAGE),
            onstart_cmd=inst_mod.onstart(
                None if request.deadline is None else request.deadline - self.ctx.clock(),
                self._base_url(),
                request.user_data,
            ),
            bid=bid,
        )
        try:
            data = client.call("PUT", f"/asks/{ask_id}/", body)
        except TransientError:
            found = self._find(client, {TAG_INSTANCE: idem}) if idem else None
            if found is None:
                raise
            return found
        contract = str(data.get("new_contract") or "")
        if not contract:
            raise CapacityError("Vast created no instance for this offer", provider=PROVIDER)
        self._attach_key(client, contract, request.ssh_public_key)
        return replace(self.describe(contract), tags=tags)

    def describe(self, instance_id: str) -> Instance:
        try:
            data = self._client().call("GET", f"/instances/{instance_id}/", query=OWNER_ME)
        except NotFoundError:
            data = {}
        raw = data.get("instances")
        return self._instance(raw if isinstance(raw, dict) else None, instance_id)

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        out = []
        for raw in self._all(self._client()):
            have = inst_mod.decode_label(raw.get("label"))
            if have is None or any(have.get(k) != v for k, v in tags.items()):
                continue
            inst = self._instance(raw, str(raw.get("id")))
            # A preempted (outbid) instance still exists and bills its disk: list it.
            if inst.state != InstanceState.TERMINATED:
                out.append(inst)
        return out

    def terminate(self, instance_id: str) -> None:
        client = self._client()
        if self.describe(instance_id).state == InstanceState.TERMINATED:
            return
        try:
            client.call("DELETE", f"/instances/{instance_id}/")
        except NotFoundError:
            return
        verify_gone(
            self.ctx,
            lambda: self.describe(instance_id).state == InstanceState.TERMINATED,
            still=f"instance {instance_id} still exists after destroy",
            provider=PROVIDER,
        )

    # -- helpers ---------------------------------------------------------------------

    def _instance(self, raw: Mapping[str, Any] | None, instance_id: str) -> Instance:
        return inst_mod.to_instance(
            raw,
            instance_id,
            user=str(self.ctx.config.get("ssh_user") or "root"),
            scratch=str(self.ctx.config.get("scratch_dir") or "/workspace"),
        )

    def _all(self, client: VastClient) -> list[dict[str, Any]]:
        data = client.call("GET", "/instances/", query=OWNER_ME)
        return [i for i in data.get("instances") or [] if isinstance(i, dict)]

    def _find(self, client: VastClient, wanted: Mapping[str, str]) -> Instance | None:
        for raw in self._all(client):
            have = inst_mod.decode_label(raw.get("label")) or {}
            if all(have.get(k) == v for k, v in wanted.items()):
                inst = self._instance(raw, str(raw.get("id")))
                if not inst.state.is_gone:
                    return inst
        return None

    def _ask(self, client: VastClient, offer: Offer, disk_gb: float) -> tuple[int, float | None]:
        """(ask id to rent, bid or None) for ``offer``; a snapshot offer is matched to the
        cheapest fitting ask listed now, with the job's disk priced in."""
        factor = float(self.ctx.config.get("bid_factor", 1.0))
        explicit = offer.extra.get("ask_id") if offer.extra else None
        if explicit:
            # The offer's price includes its storage; the bid is for the machine alone.
            storage = float(offer.extra.get("storage_per_hour") or 0)
            machine = offer.price_per_hour - storage
            return int(explicit), round(machine * factor, 6) if offer.market == "spot" else None
        asks = self._search(client, offer.market, disk_gb)
        ask = offers_mod.pick_ask(asks, offer, load_registry())
        if ask is None:
            raise CapacityError(
                f"no Vast machine for {offer.instance_type} in {offer.region} now",
                provider=PROVIDER,
            )
        bid = round(float(ask.get("min_bid") or 0) * factor, 6) if offer.market == "spot" else None
        return int(ask["id"]), bid

    def _attach_key(self, client: VastClient, contract: str, public_key: str) -> None:
        """Authorize the job's key on the instance (the client's own key when none given).
        A failure here would leave a billed instance nobody can reach: destroy it first."""
        public = public_key.strip() or ensure_keypair(self.ctx.paths.keys_dir)[1]
        try:
            client.call("POST", f"/instances/{contract}/ssh/", {"ssh_key": public})
        except ProviderError:
            self.terminate(contract)
            raise
