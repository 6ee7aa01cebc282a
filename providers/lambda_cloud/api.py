"""A small client for Lambda Cloud's REST API over plain HTTP (urllib), with error mapping.

Base URL ``https://cloud.lambda.ai/api/v1`` (docs: https://docs-api.lambda.ai/api/cloud)
unless ``LAMBDA_API_BASE_URL`` or the ``api_url`` config key says otherwise. The key goes
in ``Authorization: Bearer`` only, never into a URL. Every answer is ``{"data": ...}`` or
``{"error": {"code", "message", "suggestion"}}``; Lambda asks clients to branch on
``code``, not on the text, so the mapping below keys on codes. This module must not put
the key, or a response that might echo it, into an exception message.
"""

from __future__ import annotations

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

DEFAULT_BASE_URL = "https://cloud.lambda.ai/api/v1"
PROVIDER = "lambda"
KEY_HINT = "check LAMBDA_API_KEY (Lambda Cloud console > API keys)"


class LambdaClient(JsonHttpClient):
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

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """Send one request; return the answer's ``data`` or raise a mapped ProviderError."""
        return self.request(method, path, _data, body)


def _data(raw: bytes) -> Any:
    parsed = parse_json(raw, "Lambda", PROVIDER)
    if not isinstance(parsed, dict) or "data" not in parsed:
        raise ProviderError("Lambda answered without data", provider=PROVIDER)
    return parsed["data"]


def error_code(raw: bytes) -> tuple[str, str]:
    """(code, message) of a Lambda error body; empty strings when it is not one."""
    parsed, text = error_json(raw)
    if parsed is None:
        return "", text
    err = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(err, dict):
        return "", ""
    return str(err.get("code") or ""), str(err.get("message") or "")


def map_error(status: int, raw: bytes) -> ProviderError:
    """Map an HTTP error answer to cloudgpu.errors by Lambda's error ``code``."""
    code, message = error_code(raw)
    text = f"{message or 'HTTP ' + str(status)} ({code or status})"
    if code in ("global/invalid-api-key", "global/account-inactive") or status == 401:
        return AuthError(f"Lambda rejected the API key: {text}", provider=PROVIDER, hint=KEY_HINT)
    if code.endswith("insufficient-capacity"):
        return CapacityError(f"no capacity: {text}", provider=PROVIDER)
    if "quota" in code:
        return QuotaError(
            f"quota: {text}", provider=PROVIDER, hint="ask Lambda support to raise the limit"
        )
    if code == "global/object-does-not-exist" or status == 404:
        return NotFoundError(text, provider=PROVIDER)
    if status == 403:
        return AuthError(f"Lambda refused: {text}", provider=PROVIDER, hint=KEY_HINT)
    if status in RETRY_STATUSES or status >= 500:
        return TransientError(f"Lambda HTTP {status}: {text}", provider=PROVIDER)
    return ProviderError(f"Lambda HTTP {status}: {text}", provider=PROVIDER)
