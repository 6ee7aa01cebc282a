"""Maps AWS SDK errors into cloudgpu.errors and retries throttled calls with backoff.

This is the AWS provider's one error boundary: nothing above it sees a botocore type.
The SDK's own retries are switched off (clients are built with total_max_attempts=1, see
session.py) so that backoff runs here, on the ``sleep`` the provider was given, and a
test can run a throttling scenario without waiting. Error codes come from
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html and the
Price List API reference (ThrottlingException, AccessDeniedException).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from cloudgpu.errors import (
    AuthError,
    CapacityError,
    NotFoundError,
    ProviderError,
    QuotaError,
    TransientError,
)
from cloudgpu.retry import Backoff, Retry, retrying

T = TypeVar("T")
PROVIDER = "aws"

CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "SpotMaxPriceTooLow",
        "MaxSpotInstanceCountExceeded",
        "InstanceLimitExceeded",
        # "Your requested instance type is not supported in your requested AZ": the
        # lifecycle fails over to the next zone, as for capacity.
        "Unsupported",
    }
)
QUOTA_CODES = frozenset({"VcpuLimitExceeded", "ResourceLimitExceeded", "ServiceQuotaExceeded"})
AUTH_CODES = frozenset(
    {
        "AuthFailure",
        "UnauthorizedOperation",
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "AccessDenied",
        "AccessDeniedException",
        "OptInRequired",
        "Blocked",
    }
)
THROTTLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestThrottledException",
        "ServiceUnavailable",
        "Unavailable",
        "InternalError",
        "InternalFailure",
        "InternalErrorException",
    }
)
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
NOT_FOUND_SUFFIXES = (".NotFound", ".Malformed")

_AUTH_HINT = (
    "check the credentials `cloudgpu check` reports for aws (expired SSO session: "
    "`aws sso login`); the IAM policy is in providers/aws/README.md"
)


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ClientError ('' for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def _status(exc: BaseException) -> int:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return 0


def _message(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Message", "")) or str(exc)
    return str(exc)


def is_retryable(exc: BaseException) -> bool:
    """Throttling, 5xx, unreadable answers (an HTML error page from a load balancer)
    and connection trouble; never capacity (a 500 on EC2)."""
    from botocore import exceptions as bex
    from botocore.parsers import ResponseParserError

    if isinstance(exc, ResponseParserError):
        return True
    if isinstance(exc, bex.ClientError):
        code = error_code(exc)
        if code in CAPACITY_CODES or code in QUOTA_CODES or code in AUTH_CODES:
            return False
        return code in THROTTLE_CODES or _status(exc) in TRANSIENT_STATUS
    network = (
        bex.EndpointConnectionError,
        bex.ConnectionClosedError,
        bex.ConnectTimeoutError,
        bex.ReadTimeoutError,
    )
    return isinstance(exc, network)


def map_error(exc: BaseException, action: str) -> ProviderError:
    """The cloudgpu error for a botocore exception raised by ``action``."""
    from botocore import exceptions as bex

    if isinstance(exc, bex.NoCredentialsError | bex.PartialCredentialsError):
        return AuthError(f"{action}: no usable credentials", provider=PROVIDER, hint=_AUTH_HINT)
    if isinstance(exc, bex.ProfileNotFound):
        return AuthError(f"{action}: {exc}", provider=PROVIDER, hint=_AUTH_HINT)
    token_errors = tuple(
        getattr(bex, n)
        for n in ("TokenRetrievalError", "SSOTokenLoadError", "UnauthorizedSSOTokenError")
        if hasattr(bex, n)
    )
    if token_errors and isinstance(exc, token_errors):
        return AuthError(f"{action}: {exc}", provider=PROVIDER, hint=_AUTH_HINT)
    code, message = error_code(exc), _message(exc)
    if not code and not isinstance(exc, bex.BotoCoreError | bex.ClientError):
        message = "unreadable answer from AWS"  # not the raw body: it could be anything
    text = f"{action}: {code}: {message}" if code else f"{action}: {message}"
    if code in CAPACITY_CODES:
        return CapacityError(text, provider=PROVIDER)
    if code in QUOTA_CODES:
        return QuotaError(text, provider=PROVIDER, hint="ask AWS for a higher quota")
    if code in AUTH_CODES:
        return AuthError(text, provider=PROVIDER, hint=_AUTH_HINT)
    if code.endswith(NOT_FOUND_SUFFIXES):
        return NotFoundError(text, provider=PROVIDER)
    if is_retryable(exc):
        return TransientError(text, provider=PROVIDER, hint="AWS is busy; try again shortly")
    return ProviderError(text, provider=PROVIDER)


class Caller:
    """Runs SDK calls with backoff on throttling and maps every error at the boundary."""

    def __init__(
        self, sleep: Callable[[float], None], max_attempts: int = 6, base_delay: float = 0.5
    ) -> None:
        self.sleep = sleep
        self.max_attempts = max_attempts
        self.base_delay = base_delay

    def __call__(self, action: str, fn: Callable[..., T], /, **kwargs: Any) -> T:
        from botocore import exceptions as bex
        from botocore.parsers import ResponseParserError

        def once() -> T:
            try:
                return fn(**kwargs)
            except (bex.BotoCoreError, bex.ClientError, ResponseParserError) as exc:
                if is_retryable(exc):
                    raise Retry(map_error(exc, action)) from exc
                raise map_error(exc, action) from exc

        # Exponential backoff with jitter, capped: 0.5, 1, 2, 4, 8, 8 ... seconds at most.
        backoff = Backoff(self.max_attempts, self.base_delay, 8.0)
        return retrying(once, backoff, sleep=self.sleep)

    def pages(
        self, action: str, fn: Callable[..., dict[str, Any]], token_key: str, **kwargs: Any
    ) -> list[dict[str, Any]]:
        """Every page of a NextToken-paged call, each page retried on its own."""
        out: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            args = dict(kwargs)
            if token:
                args[token_key] = token
            page = self(action, fn, **args)
            out.append(page)
            token = page.get("NextToken")
            if not token:
                return out


def cause_code(err: BaseException) -> str:
    """The AWS error code behind a mapped error ('' when there is none)."""
    cause = err.__cause__
    return error_code(cause) if cause is not None else ""
