"""The `ssh` provider: machines the user already owns, reached over SSH.

Config (config.toml)::

    [providers.ssh]
    hosts = [
      { name = "box1", host = "10.0.0.5", port = 22, user = "ubuntu",
        key = "~/.ssh/id_ed25519", gpus = "A100-80GB:2", nvme = "/nvme",
        price_per_hour = 0.0, host_key = "SHA256:..." },
    ]

Each host is one offer. "Creating" an instance reserves the host for one job (a
reservation file under the data dir; a busy host is a capacity error, so the lifecycle
moves on); terminating stops the job's processes on the host and releases it. Nothing
is installed or powered off. Host keys: ``host_key`` pins a fingerprint; otherwise the
first connection pins it in cloudgpu's known_hosts with the fingerprint shown, and a
changed key is refused (cloudgpu.remote.hostkeys). GPUs, vCPUs and RAM not declared are
probed with nvidia-smi by `cloudgpu check --verify` and cached.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import paramiko

from cloudgpu import atomicfile
from cloudgpu.builtin import hostinfo
from cloudgpu.builtin.procs import kill_script
from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer, iso_utc
from cloudgpu.errors import CapacityError, CloudGPUError, ConfigError, NotFoundError
from cloudgpu.provider import (
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    Provider,
    SSHTarget,
)
from cloudgpu.remote import connect
from cloudgpu.remote.hostkeys import host_label
from cloudgpu.spec.fields import Block, ListOf, Node, number, port, text

_GPUS_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9._-]*)\s*(?::\s*(\d+))?\s*$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
PROBE = (
    "nproc; awk '/MemTotal/ {print $2}' /proc/meminfo; "
    + hostinfo.NVIDIA_SMI_QUERY
    + (" 2>/dev/null || true")
)
DEFAULT_KEYS = ("id_ed25519", "id_ecdsa", "id_rsa")
_TEXT = text(max_len=4096)
_AMOUNT = number("a size or count", 0, 1e7, lo_open=False)
# One `hosts = [{...}]` entry of [providers.ssh], checked when config.toml is read.
HOST_KEYS: dict[str, Node] = {
    "name": _TEXT, "host": _TEXT, "user": _TEXT, "key": _TEXT, "gpus": _TEXT, "nvme": _TEXT,
    "host_key": _TEXT, "port": port(),
    "price_per_hour": number("USD per hour", 0, 10_000, lo_open=False),
    **dict.fromkeys(("gpu_memory_gb", "vcpus", "memory_gb", "nvme_gb"), _AMOUNT),
}  # fmt: skip
_HOST_KEYS = frozenset(HOST_KEYS)


@dataclass(frozen=True)
class Host:
    name: str
    host: str
    port: int = 22
    user: str = "root"
    key: str | None = None
    gpus: str = ""  # "A100-80GB:2"; empty: probed
    gpu_memory_gb: float | None = None
    vcpus: float | None = None
    memory_gb: float | None = None
    nvme: str = "/nvme"
    nvme_gb: float = 0.0
    price_per_hour: float = 0.0
    host_key: str = ""


def parse_hosts(config: Mapping[str, Any]) -> list[Host]:
    raw = config.get("hosts", [])
    if not isinstance(raw, list):
        raise ConfigError("providers.ssh.hosts: expected a list of { name, host, ... } tables")
    hosts = []
    for i, item in enumerate(raw):
        where = f"providers.ssh.hosts[{i}]"
        if not isinstance(item, dict) or "host" not in item:
            raise ConfigError(f'{where}: expected a table with at least host = "..."')
        unknown = set(item) - _HOST_KEYS
        if unknown:
            raise ConfigError(
                f"{where}: unknown key(s) {', '.join(sorted(unknown))}; "
                f"expected: {', '.join(sorted(_HOST_KEYS))}"
            )
        item = {"name": str(item["host"]).replace(":", "-"), **item}
        try:
            host = Host(**item)
        except TypeError as exc:
            raise ConfigError(f"{where}: {exc}") from exc
        if not _NAME_RE.match(host.name):
            raise ConfigError(f"{where}.name: expected letters, digits, '.', '_' or '-'")
        if host.gpus and not _GPUS_RE.match(host.gpus):
            raise ConfigError(f'{where}.gpus: expected a GPU like "A100-80GB:2"')
        hosts.append(host)
    return hosts


class SSHProvider(Provider):
    name: ClassVar[str] = "ssh"
    config_keys: ClassVar[Mapping[str, Node]] = {"hosts": ListOf(Block(HOST_KEYS, ("host",)))}
    capabilities: ClassVar[Capabilities] = Capabilities(
        startup_s=30.0,  # create -> ready: an SSH connection and a host check
    )

    @property
    def state_dir(self) -> Path:
        return self.ctx.paths.data_dir / "ssh"

    @property
    def known_hosts(self) -> Path:
        return self.ctx.paths.data_dir / "known_hosts"

    def hosts(self) -> list[Host]:
        return parse_hosts(self.ctx.config)

    def host(self, name: str) -> Host:
        for h in self.hosts():
            if h.name == name:
                return h
        raise NotFoundError(f"no host '{name}' in [providers.ssh] hosts", provider=self.name)

    def availability(self) -> Availability:
        hosts = self.hosts()
        if not hosts:
            return Availability(False, "no hosts configured ([providers.ssh] hosts = [...])")
        return Availability(True, f"{len(hosts)} host(s) configured", ("config:providers.ssh",))

    def check(self) -> Availability:
        """Reach every host once, probe what it has, and cache it for offers()."""
        reached: list[str] = []
        failed: list[str] = []
        pinned: list[str] = []
        for h in self.hosts():
            try:
                self._probe(h, pinned)
                reached.append(h.name)
            except CloudGPUError as exc:
                failed.append(f"{h.name}: {exc}")
        if not reached:
            return Availability(False, "; ".join(failed) or "no hosts configured")
        # A key pinned on first use is said out loud, never accepted silently.
        reason = "; ".join([f"reached {', '.join(reached)}", *pinned, *failed])
        return Availability(True, reason)

    def _probe(self, h: Host, pinned: list[str]) -> dict[str, Any]:
        machine = connect(
            self._target_instance(h, "probe"),
            known_hosts=self.known_hosts,
            timeout=20,
            use_openssh=False,
            on_new_host_key=lambda label, fp: pinned.append(f"pinned {label} {fp}"),
        )
        out: list[bytes] = []
        try:
            machine.run(PROBE, on_stdout=out.append, timeout=60)
        finally:
            machine.close()
        lines = b"".join(out).decode(errors="replace").splitlines()
        gpu = hostinfo.parse_nvidia_smi("\n".join(lines[2:]))
        facts = {
            "vcpus": float(lines[0]) if lines and lines[0].strip().isdigit() else None,
            "memory_gb": round(int(lines[1]) * 1024 / 1e9, 1)
            if len(lines) > 1 and lines[1].strip().isdigit()
            else None,
            "gpu": gpu.name,
            "gpu_count": gpu.count,
            "gpu_memory_gb": gpu.memory_gb,
        }
        self.state_dir.mkdir(parents=True, exist_ok=True)
        atomicfile.write_json(self.state_dir / f"probe-{h.name}.json", facts)
        return facts

    def offers(self) -> list[Offer]:
        now = iso_utc(self.ctx.clock())
        return [self._offer(h, now) for h in self.hosts()]

    def _offer(self, h: Host, observed: str) -> Offer:
        probe = atomicfile.read_json(self.state_dir / f"probe-{h.name}.json") or {}
        name, count, mem = (
            probe.get("gpu", ""),
            int(probe.get("gpu_count", 0)),
            float(probe.get("gpu_memory_gb", 0.0)),
        )
        if h.gpus:
            m = _GPUS_RE.match(h.gpus)
            assert m is not None  # validated in parse_hosts
            name, count = _canonical_gpu(m.group(1)), int(m.group(2) or 1)
            mem = h.gpu_memory_gb or _gpu_memory(name)
        return Offer(
            provider=self.name,
            instance_type=h.name,
            region="ssh",
            zone="",
            market="on_demand",
            gpu=name,
            gpu_count=count,
            gpu_memory_gb=mem,
            vcpus=h.vcpus or float(probe.get("vcpus") or 1),
            memory_gb=h.memory_gb or float(probe.get("memory_gb") or 1),
            price_per_hour=h.price_per_hour,
            nvme_count=1 if h.nvme_gb else 0,
            nvme_size_gb=h.nvme_gb,
            price_source="config:providers.ssh",
            observed_at=observed,
        )

    # -- instances: reservations -----------------------------------------------------

    def _reservation(self, host: str) -> Path:
        return self.state_dir / "reservations" / f"{host}.json"

    def create(self, request: CreateRequest) -> Instance:
        h = self.host(request.offer.instance_type)
        path = self._reservation(h.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "id": f"ssh-{h.name}-{os.urandom(4).hex()}",
            "host": h.name,
            "tags": dict(request.tags),
            "token": request.idempotency_token,
            "launched_at": self.ctx.clock(),
            "price_per_hour": h.price_per_hour,
        }
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            held = atomicfile.read_json(path) or {}
            if request.idempotency_token and held.get("token") == request.idempotency_token:
                return self._instance(h, held)
            job = held.get("tags", {}).get("cloudgpu-job", "another job")
            raise CapacityError(f"host {h.name} is busy with {job}", provider=self.name) from None
        with os.fdopen(fd, "w") as fh:
            json.dump(record, fh)
        return self._instance(h, record)

    def _target_instance(self, h: Host, iid: str) -> Instance:
        return Instance(
            iid, self.name, InstanceState.RUNNING, h.name, ssh=self._target(h), nvme_mount=h.nvme
        )

    def _target(self, h: Host) -> SSHTarget:
        return SSHTarget(
            host=h.host,
            port=h.port,
            user=h.user,
            host_key_fingerprints=(h.host_key,) if h.host_key else (),
            key_file=self._key_file(h),
        )

    def _key_file(self, h: Host) -> str:
        if h.key:
            return str(Path(h.key).expanduser())
        home = Path(self.ctx.env.get("HOME") or Path.home()) / ".ssh"
        for name in DEFAULT_KEYS:
            if (home / name).exists():
                return str(home / name)
        raise ConfigError(
            f'providers.ssh host {h.name}: no key = "..." and no ~/.ssh/id_* key found',
            hint='add key = "~/.ssh/your_key" to the host entry',
        )

    def _instance(self, h: Host, record: Mapping[str, Any]) -> Instance:
        return Instance(
            id=str(record["id"]),
            provider=self.name,
            state=InstanceState.RUNNING,
            instance_type=h.name,
            region="ssh",
            ssh=self._target(h),
            tags=dict(record.get("tags", {})),
            price_per_hour=h.price_per_hour,
            launched_at=record.get("launched_at"),
            nvme_mount=h.nvme,
        )

    def _held(self) -> list[tuple[Host, dict[str, Any]]]:
        out = []
        for h in self.hosts():
            record = atomicfile.read_json(self._reservation(h.name))
            if record is not None:
                out.append((h, record))
        return out

    def describe(self, instance_id: str) -> Instance:
        for h, record in self._held():
            if record.get("id") == instance_id:
                return self._instance(h, record)
        return Instance(instance_id, self.name, InstanceState.TERMINATED)

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        return [
            self._instance(h, r)
            for h, r in self._held()
            if all(r.get("tags", {}).get(k) == v for k, v in tags.items())
        ]

    def terminate(self, instance_id: str) -> None:
        for h, record in self._held():
            if record.get("id") == instance_id:
                self._stop_processes(h, instance_id)
                self._reservation(h.name).unlink(missing_ok=True)

    def _stop_processes(self, h: Host, instance_id: str) -> None:
        # Best effort: an unreachable host cannot run the job either; the reservation is
        # released regardless so the user is never locked out of their own machine. A
        # host never connected to (key not pinned yet) cannot have started the job.
        if not _pinned(self.known_hosts, h):
            return
        try:
            machine = connect(
                self._target_instance(h, instance_id),
                known_hosts=self.known_hosts,
                timeout=10,
                use_openssh=False,
            )
        except CloudGPUError:
            return
        try:
            machine.run(kill_script(instance_id), timeout=30)
        except CloudGPUError:
            pass
        finally:
            machine.close()


def _canonical_gpu(name: str) -> str:
    """The registry's name for a declared GPU; a family ("A100-80GB") becomes its first
    variant, so plans can match it (declare the exact model to be exact)."""
    registry = load_registry()
    spec = registry.spec(name)
    if spec is not None:
        return spec.name
    try:
        variants = sorted(registry.matches(name))
    except CloudGPUError:
        return name  # unknown to the registry: kept as declared
    return variants[0] if variants else name


def _gpu_memory(name: str) -> float:
    """Per-GPU memory of a declared GPU name or family ("A100-80GB": its variants agree)."""
    registry = load_registry()
    spec = registry.spec(name)
    if spec is None:
        try:
            variants = sorted(registry.matches(name))
        except CloudGPUError:
            return 0.0
        spec = registry.spec(variants[0]) if variants else None
    return spec.memory_gb if spec else 0.0


def _pinned(known_hosts: Path, h: Host) -> bool:
    if not known_hosts.exists():
        return False
    try:
        keys = paramiko.HostKeys(str(known_hosts))
    except (OSError, paramiko.SSHException):
        return False
    return keys.lookup(host_label(h.host, h.port)) is not None
