"""A fake GitHub REST API on loopback, keeping state the way GitHub does, for the
runner tests. Shapes follow https://docs.github.com/en/rest/actions/self-hosted-runners
(runner objects, {total_count, runners}, generate-jitconfig -> 201 {runner,
encoded_jit_config}, DELETE 204/404/422) and
https://docs.github.com/en/rest/actions/workflow-jobs (job objects).

Besides the public endpoints it serves a few ``/_runner/...`` endpoints that only the
stand-in runner binary uses (the real runner talks to the Actions service instead):
go online, take a queued job that matches its labels (busy), finish it (the JIT runner
is then removed, as GitHub removes single-use runners), and ``/_download/...`` for the
runner tarball the bootstrap fetches.
"""

from __future__ import annotations

import base64
import itertools
import json
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

DEFAULT_LABELS = [("self-hosted", "read-only"), ("Linux", "read-only"), ("X64", "read-only")]


@dataclass
class FakeRunner:
    id: int
    name: str
    labels: list[str]
    secret: str
    status: str = "offline"
    busy: bool = False
    job_id: int | None = None

    def to_api(self) -> dict[str, Any]:
        labels = [{"id": i + 1, "name": n, "type": t} for i, (n, t) in enumerate(DEFAULT_LABELS)]
        labels += [{"id": 100 + i, "name": n, "type": "custom"} for i, n in enumerate(self.labels)]
        return {
            "id": self.id,
            "name": self.name,
            "os": "Linux",
            "status": self.status,
            "busy": self.busy,
            "runner_group_id": 1,
            "labels": labels,
        }


@dataclass
class FakeJob:
    id: int
    repo: str
    labels: list[str]
    script: str
    status: str = "queued"  # queued | in_progress | completed
    conclusion: str | None = None
    runner_id: int | None = None
    runner_name: str | None = None

    def to_api(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "run_id": 1000 + self.id,
            "status": self.status,
            "conclusion": self.conclusion,
            "labels": self.labels,
            "runner_id": self.runner_id,
            "runner_name": self.runner_name,
            "name": f"job-{self.id}",
            "workflow_name": "gpu",
        }


