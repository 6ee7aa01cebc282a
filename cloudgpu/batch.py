"""Batch providers: the part of the provider contract for services that run a whole job
as one submission, with no shell to log in to (Kaggle kernels).

A provider whose ``Capabilities.batch`` is true receives the job itself in
``CreateRequest.batch`` (a :class:`BatchJob`): ``create`` submits it and the run starts.
``describe`` reports PENDING while queued, RUNNING while it runs and STOPPED once it has
ended by itself (its outputs are still held by the provider); ``terminate`` cancels a
running submission and deletes what it made. When the run has ended the lifecycle asks
:meth:`BatchProvider.batch_result` for its exit status and log and
:meth:`BatchProvider.fetch_output` for each declared output tree. Nothing here opens a
connection; this module defines types only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # provider.py imports this module for CreateRequest.batch
    from cloudgpu.provider import Instance


@dataclass(frozen=True)
class BatchData:
    """One data source: ``src`` is a local path (absolute) or a provider URI."""

    src: str
    dst: str  # where the job finds it, as the job sees paths (under $CLOUDGPU_NVME)


@dataclass(frozen=True)
class BatchJob:
    """What a batch provider runs: the job's commands, environment, data and outputs."""

    job_id: str
    setup: str
    run: str
    env: Mapping[str, str] = field(default_factory=dict)
    data: tuple[BatchData, ...] = ()
    outputs: tuple[str, ...] = ()  # instance paths whose trees come back
    checkpoint: str = ""  # instance path of the checkpoint dir, "" for none
    timeout_s: float | None = None  # the job's max_runtime, if any
    # The submission (instance id) whose saved checkpoint this one starts from: a job
    # longer than the provider's session limit continues in a next session.
    resume_from: str = ""


@dataclass(frozen=True)
class BatchResult:
    """How a finished submission ended."""

    exit_code: int  # the run's status; 124 when the provider stopped it at its time limit
    log: bytes = b""  # stdout and stderr as the provider kept them
    detail: str = ""  # the provider's own words when it failed the run (never a secret)
    timed_out: bool = False


class BatchProvider(Protocol):
    """The methods a provider with ``Capabilities.batch`` adds to the contract."""

    def batch_result(self, instance: Instance) -> BatchResult:
        """Exit status and log of a submission that has ended (describe() is STOPPED)."""
        ...

    def fetch_output(self, instance: Instance, src: str, dest: Path) -> int:
        """Write the output tree ``src`` (an instance path of the job's outputs) under the
        new directory ``dest``; return the bytes written. Names from the provider are
        hostile: nothing may land outside ``dest``."""
        ...
