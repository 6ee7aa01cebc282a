"""Building an AWSProvider against the local servers, the way a user's config would."""

from __future__ import annotations

from typing import Any

import boto3
from cloudgpu_providers.aws import AWSProvider
from cloudgpu_providers.aws.settings import DEFAULT_IMAGE_NAME

from cloudgpu.catalog.offer import Offer
from cloudgpu.paths import Paths
from cloudgpu.provider import ProviderContext

FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "AKIDLOCALTESTONLY000",
    "AWS_SECRET_ACCESS_KEY": "local-test-secret",
}
REGION = "us-east-1"
DLAMI_NAME = DEFAULT_IMAGE_NAME.replace("*", "20261120")


def make_provider(
    endpoint: str, paths: Paths, home: str, sleeps: list[float] | None = None, **config: Any
) -> AWSProvider:
    """An AWSProvider for ``endpoint`` with fake keys; ``sleeps`` records backoff waits."""
    table: dict[str, Any] = {
        "regions": [REGION],
        "endpoint_url": endpoint,
        "ssh_cidr": "203.0.113.7/32",
        # moto registers our test AMI under this account, not "amazon".
        "image_owners": ["self"],
        "poll_s": 0.05,
    }
    table.update(config)
    record = sleeps if sleeps is not None else []
    ctx = ProviderContext(
        config=table, paths=paths, env={**FAKE_ENV, "HOME": home}, sleep=record.append
    )
    return AWSProvider(ctx)


def ec2_client(endpoint: str) -> Any:
    return boto3.client(
        "ec2",
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id=FAKE_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_ENV["AWS_SECRET_ACCESS_KEY"],
    )


def register_dlami(endpoint: str) -> str:
    """Register an image named like AWS's Deep Learning Base AMI; returns its id."""
    ec2 = ec2_client(endpoint)
    found = ec2.describe_images(Owners=["self"], Filters=[{"Name": "name", "Values": [DLAMI_NAME]}])
    if found["Images"]:
        return str(found["Images"][0]["ImageId"])
    out = ec2.register_image(
        Name=DLAMI_NAME,
        Architecture="x86_64",
        RootDeviceName="/dev/sda1",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 75}}],
        VirtualizationType="hvm",
    )
    return str(out["ImageId"])


def offer(zone: str = "us-east-1a", market: str = "on_demand", itype: str = "g5.xlarge") -> Offer:
    return Offer(
        provider="aws",
        instance_type=itype,
        region=REGION,
        zone=zone,
        market=market,
        gpu="A10G",
        gpu_count=1,
        gpu_memory_gb=22.35,
        vcpus=4,
        memory_gb=16,
        price_per_hour=1.006 if market == "on_demand" else 0.4177,
        nvme_count=1,
        nvme_size_gb=250,
        price_source="test",
        observed_at="2026-12-01T00:00:00+00:00",
    )
