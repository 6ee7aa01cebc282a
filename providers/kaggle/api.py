"""Kaggle's public API as the official SDK speaks it, over cloudgpu's small HTTP client.

Every call is ``POST {base}/v1/{service}/{method}`` with a JSON body, which is what
kagglesdk's KaggleHttpClient sends (kagglesdk/kaggle_http_client.py: ``_get_request_url``
and ``_prepare_request``); requests and answers are kagglesdk's own generated types, so
the SDK's field names and type checks build every body and read every answer. We do not
go through KaggleHttpClient itself: its endpoint is fixed per environment (production or
``localhost``), and the ``kaggle`` package authenticates on import. An error answer is
JSON ``{"code": 4xx, "message": ...}`` (the SDK raises on ``code >= 400``).

Only reads are retried after a broken connection: SaveKernel starts a run, so a lost
answer is resolved by asking for the kernel by its slug (provider.py), never by sending
it again. Credentials go in the Authorization header only.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from cloudgpu.errors import (
    AuthError,
    NotFoundError,
    ProviderError,
    QuotaError,
    TransientError,
)
from cloudgpu.httpjson import JsonHttpClient, RetryableError, error_json

PROVIDER = "kaggle"
DEFAULT_BASE_URL = "https://api.kaggle.com"
KEY_HINT = (
    "set KAGGLE_API_TOKEN (and KAGGLE_USERNAME), or KAGGLE_USERNAME + KAGGLE_KEY, or put "
    "kaggle.json in ~/.kaggle (https://www.kaggle.com/settings > API)"
)
# Calls that change nothing: safe to send again after a broken connection.
READS = frozenset(
    {
        "GetKernelSessionStatus",
        "ListKernelSessionOutput",
        "ListKernels",
        "GetKernel",
        "GetAcceleratorQuotaStatistics",
        "GetDatasetStatus",
    }
)

T = TypeVar("T")


@dataclass(frozen=True)
class Credentials:
    """Who calls: a user name (kernel slugs live under it) and the Authorization value."""

    username: str
    authorization: str
    source: str  # where they came from, e.g. "file:~/.kaggle/kaggle.json"; never the secret

    def __repr__(self) -> str:  # never show the secret
        return f"Credentials({self.username!r}, source={self.source!r})"


def _basic(user: str, key: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{key}".encode()).decode()


def _kaggle_json(path: Path) -> tuple[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return "", ""
    if not isinstance(data, dict):
        return "", ""
    return str(data.get("username") or "").strip(), str(data.get("key") or "").strip()


def _token_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def find_credentials(env: dict[str, str], config: dict[str, Any]) -> Credentials | None:
    """The same places, in the same order, as the official client (kaggle_api_extended
    and kagglesdk.kaggle_env): an API token from ``KAGGLE_API_TOKEN`` or
    ``~/.kaggle/access_token``, else the legacy key from ``KAGGLE_USERNAME`` +
    ``KAGGLE_KEY`` or ``kaggle.json`` in ``KAGGLE_CONFIG_DIR`` or ``~/.kaggle``. A token
    does not name its user; ``KAGGLE_USERNAME``, kaggle.json or ``[providers.kaggle]
    username`` does."""
    home = env.get("HOME", "")
    folder = Path(env.get("KAGGLE_CONFIG_DIR") or (Path(home) / ".kaggle" if home else ""))
    file_user, file_key = _kaggle_json(folder / "kaggle.json") if str(folder) else ("", "")
    user = env.get("KAGGLE_USERNAME", "").strip() or str(config.get("username") or "") or file_user
    token = env.get("KAGGLE_API_TOKEN", "").strip()
    if token and Path(token).is_file():  # the variable may name a file holding the token
        token, source = _token_file(Path(token)), "env:KAGGLE_API_TOKEN (file)"
    else:
        source = "env:KAGGLE_API_TOKEN"
    if not token and str(folder):
        token, source = _token_file(folder / "access_token"), "file:~/.kaggle/access_token"
    if token and user:
        return Credentials(user, f"Bearer {token}", source)
    key = env.get("KAGGLE_KEY", "").strip()
    if user and key:
        return Credentials(user, _basic(user, key), "env:KAGGLE_USERNAME+KAGGLE_KEY")
    if file_user and file_key:
        return Credentials(file_user, _basic(file_user, file_key), "file:~/.kaggle/kaggle.json")
    return None


def map_error(status: int, raw: bytes) -> ProviderError:
    parsed, text = error_json(raw)
    message = str(parsed.get("message") or "") if isinstance(parsed, dict) else text
    words = f"{message or 'HTTP ' + str(status)} ({status})"
    if status in (401, 403) and "quota" not in message.lower():
        return AuthError(
            f"Kaggle rejected the credentials: {words}", provider=PROVIDER, hint=KEY_HINT
        )
    if status == 404:
        return NotFoundError(f"Kaggle: {words}", provider=PROVIDER)
    if "quota" in message.lower():
        return QuotaError(f"Kaggle: {words}", provider=PROVIDER)
    if status == 429 or status >= 500:
        return TransientError(f"Kaggle is busy: {words}", provider=PROVIDER)
    return ProviderError(f"Kaggle refused the request: {words}", provider=PROVIDER)


class KaggleApi:
    """One method per RPC used; bodies and answers are kagglesdk objects."""

    def __init__(
        self,
        base_url: str,
        credentials: Credentials,
        sleep: Callable[[float], None],
        *,
        attempts: int = 5,
        backoff_s: float = 1.0,
        timeout_s: float = 30.0,
    ) -> None:
        self.username = credentials.username
        self._http = JsonHttpClient(
            base_url,
            sleep,
            map_status=map_error,
            authorization=credentials.authorization,
            provider=PROVIDER,
            attempts=attempts,
            backoff_s=backoff_s,
            timeout_s=timeout_s,
        )
        self._reads = JsonHttpClient(
            base_url,
            sleep,
            map_status=map_error,
            authorization=credentials.authorization,
            provider=PROVIDER,
            retry_unreachable={"POST"},  # every Kaggle RPC is a POST; these only read
            attempts=attempts,
            backoff_s=backoff_s,
            timeout_s=timeout_s,
        )

    def __repr__(self) -> str:
        return f"KaggleApi({self._http.base_url!r}, user={self.username!r})"

    def call(self, service: str, method: str, request: Any, answer: type[T]) -> T:
        """Send ``request`` (a kagglesdk request object); parse into ``answer``'s type."""
        client = self._reads if method in READS else self._http
        body = type(request).to_dict(request)

        def parse(raw: bytes) -> T:
            try:
                data = json.loads(raw or b"{}")
            except ValueError:
                raise RetryableError(
                    TransientError(f"Kaggle {method} answered with non-JSON", provider=PROVIDER)
                ) from None
            if isinstance(data, dict) and isinstance(data.get("code"), int) and data["code"] >= 400:
                raise map_error(int(data["code"]), raw)
            try:
                parsed: T = answer.from_dict(data)  # type: ignore[attr-defined]
            except (TypeError, ValueError, AttributeError, KeyError) as exc:
                raise ProviderError(
                    f"Kaggle {method} answered in an unexpected shape: {exc}", provider=PROVIDER
                ) from None
            return parsed

        return client.request("POST", f"/v1/{service}/{method}", parse, body)
