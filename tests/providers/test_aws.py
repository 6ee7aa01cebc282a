"""AWS provider end to end against moto's server mode, through the real SDK.

The endpoint reaches the provider as configuration (``endpoint_url``), exactly as a user
would point it at a moto server; nothing in the provider is patched. Capacity errors moto
cannot produce come from a loopback proxy that answers with EC2's real error body.
"""

from __future__ import annotations

import base64
import email
import http.server
import os
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cloudgpu_providers.aws import AWSProvider
from cloudgpu_providers.aws.launch import Image, run_args

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CapacityError, ConfigError, NotFoundError
from cloudgpu.paths import Paths
from cloudgpu.provider import (
    TAG_EXPIRES,
    TAG_JOB,
    TAG_OWNER,
    CreateRequest,
    Instance,
    InstanceState,
)
from cloudgpu.testing import PlacementOf, ProviderContract
from tests.providers.aws_fixtures.account import ec2_url, moto_url
from tests.providers.aws_fixtures.servers import (
    capacity_proxy,
    free_port,
    load_products,
    pricing_replay,
    serve,
    url_of,
)
from tests.providers.aws_fixtures.setup import (
    DLAMI_NAME,
    ec2_client,
    make_provider,
    offer,
    register_dlami,
)

__all__ = ["ec2_url", "moto_url"]  # the fixtures, imported for pytest


@pytest.fixture
def provider(ec2_url: str, paths: Paths, tmp_path: Path) -> AWSProvider:
    return make_provider(ec2_url, paths, str(tmp_path))


class TestAWSContract(ProviderContract):
    provider_name = "aws"

    @pytest.fixture
    def provider(self, ec2_url: str, paths: Paths, tmp_path: Path) -> Iterator[AWSProvider]:
        """With the Price List API replayed too, so its live offers are checked (moto has
        no pricing service)."""
        with pricing_replay(load_products()) as srv:
            yield make_provider(ec2_url, paths, str(tmp_path), pricing_endpoint_url=url_of(srv))

    @pytest.fixture
    def offer(self) -> Offer:
        return offer()

    @pytest.fixture
    def placement_of(self, ec2_url: str) -> PlacementOf:
        """The placement group and zone EC2's describe_instances reports."""

        def placement(i: Instance) -> tuple[str, str]:
            out = ec2_client(ec2_url).describe_instances(InstanceIds=[i.id])
            where = out["Reservations"][0]["Instances"][0]["Placement"]
            return where.get("GroupName", ""), where["AvailabilityZone"]

        return placement


def _request(o: Offer, **kw: object) -> CreateRequest:
    job = f"t-{uuid.uuid4().hex[:8]}"
    args: dict[str, object] = {
        "offer": o,
        "name": job,
        "tags": {TAG_JOB: job, TAG_OWNER: "tester", TAG_EXPIRES: str(int(time.time()) + 3600)},
        "idempotency_token": uuid.uuid4().hex,
        "deadline": time.time() + 3600,
        "disk_gb": 150,
    }
    args.update(kw)
    return CreateRequest(**args)  # type: ignore[arg-type]


def _tags(items: list[dict]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in items or []}


