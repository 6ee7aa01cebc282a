"""A small headless-Chromium driver over the DevTools protocol, for the report tests.

It loads a page, records every network request the page makes (Network domain), every
console error, uncaught exception and browser log error (Runtime and Log domains; CSP
violations land there), and takes a full-page screenshot. The WebSocket client is the
minimum of RFC 6455 a loopback DevTools endpoint needs (text frames, client masking,
no extensions), so the tests need no extra package. Talks only to 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class WebSocket:
    """Client side of a WebSocket on a plain TCP connection to 127.0.0.1."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        assert url.startswith("ws://127.0.0.1:"), url
        hostport, _, path = url[len("ws://") :].partition("/")
        host, port = hostport.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise ConnectionError(f"WebSocket handshake refused: {head[:200]!r}")

    def _recv_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            buf += chunk
        return buf

    def send(self, text: str) -> None:
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + masked)

    def recv(self) -> str:
        """One whole message (continuation frames joined); answers pings."""
        parts: list[bytes] = []
        while True:
            b0, b1 = self._recv_exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._recv_exact(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._recv_exact(8))[0]
            payload = self._recv_exact(n)
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode == 0x9:  # ping: answering keeps the connection open
                self.sock.sendall(struct.pack("!BB", 0x8A, 0x80) + os.urandom(4))
                continue
            parts.append(payload)
            if b0 & 0x80:
                return b"".join(parts).decode()

    def close(self) -> None:
        self.sock.close()


@dataclass
class PageLoad:
    requests: list[str] = field(default_factory=list)  # URLs other than the page itself
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, log errors
    screenshot: Path | None = None
    title: str = ""
    value: Any = None  # what ``evaluate`` returned (JSON-able)


class Chromium:
    """One headless browser with a fresh profile under ``workdir``."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.profile = workdir / "chromium-profile"
        self.profile.mkdir(parents=True)
        self.log = open(workdir / "chromium.log", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.port = self._wait_port()
        self._id = 0

    def _wait_port(self, timeout: float = 60.0) -> int:
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker.is_file():
                lines = marker.read_text().split()
                if lines:
                    return int(lines[0])
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}")
            time.sleep(0.05)
        raise TimeoutError("chromium did not open its DevTools port")

    def _new_page(self) -> WebSocket:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT"
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            target = json.loads(resp.read())
        return WebSocket(target["webSocketDebuggerUrl"])

    def _call(
        self, ws: WebSocket, method: str, events: list[dict[str, Any]], **params: Any
    ) -> dict[str, Any]:
        self._id += 1
        ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
            events.append(msg)

    def load(
        self,
        url: str,
        screenshot: Path | None = None,
        pdf: Path | None = None,
        settle_s: float = 1.0,
        width: int = 1280,
        height: int = 900,
        evaluate: str | None = None,
    ) -> PageLoad:
        ws = self._new_page()
        events: list[dict[str, Any]] = []
        try:
            for domain in ("Network", "Runtime", "Log", "Page"):
                self._call(ws, f"{domain}.enable", events)
            self._call(
                ws,
                "Emulation.setDeviceMetricsOverride",
                events,
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
            self._call(ws, "Page.navigate", events, url=url)
            self._wait_load(ws, events, settle_s)
            result = PageLoad()
            title = self._call(ws, "Runtime.evaluate", events, expression="document.title")
            result.title = str(title.get("result", {}).get("value", ""))
            if evaluate is not None:  # DevTools runs it, so the page's CSP does not apply
                got = self._call(
                    ws, "Runtime.evaluate", events, expression=evaluate, returnByValue=True
                )
                if "exceptionDetails" in got:
                    raise RuntimeError(f"evaluate: {got['exceptionDetails'].get('text')}")
                result.value = got.get("result", {}).get("value")
            if screenshot is not None:
                shot = self._call(
                    ws, "Page.captureScreenshot", events, format="png", captureBeyondViewport=True
                )
                screenshot.write_bytes(base64.b64decode(shot["data"]))
                result.screenshot = screenshot
            if pdf is not None:  # applies the @media print rules, as paper would
                printed = self._call(ws, "Page.printToPDF", events, printBackground=False)
                pdf.write_bytes(base64.b64decode(printed["data"]))
            _collect(events, url, result)
            return result
        finally:
            ws.close()

    def _wait_load(self, ws: WebSocket, events: list[dict[str, Any]], settle_s: float) -> None:
        deadline = time.monotonic() + 60
        while not any(e.get("method") == "Page.loadEventFired" for e in events):
            if time.monotonic() > deadline:
                raise TimeoutError("page did not finish loading")
            events.append(json.loads(ws.recv()))
        # Late requests (timers, lazy images) would arrive now: keep listening a while.
        # select() first, so a timeout never cuts a frame in half.
        quiet_until = time.monotonic() + settle_s
        while time.monotonic() < quiet_until:
            readable, _, _ = select.select([ws.sock], [], [], 0.1)
            if readable:
                events.append(json.loads(ws.recv()))

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _collect(events: list[dict[str, Any]], url: str, out: PageLoad) -> None:
    for e in events:
        method, params = e.get("method"), e.get("params", {})
        if method == "Network.requestWillBeSent":
            req_url = params["request"]["url"]
            if req_url != url and not req_url.startswith("data:"):
                out.requests.append(req_url)
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            out.errors.append(
                " ".join(
                    str(a.get("value", a.get("description", ""))) for a in params.get("args", [])
                )
            )
        elif method == "Runtime.exceptionThrown":
            out.errors.append(params["exceptionDetails"].get("text", "exception"))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            out.errors.append(params["entry"].get("text", "log error"))
