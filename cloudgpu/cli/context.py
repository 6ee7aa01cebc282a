"""What every command needs (paths, config, providers, state), built once per process
from the environment and passed down; commands never reach for globals themselves."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import click

from cloudgpu.config import Config, load_config
from cloudgpu.paths import Paths, default_paths
from cloudgpu.registry import Registry
from cloudgpu.state.store import Store


@dataclass
class App:
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    @cached_property
    def paths(self) -> Paths:
        return default_paths(dict(self.env))

    @cached_property
    def config(self) -> Config:
        return load_config(self.paths.config_file)

    @cached_property
    def registry(self) -> Registry:
        return Registry(self.config, self.paths, self.env)

    def store(self) -> Store:
        self.paths.ensure()
        return Store.open(self.paths.state_db)


def get_app() -> App:
    """The App of the current click invocation (created on first use)."""
    ctx = click.get_current_context()
    root = ctx.find_root()
    if not isinstance(root.obj, App):
        root.obj = App()
    return root.obj


pass_app = click.make_pass_decorator(App, ensure=True)