def test_on_demand_create_tags_every_resource(provider: AWSProvider, ec2_url: str) -> None:
    req = _request(offer())
    inst = provider.create(req)
    ec2 = ec2_client(ec2_url)
    try:
        raw = ec2.describe_instances(InstanceIds=[inst.id])["Reservations"][0]["Instances"][0]
        assert raw["InstanceType"] == "g5.xlarge"
        assert raw["Placement"]["AvailabilityZone"] == "us-east-1a"
        assert raw.get("InstanceLifecycle") != "spot" and inst.market == "on_demand"
        assert raw["ImageId"] == register_dlami(ec2_url)  # the documented AMI rule
        assert inst.nvme_mount == "/opt/dlami/nvme"
        for k, v in req.tags.items():
            assert _tags(raw["Tags"])[k] == v
        attr = ec2.describe_instance_attribute(
            InstanceId=inst.id, Attribute="instanceInitiatedShutdownBehavior"
        )
        assert attr["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
        vols = ec2.describe_volumes(
            Filters=[{"Name": "attachment.instance-id", "Values": [inst.id]}]
        )["Volumes"]
        assert vols and all(v["Size"] == 150 for v in vols)
        assert all(_tags(v["Tags"])[TAG_JOB] == req.tags[TAG_JOB] for v in vols)
        group = ec2.describe_security_groups(GroupIds=[raw["SecurityGroups"][0]["GroupId"]])
        sg = group["SecurityGroups"][0]
        assert _tags(sg["Tags"])[TAG_JOB] == req.tags[TAG_JOB]
        rules = sg["IpPermissions"]
        assert [(r["FromPort"], r["ToPort"]) for r in rules] == [(22, 22)]
        assert [r["CidrIp"] for r in rules[0]["IpRanges"]] == ["203.0.113.7/32"]
        kp = ec2.describe_key_pairs(KeyNames=[raw["KeyName"]])["KeyPairs"][0]
        assert _tags(kp["Tags"])[TAG_JOB] == req.tags[TAG_JOB]
        # No public key given: one was made, its private half 0600 in the data dir.
        assert inst.ssh is not None and inst.ssh.key_file and inst.ssh.user == "ubuntu"
        key = Path(inst.ssh.key_file)
        assert key.parent == provider.ctx.paths.keys_dir
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert "PRIVATE KEY" in key.read_text()
    finally:
        provider.terminate(inst.id)
    assert not key.exists()


def test_spot_create_uses_market_options(provider: AWSProvider, ec2_url: str) -> None:
    inst = provider.create(_request(offer(zone="us-east-1b", market="spot")))
    try:
        raw = ec2_client(ec2_url).describe_instances(InstanceIds=[inst.id])
        item = raw["Reservations"][0]["Instances"][0]
        assert item["InstanceLifecycle"] == "spot"
        assert inst.market == "spot" and inst.zone == "us-east-1b"
    finally:
        provider.terminate(inst.id)
    assert provider.describe(inst.id).state.is_gone


def test_caller_public_key_is_imported_and_no_key_file_made(
    provider: AWSProvider, ec2_url: str
) -> None:
    pub = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl me"
    inst = provider.create(_request(offer(), ssh_public_key=pub))
    try:
        assert inst.ssh is not None and inst.ssh.key_file is None
        kp = ec2_client(ec2_url).describe_key_pairs(KeyNames=[inst.extra["key_name"]])
        assert kp["KeyPairs"][0]["KeyType"] == "ed25519"
    finally:
        provider.terminate(inst.id)


def test_idempotent_retry_returns_the_same_instance(provider: AWSProvider) -> None:
    req = _request(offer())
    first = provider.create(req)
    try:
        again = provider.create(req)
        assert again.id == first.id
        assert [i.id for i in provider.list_instances({TAG_JOB: req.tags[TAG_JOB]})] == [first.id]
    finally:
        provider.terminate(first.id)


def test_terminate_removes_group_and_key_and_is_idempotent(
    provider: AWSProvider, ec2_url: str
) -> None:
    inst = provider.create(_request(offer()))
    ec2 = ec2_client(ec2_url)
    group_id = inst.extra["security_groups"][0]
    provider.terminate(inst.id)
    state = ec2.describe_instances(InstanceIds=[inst.id])["Reservations"][0]["Instances"][0]
    assert state["State"]["Name"] == "terminated"
    assert not ec2.describe_security_groups(Filters=[{"Name": "group-id", "Values": [group_id]}])[
        "SecurityGroups"
    ]
    assert not ec2.describe_key_pairs(
        Filters=[{"Name": "key-name", "Values": [inst.extra["key_name"]]}]
    )["KeyPairs"]
    provider.terminate(inst.id)
    provider.terminate("i-0123456789abcdef0")  # never existed: nothing to do


def test_orphan_sweep_finds_instances_by_job_tag(
    paths: Paths, ec2_url: str, tmp_path: Path
) -> None:
    # A second provider object stands in for a new client process after a crash.
    first = make_provider(ec2_url, paths, str(tmp_path))
    req = _request(offer())
    inst = first.create(req)
    later = make_provider(ec2_url, paths, str(tmp_path))
    found = later.list_instances({TAG_JOB: req.tags[TAG_JOB]})
    assert [i.id for i in found] == [inst.id]
    assert found[0].state in (InstanceState.PENDING, InstanceState.RUNNING)
    owned = later.list_instances({TAG_OWNER: "tester"})
    assert inst.id in {i.id for i in owned}
    for i in found:
        later.terminate(i.id)
    assert later.list_instances({TAG_JOB: req.tags[TAG_JOB]}) == []


def test_capacity_error_through_real_sdk_path_cleans_up(
    ec2_url: str, paths: Paths, tmp_path: Path
) -> None:
    with capacity_proxy(ec2_url, fail_zones=frozenset({"us-east-1a"})) as proxy:
        url = f"http://127.0.0.1:{proxy.server_address[1]}"
        prov = make_provider(url, paths, str(tmp_path))
        req = _request(offer(zone="us-east-1a"))
        with pytest.raises(CapacityError, match="InsufficientInstanceCapacity"):
            prov.create(req)
        assert proxy.refused == [("g5.xlarge", "us-east-1a")]
        ec2 = ec2_client(ec2_url)
        name = f"cloudgpu-{req.name}"
        # Nothing of the failed attempt is left: no group, no key pair, no key file.
        assert not ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": [name]}])[
            "SecurityGroups"
        ]
        assert not ec2.describe_key_pairs(Filters=[{"Name": "key-name", "Values": [name]}])[
            "KeyPairs"
        ]
        assert not list(paths.keys_dir.glob(f"aws-{req.name}*"))
        # Failing over to the next zone, as the lifecycle does, succeeds.
        inst = prov.create(_request(offer(zone="us-east-1b"), name=req.name, tags=req.tags))
        try:
            assert inst.zone == "us-east-1b"
        finally:
            prov.terminate(inst.id)


