"""Whether the AWS provider is enabled, and why, from the standard credential chain,
without the SDK and without the network; and `check` confirming keys through STS."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cloudgpu_providers.aws import AWSProvider
from cloudgpu_providers.aws.credentials import find_credentials

from cloudgpu.errors import AuthError
from cloudgpu.paths import Paths
from cloudgpu.provider import ProviderContext
from tests.providers.aws_fixtures.account import ec2_url, moto_url
from tests.providers.aws_fixtures.setup import FAKE_ENV, make_provider

__all__ = ["ec2_url", "moto_url"]  # the fixtures, imported for pytest

NO_DMI = Path("/nonexistent-dmi")
# Tests may run on an EC2 machine (CI): keep its instance role out of the picture.
NO_IMDS = {"AWS_EC2_METADATA_DISABLED": "true"}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _provider(paths: Paths, env: dict[str, str], **config: object) -> AWSProvider:
    return AWSProvider(ProviderContext(config=config, paths=paths, env=env))


def test_no_credentials_means_not_enabled_with_the_sources_named(
    paths: Paths, tmp_path: Path
) -> None:
    av = _provider(paths, {"HOME": str(tmp_path), **NO_IMDS}).availability()
    assert not av.enabled
    assert "no AWS credentials" in av.reason
    for source in ("env:AWS_ACCESS_KEY_ID", "profile:default", "container-role"):
        assert source in av.reason and source in av.sources


def test_without_credentials_refresh_stops_before_any_call(paths: Paths, tmp_path: Path) -> None:
    prov = _provider(paths, {"HOME": str(tmp_path), **NO_IMDS}, endpoint_url="http://127.0.0.1:9")
    with pytest.raises(AuthError, match="no AWS credentials"):
        prov.fetch_offers()
    assert not prov.check().enabled


def test_env_keys_enable_without_showing_the_secret(paths: Paths, tmp_path: Path) -> None:
    av = _provider(paths, {**FAKE_ENV, "HOME": str(tmp_path)}).availability()
    assert av.enabled and av.reason == "credentials from env:AWS_ACCESS_KEY_ID"
    assert FAKE_ENV["AWS_SECRET_ACCESS_KEY"] not in repr(av)
    assert FAKE_ENV["AWS_ACCESS_KEY_ID"] not in repr(av)


def test_profile_in_shared_credentials_file(tmp_path: Path) -> None:
    _write(
        tmp_path / ".aws" / "credentials",
        "[work]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = s\n",
    )
    env = {"HOME": str(tmp_path), "AWS_PROFILE": "work"}
    report = find_credentials(env, dmi_dir=NO_DMI)
    assert report.source and report.source.startswith("profile:work")


def test_sso_profile_in_config_file(tmp_path: Path) -> None:
    conf = _write(tmp_path / "conf", "[profile dev]\nsso_session = corp\nsso_account_id = 1\n")
    env = {"HOME": str(tmp_path), "AWS_CONFIG_FILE": str(conf)}
    report = find_credentials(env, profile="dev", dmi_dir=NO_DMI)
    assert report.source == f"profile:dev (sso, {conf})"


def test_named_profile_that_does_not_exist_says_so(paths: Paths, tmp_path: Path) -> None:
    av = _provider(paths, {"HOME": str(tmp_path), **NO_IMDS}, profile="nope").availability()
    assert not av.enabled and "profile 'nope' is not in" in av.reason


def test_container_and_instance_roles(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/creds"}
    assert find_credentials(env, dmi_dir=NO_DMI).source == "container-role"
    dmi = tmp_path / "dmi"
    _write(dmi / "board_vendor", "Amazon EC2\n")
    on_ec2 = find_credentials({"HOME": str(tmp_path)}, dmi_dir=dmi)
    assert on_ec2.source and on_ec2.source.startswith("instance-role")
    disabled = {"HOME": str(tmp_path), "AWS_EC2_METADATA_DISABLED": "true"}
    assert find_credentials(disabled, dmi_dir=dmi).source is None


def test_check_confirms_through_sts(ec2_url: str, paths: Paths, tmp_path: Path) -> None:
    av = make_provider(ec2_url, paths, str(tmp_path)).check()
    assert av.enabled
    assert "env:AWS_ACCESS_KEY_ID" in av.reason and "confirmed by STS" in av.reason


def test_importing_the_provider_imports_no_sdk() -> None:
    code = (
        "import sys, cloudgpu_providers.aws; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_profile_named_in_config_wins_over_env_keys(tmp_path: Path) -> None:
    _write(
        tmp_path / ".aws" / "credentials",
        "[work]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = s\n",
    )
    env = {**FAKE_ENV, "HOME": str(tmp_path)}
    assert find_credentials(env, dmi_dir=NO_DMI).source == "env:AWS_ACCESS_KEY_ID"
    named = find_credentials(env, profile="work", dmi_dir=NO_DMI).source
    assert named and named.startswith("profile:work")
