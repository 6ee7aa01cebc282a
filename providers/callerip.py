"""This machine's public address as a one-host CIDR, for the SSH firewall rule a cloud
provider opens (AWS, Azure, GCP) when the user set no ``ssh_cidr``.

The address is asked of a plain-text "what is my IP" URL (checkip.amazonaws.com by
default, configurable). lookup_cidr lets failures surface as the OSError or ValueError
they are; caller_cidr turns them into the one-line ConfigError naming the provider's
``ssh_cidr`` key. Nothing is cached or stored.
"""

from __future__ import annotations

import ipaddress
import urllib.request

from cloudgpu.errors import ConfigError


def lookup_cidr(url: str, timeout_s: float) -> str:
    """``url``'s answer (one IPv4/IPv6 address) as ``addr/32`` or ``addr/128``.

    Raises OSError when the URL cannot be read, ValueError when the answer is no address.
    """
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        text = resp.read(256).decode("ascii", "replace").strip()
    addr = ipaddress.ip_address(text)
    return f"{addr}/{addr.max_prefixlen}"


def normalized_cidr(raw: object) -> str:
    """A configured CIDR in canonical form (host bits allowed); ValueError if it is none."""
    return str(ipaddress.ip_network(str(raw), strict=False))


def caller_cidr(provider: str, url: str, timeout_s: float) -> str:
    """lookup_cidr, or a ConfigError saying to set ``providers.<provider>.ssh_cidr``."""
    try:
        return lookup_cidr(url, timeout_s)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"providers.{provider}.ssh_cidr: not set, and this machine's public address "
            f"could not be learned from {url}",
            hint=f'set ssh_cidr in [providers.{provider}], e.g. ssh_cidr = "203.0.113.7/32"',
        ) from exc
