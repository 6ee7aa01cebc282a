"""`down --orphans` cannot list a provider (its API refuses connections): it says which
and exits non-zero (4), never "0 orphan(s) removed" with exit 0 that reads as all clear."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.lifecycle.helpers import main_exit


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends


def test_an_unlistable_provider_fails_the_sweep(
    cloudgpu_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = cloudgpu_home / "config" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        f'[providers.runpod]\napi_base_url = "http://127.0.0.1:{_closed_port()}"\n'
        "attempts = 1\nbackoff_s = 0.01\ntimeout_s = 2\n"
    )
    monkeypatch.setenv("RUNPOD_API_KEY", "fake-key-for-a-closed-port")
    code, _, err = main_exit(["down", "--orphans", "--yes"])
    assert code == 4, err
    assert "runpod: cannot list" in err and "internal error" not in err
    assert "fake-key" not in err
