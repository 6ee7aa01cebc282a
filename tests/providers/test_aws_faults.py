"""AWS faults through the real SDK: a loopback proxy in front of moto answers chosen EC2
calls with EC2's documented error bodies (or a recorded-shape spot request), so the
provider's error boundary sees what botocore makes of real responses."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from cloudgpu_providers.aws import AWSProvider
from cloudgpu_providers.aws.instances import map_state

from cloudgpu.errors import AuthError, QuotaError, TransientError
from cloudgpu.paths import Paths
from cloudgpu.provider import TAG_JOB, CreateRequest, Instance, InstanceState
from tests.backoff import jittered
from tests.providers.aws_fixtures.account import ec2_url, moto_url
from tests.providers.aws_fixtures.servers import capacity_proxy, ec2_error, url_of
from tests.providers.aws_fixtures.setup import ec2_client, make_provider, offer, register_dlami

__all__ = ["ec2_url", "moto_url"]  # the fixtures, imported for pytest

# DescribeSpotInstanceRequests response shape:
# https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeSpotInstanceRequests.html
# status codes: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-request-status.html
SPOT_REQUEST_XML = """<?xml version="1.0" encoding="UTF-8"?>
<DescribeSpotInstanceRequestsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>d1e2f3a4-0000-4000-8000-example</requestId>
  <spotInstanceRequestSet>
    <item>
      <spotInstanceRequestId>sir-08b93456</spotInstanceRequestId>
      <spotPrice>1.006000</spotPrice>
      <type>one-time</type>
      <state>active</state>
      <status>
        <code>{code}</code>
        <updateTime>2026-12-01T02:00:00.000Z</updateTime>
        <message>{message}</message>
      </status>
      <instanceId>i-0598c7d356eba48d7</instanceId>
      <instanceInterruptionBehavior>terminate</instanceInterruptionBehavior>
    </item>
  </spotInstanceRequestSet>
