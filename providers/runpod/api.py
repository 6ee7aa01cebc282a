"""A small client for RunPod's GraphQL API over plain HTTP (urllib), with error mapping.

RunPod's endpoint is ``{base}/graphql`` with ``base`` = ``https://api.runpod.io`` unless
``RUNPOD_API_BASE_URL`` (or the ``api_base_url`` config key) says otherwise, the same
variable the official ``runpod`` SDK honours. The key goes in ``Authorization: Bearer``
(runpod-python's runpod/api/graphql.py does the same), never into the URL, so it cannot
leak through a logged URL. This module maps every failure into cloudgpu.errors and must
not put the key, or a response that might echo it, into an exception message.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from cloudgpu.errors import (
    AuthError,
    CapacityError,
    NotFoundError,
    ProviderError,
    TransientError,
)

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


class GraphQLClient:
    """POSTs queries; retries throttling with backoff through the injected ``sleep``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        sleep: Callable[[float], None],
        *,
        attempts: int = 5,
        backoff_s: float = 1.0,
        timeout_s: float = 30.0,
    ) -> None:
        self.url = base_url.rstrip("/") + "/graphql"
        self._api_key = api_key
        self._sleep = sleep
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s

    def __repr__(self) -> str:  # never show the key
        return f"GraphQLClient({self.url!r})"

    def query(self, query: str, variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Run ``query``; return its ``data`` object or raise a mapped ProviderError."""
        body = json.dumps({"query": query, "variables": dict(variables or {})}).encode()
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            try:
                return _data_or_raise(self._post(body))
            except TransientError:
                if attempt == self.attempts:
                    raise
                self._sleep(delay)
                delay = min(delay * 2, 30.0)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _post(self, body: bytes) -> dict[str, Any]:
        req = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": "cloudgpu",
                "Authorization": f"Bearer {self._api_key}",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read() or b""
            raise _http_error(exc.code, raw) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TransientError(f"cannot reach {self.url}: {reason}", provider=PROVIDER) from None
        try:
            parsed = json.loads(raw)
        except ValueError:
            raise TransientError("RunPod answered with non-JSON", provider=PROVIDER) from None
        if not isinstance(parsed, dict):
            raise ProviderError("RunPod answered with an unexpected shape", provider=PROVIDER)
        return parsed


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
    try:
        parsed = json.loads(raw)
    except ValueError:
        return raw[:200].decode("utf-8", "replace")
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
