"""GCP credentials and `check`: ADC found without network, what is not enough, the one
cheap call, auth and throttling errors mapped, no SDK imported until needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cloudgpu_providers.gcp import GCPProvider

from cloudgpu.errors import AuthError, TransientError
from cloudgpu.paths import Paths
from cloudgpu.provider import ProviderContext
from tests.fixtures.gcp.server import FakeGCP
from tests.providers.gcp_kit import fake, make_provider, provider

__all__ = ["fake", "provider"]  # the fixtures, imported for pytest


def test_auth_failure_is_auth_error(provider: GCPProvider, fake: FakeGCP) -> None:
    fake.fail_next = [("GET", "zones", "error_unauthorized")]
    with pytest.raises(AuthError) as err:
        provider.check()
    assert "application-default login" in (err.value.hint or "")


def test_check_is_one_cheap_call(provider: GCPProvider, fake: FakeGCP) -> None:
    av = provider.check()
    assert av.enabled and "test-project" in av.reason
    assert fake.requests == [("GET", "/compute/v1/projects/test-project/zones")]


def test_throttling_that_persists_is_transient(fake: FakeGCP, paths: Paths) -> None:
    provider = make_provider(fake, paths, attempts=2)
    fake.fail_next = [("GET", "zones", "error_rate_limited")] * 2
    with pytest.raises(TransientError):
        provider.check()


def test_no_credentials_is_disabled_with_reason(paths: Paths, tmp_path: Path) -> None:
    ctx = ProviderContext(config={}, paths=paths, env={"HOME": str(tmp_path)})
    av = GCPProvider(ctx).availability()
    assert not av.enabled and "Application Default Credentials" in av.reason
    assert "env:GOOGLE_APPLICATION_CREDENTIALS" in av.sources


def test_adc_file_and_project_are_found_without_network(paths: Paths, tmp_path: Path) -> None:
    adc = tmp_path / ".config" / "gcloud" / "application_default_credentials.json"
    adc.parent.mkdir(parents=True)
    secret = "1//0SECRET-REFRESH-TOKEN"
    adc.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "x",
                "client_secret": "y",
                "refresh_token": secret,
                "quota_project_id": "my-proj",
            }
        )
    )
    av = GCPProvider(
        ProviderContext(config={}, paths=paths, env={"HOME": str(tmp_path)})
    ).availability()
    assert av.enabled and "gcloud ADC (authorized_user)" in av.reason and "my-proj" in av.reason
    assert secret not in av.reason


def test_credentials_without_project_are_not_enough(paths: Paths, tmp_path: Path) -> None:
    key = tmp_path / "sa.json"
    key.write_text(json.dumps({"type": "service_account"}))
    env = {"HOME": str(tmp_path), "GOOGLE_APPLICATION_CREDENTIALS": str(key)}
    av = GCPProvider(ProviderContext(config={}, paths=paths, env=env)).availability()
    assert not av.enabled and "no project" in av.reason


def test_importing_the_provider_loads_no_sdk() -> None:
    code = "import sys, cloudgpu_providers.gcp; print([m for m in sys.modules if 'google' in m])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_anonymous_needs_an_endpoint(paths: Paths) -> None:
    ctx = ProviderContext(config={"anonymous": True, "project": "p"}, paths=paths, env={})
    av = GCPProvider(ctx).availability()
    assert not av.enabled and "endpoint_url" in av.reason
