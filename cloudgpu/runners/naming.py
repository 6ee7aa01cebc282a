"""Names and tags that tie a runner's GitHub registration to its instance.

Everything is derived from (repository, run tag), so `runner stop` in another job, on
another machine, with an empty state store, still finds what `runner start` made. The
values are safe as GitHub runner names and labels and as tag/label values on every
cloud (GCP labels: lowercase letters, digits, '-' and '_', at most 63 characters).
"""

from __future__ import annotations

import hashlib
import re

PREFIX = "ghr-"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def runner_job_id(repo: str, run_tag: str) -> str:
    """The job id (TAG_JOB), GitHub runner name and unique label of one run's runner."""
    return f"{PREFIX}{_digest(repo.lower(), run_tag)[:16]}"


def repo_owner_tag(repo: str) -> str:
    """The TAG_OWNER value of every runner instance of ``repo`` (what `gc` sweeps)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", repo.lower()).strip("-")[:40]
    return f"{PREFIX}{slug}-{_digest(repo.lower())[:8]}"


def sanitize_run_tag(run_tag: str) -> str:
    if not run_tag or len(run_tag) > 200 or any(c.isspace() for c in run_tag):
        raise ValueError("expected a non-empty run tag without spaces (at most 200 characters)")
    return run_tag
