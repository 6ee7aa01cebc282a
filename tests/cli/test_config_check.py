"""config.toml is checked like a job file: unknown keys with a did-you-mean, wrong types
and impossible values one line at file:line, and `check` and `launch` say the same."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cloudgpu.config import load_config
from tests.lifecycle.helpers import main_exit

QUICKSTART = Path(__file__).resolve().parents[2] / "templates" / "quickstart.yaml"


def configure(home: Path, text: str) -> Path:
    path = home / "config" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ('[providers.aws]\nregoins = ["us-east-1"]\n', ":2: providers.aws.regoins", "'regions'"),
        ('[providers.local]\nenabled = "no"\n', ":2: providers.local.enabled", "true or false"),
        ("[providers.local]\nprice_per_hour = -1\n", ":2: providers.local.price_per_hour", "0"),
        ("[providers.sim]\noffers = 5\n", ":2: providers.sim.offers", "expected a list"),
        ("[providers.awz]\nregions = []\n", ":1: providers.awz", "did you mean 'aws'"),
        ("[defaults]\nstale_after_days = nan\n", ":2: defaults.stale_after_days", "finite"),
        ("[defualts]\n", ":1: defualts", "did you mean 'defaults'"),
        ('[launch]\nssh_timeout = "5 parsecs"\n', ":2: launch.ssh_timeout", "seconds"),
        ("[buy_vs_rent]\npeu = 1.2\n", ":2: buy_vs_rent.peu", "did you mean 'pue'"),
        (
            '[providers.ssh]\nhosts = [{ host = "h", prot = 22 }]\n',
            ":2: providers.ssh.hosts[0].prot",
            "did you mean 'port'",
        ),
        (
            "[providers.sim]\nenabled = true\n[[providers.sim.offers]]\ngpu = 'L4'\n",
            ":3:",
            "missing",
        ),
        ("x = [\n", "not valid TOML", "TOML"),
    ],
)
def test_check_and_launch_give_one_verdict(
    cloudgpu_home: Path, text: str, where: str, words: str
) -> None:
    path = configure(cloudgpu_home, text)
    verdicts = []
    for args in (["check"], ["launch", "--dry-run", str(QUICKSTART)], ["plan", str(QUICKSTART)]):
        code, _, err = main_exit(args)
        assert code == 2, err
        line = err.splitlines()[0]
        assert line.startswith(f"error: {path}") and where in line and words in line, line
        assert "internal error" not in err and "Traceback" not in err
        verdicts.append(line)
    assert len(set(verdicts)) == 1


def test_the_readme_example_is_valid(cloudgpu_home: Path) -> None:
    configure(
        cloudgpu_home,
        "[defaults]\nstale_after_days = 30\n\n[providers.aws]\n"
        'regions = ["us-east-1", "us-west-2"]\nssh_cidr = "203.0.113.7/32"\n\n'
        '[providers.ssh]\nhosts = [{ name = "box1", host = "10.0.0.5", user = "ubuntu", '
        'key = "~/.ssh/id_ed25519", gpus = "RTX4090:2" }]\n',
    )
    code, _, err = main_exit(["check"])
    assert code == 0, err


def test_a_fifo_config_is_refused_not_waited_on(cloudgpu_home: Path) -> None:
    path = cloudgpu_home / "config" / "config.toml"
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    proc = subprocess.run(
        [sys.executable, "-m", "cloudgpu", "check"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "CLOUDGPU_HOME": str(cloudgpu_home)},
        check=False,
    )
    assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr


def test_launch_and_runner_times_take_the_duration_grammar(cloudgpu_home: Path) -> None:
    """Seconds as a number or the job file's durations ("5m"); every [launch] setting
    the lifecycle reads is declared (collect_grace, default_deadline, max_preemptions)."""
    path = configure(
        cloudgpu_home,
        '[launch]\nssh_timeout = "5m"\ndeadline_grace = 90\ncollect_grace = "2h"\n'
        'default_deadline = "3d"\nmax_preemptions = 2\n[runner]\nonline_timeout_s = "10m"\n',
    )
    code, _, err = main_exit(["check"])
    assert code == 0, err
    config = load_config(path)
    got = [config.seconds("launch", k, 1.0) for k in ("ssh_timeout", "deadline_grace")]
    got += [config.seconds("launch", k, 1.0) for k in ("collect_grace", "default_deadline")]
    assert got == [300.0, 90.0, 7200.0, 3 * 86400.0]
    assert config.seconds("runner", "online_timeout_s", 1.0) == 600.0
    assert config.seconds("launch", "retry_backoff", 15.0) == 15.0  # the default
