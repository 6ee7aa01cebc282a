"""GCP API clients (Compute Engine, Cloud Billing Catalog), retries and error mapping.

The google-cloud SDKs are imported here lazily, inside functions, so importing the
provider costs nothing. Every call goes through :meth:`Clients.call`, which retries
throttling and 5xx with backoff through the injected ``sleep`` (the SDKs' own retry is
switched off with ``retry=None`` so there is one retry policy, and tests never wait) and
maps SDK exceptions into cloudgpu.errors at this boundary. No exception message here
may contain a token or key; the SDK's messages carry URLs and resource names only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from cloudgpu_providers.gcp.credentials import CredentialSource

from cloudgpu.errors import (
    AuthError,
    CapacityError,
    NotFoundError,
    ProviderError,
    QuotaError,
    TransientError,
)
from cloudgpu.retry import Backoff, Retry, retrying

PROVIDER = "gcp"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
T = TypeVar("T")

_CAPACITY = re.compile(r"ZONE_RESOURCE_POOL_EXHAUSTED|RESOURCE_POOL_EXHAUSTED|STOCKOUT", re.I)
_QUOTA = re.compile(r"QUOTA_EXCEEDED|quotaExceeded|Quota '[^']*' exceeded", re.I)
_RATE = re.compile(r"rateLimitExceeded|userRateLimitExceeded|RATE_LIMIT_EXCEEDED", re.I)
_NOT_IN_ZONE = re.compile(
    r"(machine ?type|accelerator ?type|disk ?type).*(does not exist|not (available|supported)) in "
    r"zone",
    re.I,
)
AUTH_HINT = "run `gcloud auth application-default login` or set GOOGLE_APPLICATION_CREDENTIALS"


def map_exception(exc: BaseException) -> ProviderError:
    """One SDK/transport exception -> the project's error (message keeps the cause)."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    if isinstance(exc, ProviderError):
        return exc
    if isinstance(exc, auth_exc.TransportError):
        return TransientError("cannot reach Google's token endpoint", provider=PROVIDER)
    if isinstance(exc, auth_exc.GoogleAuthError):
        # e.g. RefreshError "invalid_grant: Token has been expired or revoked." (no secret;
        # CloudGPUError redacts anything that looks like one anyway)
        reason = f"credentials refused: {type(exc).__name__}: {str(exc)[:200]}"
        return AuthError(reason, provider=PROVIDER, hint=AUTH_HINT)
    if isinstance(exc, gexc.GoogleAPICallError):
        detail = f"{exc.message} {exc.errors}"
        return map_status(int(exc.code or 0), detail, str(exc.message))
    if isinstance(exc, gexc.RetryError | TimeoutError | ConnectionError | OSError):
        return TransientError(f"cannot reach the GCP API: {type(exc).__name__}", provider=PROVIDER)
    name = type(exc).__name__
    if "Connection" in name or "Timeout" in name:  # requests' exceptions, without importing it
        return TransientError(f"cannot reach the GCP API: {name}", provider=PROVIDER)
    return ProviderError(f"unexpected {name}: {exc}", provider=PROVIDER)


def map_status(status: int, detail: str, message: str) -> ProviderError:
    """Map by the error's code names first (they are stable), then by HTTP status."""
    if _CAPACITY.search(detail):
        return CapacityError(f"no capacity: {message}", provider=PROVIDER)
    if status == 400 and _NOT_IN_ZONE.search(detail):
        # A stale catalog row: this zone does not (or no longer) offer the shape.
        return CapacityError(f"not offered here: {message}", provider=PROVIDER)
    if _QUOTA.search(detail):
        return QuotaError(
            f"quota exceeded: {message}",
            provider=PROVIDER,
            hint="request a quota increase in the console (IAM & Admin > Quotas)",
        )
    if status == 429 or _RATE.search(detail) or status >= 500:
        return TransientError(f"HTTP {status}: {message}", provider=PROVIDER)
    if status in (401, 403):
        return AuthError(f"HTTP {status}: {message}", provider=PROVIDER, hint=AUTH_HINT)
    if status == 404:
        return NotFoundError(message, provider=PROVIDER)
    return ProviderError(f"HTTP {status}: {message}", provider=PROVIDER)


