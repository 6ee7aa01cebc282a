"""The progress line: units, rate, ETA, throttling."""

from __future__ import annotations

import io

from cloudgpu.remote.progress import ProgressBar, human_bytes, human_seconds, render


def test_units() -> None:
    assert human_bytes(999) == "999 B"
    assert human_bytes(1_234_567) == "1.2 MB"
    assert human_bytes(3.2e12) == "3.2 TB"
    assert human_seconds(65) == "1:05"
    assert human_seconds(3725) == "1:02:05"


def test_render_rate_and_eta() -> None:
    line = render("data", 50_000_000, 200_000_000, elapsed=2.0, width=10)
    assert line.startswith("data [##--------]")  # 25 % of 10 cells, floored
    assert " 25%" in line
    assert "50.0 MB / 200.0 MB" in line
    assert "25.0 MB/s" in line
    assert "ETA 0:06" in line
    assert "ETA --:--" in render("x", 0, 10, elapsed=0.0)
    assert "100%" in render("x", 0, 0, elapsed=1.0)  # nothing to send is done


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_throttles_and_ends_with_newline() -> None:
    now = [0.0]
    out = FakeTTY()
    bar = ProgressBar("data", out, interval=1.0, clock=lambda: now[0])
    bar(10, 100)
    now[0] = 0.5
    bar(20, 100)  # within the interval: not drawn
    now[0] = 2.0
    bar(100, 100)
    text = out.getvalue()
    assert text.count("\r") == 2
    assert text.endswith("\n") and "100%" in text


def test_bar_on_a_pipe_prints_only_the_final_line() -> None:
    out = io.StringIO()
    bar = ProgressBar("data", out, interval=0.0)
    bar(1, 2)
    bar(2, 2)
    assert out.getvalue().count("\n") == 1 and "100%" in out.getvalue()