@dataclass
class FakeGitHub:
    token: str = "ghs_" + "t" * 36
    readonly_token: str = "ghs_" + "r" * 36
    repos: dict[str, bool] = field(default_factory=lambda: {"acme/models": True})  # -> private
    runners: dict[int, FakeRunner] = field(default_factory=dict)
    jobs: dict[int, FakeJob] = field(default_factory=dict)
    downloads: dict[str, bytes] = field(default_factory=dict)
    rate_limited: int = 0  # answer the next N API calls with 403 + x-ratelimit-remaining: 0
    requests: list[tuple[str, str]] = field(default_factory=list)
    issued_jit: list[str] = field(default_factory=list)  # every encoded_jit_config handed out
    base_url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def queue_job(self, repo: str, labels: list[str], script: str = "echo hello") -> int:
        with self.lock:
            job = FakeJob(next(self._ids), repo, labels, script)
            self.jobs[job.id] = job
            return job.id

    def runner_by_name(self, name: str) -> FakeRunner | None:
        return next((r for r in self.runners.values() if r.name == name), None)

    # -- request handling (called with the lock held) --------------------------------

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], auth: str, body: dict[str, Any]
    ) -> tuple[int, Any, dict[str, str]]:
        self.requests.append((method, path))
        parts = path.strip("/").split("/")
        if parts[0] == "_runner":
            return self._runner_api(parts[1:], body)
        if parts[0] == "_download":
            return 200, self.downloads.get("/".join(parts[1:]), b""), {}
        if self.rate_limited > 0:
            self.rate_limited -= 1
            return (
                403,
                {"message": "API rate limit exceeded"},
                {"x-ratelimit-remaining": "0", "retry-after": "0"},
            )
        if auth not in (f"Bearer {self.token}", f"Bearer {self.readonly_token}"):
            return 401, {"message": "Bad credentials"}, {}
        if parts[0] != "repos" or len(parts) < 3:
            return 404, {"message": "Not Found"}, {}
        repo = f"{parts[1]}/{parts[2]}"
        if repo not in self.repos:
            return 404, {"message": "Not Found"}, {}
        rest = parts[3:]
        if not rest:
            return 200, {"full_name": repo, "private": self.repos[repo]}, {}
        if auth == f"Bearer {self.readonly_token}":
            return 403, {"message": "Resource not accessible by integration"}, {}
        return self._actions(method, repo, rest, query, body)

    def _actions(
        self,
        method: str,
        repo: str,
        rest: list[str],
        query: dict[str, list[str]],
        body: dict[str, Any],
    ) -> tuple[int, Any, dict[str, str]]:
        if rest[:2] == ["actions", "runners"]:
            if len(rest) == 3 and rest[2] == "generate-jitconfig" and method == "POST":
                return self._jit(body)
            if len(rest) == 2 and method == "GET":
                name = query.get("name", [None])[0]
                found = [r.to_api() for r in self.runners.values() if not name or r.name == name]
                return 200, {"total_count": len(found), "runners": found}, {}
            if len(rest) == 3:
                runner = self.runners.get(int(rest[2]))
                if runner is None:
                    return 404, {"message": "Not Found"}, {}
                if method == "GET":
                    return 200, runner.to_api(), {}
                if method == "DELETE":
                    if runner.busy:
                        return 422, {"message": "Bad request - Runner is busy"}, {}
                    del self.runners[runner.id]
                    return 204, None, {}
        if rest[:2] == ["actions", "jobs"] and len(rest) == 3:
            job = self.jobs.get(int(rest[2]))
            return (200, job.to_api(), {}) if job else (404, {"message": "Not Found"}, {})
        return 404, {"message": "Not Found"}, {}

    def _jit(self, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        name = body.get("name")
        labels = body.get("labels")
        if not name or not isinstance(labels, list) or not labels or "runner_group_id" not in body:
            return 422, {"message": "Invalid request"}, {}
        if self.runner_by_name(name):
            return 409, {"message": "Already exists - A runner with the name already exists."}, {}
        runner = FakeRunner(next(self._ids), name, list(labels), secrets.token_hex(16))
        self.runners[runner.id] = runner
        blob = {
            "runner_id": runner.id,
            "name": name,
            "server_url": self.base_url,
            "secret": runner.secret,
        }
        encoded = base64.b64encode(json.dumps(blob).encode()).decode()
        self.issued_jit.append(encoded)
        return 201, {"runner": runner.to_api(), "encoded_jit_config": encoded}, {}

    def _runner_api(
        self, parts: list[str], body: dict[str, Any]
    ) -> tuple[int, Any, dict[str, str]]:
        runner = self.runners.get(int(parts[0])) if parts and parts[0].isdigit() else None
        if runner is None or body.get("secret") != runner.secret:
            return 404, {"message": "Not Found"}, {}
        action = parts[1] if len(parts) > 1 else ""
        if action == "online":
            runner.status = "online"
            return 200, {}, {}
        if action == "acquire":
            for job in self.jobs.values():
                if job.status == "queued" and set(job.labels) <= {
                    "self-hosted",
                    "linux",
                    "x64",
                    *[lbl.lower() for lbl in runner.labels],
                } | set(runner.labels):
                    job.status, job.runner_id, job.runner_name = (
                        "in_progress",
                        runner.id,
                        runner.name,
                    )
                    runner.busy, runner.job_id = True, job.id
                    return 200, {"job_id": job.id, "script": job.script}, {}
            return 204, None, {}
        if action == "complete":
            job = self.jobs[int(body["job_id"])]
            job.status = "completed"
            job.conclusion = "success" if int(body.get("exit_code", 1)) == 0 else "failure"
            # single-use runner: GitHub removes it once its job is done
            self.runners.pop(runner.id, None)
            return 200, {}, {}
        if action == "offline":
            runner.status = "offline"
            return 200, {}, {}
        return 404, {"message": "Not Found"}, {}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _serve(self, method: str) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        fake = self.server.fake
        with fake.lock:
            status, payload, headers = fake.handle(
                method, url.path, parse_qs(url.query), self.headers.get("Authorization", ""), body
            )
        data = (
            payload
            if isinstance(payload, bytes)
            else (b"" if payload is None else json.dumps(payload).encode())
        )
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeGitHub


@contextmanager
def serve_fake_github(fake: FakeGitHub | None = None) -> Iterator[FakeGitHub]:
    fake = fake or FakeGitHub()
    server = _Server(("127.0.0.1", 0), _Handler)
    server.fake = fake
    fake.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
