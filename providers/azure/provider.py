"""AzureProvider: GPU VMs on Azure through Azure Resource Manager.

Config (``[providers.azure]``, all optional): ``subscription_id``, ``image`` (URN or id,
see bodies.py), ``admin_user`` (default azureuser), ``disk_sku``, ``ssh_cidr`` (default:
the caller's public address /32, looked up at ``ip_lookup_url``), ``retail_prices_url``,
``arm_endpoint`` and ``ca_bundle`` (a private ARM endpoint, or the tests' loopback one),
``polling_interval``, ``retry_total``, ``create_timeout_s`` and ``delete_timeout_s``
(default 1800 each), ``notice_poll_s`` (default 10), ``imds_endpoint`` (where the
VM's watcher reads Scheduled Events; tests), ``nvme_mount`` (default /nvme),
``auto_shutdown`` (default true), ``ssh_port`` (default 22, for images whose sshd
listens elsewhere; the NSG opens it), ``managed_identity``, ``enabled`` (false switches
the provider off).

Credentials come from the standard chain (auth.py) or, for tests and embedding, from a
credential object passed to the constructor. The Azure SDK is imported lazily, only when
a method talks to ARM; availability() makes no network call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

from cloudgpu_providers import notices
from cloudgpu_providers.azure import bodies, deploy, retail, sizes
from cloudgpu_providers.azure.arm import (
    ArmClients,
    ArmSettings,
    azure_errors,
    error_code,
    make_clients,
)
from cloudgpu_providers.azure.auth import detect, make_credential
from cloudgpu_providers.callerip import lookup_cidr, normalized_cidr
from cloudgpu_providers.configkeys import FLAG, PORT, TEXT, URL, count, seconds
from cloudgpu_providers.extras import missing_sdk

from cloudgpu import sshkeys
from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import (
    AuthError,
    CatalogError,
    ConfigError,
    NotFoundError,
    ProviderError,
    TransientError,
)
from cloudgpu.provider import (
    TAG_JOB,
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    NoticeWatcher,
    Provider,
    ProviderContext,
    SSHTarget,
)
from cloudgpu.spec.fields import Node, either

TEXT_OR_FLAG = either("a client id, or true", TEXT, FLAG)

# Our own tags on the group, next to the job's: what describe() needs after a restart.
TAG_VM = "cloudgpu-azure-vm"
TAG_MARKET = "cloudgpu-azure-market"
TAG_PRICE = "cloudgpu-azure-price"
GROUP_PREFIX = "cloudgpu-"
SDK_MODULES = ("azure.identity", "azure.mgmt.compute", "azure.mgmt.network", "azure.mgmt.resource")
DEFAULT_IP_LOOKUP = "https://api.ipify.org"


class AzureProvider(Provider):
    name = "azure"
    config_keys: ClassVar[Mapping[str, Node]] = {
        "enabled": FLAG, "subscription_id": TEXT, "image": TEXT, "admin_user": TEXT,
        "disk_sku": TEXT, "ssh_cidr": TEXT, "ip_lookup_url": URL, "retail_prices_url": URL,
        "arm_endpoint": URL, "ca_bundle": TEXT, "polling_interval": seconds(600),
        "retry_total": count(0, 100), "create_timeout_s": seconds(),
        "delete_timeout_s": seconds(), "notice_poll_s": seconds(3600),
        "auto_shutdown": FLAG, "ssh_port": PORT, "managed_identity": TEXT_OR_FLAG,
        "imds_endpoint": URL, "nvme_mount": TEXT,
    }  # fmt: skip
    capabilities = Capabilities(
        startup_s=360.0,  # create -> ready: a resource group, its network and a VM
        spot=True,
        preemption_notice=True,  # Scheduled Events "Preempt", read by watchers/azure.sh
        # "We charge per full minute your VM runs" (azure.microsoft.com knowledge center,
        # read 2026-12-01).
        billing_granularity_s=60,
        minimum_billed_s=60,
        disposable=True,  # a fresh VM per job, deleted with its group
    )

    def __init__(self, ctx: ProviderContext, *, credential: Any = None) -> None:
        super().__init__(ctx)
        self._credential = credential
        self._clients: ArmClients | None = None
        self.unpriced_sizes: list[str] = []  # GPU sizes priced but with no known spec

    # -- discovery -------------------------------------------------------------------

    def availability(self) -> Availability:
        det = detect(self.ctx.env, self.ctx.config)
        if self.ctx.config.get("enabled") is False:
            return Availability(False, "disabled in config ([providers.azure] enabled = false)")
        missing = missing_sdk(SDK_MODULES, "azure")
        if missing is not None:
            return missing
        label = "credential passed in" if self._credential is not None else None
        label = label or (det.source.label if det.source else None)
        if label is None:
            return Availability(
                False,
                "no Azure credentials found (service principal env vars, workload identity, "
                "managed identity or an `az login`)",
                det.looked_at,
            )
        if not det.subscription_id:
            return Availability(
                False,
                f"Azure credentials from {label} but no subscription: set subscription_id in "
                "[providers.azure] or AZURE_SUBSCRIPTION_ID",
                det.looked_at,
            )
        return Availability(
            True,
            f"credentials from {label}, subscription from {det.subscription_from}",
            (label, det.subscription_from),
        )

    def check(self) -> Availability:
        av = self.availability()
        if not av.enabled:
            return av
        try:
            with azure_errors("check"):
                groups = self._arm().resource.resource_groups.list(top=1)
                next(iter(groups), None)
        except ProviderError as exc:
            return Availability(False, f"{av.reason}; ARM refused: {exc}", av.sources)
        return Availability(True, f"{av.reason}; resource_groups.list answered", av.sources)

    def _arm(self) -> ArmClients:
        if self._clients is None:
            det = detect(self.ctx.env, self.ctx.config)
            credential = self._credential
            if credential is None:
                if det.source is None:
                    raise AuthError(
                        "no Azure credentials found",
                        provider="azure",
                        hint="run `cloudgpu check` to see what was looked at",
                    )
                credential = make_credential(det.source, self.ctx.env)
            if not det.subscription_id:
                raise ConfigError(
                    "providers.azure.subscription_id: no Azure subscription set",
                    hint="set it in config.toml or AZURE_SUBSCRIPTION_ID",
                )
            settings = _settings(self.ctx.config)
            self._clients = make_clients(credential, det.subscription_id, settings)
        return self._clients

    # -- offers ----------------------------------------------------------------------

    def fetch_offers(self) -> list[Offer]:
        """Retail Prices API rows joined with size specs: resource_skus.list when
        credentials exist (which also drops sizes the subscription may not use in a
        region), else the bundled sizes.csv."""
        url = str(self.ctx.config.get("retail_prices_url") or retail.DEFAULT_URL)
        client = retail.RetailClient(url, sleep=self.ctx.sleep)
        table = sizes.bundled_sizes()
        restricted: set[tuple[str, str]] = set()
        if self.availability().enabled:
            specs, restricted = self._sku_specs(table)
            table = {**table, **specs}
        offers, self.unpriced_sizes = retail.build_offers(
            client.items(), table, _canonicalizer(), restricted=restricted
        )
        return offers

    def _sku_specs(
        self, bundled: Mapping[str, sizes.SizeSpec]
    ) -> tuple[dict[str, sizes.SizeSpec], set[tuple[str, str]]]:
        """GPU size specs from resource_skus.list, and the (size, region) pairs restricted
        for this subscription."""
        out: dict[str, sizes.SizeSpec] = {}
        restricted: set[tuple[str, str]] = set()
        with azure_errors("resource_skus.list"):
            for sku in self._arm().compute.resource_skus.list():
                if sku.get("resourceType") != "virtualMachines":
                    continue
                name = str(sku.get("name"))
                caps = {
                    str(c.get("name")): str(c.get("value")) for c in sku.get("capabilities") or []
                }
                spec = sizes.spec_from_capabilities(name, caps)
                if spec is None:
                    continue
                known = bundled.get(spec.name.lower())
                if known is not None:  # the API does not report local NVMe; the docs do
                    spec = replace(
                        spec, nvme_count=known.nvme_count, nvme_size_gb=known.nvme_size_gb
                    )
                out[spec.name.lower()] = spec
                restricted |= {(name.lower(), region) for region in sizes.restricted_regions(sku)}
        return out, restricted

    # -- instances -------------------------------------------------------------------

    def create(self, request: CreateRequest) -> Instance:
        offer, cfg = request.offer, self.ctx.config
        group = GROUP_PREFIX + request.name
        image = str(request.image or cfg.get("image") or bodies.DEFAULT_IMAGE)
        bodies.image_reference(image)  # bad input fails before anything is made
        cidr = self._ssh_cidr(request)
        key_file: str | None = None
        public_key = request.ssh_public_key.strip()
        if not public_key:
            path, public_key = sshkeys.key_pair(
                self.ctx.paths.keys_dir, f"azure-{group}", f"cloudgpu-{group}"
            )
            key_file = str(path)
        tags = {
            **request.tags,
            TAG_VM: request.name,
            TAG_MARKET: offer.market,
            TAG_PRICE: f"{offer.price_per_hour:.6g}",
        }
        plan = bodies.VmPlan(
            group=group,
            vm_name=request.name,
            location=offer.region,
            size=offer.instance_type,
            spot=offer.market == "spot",
            ssh_public_key=public_key,
            ssh_cidr=cidr,
            tags=tags,
            zone=offer.zone,
            image=image,
            disk_gb=int(request.disk_gb),
            disk_sku=str(cfg.get("disk_sku", "Premium_LRS")),
            admin_user=str(cfg.get("admin_user", "azureuser")),
            user_data=request.user_data,
            ssh_port=self._ssh_port(),
        )
        deadline = request.deadline if cfg.get("auto_shutdown", True) else None
        created = deploy.create_group(
            self._arm(),
            plan,
            deadline,
            self.ctx.clock(),
            _timeout(cfg, "create_timeout_s"),
            _timeout(cfg, "delete_timeout_s"),
        )
        return self._instance(group, tags, created.vm, created.public_ip, key_file)

    def _ssh_cidr(self, request: CreateRequest) -> str:
        raw = self.ctx.config.get("ssh_cidr")
        if raw:
            try:
                return normalized_cidr(raw)
            except ValueError as exc:
                raise ConfigError(
                    f"providers.azure.ssh_cidr: '{raw}' is not a CIDR", hint="e.g. 203.0.113.7/32"
                ) from exc
        url = str(self.ctx.config.get("ip_lookup_url") or DEFAULT_IP_LOOKUP)
        return caller_cidr(url)

    def _ssh_port(self) -> int:
        raw = self.ctx.config.get("ssh_port", 22)
        if not isinstance(raw, int) or isinstance(raw, bool) or not 0 < raw < 65536:
            raise ConfigError(f"providers.azure.ssh_port: expected a port number, got {raw!r}")
        return raw

    def describe(self, instance_id: str) -> Instance:
        from azure.core.exceptions import ResourceNotFoundError  # lazy: heavy SDK

        arm = self._arm()
        try:
            with azure_errors(f"describe {instance_id}"):
                group = arm.resource.resource_groups.get(instance_id)
        except NotFoundError:
            return Instance(instance_id, self.name, InstanceState.TERMINATED)
        tags = dict(group.get("tags") or {})
        vm_name = tags.get(TAG_VM) or instance_id.removeprefix(GROUP_PREFIX)
        vm: Any = None
        address = ""
        with azure_errors(f"describe {instance_id}"):
            try:
                vm = arm.compute.virtual_machines.get(instance_id, vm_name, expand="instanceView")
                ip = arm.network.public_ip_addresses.get(instance_id, bodies.IP)
                address = str((ip.get("properties") or {}).get("ipAddress") or "")
            except ResourceNotFoundError:
                pass
        key = sshkeys.key_file(self.ctx.paths.keys_dir, f"azure-{instance_id}")
        inst = self._instance(instance_id, tags, vm, address, str(key) if key.exists() else None)
        if (group.get("properties") or {}).get("provisioningState") == "Deleting":
            return _with_state(inst, InstanceState.STOPPING)
        return inst

    def preemption_notice(self, instance: Instance) -> float | None:
        """A Spot VM evicted with evictionPolicy Delete vanishes from its group (or is
        seen Deleting) before the lifecycle's describe() would notice; the 30-second
        Scheduled Events notice itself is only visible on the VM (:meth:`notice_watcher`).
        The lifecycle asks at most every ``notice_poll_s`` (default 10) seconds."""
        from azure.core.exceptions import ResourceNotFoundError  # lazy: heavy SDK

        if instance.market != "spot":
            return None
        now = self.ctx.clock()
        vm_name = instance.tags.get(TAG_VM) or instance.id.removeprefix(GROUP_PREFIX)
        with azure_errors(f"preemption check {instance.id}"):
            try:
                vm = self._arm().compute.virtual_machines.get(instance.id, vm_name)
            except ResourceNotFoundError as exc:
                # The VM gone from a group that is still there: evicted. The whole group
                # gone: terminated by us (a teardown), which is no preemption.
                return None if error_code(exc)[0] == "ResourceGroupNotFound" else now
        state = (vm.get("properties") or {}).get("provisioningState")
        return now if state == "Deleting" else None

    def notice_watcher(self, instance: Instance) -> NoticeWatcher | None:
        """templates/watchers/azure.sh on Spot VMs: Scheduled Events ``Preempt`` for this
        VM, acknowledged (StartRequests) only after the checkpoint flush."""
        if instance.market != "spot":
            return None
        vm = instance.tags.get(TAG_VM) or instance.id.removeprefix(GROUP_PREFIX)
        imds = notices.endpoint(self.ctx.config, "imds_endpoint", self.name)
        return notices.watcher(
            "azure", instance, imds, {"IMDS_ENDPOINT": imds, "CLOUDGPU_VM_NAME": vm}
        )

    def _instance(
        self, group: str, tags: Mapping[str, str], vm: Any, address: str, key_file: str | None
    ) -> Instance:
        spot = tags.get(TAG_MARKET) == "spot"
        state = deploy.vm_state(vm, spot)
        props = (vm.get("properties") or {}) if vm is not None else {}
        user = str(
            (props.get("osProfile") or {}).get("adminUsername")
            or self.ctx.config.get("admin_user", "azureuser")
        )
        port = self._ssh_port()
        ssh = SSHTarget(host=address, port=port, user=user, key_file=key_file) if address else None
        zones = (vm.get("zones") or []) if vm is not None else []
        return Instance(
            id=group,
            provider=self.name,
            state=state,
            instance_type=str((props.get("hardwareProfile") or {}).get("vmSize") or ""),
            region=str(vm.get("location") or "") if vm is not None else "",
            zone=str(zones[0]) if zones else "",
            market="spot" if spot else "on_demand",
            ssh=ssh,
            tags=dict(tags),
            price_per_hour=_float(tags.get(TAG_PRICE)),
            launched_at=deploy.created_at(vm) if vm is not None else None,
            nvme_mount=str(self.ctx.config.get("nvme_mount") or "/nvme"),
            extra={"resource_group": group},
        )

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        """Every resource group carrying ``tags`` that is not being deleted, whatever
        state its VM is in: a group whose VM is gone still holds resources to remove."""
        items = list(tags.items())
        k, v = items[0] if items else (TAG_JOB, None)
        flt = f"tagName eq '{_q(k)}'" + (f" and tagValue eq '{_q(v)}'" if v is not None else "")
        with azure_errors("list resource groups"):
            groups = list(self._arm().resource.resource_groups.list(filter=flt))
        out = []
        for g in groups:
            gtags = g.get("tags") or {}
            if any(gtags.get(key) != val for key, val in items):
                continue
            if (g.get("properties") or {}).get("provisioningState") == "Deleting":
                continue
            out.append(self.describe(str(g["name"])))
        return out

    def terminate(self, instance_id: str) -> None:
        timeout = _timeout(self.ctx.config, "delete_timeout_s")
        problem = deploy.delete_group(self._arm(), instance_id, timeout)
        if problem:
            raise TransientError(
                problem,
                provider="azure",
                hint="retried by the lifecycle; `cloudgpu down --orphans` too",
            )
        sshkeys.remove_key_pair(self.ctx.paths.keys_dir, f"azure-{instance_id}")


def caller_cidr(url: str, timeout_s: float = 10.0) -> str:
    """This machine's public IPv4/IPv6 address as a single-host CIDR, asked of ``url``."""
    try:
        return lookup_cidr(url, timeout_s)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"providers.azure.ssh_cidr: not set, and this machine's public address could "
            f"not be learned from {url}",
            hint='set ssh_cidr in [providers.azure], e.g. ssh_cidr = "203.0.113.7/32"',
        ) from exc


def _settings(cfg: Mapping[str, Any]) -> ArmSettings:
    try:
        return ArmSettings.from_config(cfg)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            "providers.azure: polling_interval and retry_total must be numbers"
        ) from exc


def _timeout(cfg: Mapping[str, Any], key: str) -> float:
    try:
        value = float(cfg.get(key, 1800))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"providers.azure.{key}: expected seconds") from exc
    if value <= 0:
        raise ConfigError(f"providers.azure.{key}: expected seconds > 0")
    return value


def _canonicalizer() -> retail.Canonicalize:
    registry = load_registry()

    def canonical(raw: str, memory_gb: float) -> str | None:
        try:
            found = sizes.size_gpu(raw) or registry.canonical(raw, memory_gb)
        except CatalogError:
            return None
        return found or None

    return canonical


def _with_state(inst: Instance, state: InstanceState) -> Instance:
    return replace(inst, state=state)


def _float(text: str | None) -> float:
    try:
        return float(text) if text else 0.0
    except ValueError:
        return 0.0


def _q(value: str) -> str:
    return value.replace("'", "''")  # OData string literal escaping
