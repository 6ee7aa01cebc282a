"""A small GitHub REST client for self-hosted runner management.

Only the endpoints cloudgpu needs (REFERENCE.md section 8; docs:
https://docs.github.com/en/rest/actions/self-hosted-runners and
https://docs.github.com/en/rest/actions/workflow-jobs):

    POST   /repos/{repo}/actions/runners/generate-jitconfig   -> 201 {runner, encoded_jit_config}
    GET    /repos/{repo}/actions/runners?name=&per_page=&page= -> {total_count, runners: [...]}
    GET    /repos/{repo}/actions/runners/{id}
    DELETE /repos/{repo}/actions/runners/{id}                 -> 204; 422 busy; 404 gone
    GET    /repos/{repo}/actions/jobs/{id}
    GET    /repos/{repo}

The token is held in memory only and never appears in an exception message or a log
line: every error text passes through cloudgpu.errors.redact, and the token is never
formatted into one. The transport is plain urllib so no HTTP library is required;
``base_url`` (GITHUB_API_URL in Actions) lets tests point it at a loopback server.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cloudgpu.errors import (
    AuthError,
    ConfigError,
    NotFoundError,
    ProviderError,
    TransientError,
)
from cloudgpu.retry import Backoff, Retry, retrying

API_VERSION = "2022-11-28"
DEFAULT_BASE_URL = "https://api.github.com"
# Labels GitHub gives every self-hosted runner; a custom label may not collide with them.
DEFAULT_LABELS = frozenset({"self-hosted", "linux", "x64", "arm64", "arm", "windows", "macos"})


class RunnerBusy(ProviderError):
    """DELETE refused with 422: the runner is running a job."""


@dataclass(frozen=True)
class Runner:
    id: int
    name: str
    status: str  # "online" | "offline"
    busy: bool
    labels: tuple[str, ...]

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> Runner:
        return cls(
            id=int(data["id"]),
            name=str(data["name"]),
            status=str(data.get("status", "offline")),
            busy=bool(data.get("busy", False)),
            labels=tuple(str(label["name"]) for label in data.get("labels", [])),
        )


@dataclass(frozen=True)
class JitConfig:
    runner: Runner
    encoded_jit_config: str  # a secret: pass it on stdin or a 0600 file, never log it

    def __repr__(self) -> str:  # keep the secret out of reprs and tracebacks
        return f"JitConfig(runner={self.runner!r}, encoded_jit_config=***)"


def validate_repo(repo: str) -> str:
    owner, _, name = repo.partition("/")
    if not owner or not name or "/" in name or any(c.isspace() for c in repo):
        raise ConfigError(f"--repo: expected OWNER/NAME, got '{repo}'")
    return repo


def validate_labels(labels: list[str]) -> list[str]:
    clash = sorted({lbl.lower() for lbl in labels} & DEFAULT_LABELS)
    if clash:
        raise ConfigError(
            f"--labels: {', '.join(clash)} collide with GitHub's default runner labels",
            hint="use labels of your own; cloudgpu adds a unique per-run label itself",
        )
    bad = [lbl for lbl in labels if not lbl or "," in lbl or len(lbl) > 256]
    if bad:
        raise ConfigError(f"--labels: invalid label(s) {bad}: expected non-empty, no commas")
    return labels


class GitHubClient:
    def __init__(
        self,
        token: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        max_retries: int = 4,
    ) -> None:
        if not token:
            raise AuthError(
                "no GitHub token",
                provider="github",
                hint="set GITHUB_TOKEN (a GitHub App installation token, or a fine-grained "
                "token with 'Administration: write' on the repository)",
            )
        self._token = token
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.sleep = sleep
        self.max_retries = max_retries

    # -- transport -------------------------------------------------------------------

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, Any]:
        url = f"{self.base_url}{path}"
        data = json.dumps(body).encode() if body is not None else None
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "Authorization": f"Bearer {self._token}",
            "User-Agent": "cloudgpu",
        }
        if data is not None:
            headers["Content-Type"] = "application/json"

        def once() -> tuple[int, Any]:
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read()
                    return resp.status, json.loads(raw) if raw else None
            except urllib.error.HTTPError as exc:
                answer = _Answer(exc.code, _json_or_text(exc.read()))
                again, wait = _rate_limit_wait(exc.code, exc.headers)
                if again:
                    raise Retry(answer, wait) from None
                raise answer from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                reason = getattr(exc, "reason", exc)
                error = TransientError(f"cannot reach {self.base_url}: {reason}", provider="github")
                raise Retry(error) from exc

        backoff = Backoff(attempts=self.max_retries + 1, base_s=1.0, max_s=10.0)
        try:
            return retrying(once, backoff, sleep=self.sleep)
        except _Answer as answer:  # the last answer, retried or not, for _check to map
            return answer.status, answer.payload

    def _check(self, status: int, payload: Any, what: str, repo: str) -> None:
        if status < 400:
            return
        message = payload.get("message", "") if isinstance(payload, dict) else str(payload)
        if status == 401:
            raise AuthError(f"{what}: bad or expired token ({message})", provider="github")
        if status == 403:
            raise AuthError(
                f"{what} on {repo}: forbidden ({message})",
                provider="github",
                hint="the token needs repository permission 'Administration: write' "
                "(or organization 'Self-hosted runners: write')",
            )
        if status == 404:
            raise NotFoundError(
                f"{what}: {repo} not found or not visible to this token", provider="github"
            )
        if status == 409:
            raise ConfigError(f"{what}: conflict: {message}")
        if status >= 500 or status == 429:
            raise TransientError(f"{what}: GitHub answered {status}: {message}", provider="github")
        raise ProviderError(f"{what}: GitHub answered {status}: {message}", provider="github")

    # -- endpoints -------------------------------------------------------------------

    def repository(self, repo: str) -> dict[str, Any]:
        status, payload = self._request("GET", f"/repos/{validate_repo(repo)}")
        self._check(status, payload, "read repository", repo)
        return dict(payload)

    def generate_jitconfig(
        self,
        repo: str,
        name: str,
        labels: list[str],
        *,
        runner_group_id: int = 1,
        work_folder: str = "_work",
    ) -> JitConfig:
        body = {
            "name": name,
            "runner_group_id": runner_group_id,
            "labels": labels,
            "work_folder": work_folder,
        }
        status, payload = self._request(
            "POST", f"/repos/{validate_repo(repo)}/actions/runners/generate-jitconfig", body
        )
        self._check(status, payload, "create just-in-time runner", repo)
        return JitConfig(Runner.from_api(payload["runner"]), str(payload["encoded_jit_config"]))

    def runners(self, repo: str, name: str | None = None) -> list[Runner]:
        out: list[Runner] = []
        page = 1
        while True:
            query = {"per_page": "100", "page": str(page)}
            if name:
                query["name"] = name
            path = f"/repos/{validate_repo(repo)}/actions/runners?{urllib.parse.urlencode(query)}"
            status, payload = self._request("GET", path)
            self._check(status, payload, "list runners", repo)
            batch = [Runner.from_api(r) for r in payload.get("runners", [])]
            out.extend(batch)
            if len(batch) < 100 or len(out) >= int(payload.get("total_count", 0)):
                return out
            page += 1

    def runner(self, repo: str, runner_id: int) -> Runner | None:
        status, payload = self._request(
            "GET", f"/repos/{validate_repo(repo)}/actions/runners/{runner_id}"
        )
        if status == 404:
            return None
        self._check(status, payload, "read runner", repo)
        return Runner.from_api(payload)

    def delete_runner(self, repo: str, runner_id: int) -> bool:
        """Remove a runner. True if removed, False if it was already gone (404).
        Raises RunnerBusy on 422 (it is running a job)."""
        status, payload = self._request(
            "DELETE", f"/repos/{validate_repo(repo)}/actions/runners/{runner_id}"
        )
        if status == 404:
            return False
        if status == 422:
            raise RunnerBusy(f"runner {runner_id} is busy running a job", provider="github")
        self._check(status, payload, "delete runner", repo)
        return True

    def job(self, repo: str, job_id: int) -> dict[str, Any] | None:
        status, payload = self._request(
            "GET", f"/repos/{validate_repo(repo)}/actions/jobs/{job_id}"
        )
        if status == 404:
            return None
        self._check(status, payload, "read workflow job", repo)
        return dict(payload)


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return raw.decode("utf-8", "replace")[:200]


class _Answer(Exception):
    """An HTTP error answer, carried out of the retry loop to be mapped by _check."""

    def __init__(self, status: int, payload: Any) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.payload = status, payload


def _rate_limit_wait(status: int, headers: Any) -> tuple[bool, float | None]:
    """Whether to retry a rate-limited or failing call, and the server's wait (None: the
    backoff's own).

    GitHub signals primary limits with 403/429 and x-ratelimit-remaining: 0 plus
    x-ratelimit-reset, secondary limits with retry-after
    (https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api).
    Waits are capped so a command never hangs for long.
    """
    if status in (403, 429):
        retry_after = headers.get("retry-after") if headers else None
        if retry_after:
            return True, min(float(retry_after), 60.0)
        if headers and headers.get("x-ratelimit-remaining") == "0":
            reset = float(headers.get("x-ratelimit-reset") or 0)
            return True, min(max(reset - time.time(), 1.0), 60.0)
        return False, None
    return status in (502, 503, 504), None
