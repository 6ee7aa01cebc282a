"""Where GCP credentials and the project come from, decided without any network call.

Application Default Credentials in Google's documented order
(https://cloud.google.com/docs/authentication/application-default-credentials):
``GOOGLE_APPLICATION_CREDENTIALS``, then gcloud's ADC file
(``$CLOUDSDK_CONFIG`` or ``~/.config/gcloud``/application_default_credentials.json).
The metadata server (on GCE) needs the network and is only tried by check(), when the
config says ``use_metadata_server = true``. ``anonymous = true`` (with ``endpoint_url``)
uses no credentials at all: for emulators and the tests' loopback server.

This module reads the ADC file only for its ``type`` and project fields and never
returns, prints or stores anything secret from it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ADC_FILE = "application_default_credentials.json"
PROJECT_ENV = ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT", "GCLOUD_PROJECT")
SOURCES = (
    "env:GOOGLE_APPLICATION_CREDENTIALS",
    "file:gcloud ADC (~/.config/gcloud/application_default_credentials.json)",
    "config:credentials_file",
    "config:anonymous",
)


@dataclass(frozen=True)
class CredentialSource:
    kind: str  # "file" | "anonymous" | "metadata" | ""
    description: str  # e.g. "env:GOOGLE_APPLICATION_CREDENTIALS (service_account)"
    path: Path | None = None
    project: str = ""


def gcloud_adc_path(env: Mapping[str, str]) -> Path | None:
    config_dir = env.get("CLOUDSDK_CONFIG")
    if config_dir:
        return Path(config_dir) / ADC_FILE
    home = env.get("HOME")
    return Path(home) / ".config" / "gcloud" / ADC_FILE if home else None


def _file_info(path: Path) -> tuple[str, str] | None:
    """(credential type, project) of an ADC file, or None when it is unreadable."""
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    project = str(data.get("project_id") or data.get("quota_project_id") or "")
    return str(data.get("type") or "unknown"), project


def find_source(config: Mapping[str, Any], env: Mapping[str, str]) -> CredentialSource:
    if config.get("anonymous"):
        return CredentialSource("anonymous", "config:anonymous (no credentials)")
    candidates: list[tuple[str, str | Path | None]] = [
        ("env:GOOGLE_APPLICATION_CREDENTIALS", env.get("GOOGLE_APPLICATION_CREDENTIALS")),
        ("config:credentials_file", config.get("credentials_file")),
        ("file:gcloud ADC", gcloud_adc_path(env)),
    ]
    for label, raw in candidates:
        if not raw:
            continue
        path = Path(raw).expanduser()
        info = _file_info(path)
        if info is not None:
            kind, project = info
            return CredentialSource("file", f"{label} ({kind})", path, project)
    if config.get("use_metadata_server"):
        return CredentialSource("metadata", "GCE metadata server (config:use_metadata_server)")
    return CredentialSource("", "")


def find_project(
    config: Mapping[str, Any], env: Mapping[str, str], source: CredentialSource
) -> tuple[str, str]:
    """(project id, where it came from); ("", "") when none is configured."""
    if config.get("project"):
        return str(config["project"]), "config:project"
    for var in PROJECT_ENV:
        if env.get(var):
            return env[var], f"env:{var}"
    if source.project:
        return source.project, "credentials file"
    return "", ""
