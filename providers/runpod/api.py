"""A small client for RunPod's GraphQL API over plain HTTP (urllib), with error mapping.

RunPod's endpoint is ``{base}/graphql`` with ``base`` = ``https://api.runpod.io`` unless
``RUNPOD_API_BASE_URL`` (or the ``api_base_url`` config key) says otherwise, the same
variable the official ``runpod`` SDK honours. The key goes in ``Authorization: Bearer``
(runpod-python's runpod/api/graphql.py does the same), never into the URL, so it cannot
leak through a logged URL. This module maps every failure into cloudgpu.errors and must
not put the key, or a response that might echo it, into an exception message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Unpack

from cloudgpu.errors import (
    AuthError,
    CapacityError,
    NotFoundError,
    ProviderError,
    TransientError,
)
from cloudgpu.httpjson import JsonHttpClient, RetryableError, RetryOptions, error_json, parse_json

DEFAULT_BASE_URL = "https://api.runpod.io"
PROVIDER = "runpod"

# HTTP statuses worth a retry: throttling and the gateway/server hiccups.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})

# RunPod reports "no capacity" as a GraphQL error with this text (REFERENCE.md section 7).
CAPACITY_PHRASES = (
    "no longer any instances available",
    "not enough free gpus",
    "no instances available",
)


class GraphQLClient(JsonHttpClient):
    """POSTs queries; retries throttling with backoff through the injected ``sleep``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        sleep: Callable[[float], None],
        **retry: Unpack[RetryOptions],
    ) -> None:
        super().__init__(
            base_url.rstrip("/") + "/graphql",
            sleep,
            map_status=_http_error,
            token=api_key,
            provider=PROVIDER,
            retry_statuses=RETRY_STATUSES,
            **retry,
        )
        self.url = self.base_url

    def query(
        self,
        query: str,
        variables: Mapping[str, Any] | None = None,
        *,
        idempotent: bool | None = None,
    ) -> dict[str, Any]:
        """Run ``query``; return its ``data`` object or raise a mapped ProviderError.

        Every GraphQL call is a POST: reads are sent again after a broken connection, a
        mutation (a deploy) never once it may have landed; ``idempotent=True`` for one
        that is safe to repeat (terminate)."""
        body = {"query": query, "variables": dict(variables or {})}
        if idempotent is None:
            idempotent = not query.lstrip().startswith("mutation")
        return self.request("POST", "", _data, body, idempotent=idempotent)


def _data(raw: bytes) -> dict[str, Any]:
    parsed = parse_json(raw, "RunPod", PROVIDER)
    if not isinstance(parsed, dict):
        raise ProviderError("RunPod answered with an unexpected shape", provider=PROVIDER)
    try:
        return _data_or_raise(parsed)
    except TransientError as exc:  # a GraphQL-level "rate limit": worth another try
        raise RetryableError(exc) from None


def _http_error(status: int, raw: bytes) -> ProviderError:
    message = _first_error_message(raw)
    if status in (401, 403):
        return AuthError(
            f"RunPod rejected the API key (HTTP {status})",
            provider=PROVIDER,
            hint="check RUNPOD_API_KEY (Settings > API Keys at runpod.io); it needs read/write",
        )
    if status in RETRY_STATUSES:
        return TransientError(f"RunPod HTTP {status}: {message}", provider=PROVIDER)
    return ProviderError(f"RunPod HTTP {status}: {message}", provider=PROVIDER)


def _first_error_message(raw: bytes) -> str:
    parsed, text = error_json(raw)
    if parsed is None:
        return text
    if isinstance(parsed, dict):
        errors = parsed.get("errors") or []
        if errors and isinstance(errors[0], dict):
            return str(errors[0].get("message", ""))
        return str(parsed.get("message") or parsed.get("error") or "")
    return ""


def _data_or_raise(payload: dict[str, Any]) -> dict[str, Any]:
    errors = payload.get("errors") or []
    if errors:
        first = errors[0] if isinstance(errors[0], dict) else {"message": str(errors[0])}
        raise map_graphql_error(str(first.get("message", "")))
    data = payload.get("data")
    if not isinstance(data, dict):
        raise ProviderError("RunPod answered without data", provider=PROVIDER)
    return data


def map_graphql_error(message: str) -> ProviderError:
    """Map a GraphQL error message (RunPod has no error codes we can rely on)."""
    low = message.lower()
    if any(p in low for p in CAPACITY_PHRASES):
        return CapacityError(f"no capacity: {message}", provider=PROVIDER)
    if "unauthorized" in low or "api key" in low or "authenticat" in low:
        return AuthError(message, provider=PROVIDER, hint="check RUNPOD_API_KEY")
    if "not found" in low or "does not exist" in low:
        return NotFoundError(message, provider=PROVIDER)
    if "rate limit" in low or "too many requests" in low:
        return TransientError(message, provider=PROVIDER)
    return ProviderError(message, provider=PROVIDER)
