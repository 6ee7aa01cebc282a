"""Reading the instance-side watcher's preemption notice over the job's SSH connection.

The bootstrap starts the provider's watcher (Provider.notice_watcher); it writes the
cloud's notice to ``<nvme>/.cloudgpu/preempt.json`` the moment the metadata service shows
it. A reader thread keeps one command open on the same connection that waits for that
file (checking it each second on the instance, not over the network) and prints it, so
the client learns within a second or two, where polling the cloud's API from outside
takes up to ``notice_poll_s`` and some clouds show nothing outside until the VM is gone.
A warning that is not yet a notice (AWS's rebalance recommendation) is printed too.

After the lifecycle has flushed the checkpoint it calls :func:`acknowledge`, which
touches ``notice.handled``: a watcher that can let the cloud proceed early (Azure's
Scheduled Events StartRequests) does so only then.

Everything read from the instance is hostile: lines are bounded, the JSON must be an
object of short strings, and what is logged is stripped of control characters.
"""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from cloudgpu.errors import CloudGPUError
from cloudgpu.lifecycle.bootstrap import state_dir
from cloudgpu.remote import Machine

NOTICE = "preempt.json"
ADVISORY = "advisory.json"
ACK = "notice.handled"
MAX_LINE = 8192  # bytes of one notice line; more is not a notice
MAX_FIELD = 200

# Waits for the notice on the instance; prints "A <json>" for an advisory (once) and
# "N <json>" for the notice, then exits. $1: the state directory.
WAIT_SCRIPT = r"""
d=$1; said=
while [ ! -s "$d/preempt.json" ]; do
    if [ -z "$said" ] && [ -s "$d/advisory.json" ]; then
        printf 'A '; head -c 4096 "$d/advisory.json" | tr -d '\n'; echo; said=1
    fi
    sleep 1
done
printf 'N '; head -c 4096 "$d/preempt.json" | tr -d '\n'; echo
"""


def parse_time(text: str, now: float) -> float:
    """Unix time of a notice's time: ISO 8601 (AWS, GCP) or RFC 1123 (Azure NotBefore);
    ``now`` when it is missing or unreadable."""
    text = text.strip()
    if not text:
        return now
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            moment = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return now
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _clean(value: object) -> str:
    text = value if isinstance(value, str) else ""
    return "".join(c for c in text[:MAX_FIELD] if c.isprintable())


def parse_line(line: bytes, now: float) -> tuple[str, float, str] | None:
    """(kind N|A, time, description) of one reader line, or None when it is not one."""
    if len(line) > MAX_LINE or line[:2] not in (b"N ", b"A "):
        return None
    try:
        doc = json.loads(line[2:].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    fields = {k: _clean(doc.get(k)) for k in ("action", "time", "source", "detail")}
    what = fields["action"] or "notice"
    extra = [fields[k] for k in ("source", "detail") if fields[k]]
    text = f"{what} ({', '.join(extra)})" if extra else what
    return line[:1].decode(), parse_time(fields["time"], now), text


class NoticeReader:
    """One thread per instance connection, waiting for the watcher's notice."""

    def __init__(
        self,
        machine: Machine,
        on_notice: Callable[[float, str], None],
        on_advisory: Callable[[float, str], None],
        clock: Callable[[], float],
        on_error: Callable[[str], None],
    ) -> None:
        self.machine = machine
        self.on_notice = on_notice
        self.on_advisory = on_advisory
        self.clock = clock
        self.on_error = on_error
        self._stop = threading.Event()
        self._buf = b""
        self._thread = threading.Thread(target=self._run, name="cloudgpu-notice", daemon=True)

    def start(self) -> NoticeReader:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(15)

    def _run(self) -> None:
        where = shlex.quote(state_dir(self.machine))
        cmd = f"sh -c {shlex.quote(WAIT_SCRIPT)} cloudgpu-notice {where}"
        try:
            self.machine.run(cmd, on_stdout=self._feed, stop=self._stop)
        except CloudGPUError as exc:  # the connection went: the outside poll remains
            if not self._stop.is_set():
                self.on_error(f"notice reader stopped: {exc}")

    def _feed(self, data: bytes) -> None:
        self._buf += data
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            self._line(line)
        if len(self._buf) > MAX_LINE:  # a line that never ends is not a notice
            self._buf = b""

    def _line(self, line: bytes) -> None:
        parsed = parse_line(line, self.clock())
        if parsed is None:
            return
        kind, at, text = parsed
        (self.on_notice if kind == "N" else self.on_advisory)(at, text)


def acknowledge(machine: Machine) -> bool:
    """Tell the watcher the checkpoint is flushed (it may let the cloud go ahead now).
    Best effort: without it the cloud still goes ahead at its own time."""
    path = shlex.quote(f"{state_dir(machine)}/{ACK}")
    try:
        return machine.run(f": > {path}", timeout=30) == 0
    except CloudGPUError:
        return False
