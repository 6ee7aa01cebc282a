"""A job's own measured speed, as it reports it, recorded for the planner.

A job reports its throughput either way (both documented in the README):
- a line on stdout: ``cloudgpu: tokens_per_s=12345.6`` (more ``key=value`` pairs may
  follow; the last such line wins);
- a JSON object in the file named by ``$CLOUDGPU_METRICS`` (set for every run), e.g.
  ``{"tokens_per_s": 12345.6}``; the file wins over stdout when both are there.
``tokens_per_s`` is what the whole job processes per second: tokens trained on (all
GPUs together) for training kinds, tokens generated for inference. An optional
``layout`` string (e.g. "ZeRO-3, TP=2") is kept beside it.

Everything here is hostile input: lines longer than MAX_LINE are dropped, the file is
read only when it is a regular file (not a symlink) and only its first MAX_FILE bytes,
and a value must be a finite number in (0, MAX_TOKENS_PER_S]. A successful run with a
workload block and a valid figure becomes one row of the state store's runs table
(cloudgpu.state.runs); nothing else about the job is stored.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Callable
from typing import Any

from cloudgpu.catalog.offer import Offer
from cloudgpu.errors import CloudGPUError
from cloudgpu.remote import Machine
from cloudgpu.spec.model import JobSpec
from cloudgpu.state import runs
from cloudgpu.state.store import Store

METRICS_ENV = "CLOUDGPU_METRICS"
PREFIX = b"cloudgpu: "
MAX_LINE = 4096
MAX_FILE = 65536
MAX_TOKENS_PER_S = 1e12
METRICS_FILE = ".cloudgpu-metrics.json"


def parse_value(value: Any) -> float | None:
    """A tokens/s figure if ``value`` is a plausible one, else None."""
    if isinstance(value, bool):
        return None
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) and 0 < x <= MAX_TOKENS_PER_S else None


def parse_line(line: bytes) -> dict[str, str]:
    """The ``key=value`` pairs of one ``cloudgpu: ...`` line ({} for any other line)."""
    if not line.startswith(PREFIX):
        return {}
    try:
        text = line[len(PREFIX) :].decode("utf-8").strip()
    except UnicodeDecodeError:
        return {}
    pairs = {}
    for item in text.split():
        key, sep, value = item.partition("=")
        if sep and key:
            pairs[key] = value
    return pairs


class MetricsTap:
    """Passes a job's stdout through to ``sink`` and keeps the last reported figures."""

    def __init__(self, sink: Callable[[bytes], None]) -> None:
        self._sink = sink
        self._partial = b""
        self._overlong = False
        self.tokens_per_s: float | None = None
        self.layout = ""

    def __call__(self, data: bytes) -> None:
        self._sink(data)
        buf = self._partial + data
        *lines, self._partial = buf.split(b"\n")
        for line in lines:
            if not self._overlong:
                self._take(line.rstrip(b"\r"))
            self._overlong = False
        if len(self._partial) > MAX_LINE:  # never keep more than one line's worth
            self._partial, self._overlong = b"", True

    def _take(self, line: bytes) -> None:
        if len(line) > MAX_LINE:
            return
        pairs = parse_line(line)
        value = parse_value(pairs.get("tokens_per_s"))
        if value is not None:
            self.tokens_per_s = value
            self.layout = pairs.get("layout", "")[:200]


def metrics_path(machine: Machine) -> str:
    return f"{machine.nvme_path.rstrip('/')}/{METRICS_FILE}"


def read_file(machine: Machine, path: str) -> tuple[float | None, str]:
    """(tokens/s, layout) from the job's metrics file; (None, "") when absent or bad."""
    got: list[bytes] = []
    quoted = shlex.quote(path)
    try:
        rc = machine.run(
            f"[ -f {quoted} ] && [ ! -L {quoted} ] && head -c {MAX_FILE} -- {quoted}",
            on_stdout=got.append,
            timeout=30,
        )
    except CloudGPUError:
        return None, ""  # the job succeeded; losing its metrics must not fail it
    if rc != 0 or not got:
        return None, ""
    try:
        data = json.loads(b"".join(got)[:MAX_FILE].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, ""
    if not isinstance(data, dict):
        return None, ""
    layout = data.get("layout")
    return parse_value(data.get("tokens_per_s")), layout[:200] if isinstance(layout, str) else ""


def record_run(
    store: Store,
    job_id: str,
    job: JobSpec,
    offer: Offer,
    tap: MetricsTap,
    machine: Machine,
    path: str,
    now: float,
) -> runs.RunRecord | None:
    """Record what the finished job reported (file first, then stdout); None when it
    reported nothing usable or has no workload to attach it to."""
    if not job.workload or not offer.gpu_count:
        return None
    value, layout = read_file(machine, path)
    source = "file"
    if value is None:
        value, layout, source = tap.tokens_per_s, tap.layout, "stdout"
    if value is None:
        return None
    rec = runs.RunRecord(
        job_id=job_id,
        provider=offer.provider,
        instance_type=offer.instance_type,
        gpu=offer.gpu,
        gpu_count=offer.gpu_count,
        tokens_per_s=value,
        source=source,
        recorded_at=now,
        workload=dict(job.workload),
        num_nodes=max(1, job.num_nodes),
        network_gbps=offer.network_gbps,
        layout=layout,
    )
    runs.record(store, rec)
    return rec