def test_unknown_instance_type_is_not_found(provider: AWSProvider) -> None:
    with pytest.raises(NotFoundError, match="does not exist"):
        provider.create(_request(offer(itype="p99.nonexistent")))


def test_missing_image_names_the_pattern(ec2_url: str, paths: Paths, tmp_path: Path) -> None:
    prov = make_provider(ec2_url, paths, str(tmp_path), image_owners=["amazon"])
    with pytest.raises(NotFoundError, match="Deep Learning Base OSS") as info:
        prov.create(_request(offer()))
    assert info.value.hint and "providers.aws.image" in info.value.hint


def test_image_override_by_id(provider: AWSProvider, ec2_url: str) -> None:
    ami = ec2_client(ec2_url).describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    inst = provider.create(_request(offer(), image=ami))
    try:
        assert inst.extra["image_id"] == ami
        assert inst.nvme_mount == "/nvme"  # not the DLAMI: no DLAMI mount assumed
    finally:
        provider.terminate(inst.id)


def test_ssh_cidr_comes_from_the_configured_lookup(
    ec2_url: str, paths: Paths, tmp_path: Path
) -> None:
    class IpHandler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"198.51.100.23\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    with serve(IpHandler) as srv:
        prov = make_provider(
            ec2_url,
            paths,
            str(tmp_path),
            ssh_cidr=None,
            public_ip_url=f"http://127.0.0.1:{srv.server_address[1]}/",
        )
        inst = prov.create(_request(offer()))
        try:
            sg = ec2_client(ec2_url).describe_security_groups(
                GroupIds=inst.extra["security_groups"]
            )["SecurityGroups"][0]
            assert sg["IpPermissions"][0]["IpRanges"][0]["CidrIp"] == "198.51.100.23/32"
        finally:
            prov.terminate(inst.id)


def test_unreachable_ip_lookup_is_a_config_error(
    ec2_url: str, paths: Paths, tmp_path: Path
) -> None:
    prov = make_provider(
        ec2_url,
        paths,
        str(tmp_path),
        ssh_cidr=None,
        public_ip_url=f"http://127.0.0.1:{free_port()}/",
    )
    with pytest.raises(ConfigError, match="public address") as info:
        prov.create(_request(offer()))
    assert info.value.hint and "ssh_cidr" in info.value.hint


def test_bad_config_values_name_the_key(ec2_url: str, paths: Paths, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"providers\.aws\.ssh_cidr"):
        make_provider(ec2_url, paths, str(tmp_path), ssh_cidr="not-a-cidr")
    with pytest.raises(ConfigError, match=r"providers\.aws\.regions"):
        make_provider(ec2_url, paths, str(tmp_path), regions=[1, 2])


