"""`cloudgpu runner serve` webhook latency: 200 signed workflow_job deliveries from a
local client while every accepted job "provisions" in the background for 2 s.

Baseline, in the same run: a bare ThreadingHTTPServer on loopback that reads the body
and answers 200 with no work (what any Python HTTP endpoint costs here). Reported:
median and p95 per request for both, and the ratio. Target: serve p95 <= 100 ms.
"""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cloudgpu.runners.pools import Pool, ServeConfig
from cloudgpu.runners.serve import RunnerService, WebhookServer
from cloudgpu.runners.webhook import WorkflowJobEvent, signature

SECRET = b"bench-secret"
DELIVERIES = 200


class SlowDispatch:
    """Stands in for provisioning: each start takes 2 s of (sleeping) background work."""

    def job_still_queued(self, event: WorkflowJobEvent) -> bool:
        return True

    def start(self, event: WorkflowJobEvent, pool: Pool) -> None:
        time.sleep(2.0)

    def reap(self, event: WorkflowJobEvent) -> None:
        pass


class _Bare(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as the webhook server does, so the comparison is fair

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"message": "ok"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _payload(job_id: int) -> bytes:
    return json.dumps(
        {
            "action": "queued",
            "workflow_job": {"id": job_id, "run_id": 1, "labels": ["self-hosted", "gpu-a100"]},
            "repository": {"full_name": "acme/models", "private": True},
        }
    ).encode()


def _drive(port: int) -> list[float]:
    times = []
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for i in range(DELIVERIES):
        body = _payload(i)
        headers = {
            "X-Hub-Signature-256": signature(SECRET, body),
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-GitHub-Event": "workflow_job",
            "Content-Type": "application/json",
        }
        t0 = time.perf_counter()
        conn.request("POST", "/webhook", body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        times.append(time.perf_counter() - t0)
        if resp.status >= 300:
            raise RuntimeError(f"delivery {i} answered {resp.status}")
    conn.close()
    return times


def _serve(server: ThreadingHTTPServer) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    return t


def _p95(xs: list[float]) -> float:
    return sorted(xs)[int(len(xs) * 0.95) - 1]


def run(results_dir: Path) -> str:
    config = ServeConfig(
        pools=(Pool("a100", frozenset({"gpu-a100"}), "A100:1", max_concurrent=10),),
        max_concurrency=10,
    )
    service = RunnerService(config, SECRET, SlowDispatch())
    serve = WebhookServer(("127.0.0.1", 0), service)
    bare = ThreadingHTTPServer(("127.0.0.1", 0), _Bare)
    _serve(serve)
    _serve(bare)
    try:
        base = _drive(bare.server_address[1])
        ours = _drive(serve.server_address[1])
    finally:
        serve.shutdown()
        bare.shutdown()
        service.close()
    rows = [
        ("bare HTTP server (baseline)", statistics.median(base), _p95(base)),
        ("cloudgpu runner serve", statistics.median(ours), _p95(ours)),
    ]
    ratio = _p95(ours) / _p95(base)
    lines = [
        "# runner serve: webhook answer time",
        "",
        f"{DELIVERIES} signed `workflow_job` deliveries over one keep-alive connection on "
        "loopback; every accepted job provisions for 2 s in the background (10 workers).",
        "",
        "| endpoint | median ms | p95 ms |",
        "|---|---:|---:|",
        *[f"| {name} | {med * 1000:.2f} | {p95 * 1000:.2f} |" for name, med, p95 in rows],
        "",
        f"p95 ratio serve / baseline: {ratio:.2f}x. Target: serve p95 <= 100 ms.",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `python -m bench "
        "runner_serve`.",
    ]
    (results_dir / "runner_serve.md").write_text("\n".join(lines) + "\n")
    return "\n".join(lines[4:9])
