"""A thread that watches a running job: limits, spot preemption notices, vanished instances.

When something must end the job it records why in ``reason`` and sets ``stop``, which
Machine.run honours by killing the job's process group. It polls about once a second:
preemption notices give two minutes or less (AWS) and ~30 s (GCP, Azure), so seconds
matter. Notices come two ways: the instance-side watcher's, read over SSH
(cloudgpu/lifecycle/notice.py calls :meth:`Watcher.notice`), and, as the fallback, the
provider's outside view (Provider.preemption_notice), asked at most every
``notice_poll_s`` seconds: the provider's capability, or ``notice_poll_s`` in its config
table. This is the one place that rate limit lives.
It never tears anything down itself; the lifecycle does, on the main thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from cloudgpu.errors import CloudGPUError, ConfigError
from cloudgpu.lifecycle.deps import Deps
from cloudgpu.lifecycle.provision import LEASE_S, Provisioned
from cloudgpu.provider import Provider
from cloudgpu.spec.model import Limits

POLL_S = 1.0
DESCRIBE_EVERY = 10  # polls between describe() calls (vanished-instance check)
RENEW_EVERY = 60  # polls between lease renewals (the lease lasts LEASE_S)

MAX_RUNTIME = "max_runtime"
MAX_COST = "max_cost"
PREEMPTED = "preempted"
INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM or SIGHUP on the client


class Watcher:
    def __init__(
        self,
        deps: Deps,
        job_id: str,
        limits: Limits,
        started_at: float,
        cost_so_far: Callable[[], float],
    ) -> None:
        self.deps = deps
        self.job_id = job_id
        self.limits = limits
        self.started_at = started_at
        self.cost_so_far = cost_so_far
        self.stop = threading.Event()
        self.reason: str | None = None
        self.detail = ""
        self.lost_id = ""  # the instance a PREEMPTED trip names, where it names one
        self._targets: list[Provisioned] = []  # every node of the job (rank 0 first)
        self._notice_asked = float("-inf")  # when preemption_notice() was last called
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def _target(self) -> Provisioned | None:
        return self._targets[0] if self._targets else None

    @_target.setter
    def _target(self, target: Provisioned | None) -> None:
        self._targets = [target] if target is not None else []

    def watch(self, target: Provisioned, *more: Provisioned) -> None:
        """Start (or retarget after re-provisioning) watching ``target`` and ``more``
        (the other nodes of a multi-node job: losing any one ends the run)."""
        notice_interval(target.provider)  # a bad config value fails here, not every second
        self._targets = [target, *more]
        self._notice_asked = float("-inf")
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="cloudgpu-watch", daemon=True)
            self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(5)

    def reset(self) -> None:
        """Clear a handled preemption; nothing is watched until the next watch()."""
        self._targets = []
        self.reason, self.detail, self.lost_id = None, "", ""
        self.stop.clear()

    def notice(self, at: float, detail: str) -> None:
        """The instance-side watcher's notice (from the notice reader's thread)."""
        t = self._target
        who = t.instance.id if t is not None else "the instance"
        left = max(0.0, at - self.deps.clock())
        self.trip(
            PREEMPTED, f"preemption notice on {who} from the instance: {detail} (in {left:.0f} s)"
        )

    def advisory(self, at: float, detail: str) -> None:
        """A warning that is not a notice yet (AWS rebalance recommendation): said, kept."""
        t = self._target
        who = t.instance.id if t is not None else "the instance"
        self.deps.sink.info(f"{who}: {detail}: interruption risk is up, still running")

    def trip(self, reason: str, detail: str, lost_id: str = "") -> None:
        if self.reason is None:
            self.reason, self.detail, self.lost_id = reason, detail, lost_id
            self.deps.sink.info(detail)
            self.stop.set()

    def _loop(self) -> None:
        n = 0
        while not self._done.wait(POLL_S):
            n += 1
            if self.reason is not None:
                continue
            try:
                if n % RENEW_EVERY == 1:
                    self.renew()
                self.check(describe=n % DESCRIBE_EVERY == 0)
            except CloudGPUError as exc:  # a failed poll is retried, never fatal
                self.deps.sink.info(f"watch: {exc}")
            except Exception as exc:  # a bug here must not kill the watch
                self.deps.sink.info(f"watch: internal error {type(exc).__name__}: {exc}")

    def renew(self) -> None:
        """Tell sweeps from elsewhere this instance is held: its lease tag, moved on."""
        t = self._target
        if t is not None:
            t.provider.renew_lease(t.instance, self.deps.clock() + LEASE_S)

    def check(self, describe: bool = False) -> None:
        now = self.deps.clock()
        lim = self.limits
        if lim.max_runtime_s and now - self.started_at >= lim.max_runtime_s:
            self.trip(MAX_RUNTIME, f"max_runtime {lim.max_runtime_s:g} s reached: stopping")
            return
        if lim.max_cost is not None:
            spent = self.cost_so_far()
            if spent >= lim.max_cost:
                self.trip(
                    MAX_COST, f"max_cost ${lim.max_cost:.2f} reached (${spent:.4f}): stopping"
                )
                return
        targets = list(self._targets)
        if not targets:
            return
        first = targets[0].provider
        if first.capabilities.preemption_notice and self._may_ask(first, now):
            for t in targets:
                at = t.provider.preemption_notice(t.instance)
                if at is not None:
                    left = max(0.0, at - now)
                    iid = t.instance.id
                    self.trip(PREEMPTED, f"spot preemption notice for {iid} (in {left:.0f} s)", iid)
                    return
        for t in targets if describe else ():
            if t.provider.describe(t.instance.id).state.is_gone:
                self.trip(PREEMPTED, f"instance {t.instance.id} vanished", t.instance.id)
                return

    def _may_ask(self, provider: Provider, now: float) -> bool:
        """Whether the outside poll is due: at most once every notice_interval()."""
        if now - self._notice_asked < notice_interval(provider):
            return False
        self._notice_asked = now
        return True


def notice_interval(provider: Provider) -> float:
    """Seconds between outside preemption polls: ``notice_poll_s`` in the provider's
    config table, else its capability."""
    raw = provider.ctx.config.get("notice_poll_s", provider.capabilities.notice_poll_s)
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 <= raw <= 3600:
        raise ConfigError(
            f"providers.{provider.name}.notice_poll_s: expected seconds from 0 to 3600, got {raw!r}"
        )
    return float(raw)
