"""The objects the provider creates, as the API's JSON: core/v1 Pod, batch/v1 Job
(indexed completion mode) and a headless core/v1 Service. Pure: no I/O.

References (Kubernetes API v1.30): Pod
https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/, Job
https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/job-v1/ (indexed
jobs: https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode),
Service https://kubernetes.io/docs/reference/kubernetes-api/service-resources/service-v1/,
labels https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/.

Every object carries the label ``cloudgpu-managed=true`` and the job/owner labels (label
values are restricted, so owner "user@host" is sanitized there), and the exact cloudgpu
tags as the JSON annotation ``cloudgpu/tags``: listing selects by label, then matches the
exact tags from the annotation. The container only holds the pod; the lifecycle's
commands run in it through the exec API. Local NVMe is an emptyDir at /nvme.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from cloudgpu.catalog.offer import Offer

MANAGED = "cloudgpu-managed"
JOB_LABEL = "cloudgpu-job"
OWNER_LABEL = "cloudgpu-owner"
INSTANCE_LABEL = "cloudgpu-instance"
TAGS = "cloudgpu/tags"  # annotation: the exact tags (one JSON object)
NODE_TAGS = "cloudgpu/node-instances"  # annotation on a Job: each index's instance record
TOKEN = "cloudgpu/token"
PRICE = "cloudgpu/price"
TYPE = "cloudgpu/instance-type"
CONTAINER = "job"
NVME = "/nvme"
JOB_NAME = "batch.kubernetes.io/job-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# Holds the pod until deleted; answers SIGTERM at once (a pod's graceful stop).
HOLD = ["sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]
_BAD = re.compile(r"[^a-z0-9-]+")
_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def dns_name(text: str, limit: int = 63) -> str:
    """A DNS-1123 label from any text (lowercase, digits, '-'); a hash keeps it unique
    when it had to be cut or changed."""
    clean = _BAD.sub("-", text.lower()).strip("-") or "x"
    if clean == text and len(clean) <= limit:
        return clean
    digest = hashlib.sha256(text.encode()).hexdigest()[:6]
    return f"{clean[: limit - 7].rstrip('-')}-{digest}"


def label_value(text: str) -> str:
    """A valid label value: at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends."""
    clean = _LABEL_BAD.sub("_", text)[:63].strip("_.-")
    return clean or "x"


def labels(tags: Mapping[str, str]) -> dict[str, str]:
    out = {MANAGED: "true"}
    for key, label in (("cloudgpu-job", JOB_LABEL), ("cloudgpu-owner", OWNER_LABEL)):
        if tags.get(key):
            out[label] = label_value(tags[key])
    return out


def selector(tags: Mapping[str, str]) -> str:
    """The label selector narrowing a listing to ``tags`` (exact match comes after)."""
    return ",".join(f"{k}={v}" for k, v in labels(tags).items())


def _container(offer: Offer, image: str) -> dict[str, Any]:
    requests = dict(offer.extra.get("requests") or {})
    limits: dict[str, Any] = {}
    if offer.gpu_count:
        # Extended resources: the request must equal the limit (the API refuses otherwise).
        requests["nvidia.com/gpu"] = str(offer.gpu_count)
        limits["nvidia.com/gpu"] = str(offer.gpu_count)
    return {
        "name": CONTAINER,
        "image": image,
        "command": HOLD,
        "resources": {"requests": requests, "limits": limits},
        "volumeMounts": [{"name": "nvme", "mountPath": NVME}],
        "env": [{"name": "CLOUDGPU_NVME", "value": NVME}],
    }


def pod_spec(
    offer: Offer, image: str, deadline_s: int | None, service_account: str = ""
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [_container(offer, image)],
        "volumes": [{"name": "nvme", "emptyDir": {}}],
        "nodeSelector": dict(offer.extra.get("node_selector") or {}),
        # GPU nodes are commonly tainted so only GPU pods land there.
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "terminationGracePeriodSeconds": 10,
        "enableServiceLinks": False,
    }
    if deadline_s is not None:
        spec["activeDeadlineSeconds"] = max(1, deadline_s)  # the cluster's own deadline
    if service_account:
        spec["serviceAccountName"] = service_account
    return spec


def _meta(name: str, tags: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "labels": labels(tags),
        "annotations": {TAGS: json.dumps(dict(tags), sort_keys=True), **extra},
    }


def pod(
    name: str,
    tags: Mapping[str, str],
    offer: Offer,
    token: str,
    spec: Mapping[str, Any],
) -> dict[str, Any]:
    meta = _meta(name, tags, _record(offer, token))
    if tags.get("cloudgpu-instance"):
        meta["labels"][INSTANCE_LABEL] = label_value(tags["cloudgpu-instance"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": dict(spec)}


def _record(offer: Offer, token: str) -> dict[str, str]:
    return {TOKEN: token, PRICE: f"{offer.price_per_hour:g}", TYPE: offer.instance_type}


def indexed_job(
    name: str,
    tags: Mapping[str, str],
    node_records: Sequence[str],
    offer: Offer,
    token: str,
    spec: Mapping[str, Any],
) -> dict[str, Any]:
    """N pods of one offer, index i = node rank i, reachable as ``NAME-i.NAME``."""
    n = len(node_records)
    meta = _meta(name, tags, {**_record(offer, token), NODE_TAGS: ",".join(node_records)})
    template_spec = {**spec, "subdomain": name}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "completionMode": "Indexed",
            "completions": n,
            "parallelism": n,
            "backoffLimit": 0,  # a failed pod is a failed node: the lifecycle decides
            **(
                {"activeDeadlineSeconds": spec["activeDeadlineSeconds"]}
                if "activeDeadlineSeconds" in spec
                else {}
            ),
            "template": {
                "metadata": {"labels": labels(tags), "annotations": meta["annotations"]},
                "spec": template_spec,
            },
        },
    }


def headless_service(name: str, tags: Mapping[str, str]) -> dict[str, Any]:
    """DNS for the job's pods (``NAME-i.NAME``), ready or not, for the rendezvous."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, tags, {}),
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_NAME: name},
            "publishNotReadyAddresses": True,
        },
    }
