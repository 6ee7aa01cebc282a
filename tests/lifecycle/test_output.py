"""The job log sink: file + terminal, lifecycle lines prefixed, progress summarized."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from cloudgpu.lifecycle.output import JobLog, human_bytes


class TTY(io.BytesIO):
    def isatty(self) -> bool:
        return True


def test_joblog_writes_file_and_terminal(tmp_path: Path) -> None:
    out, err = io.BytesIO(), TTY()
    t = [0.0]
    log = JobLog(tmp_path / "logs" / "j.log", out=out, err=err, clock=lambda: t[0])
    log.info("provisioning token=abc123")  # secrets never reach the log
    log.job_output(b"hello\n")
    for done in (0, 500_000, 1_000_000):
        t[0] += 1.0
        log.progress("staging ./d", done, 1_000_000)
    log.close()
    text = (tmp_path / "logs" / "j.log").read_text()
    assert "[cloudgpu] provisioning token=***" in text and "abc123" not in text
    assert "hello\n" in text and out.getvalue() == b"hello\n"
    assert "[cloudgpu] staging ./d: 1.0 MB in 2.0 s (500.0 KB/s)" in text
    assert b"ETA" in err.getvalue() and b"/s" in err.getvalue()


def test_detached_log_is_file_only(tmp_path: Path) -> None:
    out, err = io.BytesIO(), io.BytesIO()
    log = JobLog(tmp_path / "j.log", terminal=False, out=out, err=err)
    log.info("x")
    log.job_output(b"y")
    log.close()
    assert out.getvalue() == err.getvalue() == b""
    assert (tmp_path / "j.log").read_text() == "[cloudgpu] x\ny"


def test_human_bytes() -> None:
    assert human_bytes(999) == "999 B"
    assert human_bytes(1_500_000) == "1.5 MB"
    assert human_bytes(2e12) == "2.0 TB"


def test_progress_fits_the_terminal_waits_for_a_real_rate_and_is_cleared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    err = TTY()
    t = [100.0]
    log = JobLog(tmp_path / "j.log", out=io.BytesIO(), err=err, clock=lambda: t[0])
    log.progress("staging ./a-rather-long-folder-name", 10_000_000, 1_000_000_000)
    first = err.getvalue().decode()
    assert "--/s" in first and "GB/s" not in first  # 10 MB in no time is not a rate
    for step in range(1, 6):
        t[0] += 1.0
        log.progress("staging ./a-rather-long-folder-name", step * 200_000_000, 1_000_000_000)
    log.close()
    frames = err.getvalue().decode().split("\r")
    bars = [f.removesuffix("\x1b[K") for f in frames if "%" in f]
    assert bars and all(len(b) <= 59 for b in bars), bars
    assert "200.0 MB/s" in bars[-1]
    # The summary replaces the bar on its own line, erased to its end first.
    assert frames[-1].startswith("\x1b[K[cloudgpu] staging ./a-rather-long-folder-name: 1.0 GB")


def test_progress_drops_the_bar_on_a_narrow_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from cloudgpu.lifecycle.output import _Bar

    bar = _Bar("staging ./d", 0.0)
    text = bar.render(5, 10, 2.0, columns=40)
    assert text is not None and len(text) <= 39 and "[#" not in text
    wide = bar.render(10, 10, 3.0, columns=120)
    assert wide is not None and "[" + "#" * 24 + "]" in wide
