"""`cloudgpu launch` on AWS end to end: the plan picks an AWS offer from the bundled
catalog, the provider launches it through the real SDK on moto's server, and the job
runs over SSH on a real loopback sshd standing in for the EC2 instance.

No test-only branch in the provider: the provider is configured as a user would
(``endpoint_url``, ``ssh_port``, ``ssh_user``, ``nvme_mount``, image rule), and the
test network in front of moto plays the part of EC2's network and of cloud-init: the
instance's public address is the sshd's (127.0.0.1), and the imported key pair is
authorized in the sshd's authorized_keys, as cloud-init does with the launch key pair.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lifecycle.helpers import job_file, main_exit, store
from tests.providers.aws_fixtures.account import ec2_url, moto_url
from tests.providers.aws_fixtures.servers import imds_server, sshd_network, url_of
from tests.providers.aws_fixtures.setup import FAKE_ENV, ec2_client
from tests.providers.lifecycle_kit import (
    RESUMABLE_RUN,
    announce_when_progressed,
    launch_in_subprocess,
    launch_job,
    launch_succeeds,
    resumed_after_inside_notice,
    write_config,
)
from tests.remote.sshd import SSHDServer

__all__ = ["ec2_url", "moto_url"]  # the fixtures, imported for pytest

pytestmark = pytest.mark.slow

JOB = launch_job(
    "aws-life",
    "A10G",
    "aws",
    resources="  regions: [us-east-1]\n",
    probe='  test -d "$CLOUDGPU_NVME" && echo "nvme ok"\n',
)


@pytest.fixture
def network(ec2_url: str, sshd: SSHDServer) -> Iterator[object]:
    with sshd_network(ec2_url, sshd) as proxy:
        yield proxy


@pytest.fixture
def configured(
    network: object,
    sshd: SSHDServer,
    scratch: Path,
    cloudgpu_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    _configure(cloudgpu_home, url_of(network), sshd, scratch, monkeypatch)
    return job_file(tmp_path, JOB)


def _configure(
    cloudgpu_home: Path,
    endpoint: str,
    sshd: SSHDServer,
    nvme: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra: str = "",
) -> None:
    """Configure the provider as a user would, pointed at ``endpoint`` and the sshd."""
    write_config(
        cloudgpu_home,
        f'[providers.aws]\nregions = ["us-east-1"]\nendpoint_url = "{endpoint}"\n'
        f'ssh_cidr = "127.0.0.1/32"\nssh_port = {sshd.port}\nssh_user = "{sshd.user}"\n'
        f'image_name = "Deep Learning AMI Ubuntu*"\nnvme_mount = "{nvme}"\npoll_s = 0\n'
        f"{extra}[launch]\nssh_timeout = 30\n",
    )
    for k, v in FAKE_ENV.items():
        monkeypatch.setenv(k, v)


def _live_instances(ec2_url: str) -> list[dict]:
    ec2 = ec2_client(ec2_url)
    out = ec2.describe_instances(
        Filters=[
            {"Name": "tag:cloudgpu-owner", "Values": ["*"]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping"]},
        ]
    )
    return [i for r in out["Reservations"] for i in r["Instances"]]


def test_launch_runs_on_an_ec2_instance_and_terminates_it(
    configured: Path, ec2_url: str, cloudgpu_home: Path
) -> None:
    _, inst, out = launch_succeeds(configured, cloudgpu_home, "aws")
    assert "ran in i-" in out and "nvme ok" in out
    assert inst.instance_type.startswith("g5.")
    raw = ec2_client(ec2_url).describe_instances(InstanceIds=[inst.provider_id])
    assert raw["Reservations"][0]["Instances"][0]["State"]["Name"] == "terminated"
    assert _live_instances(ec2_url) == []


def test_launch_as_subprocess(configured: Path, ec2_url: str, cloudgpu_home: Path) -> None:
    res = launch_in_subprocess(
        configured, cloudgpu_home, FAKE_ENV, FAKE_ENV["AWS_SECRET_ACCESS_KEY"]
    )
    assert "ran in i-" in res.stdout
    assert _live_instances(ec2_url) == []


RESUMABLE = (
    "name: aws-spot\nresources:\n  gpu: A10G\n  spot: true\n  providers: [aws]\n"
    "  regions: [us-east-1]\n" + RESUMABLE_RUN
)

# DescribeSpotInstanceRequests answers in AWS's shape (see test_aws_faults.py): first
# fulfilled, then the two-minute interruption notice.
SPOT_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<DescribeSpotInstanceRequestsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
    "<requestId>d1e2f3a4-0000-4000-8000-example</requestId><spotInstanceRequestSet><item>"
    "<spotInstanceRequestId>{sir}</spotInstanceRequestId><type>one-time</type>"
    "<state>active</state><status><code>{code}</code>"
    "<updateTime>{when}</updateTime><message>m</message></status>"
    "</item></spotInstanceRequestSet></DescribeSpotInstanceRequestsResponse>"
)


def test_spot_notice_reprovisions_and_resumes(
    ec2_url: str,
    sshd: SSHDServer,
    scratch: Path,
    cloudgpu_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ec2 = ec2_client(ec2_url)
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    # One spot request per instance, as EC2 makes them (moto links none to instances).
    first, second = (
        ec2.request_spot_instances(
            InstanceCount=1,
            Type="one-time",
            LaunchSpecification={"ImageId": image, "InstanceType": "g5.xlarge"},
        )["SpotInstanceRequests"][0]["SpotInstanceRequestId"]
        for _ in range(2)
    )
    when = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    answers = [
        (200, SPOT_XML.format(sir=first, code=code, when=when).encode())
        for code in ("fulfilled", "marked-for-termination")
    ]
    with sshd_network(
        ec2_url,
        sshd,
        spot_request_ids=(first, second),
        scripted={"DescribeSpotInstanceRequests": answers},
    ) as proxy:
        _configure(cloudgpu_home, url_of(proxy), sshd, scratch, monkeypatch)
        job = job_file(tmp_path, RESUMABLE)
        code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    starts = [int(ln.split()[-1]) for ln in out.splitlines() if ln.startswith("starting at")]
    assert starts[0] == 0 and len(starts) == 2 and 0 < starts[1] < 30, out
    assert "spot preemption notice" in err and "re-provisioning without" in err
    (rec,) = store(cloudgpu_home).jobs()
    insts = store(cloudgpu_home).instances(rec.id)
    assert [i.state for i in insts] == ["preempted", "terminated"]
    assert _live_instances(ec2_url) == []


# GetConsoleOutput in AWS's shape
# (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_GetConsoleOutput.html); the
# output is the serial console, base64, with the block cloud-init prints at first boot.
CONSOLE_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<GetConsoleOutputResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
    "<requestId>b1c2d3e4-0000-4000-8000-example</requestId>"
    "<instanceId>i-0598c7d356eba48d7</instanceId>"
    "<timestamp>2026-12-01T02:00:00.000Z</timestamp><output>{output}</output>"
    "</GetConsoleOutputResponse>"
)
CLOUD_INIT = """[   12.345678] cloud-init[1021]: Cloud-init v. 24.1 running 'modules:config'
-----BEGIN SSH HOST KEY FINGERPRINTS-----
256 {fp} root@ip-172-31-20-7 (ED25519)
-----END SSH HOST KEY FINGERPRINTS-----
ec2: #############################################################
"""


def _console(fp: str) -> tuple[int, bytes]:
    text = CLOUD_INIT.format(fp=fp).encode()
    return 200, CONSOLE_XML.format(output=base64.b64encode(text).decode()).encode()


@pytest.mark.parametrize("honest", [True, False])
def test_host_key_is_checked_against_the_console_fingerprint(
    ec2_url: str,
    sshd: SSHDServer,
    scratch: Path,
    cloudgpu_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    honest: bool,
) -> None:
    # A fingerprint that is not the sshd's stands for an address taken over by someone.
    fp = sshd.host_key_fingerprint if honest else "SHA256:" + "A" * 43
    with sshd_network(
        ec2_url,
        sshd,
        scripted={"GetConsoleOutput": [_console(fp)] * 5},
    ) as proxy:
        _configure(cloudgpu_home, url_of(proxy), sshd, scratch, monkeypatch)
        code, out, err = main_exit(["launch", str(job_file(tmp_path, JOB)), "--yes"])
    assert ("GetConsoleOutput", 200) in proxy.refused
    if honest:
        assert code == 0, err
        assert "pinned on first use" not in out + err  # verified out of band instead
    else:
        assert code != 0 and "Traceback" not in err
        assert "not the one the provider reported" in out + err
    assert _live_instances(ec2_url) == []


def test_an_imds_notice_read_over_ssh_reprovisions_and_resumes(
    configured: Path,
    network: object,
    sshd: SSHDServer,
    scratch: Path,
    cloudgpu_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The spot request never shows the notice from outside (moto links none); the
    instance's own IMDS does, two minutes ahead: the watcher the bootstrap started sees
    it, the lifecycle reads it over SSH, flushes the checkpoint and resumes elsewhere."""
    with imds_server(None, one_shot=True) as imds:
        _configure(
            cloudgpu_home, url_of(network), sshd, scratch, monkeypatch,
            extra=f'imds_endpoint = "{url_of(imds)}"\n',
        )  # fmt: skip
        job = job_file(tmp_path, RESUMABLE)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
        notice = {"action": "terminate", "time": when}
        with announce_when_progressed(scratch, lambda: setattr(imds, "action", notice)):
            code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    resumed_after_inside_notice(out, err)
    assert "terminate" in err
    (rec,) = store(cloudgpu_home).jobs()
    assert [i.state for i in store(cloudgpu_home).instances(rec.id)] == ["preempted", "terminated"]
    assert imds.tokens_issued >= 2  # both instances' watchers read IMDSv2 with a token
