"""A small client for Vast.ai's REST API over plain HTTP (urllib), with error mapping.

Base URL ``https://console.vast.ai/api/v0`` (https://docs.vast.ai/api-reference) unless
``VAST_API_BASE_URL`` or the ``api_url`` config key says otherwise. The key goes in
``Authorization: Bearer`` only: Vast also accepts ``?api_key=`` in the URL, which this
client never uses, so the key cannot leak through a logged URL. Vast's error answers are
``{"success": false, "error": "<code>", "msg": "<text>"}``; the mapping keys on the code
where there is one. Must not put the key into an exception message.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any, Unpack

from cloudgpu.errors import (
    AuthError,
    CapacityError,
    NotFoundError,
    ProviderError,
    QuotaError,
    TransientError,
)
from cloudgpu.httpjson import RETRY_STATUSES, JsonHttpClient, RetryOptions, error_json, parse_json

DEFAULT_BASE_URL = "https://console.vast.ai/api/v0"
PROVIDER = "vast"
KEY_HINT = "check VAST_API_KEY (console.vast.ai > Account > API keys)"

# Error codes of an offer that is gone or was taken (someone else rented the machine).
CAPACITY_CODES = frozenset({"no_such_ask", "ask_not_available", "offer_unavailable"})
QUOTA_CODES = frozenset({"insufficient_credit", "insufficient_funds", "max_instances"})


class VastClient(JsonHttpClient):
    """Sends JSON requests; retries throttling with backoff through the injected ``sleep``."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        sleep: Callable[[float], None],
        **retry: Unpack[RetryOptions],
    ) -> None:
        super().__init__(
            base_url, sleep, map_status=map_error, token=api_key, provider=PROVIDER, **retry
        )

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Send one request; return the parsed JSON object or raise a mapped ProviderError."""
        if query:
            path += "?" + urllib.parse.urlencode(
                {k: v if isinstance(v, str) else json.dumps(v) for k, v in query.items()}
            )
        return self.request(method, path, _object, body)


def _object(raw: bytes) -> dict[str, Any]:
    parsed = parse_json(raw, "Vast", PROVIDER, empty=b"{}")
    if not isinstance(parsed, dict):
        raise ProviderError("Vast answered with an unexpected shape", provider=PROVIDER)
    if parsed.get("success") is False:  # some failures come back as HTTP 200
        raise map_error(200, raw)
    return parsed


def error_code(raw: bytes) -> tuple[str, str]:
    """(code, message) of a Vast error body."""
    parsed, text = error_json(raw)
    if parsed is None:
        return "", text
    if not isinstance(parsed, dict):
        return "", ""
    message = parsed.get("msg") or parsed.get("detail") or parsed.get("message") or ""
    return str(parsed.get("error") or ""), str(message)


def map_error(status: int, raw: bytes) -> ProviderError:
    code, message = error_code(raw)
    text = f"{message or 'HTTP ' + str(status)} ({code or status})"
    if status in (401, 403) or code in ("invalid_api_key", "unauthorized", "auth_error"):
        return AuthError(f"Vast rejected the API key: {text}", provider=PROVIDER, hint=KEY_HINT)
    if code in CAPACITY_CODES:
        return CapacityError(f"offer no longer available: {text}", provider=PROVIDER)
    if code in QUOTA_CODES:
        return QuotaError(f"account limit: {text}", provider=PROVIDER, hint="add credit at vast.ai")
    if status == 404 or code == "not_found":
        return NotFoundError(text, provider=PROVIDER)
    if status in RETRY_STATUSES or status >= 500:
        return TransientError(f"Vast HTTP {status}: {text}", provider=PROVIDER)
    return ProviderError(f"Vast HTTP {status}: {text}", provider=PROVIDER)
