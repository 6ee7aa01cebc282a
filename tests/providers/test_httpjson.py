"""cloudgpu.httpjson against a real loopback HTTP server: retry policy, Retry-After, token
hygiene and the hooks the providers plug their error shapes into."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from cloudgpu.errors import AuthError, ProviderError, TransientError
from cloudgpu.httpjson import JsonHttpClient, RetryableError, parse_json
from tests.backoff import jittered
from tests.fixtures.http_fake import LoopbackJsonServer

TOKEN = "tok_secret_0123456789abcdef"


class Scripted(LoopbackJsonServer):
    """Answers the queued (status, payload, headers) in order, then 200 {"ok": true}."""

    methods = ("GET", "POST")

    def __init__(self) -> None:
        super().__init__()
        self.queue: list[tuple[int, Any]] = []
        self.seen: list[tuple[str, str, str | None, Any]] = []

    def respond(
        self, method: str, path: str, headers: Mapping[str, str], body: Any
    ) -> tuple[int, Any]:
        with self._lock:
            self.seen.append((method, path, headers.get("Authorization"), body))
            return self.queue.pop(0) if self.queue else (200, {"ok": True})


class RetryAfterScripted(Scripted):
    """Sends ``Retry-After`` with every non-200 answer (the base has no header hook)."""

    def _handler(self) -> Any:
        handler = super()._handler()
        send_response = handler.send_response

        def with_retry_after(self: Any, code: int, message: str | None = None) -> None:
            send_response(self, code, message)
            if code != 200:
                self.send_header("Retry-After", "120")

        handler.send_response = with_retry_after  # type: ignore[method-assign]
        return handler


@pytest.fixture
def server() -> Iterator[Scripted]:
    srv = Scripted().start()
    yield srv
    srv.stop()


def _map(status: int, raw: bytes) -> ProviderError:
    if status == 401:
        return AuthError(f"refused ({status})", provider="t")
    return TransientError(f"HTTP {status}: {raw.decode()}", provider="t")


def _client(url: str, sleeps: list[float], **kw: Any) -> JsonHttpClient:
    return JsonHttpClient(url, sleeps.append, map_status=_map, token=TOKEN, provider="t", **kw)


def _obj(raw: bytes) -> Any:
    return parse_json(raw, "Test", "t")


def test_sends_json_with_the_bearer_token_and_parses_the_answer(server: Scripted) -> None:
    got = _client(server.root_url, []).request("POST", "/x", _obj, {"a": 1})
    assert got == {"ok": True}
    assert server.seen == [("POST", "/x", f"Bearer {TOKEN}", {"a": 1})]


def test_refused_statuses_are_retried_with_doubling_backoff(server: Scripted) -> None:
    server.queue = [(429, {}), (503, {}), (502, {})]
    sleeps: list[float] = []
    assert _client(server.root_url, sleeps).request("GET", "/", _obj) == {"ok": True}
    assert jittered(sleeps, [1.0, 2.0, 4.0])


def test_the_last_error_is_raised_after_the_attempts_run_out(server: Scripted) -> None:
    server.queue = [(503, {"n": i}) for i in range(3)]
    sleeps: list[float] = []
    with pytest.raises(TransientError, match=r'HTTP 503: \{"n": 2\}'):
        _client(server.root_url, sleeps, attempts=3).request("GET", "/", _obj)
    assert jittered(sleeps, [1.0, 2.0])


def test_other_statuses_are_mapped_and_not_retried(server: Scripted) -> None:
    server.queue = [(401, {})]
    sleeps: list[float] = []
    with pytest.raises(AuthError):
        _client(server.root_url, sleeps).request("GET", "/", _obj)
    assert sleeps == [] and len(server.seen) == 1


def test_retry_after_is_honoured_and_capped() -> None:
    srv = RetryAfterScripted().start()
    try:
        srv.queue = [(429, {}), (429, {})]
        sleeps: list[float] = []
        _client(srv.root_url, sleeps).request("GET", "/", _obj)
        assert sleeps == [30.0, 30.0]  # the server asked for 120 s; the cap is 30 s
        srv.queue = [(429, {})]
        sleeps.clear()
        _client(srv.root_url, sleeps, retry_after_cap_s=None).request("GET", "/", _obj)
        assert sleeps == [120.0]
    finally:
        srv.stop()


def test_unreachable_is_retried_only_for_safe_methods_and_hides_the_token() -> None:
    sleeps: list[float] = []
    client = _client("http://127.0.0.1:9", sleeps, attempts=3)
    with pytest.raises(TransientError, match=r"cannot reach http://127\.0\.0\.1:9") as info:
        client.request("GET", "/", _obj)
    assert jittered(sleeps, [1.0, 2.0])
    sleeps.clear()
    with pytest.raises(TransientError):
        client.request("POST", "/", _obj, {})
    assert jittered(sleeps, [1.0, 2.0])  # refused: nothing was sent, so nothing can have landed
    assert TOKEN not in str(info.value) and TOKEN not in repr(client)


def test_a_create_whose_answer_is_lost_or_gateway_failed_is_not_sent_twice(
    server: Scripted,
) -> None:
    sleeps: list[float] = []
    for status in (502, 504):
        server.queue = [(status, {})]
        with pytest.raises(TransientError):
            _client(server.root_url, sleeps).request("POST", "/", _obj, {})
        assert sleeps == []  # the backend may have acted: the caller looks before resending
    server.queue = [(503, {}), (429, {})]  # refused without acting: sent again
    assert _client(server.root_url, sleeps).request("POST", "/", _obj, {}) == {"ok": True}
    assert len(sleeps) == 2


def test_parse_hook_can_ask_for_another_try(server: Scripted) -> None:
    server.queue = [(200, {"busy": True})]
    sleeps: list[float] = []

    def parse(raw: bytes) -> Any:
        body = json.loads(raw)
        if body.get("busy"):
            raise RetryableError(TransientError("busy", provider="t"))
        return body

    assert _client(server.root_url, sleeps).request("GET", "/", parse) == {"ok": True}
    assert jittered(sleeps, [1.0])


def test_a_full_url_overrides_the_base(server: Scripted) -> None:
    _client("http://127.0.0.1:9", []).request("GET", "", _obj, url=server.root_url + "/page?n=2")
    assert server.seen[0][1] == "/page?n=2"
