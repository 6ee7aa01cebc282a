"""Builds boto3 clients from the provider's settings and environment.

boto3 is imported here, lazily, inside :class:`Clients` methods: importing this module
costs nothing. Endpoints come from configuration (``endpoint_url``,
``pricing_endpoint_url``) so tests point the real SDK at a moto server or a loopback
replay server; nothing here is patched. The SDK's own retries are off (total_max_attempts=1):
faults.Caller does the backoff on the provider's injected sleep.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cloudgpu_providers.aws.settings import AwsSettings


class Clients:
    """One boto3 session per provider, and one client per (service, region)."""

    def __init__(self, settings: AwsSettings, env: Mapping[str, str]) -> None:
        self.settings = settings
        self.env = env
        self._session: Any = None
        self._clients: dict[tuple[str, str], Any] = {}

    def _make_session(self) -> Any:
        import boto3

        env = self.env
        if self.settings.profile:
            # A profile named in config wins over env keys, as in boto3 itself.
            return boto3.session.Session(profile_name=self.settings.profile)
        # Otherwise keys in the given environment win, as in the SDK's chain; passing
        # them explicitly makes the provider honour ctx.env rather than os.environ.
        if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
            return boto3.session.Session(
                aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                aws_session_token=env.get("AWS_SESSION_TOKEN") or None,
            )
        return boto3.session.Session(profile_name=env.get("AWS_PROFILE") or None)

    def session(self) -> Any:
        if self._session is None:
            self._session = self._make_session()
        return self._session

    def client(self, service: str, region: str, endpoint_url: str | None = None) -> Any:
        key = (service, region)
        if key not in self._clients:
            from botocore.config import Config

            config = Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=10,
                read_timeout=60,
                user_agent_extra="cloudgpu",
            )
            self._clients[key] = self.session().client(
                service, region_name=region, endpoint_url=endpoint_url, config=config
            )
        return self._clients[key]

    def ec2(self, region: str) -> Any:
        return self.client("ec2", region, self.settings.endpoint_url)

    def sts(self) -> Any:
        return self.client("sts", self.settings.home_region, self.settings.endpoint_url)

    def pricing(self) -> Any:
        # The Price List API is served from us-east-1 (and a few others), whatever
        # region the instances are in.
        return self.client(
            "pricing", self.settings.pricing_region, self.settings.pricing_endpoint_url
        )
