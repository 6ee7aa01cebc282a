"""An example cloudgpu provider: each instance is a scratch folder on this machine.

It is the smallest provider that does everything the contract asks: it reports its own
offers (``slots`` machines of one shape, priced from config), creates and terminates
"instances" (folders with a small JSON record), finds them by tag, honours the
idempotency token, says when it has no capacity (all slots busy) so the lifecycle fails
over, and never raises for an instance that is gone. Jobs run as local processes in the
folder (the Instance has a ``workdir`` and no ``ssh``), so no SSH is needed.

Config (``[providers.scratch]`` in cloudgpu's config.toml): ``enabled = true`` (it is
off by default), ``slots`` (default 1), ``price_per_hour`` (default 0.1).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from cloudgpu.catalog.offer import Offer, iso_utc
from cloudgpu.errors import CapacityError, ConfigError
from cloudgpu.provider import (
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
)

RECORD = "instance.json"


class ScratchProvider(Provider):
    name: ClassVar[str] = "scratch"
    capabilities: ClassVar[Capabilities] = Capabilities(startup_s=0.0)

    # -- discovery -------------------------------------------------------------------

    def availability(self) -> Availability:
        if self.ctx.config.get("enabled") is not True:
            return Availability(False, "opt-in: set [providers.scratch] enabled = true")
        return Availability(True, "scratch folders on this machine", ("config:enabled",))

    def _number(self, key: str, default: float) -> float:
        value = self.ctx.config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigError(f"providers.scratch.{key}: expected a number >= 0")
        return float(value)

    def offers(self) -> list[Offer]:
        return [
            Offer(
                provider=self.name,
                instance_type="scratch.small",
                region="here",
                zone="",
                market="on_demand",
                gpu="",
                gpu_count=0,
                gpu_memory_gb=0.0,
                vcpus=float(os.cpu_count() or 1),
                memory_gb=1.0,
                price_per_hour=self._number("price_per_hour", 0.1),
                nvme_count=1,
                nvme_size_gb=10.0,
                price_source="config:providers.scratch",
                observed_at=iso_utc(self.ctx.clock()),  # when this price was read
            )
        ]

    # -- instances -------------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self.ctx.paths.data_dir / "scratch"

    def create(self, request: CreateRequest) -> Instance:
        for inst in self._all():  # a retried create returns what the first one made
            if request.idempotency_token and inst.extra["token"] == request.idempotency_token:
                return inst
        if len(self._all()) >= int(self._number("slots", 1)):
            raise CapacityError("every scratch slot is in use", provider=self.name)
        iid = f"scratch-{uuid.uuid4().hex[:10]}"
        (self.root / iid / "nvme").mkdir(parents=True)
        record = {
            "id": iid,
            "tags": dict(request.tags),
            "token": request.idempotency_token,
            "price_per_hour": request.offer.price_per_hour,
            "launched_at": self.ctx.clock(),
        }
        (self.root / iid / RECORD).write_text(json.dumps(record))
        return self._instance(self.root / iid, record)

    def describe(self, instance_id: str) -> Instance:
        folder = self.root / instance_id
        if "/" in instance_id or not (folder / RECORD).is_file():
            return Instance(instance_id, self.name, InstanceState.TERMINATED)
        return self._instance(folder, json.loads((folder / RECORD).read_text()))

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        return [i for i in self._all() if all(i.tags.get(k) == v for k, v in tags.items())]

    def terminate(self, instance_id: str) -> None:
        if "/" not in instance_id and instance_id not in ("", ".", ".."):
            shutil.rmtree(self.root / instance_id, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------------

    def _all(self) -> list[Instance]:
        if not self.root.is_dir():
            return []
        return [
            self.describe(d.name) for d in sorted(self.root.iterdir()) if (d / RECORD).is_file()
        ]

    def _instance(self, folder: Path, record: Mapping[str, Any]) -> Instance:
        return Instance(
            id=str(record["id"]),
            provider=self.name,
            state=InstanceState.RUNNING,
            instance_type="scratch.small",
            region="here",
            tags=dict(record["tags"]),
            price_per_hour=float(record["price_per_hour"]),
            launched_at=float(record["launched_at"]),
            nvme_mount=str(folder / "nvme"),
            workdir=str(folder),
            extra={"token": record["token"]},
        )
