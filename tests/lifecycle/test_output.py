"""The job log sink: file + terminal, lifecycle lines prefixed, progress summarized."""

from __future__ import annotations

import io
from pathlib import Path

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
