"""The Lambda provider: on-demand GPU VMs through Lambda Cloud's REST API.

Plain HTTP (providers/lambda_cloud/api.py); no SDK. Config (``[providers.lambda]``; all
optional):

* ``api_url``: API base, default ``LAMBDA_API_BASE_URL`` or https://cloud.lambda.ai/api/v1
* ``image_family``: boot image family (default: Lambda Stack, Lambda's own default);
  job.yaml's ``image`` overrides it
* ``ssh_port`` (default 22: set it when a port forward or bastion stands in front)
* ``ssh_user`` (default ubuntu) and ``scratch_dir`` (default /home/ubuntu/scratch: the
  root disk is the instance's local NVMe, there is no second device to mount)
* ``attempts``, ``backoff_s``, ``poll_s``: retry and polling
* ``api_key``: discouraged; prefer the ``LAMBDA_API_KEY`` environment variable

What it creates: one instance per request, plus (once per public key, shared by every
job) an account SSH key named ``cloudgpu-<digest>``; a public key is not a billed
resource and other live jobs use it, so terminate() leaves it. Tags travel in the
instance name (providers/lambda_cloud/names.py).

Deadline: Lambda has no server-side expiry and no instance-scoped API key, so nothing on
the instance can end billing (powering the VM off does not). Billing ends only when the
lifecycle terminates the instance (its watcher at the deadline, teardown, or
``cloudgpu down --orphans``, which finds it by owner). It must not print, log or store
the API key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from cloudgpu_providers.apikey import ApiKeySource, api_base, probed, retry_options
from cloudgpu_providers.configkeys import API_KEYS, TEXT, URL
from cloudgpu_providers.lambda_cloud import instances as inst_mod
from cloudgpu_providers.lambda_cloud import names
from cloudgpu_providers.lambda_cloud.api import DEFAULT_BASE_URL, PROVIDER, LambdaClient
from cloudgpu_providers.lambda_cloud.offers import offers_from_instance_types
from cloudgpu_providers.verify import verify_gone

from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer, iso_utc
from cloudgpu.errors import (
    AuthError,
    CapacityError,
    NotFoundError,
    ProviderError,
    TransientError,
)
from cloudgpu.provider import (
    TAG_INSTANCE,
    TAG_JOB,
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    Provider,
)
from cloudgpu.spec.fields import Node
from cloudgpu.sshkeys import ensure_keypair

API_KEY = ApiKeySource("Lambda", "LAMBDA_API_KEY", PROVIDER)


class LambdaProvider(Provider):
    name: ClassVar[str] = "lambda"
    config_keys: ClassVar[Mapping[str, Node]] = {
        **API_KEYS, "api_url": URL, "image_family": TEXT,
    }  # fmt: skip
    capabilities: ClassVar[Capabilities] = Capabilities(
        startup_s=300.0,  # create -> ready: a VM; Lambda boots take a few minutes
        spot=False,  # Lambda sells no spot/interruptible capacity
        preemption_notice=False,
        billing_granularity_s=60,
        # Not disposable: powering off does not end billing, and the root disk is the only
        # local disk, so the bootstrap has nothing to format and nothing to gain.
        disposable=False,
    )

    # -- credentials -----------------------------------------------------------------

    def availability(self) -> Availability:
        return API_KEY.availability(self.ctx)

    def _client(self) -> LambdaClient:
        key = API_KEY.require(self.ctx)
        base = api_base(self.ctx, "api_url", "LAMBDA_API_BASE_URL", DEFAULT_BASE_URL)
        return LambdaClient(base, key, self.ctx.sleep, **retry_options(self.ctx.config))

    def check(self) -> Availability:
        return probed(
            self.availability(), lambda: self._client().call("GET", "/ssh-keys"), "GET /ssh-keys"
        )

    # -- offers ----------------------------------------------------------------------

    def fetch_offers(self) -> list[Offer]:
        data = self._client().call("GET", "/instance-types")
        observed = iso_utc(self.ctx.clock())
        return offers_from_instance_types(data or {}, load_registry(), observed_at=observed)

    # -- instances -------------------------------------------------------------------

    def create(self, request: CreateRequest) -> Instance:
        if request.offer.market == "spot":
            raise CapacityError("Lambda sells no spot capacity", provider=PROVIDER)
        client = self._client()
        idem = request.tags.get(TAG_INSTANCE) or request.idempotency_token
        wanted = self._identity(request, idem)
        if idem:
            existing = self._find(client, wanted)
            if existing is not None:
                return existing
        ssh_key = self._register_key(client, request.ssh_public_key)
        body = inst_mod.launch_body(
            request,
            name=names.encode(request.tags, idem),
            ssh_key=ssh_key,
            image_family=request.image or self.ctx.config.get("image_family") or None,
        )
        try:
            data = client.call("POST", "/instance-operations/launch", body)
        except TransientError:
            # The launch may have landed before the connection broke: look for it by name.
            found = self._find(client, wanted) if idem else None
            if found is None:
                raise
            return found
        ids = list((data or {}).get("instance_ids") or [])
        if not ids:
            raise CapacityError("Lambda launched no instance for this offer", provider=PROVIDER)
        created = self.describe(str(ids[0]))
        tags = {**created.tags, TAG_INSTANCE: idem, **request.tags}
        return replace(created, tags=tags)

    def describe(self, instance_id: str) -> Instance:
        try:
            data = self._client().call("GET", f"/instances/{instance_id}")
        except NotFoundError:
            data = None
        return self._instance(data, instance_id)

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        out = []
        for raw in self._all(self._client()):
            if not names.matches(raw.get("name"), tags):
                continue
            inst = self._instance(raw, str(raw.get("id")), extra_tags=tags)
            if not inst.state.is_gone:
                out.append(inst)
        return out

    def terminate(self, instance_id: str) -> None:
        client = self._client()
        if self.describe(instance_id).state.is_gone:
            return
        try:
            client.call("POST", "/instance-operations/terminate", {"instance_ids": [instance_id]})
        except NotFoundError:
            return
        verify_gone(
            self.ctx,
            lambda: self.describe(instance_id).state.is_gone,
            still=f"instance {instance_id} still exists after terminate",
            provider=PROVIDER,
        )

    # -- helpers ---------------------------------------------------------------------

    def _instance(
        self,
        raw: Mapping[str, Any] | None,
        instance_id: str,
        extra_tags: Mapping[str, str] | None = None,
    ) -> Instance:
        return inst_mod.to_instance(
            raw,
            instance_id,
            user=str(self.ctx.config.get("ssh_user") or "ubuntu"),
            scratch=str(self.ctx.config.get("scratch_dir") or "/home/ubuntu/scratch"),
            port=int(self.ctx.config.get("ssh_port") or 22),
            extra_tags=extra_tags,
        )

    @staticmethod
    def _identity(request: CreateRequest, idem: str) -> dict[str, str]:
        wanted = {TAG_INSTANCE: idem}
        if request.tags.get(TAG_JOB):
            wanted[TAG_JOB] = request.tags[TAG_JOB]
        return wanted

    def _all(self, client: LambdaClient) -> list[dict[str, Any]]:
        return [i for i in client.call("GET", "/instances") or [] if isinstance(i, dict)]

    def _find(self, client: LambdaClient, wanted: Mapping[str, str]) -> Instance | None:
        for raw in self._all(client):
            if names.matches(raw.get("name"), wanted):
                inst = self._instance(raw, str(raw.get("id")), extra_tags=wanted)
                if not inst.state.is_gone:
                    return inst
        return None

    def _register_key(self, client: LambdaClient, public_key: str) -> str:
        """The account key name for ``public_key`` (the client's own key when empty)."""
        public = public_key.strip() or ensure_keypair(self.ctx.paths.keys_dir)[1]
        kname = inst_mod.key_name(public)
        if self._has_key(client, kname):
            return kname
        try:
            client.call("POST", "/ssh-keys", {"name": kname, "public_key": public})
        except (AuthError, TransientError):
            raise
        except ProviderError:
            # Another job registered the same key a moment ago: the name is taken by it.
            if not self._has_key(client, kname):
                raise
        return kname

    @staticmethod
    def _has_key(client: LambdaClient, kname: str) -> bool:
        keys = client.call("GET", "/ssh-keys") or []
        return any(isinstance(k, dict) and k.get("name") == kname for k in keys)
