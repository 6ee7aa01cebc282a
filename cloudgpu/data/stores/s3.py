"""S3 (and S3-compatible endpoints): list with boto3, presign GETs and uploads with SigV4.

Integrity: a single-part object's ETag is its MD5 (unless the bucket encrypts with
SSE-KMS, whose ETags are not MD5: then size and ETag identity only); a multipart
object's ETag is the MD5 of its parts' MD5s with ``-N``, verified with parts aligned to
the upload's part size (one HEAD with partNumber=1 tells it). The endpoint comes from
``AWS_ENDPOINT_URL`` (moto in tests, MinIO, R2...) or the bucket's region.

Uploads: a presigned PUT whose signature covers Content-MD5 (S3 then stores exactly the
scanned bytes or refuses them), or for large files a multipart upload the client creates
(one metadata call) with a presigned UploadPart URL per part, each signing its part's
MD5, and a presigned CompleteMultipartUpload: the object appears only when completed.
An unfinished upload of the same key whose parts match ours (ListParts: number, size,
MD5 ETag) is continued rather than started again.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from typing import Any

from cloudgpu.data import sigv4
from cloudgpu.data.objects import LocalFile, RemoteObject, join_key
from cloudgpu.data.uri import Source, relative
from cloudgpu.errors import AuthError, CloudGPUError, NotFoundError, TransientError

_MD5 = re.compile(r"^[0-9a-f]{32}$")
_MULTI = re.compile(r"^[0-9a-f]{32}-\d+$")


class S3Store:
    max_parts = 10_000  # https://docs.aws.amazon.com/AmazonS3/latest/userguide/qfacts.html

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self._notes: list[str] = []
        self._client: Any = None
        self._region = ""

    def notes(self) -> list[str]:
        return list(self._notes)

    def client(self) -> Any:
        if self._client is None:
            import boto3  # lazy: heavy, and only jobs with s3:// data need it

            env = self.env
            session = boto3.session.Session(
                aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
                aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
                aws_session_token=env.get("AWS_SESSION_TOKEN"),
                region_name=env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION") or "us-east-1",
                profile_name=env.get("AWS_PROFILE") or None,
            )
            self._session = session
            self._client = session.client("s3", endpoint_url=self.endpoint())
        return self._client

    def endpoint(self) -> str | None:
        return self.env.get("AWS_ENDPOINT_URL_S3") or self.env.get("AWS_ENDPOINT_URL") or None

    def list_objects(self, src: Source) -> list[RemoteObject]:
        from botocore.exceptions import BotoCoreError, ClientError  # lazy, with boto3

        try:
            client = self.client()
            out = []
            pages = client.get_paginator("list_objects_v2").paginate(
                Bucket=src.bucket, Prefix=src.prefix
            )
            kms: bool | None = None
            for page in pages:
                if kms is None:
                    headers = page.get("ResponseMetadata", {}).get("HTTPHeaders", {})
                    self._region = str(headers.get("x-amz-bucket-region") or "")
                    kms = self._kms(client, src.bucket)
                for o in page.get("Contents", []):
                    rel = relative(o["Key"], src.prefix)
                    if rel is not None:
                        out.append(self._object(client, src.bucket, o, rel, bool(kms)))
        except ClientError as exc:
            raise map_error(str(src), exc) from exc
        except BotoCoreError as exc:
            raise TransientError(f"{src}: {exc}", provider="s3") from exc
        if not out:
            raise NotFoundError(f"{src}: no objects there", provider="s3")
        return out

    def _kms(self, client: Any, bucket: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            enc = client.get_bucket_encryption(Bucket=bucket)
        except ClientError:
            return False  # none configured, or not allowed to ask: ETags taken as MD5
        rules = enc.get("ServerSideEncryptionConfiguration", {}).get("Rules", [])
        algos = {
            r.get("ApplyServerSideEncryptionByDefault", {}).get("SSEAlgorithm", "") for r in rules
        }
        if any(a.startswith("aws:kms") for a in algos):
            self._notes.append(
                f"s3://{bucket} encrypts with SSE-KMS: ETags are not MD5, so objects are "
                "checked by size and ETag identity only"
            )
            return True
        return False

    def _object(
        self, client: Any, bucket: str, o: Mapping[str, Any], rel: str, kms: bool
    ) -> RemoteObject:
        etag = str(o.get("ETag", "")).strip('"')
        check: dict[str, Any] = {}
        if not kms and _MD5.match(etag):
            check = {"md5": etag}
        elif not kms and _MULTI.match(etag):
            head = client.head_object(Bucket=bucket, Key=o["Key"], PartNumber=1)
            parts = int(etag.rsplit("-", 1)[1])
            part = int(head["ContentLength"])
            if part > 0 and (parts - 1) * part < int(o["Size"]) <= parts * part:
                check = {"s3etag": etag, "part_size": part}
        mtime = o["LastModified"].timestamp() if o.get("LastModified") else None
        return RemoteObject(o["Key"], rel, int(o["Size"]), etag, check, mtime)

    def sign_get(self, src: Source, objects: Sequence[RemoteObject], ttl_s: int) -> list[str]:
        signer = self.presigner(src.bucket)
        return [signer.url(src.bucket, o.key, ttl_s) for o in objects]

    def sign_put(
        self, dest: Source, files: Sequence[LocalFile], ttl_s: int
    ) -> list[dict[str, Any]]:
        from botocore.exceptions import BotoCoreError, ClientError  # lazy, with boto3

        signer = self.presigner(dest.bucket)
        out: list[dict[str, Any]] = []
        try:
            for f in files:
                key = join_key(dest.prefix, f.rel)
                if not f.parts:
                    md5 = {"Content-MD5": f.md5_b64}
                    url = signer.url(dest.bucket, key, ttl_s, method="PUT", headers=md5)
                    out.append({"how": "put", "url": url, "headers": md5})
                    continue
                upload_id, done = self._multipart(dest.bucket, key, f)
                params = {"uploadId": upload_id}
                parts = [
                    {
                        "url": signer.url(
                            dest.bucket,
                            key,
                            ttl_s,
                            method="PUT",
                            params={**params, "partNumber": str(i + 1)},
                            headers={"Content-MD5": _b64(md5)},
                        ),
                        "md5": md5,
                        "done": done.get(i + 1),
                    }
                    for i, md5 in enumerate(f.parts)
                ]
                complete = signer.url(dest.bucket, key, ttl_s, method="POST", params=params)
                out.append({"how": "s3-parts", "parts": parts, "complete": complete})
        except ClientError as exc:
            raise map_error(str(dest), exc) from exc
        except BotoCoreError as exc:
            raise TransientError(f"{dest}: {exc}", provider="s3") from exc
        return out

    def _multipart(self, bucket: str, key: str, f: LocalFile) -> tuple[str, dict[int, str]]:
        """An upload id for ``key`` and the parts it already holds (number -> ETag):
        an unfinished upload whose parts are all ours, else a new one."""
        client = self.client()
        listed = client.list_multipart_uploads(Bucket=bucket, Prefix=key)
        for up in sorted(listed.get("Uploads", []), key=lambda u: u["Initiated"], reverse=True):
            if up["Key"] != key:
                continue
            held = {}
            pages = client.get_paginator("list_parts").paginate(
                Bucket=bucket, Key=key, UploadId=up["UploadId"]
            )
            for page in pages:
                for p in page.get("Parts", []):
                    held[int(p["PartNumber"])] = (str(p["ETag"]).strip('"'), int(p["Size"]))
            if all(
                1 <= n <= len(f.parts) and etag == f.parts[n - 1] and size == f.part_length(n - 1)
                for n, (etag, size) in held.items()
            ):
                return str(up["UploadId"]), {n: etag for n, (etag, _) in held.items()}
        created = client.create_multipart_upload(Bucket=bucket, Key=key)
        return str(created["UploadId"]), {}

    def presigner(self, bucket: str) -> sigv4.Presigner:
        client = self.client()
        frozen = self._session.get_credentials()
        if frozen is None:
            raise AuthError(
                "no AWS credentials to sign S3 URLs with",
                provider="s3",
                hint="set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
            )
        c = frozen.get_frozen_credentials()
        region = self._region or client.meta.region_name
        endpoint = self.endpoint()
        creds = sigv4.Credentials(c.access_key, c.secret_key, c.token)
        if endpoint:
            return sigv4.Presigner(creds, region, endpoint)
        # Virtual-hosted style, except for dotted names (their TLS names do not match).
        virtual = "." not in bucket
        return sigv4.Presigner(
            creds, region, f"https://s3.{region}.amazonaws.com", path_style=not virtual
        )


def _b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


def map_error(what: str, exc: Any) -> CloudGPUError:
    code = str(exc.response.get("Error", {}).get("Code", ""))
    if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
        return AuthError(
            f"{what}: access denied ({code})",
            provider="s3",
            hint="check the AWS credentials this machine uses",
        )
    if code in ("NoSuchBucket", "NoSuchKey", "404"):
        return NotFoundError(f"{what}: {code}", provider="s3")
    return TransientError(f"{what}: S3 error {code}", provider="s3")
