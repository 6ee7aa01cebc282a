"""AWSProvider: EC2 GPU instances, on-demand and spot, behind the cloudgpu contract.

Composes the AWS modules: credentials (enabled-or-why, offline), session (boto3 clients,
endpoints from config), faults (error mapping, backoff), refresh/pricing (live offers),
launch (key pair, security group, AMI, run_instances arguments) and instances (state
mapping, lookups, teardown). It never caches offers (the CLI does) and never prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, ClassVar

from cloudgpu_providers import notices
from cloudgpu_providers.aws import launch, network, placement, sweep
from cloudgpu_providers.aws.credentials import find_credentials
from cloudgpu_providers.aws.faults import PROVIDER, Caller
from cloudgpu_providers.aws.instances import (
    Teardown,
    console_fingerprints,
    describe_raw,
    find_raw,
    owned_name,
    to_instance,
)
from cloudgpu_providers.aws.keys import job_key, remove_key_files
from cloudgpu_providers.aws.refresh import fetch_region
from cloudgpu_providers.aws.session import Clients
from cloudgpu_providers.aws.settings import DLAMI_NVME_MOUNT, AwsSettings, parse_settings
from cloudgpu_providers.configkeys import FLAG, PORT, TEXT, TEXTS, URL, count, seconds
from cloudgpu_providers.extras import missing_sdk

from cloudgpu.catalog.gpus import GpuRegistry, load_registry
from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import AuthError, NotFoundError, ProviderError, TransientError
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
from cloudgpu.spec.fields import Node

SDK_MODULES = ("boto3",)  # the `aws` extra
GROUP_DELETE_WAIT_S = 120.0  # a rolled-back group: until EC2 stops counting its nodes
# Spot request status codes meaning "the interruption notice has been issued".
NOTICE_CODES = ("marked-for-termination", "marked-for-stop", "marked-for-hibernation")
SPOT_NOTICE_S = 120.0  # AWS gives two minutes from the notice


class AWSProvider(Provider):
    name: ClassVar[str] = "aws"
    config_keys: ClassVar[Mapping[str, Node]] = {
        "regions": TEXTS, "endpoint_url": URL, "pricing_endpoint_url": URL,
        "pricing_region": TEXT, "profile": TEXT, "ssh_cidr": TEXT, "public_ip_url": URL,
        "image": TEXT, "image_name": TEXT, "image_owners": TEXTS, "ssh_user": TEXT,
        "ssh_port": PORT, "nvme_mount": TEXT, "use_private_ip": FLAG,
        "max_attempts": count(1, 20), "poll_s": seconds(60),
        "subnet_id": TEXTS, "vpc_id": TEXTS, "imds_endpoint": URL, "notice_poll_s": seconds(3600),
    }  # fmt: skip
    capabilities: ClassVar[Capabilities] = Capabilities(
        startup_s=240.0,  # create -> ready: VM boot, SSH, driver and image setup
        spot=True,
        multi_node=True,  # nodes in a cluster placement group, EFA where the type has it
        replace_node=True,  # run_instances into the job's live placement group
        preemption_notice=True,  # on the instance: IMDSv2 spot/instance-action
        billing_granularity_s=1,
        minimum_billed_s=60,  # Linux instances: per second, one-minute minimum
        notice_poll_s=5.0,  # describe_spot_instance_requests from outside, the fallback
        disposable=True,  # a fresh VM per job, terminated at teardown
        lease_tags=True,  # create_tags on a running instance
    )

    def __init__(self, ctx: ProviderContext, gpus: GpuRegistry | None = None) -> None:
        super().__init__(ctx)
        self.settings: AwsSettings = parse_settings(ctx.config)
        self.clients = Clients(self.settings, ctx.env)
        self.call = Caller(ctx.sleep, self.settings.max_attempts)
        self._gpus = gpus
        self._region_of: dict[str, str] = {}
        self._all_regions: tuple[str, ...] | None = None
        self._fingerprints: dict[str, tuple[str, ...]] = {}

    # -- discovery -------------------------------------------------------------------

    def availability(self) -> Availability:
        missing = missing_sdk(SDK_MODULES, "aws")
        if missing is not None:
            return missing
        report = find_credentials(self.ctx.env, self.settings.profile)
        if report.source is None:
            reason = report.problem or "no AWS credentials found"
            return Availability(
                False, f"{reason} (looked at: {', '.join(report.looked_at)})", report.looked_at
            )
        return Availability(True, f"credentials from {report.source}", report.looked_at)

    def check(self) -> Availability:
        av = self.availability()
        if not av.enabled:
            return av
        ident = self.call("sts get_caller_identity", self.clients.sts().get_caller_identity)
        return Availability(
            True,
            f"{av.reason}; account {ident.get('Account', '?')} confirmed by STS",
            av.sources,
        )

    def regions(self) -> tuple[str, ...]:
        """The configured regions, else every region enabled for the account (asked once):
        a sweep after a crash must find instances wherever the catalog sent them."""
        if self.settings.regions:
            return self.settings.regions
        if self._all_regions is None:
            ec2 = self.clients.ec2(self.settings.home_region)
            out = self.call("describe_regions", ec2.describe_regions)
            self._all_regions = tuple(sorted(r["RegionName"] for r in out.get("Regions", [])))
        return self._all_regions

    # -- offers ----------------------------------------------------------------------

    def fetch_offers(self) -> list[Offer]:
        """Live GPU offers of every configured region (raises AuthError on bad keys)."""
        av = self.availability()
        if not av.enabled:
            raise AuthError(
                av.reason, provider=PROVIDER, hint="configure AWS credentials (env, profile or SSO)"
            )
        gpus = self._gpus or load_registry()
        now = datetime.fromtimestamp(self.ctx.clock(), tz=UTC).replace(microsecond=0)
        offers: list[Offer] = []
        for region in self.regions():
            offers += fetch_region(
                self.call, self.clients.ec2(region), self.clients.pricing(), region, gpus, now
            )
        return offers

    # -- instances -------------------------------------------------------------------

    def create(self, request: CreateRequest) -> Instance:
        region = request.offer.region or self.settings.home_region
        if region not in self.regions():
            # Outside the configured (or the account's enabled) regions: a sweep would
            # never look there, so nothing is made there.
            raise NotFoundError(
                f"region {region} is not among the regions in use ({', '.join(self.regions())})",
                provider=PROVIDER,
                hint="add it to providers.aws.regions, or enable it for the account",
            )
        ec2 = self.clients.ec2(region)
        if request.idempotency_token:
            token = request.idempotency_token[:64]
            again = find_raw(self.call, ec2, {launch.TAG_TOKEN: token})
            if again:  # a retried create: the first one got through
                return self._record(again[0], region)
        info = launch.instance_type_info(self.call, ec2, request.offer.instance_type)
        archs = info.get("ProcessorInfo", {}).get("SupportedArchitectures", ["x86_64"])
        arch = "x86_64" if "x86_64" in archs else archs[0]
        image = launch.resolve_image(self.call, ec2, self.settings, request.image, arch)
        zone = launch.zone_name(self.call, ec2, request.offer.zone) if request.offer.zone else ""
        # Before anything is made: no usable subnet here fails over to the next offer.
        net = network.choose(self.call, ec2, self.settings, zone, region)
        cidr = launch.ssh_cidr(self.settings)
        key = job_key(self.ctx.paths.keys_dir, request.name, request.ssh_public_key)
        name = launch.resource_name(request.name)
        made: dict[str, str] = {}
        try:
            launch.ensure_key_pair(self.call, ec2, name, key.public_key, request.tags)
            made["key"] = name
            group_id, new_group = launch.ensure_security_group(
                self.call, ec2, name, cidr, request.tags, net.vpc_id, self.settings.ssh_port
            )
            if new_group:
                made["group"] = group_id
            tags = self._instance_tags(request, image.dlami)
            boot = launch.user_data(request.deadline, self.ctx.clock(), request.user_data)
            where = network.placement_args(net, group_id, self.settings)
            args = launch.run_args(request, image, name, where, tags, boot)
            if request.group:  # a node of a multi-node job: its cluster placement group
                args = placement.placed(args, request.group)
                if info.get("NetworkInfo", {}).get("EfaSupported"):
                    args = placement.efa_interface(args)
            out = self.call("run_instances", ec2.run_instances, **args)
        except ProviderError:
            self._undo(ec2, made, request, key.generated)
            raise
        return self._record(out["Instances"][0], region)

    def create_nodes(self, requests: Sequence[CreateRequest]) -> list[Instance]:
        """A cluster placement group first (nodes of one AZ, close together), then each
        node in it (EFA where the type has it); on a failure the nodes made go, and the
        group with them."""
        first = requests[0]
        region = first.offer.region or self.settings.home_region
        ec2 = self.clients.ec2(region)
        placement.create(self.call, ec2, first.group, first.tags)
        try:
            return super().create_nodes(requests)
        except BaseException:
            self._delete_groups(region, [first.group])
            raise

    def leftovers(self, tags: Mapping[str, str]) -> list[Leftover]:
        """Placement groups (a multi-node job's, or one a crash left), and the security
        groups and key pairs a create killed before run_instances leaves, carrying
        ``tags``."""
        out = []
        for region in self.regions():
            ec2 = self.clients.ec2(region)
            for g in placement.tagged(self.call, ec2, tags):
                found = {t["Key"]: t["Value"] for t in g.get("Tags", [])}
                out.append(Leftover(placement.KIND, g["GroupName"], found, region))
            out += sweep.leftovers(self.call, ec2, region, tags)
        return out

    def remove_leftover(self, item: Leftover) -> None:
        if item.kind == placement.KIND:
            self._delete_groups(item.region, [item.id])
            return
        ec2 = self.clients.ec2(item.region or self.settings.home_region)
        sweep.remove(self.call, ec2, item, self.ctx.paths.keys_dir)

    def _delete_groups(self, region: str, names: Sequence[str]) -> None:
        """Best effort, once the nodes' termination is under way; a group EC2 still
        counts as in use is left to the sweep (it carries the job's tags)."""
        step = max(self.settings.poll_s, 0.05)
        for name in names:
            for _ in range(int(GROUP_DELETE_WAIT_S / step)):
                try:
                    placement.delete(self.call, self.clients.ec2(region), name)
                    break
                except TransientError:
                    self.ctx.sleep(step)
            else:
                raise TransientError(f"placement group {name} still in use", provider=PROVIDER)

    def _instance_tags(self, request: CreateRequest, dlami: bool) -> dict[str, str]:
        tags = dict(request.tags)
        tags.setdefault("Name", launch.resource_name(request.name))
        tags[launch.TAG_PRICE] = f"{request.offer.price_per_hour:.6g}"
        if request.idempotency_token:
            tags[launch.TAG_TOKEN] = request.idempotency_token[:64]
        nvme = self.settings.nvme_mount or (DLAMI_NVME_MOUNT if dlami else None)
        if nvme:
            tags[launch.TAG_NVME] = nvme
        return tags

    def _undo(
        self, ec2: Any, made: Mapping[str, str], request: CreateRequest, generated: bool
    ) -> None:
        """Remove what a failed create made, before its error surfaces.

        A run_instances whose answer was lost (timeout, 5xx after the fact) may still
        have started an instance: it is found by its token tag and torn down too.
        """
        teardown = self._teardown(ec2)
        try:
            if request.idempotency_token:
                token = {launch.TAG_TOKEN: request.idempotency_token[:64]}
                for item in find_raw(self.call, ec2, token):
                    teardown.run(item["InstanceId"])  # also removes its group and key
            if "group" in made and teardown.group_exists(made["group"]):
                teardown.delete_group(made["group"])
            if "key" in made:
                self.call("delete_key_pair", ec2.delete_key_pair, KeyName=made["key"])
        except ProviderError:
            # The create's own error is the one to report. An instance left behind
            # carries the job's tags (`cloudgpu down --orphans` finds it); a group or key
            # pair is named cloudgpu-<name>, tagged, and replaced by the next create.
            pass
        finally:
            if generated:
                remove_key_files(self.ctx.paths.keys_dir, request.name)

    def _record(self, item: Mapping[str, Any], region: str) -> Instance:
        self._region_of[item["InstanceId"]] = region
        return to_instance(item, region, self.settings, self.ctx.paths.keys_dir)

    def _teardown(self, ec2: Any) -> Teardown:
        return Teardown(
            self.call,
            ec2,
            self.ctx.clock,
            self.ctx.sleep,
            poll_s=self.settings.poll_s,
        )

    def _locate(self, instance_id: str) -> tuple[str, dict[str, Any]] | None:
        """(region, describe item) of an instance, searching the regions in use."""
        known = self._region_of.get(instance_id)
        regions = ([known] if known else []) + [r for r in self.regions() if r != known]
        for region in regions:
            item = describe_raw(self.call, self.clients.ec2(region), instance_id)
            if item is not None:
                return region, item
        return None

    def describe(self, instance_id: str) -> Instance:
        found = self._locate(instance_id)
        if found is None:
            return Instance(id=instance_id, provider=PROVIDER, state=InstanceState.TERMINATED)
        inst = self._record(found[1], found[0])
        if inst.state != InstanceState.RUNNING or inst.ssh is None:
            return inst
        prints = self._fingerprints.get(instance_id) or console_fingerprints(
            self.call, self.clients.ec2(found[0]), instance_id
        )
        if prints:
            self._fingerprints[instance_id] = prints
        return replace(inst, ssh=replace(inst.ssh, host_key_fingerprints=prints))

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        out: list[Instance] = []
        for region in self.regions():
            for item in find_raw(self.call, self.clients.ec2(region), tags):
                out.append(self._record(item, region))
        return out

    def renew_lease(self, instance: Instance, until: float) -> bool:
        region = self._region_of.get(instance.id) or instance.region
        if not region:
            return False
        sweep.renew(self.call, self.clients.ec2(region), instance.id, until)
        return True

    def terminate(self, instance_id: str) -> None:
        found = self._locate(instance_id)
        if found is None:
            return  # never existed, or terminated long ago: nothing left to pay for
        region, _ = found
        ec2 = self.clients.ec2(region)
        teardown = self._teardown(ec2)
        item = teardown.run(instance_id)
        if item is None:
            return
        name = owned_name(item.get("KeyName"))
        if name:
            remove_key_files(self.ctx.paths.keys_dir, name)
        # Verify: nothing made for this instance may outlive it.
        left = [
            f"security group {g['GroupId']}"
            for g in item.get("SecurityGroups", [])
            if owned_name(g.get("GroupName")) and teardown.group_exists(g["GroupId"])
        ]
        if name and teardown.key_pair_exists(item["KeyName"]):
            left.append(f"key pair {item['KeyName']}")
        if left:
            raise TransientError(
                f"{instance_id} is terminated but its {', '.join(left)} remain",
                provider=PROVIDER,
                hint="run the same `cloudgpu down` again in a minute",
            )

    def preemption_notice(self, instance: Instance) -> float | None:
        """When AWS has marked a spot instance for interruption: its time, else None.

        The spot request's status turns ``marked-for-termination`` (or ``-stop``) when
        the two-minute notice is issued
        (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-request-status.html).
        The lifecycle asks at most every ``notice_poll_s`` (5 s); the watcher on the
        instance (:meth:`notice_watcher`) usually tells it first.
        """
        if instance.market != "spot":
            return None
        now = self.ctx.clock()
        request_id = instance.extra.get("spot_request_id")
        region = instance.region or self.settings.home_region
        if not request_id:
            return None
        ec2 = self.clients.ec2(region)
        out = self.call(
            "describe_spot_instance_requests",
            ec2.describe_spot_instance_requests,
            SpotInstanceRequestIds=[request_id],
        )
        for req in out.get("SpotInstanceRequests", []):
            status = req.get("Status", {})
            if status.get("Code") in NOTICE_CODES:
                updated = status.get("UpdateTime")
                start = updated.timestamp() if updated is not None else now
                return start + SPOT_NOTICE_S
        return None

    def notice_watcher(self, instance: Instance) -> NoticeWatcher | None:
        """templates/watchers/aws.sh on spot instances: IMDSv2 spot/instance-action and
        the rebalance recommendation."""
        if instance.market != "spot":
            return None
        imds = notices.endpoint(self.ctx.config, "imds_endpoint", PROVIDER)
        return notices.watcher("aws", instance, imds, {"IMDS_ENDPOINT": imds})
