"""GitHub webhook checks: signature, replay, and the `workflow_job` payload.

The signature is ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, raw body)>``,
compared in constant time (https://docs.github.com/en/webhooks/using-webhooks/
validating-webhook-deliveries). Deliveries are de-duplicated on ``X-GitHub-Delivery``.
Nothing here touches the network or the state store; the server passes both in.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


def signature(secret: bytes, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """True when ``header`` is the valid signature of ``body`` (constant-time compare)."""
    if not header or not header.startswith("sha256="):
        return False
    return hmac.compare_digest(signature(secret, body), header)


class ReplayGuard:
    """Remembers the last ``capacity`` delivery ids; thread-safe."""

    def __init__(self, capacity: int = 10_000) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def first_time(self, delivery_id: str) -> bool:
        with self._lock:
            if delivery_id in self._seen:
                return False
            self._seen[delivery_id] = None
            if len(self._seen) > self._capacity:
                self._seen.popitem(last=False)
            return True


@dataclass(frozen=True)
class WorkflowJobEvent:
    action: str  # queued | in_progress | completed | waiting
    job_id: int
    run_id: int
    repo: str
    labels: tuple[str, ...]
    runner_name: str
    private: bool


def parse_workflow_job(body: bytes) -> WorkflowJobEvent:
    """Parse a ``workflow_job`` delivery (payload shape:
    https://docs.github.com/en/webhooks/webhook-events-and-payloads#workflow_job)."""
    data: dict[str, Any] = json.loads(body)
    job = data["workflow_job"]
    repo = data["repository"]
    return WorkflowJobEvent(
        action=str(data["action"]),
        job_id=int(job["id"]),
        run_id=int(job.get("run_id", 0)),
        repo=str(repo["full_name"]),
        labels=tuple(str(x) for x in job.get("labels", [])),
        runner_name=str(job.get("runner_name") or ""),
        private=bool(repo.get("private", True)),
    )
