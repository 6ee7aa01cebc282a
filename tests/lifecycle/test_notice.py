"""The instance-side notice path on this machine (a LocalMachine workspace): the bootstrap
starts a provider's watcher, the reader sees its notice within seconds over the
machine's own run(), hostile lines are ignored; the outside poll's rate limit lives in
one place (watch.py) whatever the provider."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from cloudgpu.builtin.procs import tagged_pids
from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import ConfigError
from cloudgpu.lifecycle import notice, watch
from cloudgpu.lifecycle.bootstrap import bootstrap, state_dir
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.provision import Provisioned
from cloudgpu.paths import Paths
from cloudgpu.provider import (
    Availability,
    Capabilities,
    CreateRequest,
    Instance,
    InstanceState,
    NoticeWatcher,
    Provider,
    ProviderContext,
)
from cloudgpu.remote import LocalMachine
from cloudgpu.spec.model import Limits
from cloudgpu.state.store import Store
from tests.lifecycle.helpers import Lines, wait_for

# A watcher as a cloud's would be: it waits for its "metadata" (a file here), then
# writes the notice where the bootstrap told it to, and exits.
FILE_WATCHER = """
while [ ! -e "$METADATA" ]; do sleep 0.1; done
printf '{"action": "preempt", "time": "%s", "source": "test-metadata"}\\n' "$(cat "$METADATA")" \
    > "$CLOUDGPU_NOTICE_FILE.tmp" && mv "$CLOUDGPU_NOTICE_FILE.tmp" "$CLOUDGPU_NOTICE_FILE"
