"""The sim provider: a simulated cloud whose instances are real OpenSSH servers.

Opt-in (``[providers.sim] enabled = true`` or ``CLOUDGPU_SIM=1``) so it never wins a real
user's plan. Each instance is a detached sshd on its own 127.0.0.1 port with its own host
key, running in a private mount and PID namespace where it sees its own /nvme (see
watchdog.py); its files live under ``<data_dir>/sim/<id>/`` so CLOUDGPU_HOME isolates
runs. Simulated: boot delay, capacity per instance type (CapacityError), spot preemption
with an advance notice readable inside the instance (file named by
``$CLOUDGPU_PREEMPTION_NOTICE``) and from outside (:meth:`preemption_notice`), per-second
billing (launched_at / terminated_at in the state record), and host key fingerprints
reported out of band, as clouds print them to the console, so pinning is real.

Config keys (all optional): boot_delay (s), capacity (table: instance type -> max live
instances), default_capacity, preempt_after (s after launch for spot instances),
preempt_notice (s of advance notice, default 120), nvme_tmpfs_mb (size-limited /nvme),
namespaces (false: plain processes, /nvme exported as a path), offers (list of tables),
max_lifetime (s; instances created without a deadline stop after it, default 24 h),
group_spares (replacement nodes one multi-node group takes once its first nodes are
made; past it a replacement gets CapacityError, as a full cluster placement group
answers; default no limit).
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from cloudgpu_providers.configkeys import FLAG, count, seconds
from cloudgpu_providers.sim import instance as inst
from cloudgpu_providers.sim.offers import (
    NAME,
    OFFER_KEYS,
    OFFER_REQUIRED,
    configured_offers,
    default_offers,
)

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CapacityError, ConfigError, ProviderError
from cloudgpu.provider import (
    TAG_LEASE,
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
    SSHTarget,
)
from cloudgpu.spec.fields import Block, ListOf, Node

DEFAULT_MAX_LIFETIME_S = 24 * 3600

_STATES = {
    inst.PENDING: InstanceState.PENDING,
    inst.RUNNING: InstanceState.RUNNING,
    inst.PREEMPTED: InstanceState.PREEMPTED,
    inst.TERMINATED: InstanceState.TERMINATED,
}


class SimProvider(Provider):
    name: ClassVar[str] = NAME
    config_keys: ClassVar[Mapping[str, Node]] = {
        "enabled": FLAG, "boot_delay": seconds(), "default_capacity": count(0, 100_000),
        "capacity": Block(values=count(0, 100_000)), "preempt_after": seconds(),
        "preempt_notice": seconds(), "nvme_tmpfs_mb": count(0, 10_000_000),
        "namespaces": FLAG, "max_lifetime": seconds(365 * 86_400), "poll_s": seconds(600),
        "offers": ListOf(Block(OFFER_KEYS, required=OFFER_REQUIRED)),
        "group_spares": count(0, 100_000),
    }  # fmt: skip
    capabilities: ClassVar[Capabilities] = Capabilities(
        startup_s=5.0,  # create -> ready: an sshd on loopback
        spot=True,
        multi_node=True,  # instances share this host's loopback: they reach each other
        replace_node=True,  # a lost node's replacement joins its group (group_spares)
        preemption_notice=True,
        notice_poll_s=0.0,  # its notice is a local file: read it every watch poll
        billing_granularity_s=1,
        lease_tags=True,
    )

    # -- settings --------------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self.ctx.paths.data_dir / "sim"

    def _num(self, key: str, default: float) -> float:
        value = self.ctx.config.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigError(f"providers.sim.{key}: expected a number >= 0, got {value!r}")
        return float(value)

    def _capacity(self, instance_type: str) -> int:
        table = self.ctx.config.get("capacity", {})
        if not isinstance(table, Mapping):
            raise ConfigError("providers.sim.capacity: expected a table of instance type = count")
        value = table.get(instance_type, self._num("default_capacity", 8))
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ConfigError(f"providers.sim.capacity.{instance_type}: expected a count >= 0")
        return int(value)

    @cached_property
    def namespaced(self) -> bool:
        """Private namespaces need root and util-linux unshare; probe once."""
        wanted = self.ctx.config.get("namespaces", True)
        if not wanted or os.geteuid() != 0 or not shutil.which("unshare"):
            return False
        probe = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount", "--mount-proc", "true"],
            capture_output=True,
            check=False,
        )
        return probe.returncode == 0

    # -- discovery -------------------------------------------------------------------

    def availability(self) -> Availability:
        on_env = self.ctx.env.get("CLOUDGPU_SIM", "") not in ("", "0", "false")
        on_cfg = self.ctx.config.get("enabled") is True
        if not (on_env or on_cfg):
            return Availability(
                False, "opt-in: set [providers.sim] enabled = true or CLOUDGPU_SIM=1"
            )
        if not Path("/usr/sbin/sshd").exists() and not shutil.which("sshd"):
            return Availability(False, "needs OpenSSH's sshd (apt-get install openssh-server)")
        source = "env:CLOUDGPU_SIM" if on_env else "config:providers.sim.enabled"
        return Availability(True, f"simulated cloud on 127.0.0.1 (enabled by {source})", (source,))

    def offers(self) -> list[Offer]:
        return list(self._offers)

    @cached_property
    def _offers(self) -> list[Offer]:
        items = self.ctx.config.get("offers")
        if items is None:
            return default_offers(self.ctx.paths)
        if not isinstance(items, list):
            raise ConfigError(
                "providers.sim.offers: expected a list of tables ([[providers.sim.offers]])"
            )
        return configured_offers(items, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    # -- instances -------------------------------------------------------------------

    def create(self, request: CreateRequest) -> Instance:
        with inst.locked(self.root / "create.lock"):
            if request.idempotency_token:
                for d, st in self._records():
                    if st.get("idempotency_token") == request.idempotency_token:
                        return self._instance(d, st)
            self._check_capacity(request.offer)
            self._check_group(request)
            d = self.root / f"sim-{uuid.uuid4().hex[:12]}"
            d.mkdir(parents=True)
            try:
                return self._launch(d, request)
            except BaseException:
                shutil.rmtree(d, ignore_errors=True)
                raise

    def _check_capacity(self, offer: Offer) -> None:
        limit = self._capacity(offer.instance_type)
        used = sum(
            1
            for d, st in self._records()
            if st["offer"]["instance_type"] == offer.instance_type and self._live(d, st)
        )
        if used >= limit:
            raise CapacityError(
                f"no capacity for {offer.instance_type} ({offer.market}) in {offer.region}: "
                f"{used} of {limit} in use",
                provider=NAME,
                hint="try another instance type or region",
            )

    def _check_group(self, request: CreateRequest) -> None:
        """A node made into a group that had all its nodes already is a replacement:
        refused past ``group_spares`` of them."""
        spares = self.ctx.config.get("group_spares")
        if not request.group or spares is None:
            return
        made = sum(1 for _, st in self._records() if st.get("group") == request.group)
        if made >= request.num_nodes + int(self._num("group_spares", 0)):
            raise CapacityError(
                f"no capacity for {request.offer.instance_type} in placement group "
                f"{request.group}: {made - request.num_nodes} replacement(s) made, "
                f"group_spares {spares}",
                provider=NAME,
            )

    def _launch(self, d: Path, request: CreateRequest) -> Instance:
        for sub in ("nvme", "meta", "home"):
            (d / sub).mkdir()
        host_fp = inst.keygen(d / "host_ed25519", f"sim-host-{d.name}")
        key_file = self._authorize(d, request.ssh_public_key)
        namespaced = self.namespaced
        inside = inst.INSIDE if namespaced else str(d)
        nvme = "/nvme" if namespaced else str(d / "nvme")
        user = "root" if namespaced else getpass.getuser()
        port = inst.free_port()
        env = {
            "CLOUDGPU_NVME": nvme,
            "CLOUDGPU_INSTANCE_ID": d.name,
            "CLOUDGPU_PREEMPTION_NOTICE": f"{inside}/{inst.NOTICE}",
            # How the instance powers itself off (sshd's SetEnv value: no spaces).
            "CLOUDGPU_POWEROFF": f"{inside}/poweroff",
            # Its own home, as a fresh VM has: shells on the instance never run (or leave
            # locks in) the host user's dotfiles, e.g. a pyenv rehash lock killed mid-way.
            "HOME": f"{inside}/home",
        }
        (d / "sshd_config").write_text(inst.sshd_config(d, inside, port, user, env))
        poweroff = d / "poweroff"
        poweroff.write_text(f'#!/bin/sh\nexec kill -USR1 "$(cat {inside}/{inst.POWEROFF_PID})"\n')
        poweroff.chmod(0o755)
        state = self._record(d, request) | {
            "port": port,
            "user": user,
            "host_key_fingerprint": host_fp,
            "key_file": key_file,
            "nvme_mount": nvme,
            "namespaced": namespaced,
        }
        inst.write_state(d, state)
        pid = inst.spawn(d, inside, namespaced)
        state = inst.update_state(d, launcher_pid=pid, launcher_start=inst.start_time(pid)) or state
        return self._instance(d, state)

    @staticmethod
    def _authorize(d: Path, public_key: str) -> str | None:
        """Authorize ``public_key``, or a key pair made here when none is given (its
        private part's path is returned: the instance's SSH key file)."""
        pub = public_key.strip()
        key_file = None
        if not pub:
            inst.keygen(d / "client_ed25519", f"cloudgpu-{d.name}")
            key_file = str(d / "client_ed25519")
            pub = (d / "client_ed25519.pub").read_text().strip()
        (d / "authorized_keys").write_text(pub + "\n")
        return key_file

    def _record(self, d: Path, request: CreateRequest) -> dict[str, Any]:
        """The state record's fields that come from the request and the config."""
        preempt_after = self.ctx.config.get("preempt_after")
        return {
            "id": d.name,
            "name": request.name,
            "offer": request.offer.to_dict(),
            "market": request.offer.market,
            "tags": dict(request.tags),
            "group": request.group,
            "node_rank": request.node_rank,
            "state": inst.PENDING,
            "reason": "",
            "nvme_tmpfs_mb": int(self._num("nvme_tmpfs_mb", 0)),
            "created_at": self.ctx.clock(),
            "boot_delay": self._num("boot_delay", 0),
            # A backstop for instances nobody will ever terminate (a crashed test): like
            # the expiry tag, but enforced by the instance itself.
            "deadline": request.deadline
            or self.ctx.clock() + self._num("max_lifetime", DEFAULT_MAX_LIFETIME_S),
            "preempt_after": None if preempt_after is None else self._num("preempt_after", 0),
            "preempt_notice": self._num("preempt_notice", 120),
            "idempotency_token": request.idempotency_token,
        }

    def describe(self, instance_id: str) -> Instance:
        d = self._dir(instance_id)
        st = inst.read_state(d) if d else None
        if d is None or st is None:
            return Instance(id=instance_id, provider=NAME, state=InstanceState.TERMINATED)
        if st["state"] in inst.LIVE and not self._live(d, st):
            # The process tree vanished without recording why (e.g. killed from outside).
            st = (
                inst.update_state(
                    d, state=inst.TERMINATED, terminated_at=time.time(), reason="instance vanished"
                )
                or st
            )
        return self._instance(d, st)

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        out = []
        for d, _ in self._records():
            found = self.describe(d.name)
            if not found.state.is_gone and all(found.tags.get(k) == v for k, v in tags.items()):
                out.append(found)
        return sorted(out, key=lambda i: (i.launched_at or 0, i.id))

    def terminate(self, instance_id: str) -> None:
        d = self._dir(instance_id)
        st = inst.read_state(d) if d else None
        if d is None or st is None:
            return
        pid, started = self._launcher(d, st)
        inst.kill(pid, d, bool(st.get("namespaced")), st.get("port"), started)
        with inst.locked(d / "state.lock"):
            cur = inst.read_state(d) or st
            if cur["state"] in inst.LIVE:
                cur.update(state=inst.TERMINATED, terminated_at=time.time(), reason="terminated")
                inst.write_state(d, cur)
        inst.wipe(d)

    def renew_lease(self, instance: Instance, until: float) -> bool:
        d = self._dir(instance.id)
        st = inst.read_state(d) if d else None
        if d is None or st is None:
            return False
        return inst.update_state(d, tags={**st["tags"], TAG_LEASE: str(int(until))}) is not None

    def preemption_notice(self, instance: Instance) -> float | None:
        d = self._dir(instance.id)
        st = inst.read_state(d) if d else None
        if st is None or not st.get("notice_at"):
            return None
        return float(st["preempt_at"])

    def preempt(self, instance_id: str, notice: float = 0.0) -> None:
        """Simulate a spot interruption now: the notice appears at once, the instance is
        preempted ``notice`` seconds later (tests and demos; not part of the contract)."""
        d = self._dir(instance_id)
        if (
            d is None
            or inst.update_state(d, preempt_at=time.time() + notice, preempt_notice=notice) is None
        ):
            raise ProviderError(f"no sim instance {instance_id}", provider=NAME)

    # -- helpers ---------------------------------------------------------------------

    def _dir(self, instance_id: str) -> Path | None:
        if not instance_id.startswith("sim-") or "/" in instance_id:
            return None
        d = self.root / instance_id
        return d if d.is_dir() else None

    def _records(self) -> list[tuple[Path, dict[str, Any]]]:
        if not self.root.is_dir():
            return []
        out = []
        for d in sorted(self.root.iterdir()):
            st = inst.read_state(d) if d.is_dir() else None
            if st is not None:
                out.append((d, st))
        return out

    def _live(self, d: Path, st: dict[str, Any]) -> bool:
        if st["state"] not in inst.LIVE:
            return False
        pid, started = self._launcher(d, st)
        if pid is None:  # create() has not spawned it yet
            return time.time() - float(st["created_at"]) < 30
        return inst.alive(pid, d, started)

    def _launcher(self, d: Path, st: dict[str, Any]) -> tuple[int | None, str | None]:
        """The launcher's pid and start time; from its own pid file when the client
        died between spawning it and recording it."""
        if st.get("launcher_pid") is not None:
            return int(st["launcher_pid"]), st.get("launcher_start")
        return inst.launcher_pid(d), None

    def _instance(self, d: Path, st: dict[str, Any]) -> Instance:
        offer = st["offer"]
        return Instance(
            id=st["id"],
            provider=NAME,
            state=_STATES.get(st["state"], InstanceState.UNKNOWN),
            instance_type=offer["instance_type"],
            region=offer["region"],
            zone=offer["zone"],
            market=offer["market"],
            ssh=SSHTarget(
                host="127.0.0.1",
                port=int(st["port"]),
                user=st["user"],
                host_key_fingerprints=(st["host_key_fingerprint"],),
                key_file=st.get("key_file"),
            ),
            tags=dict(st["tags"]),
            price_per_hour=float(offer["price_per_hour"]),
            launched_at=st.get("launched_at"),
            ended_at=st.get("terminated_at"),
            nvme_mount=st["nvme_mount"],
            private_address="127.0.0.1",
            extra={
                "terminated_at": st.get("terminated_at"),
                "reason": st.get("reason", ""),
                "preempt_at": st.get("preempt_at"),
                "dir": str(d),
                "group": st.get("group", ""),
            },
        )
