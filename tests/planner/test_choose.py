"""The one gather + plan path: which providers' offers a job sees, the configured regions,
the closest-offer explanation, and the data-size walk (symlinks, loops, odd files)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import pytest
from click.testing import CliRunner

from cloudgpu.catalog import load_registry
from cloudgpu.catalog.offer import Offer
from cloudgpu.cli import cli
from cloudgpu.config import Config
from cloudgpu.data.select import Selector
from cloudgpu.errors import ConfigError
from cloudgpu.paths import Paths
from cloudgpu.planner.choose import OfferSources, gather_offers, local_data_bytes, plan_job
from cloudgpu.provider import (
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    Provider,
    ProviderContext,
)
from cloudgpu.registry import Registry
from cloudgpu.spec import parse_job
from cloudgpu.spec.model import DataItem, JobSpec
from tests.planner.helpers import offer

REG = load_registry()
CLOUD = [
    offer("aws", "g6.xlarge", "L4", 1, 24, 0.80),
    offer("aws", "g6.xlarge", "L4", 1, 24, 0.60, region="ap-south-1"),
    offer("gcp", "g2-standard-4", "L4", 1, 24, 0.70, region="us-central1"),
]


class _Fake(Provider):
    name: ClassVar[str] = "fake"
    enabled: ClassVar[bool] = True
    own: ClassVar[list[Offer]] = []

    def availability(self) -> Availability:
        return Availability(self.enabled, "ok" if self.enabled else "no credentials")

    def offers(self) -> list[Offer]:
        return list(self.own)

    def create(self, request: CreateRequest) -> Instance:
        raise AssertionError("planning creates nothing")

    def describe(self, instance_id: str) -> Instance:
        raise AssertionError("planning describes nothing")

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        return []

    def terminate(self, instance_id: str) -> None:
        raise AssertionError("planning terminates nothing")


class _Aws(_Fake):
    name = "aws"


class _Gcp(_Fake):
    name = "gcp"
    enabled = False


class _Local(_Fake):
    name = "local"
    own: ClassVar[list[Offer]] = [offer("local", "local", "", 0, 0, 0.0)]


def sources(**kw: object) -> OfferSources:
    classes = {c.name: c for c in (_Aws, _Gcp, _Local)}
    ctx = ProviderContext(config={}, paths=None, env={})  # type: ignore[arg-type]

    def catalog(names: Sequence[str]) -> list[Offer]:
        return [o for o in CLOUD if o.provider in names]

    base: dict[str, object] = dict(
        provider_names=sorted(classes),
        provider=lambda n: classes[n](ctx),
        catalog=catalog,
        catalog_names=["aws", "gcp"],
    )
    base.update(kw)
    return OfferSources(**base)  # type: ignore[arg-type]


def job(resources: str = "{gpu: L4}") -> JobSpec:
    return parse_job(f"name: j\nrun: x\nresources: {resources}\n")


def test_default_is_what_launch_can_use_all_providers_is_the_whole_catalog() -> None:
    got = gather_offers(job(), sources())
    assert {o.provider for o in got.offers} == {"aws", "local"}  # gcp is not enabled
    assert got.notes == ["gcp: no credentials"]
    what_if = gather_offers(job(), sources(whatif=["local"]), all_providers=True)
    assert {o.provider for o in what_if.offers} == {"aws", "gcp", "local"}


class _Boxes(_Fake):
    name = "boxes"  # its own machines, no catalog table: like local, under another name
    own: ClassVar[list[Offer]] = [offer("boxes", "box-1", "", 0, 0, 0.0)]


def test_a_what_if_asks_an_unnamed_provider_only_when_it_declares_itself_cheap() -> None:
    """The declaration (entry-point metadata, Registry.whatif_names) decides, never a
    provider's name: undeclared, neither local nor boxes is loaded for a what-if."""
    asked: list[str] = []
    ctx = ProviderContext(config={}, paths=None, env={})  # type: ignore[arg-type]

    def provider(name: str) -> Provider:
        asked.append(name)
        return {"local": _Local, "boxes": _Boxes}[name](ctx)

    mine = {"provider_names": ["boxes", "local"], "provider": provider}
    quiet = gather_offers(job(), sources(**mine), all_providers=True)
    assert asked == [] and {o.provider for o in quiet.offers} == {"aws", "gcp"}
    loud = gather_offers(job(), sources(**mine, whatif=["boxes"]), all_providers=True)
    assert asked == ["boxes"] and {o.provider for o in loud.offers} == {"aws", "gcp", "boxes"}


def test_defaults_providers_and_unknown_names() -> None:
    got = gather_offers(job(), sources(default_providers=("aws",)))
    assert {o.provider for o in got.offers} == {"aws"}
    with pytest.raises(ConfigError, match=r"resources.providers: unknown provider\(s\) awz"):
        gather_offers(job("{gpu: L4, providers: [awz]}"), sources())


def test_configured_regions_keep_a_providers_offers_there() -> None:
    src = sources(provider_regions={"aws": ["us-*"]})
    choice = plan_job(job(), src, registry=REG)
    assert [(o.provider, o.region) for o in choice.offers] == [("aws", "us-east-1")]
    (why,) = [c.reason for c in choice.plan.rejected if c.offer.region == "ap-south-1"]
    assert why == "region not in providers.aws.regions us-* (ap-south-1)"


