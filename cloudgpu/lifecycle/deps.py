"""Everything the lifecycle is given rather than reaching for: store, providers, paths,
output sink, clock, SSH connector. Tests build one from real local parts."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cloudgpu.lifecycle.output import Sink
from cloudgpu.paths import Paths
from cloudgpu.provider import Provider
from cloudgpu.remote import Machine
from cloudgpu.state.store import Store

ConnectFn = Callable[..., Machine]


@dataclass
class Deps:
    store: Store
    provider: Callable[[str], Provider]  # provider by name (Registry.get)
    paths: Paths
    sink: Sink
    owner: str  # TAG_OWNER value: who launched (user@host)
    connect: ConnectFn
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    env: Mapping[str, str] = field(default_factory=dict)  # for s3 endpoint/credentials
    ssh_timeout: float = 300.0  # how long a new instance may take to answer SSH

    @property
    def known_hosts(self) -> Path:
        return self.paths.data_dir / "known_hosts"
