"""The RunPod provider: GPU pods through RunPod's GraphQL API.

Talks plain HTTP (providers/runpod/api.py), so the ``runpod`` SDK is not needed. Config
(``[providers.runpod]``; all optional):

* ``api_base_url``: API base, default ``RUNPOD_API_BASE_URL`` or https://api.runpod.io
* ``image``: container image (default below; job.yaml's image overrides it)
* ``image_start``: the image's own start script, run after the deadline is armed
* ``vcpus_per_gpu`` / ``memory_gb_per_gpu``: the minimums asked for per GPU
* ``data_center_id``: pin pods to one data center (else RunPod picks one with stock)
* ``ssh_user`` (default root) and ``scratch_dir``: where jobs get their fast local disk
  (default /workspace: a pod has no raw NVMe to mount; its container disk is local)
* ``api_key``: discouraged; prefer the ``RUNPOD_API_KEY`` environment variable

What it creates is one pod per instance; terminate() removes it and checks it is gone.
It must not print, log or store the API key.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from cloudgpu_providers.apikey import ApiKeySource, api_base, probed, retry_options
from cloudgpu_providers.configkeys import API_KEYS, TEXT, URL, seconds
from cloudgpu_providers.runpod import offers as offers_mod
from cloudgpu_providers.runpod import pods
from cloudgpu_providers.runpod.api import DEFAULT_BASE_URL, PROVIDER, GraphQLClient
from cloudgpu_providers.verify import verify_gone

from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer, iso_utc
from cloudgpu.errors import CapacityError, NotFoundError, TransientError
from cloudgpu.provider import (
    TAG_INSTANCE,
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    Provider,
)
from cloudgpu.retry import Backoff, Retry, retrying
from cloudgpu.spec.fields import Node, number
from cloudgpu.sshkeys import key_pair

# RunPod's PyTorch image: its /start.sh starts sshd and authorizes $PUBLIC_KEY.
DEFAULT_IMAGE = "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"
DEFAULT_IMAGE_START = "/start.sh"


def _runpod_config_key(path: Path) -> str:
    """The key runpodctl / runpod-python saved (``apikey`` or ``[default] api_key``)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return ""
    default = data.get("default")
    nested = default.get("api_key") if isinstance(default, dict) else None
    return str(data.get("apikey") or nested or "").strip()


API_KEY = ApiKeySource(
    "RunPod", "RUNPOD_API_KEY", PROVIDER, ((".runpod/config.toml", _runpod_config_key),)
)


DEPLOY_BACKOFF = Backoff(attempts=3, base_s=2.0, max_s=10.0)  # sends of one deploy, at most


