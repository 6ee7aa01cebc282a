"""The client key pair: made once, 0600, the same pair for every concurrent caller."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

from cloudgpu.sshkeys import ensure_keypair


def test_concurrent_callers_get_the_one_pair_on_disk(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    got: list[tuple[Path, str]] = []
    threads = [threading.Thread(target=lambda: got.append(ensure_keypair(keys))) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 16 and len({pub for _, pub in got}) == 1
    path, public = got[0]
    assert (keys / "cloudgpu_ed25519.pub").read_text().strip() == public
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    assert ensure_keypair(keys) == (path, public)