def test_key_dir_is_private(provider: AWSProvider) -> None:
    inst = provider.create(_request(offer()))
    try:
        mode = stat.S_IMODE(os.stat(provider.ctx.paths.keys_dir).st_mode)
        assert mode == 0o700
    finally:
        provider.terminate(inst.id)


def test_dlami_name_matches_the_default_rule() -> None:
    assert DLAMI_NAME.startswith("Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) ")


def test_catalog_zone_ids_are_placed_by_name(provider: AWSProvider) -> None:
    # The catalog names zones by AZ ID; EC2 places by the account's zone name.
    inst = provider.create(_request(offer(zone="use1-az2")))
    try:
        assert inst.zone == "us-east-1c"  # moto's mapping of use1-az2
    finally:
        provider.terminate(inst.id)
    with pytest.raises(NotFoundError, match="use1-az99"):
        provider.create(_request(offer(zone="use1-az99")))


def test_a_stale_key_pair_of_the_same_name_is_replaced(provider: AWSProvider, ec2_url: str) -> None:
    ec2 = ec2_client(ec2_url)
    req = _request(offer())
    stale = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl old"
    ec2.import_key_pair(KeyName=f"cloudgpu-{req.name}", PublicKeyMaterial=stale.encode())
    old = ec2.describe_key_pairs(KeyNames=[f"cloudgpu-{req.name}"])["KeyPairs"][0]
    inst = provider.create(req)  # no public key given: a fresh one is generated
    try:
        new = ec2.describe_key_pairs(KeyNames=[f"cloudgpu-{req.name}"])["KeyPairs"][0]
        assert new["KeyFingerprint"] != old["KeyFingerprint"]
    finally:
        provider.terminate(inst.id)


def _user_data_parts(ec2_url: str, instance_id: str) -> list[str]:
    attr = ec2_client(ec2_url).describe_instance_attribute(
        InstanceId=instance_id, Attribute="userData"
    )
    raw = base64.b64decode(attr["UserData"]["Value"]).decode()
    msg = email.message_from_string(raw)
    if not msg.is_multipart():
        return [raw]
    return [str(p.get_payload(decode=True).decode()) for p in msg.get_payload()]


def test_boot_script_arms_the_deadline_and_spot_gets_a_watcher(
    provider: AWSProvider, ec2_url: str
) -> None:
    spot = provider.create(_request(offer(market="spot"), user_data="#!/bin/sh\necho mine\n"))
    od = provider.create(_request(offer()))
    try:
        parts = _user_data_parts(ec2_url, spot.id)
        assert parts[0].startswith("#!/bin/sh\nshutdown -P +")  # ~60 minutes from now
        assert parts[1] == "#!/bin/sh\necho mine\n"
        (only,) = _user_data_parts(ec2_url, od.id)
        assert only.startswith("#!/bin/sh\nshutdown -P +")
        # The notice watcher is started by the bootstrap over SSH, on spot only.
        watcher = provider.notice_watcher(spot)
        assert watcher is not None and "spot/instance-action" in watcher.script
        assert "events/recommendations/rebalance" in watcher.script
        assert provider.notice_watcher(od) is None
    finally:
        provider.terminate(spot.id)
        provider.terminate(od.id)


def test_root_volume_is_never_below_the_image_snapshot() -> None:
    image = Image(id="ami-1", root_device="/dev/sda1", min_disk_gb=75, dlami=True)
    place = {"SubnetId": "subnet-1", "SecurityGroupIds": ["sg-1"]}
    small = run_args(_request(offer(), disk_gb=8), image, "k", place, {}, "")
    assert small["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 75
    big = run_args(_request(offer(), disk_gb=500), image, "k", place, {}, "")
    assert big["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 500


def test_a_region_outside_those_in_use_is_refused(provider: AWSProvider) -> None:
    far = Offer(**{**offer().to_dict(), "region": "eu-west-1", "zone": "euw1-az1"})
    with pytest.raises(NotFoundError, match="eu-west-1 is not among the regions in use"):
        provider.create(_request(far))
    nowhere = Offer(**{**offer().to_dict(), "region": "xx-nowhere-1", "zone": ""})
    with pytest.raises(NotFoundError, match="xx-nowhere-1"):
        provider.create(_request(nowhere))
