"""What every command needs (paths, config, providers, state), built once per process
from the environment and passed down; commands never reach for globals themselves."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import click

from cloudgpu.catalog import load_registry
from cloudgpu.config import Config, load_config
from cloudgpu.costs.defaults import DEFAULTS_BY_KEY, parse_value
from cloudgpu.errors import ConfigError
from cloudgpu.paths import Paths, default_paths
from cloudgpu.planner import parse_workload
from cloudgpu.registry import Registry
from cloudgpu.spec import JobChecks, JobSpec, load_job
from cloudgpu.spec.fields import Block, Value
from cloudgpu.state.store import LOCK_WAIT_S, Store


@dataclass
class App:
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    @cached_property
    def paths(self) -> Paths:
        return default_paths(dict(self.env))

    @cached_property
    def config(self) -> Config:
        return load_config(self.paths.config_file, {"buy_vs_rent": BUY_VS_RENT})

    @cached_property
    def registry(self) -> Registry:
        registry = Registry(self.config, self.paths, self.env)
        registry.check_config()
        return registry

    def load_job(self, path: str | os.PathLike[str]) -> JobSpec:
        """The job file, validated the one way every command validates it: its form, and
        its GPU, provider and workload against this installation's tables."""
        checks = JobChecks(
            gpu=load_registry().matches,
            providers=self.registry.names(),
            workload=parse_workload,
        )
        return load_job(path, checks)

    def store(self, lock_wait_s: float = LOCK_WAIT_S) -> Store:
        self.paths.ensure()
        return Store.open(self.paths.state_db, lock_wait_s=lock_wait_s)


def _tco_input(key: str) -> Value:
    def parse(raw: Any) -> Any:
        try:
            return parse_value(key, raw, "value")
        except ConfigError as exc:
            raise ValueError(str(exc).removeprefix("value: ")) from None

    return Value({}, parse)


# [buy_vs_rent] in config.toml: the buy-vs-rent model's own inputs, checked by its parser.
BUY_VS_RENT = Block({key: _tco_input(key) for key in DEFAULTS_BY_KEY})


def get_app() -> App:
    """The App of the current click invocation (created on first use)."""
    ctx = click.get_current_context()
    root = ctx.find_root()
    if not isinstance(root.obj, App):
        root.obj = App()
    return root.obj
