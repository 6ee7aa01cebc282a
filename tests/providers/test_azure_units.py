"""Small parts of the Azure provider: error classification, state mapping, the
auto-shutdown time, image references, the caller address lookup."""

from __future__ import annotations

import calendar
from http.server import BaseHTTPRequestHandler

import pytest
from cloudgpu_providers.azure.arm import classify
from cloudgpu_providers.azure.bodies import image_reference, schedule_time
from cloudgpu_providers.azure.deploy import vm_state
from cloudgpu_providers.callerip import caller_cidr

from cloudgpu.errors import (
    AuthError,
    CapacityError,
    ConfigError,
    NotFoundError,
    ProviderError,
    QuotaError,
    TransientError,
)
from cloudgpu.provider import InstanceState
from tests.fixtures.http_fake import serve


@pytest.mark.parametrize(
    ("status", "code", "message", "kind"),
    [
        (409, "SkuNotAvailable", "", CapacityError),
        (200, "AllocationFailed", "", CapacityError),
        (200, "OverconstrainedAllocationRequest", "", CapacityError),
        (200, "ZonalAllocationFailed", "", CapacityError),
        (409, "OperationNotAllowed", "exceeding approved Total Regional Cores quota", QuotaError),
        (409, "OperationNotAllowed", "The VM is being deleted", ProviderError),
        (409, "QuotaExceeded", "", QuotaError),
        (401, "InvalidAuthenticationToken", "", AuthError),
        (403, "AuthorizationFailed", "", AuthError),
        (403, "", "", AuthError),
        (404, "ResourceGroupNotFound", "", NotFoundError),
        (400, "LocationNotAvailableForResourceGroup", "", NotFoundError),
        (429, "TooManyRequests", "", TransientError),
        (503, "", "", TransientError),
        (400, "InvalidParameter", "", ProviderError),
    ],
)
def test_classify(status: int, code: str, message: str, kind: type[ProviderError]) -> None:
    assert classify(status, code, message) is kind


def vm(prov: str, power: str | None = None) -> dict[str, object]:
    statuses = [{"code": f"ProvisioningState/{prov.lower()}"}]
    if power:
        statuses.append({"code": f"PowerState/{power}"})
    return {"properties": {"provisioningState": prov, "instanceView": {"statuses": statuses}}}


@pytest.mark.parametrize(
    ("body", "spot", "state"),
    [
        (vm("Creating"), False, InstanceState.PENDING),
        (vm("Creating", "starting"), False, InstanceState.PENDING),
        (vm("Succeeded", "running"), False, InstanceState.RUNNING),
        (vm("Succeeded", "stopped"), False, InstanceState.STOPPED),
        (vm("Succeeded", "deallocating"), False, InstanceState.STOPPING),
        (vm("Succeeded", "deallocated"), True, InstanceState.STOPPED),
        (vm("Deleting", "running"), False, InstanceState.STOPPING),
        (vm("Failed"), False, InstanceState.UNKNOWN),
        (None, False, InstanceState.TERMINATED),
        (None, True, InstanceState.PREEMPTED),
    ],
)
def test_vm_state(body: dict[str, object] | None, spot: bool, state: InstanceState) -> None:
    assert vm_state(body, spot) == state


def test_schedule_time_rounds_down_and_only_within_a_day() -> None:
    now = calendar.timegm((2026, 12, 1, 1, 0, 0))
    assert schedule_time(now + 3 * 3600 + 59, now) == "0400"
    assert schedule_time(now + 23 * 3600 + 30 * 60, now) == "0030"
    assert schedule_time(now + 60, now) is None  # too close: could round into the past
    assert schedule_time(now + 25 * 3600, now) is None  # a daily schedule cannot say it


def test_image_reference_forms() -> None:
    assert image_reference("microsoft-dsvm:ubuntu-hpc:2204:latest") == {
        "publisher": "microsoft-dsvm",
        "offer": "ubuntu-hpc",
        "sku": "2204",
        "version": "latest",
    }
    rid = "/subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/images/mine"
    assert image_reference(rid) == {"id": rid}
    with pytest.raises(ConfigError):
        image_reference("ubuntu")


class _AddressHandler(BaseHTTPRequestHandler):
    answer = b"203.0.113.9\n"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.answer)))
        self.end_headers()
        self.wfile.write(self.answer)


@pytest.mark.parametrize(
    ("answer", "cidr"),
    [
        (b"203.0.113.9\n", "203.0.113.9/32"),
        (b"2001:db8::7", "2001:db8::7/128"),
        (b"<html>blocked</html>", None),
    ],
)
def test_caller_cidr_from_the_lookup_url(answer: bytes, cidr: str | None) -> None:
    handler = type("H", (_AddressHandler,), {"answer": answer})
    with serve(handler) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        if cidr is None:
            with pytest.raises(ConfigError, match="ssh_cidr"):
                caller_cidr("azure", url, 10.0)
        else:
            assert caller_cidr("azure", url, 10.0) == cidr
