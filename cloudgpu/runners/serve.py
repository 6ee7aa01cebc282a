"""`cloudgpu runner serve`: a webhook endpoint that turns queued `workflow_job` events
into single-use GPU runners, and reaps them when the job completes.

The HTTP handler does only cheap work (verify the signature, drop replays, match a
pool, enqueue) and answers at once; provisioning happens in a bounded pool of worker
threads, so a burst of deliveries never blocks GitHub's 10-second delivery timeout and
never starts more than ``max_concurrency`` runners at a time (per pool:
``max_concurrent``). What starts and stops a runner is passed in (``Dispatch``), so the
server knows nothing about providers.

Endpoints: ``POST /webhook`` (GitHub deliveries), ``GET /healthz`` (JSON counters).

Exposed to the internet, so bounded: at most ``MAX_CONNECTIONS`` connections are served
at once (more are answered 503 and closed, never given a thread), each socket read times
out after ``READ_TIMEOUT_S`` (an idle keep-alive or a slow sender is dropped), and a body
over ``MAX_BODY`` is refused before it is read.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from cloudgpu.runners.pools import Pool, ServeConfig
from cloudgpu.runners.webhook import (
    ReplayGuard,
    WorkflowJobEvent,
    parse_workflow_job,
    verify_signature,
)

log = logging.getLogger("cloudgpu.runners.serve")

MAX_BODY = 5 * 1024 * 1024  # GitHub caps payloads at 25 MB; workflow_job ones are small
MAX_CONNECTIONS = 64  # served at once; GitHub sends deliveries one connection each
READ_TIMEOUT_S = 10.0  # GitHub gives a delivery 10 s in all


class Dispatch(Protocol):
    def job_still_queued(self, event: WorkflowJobEvent) -> bool: ...
    def start(self, event: WorkflowJobEvent, pool: Pool) -> None: ...
    def reap(self, event: WorkflowJobEvent) -> None: ...


@dataclass
class Counters:
    received: int = 0
    bad_signature: int = 0
    replayed: int = 0
    unmatched: int = 0
    refused_public: int = 0
    started: int = 0
    start_failed: int = 0
    skipped_not_queued: int = 0
    reaped: int = 0
    active: int = 0
    peak_active: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def bump(self, name: str, by: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + by)
            self.peak_active = max(self.peak_active, self.active)

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return {k: v for k, v in vars(self).items() if isinstance(v, int)}


class RunnerService:
    """Queues and workers behind the HTTP endpoint."""

    def __init__(self, config: ServeConfig, secret: bytes, dispatch: Dispatch) -> None:
        if not secret:
            raise ValueError("empty webhook secret")
        self.config = config
        self._secret = secret
        self.dispatch = dispatch
        self.replays = ReplayGuard()
        self.counters = Counters()
        self._queue: queue.Queue[tuple[str, WorkflowJobEvent, Pool | None] | None] = queue.Queue()
        self._pool_slots = {p.name: threading.Semaphore(p.max_concurrent) for p in config.pools}
        self._workers = [
            threading.Thread(target=self._work, name=f"runner-worker-{i}", daemon=True)
            for i in range(config.max_concurrency)
        ]
        for w in self._workers:
            w.start()

    # -- called from the HTTP handler: cheap, never blocks on a provider ------------

    def accept(self, body: bytes, headers: Callable[[str], str | None]) -> tuple[int, str]:
        self.counters.bump("received")
        if not verify_signature(self._secret, body, headers("X-Hub-Signature-256")):
            self.counters.bump("bad_signature")
            return 401, "bad signature"
        delivery = headers("X-GitHub-Delivery") or ""
        if not delivery or not self.replays.first_time(delivery):
            self.counters.bump("replayed")
            return 200, "duplicate delivery ignored"
        event_type = headers("X-GitHub-Event") or ""
        if event_type == "ping":
            return 200, "pong"
        if event_type != "workflow_job":
            return 202, f"ignored event {event_type or '(none)'}"
        try:
            event = parse_workflow_job(body)
        except (ValueError, KeyError, TypeError):
            return 400, "malformed workflow_job payload"
        return self._route(event)

    def _route(self, event: WorkflowJobEvent) -> tuple[int, str]:
        if event.action == "completed":
            self._queue.put(("reap", event, None))
            return 202, "reap queued"
        if event.action != "queued":
            return 202, f"nothing to do for {event.action}"
        if not event.private and not self.config.allow_public_repos:
            self.counters.bump("refused_public")
            return 202, (
                f"refused: {event.repo} is public; self-hosted runners on public repositories "
                "can run code from forks (set allow_public_repos = true to opt in)"
            )
        pool = self.config.pool_for(event.labels)
        if pool is None:
            self.counters.bump("unmatched")
            return 202, f"no pool serves labels {list(event.labels)}"
        self._queue.put(("start", event, pool))
        return 202, f"runner queued in pool {pool.name}"

    # -- workers ---------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            kind, event, pool = item
            try:
                if kind == "reap":
                    self.dispatch.reap(event)
                    self.counters.bump("reaped")
                elif pool is not None:
                    self._start(event, pool)
            except Exception as exc:  # one bad job must not kill the worker
                log.warning("job %s: %s failed: %s", event.job_id, kind, exc)
                if kind == "start":
                    self.counters.bump("start_failed")
            finally:
                self._queue.task_done()

    def _start(self, event: WorkflowJobEvent, pool: Pool) -> None:
        slot = self._pool_slots[pool.name]
        with slot:
            if not self.dispatch.job_still_queued(event):
                self.counters.bump("skipped_not_queued")
                return
            self.counters.bump("active")
            try:
                self.dispatch.start(event, pool)
                self.counters.bump("started")
            finally:
                self.counters.bump("active", -1)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every queued item is handled (tests, shutdown)."""
        done = threading.Event()

        def wait() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        return done.wait(timeout)

    def close(self) -> None:
        for _ in self._workers:
            self._queue.put(None)


class _Handler(BaseHTTPRequestHandler):
    server: WebhookServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out as separate writes; without this, Nagle's algorithm meets
    # the client's delayed ACK and every keep-alive answer waits ~40 ms.
    disable_nagle_algorithm = True

    def setup(self) -> None:
        self.request.settimeout(self.server.read_timeout)  # every read, idle or slow
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/healthz":
            self._reply(200, {"ok": True, **self.server.service.counters.snapshot()})
        else:
            self._reply(404, {"error": "not found"})

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/webhook":
            self._reply(404, {"error": "not found"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        if length <= 0 or length > MAX_BODY:
            self.close_connection = True
            self._reply(413 if length > MAX_BODY else 400, {"error": "bad body length"})
            return
        body = self.rfile.read(length)
        status, message = self.server.service.accept(body, self.headers.get)
        self._reply(status, {"message": message})


class WebhookServer(ThreadingHTTPServer):
    daemon_threads = True
    # listen() backlog: socketserver's 5 drops the SYNs of a burst of deliveries (each
    # retried only after 1 s, 3 s, ...); past the accept, the connection bound applies.
    request_queue_size = 256

    def __init__(
        self,
        address: tuple[str, int],
        service: RunnerService,
        max_connections: int = MAX_CONNECTIONS,
        read_timeout: float = READ_TIMEOUT_S,
    ) -> None:
        super().__init__(address, _Handler)
        self.service = service
        self.read_timeout = read_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        self.refused = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread per connection, up to the bound; beyond it a 503 and close."""
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            try:
                request.sendall(BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n"
    b"Connection: close\r\n\r\n"
)


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"listen: expected HOST:PORT, got '{listen}'")
    return host.strip("[]"), int(port)