def test_nothing_fits_names_the_closest_offer_and_what_it_lacks() -> None:
    choice = plan_job(job("{gpu: 'L4:1', memory: 2TB+, max_price: 0.7}"), sources(), registry=REG)
    with pytest.raises(ConfigError) as err:
        choice.require()
    text = str(err.value)
    # The $0.60 offer misses only the RAM; the others miss the price too.
    assert "no offer fits resources (3 considered); closest is aws g6.xlarge (ap-south-1" in text
    assert text.endswith("$0.60/h: RAM GB < 2000 (120)")
    assert err.value.hint and "gcp" in err.value.hint and "--all-providers" in err.value.hint


# -- the data size ------------------------------------------------------------------------


def _data_job(tmp_path: Path, *srcs: str) -> JobSpec:
    return JobSpec(
        name="d",
        data=tuple(DataItem(s, "/nvme/d") for s in srcs),
        base_dir=str(tmp_path),
    )


def test_data_size_counts_what_staging_sends(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.bin").write_bytes(b"x" * 1000)
    (data / "sub" / "b.bin").write_bytes(b"y" * 24)
    (tmp_path / "one.bin").write_bytes(b"z" * 7)
    assert local_data_bytes(_data_job(tmp_path, "data", "one.bin")) == 1031
    assert local_data_bytes(_data_job(tmp_path, "data", "s3://bucket/x")) is None
    assert local_data_bytes(_data_job(tmp_path)) is None
    # What the excludes leave out is not staged, so not counted; remote sizes are given.
    no_sub = lambda item, path: Selector(["sub/"]).excluded  # noqa: E731
    assert local_data_bytes(_data_job(tmp_path, "data"), exclude_of=no_sub) == 1000
    listed = local_data_bytes(_data_job(tmp_path, "data", "s3://b/x"), remote=lambda i: 5)
    assert listed == 1029
    assert local_data_bytes(_data_job(tmp_path, "s3://b/x"), remote=lambda i: None) is None


def test_data_size_survives_dangling_links_loops_and_fifos(tmp_path: Path) -> None:
    """A Hugging Face cache or a virtualenv holds all of these; none may fail the plan."""
    data = tmp_path / "data"
    (data / "blobs").mkdir(parents=True)
    (data / "blobs" / "real").write_bytes(b"x" * 100)
    (data / "dangling").symlink_to(tmp_path / "gone")
    (data / "loop").symlink_to(data)  # a link to its own folder
    (data / "self").symlink_to("self")  # a link to itself
    (data / "snapshot").symlink_to(data / "blobs" / "real")  # counted once: links are links
    os.mkfifo(data / "pipe")
    warnings: list[str] = []
    assert local_data_bytes(_data_job(tmp_path, "data"), warnings.append) == 100
    assert warnings == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file; CI runs as root")
def test_data_size_skips_unreadable_folders_with_a_warning(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "locked").mkdir(parents=True)
    (data / "ok").write_bytes(b"x" * 10)
    (data / "locked" / "hidden").write_bytes(b"y" * 10)
    (data / "locked").chmod(0)
    warnings: list[str] = []
    try:
        assert local_data_bytes(_data_job(tmp_path, "data"), warnings.append) == 10
    finally:
        (data / "locked").chmod(0o700)
    assert len(warnings) == 1 and "data[0].src: 1 unreadable entry" in warnings[0]


def test_plan_cli_on_a_hostile_data_folder(tmp_path: Path) -> None:
    """Issue 11: `plan` on a folder with a dangling symlink was an internal error."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.bin").write_bytes(b"x" * 5)
    (data / "dangling").symlink_to(tmp_path / "gone")
    (data / "loop").symlink_to(data)
    job_path = tmp_path / "job.yaml"
    job_path.write_text(
        "name: d\nresources: {gpu: none}\nrun: x\ndata:\n  - {src: ./data, dst: /nvme/data}\n"
    )
    res = CliRunner().invoke(cli, ["plan", str(job_path)])
    assert res.exit_code == 0, res.output
    assert "internal error" not in res.output


def test_startup_guesses_come_from_the_providers_own_capabilities(
    tmp_path: Path, paths: Paths
) -> None:
    """The planner knows no provider's boot time: each plugin declares its own."""
    job_path = tmp_path / "job.yaml"
    job_path.write_text(
        "name: s\nresources: {gpu: 'A100-80GB:8'}\nrun: x\n"
        "workload: {kind: finetune, params: 1B, tokens: 10M}\n"
    )
    res = CliRunner().invoke(
        cli, ["plan", str(job_path), "--all-providers", "--json", "--limit", "400"]
    )
    assert res.exit_code == 0, res.output
    by_provider = {r["provider"]: r["startup_hours"] for r in json.loads(res.stdout) if r["fits"]}
    assert len(by_provider) >= 3
    registry = Registry(Config(), paths, {})
    for name, hours in by_provider.items():
        declared = registry.provider_class(name).capabilities.startup_s
        assert hours == pytest.approx(declared / 3600, rel=1e-3), name


def test_spot_offers_of_a_provider_without_spot_are_left_out() -> None:
    """RunPod's bundled table still lists spot rows its plugin cannot buy: the plan leaves
    them out (Capabilities.spot), saying so, instead of failing over each at launch."""
    spot = offer("aws", "g6.xlarge", "L4", 1, 24, 0.2, market="spot")

    def catalog(names: Sequence[str]) -> list[Offer]:
        return [o for o in [*CLOUD, spot] if o.provider in names]

    src = sources(catalog=catalog)  # _Aws has no spot capability
    got = gather_offers(job(), src)
    assert spot not in got.offers and len(got.offers) == 3  # two aws + local
    assert got.left_out == ["aws: 1 spot offer(s) left out (it creates no spot instances)"]
    with_spot = sources(catalog=catalog, capabilities=lambda n: Capabilities(spot=True))
    assert spot in gather_offers(job(), with_spot).offers
