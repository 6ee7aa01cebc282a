"""s3:// data pulled by the instance (here: the local provider) from moto's server mode on
loopback, with URLs the client signs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from tests.lifecycle.helpers import job_file, main_exit
from tests.providers.aws_fixtures.servers import moto_server

CREDS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture
def bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    with moto_server() as url:
        env = {**CREDS, "AWS_ENDPOINT_URL": url}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        client = boto3.client(
            "s3",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        # moto's backends are one per process, shared by every server the suite starts:
        # a bucket of this test's own, so other tests' objects never show up in it.
        name = f"training-{uuid.uuid4().hex[:8]}"
        client.create_bucket(Bucket=name)
        for i in range(5):
            client.put_object(
                Bucket=name,
                Key=f"sets/v1/part-{i}.txt",
                Body=f"line {i}\n".encode() * (i + 1),
            )
        client.put_object(Bucket=name, Key="sets/other.txt", Body=b"not mine")
        yield {**env, "bucket": name}


def test_launch_with_s3_data_on_local(bucket: dict[str, str], tmp_path: Path) -> None:
    job = job_file(
        tmp_path,
        f"""
name: s3data
data:
  - {{src: s3://{bucket["bucket"]}/sets/v1, dst: /nvme/data}}
run: cat $CLOUDGPU_NVME/data/part-*.txt | wc -l
""",
    )
    code, out, err = main_exit(["launch", str(job), "--yes"])
    assert code == 0, err
    assert out.strip().splitlines()[-1].strip() == "15"
    assert f"s3://{bucket['bucket']}/sets/v1: 5 object(s)" in err and "5 object(s) pulled" in err


def test_missing_bucket_is_one_line(bucket: dict[str, str], tmp_path: Path) -> None:
    job = job_file(tmp_path, "name: nob\ndata: [{src: s3://nope/x, dst: /nvme/d}]\nrun: true\n")
    code, _, err = main_exit(["launch", str(job), "--yes"])
    assert code == 4, err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "s3://nope/x" in errors[0] and "NoSuchBucket" in errors[0]
