"""What a launch records before it provisions: the job's id and its record (the owner tag
is the store's own id: Store.owner_id).

The offers to try come from the one gather + plan path (cloudgpu.planner.choose).
"""

from __future__ import annotations

import uuid
from dataclasses import asdict

from cloudgpu.lifecycle import states
from cloudgpu.spec.model import JobSpec
from cloudgpu.state.store import Store


def new_job_id(name: str) -> str:
    return f"{name[:40]}-{uuid.uuid4().hex[:6]}"


def create_job(store: Store, job: JobSpec, job_id: str, log_path: str) -> None:
    spec = asdict(job)
    # Values in env: may be tokens; the store keeps only the names (the detached process
    # re-reads the job file itself).
    spec["env"] = dict.fromkeys(job.env, "***")
    store.add_job(
        job_id, job.name, spec, spec_path=job.source, log_path=log_path, state=states.PENDING
    )
