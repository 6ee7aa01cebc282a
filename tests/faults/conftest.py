"""The ``case`` fixture: one matrix row per test; a test that fails before it checked is
recorded as failed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.faults.record import Case, write
from tests.providers.conftest import scratch, sshd

__all__ = ["scratch", "sshd"]  # the loopback machine of the AWS cases


@pytest.fixture
def case(request: pytest.FixtureRequest) -> Iterator[Case]:
    c = Case(id=request.node.name)
    yield c
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed and not c.outcome:
        c.outcome = f"failed before recovery: {str(rep.longrepr).splitlines()[-1][:160]}"
        write(c)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call = rep  # type: ignore[attr-defined]
