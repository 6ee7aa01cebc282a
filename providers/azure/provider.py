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

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

from cloudgpu_providers import notices
from cloudgpu_providers.azure import bodies, config, deploy, instances, nodes, retail, sizes
from cloudgpu_providers.azure.arm import (
    ArmClients,
    azure_errors,
    make_clients,
)
from cloudgpu_providers.azure.auth import detect, make_credential
from cloudgpu_providers.configkeys import FLAG, PORT, TEXT, URL, count, seconds
from cloudgpu_providers.extras import missing_sdk

from cloudgpu import sshkeys
from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import (
    AuthError,
    CloudGPUError,
    ConfigError,
    NotFoundError,
    ProviderError,
    TransientError,
)
from cloudgpu.provider import (
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    Leftover,
    NoticeWatcher,
    Provider,
    ProviderContext,
)
from cloudgpu.spec.fields import Node, either

TEXT_OR_FLAG = either("a client id, or true", TEXT, FLAG)

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
        multi_node=True,  # one group, network and proximity placement group (nodes.py)
        replace_node=True,  # a lost node's replacement joins the live group (nodes.join)
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
            settings = config.arm_settings(self.ctx.config)
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
            with azure_errors("resource_skus.list"):
                specs, restricted = sizes.sku_specs(self._arm().compute.resource_skus.list(), table)
            table = {**table, **specs}
        offers, self.unpriced_sizes = retail.build_offers(
            client.items(), table, config.canonicalizer(), restricted=restricted
        )
        return offers

    # -- instances -------------------------------------------------------------------

    def create(self, request: CreateRequest) -> Instance:
        if request.group and request.num_nodes > 1:
            return self._join(request)
        group = instances.GROUP_PREFIX + request.name
        key_file, public_key = self._key(request, group)
        plan = self._plan(request, group, public_key, self._ssh_cidr(request))
        _rdma, accelerated = nodes.network_features(self._arm(), plan.location, plan.size)
        plan = replace(plan, accelerated_networking=accelerated)
        created = deploy.create_group(self._arm(), plan, *self._create_args(request))
        return instances.to_instance(
            self.ctx.config, group, group, plan.tags, created.vm, created.public_ip, key_file
        )

    def create_nodes(self, requests: Sequence[CreateRequest]) -> list[Instance]:
        """All nodes in one resource group (one network, one proximity placement group),
        all or none: a node that cannot be had deletes the whole group (nodes.py)."""
        if len(requests) < 2:
            return super().create_nodes(requests)
        first = requests[0]
        group = instances.GROUP_PREFIX + first.group
        key_file, public_key = self._key(first, group)
        cidr = self._ssh_cidr(first)
        rdma, accelerated = nodes.network_features(
            self._arm(), first.offer.region, first.offer.instance_type
        )
        infiniband = rdma and first.offer.market == "on_demand"  # see nodes.py
        plans = [
            replace(
                self._plan(r, group, public_key, cidr),
                ip_name=nodes.ip_name(r.name),
                nic_name=nodes.nic_name(r.name),
                accelerated_networking=accelerated,
                between_nodes=True,
                infiniband=infiniband,
                # An availability set is regional: its VMs (and their IPs) take no zone.
                **({"zone": ""} if infiniband else {}),
            )
            for r in requests
        ]
        shared = {**instances.offer_tags(first), **nodes.group_tags(first.tags, len(requests))}
        made = deploy.create_nodes(
            self._arm(),
            replace(plans[0], tags=shared),
            plans,
            *self._create_args(first),
        )
        extra = {"infiniband": infiniband, "accelerated_networking": accelerated}
        return [
            instances.to_instance(
                self.ctx.config, nodes.node_id(group, p.vm_name), group, {**shared, **p.tags},
                c.vm, c.public_ip, key_file, c.private_ip, extra,
            )
            for p, c in zip(plans, made, strict=True)
        ]  # fmt: skip

    def _join(self, request: CreateRequest) -> Instance:
        """A lost node's replacement, added to the job's live group (nodes.join)."""
        group = instances.GROUP_PREFIX + request.group
        had_key = sshkeys.key_file(self.ctx.paths.keys_dir, f"azure-{group}").exists()
        key_file, public_key = self._key(request, group)
        plan = replace(
            self._plan(request, group, public_key, self._ssh_cidr(request)),
            ip_name=nodes.ip_name(request.name),
            nic_name=nodes.nic_name(request.name),
        )
        try:
            made, infiniband, accelerated = nodes.join(
                self._arm(), plan, *self._create_args(request)[:3]
            )
        except CloudGPUError:
            if not had_key:  # the group's key is the survivors' too; only a new one goes
                sshkeys.remove_key_pair(self.ctx.paths.keys_dir, f"azure-{group}")
            raise
        shared = {
            **instances.offer_tags(request),
            **nodes.group_tags(request.tags, request.num_nodes),
        }
        extra = {"infiniband": infiniband, "accelerated_networking": accelerated}
        return instances.to_instance(
            self.ctx.config, nodes.node_id(group, plan.vm_name), group,
            {**shared, **plan.tags}, made.vm, made.public_ip, key_file, made.private_ip, extra,
        )  # fmt: skip

    def _key(self, request: CreateRequest, group: str) -> tuple[str | None, str]:
        """(private key file we made or None, the public key to authorize)."""
        public_key = request.ssh_public_key.strip()
        if public_key:
            return None, public_key
        path, public_key = sshkeys.key_pair(
            self.ctx.paths.keys_dir, f"azure-{group}", f"cloudgpu-{group}"
        )
        return str(path), public_key

    def _plan(
        self, request: CreateRequest, group: str, public_key: str, cidr: str
    ) -> bodies.VmPlan:
        offer, cfg = request.offer, self.ctx.config
        image = str(request.image or cfg.get("image") or bodies.DEFAULT_IMAGE)
        bodies.image_reference(image)  # bad input fails before anything is made
        return bodies.VmPlan(
            group=group,
            vm_name=request.name,
            location=offer.region,
            size=offer.instance_type,
            spot=offer.market == "spot",
            ssh_public_key=public_key,
            ssh_cidr=cidr,
            tags={**request.tags, instances.TAG_VM: request.name, **instances.offer_tags(request)},
            zone=offer.zone,
            image=image,
            disk_gb=int(request.disk_gb),
            disk_sku=str(cfg.get("disk_sku", "Premium_LRS")),
            admin_user=str(cfg.get("admin_user", "azureuser")),
            user_data=request.user_data,
            ssh_port=self._ssh_port(),
        )

    def _create_args(self, request: CreateRequest) -> tuple[float | None, float, float, float]:
        """(deadline for the auto-shutdown or None, now, create and delete timeouts)."""
        cfg = self.ctx.config
        deadline = request.deadline if cfg.get("auto_shutdown", True) else None
        return (
            deadline,
            self.ctx.clock(),
            config.timeout(cfg, "create_timeout_s"),
            config.timeout(cfg, "delete_timeout_s"),
        )

    def _ssh_cidr(self, request: CreateRequest) -> str:
        return config.ssh_cidr(self.ctx.config, DEFAULT_IP_LOOKUP)

    def _ssh_port(self) -> int:
        return config.ssh_port(self.ctx.config)

    def describe(self, instance_id: str) -> Instance:
        arm = self._arm()
        group_name, node = nodes.split_id(instance_id)
        try:
            with azure_errors(f"describe {instance_id}"):
                group = arm.resource.resource_groups.get(group_name)
        except NotFoundError:
            return Instance(instance_id, self.name, InstanceState.TERMINATED)
        tags = dict(group.get("tags") or {})
        vm_name = (
            node or tags.get(instances.TAG_VM) or group_name.removeprefix(instances.GROUP_PREFIX)
        )
        if node is None:
            vm, address, private = instances.read_single(arm, group_name, vm_name)
        else:
            vm, address, private = nodes.read_node(arm, group_name, vm_name)
            tags.update((vm or {}).get("tags") or {})
        key = sshkeys.key_file(self.ctx.paths.keys_dir, f"azure-{group_name}")
        inst = instances.to_instance(
            self.ctx.config, instance_id, group_name, tags, vm, address,
            str(key) if key.exists() else None, private,
        )  # fmt: skip
        if (group.get("properties") or {}).get("provisioningState") == "Deleting":
            return replace(inst, state=InstanceState.STOPPING)
        return inst

    def preemption_notice(self, instance: Instance) -> float | None:
        """A Spot VM evicted with evictionPolicy Delete vanishes from its group (or is
        seen Deleting) before the lifecycle's describe() would notice; the 30-second
        Scheduled Events notice itself is only visible on the VM (:meth:`notice_watcher`).
        The lifecycle asks at most every ``notice_poll_s`` (default 10) seconds."""
        if instance.market != "spot":
            return None
        now = self.ctx.clock()
        return now if instances.evicted(self._arm(), instance) else None

    def notice_watcher(self, instance: Instance) -> NoticeWatcher | None:
        """templates/watchers/azure.sh on Spot VMs: Scheduled Events ``Preempt`` for this
        VM, acknowledged (StartRequests) only after the checkpoint flush."""
        if instance.market != "spot":
            return None
        vm = instances.vm_of(instance)[1]
        imds = notices.endpoint(self.ctx.config, "imds_endpoint", self.name)
        return notices.watcher(
            "azure", instance, imds, {"IMDS_ENDPOINT": imds, "CLOUDGPU_VM_NAME": vm}
        )

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        """Every VM carrying ``tags`` whose group is not being deleted, whatever state the
        VM is in: a one-VM group whose VM is gone still holds resources to remove."""
        out = []
        for g in instances.groups(self._arm(), tags):
            gtags, name = g.get("tags") or {}, str(g["name"])
            if (g.get("properties") or {}).get("provisioningState") == "Deleting":
                continue
            if nodes.is_multi(g):
                for vm in nodes.vms(self._arm(), name):
                    found = {**gtags, **(vm.get("tags") or {})}
                    if all(found.get(k) == v for k, v in tags.items()):
                        out.append(self.describe(nodes.node_id(name, str(vm["name"]))))
            elif all(gtags.get(k) == v for k, v in tags.items()):
                out.append(self.describe(name))
        return out

    def terminate(self, instance_id: str) -> None:
        timeout = config.timeout(self.ctx.config, "delete_timeout_s")
        group, node = nodes.split_id(instance_id)
        if node is None:
            problem = deploy.delete_group(self._arm(), group, timeout)
        else:
            problem = nodes.terminate_node(self._arm(), group, node, timeout)
        if problem:
            raise TransientError(
                problem,
                provider="azure",
                hint="retried by the lifecycle; `cloudgpu down --orphans` too",
            )
        if node is None or not self._arm().resource.resource_groups.check_existence(group):
            sshkeys.remove_key_pair(self.ctx.paths.keys_dir, f"azure-{group}")

    def leftovers(self, tags: Mapping[str, str]) -> list[Leftover]:
        """Multi-node groups carrying ``tags`` that hold no VM any more (a create killed
        before its VMs, teardowns that raced): deleted whole by remove_leftover."""
        return nodes.empty_groups(self._arm(), instances.groups(self._arm(), tags), tags)

    def remove_leftover(self, item: Leftover) -> None:
        if item.kind != nodes.KIND:
            return
        timeout = config.timeout(self.ctx.config, "delete_timeout_s")
        problem = deploy.delete_group(self._arm(), item.id, timeout)
        if problem:
            raise TransientError(problem, provider="azure", hint="`cloudgpu down --orphans`")
        sshkeys.remove_key_pair(self.ctx.paths.keys_dir, f"azure-{item.id}")
