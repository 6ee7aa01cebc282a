"""A small client for Lambda Cloud's REST API over plain HTTP (urllib), with error mapping.

Base URL ``https://cloud.lambda.ai/api/v1`` (docs: https://docs-api.lambda.ai/api/cloud)
unless ``LAMBDA_API_BASE_URL`` or the ``api_url`` config key says otherwise. The key goes
in ``Authorization: Bearer`` only, never into a URL. Every answer is ``{"data": ...}`` or
``{"error": {"code", "message", "suggestion"}}``; Lambda asks clients to branch on
``code``, not on the text, so the mapping below keys on codes. This module must not put
the key, or a response that might echo it, into an exception message.
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
    QuotaError,
    TransientError,
)

DEFAULT_BASE_URL = "https://cloud.lambda.ai/api/v1"
PROVIDER = "lambda"
KEY_HINT = "check LAMBDA_API_KEY (Lambda Cloud console > API keys)"

# Statuses where Lambda refused the request without acting on it: safe to send again.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
# Reading is safe to repeat after a broken connection; a launch is not (it may have landed).
SAFE_METHODS = frozenset({"GET", "DELETE"})


class LambdaClient:
    """Sends JSON requests; retries throttling with backoff through the injected ``sleep``."""

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
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._sleep = sleep
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s

    def __repr__(self) -> str:  # never show the key
        return f"LambdaClient({self.base_url!r})"

    def call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        """Send one request; return the answer's ``data`` or raise a mapped ProviderError."""
        raw = None if body is None else json.dumps(dict(body)).encode()
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            try:
                return self._send(method, path, raw)
            except _Retryable as exc:
                if attempt == self.attempts:
                    raise exc.error from None
                self._sleep(delay)
                delay = min(delay * 2, 30.0)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _send(self, method: str, path: str, raw: bytes | None) -> Any:
        url = self.base_url + path
        req = urllib.request.Request(
            url,
            data=raw,
            method=method,
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json",
                "User-Agent": "cloudgpu",
                "Authorization": f"Bearer {self._api_key}",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as exc:
            error = map_error(exc.code, exc.read() or b"")
            if exc.code in RETRY_STATUSES:
                raise _Retryable(error) from None
            raise error from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            error = TransientError(f"cannot reach {self.base_url}: {reason}", provider=PROVIDER)
            if method in SAFE_METHODS:
                raise _Retryable(error) from None
            raise error from None
        try:
            parsed = json.loads(payload)
        except ValueError:
            raise _Retryable(
                TransientError("Lambda answered with non-JSON", provider=PROVIDER)
            ) from None
        if not isinstance(parsed, dict) or "data" not in parsed:
            raise ProviderError("Lambda answered without data", provider=PROVIDER)
        return parsed["data"]


class _Retryable(Exception):
    def __init__(self, error: ProviderError) -> None:
        super().__init__(str(error))
        self.error = error


def error_code(raw: bytes) -> tuple[str, str]:
    """(code, message) of a Lambda error body; empty strings when it is not one."""
    try:
        parsed = json.loads(raw)
    except ValueError:
        return "", raw[:200].decode("utf-8", "replace")
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
