"""What one cloudgpu job becomes on Kaggle: its kernel slug (carrying the tags) and source.

Kernels have no labels. A kernel's slug is its title lowercased with dashes, and the
title is at most 50 characters, so the slug carries cloudgpu's tags in a compact form::

    cg-<job>-<instance>-<owner>

``job`` is the job id when it is already slug-safe and at most 30 characters (so the
orphan sweep can ask the state store about it), else ``x`` + an 8-character digest;
``instance`` (TAG_INSTANCE) and ``owner`` (TAG_OWNER) are 5- and 7-character base-36
digests, only ever matched. Kernels whose slug does not parse are someone else's and
are never listed.

The source is runner.py's text plus one line calling its ``main`` with the job's spec.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cloudgpu_providers.tagnames import digest, fields_match

from cloudgpu.batch import BatchJob
from cloudgpu.provider import TAG_INSTANCE, TAG_JOB, TAG_OWNER

PREFIX = "cg-"
MAX_JOB = 30
_INSTANCE_LEN = 5
_OWNER_LEN = 7
_SAFE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
NVME = "/kaggle/temp/nvme"  # the kernel's scratch disk (not saved with the output)
RUNNER = Path(__file__).with_name("runner.py")
JOB_DIGEST = "cloudgpu-job-digest"
INSTANCE_DIGEST = "cloudgpu-instance-digest"
OWNER_DIGEST = "cloudgpu-owner-digest"


_digest = digest


def encode_field(key: str, value: str) -> str | None:
    if key == TAG_JOB:
        ok = len(value) <= MAX_JOB and _SAFE.fullmatch(value) and not value.startswith("x")
        return value if ok else "x" + _digest(value, 8)
    if key == TAG_INSTANCE:
        return _digest(value, _INSTANCE_LEN)
    if key == TAG_OWNER:
        return _digest(value, _OWNER_LEN)
    return None


def slug(tags: Mapping[str, str], idempotency_key: str) -> str:
    job = encode_field(TAG_JOB, tags.get(TAG_JOB, "")) or ""
    inst = encode_field(TAG_INSTANCE, tags.get(TAG_INSTANCE) or idempotency_key) or ""
    owner = encode_field(TAG_OWNER, tags.get(TAG_OWNER, "")) or ""
    return f"{PREFIX}{job}-{inst}-{owner}"


def fields(kernel_slug: str | None) -> dict[str, str] | None:
    if not kernel_slug or not kernel_slug.startswith(PREFIX):
        return None
    parts = kernel_slug[len(PREFIX) :].rsplit("-", 2)
    if len(parts) != 3 or len(parts[1]) != _INSTANCE_LEN or len(parts[2]) != _OWNER_LEN:
        return None
    return {TAG_JOB: parts[0], TAG_INSTANCE: parts[1], TAG_OWNER: parts[2]}


def matches(kernel_slug: str | None, wanted: Mapping[str, str]) -> bool:
    return fields_match(fields(kernel_slug), wanted, encode_field)


def readable_tags(kernel_slug: str | None) -> dict[str, str]:
    enc = fields(kernel_slug)
    if enc is None:
        return {}
    job = enc[TAG_JOB]
    out = {JOB_DIGEST: job} if job.startswith("x") else {TAG_JOB: job}
    return {**out, INSTANCE_DIGEST: enc[TAG_INSTANCE], OWNER_DIGEST: enc[TAG_OWNER]}


def on_kernel(path: str) -> str:
    """A job path as the kernel sees it: /nvme/... lives on the scratch disk."""
    if path == "/nvme" or path.startswith("/nvme/"):
        return NVME + path[len("/nvme") :]
    return path


def spec(
    job: BatchJob,
    data: list[dict[str, str]],
    session_s: float,
    resume_from: str = "",
) -> dict[str, Any]:
    """The JSON runner.main receives; ``data`` is already resolved to datasets."""
    limit = min(session_s, job.timeout_s) if job.timeout_s else session_s
    env = {
        **job.env,
        "CLOUDGPU_JOB": job.job_id,
        "CLOUDGPU_NVME": NVME,
    }
    ckpt = on_kernel(job.checkpoint) if job.checkpoint else ""
    if ckpt:
        env["CLOUDGPU_CHECKPOINT"] = ckpt
    return {
        "nvme": NVME,
        "setup": job.setup,
        "run": job.run,
        "env": env,
        "data": data,
        "outputs": [{"path": o, "at": on_kernel(o)} for o in job.outputs],
        "checkpoint": ckpt,
        "resume_from": resume_from,
        "timeout_s": limit,
        # Stop the run this long before the session ends, to save outputs and checkpoint.
        "margin_s": min(600.0, max(2.0, 0.1 * limit)),
    }


def source(job_spec: Mapping[str, Any]) -> str:
    encoded = base64.b64encode(json.dumps(job_spec).encode()).decode()
    return RUNNER.read_text() + f"\n\nmain({encoded!r})\n"
