"""The kubernetes provider: jobs as pods on an existing cluster, via the official client.

One node of a job is one pod: a bare Pod for a single-node job, the pods of one
indexed Job (completion index = node rank, headless Service for their DNS names) for a
multi-node one. The pod only holds its container (image from ``resources.image`` or
the configured default); the lifecycle's commands and transfers go through the exec
API (providers/kubernetes/machine.py), so no sshd is needed in the image. Local NVMe
is an emptyDir at /nvme. The deadline is the pod's/Job's ``activeDeadlineSeconds``.
Everything carries the cloudgpu labels and the exact tags as an annotation
(manifests.py), which listing and the orphan sweep use. Deleting a Job passes
``propagationPolicy=Background`` (the API default for Jobs orphans their pods), and
teardown is verified by the pods answering 404.

Instance ids: ``pod/NAMESPACE/NAME`` or ``job/NAMESPACE/JOB/INDEX``.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from cloudgpu_providers.kubernetes import manifests as mf
from cloudgpu_providers.kubernetes.api import Conflict, Kube
from cloudgpu_providers.kubernetes.machine import PodMachine
from cloudgpu_providers.kubernetes.offers import NAME, offers_from_nodes
from cloudgpu_providers.kubernetes.settings import Settings, parse

from cloudgpu.catalog.catalog import load_catalog
from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer, iso_utc
from cloudgpu.errors import CapacityError, ConfigError, NotFoundError, ProviderError
from cloudgpu.provider import (
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
)

SCHEDULE_WAIT_S = 10
# How long terminate() waits for the pods to go: their grace period (5 s) and the
# kubelet's stop, with margin.
DELETE_WAIT_S = 120.0
_ID = re.compile(r"^(pod)/([a-z0-9-]+)/([a-z0-9.-]+)$|^(job)/([a-z0-9-]+)/([a-z0-9.-]+)/(\d+)$")
# Pod failure reasons meaning the pod was taken away, not that the job failed.
LOST_REASONS = ("Evicted", "Preempting", "Shutdown", "Terminated", "NodeLost", "NodeShutdown")


def _parse_id(instance_id: str) -> tuple[str, str, str, int] | None:
    m = _ID.match(instance_id)
    if m is None:
        return None
    if m.group(1):
        return "pod", m.group(2), m.group(3), 0
    return "job", m.group(5), m.group(6), int(m.group(7))


def _state(pod: Mapping[str, Any]) -> InstanceState:
    meta, status = pod.get("metadata", {}), pod.get("status", {})
    if meta.get("deletionTimestamp"):
        return InstanceState.STOPPING
    phase = status.get("phase", "")
    if phase == "Running":
        return InstanceState.RUNNING
    if phase == "Pending":
        return InstanceState.PENDING
    if phase == "Failed" and status.get("reason") in LOST_REASONS:
        return InstanceState.PREEMPTED
    if phase in ("Succeeded", "Failed"):
        return InstanceState.TERMINATED
    return InstanceState.UNKNOWN


def unschedulable(pod: Mapping[str, Any]) -> str | None:
    """The scheduler's message when it found no node for the pod, else None."""
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return str(cond.get("message") or "no node fits")
    return None