class RunPodProvider(Provider):
    name: ClassVar[str] = "runpod"
    config_keys: ClassVar[Mapping[str, Node]] = {
        **API_KEYS, "api_base_url": URL, "image_start": TEXT, "data_center_id": TEXT,
        "vcpus_per_gpu": number("vCPUs per GPU", 0, 1024),
        "memory_gb_per_gpu": number("GB of RAM per GPU", 0, 100_000),
        "notice_poll_s": seconds(3600), "notice_ahead_s": seconds(),
    }  # fmt: skip
    capabilities: ClassVar[Capabilities] = Capabilities(
        startup_s=180.0,  # create -> ready: a container pulled and started on a host
        spot=False,  # spot pods are being retired (REFERENCE.md section 7)
        # No spot notice; host maintenance windows (machine.maintenanceStart) are the one
        # advance warning RunPod publishes, read by preemption_notice() and the watcher.
        preemption_notice=True,
        billing_granularity_s=1,
        # Not disposable: a pod is a container on a shared host; there is no NVMe to
        # format and nothing to power off (the deadline is armed by the pod's command).
        disposable=False,
    )

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)

    # -- credentials -----------------------------------------------------------------

    def availability(self) -> Availability:
        return API_KEY.availability(self.ctx)

    def _client(self) -> GraphQLClient:
        key = API_KEY.require(self.ctx)
        base = api_base(self.ctx, "api_base_url", "RUNPOD_API_BASE_URL", DEFAULT_BASE_URL)
        return GraphQLClient(base, key, self.ctx.sleep, **retry_options(self.ctx.config))

    def check(self) -> Availability:
        return probed(
            self.availability(),
            lambda: self._client().query(pods.Q_MYSELF),
            "account query",
        )

    # -- offers ----------------------------------------------------------------------

    def fetch_offers(self) -> list[Offer]:
        data = self._client().query(pods.Q_GPU_TYPES)
        observed = iso_utc(self.ctx.clock())
        return offers_mod.offers_from_gpu_types(
            data.get("gpuTypes") or [],
            load_registry(),
            observed_at=observed,
            vcpus_per_gpu=float(self.ctx.config.get("vcpus_per_gpu", 4)),
            memory_gb_per_gpu=float(self.ctx.config.get("memory_gb_per_gpu", 16)),
        )

    # -- instances -------------------------------------------------------------------

    def create(self, request: CreateRequest) -> Instance:
        if request.offer.market == "spot":
            raise CapacityError("RunPod spot pods are retired; no spot capacity", provider=PROVIDER)
        client = self._client()
        if request.idempotency_token:
            existing = self._find_by_token(client, request.idempotency_token)
            if existing is not None:
                return existing
        key_file, public_key = self._public_key(request)
        payload = pods.deploy_input(
            request,
            gpu_type_id=self._gpu_type_id(client, request.offer),
            cloud_type=offers_mod.cloud_type_of(request.offer.instance_type, request.offer.extra),
            public_key=public_key,
            image=request.image or str(self.ctx.config.get("image") or DEFAULT_IMAGE),
            docker_args=pods.start_command(
                None if request.deadline is None else request.deadline - self.ctx.clock(),
                str(self.ctx.config.get("image_start") or DEFAULT_IMAGE_START),
            ),
            data_center_id=self._data_center(request.offer),
        )
        sent = self._deploy(client, request.idempotency_token, payload)
        if isinstance(sent, Instance):
            return sent
        data = sent
        pod = data.get("podFindAndDeployOnDemand")
        if not pod:
            raise CapacityError("RunPod deployed no pod for this offer", provider=PROVIDER)
        return self._instance(pod, str(pod.get("id")), str(key_file) if key_file else None)

    def _deploy(
        self, client: GraphQLClient, token: str, payload: dict[str, Any]
    ) -> dict[str, Any] | Instance:
        """The deploy's answer, or the pod it made when the answer was lost. A deploy may
        land before its answer is lost: it is looked for by its token and sent again only
        once it is known not to have (never without a token to look for)."""

        def send() -> dict[str, Any] | Instance:
            try:
                return client.query(pods.M_DEPLOY, {"input": payload})
            except TransientError as exc:
                found = self._find_by_token(client, token)
                if found is not None:
                    return found
                if not token:
                    raise
                raise Retry(exc) from exc

        return retrying(send, DEPLOY_BACKOFF, sleep=self.ctx.sleep)

    def describe(self, instance_id: str) -> Instance:
        try:
            data = self._client().query(pods.Q_POD, {"input": {"podId": instance_id}})
        except NotFoundError:
            data = {}
        pod = data.get("pod")
        return self._instance(pod, instance_id, self._key_file_for(pod))

    def preemption_notice(self, instance: Instance) -> float | None:
        """Start of a host maintenance window due within ``notice_ahead_s`` (default 600).

        The lifecycle asks at most every ``notice_poll_s`` seconds (default 10). RunPod has
        no instance-side notice, so this is the only source.
        """
        now = self.ctx.clock()
        data = self._client().query(pods.Q_POD, {"input": {"podId": instance.id}})
        start = pods.maintenance_start(data.get("pod"))
        ahead = float(self.ctx.config.get("notice_ahead_s", 600.0))
        if start is not None and start - now <= ahead:
            return start
        return None

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        out = []
        for pod in self._my_pods(self._client()):
            pod_tags = pods.decode_tags(pod)
            if not pod_tags or any(pod_tags.get(k) != v for k, v in tags.items()):
                continue
            inst = self._instance(pod, str(pod.get("id")), self._key_file_for(pod))
            if not inst.state.is_gone:
                out.append(inst)
        return out

    def terminate(self, instance_id: str) -> None:
        client = self._client()
        if self.describe(instance_id).state.is_gone:
            return
        try:
            client.query(pods.M_TERMINATE, {"input": {"podId": instance_id}}, idempotent=True)
        except NotFoundError:
            return
        verify_gone(
            self.ctx,
            lambda: self.describe(instance_id).state.is_gone,
            still=f"pod {instance_id} still exists after podTerminate",
            provider=PROVIDER,
        )

    # -- helpers ---------------------------------------------------------------------

    def _instance(self, pod: Mapping[str, Any] | None, pod_id: str, key: str | None) -> Instance:
        return pods.to_instance(
            pod,
            pod_id,
            key,
            user=str(self.ctx.config.get("ssh_user") or "root"),
            scratch=str(self.ctx.config.get("scratch_dir") or "/workspace"),
        )

    def _my_pods(self, client: GraphQLClient) -> list[dict[str, Any]]:
        data = client.query(pods.Q_MY_PODS)
        return list((data.get("myself") or {}).get("pods") or [])

    def _find_by_token(self, client: GraphQLClient, token: str) -> Instance | None:
        if not token:
            return None
        for pod in self._my_pods(client):
            if pods.decode_tags(pod).get(TAG_INSTANCE) == token:
                inst = self._instance(pod, str(pod.get("id")), self._key_file_for(pod))
                if not inst.state.is_gone:
                    return inst
        return None

    def _public_key(self, request: CreateRequest) -> tuple[Path | None, str]:
        if request.ssh_public_key.strip():
            return None, request.ssh_public_key.strip()
        return key_pair(self.ctx.paths.keys_dir, f"runpod-{request.name}")

    def _key_file_for(self, pod: Mapping[str, Any] | None) -> str | None:
        if not pod or not pod.get("name"):
            return None
        path = self.ctx.paths.keys_dir / f"runpod-{pod['name']}"
        return str(path) if path.exists() else None

    def _gpu_type_id(self, client: GraphQLClient, offer: Offer) -> str:
        explicit = offer.extra.get("gpu_type_id") if offer.extra else None
        if explicit:
            return str(explicit)
        data = client.query(pods.Q_GPU_TYPES)
        found = offers_mod.find_gpu_type_id(data.get("gpuTypes") or [], offer.gpu, load_registry())
        if found is None:
            raise NotFoundError(f"RunPod has no GPU type for {offer.gpu}", provider=PROVIDER)
        return found

    def _data_center(self, offer: Offer) -> str | None:
        configured = self.ctx.config.get("data_center_id")
        if configured:
            return str(configured)
        # Snapshot offers carry RunPod data center ids (e.g. "CA-MTL-1") as their zone.
        return offer.zone or None