def operation_error(op: Any) -> ProviderError | None:
    """The error of a finished compute Operation (errors[].code names), if any."""
    errors = list(op.error.errors) if op.error else []
    if not errors and not op.http_error_status_code:
        return None
    codes = " ".join(f"{e.code}: {e.message}" for e in errors)
    first = errors[0].message if errors else op.http_error_message
    return map_status(int(op.http_error_status_code or 400), codes, f"{codes or first}")


class Clients:
    """Builds the SDK clients once, with the endpoint and credentials from config."""

    def __init__(
        self,
        config: Mapping[str, Any],
        source: CredentialSource,
        sleep: Callable[[float], None],
    ) -> None:
        self.config = config
        self.source = source
        self._sleep = sleep
        self._cache: dict[str, Any] = {}
        self.attempts = max(1, int(config.get("attempts", 5)))
        self.backoff_s = float(config.get("backoff_s", 1.0))
        self.timeout_s = float(config.get("timeout_s", 60.0))

    def _credentials(self) -> Any:
        if "credentials" in self._cache:
            return self._cache["credentials"]
        import google.auth
        from google.auth.credentials import AnonymousCredentials

        try:
            if self.source.kind == "anonymous":
                creds: Any = AnonymousCredentials()
            elif self.source.kind == "file" and self.source.path is not None:
                creds, _ = google.auth.load_credentials_from_file(
                    str(self.source.path), scopes=list(SCOPES)
                )
            else:
                creds, _ = google.auth.default(scopes=list(SCOPES))
        except Exception as exc:
            raise AuthError(
                f"cannot load credentials ({self.source.description or 'ADC'}): "
                f"{type(exc).__name__}",
                provider=PROVIDER,
                hint=AUTH_HINT,
            ) from exc
        self._cache["credentials"] = creds
        return creds

    def _options(self, key: str) -> dict[str, Any]:
        endpoint = self.config.get(key) or self.config.get("endpoint_url")
        return {"api_endpoint": str(endpoint)} if endpoint else {}

    def compute(self, name: str) -> Any:
        """A compute_v1 client by class name, e.g. "InstancesClient" (REST transport)."""
        if name not in self._cache:
            from google.cloud import compute_v1

            cls = getattr(compute_v1, name)
            self._cache[name] = cls(
                credentials=self._credentials(),
                transport="rest",
                client_options=self._options("endpoint_url"),
            )
        return self._cache[name]

    def billing(self) -> Any:
        if "billing" not in self._cache:
            from google.cloud import billing_v1

            self._cache["billing"] = billing_v1.CloudCatalogClient(
                credentials=self._credentials(),
                transport="rest",
                client_options=self._options("billing_endpoint_url"),
            )
        return self._cache["billing"]

    def call(self, fn: Callable[..., T], **kwargs: Any) -> T:
        """``fn(**kwargs)`` with our retry policy (cloudgpu.retry) and error mapping."""

        def once() -> T:
            try:
                return fn(retry=None, timeout=self.timeout_s, **kwargs)
            except Exception as exc:
                mapped = map_exception(exc)
                if isinstance(mapped, TransientError):
                    raise Retry(mapped) from exc
                raise mapped from exc

        return retrying(once, Backoff(self.attempts, self.backoff_s, 30.0), sleep=self._sleep)

    def pages(self, fn: Callable[..., Any], request: dict[str, Any]) -> Iterator[Any]:
        """Each page's response, following nextPageToken, each page retried on its own."""
        token = ""
        while True:
            page = self.call(fn, request={**request, "page_token": token})
            yield page
            token = page.next_page_token
            if not token:
                return