</DescribeSpotInstanceRequestsResponse>"""


def _request() -> CreateRequest:
    job = f"f-{uuid.uuid4().hex[:8]}"
    return CreateRequest(
        offer=offer(),
        name=job,
        tags={TAG_JOB: job},
        idempotency_token=uuid.uuid4().hex,
        deadline=time.time() + 600,
    )


def _leftovers(ec2_url: str, name: str) -> tuple[list, list]:
    ec2 = ec2_client(ec2_url)
    groups = ec2.describe_security_groups(
        Filters=[{"Name": "group-name", "Values": [f"cloudgpu-{name}"]}]
    )["SecurityGroups"]
    keys = ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [f"cloudgpu-{name}"]}])[
        "KeyPairs"
    ]
    return groups, keys


def test_throttled_calls_are_retried_then_succeed(
    ec2_url: str, paths: Paths, tmp_path: Path
) -> None:
    sleeps: list[float] = []
    throttled = (503, ec2_error("RequestLimitExceeded", "Request limit exceeded."))
    with capacity_proxy(ec2_url, scripted={"RunInstances": [throttled, throttled]}) as proxy:
        prov = make_provider(url_of(proxy), paths, str(tmp_path), sleeps)
        inst = prov.create(_request())
        prov.terminate(inst.id)
    assert jittered(sleeps[:2], [0.5, 1.0])
    assert proxy.refused == [("RunInstances", 503), ("RunInstances", 503)]


def test_throttling_that_never_ends_is_transient_and_cleans_up(
    ec2_url: str, paths: Paths, tmp_path: Path
) -> None:
    throttled = (503, ec2_error("RequestLimitExceeded", "Request limit exceeded."))
    with capacity_proxy(ec2_url, scripted={"RunInstances": [throttled] * 10}) as proxy:
        prov = make_provider(url_of(proxy), paths, str(tmp_path), max_attempts=3)
        req = _request()
        with pytest.raises(TransientError, match="RequestLimitExceeded"):
            prov.create(req)
    assert _leftovers(ec2_url, req.name) == ([], [])


def test_vcpu_quota_is_a_quota_error_and_cleans_up(
    ec2_url: str, paths: Paths, tmp_path: Path
) -> None:
    quota = (
        400,
        ec2_error(
            "VcpuLimitExceeded",
            "You have requested more vCPU capacity than your current vCPU limit of 0 allows "
            "for the instance bucket that the specified instance type belongs to.",
        ),
    )
    with capacity_proxy(ec2_url, scripted={"RunInstances": [quota]}) as proxy:
        prov = make_provider(url_of(proxy), paths, str(tmp_path))
        req = _request()
        with pytest.raises(QuotaError, match="VcpuLimitExceeded"):
            prov.create(req)
    assert _leftovers(ec2_url, req.name) == ([], [])
    assert not list(paths.keys_dir.glob(f"aws-{req.name}*"))


@pytest.mark.parametrize("code", ["AuthFailure", "UnauthorizedOperation"])
def test_auth_failure_stops_with_a_clear_error(
    ec2_url: str, paths: Paths, tmp_path: Path, code: str
) -> None:
    denied = (
        403 if code == "UnauthorizedOperation" else 401,
        ec2_error(code, "You are not authorized to perform this operation."),
    )
    sleeps: list[float] = []
    with capacity_proxy(ec2_url, scripted={"DescribeInstances": [denied]}) as proxy:
        prov = make_provider(url_of(proxy), paths, str(tmp_path), sleeps)
        with pytest.raises(AuthError, match=code) as info:
            prov.list_instances({TAG_JOB: "x"})
    assert info.value.hint and sleeps == []


def _spot_instance(region: str = "us-east-1") -> Instance:
    return Instance(
        id="i-0598c7d356eba48d7",
        provider="aws",
        state=InstanceState.RUNNING,
        region=region,
        market="spot",
        extra={"spot_request_id": "sir-08b93456"},
    )


def test_preemption_notice_from_the_spot_request_status(
    ec2_url: str, paths: Paths, tmp_path: Path
) -> None:
    marked = SPOT_REQUEST_XML.format(
        code="marked-for-termination", message="Spot Instance is marked for termination."
    )
    fine = SPOT_REQUEST_XML.format(code="fulfilled", message="Your spot request is fulfilled.")
    scripted = {"DescribeSpotInstanceRequests": [(200, fine.encode()), (200, marked.encode())]}
    with capacity_proxy(ec2_url, scripted=scripted) as proxy:
        now = [1000.0]
        prov = make_provider(url_of(proxy), paths, str(tmp_path))
        prov.ctx.clock = lambda: now[0]
        inst = _spot_instance()
        assert prov.preemption_notice(inst) is None  # fulfilled: no notice
        now[0] += 1  # no rate limit here: the lifecycle's watch loop has it
        at = prov.preemption_notice(inst)
    # 2026-12-01T02:00:00Z plus the two minutes AWS gives.
    assert at == pytest.approx(1796090400.0 + 120)
    assert len(proxy.refused) == 2


def test_on_demand_instances_have_no_notice(ec2_url: str, paths: Paths, tmp_path: Path) -> None:
    prov: AWSProvider = make_provider(ec2_url, paths, str(tmp_path))
    od = Instance(id="i-1", provider="aws", state=InstanceState.RUNNING, market="on_demand")
    assert prov.preemption_notice(od) is None


def test_create_whose_answer_is_lost_leaves_nothing(
    ec2_url: str, paths: Paths, tmp_path: Path
) -> None:
    # run_instances reaches EC2 but the client never hears back: the instance(s) it
    # started are found by their token tag and torn down with their group and key.
    with capacity_proxy(ec2_url, lose=frozenset({"RunInstances"})) as proxy:
        prov = make_provider(url_of(proxy), paths, str(tmp_path), max_attempts=2)
        req = _request()
        with pytest.raises(TransientError, match="ServiceUnavailable"):
            prov.create(req)
    assert proxy.refused == [("RunInstances", 503), ("RunInstances", 503)]
    assert (
        make_provider(ec2_url, paths, str(tmp_path)).list_instances({TAG_JOB: req.tags[TAG_JOB]})
        == []
    )
    assert _leftovers(ec2_url, req.name) == ([], [])


def test_terminate_cancels_the_spot_request(ec2_url: str, paths: Paths, tmp_path: Path) -> None:
    ec2 = ec2_client(ec2_url)
    image = register_dlami(ec2_url)
    sir = ec2.request_spot_instances(
        InstanceCount=1,
        Type="one-time",
        LaunchSpecification={"ImageId": image, "InstanceType": "g5.xlarge"},
    )["SpotInstanceRequests"][0]["SpotInstanceRequestId"]
    assert _open_spot_requests(ec2) == {sir}
    with capacity_proxy(ec2_url, spot_request_ids=(sir,)) as proxy:
        prov = make_provider(url_of(proxy), paths, str(tmp_path))
        inst = prov.create(_request_spot())
        assert inst.extra["spot_request_id"] == sir
        prov.terminate(inst.id)
    assert _open_spot_requests(ec2) == set()  # cancelled (moto then forgets it)


def _open_spot_requests(ec2: object) -> set[str]:
    reqs = ec2.describe_spot_instance_requests()["SpotInstanceRequests"]  # type: ignore[attr-defined]
    return {r["SpotInstanceRequestId"] for r in reqs if r["State"] in ("open", "active")}


def _request_spot() -> CreateRequest:
    job = f"s-{uuid.uuid4().hex[:8]}"
    return CreateRequest(
        offer=offer(market="spot"),
        name=job,
        tags={TAG_JOB: job},
        idempotency_token=uuid.uuid4().hex,
    )


def test_an_html_error_page_is_retried(ec2_url: str, paths: Paths, tmp_path: Path) -> None:
    # What a load balancer in front of an API may answer: not EC2's XML at all.
    page = b"<!doctype html>\n<html><title>502 Bad Gateway</title></html>\n"
    sleeps: list[float] = []
    with capacity_proxy(ec2_url, scripted={"DescribeInstances": [(502, page)]}) as proxy:
        prov = make_provider(url_of(proxy), paths, str(tmp_path), sleeps)
        assert prov.list_instances({TAG_JOB: "nobody"}) == []
    assert jittered(sleeps, [0.5])
    with capacity_proxy(ec2_url, scripted={"DescribeInstances": [(200, page)] * 3}) as proxy:
        prov = make_provider(url_of(proxy), paths, str(tmp_path), max_attempts=3)
        with pytest.raises(TransientError, match="unreadable answer"):
            prov.list_instances({TAG_JOB: "nobody"})


@pytest.mark.parametrize(
    ("name", "reason", "state"),
    [
        ("pending", "", InstanceState.PENDING),
        ("running", "", InstanceState.RUNNING),
        ("stopping", "", InstanceState.STOPPING),
        ("stopped", "", InstanceState.STOPPED),
        ("shutting-down", "", InstanceState.STOPPING),
        ("terminated", "Client.UserInitiatedShutdown", InstanceState.TERMINATED),
        ("terminated", "Server.SpotInstanceTermination", InstanceState.PREEMPTED),
        ("shutting-down", "Server.SpotInstanceTermination", InstanceState.PREEMPTED),
        ("rebooting", "", InstanceState.UNKNOWN),
    ],
)
def test_ec2_states_map_to_the_shared_states(name: str, reason: str, state: InstanceState) -> None:
    item = {"State": {"Name": name}, "StateReason": {"Code": reason}}
    assert map_state(item) == state
