"""Which instances get a preemption watcher: a cloud VM does (AWS and Azure on spot, GCP
always: host maintenance ends GPU VMs too); an instance at an address of this computer
only when the config names the metadata endpoint, so no test or tunnel ever makes a
watcher ask the real metadata address."""

from __future__ import annotations

import pytest
from cloudgpu_providers.aws import AWSProvider
from cloudgpu_providers.azure import AzureProvider
from cloudgpu_providers.gcp import GCPProvider

from cloudgpu.errors import ConfigError
from cloudgpu.paths import Paths
from cloudgpu.provider import Instance, InstanceState, Provider, ProviderContext, SSHTarget

CASES = [  # provider, its endpoint key, the env var the script reads it from
    (AWSProvider, "imds_endpoint", "IMDS_ENDPOINT"),
    (GCPProvider, "metadata_host", "GCE_METADATA_HOST"),
    (AzureProvider, "imds_endpoint", "IMDS_ENDPOINT"),
]


def _inst(host: str, market: str = "spot") -> Instance:
    return Instance("x", "p", InstanceState.RUNNING, market=market, ssh=SSHTarget(host))


def _make(cls: type[Provider], paths: Paths, **config: object) -> Provider:
    return cls(ProviderContext(config=config, paths=paths, env={}))


@pytest.mark.parametrize(("cls", "key", "var"), CASES)
def test_cloud_vms_get_their_clouds_watcher(
    cls: type[Provider], key: str, var: str, paths: Paths
) -> None:
    w = _make(cls, paths).notice_watcher(_inst("203.0.113.9"))
    assert w is not None and var not in w.env  # the script's own default endpoint
    assert f"watchers/{cls.name}" not in w.script and "CLOUDGPU_NOTICE_FILE" in w.script


@pytest.mark.parametrize(("cls", "key", "var"), CASES)
def test_this_machine_gets_one_only_with_a_configured_endpoint(
    cls: type[Provider], key: str, var: str, paths: Paths
) -> None:
    for host in ("127.0.0.1", "::1", "localhost"):
        assert _make(cls, paths).notice_watcher(_inst(host)) is None
    w = _make(cls, paths, **{key: "127.0.0.1:8085"}).notice_watcher(_inst("127.0.0.1"))
    assert w is not None and w.env[var] == "127.0.0.1:8085"
    with pytest.raises(ConfigError, match=key):
        _make(cls, paths, **{key: "not a url"}).notice_watcher(_inst("203.0.113.9"))


def test_on_demand_gets_one_on_gcp_only(paths: Paths) -> None:
    od = _inst("203.0.113.9", market="on_demand")
    assert _make(AWSProvider, paths).notice_watcher(od) is None
    assert _make(AzureProvider, paths).notice_watcher(od) is None
    assert _make(GCPProvider, paths).notice_watcher(od) is not None
