"""A tiny JSON-over-HTTP client (urllib) with retry, backoff and pluggable error mapping.

Shared by the REST/GraphQL providers (Lambda, Vast.ai, RunPod) and Azure's Retail Prices
reader. It sends one request and retries with exponential backoff and jitter
(cloudgpu.retry) through the injected ``sleep`` (tests never wait), honouring
``Retry-After``. A request that is not idempotent (a POST
that creates something) is sent again only when the server cannot have acted on it:
throttled (429), unavailable (503) or a refused connection; after a gateway error, a
timeout or a lost answer it may have landed, so the error goes to the caller, who must
look for what it made (by name or tag) before sending it again. Every failure becomes a
cloudgpu.errors type through hooks the caller supplies, since each API words its errors
differently. The bearer token goes in the ``Authorization`` header only: this module never
puts it into a URL, a repr or an exception message. It knows nothing of any provider's
answer shapes; those belong to the ``parse`` hook each call passes.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Set
from typing import Any, TypedDict, TypeVar

from cloudgpu.errors import ProviderError, TransientError
from cloudgpu.retry import Backoff, Retry, retrying

# Statuses worth another try of a request that is safe to repeat.
RETRY_STATUSES: frozenset[int] = frozenset({429, 502, 503, 504})
# Of those, the ones where the server refused the request without acting on it.
REFUSED_STATUSES: frozenset[int] = frozenset({429, 503})
# Reading is safe to repeat after a broken connection; a create may have landed.
SAFE_METHODS: frozenset[str] = frozenset({"GET", "DELETE"})

T = TypeVar("T")
MapStatus = Callable[[int, bytes], ProviderError]
MapUnreachable = Callable[[OSError], ProviderError]


class RetryOptions(TypedDict, total=False):
    """The retry knobs a provider's config may set (its ``attempts``/``backoff_s`` keys)."""

    attempts: int
    backoff_s: float
    timeout_s: float


class RetryableError(Retry):
    """Raised (by this module or a ``parse`` hook) for an answer worth another try.

    ``error`` is what the caller gets once the attempts run out; ``wait_s`` is the
    server's own ``Retry-After``, when it sent one.
    """

    def __init__(
        self, error: ProviderError, wait_s: float | None = None, *, may_have_landed: bool = False
    ) -> None:
        super().__init__(error, wait_s)
        self.error: ProviderError = error
        self.may_have_landed = may_have_landed  # the server may have acted on it


class JsonHttpClient:
    """Sends JSON requests to one base URL; see the module docstring for the policy.

    A provider's client subclasses it with its own ``map_status`` and answer parsing.
    """

    def __init__(
        self,
        base_url: str,
        sleep: Callable[[float], None],
        *,
        map_status: MapStatus,
        token: str = "",
        authorization: str = "",
        unreachable: MapUnreachable | None = None,
        provider: str = "",
        retry_statuses: Set[int] = RETRY_STATUSES,
        retry_unreachable: Set[str] = SAFE_METHODS,
        attempts: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        retry_after_cap_s: float | None = 30.0,
        timeout_s: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # The whole Authorization header value (e.g. HTTP Basic); else "Bearer <token>".
        self._authorization = authorization or (f"Bearer {token}" if token else "")
        self._sleep = sleep
        self._map_status = map_status
        self._unreachable = unreachable or self._cannot_reach
        self.provider = provider
        self.retry_statuses = retry_statuses
        self.retry_unreachable = retry_unreachable
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.retry_after_cap_s = retry_after_cap_s
        self.timeout_s = timeout_s

    def __repr__(self) -> str:  # never show the token
        return f"{type(self).__name__}({self.base_url!r})"

    def request(
        self,
        method: str,
        path: str,
        parse: Callable[[bytes], T],
        body: Mapping[str, Any] | None = None,
        *,
        url: str | None = None,
        idempotent: bool | None = None,
    ) -> T:
        """Send ``method base_url+path`` (or the full ``url``); return ``parse(answer)``.

        ``parse`` raises a ProviderError for a bad answer, or RetryableError to ask for
        another try. After the last attempt the retryable error itself is raised.
        ``idempotent``: safe to send twice (default: GET/DELETE, or the client's
        ``retry_unreachable`` methods); else never re-sent once it may have landed.
        """
        target = url or self.base_url + path
        raw = None if body is None else json.dumps(dict(body)).encode()
        if idempotent is None:
            idempotent = method in self.retry_unreachable

        def once() -> T:
            try:
                return parse(self._send(method, target, raw))
            except RetryableError as exc:
                if exc.may_have_landed and not idempotent:
                    raise exc.error from None
                raise

        backoff = Backoff(self.attempts, self.backoff_s, self.max_backoff_s)
        return retrying(once, backoff, sleep=self._sleep)

    def _send(self, method: str, url: str, raw: bytes | None) -> bytes:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": "cloudgpu",
        }
        if self._authorization:
            headers["Authorization"] = self._authorization
        req = urllib.request.Request(url, data=raw, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return bytes(resp.read())
        except urllib.error.HTTPError as exc:
            error = self._map_status(exc.code, exc.read() or b"")
            if exc.code in self.retry_statuses:
                landed = exc.code not in REFUSED_STATUSES
                wait = self._retry_after(exc.headers)
                raise RetryableError(error, wait, may_have_landed=landed) from None
            raise error from None
        except OSError as exc:  # URLError, timeouts, refused or reset connections
            error = self._unreachable(exc)
            refused = isinstance(getattr(exc, "reason", exc), ConnectionRefusedError)
            raise RetryableError(error, may_have_landed=not refused) from None

    def _retry_after(self, headers: Any) -> float | None:
        """The server's ``Retry-After`` in seconds (capped), None when absent or a date."""
        value = headers.get("Retry-After") if headers else None
        try:
            wait = max(0.0, float(value)) if value is not None else None
        except ValueError:
            return None
        if wait is not None and self.retry_after_cap_s is not None:
            wait = min(wait, self.retry_after_cap_s)
        return wait

    def _cannot_reach(self, exc: OSError) -> ProviderError:
        reason = getattr(exc, "reason", exc)
        return TransientError(f"cannot reach {self.base_url}: {reason}", provider=self.provider)


def parse_json(raw: bytes, what: str, provider: str, *, empty: bytes = b"") -> Any:
    """``raw`` as JSON; a non-JSON answer (a proxy's error page) is worth another try."""
    try:
        return json.loads(raw or empty)
    except ValueError:  # a proxy's page: what was behind it may have acted
        raise RetryableError(
            TransientError(f"{what} answered with non-JSON", provider=provider),
            may_have_landed=True,
        ) from None


def error_json(raw: bytes) -> tuple[Any, str]:
    """(parsed body, "") of an error answer, or (None, its first 200 characters)."""
    try:
        return json.loads(raw), ""
    except ValueError:
        return None, raw[:200].decode("utf-8", "replace")
