"""runners.toml (`cloudgpu runner serve --config`) is checked like config.toml: unknown
keys with a did-you-mean, wrong types and impossible values are one line at file:line:
key, exit 2, before anything listens or starts (a NaN max_price never turns the budget
off; spot = "no" is not true)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cloudgpu.errors import ConfigError
from cloudgpu.runners.pools import load_serve_config
from tests.lifecycle.helpers import main_exit

POOL = '[[pools]]\nname = "a"\nlabels = ["gpu-a"]\ngpu = "A100:1"\n'


@pytest.mark.parametrize(
    ("extra", "where", "words"),
    [
        ("max_price = nan", ":5: pools[0].max_price", "finite"),
        ("max_price = -1.0", ":5: pools[0].max_price", "above 0"),
        ('spot = "no"', ":5: pools[0].spot", "true or false"),
        ('ttl = "99999999d"', ":5: pools[0].ttl", "up to"),
        ('idle_timeout = "10"', ":5: pools[0].idle_timeout", "duration"),
        ("max_concurrent = 1e9", ":5: pools[0].max_concurrent", "whole number"),
        ('lables = ["x"]', ":5: pools[0].lables", "did you mean 'labels'"),
        ('providers = [""]', ":5: pools[0].providers[0]", "provider name"),
    ],
)
def test_a_bad_pool_value_is_one_located_line(
    tmp_path: Path, extra: str, where: str, words: str
) -> None:
    path = tmp_path / "runners.toml"
    path.write_text(POOL + extra + "\n")
    with pytest.raises(ConfigError) as ei:
        load_serve_config(path)
    message = str(ei.value)
    assert message.startswith(f"{path}{where}: ") and words in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("max_concurrency = nan\n" + POOL, ":1: max_concurrency"),
        ('allow_public_repos = "yes"\n' + POOL, ":1: allow_public_repos"),
        ("listen_on = 1\n" + POOL, ":1: listen_on"),
        ('[[pools]]\nname = "a"\nlabels = []\ngpu = "A100"\n', ":3: pools[0].labels"),
        ("max_concurrency = 2\n", ": pools"),
    ],
)
def test_top_level_values_are_checked(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "runners.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_serve_config(path)
    assert str(ei.value).startswith(f"{path}{where}"), str(ei.value)


def test_good_values_parse(tmp_path: Path) -> None:
    path = tmp_path / "runners.toml"
    path.write_text(POOL + 'max_price = 4\nspot = true\nttl = "1h30m"\nproviders = "aws"\n')
    pool = load_serve_config(path).pools[0]
    assert (pool.max_price, pool.spot, pool.ttl_s, pool.providers) == (4.0, True, 5400, ("aws",))
    assert pool.idle_timeout_s == 600 and pool.max_concurrent == 4


def test_serve_refuses_a_fifo_and_a_missing_file(tmp_path: Path, cloudgpu_home: Path) -> None:
    fifo = tmp_path / "runners.toml"
    os.mkfifo(fifo)
    code, _, err = main_exit(["runner", "serve", "--config", str(fifo)])
    assert code == 2 and "not a regular file" in err, err  # never blocks on open
    code, _, err = main_exit(["runner", "serve", "--config", str(tmp_path / "nope.toml")])
    assert code == 2 and "Traceback" not in err, err
