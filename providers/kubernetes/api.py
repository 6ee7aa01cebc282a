"""The few API calls the provider makes, through the official client, as plain JSON.

Objects are read raw (``_preload_content=False``) so the provider sees the API's own
JSON, as the API reference documents it. Errors are mapped here, once: 401/403 auth
(403 naming a ResourceQuota: quota), 404 not found, 409 conflict (kept as is: create
answers it by reading the existing object), 422 a rejected object, 429/5xx and
connection failures transient. The SDK is imported only here, lazily.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from cloudgpu.errors import (
    AuthError,
    ConfigError,
    NotFoundError,
    ProviderError,
    QuotaError,
    RemoteError,
    TransientError,
)

NAME = "kubernetes"
TIMEOUT_S = 30.0


class Conflict(ProviderError):
    """409: the object exists already (create by name is then idempotent)."""


def _status_message(body: Any) -> str:
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        return str(body or "")[:300]
    return str(data.get("message") or data.get("reason") or "")[:300]


def mapped(exc: Exception) -> ProviderError:
    """A cloudgpu error for an SDK exception (ApiException, urllib3/websocket errors)."""
    status = getattr(exc, "status", None)
    message = _status_message(getattr(exc, "body", None)) or str(exc)[:300]
    if status in (401, 403):
        if "exceeded quota" in message:
            return QuotaError(f"{message}", provider=NAME)
        return AuthError(
            f"{message or 'unauthorized'}",
            provider=NAME,
            hint="check the kubeconfig's credentials and RBAC for pods, jobs and services",
        )
    if status == 404:
        return NotFoundError(f"{message}", provider=NAME)
    if status == 409:
        return Conflict(f"{message}", provider=NAME)
    if status == 422:
        return ProviderError(f"object refused: {message}", provider=NAME)
    if status == 429 or (isinstance(status, int) and status >= 500) or not status:
        return TransientError(f"{message or type(exc).__name__}", provider=NAME)
    return ProviderError(f"HTTP {status}: {message}", provider=NAME)


class Kube:
    """CoreV1 + BatchV1 for one kubeconfig context, answering JSON dicts."""

    def __init__(self, kubeconfig: str, context: str = "") -> None:
        from kubernetes import client, config  # lazy: only this provider pays for the SDK
        from kubernetes.config.config_exception import ConfigException

        try:
            self.api_client = config.new_client_from_config(
                config_file=kubeconfig, context=context or None, persist_config=False
            )
        except (ConfigException, OSError, ValueError) as exc:
            raise ConfigError(f"providers.kubernetes: kubeconfig {kubeconfig}: {exc}") from exc
        self.core = client.CoreV1Api(self.api_client)
        self.batch = client.BatchV1Api(self.api_client)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            resp = fn(*args, _preload_content=False, _request_timeout=TIMEOUT_S, **kwargs)
            data = json.loads(resp.data)
        except Exception as exc:  # the SDK's and urllib3's errors share no base class
            if isinstance(exc, ProviderError):
                raise
            raise mapped(exc) from exc
        if not isinstance(data, dict):
            raise ProviderError("the API answered something not an object", provider=NAME)
        return data

    def watch(
        self, fn: Callable[..., Any], *args: Any, timeout_s: int, **kwargs: Any
    ) -> Iterator[dict[str, Any]]:
        """The watch stream's events ({"type", "object"}) for at most ``timeout_s``."""
        from kubernetes import watch

        w = watch.Watch()
        try:
            for event in w.stream(fn, *args, timeout_seconds=timeout_s, **kwargs):
                yield {"type": event["type"], "object": event["raw_object"]}
        except Exception as exc:
            if isinstance(exc, ProviderError):
                raise
            raise mapped(exc) from exc
        finally:
            w.stop()

    def open_exec(
        self, namespace: str, pod: str, container: str
    ) -> Callable[[Sequence[str], bool], Any]:
        """A function opening one exec websocket into the container per call."""
        from kubernetes import client
        from kubernetes.stream import stream

        def open_one(argv: Sequence[str], stdin: bool) -> Any:
            # A client of its own per exec: stream() swaps its ApiClient's call_api for
            # the websocket one while connecting, so a REST call from another thread
            # (the watcher's describe) on a shared client would go out as a websocket.
            core = client.CoreV1Api(client.ApiClient(self.api_client.configuration))
            try:
                return stream(
                    core.connect_get_namespaced_pod_exec,
                    pod,
                    namespace,
                    container=container,
                    command=list(argv),
                    stdin=stdin,
                    stdout=True,
                    stderr=True,
                    tty=False,
                    _preload_content=False,
                    binary=True,
                )
            except Exception as exc:
                raise RemoteError(f"exec into {namespace}/{pod}: {mapped(exc)}") from exc

        return open_one

    def close(self) -> None:
        self.api_client.close()
