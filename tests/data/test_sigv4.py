"""Our fast S3 presigner agrees with botocore's own SigV4 query signing, byte for byte."""

from __future__ import annotations

import calendar
import time
from urllib.parse import parse_qsl, urlsplit

import pytest
from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from cloudgpu.data import sigv4


@pytest.mark.parametrize("key", ["plain.txt", "dir/sub/a b+c.bin", "ünï/çødé~x", "%2F odd?&="])
@pytest.mark.parametrize("token", [None, "FQoGZXIvYXdzEXAMPLETOKEN/+="])
def test_signature_matches_botocore(key: str, token: str | None) -> None:
    now = calendar.timegm((2026, 12, 1, 10, 0, 0))
    signer = sigv4.Presigner(
        sigv4.Credentials("AKIDEXAMPLE", "secret/key+", token),
        "eu-west-1",
        "http://127.0.0.1:9000",
        now=now,
    )
    url = signer.url("bucket", key, 900)
    q = dict(parse_qsl(urlsplit(url).query))
    unsigned = url[: url.index("&X-Amz-Signature=")]
    req = AWSRequest(method="GET", url=unsigned, headers={"host": "127.0.0.1:9000"})
    req.context["timestamp"] = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    auth = S3SigV4QueryAuth(Credentials("AKIDEXAMPLE", "secret/key+", token), "s3", "eu-west-1")
    expected = auth.signature(auth.string_to_sign(req, auth.canonical_request(req)), req)
    assert q["X-Amz-Signature"] == expected
    assert q["X-Amz-Expires"] == "900" and q.get("X-Amz-Security-Token") == token


def test_expiry_is_capped_at_a_week() -> None:
    s = sigv4.Presigner(sigv4.Credentials("A", "B"), "us-east-1", "http://h")
    assert "X-Amz-Expires=604800" in s.url("b", "k", 10**9)


def test_put_with_signed_content_md5_and_params_matches_botocore() -> None:
    """Upload URLs sign Content-MD5 (the store then takes only those bytes) and carry
    the multipart parameters; botocore computes the same signature."""
    now = calendar.timegm((2026, 12, 1, 10, 0, 0))
    creds = sigv4.Credentials("AKIDEXAMPLE", "secret/key+")
    signer = sigv4.Presigner(creds, "us-east-1", "http://127.0.0.1:9000", now=now)
    md5 = "1B2M2Y8AsgTpgAmY7PhCfg=="
    url = signer.url(
        "bucket",
        "out/model.bin",
        900,
        method="PUT",
        params={"partNumber": "3", "uploadId": "abc/def=="},
        headers={"Content-MD5": md5},
    )
    q = dict(parse_qsl(urlsplit(url).query))
    assert q["X-Amz-SignedHeaders"] == "content-md5;host"
    unsigned = url[: url.index("&X-Amz-Signature=")]
    req = AWSRequest(
        method="PUT", url=unsigned, headers={"host": "127.0.0.1:9000", "content-md5": md5}
    )
    req.context["timestamp"] = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    auth = S3SigV4QueryAuth(Credentials("AKIDEXAMPLE", "secret/key+"), "s3", "us-east-1")
    expected = auth.signature(auth.string_to_sign(req, auth.canonical_request(req)), req)
    assert q["X-Amz-Signature"] == expected