while [ ! -e "$CLOUDGPU_NOTICE_ACK" ]; do sleep 0.1; done
touch "$METADATA.acked"
"""


def _gone(pid: int) -> bool:
    """Exited (a zombie no one has reaped yet counts: it runs nothing)."""
    try:
        return " Z" in Path(f"/proc/{pid}/stat").read_text().split(")", 1)[1][:3]
    except OSError:
        return True


def _reap(iid: str) -> None:
    for pid in tagged_pids(iid, watchdog=True):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_bootstrap_starts_the_watcher_and_the_reader_sees_its_notice(tmp_path: Path) -> None:
    m = LocalMachine(tmp_path / "ws")
    meta = tmp_path / "metadata"
    iid = f"inst-{time.monotonic_ns()}"
    watcher = NoticeWatcher(FILE_WATCHER, {"METADATA": str(meta)})
    try:
        line = bootstrap(
            m, Instance(iid, "t", InstanceState.RUNNING), Capabilities(), None, watcher
        )
        assert line.endswith("watcher=on")
        got: list[tuple[float, str]] = []
        seen = threading.Event()

        def on_notice(at: float, text: str) -> None:
            got.append((at, text))
            seen.set()

        reader = notice.NoticeReader(m, on_notice, on_notice, time.time, print).start()
        try:
            time.sleep(0.5)
            assert not seen.is_set()  # absent: nothing
            meta.write_text("2026-12-01T02:00:00Z")  # present: the cloud announces it
            started = time.monotonic()
            assert seen.wait(10)
            assert time.monotonic() - started < 5  # within seconds, not a poll interval
        finally:
            reader.close()
        ((at, text),) = got
        assert at == 1796090400.0 and text == "preempt (test-metadata)"
        assert not meta.with_suffix(".acked").exists()  # not before the flush
        notice.acknowledge(m)
        wait_for(lambda: Path(f"{meta}.acked").exists(), timeout=10, what="ack seen")
    finally:
        _reap(iid)


def test_a_second_bootstrap_replaces_the_watcher_and_clears_old_notices(tmp_path: Path) -> None:
    m = LocalMachine(tmp_path / "ws")
    iid = f"inst-{time.monotonic_ns()}"
    w = NoticeWatcher("sleep 300\n")
    try:
        bootstrap(m, Instance(iid, "t", InstanceState.RUNNING), Capabilities(), None, w)
        state = Path(state_dir(m))
        first = int((state / "watcher.pid").read_text())
        (state / "preempt.json").write_text('{"action": "preempt"}\n')
        bootstrap(m, Instance(iid, "t", InstanceState.RUNNING), Capabilities(), None, w)
        assert not (state / "preempt.json").exists()
        wait_for(lambda: _gone(first), timeout=10, what="old watcher gone")
        assert int((state / "watcher.pid").read_text()) != first
    finally:
        _reap(iid)


@pytest.mark.parametrize(
    "line",
    [
        b"N " + b"x" * 9000,
        b"N not json",
        b'N ["a list"]',
        b"X {}",
        b"N \xff\xfe",
    ],
)
def test_hostile_reader_lines_are_not_notices(line: bytes) -> None:
    assert notice.parse_line(line, 5.0) is None


def test_reader_line_fields_are_bounded_and_cleaned() -> None:
    parsed = notice.parse_line(b'N {"action": "preempt\\u001b[2J", "time": 7, "detail": "x"}', 5.0)
    assert parsed == ("N", 5.0, "preempt[2J (x)")
    rfc = notice.parse_line(b'N {"time": "Tue, 01 Dec 2026 02:05:30 GMT"}', 0.0)
    assert rfc is not None and rfc[1] == 1796090730.0


# -- the outside poll's rate limit, in one place -------------------------------------------


class Counting(Provider):
    name: ClassVar[str] = "counting"
    capabilities: ClassVar[Capabilities] = Capabilities(preemption_notice=True, notice_poll_s=10)

    def __init__(self, ctx: ProviderContext) -> None:
        super().__init__(ctx)
        self.asked: list[float] = []

    def availability(self) -> Availability:
        return Availability(True, "test")

    def create(self, request: CreateRequest) -> Instance:
        raise NotImplementedError

    def describe(self, instance_id: str) -> Instance:
        return Instance(instance_id, self.name, InstanceState.RUNNING)

    def list_instances(self, tags: Mapping[str, str]) -> list[Instance]:
        return []

    def terminate(self, instance_id: str) -> None:
        pass

    def preemption_notice(self, instance: Instance) -> float | None:
        self.asked.append(self.ctx.clock())
        return None


def _watcher(tmp_path: Path, paths: Paths, config: dict[str, Any]) -> tuple[Any, Any, list]:
    now = [0.0]
    provider = Counting(ProviderContext(config=config, paths=paths, env={}, clock=lambda: now[0]))
    sink = Lines()
    deps = Deps(
        Store.open(tmp_path / "s.db"), lambda _: provider, paths, sink, "me",
        connect=lambda *a, **k: None, clock=lambda: now[0],
    )  # fmt: skip
    w = watch.Watcher(deps, "j", Limits(), 0.0, lambda: 0.0)
    offer = Offer(
        provider="counting", instance_type="t", region="r", zone="", market="spot", gpu="T4",
        gpu_count=1, gpu_memory_gb=16, vcpus=4, memory_gb=16, price_per_hour=1.0,
        price_source="test", observed_at="",
    )  # fmt: skip
    target = Provisioned("rec", provider, provider.describe("i-1"), offer, deadline=3600.0)
    return w, target, [now, provider, sink]


def test_outside_poll_is_rate_limited_by_the_capability(tmp_path: Path, paths: Paths) -> None:
    w, target, (now, provider, _) = _watcher(tmp_path, paths, {})
    w._target = target  # watch() would start the thread; check() is what it calls
    for t in range(25):
        now[0] = float(t)
        w.check()
    assert provider.asked == [0.0, 10.0, 20.0]


def test_config_overrides_the_interval_and_bad_values_fail_early(
    tmp_path: Path, paths: Paths
) -> None:
    w, target, (now, provider, _) = _watcher(tmp_path, paths, {"notice_poll_s": 3})
    w._target = target
    for t in range(7):
        now[0] = float(t)
        w.check()
    assert provider.asked == [0.0, 3.0, 6.0]
    bad, target, _ = _watcher(tmp_path, paths, {"notice_poll_s": "often"})
    with pytest.raises(ConfigError, match="notice_poll_s"):
        bad.watch(target)


def test_an_inside_notice_trips_the_watcher(tmp_path: Path, paths: Paths) -> None:
    w, target, (now, _, sink) = _watcher(tmp_path, paths, {})
    w._target = target
    now[0] = 100.0
    w.advisory(100.0, "rebalance recommendation (aws-imds)")
    assert w.reason is None and "interruption risk is up" in sink.lines[-1]
    w.notice(130.0, "preempt (aws-imds, terminate)")
    assert w.reason == watch.PREEMPTED and w.stop.is_set()
    assert "from the instance: preempt (aws-imds, terminate) (in 30 s)" in w.detail
    json.dumps(w.detail)  # a plain string for the event log


def test_acknowledge_is_best_effort(tmp_path: Path) -> None:
    """No watcher state on the instance (or a broken connection): no exception, the cloud
    simply goes ahead at its own time."""
    m = LocalMachine(tmp_path / "ws")
    assert notice.acknowledge(m) is False  # .cloudgpu/ was never made there
    Path(state_dir(m)).mkdir(parents=True)
    assert notice.acknowledge(m) is True and (Path(state_dir(m)) / notice.ACK).exists()
