"""Render the HTML reports in headless Chromium: they load with no console error and no
network request, and a screenshot is saved. A control page that does fetch and does log
an error proves the detector sees both."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from cloudgpu.reports.render import render
from tests.reports.cdp import Chromium, find_chromium
from tests.reports.samples import (
    buyrent_sample,
    crowded_offers_sample,
    offers_sample,
    plan_sample,
    spend_sample,
)

LAYOUT_JS = (Path(__file__).parent / "layout.js").read_text()
SAMPLES = [buyrent_sample, offers_sample, spend_sample, plan_sample, crowded_offers_sample]
IDS = ["buy-vs-rent", "offers", "spend", "plan", "offers-crowded"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    binary = find_chromium()
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI: `make sysdeps` installs it")
        pytest.skip("chromium not installed (`make sysdeps` installs it)")
    chromium = Chromium(binary, tmp_path_factory.mktemp("chromium"))
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_report_loads_offline_without_errors(
    browser: Chromium, tmp_path: Path, sample: object
) -> None:
    report = sample()  # type: ignore[operator]
    page = tmp_path / "report.html"
    page.write_text(render(report, "html"), encoding="utf-8")
    shot = tmp_path / "report.png"
    pdf = tmp_path / "report.pdf"
    result = browser.load(page.as_uri(), screenshot=shot, pdf=pdf)
    assert result.title == report.title
    assert result.requests == []
    assert result.errors == []
    assert shot.stat().st_size > 10_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert pdf.read_bytes()[:5] == b"%PDF-"  # printing works (print CSS applied)


@pytest.mark.parametrize("sample", SAMPLES, ids=IDS)
def test_nothing_overflows_at_1280px_and_every_chart_is_labelled(
    browser: Chromium, tmp_path: Path, sample: object
) -> None:
    report = sample()  # type: ignore[operator]
    page = tmp_path / "report.html"
    page.write_text(render(report, "html"), encoding="utf-8")
    seen = browser.load(page.as_uri(), settle_s=0.2, width=1280, evaluate=LAYOUT_JS).value
    assert seen["scrollWidth"] <= seen["width"], seen["overflow"][:5]
    assert seen["overflow"] == []
    assert len(seen["charts"]) == len(report.charts)
    for chart in seen["charts"]:
        assert len(chart["titles"]) == 2, chart  # both axes named...
        assert any(re.search(r"\(.+\)", t) for t in chart["titles"]), chart  # ...with units
        assert chart["clipped"] == [], chart
        assert chart["overlaps"] == [], chart


class _Counter(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Counter.hits.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_detector_sees_requests_and_errors(browser: Chromium, tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        page = tmp_path / "leaky.html"
        page.write_text(
            f"<!DOCTYPE html><html><head><title>leaky</title></head><body>"
            f'<img src="http://127.0.0.1:{port}/pixel.png">'
            '<script>console.error("boom")</script></body></html>'
        )
        result = browser.load(page.as_uri(), settle_s=0.5)
    finally:
        server.shutdown()
        server.server_close()
    assert f"http://127.0.0.1:{port}/pixel.png" in result.requests
    assert "/pixel.png" in _Counter.hits
    assert any("boom" in e for e in result.errors)


def test_layout_detector_sees_overflow_clipping_and_overprinting(
    browser: Chromium, tmp_path: Path
) -> None:
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><head><title>broken</title></head><body>"
        '<table style="width:2000px"><tr><td>wide</td></tr></table>'
        '<figure id="chart-x"><svg viewBox="0 0 200 100" width="200">'
        '<text class="axis-title" x="100" y="95">no unit</text>'
        '<text class="point-label" x="10" y="20">first label</text>'
        '<text class="point-label" x="12" y="22">second label</text>'
        '<text x="190" y="50">clipped at the edge</text></svg></figure></body></html>'
    )
    seen = browser.load(page.as_uri(), settle_s=0.2, evaluate=LAYOUT_JS).value
    assert seen["scrollWidth"] > seen["width"] and any("table" in o for o in seen["overflow"])
    (chart,) = seen["charts"]
    assert chart["titles"] == ["no unit"]
    assert chart["overlaps"] == ["first label / second label"]
    assert chart["clipped"] == ["clipped at the edge"]
