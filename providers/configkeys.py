"""Building blocks for the providers' ``config_keys`` (the keys of ``[providers.NAME]``,
checked when config.toml is read). Each provider declares its own table in its
provider.py from these; nothing here knows a provider."""

from __future__ import annotations

from cloudgpu.spec.fields import ListOf, Node, Value, flag, number, port, text

TEXT = text(max_len=4096)
URL = text(form="a URL", max_len=4096)
TEXTS = ListOf(text(max_len=200), scalar_ok=True)
FLAG = flag("true or false")
PORT = port()


def seconds(hi: float = 86_400.0) -> Value:
    return number("seconds", 0, hi, unit="seconds", lo_open=False)


def count(lo: int, hi: int) -> Value:
    return number("a count", lo, hi, integer=True, lo_open=False)


# Retries of HTTP APIs (cloudgpu_providers.apikey.retry_options) and teardown polling.
RETRY: dict[str, Node] = {
    "attempts": count(1, 20),
    "backoff_s": seconds(300),
    "timeout_s": seconds(3600),
    "poll_s": seconds(600),
}
# Providers reached with an API key (cloudgpu_providers.apikey) and SSH into their boxes.
API_KEYS: dict[str, Node] = {
    "api_key": TEXT,
    **RETRY,
    "ssh_user": TEXT,
    "ssh_port": PORT,
    "scratch_dir": TEXT,
    "image": TEXT,
}
