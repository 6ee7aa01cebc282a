"""The GCP provider: Compute Engine GPU VMs, priced from the Cloud Billing Catalog.

Config (``[providers.gcp]``; all optional except a project from somewhere):

* ``project``; else GOOGLE_CLOUD_PROJECT / CLOUDSDK_CORE_PROJECT / the ADC file's project
* ``endpoint_url`` / ``billing_endpoint_url``: API endpoints (emulators, tests)
* ``anonymous = true``: no credentials (only with ``endpoint_url``)
* ``regions``: restrict fetched offers; ``zone``: default zone for zone-less offers
* ``ssh_cidr``: who may reach the sshd (default: this machine's public IP /32, looked up
  at ``ip_lookup_url``); ``ssh_user`` (default ``cloudgpu``); ``ssh_port`` (default 22,
  for images whose sshd listens elsewhere: the firewall rule opens that port instead)
* ``nvme_mount``: where the job finds local NVMe on the VM (default ``/nvme``)
* ``image``, ``network`` (default ``global/networks/default``), ``disk_type``

An instance id is ``<zone>/<name>``. create() makes a firewall rule ``<name>-ssh`` and the
VM; terminate() deletes both and checks they are gone. A create killed between the two
leaves the rule: leftovers() finds it by the tags in its description (`down --orphans`).
It never logs a credential.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

from cloudgpu_providers import notices
from cloudgpu_providers.callerip import lookup_cidr, normalized_cidr
from cloudgpu_providers.configkeys import FLAG, PORT, RETRY, TEXT, TEXTS, URL, seconds
from cloudgpu_providers.extras import missing_sdk
from cloudgpu_providers.gcp import instances as build
from cloudgpu_providers.gcp import placement, pricing
from cloudgpu_providers.gcp.clients import PROVIDER, Clients
from cloudgpu_providers.gcp.compute import Compute
from cloudgpu_providers.gcp.credentials import SOURCES, find_project, find_source
from cloudgpu_providers.gcp.groups import Groups
from cloudgpu_providers.verify import verify_gone

from cloudgpu.catalog.gpus import load_registry
from cloudgpu.catalog.offer import Offer, iso_utc
from cloudgpu.errors import ConfigError, ProviderError, TransientError
from cloudgpu.provider import (
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    Leftover,
    NoticeWatcher,
    Provider,
)
from cloudgpu.spec.fields import Node
from cloudgpu.sshkeys import key_pair

DEFAULT_IP_LOOKUP = "https://checkip.amazonaws.com"
SDK_MODULES = ("google.cloud.compute_v1", "google.cloud.billing_v1")  # the `gcp` extra


class GCPProvider(Provider):
    name: ClassVar[str] = "gcp"
    config_keys: ClassVar[Mapping[str, Node]] = {
        **RETRY, "project": TEXT, "regions": TEXTS, "zone": TEXT, "network": TEXT,
        "image": TEXT, "disk_type": TEXT, "ssh_port": PORT, "ssh_user": TEXT,
        "nvme_mount": TEXT, "ssh_cidr": TEXT, "ip_lookup_url": URL,
        "notice_poll_s": seconds(3600), "endpoint_url": URL, "billing_endpoint_url": URL,
        "anonymous": FLAG, "credentials_file": TEXT, "use_metadata_server": FLAG,
        "metadata_host": TEXT,
    }  # fmt: skip
    capabilities: ClassVar[Capabilities] = Capabilities(
        startup_s=240.0,  # create -> ready: VM boot, SSH, driver and image setup
        spot=True,
        preemption_notice=True,  # metadata instance/preempted (templates/watchers/gcp.sh)
        billing_granularity_s=1,
        minimum_billed_s=60,
        disposable=True,  # a fresh VM per job, deleted at teardown
        multi_node=True,  # one zone, a compact placement policy where the series takes one
        replace_node=True,  # insert into the group's zone, naming its live policy
    )

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self._clients: Clients | None = None

    # -- credentials -----------------------------------------------------------------

    def availability(self) -> Availability:
        missing = missing_sdk(SDK_MODULES, "gcp")
        if missing is not None:
            return missing
        source = find_source(self.ctx.config, self.ctx.env)
        if source.kind == "anonymous" and not self.ctx.config.get("endpoint_url"):
            return Availability(False, "anonymous = true needs endpoint_url", SOURCES)
        if not source.kind:
            return Availability(
                False,
                "no Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS or "
                "`gcloud auth application-default login`)",
                SOURCES,
            )
        project, where = find_project(self.ctx.config, self.ctx.env, source)
        if not project:
            return Availability(
                False,
                f"credentials from {source.description} but no project "
                "(set project in config or GOOGLE_CLOUD_PROJECT)",
                SOURCES,
            )
        return Availability(
            True, f"credentials from {source.description}; project {project} ({where})", SOURCES
        )

    @property
    def project(self) -> str:
        project, _ = find_project(self.ctx.config, self.ctx.env, self._source())
        if not project:
            raise ConfigError("gcp: no project", hint="set [providers.gcp] project")
        return project

    def _source(self) -> Any:
        return find_source(self.ctx.config, self.ctx.env)

    @property
    def clients(self) -> Clients:
        if self._clients is None:
            self._clients = Clients(self.ctx.config, self._source(), self.ctx.sleep)
        return self._clients

    def check(self) -> Availability:
        av = self.availability()
        if not av.enabled:
            return av
        zones = self.clients.compute("ZonesClient")
        self.clients.call(zones.list, request={"project": self.project, "max_results": 1})
        return Availability(True, f"{av.reason}; zones.list answered", av.sources)

    # -- offers ----------------------------------------------------------------------

    def fetch_offers(self) -> list[Offer]:
        machine_types = [
            pricing.MachineType(
                name=m.name,
                zone=zone.rsplit("/", 1)[-1],
                vcpus=m.guest_cpus,
                memory_mb=m.memory_mb,
                accelerators=tuple(
                    (a.guest_accelerator_type, a.guest_accelerator_count) for a in m.accelerators
                ),
                local_ssds=m.bundled_local_ssds.partition_count if m.bundled_local_ssds else 0,
            )
            for zone, m in self._aggregated("MachineTypesClient", "machine_types")
        ]
        accelerators = [
            pricing.AcceleratorType(a.name, zone.rsplit("/", 1)[-1], a.maximum_cards_per_instance)
            for zone, a in self._aggregated("AcceleratorTypesClient", "accelerator_types")
        ]
        table = pricing.price_table(self._skus())
        regions = self.ctx.config.get("regions")
        if isinstance(regions, str):
            regions = [regions]
        observed = iso_utc(self.ctx.clock())
        return pricing.build_offers(
            pricing.shapes(machine_types, accelerators),
            table,
            load_registry(),
            observed,
            frozenset(regions) if regions else None,
        )

    def _aggregated(self, client_name: str, field: str) -> Iterator[tuple[str, Any]]:
        client = self.clients.compute(client_name)
        for page in self.clients.pages(client.aggregated_list, {"project": self.project}):
            for scope, scoped in page.items.items():
                for item in getattr(scoped, field):
                    yield scope, item

    def _skus(self) -> Iterator[pricing.Sku]:
        billing = self.clients.billing()
        request = {"parent": pricing.COMPUTE_SERVICE, "currency_code": "USD"}
        for page in self.clients.pages(billing.list_skus, request):
            for sku in page.skus:
                if not sku.pricing_info:
                    continue
                rates = sku.pricing_info[0].pricing_expression.tiered_rates
                if not rates:
                    continue
                price = rates[-1].unit_price
                yield pricing.Sku(
                    description=sku.description,
                    usage_type=sku.category.usage_type,
                    regions=tuple(sku.service_regions),
                    unit_price=float(price.units) + price.nanos / 1e9,
                    resource_group=sku.category.resource_group,
                )

    # -- instances -------------------------------------------------------------------

    def _zone(self, request: CreateRequest) -> str:
        zone = request.offer.zone or str(self.ctx.config.get("zone") or "")
        if not zone:
            raise ConfigError(
                f"gcp: offer {request.offer.key} has no zone", hint="set [providers.gcp] zone"
            )
        return zone

    def _network(self) -> str:
        return str(self.ctx.config.get("network") or "global/networks/default")

    def create(self, request: CreateRequest) -> Instance:
        zone = self._zone(request)
        name = build.resource_name(request.name)
        key_file, public = self._public_key(request, name)
        login = self._login()
        network = self._network()
        host, accel, count = pricing.accelerator_for(request.offer)
        policy = ""
        if request.group and placement.compact(host):
            policy = placement.policy_path(self.project, _region(zone), request.group)
        deadline_in = None if request.deadline is None else request.deadline - self.ctx.clock()
        body = build.instance_body(
            request,
            name=name,
            zone=zone,
            machine_type=host,
            accelerator=(accel, count) if accel else None,
            ssh_line=f"{login.user}:{public}",
            image=build.image_path(request.image, self.ctx.config.get("image")),
            network=network,
            disk_type=str(self.ctx.config.get("disk_type") or build.default_disk_type(host)),
            deadline_in_s=deadline_in,
            policy=policy,
        )
        cidr, api = self._ssh_cidr(request), self._api()
        made_firewall = api.ensure_firewall(name, cidr, network, request.tags, login.port)
        try:
            api.insert(zone, body, request.idempotency_token)
            inst = api.get(zone, name)
        except ProviderError:
            api.cleanup(zone, name)
            raise
        if inst is not None and build.instance_tags(inst) != dict(request.tags):
            # Same name, someone else's VM (409 on insert): never adopt or delete it.
            if made_firewall:
                api.delete_firewall(f"{name}-ssh")
            raise ProviderError(
                f"an instance named {name} already exists in {zone} and is not this job's",
                provider=PROVIDER,
                hint="choose another job name",
            )
        if inst is None:
            api.cleanup(zone, name)
            raise TransientError(
                f"instance {name} vanished right after creation", provider=PROVIDER
            )
        return build.to_instance(inst, zone, login, str(key_file) if key_file else None)

    def create_nodes(self, requests: Sequence[CreateRequest]) -> list[Instance]:
        """The group first (a firewall rule between the nodes, a compact placement
        policy where the series takes one), then each node in one zone; on a failure the
        nodes made go, and the group with them."""
        first = requests[0]
        region = _region(self._zone(first))
        self._groups().make(first, len(requests), region, self._network())
        try:
            return super().create_nodes(requests)
        except BaseException:
            self._groups().remove(first.group, region)
            raise

    def leftovers(self, tags: Mapping[str, str]) -> list[Leftover]:
        """Multi-node groups' firewall rules and placement policies carrying ``tags``, and
        the SSH rules of VMs whose create was killed before the VM was inserted."""
        return self._groups().leftovers(tags)

    def remove_leftover(self, item: Leftover) -> None:
        self._groups().remove_leftover(item)

    def _groups(self) -> Groups:
        api = self._api()
        return Groups(api.clients, api.project, api.wait)

    def _api(self) -> Compute:
        return Compute(self.clients, self.project)

    def _public_key(self, request: CreateRequest, name: str) -> tuple[Any, str]:
        if request.ssh_public_key.strip():
            return None, request.ssh_public_key.strip()
        return key_pair(self.ctx.paths.keys_dir, f"gcp-{name}")

    def _key_file(self, name: str) -> str | None:
        path = self.ctx.paths.keys_dir / f"gcp-{name}"
        return str(path) if path.exists() else None

    def _login(self) -> build.Login:
        """User, sshd port and NVMe mount from config; a bad port is a one-line error."""
        raw = self.ctx.config.get("ssh_port", 22)
        try:
            port = int(raw)
        except (TypeError, ValueError):
            port = 0
        if isinstance(raw, bool) or not 0 < port < 65536:
            raise ConfigError(
                f"providers.gcp.ssh_port: expected a port number 1-65535, got {raw!r}"
            )
        return build.Login(
            user=str(self.ctx.config.get("ssh_user") or "cloudgpu"),
            port=port,
            nvme_mount=str(self.ctx.config.get("nvme_mount") or "/nvme"),
        )

    def _ssh_cidr(self, request: CreateRequest) -> str:
        explicit = self.ctx.config.get("ssh_cidr")
        if explicit:
            try:
                return normalized_cidr(explicit)
            except ValueError as exc:
                raise ConfigError(
                    f"gcp: ssh_cidr: expected a CIDR such as 203.0.113.7/32, got {explicit!r}"
                ) from exc
        url = str(self.ctx.config.get("ip_lookup_url") or DEFAULT_IP_LOOKUP)
        try:
            return lookup_cidr(url, 10)
        except (OSError, ValueError) as exc:
            raise ProviderError(
                f"cannot find this machine's public IP at {url}",
                provider=PROVIDER,
                hint="set [providers.gcp] ssh_cidr",
            ) from exc

    def describe(self, instance_id: str) -> Instance:
        zone, _, name = instance_id.partition("/")
        if not name:
            return Instance(id=instance_id, provider=PROVIDER, state=InstanceState.TERMINATED)
        api = self._api()
        inst = api.get(zone, name)
        if inst is None:
            state = (
                InstanceState.PREEMPTED if api.preempted(zone, name) else InstanceState.TERMINATED
            )
            return Instance(id=instance_id, provider=PROVIDER, state=state, zone=zone)
        return build.to_instance(inst, zone, self._login(), self._key_file(name))

    def preemption_notice(self, instance: Instance) -> float | None:
        """GCP gives a Spot VM ~30 s: it goes STOPPING, then (action DELETE) disappears.

        Seen from outside, asked by the lifecycle at most every ``notice_poll_s``
        seconds (default 10) so it does not spend the project's API rate; the watcher on
        the VM (:meth:`notice_watcher`) sees ``instance/preempted`` turn TRUE at once.
        """
        if instance.market != "spot":
            return None
        now = self.ctx.clock()
        zone, _, name = instance.id.partition("/")
        api = self._api()
        inst = api.get(zone, name)
        if inst is not None and inst.status not in ("STOPPING", "TERMINATED"):
            return None
        return now if api.preempted(zone, name) else None

    def notice_watcher(self, instance: Instance) -> NoticeWatcher | None:
        """templates/watchers/gcp.sh on every VM: Spot preemption, and the host
        maintenance that ends GPU VMs (they cannot live-migrate) on-demand ones too."""
        host = notices.endpoint(self.ctx.config, "metadata_host", PROVIDER)
        return notices.watcher("gcp", instance, host, {"GCE_METADATA_HOST": host})

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        client = self.clients.compute("InstancesClient")
        request = {"project": self.project, "filter": build.label_filter(tags)}
        login = self._login()
        out = []
        for page in self.clients.pages(client.aggregated_list, request):
            for scope, scoped in page.items.items():
                for inst in scoped.instances:
                    if not build.is_ours(inst):
                        continue  # never report (or let a sweep delete) a foreign VM
                    own = build.instance_tags(inst)
                    if all(own.get(k) == v for k, v in tags.items()):
                        zone = scope.rsplit("/", 1)[-1]
                        out.append(build.to_instance(inst, zone, login, self._key_file(inst.name)))
        return out

    def terminate(self, instance_id: str) -> None:
        zone, _, name = instance_id.partition("/")
        if not name:
            return
        api = self._api()
        api.cleanup(zone, name)
        verify_gone(
            self.ctx,
            lambda: api.get(zone, name) is None and not api.firewall_exists(f"{name}-ssh"),
            still=f"{instance_id} or its firewall rule still exists after delete",
            provider=PROVIDER,
        )


def _region(zone: str) -> str:
    return zone.rsplit("-", 1)[0]