class KubernetesProvider(Provider):
    name: ClassVar[str] = NAME
    capabilities: ClassVar[Capabilities] = Capabilities(multi_node=True)

    @cached_property
    def settings(self) -> Settings | None:
        home = Path(self.ctx.env.get("HOME") or Path.home())
        return parse(self.ctx.config, self.ctx.env, home)

    def _settings(self) -> Settings:
        s = self.settings
        if s is None:
            raise ConfigError("providers.kubernetes: not configured ([providers.kubernetes])")
        return s

    @cached_property
    def kube(self) -> Kube:
        s = self._settings()
        return Kube(s.kubeconfig, s.context)

    @cached_property
    def namespace(self) -> str:
        s = self._settings()
        if s.namespace:
            return s.namespace
        from kubernetes import config  # lazy SDK

        try:
            contexts, active = config.list_kube_config_contexts(s.kubeconfig)
        except Exception:  # an unreadable kubeconfig fails in kube below, with its message
            return "default"
        chosen = next((c for c in contexts if c["name"] == s.context), active) or {}
        return str(chosen.get("context", {}).get("namespace") or "default")

    def availability(self) -> Availability:
        s = self.settings
        if s is None:
            return Availability(
                False, "opt-in: add a [providers.kubernetes] table (enabled = true)"
            )
        if not Path(s.kubeconfig).is_file():
            return Availability(False, f"no kubeconfig at {s.kubeconfig}")
        if importlib.util.find_spec("kubernetes") is None:  # the extra, without importing it
            return Availability(False, "not enabled: install cloudgpu[kubernetes]")
        ctx = s.context or "current context"
        return Availability(True, f"{s.kubeconfig} ({ctx})", (f"file:{s.kubeconfig}",))

    def check(self) -> Availability:
        av = self.availability()
        if not av.enabled:
            return av
        nodes = self.kube.call(self.kube.core.list_node).get("items", [])
        gpus = sum(
            1 for n in nodes if n.get("status", {}).get("allocatable", {}).get("nvidia.com/gpu")
        )
        return Availability(
            True, f"{av.reason}: {len(nodes)} node(s), {gpus} with GPUs", av.sources
        )

    # -- offers ----------------------------------------------------------------------

    def offers(self) -> list[Offer]:
        return self.fetch_offers()

    def fetch_offers(self) -> list[Offer]:
        s = self._settings()
        nodes = self.kube.call(self.kube.core.list_node).get("items", [])
        return offers_from_nodes(
            nodes,
            registry=load_registry(),
            cluster=s.cluster or "kubernetes",
            observed_at=iso_utc(self.ctx.clock()),
            gpu_price=s.price_per_gpu_hour,
            cpu_price=s.price_per_cpu_hour,
            catalog_price=self._catalog_price,
        )

    @cached_property
    def _catalog(self) -> list[Offer]:
        return [o for o in load_catalog(self.ctx.paths).offers if o.gpu_count]

    def _catalog_price(self, instance_type: str, region: str, market: str) -> float | None:
        """$/GPU-hour of a cloud instance type as the catalog prices it there."""
        if not instance_type:
            return None
        rows = [o for o in self._catalog if o.instance_type == instance_type and o.market == market]
        here = [o for o in rows if o.region == region] or rows
        return min((o.price_per_gpu_hour for o in here), default=None)

    # -- instances -------------------------------------------------------------------

    def _deadline_s(self, request: CreateRequest) -> int | None:
        return int(request.deadline - self.ctx.clock()) if request.deadline else None

    def _spec(self, request: CreateRequest) -> dict[str, Any]:
        s = self._settings()
        image = request.image or s.image
        return mf.pod_spec(request.offer, image, self._deadline_s(request), s.service_account)

    def create(self, request: CreateRequest) -> Instance:
        ns = self.namespace
        name = mf.dns_name(request.name)
        body = mf.pod(
            name, request.tags, request.offer, request.idempotency_token, self._spec(request)
        )
        try:
            pod = self.kube.call(self.kube.core.create_namespaced_pod, ns, body)
        except Conflict:
            pod = self.kube.call(self.kube.core.read_namespaced_pod, name, ns)
            token = pod.get("metadata", {}).get("annotations", {}).get(mf.TOKEN)
            if token != request.idempotency_token:
                raise ProviderError(f"a pod {ns}/{name} exists already", provider=NAME) from None
        self._settle([pod], lambda: self.terminate(f"pod/{ns}/{name}"))
        return self._instance(f"pod/{ns}/{name}", pod)

    def create_nodes(self, requests: Sequence[CreateRequest]) -> list[Instance]:
        """An indexed Job of N pods and its headless Service; all scheduled or none kept."""
        if len(requests) == 1:
            return [self.create(requests[0])]
        first, ns = requests[0], self.namespace
        name = mf.dns_name(first.name, 52)  # pods' hostnames are NAME-INDEX: <= 63
        records = [r.tags.get("cloudgpu-instance", "") for r in requests]
        tags = {k: v for k, v in first.tags.items() if k != "cloudgpu-instance"}
        job = mf.indexed_job(
            name, tags, records, first.offer, first.idempotency_token, self._spec(first)
        )
        try:
            self.kube.call(
                self.kube.core.create_namespaced_service, ns, mf.headless_service(name, tags)
            )
        except Conflict:
            pass  # ours from an earlier attempt with the same name: the same shape
        try:
            self.kube.call(self.kube.batch.create_namespaced_job, ns, job)
        except Conflict:
            got = self.kube.call(self.kube.batch.read_namespaced_job, name, ns)
            if (
                got.get("metadata", {}).get("annotations", {}).get(mf.TOKEN)
                != first.idempotency_token
            ):
                raise ProviderError(f"a job {ns}/{name} exists already", provider=NAME) from None
        except BaseException:
            self._delete_job(ns, name)
            raise
        pods = self._job_pods(ns, name, len(requests))
        self._settle(pods, lambda: self._delete_job(ns, name), job=name)
        return [self.describe(f"job/{ns}/{name}/{i}") for i in range(len(requests))]

    def _job_pods(self, ns: str, name: str, n: int) -> list[dict[str, Any]]:
        """The job's pods once the controller made them (watched, not polled)."""
        sel = f"{mf.JOB_NAME}={name}"
        pods: dict[str, dict[str, Any]] = {}
        for event in self.kube.watch(
            self.kube.core.list_namespaced_pod, ns, label_selector=sel, timeout_s=SCHEDULE_WAIT_S
        ):
            obj = event["object"]
            pods[obj["metadata"]["name"]] = obj
            if len(pods) >= n:
                break
        return list(pods.values())

    def _settle(self, pods: list[dict[str, Any]], undo: Any, job: str = "") -> None:
        """Watch new pods until scheduled: one the scheduler cannot place makes the whole
        request a capacity error (everything made is deleted first: all or nothing)."""
        ns = self.namespace
        names = {p["metadata"]["name"] for p in pods}
        pending = {n for n in names}
        sel = f"{mf.JOB_NAME}={job}" if job else f"{mf.MANAGED}=true"
        current = {p["metadata"]["name"]: p for p in pods}
        for pod in current.values():
            self._placed_or_refused(pod, pending, undo)
        if not pending:
            return
        for event in self.kube.watch(
            self.kube.core.list_namespaced_pod, ns, label_selector=sel, timeout_s=SCHEDULE_WAIT_S
        ):
            pod = event["object"]
            if pod["metadata"]["name"] in names:
                self._placed_or_refused(pod, pending, undo)
            if not pending:
                return

    def _placed_or_refused(self, pod: Mapping[str, Any], pending: set[str], undo: Any) -> None:
        why = unschedulable(pod)
        if why is not None:
            undo()
            raise CapacityError(f"no node for {pod['metadata']['name']}: {why}", provider=NAME)
        if pod.get("spec", {}).get("nodeName"):
            pending.discard(pod["metadata"]["name"])

    def describe(self, instance_id: str) -> Instance:
        where = _parse_id(instance_id)
        if where is None:
            return Instance(instance_id, NAME, InstanceState.TERMINATED)
        kind, ns, name, index = where
        if kind == "pod":
            try:
                pod = self.kube.call(self.kube.core.read_namespaced_pod, name, ns)
            except NotFoundError:
                return Instance(instance_id, NAME, InstanceState.TERMINATED)
            return self._instance(instance_id, pod)
        sel = f"{mf.JOB_NAME}={name},{mf.COMPLETION_INDEX}={index}"
        pods = self.kube.call(self.kube.core.list_namespaced_pod, ns, label_selector=sel).get(
            "items", []
        )
        if pods:
            return self._instance(
                instance_id, max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))
            )
        try:
            self.kube.call(self.kube.batch.read_namespaced_job, name, ns)
        except NotFoundError:
            return Instance(instance_id, NAME, InstanceState.TERMINATED)
        return Instance(instance_id, NAME, InstanceState.PENDING)

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        sel = mf.selector(tags)
        pods = self.kube.call(
            self.kube.core.list_namespaced_pod, self.namespace, label_selector=sel
        )
        out = []
        for pod in pods.get("items", []):
            inst = self._instance(self._id_of(pod), pod)
            if not inst.state.is_gone and all(inst.tags.get(k) == v for k, v in tags.items()):
                out.append(inst)
        return out

    def terminate(self, instance_id: str) -> None:
        """Delete the pod (a job node: the whole Job, its pods and Service), then wait
        until the API no longer has the pod(s): deletion verified, not just asked for."""
        where = _parse_id(instance_id)
        if where is None:
            return
        kind, ns, name, _ = where
        if kind == "pod":
            try:
                self.kube.call(
                    self.kube.core.delete_namespaced_pod, name, ns, grace_period_seconds=5
                )
            except NotFoundError:
                return
            self._until_gone(lambda: self._pod_exists(ns, name), f"pod {ns}/{name}")
            return
        self._delete_job(ns, name)
        sel = f"{mf.JOB_NAME}={name}"
        self._until_gone(
            lambda: bool(
                self.kube.call(self.kube.core.list_namespaced_pod, ns, label_selector=sel).get(
                    "items"
                )
            ),
            f"the pods of job {ns}/{name}",
        )

    def _pod_exists(self, ns: str, name: str) -> bool:
        try:
            self.kube.call(self.kube.core.read_namespaced_pod, name, ns)
        except NotFoundError:
            return False
        return True

    def _until_gone(self, exists: Any, what: str) -> None:
        waited = 0.0
        while exists():
            if waited >= DELETE_WAIT_S:
                raise ProviderError(
                    f"{what} still there after {DELETE_WAIT_S:.0f} s", provider=NAME
                )
            self.ctx.sleep(0.25)
            waited += 0.25

    def _delete_job(self, ns: str, name: str) -> None:
        """The Job (its pods with it: Background propagation) and its Service."""
        for fn, kw in (
            (
                self.kube.batch.delete_namespaced_job,
                {"propagation_policy": "Background", "grace_period_seconds": 5},
            ),
            (self.kube.core.delete_namespaced_service, {}),
        ):
            try:
                self.kube.call(fn, name, ns, **kw)
            except NotFoundError:
                pass

    def open_machine(self, instance: Instance) -> PodMachine:
        pod = instance.extra.get("pod") or self.describe(instance.id).extra.get("pod")
        if not pod:
            raise NotFoundError(f"no pod for {instance.id}", provider=NAME)
        ns = instance.extra.get("namespace") or self.namespace
        return PodMachine(
            self.kube.open_exec(ns, pod, mf.CONTAINER), f"{ns}/{pod}", nvme_path=mf.NVME
        )

    # -- records ---------------------------------------------------------------------

    @staticmethod
    def _id_of(pod: Mapping[str, Any]) -> str:
        meta = pod.get("metadata", {})
        labels = meta.get("labels") or {}
        if labels.get(mf.JOB_NAME) and labels.get(mf.COMPLETION_INDEX):
            return f"job/{meta['namespace']}/{labels[mf.JOB_NAME]}/{labels[mf.COMPLETION_INDEX]}"
        return f"pod/{meta.get('namespace')}/{meta.get('name')}"

    def _instance(self, instance_id: str, pod: Mapping[str, Any]) -> Instance:
        meta, status, spec = pod.get("metadata", {}), pod.get("status", {}), pod.get("spec", {})
        notes = meta.get("annotations") or {}
        try:
            tags = {str(k): str(v) for k, v in json.loads(notes.get(mf.TAGS, "{}")).items()}
        except (ValueError, AttributeError):
            tags = {}
        where = _parse_id(instance_id)
        if where and where[0] == "job":
            records = notes.get(mf.NODE_TAGS, "").split(",")
            if where[3] < len(records) and records[where[3]]:
                tags["cloudgpu-instance"] = records[where[3]]
        state = _state(pod)
        return Instance(
            id=instance_id,
            provider=NAME,
            state=state,
            instance_type=notes.get(mf.TYPE, ""),
            region=self._settings().cluster or "kubernetes",
            zone=(spec.get("nodeSelector") or {}).get("topology.kubernetes.io/zone", ""),
            tags=tags,
            price_per_hour=float(notes.get(mf.PRICE) or 0),
            launched_at=_started(status),
            nvme_mount=mf.NVME,
            private_address=status.get("podIP", "") if state == InstanceState.RUNNING else "",
            extra={
                "pod": meta.get("name", ""),
                "namespace": meta.get("namespace", ""),
                "node": spec.get("nodeName", ""),
                "phase": status.get("phase", ""),
                "reason": status.get("reason", "") or (unschedulable(pod) or ""),
            },
        )


def _started(status: Mapping[str, Any]) -> float | None:
    text = status.get("startTime")
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
