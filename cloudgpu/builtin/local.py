"""The `local` provider: run jobs on this machine, in a workspace under the data dir.

An "instance" is a directory ``<data>/local/<id>/`` holding ``instance.json`` (its
record: tags, deadline, state) and ``nvme/`` (the scratch dir the job sees as its local
NVMe, exported as ``$CLOUDGPU_NVME``). It has no SSH (an Instance with a ``workdir`` and
no ``ssh``): the lifecycle runs commands through cloudgpu.remote's LocalMachine.
Terminating stops every process carrying the instance's id in its environment and
removes the workspace.

Enabled by default: it is what runs a job when no cloud is configured. Config
``[providers.local]``: ``enabled = false`` to turn it off, ``price_per_hour`` to give
this machine a cost (default 0), ``workspace_dir`` to put workspaces on another disk
(default ``<data>/local``). It never powers the machine off or touches anything
outside its workspace.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from cloudgpu import atomicfile
from cloudgpu.builtin import hostinfo
from cloudgpu.builtin.procs import stop_tagged
from cloudgpu.catalog.offer import Offer, iso_utc
from cloudgpu.errors import ConfigError
from cloudgpu.provider import (
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
)
from cloudgpu.spec.fields import Node, flag, number, text

INSTANCE_TYPE = "local"
RECORD = "instance.json"


class LocalProvider(Provider):
    name: ClassVar[str] = "local"
    config_keys: ClassVar[Mapping[str, Node]] = {
        "enabled": flag("false turns this machine off as a provider"),
        "price_per_hour": number("what this machine costs per hour", 0, 10_000, lo_open=False),
        "workspace_dir": text("where job workspaces live (default <data>/local)"),
    }
    capabilities: ClassVar[Capabilities] = Capabilities(
        startup_s=0.0,  # create -> ready: this machine: nothing to boot
        billing_granularity_s=1,
    )

    @property
    def root(self) -> Path:
        configured = self.ctx.config.get("workspace_dir")
        if configured is not None and not isinstance(configured, str):
            raise ConfigError("providers.local.workspace_dir: expected a directory path")
        return Path(configured).expanduser() if configured else self.ctx.paths.data_dir / "local"

    def availability(self) -> Availability:
        if self.ctx.config.get("enabled", True) is False:
            return Availability(False, "disabled in config ([providers.local] enabled = false)")
        return Availability(True, "this machine (enabled by default)")

    def _price(self) -> float:
        price = self.ctx.config.get("price_per_hour", 0.0)
        if not isinstance(price, int | float) or isinstance(price, bool) or price < 0:
            raise ConfigError("providers.local.price_per_hour: expected a number >= 0")
        return float(price)

    def offers(self) -> list[Offer]:
        gpu = hostinfo.local_gpus()
        observed = iso_utc(self.ctx.clock())
        return [
            Offer(
                provider=self.name,
                instance_type=INSTANCE_TYPE,
                region="local",
                zone="",
                market="on_demand",
                gpu=gpu.name,
                gpu_count=gpu.count,
                gpu_memory_gb=gpu.memory_gb,
                vcpus=float(hostinfo.vcpus()),
                memory_gb=hostinfo.memory_gb(),
                price_per_hour=self._price(),
                nvme_count=1,
                nvme_size_gb=hostinfo.free_gb(self.root),
                price_source="config:providers.local" if self._price() else "local:free",
                observed_at=observed,
            )
        ]

    # -- instances -------------------------------------------------------------------

    def create(self, request: CreateRequest) -> Instance:
        self.root.mkdir(parents=True, exist_ok=True)
        token = request.idempotency_token
        if token:
            for inst in self._all():
                if inst.extra.get("idempotency_token") == token:
                    return inst
        iid = f"local-{os.urandom(5).hex()}"
        work = self.root / iid
        (work / "nvme").mkdir(parents=True)
        record = {
            "id": iid,
            "tags": dict(request.tags),
            "deadline": request.deadline,
            "launched_at": self.ctx.clock(),
            "idempotency_token": token,
            "price_per_hour": request.offer.price_per_hour,
            "state": InstanceState.RUNNING.value,
        }
        atomicfile.write_json(work / RECORD, record)
        return self._instance(work, record)

    def describe(self, instance_id: str) -> Instance:
        work = self.root / instance_id
        record = atomicfile.read_json(work / RECORD) if _safe_id(instance_id) else None
        if record is None:
            return Instance(instance_id, self.name, InstanceState.TERMINATED, INSTANCE_TYPE)
        deadline = record.get("deadline")
        if deadline is not None and self.ctx.clock() > float(deadline):
            # Past its deadline the instance is gone, whoever looks first cleans up.
            self.terminate(instance_id)
            return Instance(instance_id, self.name, InstanceState.TERMINATED, INSTANCE_TYPE)
        return self._instance(work, record)

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        out = []
        for inst in self._all():
            live = self.describe(inst.id)
            if live.state.is_gone:
                continue
            if all(live.tags.get(k) == v for k, v in tags.items()):
                out.append(live)
        return out

    def terminate(self, instance_id: str) -> None:
        if not _safe_id(instance_id):
            return
        stop_tagged(instance_id, sleep=self.ctx.sleep)
        work = self.root / instance_id
        if work.exists():
            # Drop the record first: a half-removed workspace must not look alive.
            (work / RECORD).unlink(missing_ok=True)
            shutil.rmtree(work, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------------

    def _all(self) -> list[Instance]:
        if not self.root.is_dir():
            return []
        out = []
        for work in sorted(self.root.iterdir()):
            record = atomicfile.read_json(work / RECORD)
            if record is not None:
                out.append(self._instance(work, record))
        return out

    def _instance(self, work: Path, record: Mapping[str, Any]) -> Instance:
        return Instance(
            id=str(record["id"]),
            provider=self.name,
            state=InstanceState(record.get("state", "running")),
            instance_type=INSTANCE_TYPE,
            region="local",
            tags=dict(record.get("tags", {})),
            price_per_hour=float(record.get("price_per_hour", 0.0)),
            launched_at=record.get("launched_at"),
            nvme_mount=str(work / "nvme"),
            workdir=str(work),
            extra={"idempotency_token": record.get("idempotency_token", "")},
        )


def _safe_id(instance_id: str) -> bool:
    return bool(instance_id) and "/" not in instance_id and instance_id not in (".", "..")
