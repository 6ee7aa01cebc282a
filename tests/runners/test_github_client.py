from __future__ import annotations

import pytest

from cloudgpu.errors import AuthError, ConfigError, NotFoundError
from cloudgpu.runners.github import GitHubClient, RunnerBusy, validate_labels, validate_repo
from tests.runners.fake_github import FakeGitHub, serve_fake_github


@pytest.fixture
def gh() -> FakeGitHub:
    with serve_fake_github() as fake:
        yield fake


def client(gh: FakeGitHub, token: str | None = None) -> GitHubClient:
    return GitHubClient(token or gh.token, base_url=gh.base_url, sleep=lambda s: None)


def test_jit_runner_lifecycle(gh: FakeGitHub) -> None:
    c = client(gh)
    jit = c.generate_jitconfig("acme/models", "cgpu-run-1", ["cloudgpu-run-1"])
    assert jit.runner.status == "offline" and "cloudgpu-run-1" in jit.runner.labels
    assert "***" in repr(jit) and jit.encoded_jit_config not in repr(jit)
    with pytest.raises(ConfigError, match="conflict"):
        c.generate_jitconfig("acme/models", "cgpu-run-1", ["x"])
    assert [r.name for r in c.runners("acme/models", name="cgpu-run-1")] == ["cgpu-run-1"]
    gh.runners[jit.runner.id].busy = True
    with pytest.raises(RunnerBusy):
        c.delete_runner("acme/models", jit.runner.id)
    gh.runners[jit.runner.id].busy = False
    assert c.delete_runner("acme/models", jit.runner.id) is True
    assert c.delete_runner("acme/models", jit.runner.id) is False  # 404: already gone
    assert c.runner("acme/models", jit.runner.id) is None


def test_errors_name_the_problem_and_hide_the_token(gh: FakeGitHub) -> None:
    with pytest.raises(AuthError) as bad:
        client(gh, token="ghs_" + "x" * 36).repository("acme/models")
    assert "x" * 36 not in str(bad.value)
    with pytest.raises(AuthError, match="forbidden") as ro:
        client(gh, gh.readonly_token).generate_jitconfig("acme/models", "n", ["l"])
    assert "Administration: write" in (ro.value.hint or "")
    assert gh.readonly_token not in str(ro.value) + str(ro.value.hint)
    with pytest.raises(NotFoundError, match="nobody/nothing"):
        client(gh).repository("nobody/nothing")
    with pytest.raises(AuthError, match="no GitHub token"):
        GitHubClient("")


def test_rate_limit_is_retried(gh: FakeGitHub) -> None:
    gh.rate_limited = 2
    assert client(gh).repository("acme/models")["private"] is True


def test_input_validation() -> None:
    with pytest.raises(ConfigError, match="OWNER/NAME"):
        validate_repo("justname")
    with pytest.raises(ConfigError, match="default runner labels"):
        validate_labels(["gpu", "self-hosted"])
    assert validate_labels(["gpu-a100"]) == ["gpu-a100"]
