"""Secrets are cut from error lines, and cloudgpu's own words are not: a config error at
a secret-named key reads "api_key: expected text", and a bearer token loses its value."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudgpu.errors import redact
from tests.lifecycle.helpers import main_exit


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("providers.runpod.api_key: expected text, got 5", "api_key: expected text, got 5"),
        ("api_key: unknown key; did you mean 'api_url'?", "api_key: unknown key"),
        ("password: missing required key", "password: missing required key"),
        ("api_key: sk_live_123", "api_key: ***"),
        ("token=abc123", "token=***"),
        ("Authorization: Bearer abc.def-ghi", "Authorization: ***"),
        ("header authorization=Bearer xyz", "authorization=***"),
    ],
)
def test_redact(text: str, want: str) -> None:
    got = redact(text)
    assert want in got, got
    for secret in ("sk_live_123", "abc123", "abc.def-ghi", "xyz"):
        assert secret not in got


def test_a_bad_secret_key_is_a_readable_line_without_the_secret(cloudgpu_home: Path) -> None:
    config = cloudgpu_home / "config" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[providers.runpod]\napi_key = ["rpa_ABCDEFGHIJKLMNOPQRSTUVWX"]\n')
    code, _, err = main_exit(["check"])
    assert code == 2, err
    assert "providers.runpod.api_key: expected a single value, got a list" in err
    assert "ABCDEFGHIJ" not in err
