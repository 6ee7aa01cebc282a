"""Pull an ``s3://bucket/prefix`` tree into a local cache dir with boto3 (lazily imported).

Objects whose size and modification time match the cached copy are skipped, so a
re-launch re-downloads only what changed; the cache is then synced to the instance like
any local directory. Credentials stay on this machine: nothing is copied to the instance
but the data. The endpoint (e.g. a moto server in tests) comes from ``AWS_ENDPOINT_URL``
or the caller.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cloudgpu.errors import AuthError, CloudGPUError, NotFoundError, TransientError

ProgressFn = Callable[[int, int], None]


def split_uri(uri: str) -> tuple[str, str]:
    rest = uri.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix


def _client(env: Mapping[str, str]) -> Any:
    import boto3  # lazy: heavy, and only jobs with s3:// data need it

    session = boto3.session.Session(
        aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=env.get("AWS_SESSION_TOKEN"),
        region_name=env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION") or "us-east-1",
        profile_name=env.get("AWS_PROFILE") or None,
    )
    return session.client("s3", endpoint_url=env.get("AWS_ENDPOINT_URL") or None)


def pull(uri: str, dest: Path, env: Mapping[str, str], progress: ProgressFn | None = None) -> int:
    """Mirror ``uri`` under ``dest``; return bytes downloaded."""
    from botocore.exceptions import BotoCoreError, ClientError  # lazy, with boto3

    bucket, prefix = split_uri(uri)
    try:
        client = _client(env)
        objects = _list(client, bucket, prefix)
        total = sum(o["Size"] for o in objects)
        done = fetched = 0
        for obj in objects:
            rel = obj["Key"][len(prefix) :].lstrip("/") if prefix else obj["Key"]
            target = dest / (rel or Path(obj["Key"]).name)
            stamp = obj["LastModified"].timestamp()
            if not _fresh(target, obj["Size"], stamp):
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(target.name + ".part")
                client.download_file(bucket, obj["Key"], str(tmp))
                os.utime(tmp, (stamp, stamp))
                os.replace(tmp, target)
                fetched += obj["Size"]
            done += obj["Size"]
            if progress:
                progress(done, total)
    except ClientError as exc:
        raise _map(uri, exc) from exc
    except BotoCoreError as exc:
        raise TransientError(f"{uri}: {exc}", provider="s3") from exc
    return fetched


def _list(client: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o for o in page.get("Contents", []) if not o["Key"].endswith("/")]
    if not out:
        raise NotFoundError(f"s3://{bucket}/{prefix}: no objects there", provider="s3")
    return out


def _fresh(path: Path, size: int, mtime: float) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return st.st_size == size and int(st.st_mtime) == int(mtime)


def _map(uri: str, exc: Any) -> CloudGPUError:
    code = str(exc.response.get("Error", {}).get("Code", ""))
    if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
        return AuthError(
            f"{uri}: access denied ({code})",
            provider="s3",
            hint="check the AWS credentials this machine uses",
        )
    if code in ("NoSuchBucket", "NoSuchKey", "404"):
        return NotFoundError(f"{uri}: {code}", provider="s3")
    return TransientError(f"{uri}: S3 error {code}", provider="s3")
