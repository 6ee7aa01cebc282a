"""Everything the lifecycle is given rather than reaching for: store, providers, paths,
output sink, clock, SSH connector. :func:`build_deps` is the one place that assembles
them from a registry and config (launch, down, the runners, the idle reaper); tests build
one from real local parts."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cloudgpu import remote
from cloudgpu.config import Config
from cloudgpu.lifecycle.output import Sink
from cloudgpu.paths import Paths
from cloudgpu.provider import Provider
from cloudgpu.registry import Registry
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


def build_deps(
    *,
    store: Store,
    registry: Registry,
    sink: Sink,
    owner: str | None = None,
    config: Config | None = None,
    connect: ConnectFn = remote.connect,
) -> Deps:
    """The lifecycle's parts for this process: providers from ``registry`` (with their
    paths and environment), SSH through ``connect``, ``[launch] ssh_timeout`` from config,
    and the owner tag: the store's own id unless given (a runner's is its repository)."""
    config = config or registry.config
    return Deps(
        store=store,
        provider=registry.get,
        paths=registry.paths,
        sink=sink,
        owner=owner or store.owner_id(),
        connect=connect,
        env=registry.env,
        ssh_timeout=config.seconds("launch", "ssh_timeout", 300.0),
    )
