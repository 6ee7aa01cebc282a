"""Which Azure credential source is usable, found without a network call, and the
credential object for it.

Looked at in DefaultAzureCredential's order (https://learn.microsoft.com/python/api/
azure-identity/azure.identity.defaultazurecredential):

1. environment: AZURE_TENANT_ID + AZURE_CLIENT_ID + AZURE_CLIENT_SECRET, or
   AZURE_CLIENT_CERTIFICATE_PATH instead of the secret (a service principal);
2. workload identity: AZURE_FEDERATED_TOKEN_FILE + AZURE_TENANT_ID + AZURE_CLIENT_ID
   (AKS, GitHub Actions OIDC);
3. managed identity: IDENTITY_ENDPOINT / MSI_ENDPOINT in the environment, or config
   ``managed_identity = true`` on an Azure VM (probing IMDS would be a network call);
4. Azure CLI: a login in AZURE_CONFIG_DIR (default ~/.azure): azureProfile.json with a
   subscription, plus the CLI's MSAL token cache.

The subscription comes from config ``subscription_id``, then AZURE_SUBSCRIPTION_ID, then the
CLI profile's default subscription. Reasons and sources name variables and files, never
their values. The azure-identity SDK is imported only in :func:`make_credential`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CredentialSource:
    kind: str  # "env-secret" | "env-certificate" | "workload" | "managed-identity" | "cli"
    label: str  # what `cloudgpu check` prints, e.g. "env:AZURE_CLIENT_SECRET"


@dataclass(frozen=True)
class Detection:
    source: CredentialSource | None
    subscription_id: str
    subscription_from: str
    looked_at: tuple[str, ...]


def _cli_dir(env: Mapping[str, str]) -> Path:
    if env.get("AZURE_CONFIG_DIR"):
        return Path(env["AZURE_CONFIG_DIR"]).expanduser()
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".azure"


def _cli_profile(env: Mapping[str, str]) -> tuple[bool, str]:
    """(logged in, default subscription id) from the Azure CLI's azureProfile.json."""
    cli = _cli_dir(env)
    try:
        # The CLI writes this file with a UTF-8 byte-order mark.
        profile = json.loads((cli / "azureProfile.json").read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return False, ""
    subs = profile.get("subscriptions") if isinstance(profile, dict) else None
    if not isinstance(subs, list) or not subs:
        return False, ""
    default = next((s for s in subs if isinstance(s, dict) and s.get("isDefault")), subs[0])
    has_tokens = any(
        (cli / name).exists() for name in ("msal_token_cache.json", "msal_token_cache.bin")
    )
    sub = str(default.get("id", "")) if isinstance(default, dict) else ""
    return has_tokens, sub


def detect(env: Mapping[str, str], config: Mapping[str, Any]) -> Detection:
    """Find the first usable credential source and the subscription, offline."""
    looked = (
        "env:AZURE_CLIENT_SECRET",
        "env:AZURE_CLIENT_CERTIFICATE_PATH",
        "env:AZURE_FEDERATED_TOKEN_FILE",
        "managed-identity",
        f"azure-cli:{_cli_dir(env)}",
    )
    sp = bool(env.get("AZURE_TENANT_ID") and env.get("AZURE_CLIENT_ID"))
    cli_ok, cli_sub = _cli_profile(env)
    source: CredentialSource | None = None
    if sp and env.get("AZURE_CLIENT_SECRET"):
        source = CredentialSource("env-secret", "env:AZURE_CLIENT_SECRET")
    elif sp and env.get("AZURE_CLIENT_CERTIFICATE_PATH"):
        source = CredentialSource("env-certificate", "env:AZURE_CLIENT_CERTIFICATE_PATH")
    elif sp and env.get("AZURE_FEDERATED_TOKEN_FILE"):
        source = CredentialSource("workload", "env:AZURE_FEDERATED_TOKEN_FILE")
    elif env.get("IDENTITY_ENDPOINT") or env.get("MSI_ENDPOINT") or config.get("managed_identity"):
        source = CredentialSource("managed-identity", "managed-identity")
    elif cli_ok:
        source = CredentialSource("cli", f"azure-cli:{_cli_dir(env)}")
    if config.get("subscription_id"):
        sub, sub_from = str(config["subscription_id"]), "config:subscription_id"
    elif env.get("AZURE_SUBSCRIPTION_ID"):
        sub, sub_from = env["AZURE_SUBSCRIPTION_ID"], "env:AZURE_SUBSCRIPTION_ID"
    elif cli_sub:
        sub, sub_from = cli_sub, "azure-cli:azureProfile.json"
    else:
        sub, sub_from = "", ""
    return Detection(source, sub, sub_from, looked)


def make_credential(source: CredentialSource, env: Mapping[str, str]) -> Any:
    """The azure-identity credential for ``source``, built from ``env`` (not os.environ)."""
    from azure import identity  # lazy: heavy SDK, only when Azure is really used

    authority = env.get("AZURE_AUTHORITY_HOST") or None
    kw: dict[str, Any] = {"authority": authority} if authority else {}
    if source.kind == "env-secret":
        return identity.ClientSecretCredential(
            env["AZURE_TENANT_ID"], env["AZURE_CLIENT_ID"], env["AZURE_CLIENT_SECRET"], **kw
        )
    if source.kind == "env-certificate":
        return identity.CertificateCredential(
            env["AZURE_TENANT_ID"],
            env["AZURE_CLIENT_ID"],
            certificate_path=env["AZURE_CLIENT_CERTIFICATE_PATH"],
            password=env.get("AZURE_CLIENT_CERTIFICATE_PASSWORD") or None,
            **kw,
        )
    if source.kind == "workload":
        return identity.WorkloadIdentityCredential(
            tenant_id=env["AZURE_TENANT_ID"],
            client_id=env["AZURE_CLIENT_ID"],
            token_file_path=env["AZURE_FEDERATED_TOKEN_FILE"],
            **kw,
        )
    if source.kind == "managed-identity":
        client_id = env.get("AZURE_CLIENT_ID") or None
        return identity.ManagedIdentityCredential(client_id=client_id)
    return identity.AzureCliCredential()
