"""Finds which AWS credential source the standard chain would use, without the SDK and
without the network.

`cloudgpu check`, `offers` and the planner ask every provider whether it is enabled; that
must cost neither a boto3 import nor an instance-metadata probe (which waits on a timeout
off EC2). So this module inspects the same sources botocore's chain reads, in the same
order (https://boto3.amazonaws.com/v1/documentation/api/latest/guide/credentials.html),
and reports the first that holds credentials. It never reads or returns a secret's value,
only whether it is present. The real call that proves them is AWSProvider.check().
"""

from __future__ import annotations

import configparser
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Keys of a config-file profile that make botocore obtain credentials some other way.
_INDIRECT_KEYS = (
    ("sso_session", "sso"),
    ("sso_start_url", "sso"),
    ("role_arn", "assume-role"),
    ("credential_process", "credential-process"),
    ("web_identity_token_file", "web-identity"),
)
_DMI_VENDOR_FILES = ("board_vendor", "sys_vendor")


@dataclass(frozen=True)
class CredentialReport:
    source: str | None  # e.g. "env:AWS_ACCESS_KEY_ID", "profile:work (sso)"; None = none
    looked_at: tuple[str, ...]  # every source inspected, in order
    problem: str = ""  # why nothing was usable, when a source was named but broken


def _read_ini(path: Path) -> configparser.RawConfigParser | None:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (OSError, configparser.Error, UnicodeDecodeError):
        return None
    return parser


def _config_section(parser: configparser.RawConfigParser, profile: str) -> str | None:
    for name in (f"profile {profile}", profile) if profile != "default" else ("default",):
        if parser.has_section(name):
            return name
    return None


def _profile_source(env: Mapping[str, str], home: Path, profile: str) -> tuple[str | None, bool]:
    """(source, profile_exists) for ``profile`` in the shared credentials/config files."""
    cred_file = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials")
    conf_file = Path(env.get("AWS_CONFIG_FILE") or home / ".aws" / "config")
    exists = False
    conf = _read_ini(conf_file.expanduser())
    section = _config_section(conf, profile) if conf else None
    if conf is not None and section:
        exists = True
        for key, kind in _INDIRECT_KEYS:
            if conf.has_option(section, key):
                return f"profile:{profile} ({kind}, {conf_file})", True
    creds = _read_ini(cred_file.expanduser())
    if creds is not None and creds.has_section(profile):
        exists = True
        if creds.has_option(profile, "aws_access_key_id"):
            return f"profile:{profile} ({cred_file})", True
    if conf is not None and section and conf.has_option(section, "aws_access_key_id"):
        return f"profile:{profile} ({conf_file})", True
    return None, exists


def _on_ec2(dmi_dir: Path) -> bool:
    """True on an EC2 instance (its DMI vendor says so): an instance role may exist."""
    for name in _DMI_VENDOR_FILES:
        try:
            if "amazon" in (dmi_dir / name).read_text(errors="replace").lower():
                return True
        except OSError:
            continue
    return False


def find_credentials(
    env: Mapping[str, str],
    profile: str | None = None,
    dmi_dir: Path = Path("/sys/devices/virtual/dmi/id"),
) -> CredentialReport:
    """The first credential source of the standard chain that is present in ``env``.

    ``profile`` is one named in cloudgpu's config: like a profile passed to a boto3
    Session, it takes precedence over keys in the environment (AWS_PROFILE does not).
    """
    looked: list[str] = []
    home = Path(env.get("HOME") or Path.home())
    if not profile:
        looked.append("env:AWS_ACCESS_KEY_ID")
        if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
            return CredentialReport("env:AWS_ACCESS_KEY_ID", tuple(looked))
    looked.append("env:AWS_WEB_IDENTITY_TOKEN_FILE")
    if env.get("AWS_WEB_IDENTITY_TOKEN_FILE") and env.get("AWS_ROLE_ARN"):
        return CredentialReport("env:AWS_WEB_IDENTITY_TOKEN_FILE", tuple(looked))
    named = profile or env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE")
    name = named or "default"
    looked.append(f"profile:{name}")
    source, exists = _profile_source(env, home, name)
    if source:
        return CredentialReport(source, tuple(looked))
    if named and not exists:
        # botocore fails outright on a named profile that does not exist.
        return CredentialReport(
            None, tuple(looked), f"profile '{name}' is not in ~/.aws/config or ~/.aws/credentials"
        )
    looked.append("container-role")
    if env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") or env.get(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI"
    ):
        return CredentialReport("container-role", tuple(looked))
    looked.append("instance-role")
    if env.get("AWS_EC2_METADATA_DISABLED", "").lower() != "true" and _on_ec2(dmi_dir):
        return CredentialReport("instance-role (EC2 instance metadata)", tuple(looked))
    return CredentialReport(None, tuple(looked))
