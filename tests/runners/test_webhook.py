from __future__ import annotations

import json

from cloudgpu.runners.webhook import (
    ReplayGuard,
    parse_workflow_job,
    signature,
    verify_signature,
)

# GitHub's documented test vector (docs.github.com, "Validating webhook deliveries").
SECRET = b"It's a Secret to Everybody"
BODY = b"Hello, World!"
EXPECTED = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_github_published_test_vector() -> None:
    assert signature(SECRET, BODY) == EXPECTED
    assert verify_signature(SECRET, BODY, EXPECTED)


def test_bad_signatures_rejected() -> None:
    assert not verify_signature(SECRET, BODY, None)
    assert not verify_signature(SECRET, BODY, "")
    assert not verify_signature(SECRET, BODY, EXPECTED.replace("sha256=", "sha1="))
    assert not verify_signature(SECRET, BODY + b" ", EXPECTED)
    assert not verify_signature(b"other", BODY, EXPECTED)


def test_replay_guard() -> None:
    guard = ReplayGuard(capacity=2)
    assert guard.first_time("a")
    assert not guard.first_time("a")
    assert guard.first_time("b") and guard.first_time("c")
    assert guard.first_time("a")  # evicted after capacity


def test_parse_workflow_job() -> None:
    body = json.dumps(
        {
            "action": "queued",
            "workflow_job": {
                "id": 7,
                "run_id": 3,
                "labels": ["self-hosted", "gpu-a100"],
                "runner_name": None,
                "status": "queued",
            },
            "repository": {"full_name": "o/r", "private": True},
        }
    ).encode()
    ev = parse_workflow_job(body)
    assert (ev.action, ev.job_id, ev.repo, ev.labels, ev.private) == (
        "queued",
        7,
        "o/r",
        ("self-hosted", "gpu-a100"),
        True,
    )
    assert ev.runner_name == ""
