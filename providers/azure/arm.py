"""Azure Resource Manager clients and the one place Azure SDK errors become cloudgpu errors.

The SDK clients are built here with the endpoint, TLS trust, polling interval and retry
settings from the provider's config (so tests point them at a loopback HTTPS server
through configuration, not patching). azure-core retries 429 and 5xx itself, honouring
Retry-After; what still fails reaches :func:`map_error`. The SDK is imported lazily.

Error codes: https://learn.microsoft.com/azure/azure-resource-manager/troubleshooting/
common-deployment-errors (SkuNotAvailable, AllocationFailed, QuotaExceeded, ...).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cloudgpu.errors import (
    AuthError,
    CapacityError,
    CloudGPUError,
    NotFoundError,
    ProviderError,
    QuotaError,
    TransientError,
)

CAPACITY_CODES = frozenset(
    {
        "SkuNotAvailable",
        "AllocationFailed",
        "OverconstrainedAllocationRequest",
        "ZonalAllocationFailed",
        "OverconstrainedZonalAllocationRequest",
        "SpotVMCapacityNotAvailable",
    }
)
QUOTA_CODES = frozenset({"QuotaExceeded", "LowPriorityQuotaExceeded", "SubscriptionQuotaExceeded"})
AUTH_CODES = frozenset(
    {
        "AuthenticationFailed",
        "AuthorizationFailed",
        "InvalidAuthenticationToken",
        "ExpiredAuthenticationToken",
        "InvalidAuthenticationTokenTenant",
        "SubscriptionNotFound",
        "LinkedAuthorizationFailed",
    }
)
NOT_FOUND_CODES = frozenset(
    {
        "ResourceNotFound",
        "ResourceGroupNotFound",
        "NotFound",
        "LocationNotAvailableForResourceType",
        "NoRegisteredProviderFound",
        "InvalidResourceLocation",
        "LocationNotAvailableForResourceGroup",
    }
)
TRANSIENT_CODES = frozenset({"TooManyRequests", "RetryableError", "InternalServerError"})


@dataclass(frozen=True)
class ArmSettings:
    """How to reach ARM; every field comes from the [providers.azure] config table."""

    base_url: str | None = None  # None = the public cloud's management endpoint
    ca_bundle: str | None = None  # a PEM file to trust (a private endpoint, tests)
    polling_interval: float = 5.0  # seconds between LRO polls when no Retry-After
    retry_total: int = 6

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ArmSettings:
        return cls(
            base_url=config.get("arm_endpoint") or None,
            ca_bundle=config.get("ca_bundle") or None,
            polling_interval=float(config.get("polling_interval", 5.0)),
            retry_total=int(config.get("retry_total", 6)),
        )

    def client_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "polling_interval": self.polling_interval,
            "retry_total": self.retry_total,
        }
        if self.base_url:
            kw["base_url"] = self.base_url
        if self.ca_bundle:
            kw["connection_verify"] = self.ca_bundle
        return kw


@dataclass
class ArmClients:
    subscription_id: str
    resource: Any  # azure.mgmt.resource.ResourceManagementClient
    compute: Any  # azure.mgmt.compute.ComputeManagementClient
    network: Any  # azure.mgmt.network.NetworkManagementClient


def make_clients(credential: Any, subscription_id: str, settings: ArmSettings) -> ArmClients:
    from azure.mgmt.compute import ComputeManagementClient  # lazy: heavy SDK
    from azure.mgmt.network import NetworkManagementClient
    from azure.mgmt.resource.resources import ResourceManagementClient

    kw = settings.client_kwargs()
    return ArmClients(
        subscription_id=subscription_id,
        resource=ResourceManagementClient(credential, subscription_id, **kw),
        compute=ComputeManagementClient(credential, subscription_id, **kw),
        network=NetworkManagementClient(credential, subscription_id, **kw),
    )


def error_code(exc: BaseException) -> tuple[str, str]:
    """(ARM error code, message) of an azure-core HttpResponseError, '' when absent."""
    err = getattr(exc, "error", None)
    code = str(getattr(err, "code", "") or "")
    message = str(getattr(err, "message", "") or "")
    if not code:
        response = getattr(exc, "response", None)
        try:
            body = json.loads(response.text()) if response is not None else {}
        except (ValueError, AttributeError, TypeError):
            body = {}
        inner = body.get("error", body) if isinstance(body, dict) else {}
        if isinstance(inner, dict):
            code = str(inner.get("code", "") or "")
            message = str(inner.get("message", "") or "")
    return code, message or str(getattr(exc, "message", "") or exc)


def classify(status: int | None, code: str, message: str) -> type[ProviderError]:
    """The cloudgpu error type for an ARM failure (status, error code, message)."""
    if code in CAPACITY_CODES:
        return CapacityError
    if code in QUOTA_CODES or (code == "OperationNotAllowed" and "quota" in message.lower()):
        return QuotaError
    if code in AUTH_CODES or status in (401, 403):
        return AuthError
    if code in NOT_FOUND_CODES or status == 404:
        return NotFoundError
    if code in TRANSIENT_CODES or status == 429 or (status is not None and status >= 500):
        return TransientError
    return ProviderError


def map_error(exc: Exception, action: str) -> CloudGPUError:
    """Turn any exception from the Azure SDK/identity into a cloudgpu error."""
    from azure.core import exceptions as az  # lazy: heavy SDK

    if isinstance(exc, CloudGPUError):
        return exc
    if isinstance(exc, az.ClientAuthenticationError) and not getattr(exc, "status_code", None):
        # Raised by azure-identity when no token could be had (expired CLI login, ...).
        return AuthError(
            f"{action}: could not get an Azure token",
            provider="azure",
            hint="run `az login` or check AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET",
        )
    if isinstance(exc, az.HttpResponseError):
        code, message = error_code(exc)
        kind = classify(exc.status_code, code, message)
        hint = "check the credentials with `cloudgpu check`" if kind is AuthError else None
        label = f"{code}: " if code else f"HTTP {exc.status_code}: "
        return kind(f"{action}: {label}{message}", provider="azure", hint=hint)
    if isinstance(exc, az.ServiceRequestError | az.ServiceResponseError):
        return TransientError(f"{action}: Azure unreachable: {exc}", provider="azure")
    if type(exc).__name__ == "CredentialUnavailableError":
        return AuthError(f"{action}: no Azure credential available", provider="azure")
    return ProviderError(f"{action}: {type(exc).__name__}: {exc}", provider="azure")


@contextmanager
def azure_errors(action: str) -> Iterator[None]:
    """Run a block of SDK calls, re-raising its failures as cloudgpu errors."""
    try:
        yield
    except CloudGPUError:
        raise
    except Exception as exc:
        raise map_error(exc, action) from exc
