"""Job and instance state names the lifecycle writes to the store, and liveness checks.

A job is *live* while the process driving it is alive and it has not finished, or while
its instance is deliberately kept (``--keep``). `down --orphans` removes instances of
jobs that are not live. Reads and writes nothing itself.
"""

from __future__ import annotations

import enum
import os

from cloudgpu.state.store import JobRecord


class JobState(enum.StrEnum):
    """A job's state, in lifecycle order; stored as its string value."""

    PENDING = "pending"
    PROVISIONING = "provisioning"
    BOOTSTRAPPING = "bootstrapping"
    STAGING = "staging"
    SETUP = "setup"
    RUNNING = "running"
    COLLECTING = "collecting"
    TEARING_DOWN = "tearing_down"
    # Final states (KEPT: finished, instance intentionally left running).
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    STOPPED = "stopped"  # a limit or `cloudgpu down` ended it
    KEPT = "kept"

    @property
    def active(self) -> bool:
        return self in ACTIVE

    @property
    def final(self) -> bool:
        return self in FINAL


class InstanceRecordState(enum.StrEnum):
    """An instance record's state: the provider's states plus the ones only we know."""

    REQUESTED = "requested"  # recorded, create call not yet answered
    RUNNING = "running"
    TERMINATED = "terminated"
    PREEMPTED = "preempted"
    PURGED = "purged"  # dropped by `down --purge`: the provider could not be reached


# The members under their short names, as the lifecycle writes them (states.FAILED).
PENDING = JobState.PENDING
PROVISIONING = JobState.PROVISIONING
BOOTSTRAPPING = JobState.BOOTSTRAPPING
STAGING = JobState.STAGING
SETUP = JobState.SETUP
RUNNING = JobState.RUNNING
COLLECTING = JobState.COLLECTING
TEARING_DOWN = JobState.TEARING_DOWN
SUCCEEDED = JobState.SUCCEEDED
FAILED = JobState.FAILED
INTERRUPTED = JobState.INTERRUPTED
STOPPED = JobState.STOPPED
KEPT = JobState.KEPT

ACTIVE = (PENDING, PROVISIONING, BOOTSTRAPPING, STAGING, SETUP, RUNNING, COLLECTING, TEARING_DOWN)
FINAL = (SUCCEEDED, FAILED, INTERRUPTED, STOPPED)

I_REQUESTED = InstanceRecordState.REQUESTED
I_RUNNING = InstanceRecordState.RUNNING
I_TERMINATED = InstanceRecordState.TERMINATED
I_PREEMPTED = InstanceRecordState.PREEMPTED
I_PURGED = InstanceRecordState.PURGED
I_LIVE_EXCLUDE = (I_TERMINATED, I_PREEMPTED, I_PURGED)


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0:1] != ["Z"]
    except OSError:
        return True  # no /proc (macOS): signal 0 said it exists


def lifecycle_running(pid: int | None) -> bool:
    """Is ``pid`` alive and a cloudgpu process (not an unrelated reuse of the number)?"""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"cloudgpu" in fh.read()
    except OSError:
        return True  # no /proc: trust signal 0


def holder(job: JobRecord, host: str) -> bool | None:
    """Does something still hold this job's instances? None: this host cannot tell (the
    job's process runs on another host sharing the store; the instance's lease decides)."""
    if job.state == KEPT:
        return True
    if job.state not in ACTIVE:
        return False
    if job.host and job.host != host:
        return None
    # Plain liveness: a reused pid only delays a sweep; a missed owner would kill a job.
    return pid_alive(job.pid)
