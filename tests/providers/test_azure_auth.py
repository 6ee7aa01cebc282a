"""Azure credential detection: which source, offline, and never a secret in the output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cloudgpu_providers.azure import AzureProvider
from cloudgpu_providers.azure.auth import detect

from cloudgpu.paths import Paths
from cloudgpu.provider import ProviderContext

SECRET = "s3cr3t-value-never-printed"
SUB = "11111111-2222-3333-4444-555555555555"


def provider(paths: Paths, env: dict[str, str], **cfg: object) -> AzureProvider:
    return AzureProvider(ProviderContext(config=dict(cfg), paths=paths, env=env))


def test_no_credentials_is_disabled_with_the_sources_looked_at(
    paths: Paths, tmp_path: Path
) -> None:
    av = provider(paths, {"HOME": str(tmp_path)}).availability()
    assert not av.enabled
    assert "no Azure credentials" in av.reason
    assert "env:AZURE_CLIENT_SECRET" in av.sources
    assert any(s.startswith("azure-cli:") for s in av.sources)


def test_service_principal_env_needs_a_subscription(paths: Paths, tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path),
        "AZURE_TENANT_ID": "t",
        "AZURE_CLIENT_ID": "c",
        "AZURE_CLIENT_SECRET": SECRET,
    }
    av = provider(paths, env).availability()
    assert not av.enabled and "no subscription" in av.reason
    av = provider(paths, {**env, "AZURE_SUBSCRIPTION_ID": SUB}).availability()
    assert av.enabled
    assert "env:AZURE_CLIENT_SECRET" in av.reason and "env:AZURE_SUBSCRIPTION_ID" in av.reason
    assert SECRET not in av.reason + " ".join(av.sources)


def test_certificate_and_workload_identity_sources(paths: Paths, tmp_path: Path) -> None:
    base = {"HOME": str(tmp_path), "AZURE_TENANT_ID": "t", "AZURE_CLIENT_ID": "c"}
    cert = detect({**base, "AZURE_CLIENT_CERTIFICATE_PATH": "/x.pem"}, {})
    assert cert.source is not None and cert.source.kind == "env-certificate"
    wl = detect({**base, "AZURE_FEDERATED_TOKEN_FILE": "/var/run/token"}, {})
    assert wl.source is not None and wl.source.kind == "workload"
    mi = detect({"HOME": str(tmp_path)}, {"managed_identity": True})
    assert mi.source is not None and mi.source.kind == "managed-identity"


def test_azure_cli_login_gives_source_and_default_subscription(
    paths: Paths, tmp_path: Path
) -> None:
    cli = tmp_path / "azcfg"
    cli.mkdir()
    profile = {
        "subscriptions": [
            {"id": "other", "isDefault": False},
            {"id": SUB, "isDefault": True, "user": {"name": "me@example.com", "type": "user"}},
        ]
    }
    # The CLI writes azureProfile.json with a byte-order mark.
    (cli / "azureProfile.json").write_text(json.dumps(profile), encoding="utf-8-sig")
    env = {"HOME": str(tmp_path), "AZURE_CONFIG_DIR": str(cli)}
    assert not provider(paths, env).availability().enabled  # no token cache: not logged in
    (cli / "msal_token_cache.json").write_text("{}")
    av = provider(paths, env).availability()
    assert av.enabled, av.reason
    assert "azure-cli:" in av.reason and "azureProfile.json" in av.reason
    assert detect(env, {}).subscription_id == SUB
    assert detect(env, {"subscription_id": "from-config"}).subscription_id == "from-config"


def test_disabled_in_config(paths: Paths, tmp_path: Path) -> None:
    env = {
        "HOME": str(tmp_path),
        "AZURE_TENANT_ID": "t",
        "AZURE_CLIENT_ID": "c",
        "AZURE_CLIENT_SECRET": SECRET,
        "AZURE_SUBSCRIPTION_ID": SUB,
    }
    av = provider(paths, env, enabled=False).availability()
    assert not av.enabled and "disabled" in av.reason


def test_creating_the_provider_imports_no_azure_sdk() -> None:
    code = (
        "import sys; from cloudgpu_providers.azure import AzureProvider; "
        "print(sorted(m for m in sys.modules if m.startswith('azure')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
