"""The webhook endpoint over real HTTP on loopback, with a recording dispatcher."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudgpu.errors import ConfigError
from cloudgpu.runners.pools import Pool, ServeConfig, load_serve_config
from cloudgpu.runners.serve import RunnerService, WebhookServer
from cloudgpu.runners.webhook import WorkflowJobEvent, signature

SECRET = b"s3cret-for-tests"


class RecordingDispatch:
    def __init__(self, hold: float = 0.0) -> None:
        self.hold = hold
        self.started: list[int] = []
        self.reaped: list[int] = []
        self.not_queued: set[int] = set()
        self.active = 0
        self.max_active = 0
        self.lock = threading.Lock()

    def job_still_queued(self, event: WorkflowJobEvent) -> bool:
        return event.job_id not in self.not_queued

    def start(self, event: WorkflowJobEvent, pool: Pool) -> None:
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        time.sleep(self.hold)
        with self.lock:
            self.active -= 1
            self.started.append(event.job_id)

    def reap(self, event: WorkflowJobEvent) -> None:
        self.reaped.append(event.job_id)


def payload(
    job_id: int,
    action: str = "queued",
    labels: tuple[str, ...] = ("self-hosted", "gpu-a100"),
    private: bool = True,
) -> bytes:
    return json.dumps(
        {
            "action": action,
            "workflow_job": {
                "id": job_id,
                "run_id": 1,
                "labels": list(labels),
                "status": action,
                "runner_name": None,
            },
            "repository": {"full_name": "acme/models", "private": private},
        }
    ).encode()


def post(
    url: str,
    body: bytes,
    *,
    secret: bytes = SECRET,
    delivery: str | None = None,
    event: str = "workflow_job",
) -> tuple[int, dict]:
    req = urllib.request.Request(
        f"{url}/webhook",
        data=body,
        method="POST",
        headers={
            "X-Hub-Signature-256": signature(secret, body),
            "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-GitHub-Event": event,
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def make_server(
    dispatch: RecordingDispatch, cap: int = 10, per_pool: int = 10
) -> Iterator[tuple[str, RunnerService]]:
    config = ServeConfig(
        pools=(Pool("a100", frozenset({"gpu-a100"}), "A100:1", max_concurrent=per_pool),),
        max_concurrency=cap,
    )
    service = RunnerService(config, SECRET, dispatch)
    server = WebhookServer(("127.0.0.1", 0), service)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield server.url, service
    finally:
        server.shutdown()
        server.server_close()
        service.close()


@pytest.fixture
def served() -> Iterator[tuple[str, RunnerService, RecordingDispatch]]:
    dispatch = RecordingDispatch()
    for url, service in make_server(dispatch):
        yield url, service, dispatch


def test_signature_replay_labels_public(
    served: tuple[str, RunnerService, RecordingDispatch],
) -> None:
    url, service, dispatch = served
    status, _ = post(url, payload(1), secret=b"wrong")
    assert status == 401
    status, body = post(url, payload(2), delivery="d-1")
    assert status == 202 and "queued" in body["message"]
    status, body = post(url, payload(2), delivery="d-1")
    assert status == 200 and "duplicate" in body["message"]
    status, body = post(url, payload(3, labels=("self-hosted", "gpu-h100")))
    assert status == 202 and "no pool" in body["message"]
    status, body = post(url, payload(4, private=False))
    assert status == 202 and "public" in body["message"]
    status, body = post(url, payload(2, action="completed"))
    assert status == 202
    assert service.drain(10)
    assert dispatch.started == [2] and dispatch.reaped == [2]
    with urllib.request.urlopen(f"{url}/healthz", timeout=5) as resp:
        health = json.loads(resp.read())
    assert health["bad_signature"] == 1 and health["replayed"] == 1 and health["started"] == 1


def test_job_no_longer_queued_is_skipped(
    served: tuple[str, RunnerService, RecordingDispatch],
) -> None:
    url, service, dispatch = served
    dispatch.not_queued.add(9)
    post(url, payload(9))
    assert service.drain(10)
    assert dispatch.started == [] and service.counters.skipped_not_queued == 1


def test_concurrency_is_capped() -> None:
    dispatch = RecordingDispatch(hold=0.05)
    for url, service in make_server(dispatch, cap=10, per_pool=3):
        for job in range(30):
            assert post(url, payload(100 + job))[0] == 202
        assert service.drain(30)
    assert sorted(dispatch.started) == list(range(100, 130))
    assert dispatch.max_active <= 3


def test_pools_config(tmp_path: Path) -> None:
    good = tmp_path / "runners.toml"
    good.write_text(
        'max_concurrency = 5\n[[pools]]\nname = "a"\nlabels = ["gpu-a"]\n'
        'gpu = "A100:1"\nttl = "2h"\n'
    )
    cfg = load_serve_config(good)
    assert cfg.max_concurrency == 5 and cfg.pools[0].ttl_s == 7200
    assert cfg.pool_for(("self-hosted", "gpu-a")) is cfg.pools[0]
    assert cfg.pool_for(("self-hosted",)) is None
    bad = tmp_path / "bad.toml"
    bad.write_text('[[pools]]\nname = "a"\nlabels = ["self-hosted"]\ngpu = "A100"\n')
    with pytest.raises(ConfigError, match="default runner labels"):
        load_serve_config(bad)
    bad.write_text('[[pools]]\nname = "a"\nlabelz = ["x"]\ngpu = "A100"\n')
    with pytest.raises(ConfigError, match="labelz"):
        load_serve_config(bad)


def test_idle_and_slow_connections_are_bounded_and_dropped() -> None:
    """200 idle connections get no 200 threads: past the bound they are answered 503 and
    closed; within it, each is dropped after the read timeout."""
    import socket

    dispatch = RecordingDispatch()
    config = ServeConfig(pools=(Pool("a100", frozenset({"gpu-a100"}), "A100:1"),))
    service = RunnerService(config, SECRET, dispatch)
    server = WebhookServer(("127.0.0.1", 0), service, max_connections=8, read_timeout=2.0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    socks = []
    try:
        before = threading.active_count()
        # The bound is reached first (8 idle connections, each holding a thread until
        # its read times out), so what follows meets it however slow this machine is.
        socks = [socket.create_connection((host, port), timeout=5) for _ in range(8)]
        end = time.monotonic() + 10
        while threading.active_count() - before < 8 and time.monotonic() < end:
            time.sleep(0.01)
        for _ in range(192):
            socks.append(socket.create_connection((host, port), timeout=5))
        # Every one is answered 503 or closed by the server soon; never 200 threads.
        peak, pending, answers = 0, list(socks), []
        end = time.monotonic() + 30
        while pending and time.monotonic() < end:
            peak = max(peak, threading.active_count() - before)
            for s in list(pending):
                s.setblocking(False)
                try:
                    answers.append(s.recv(200))
                    pending.remove(s)
                except BlockingIOError:
                    pass
            time.sleep(0.02)
        assert pending == [] and peak <= 8 + 1
        assert server.refused > 0
        assert any(a.startswith(b"HTTP/1.1 503") for a in answers)
        # One that sends half a request: dropped after the read timeout, not held forever.
        slow = socket.create_connection((host, port), timeout=5)
        slow.sendall(b"POST /webhook HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
        t0 = time.monotonic()
        assert slow.recv(100) == b""  # the server gave up on it
        assert time.monotonic() - t0 < 2.0 + 4  # the read timeout, not forever
        slow.close()
        # Still serving: a real delivery goes through once the idle ones are gone.
        assert post(server.url, payload(7), delivery="d-ok")[0] == 202
        big = urllib.request.Request(
            f"{server.url}/webhook", data=b"x" * 10, method="POST",
            headers={"Content-Length": str(50 * 1024 * 1024)},
        )  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(big, timeout=5)
        assert err.value.code == 413
    finally:
        for s in socks:
            s.close()
        server.shutdown()
        server.server_close()
        service.close()
