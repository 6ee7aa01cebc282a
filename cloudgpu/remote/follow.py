"""Stream a detached run's output from given offsets, then exit with the run's status.

Sent to the machine as ``python3 -c SOURCE DIR OUT_OFFSET ERR_OFFSET`` (stdlib only; it
must never import cloudgpu), it copies new bytes of ``DIR/out`` to stdout and of
``DIR/err`` to stderr as they appear, and exits with the status in ``DIR/rc`` once the
run has ended and both files are drained. If the connection breaks, the client starts it
again from the offsets it had received: no byte is lost or repeated, and the run itself
never noticed (cloudgpu.remote.detached started it in its own session).
"""

from __future__ import annotations

import os
import sys
import time

CHUNK = 1 << 16


def _copy(path: str, offset: int, out_fd: int) -> int:
    """Copy what ``path`` has past ``offset`` to ``out_fd``; return the bytes copied."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    moved = 0
    try:
        while True:
            block = os.pread(fd, CHUNK, offset + moved)
            if not block:
                return moved
            view = memoryview(block)
            while view:
                view = view[os.write(out_fd, view) :]
            moved += len(block)
    finally:
        os.close(fd)


def follow(run_dir: str, out_off: int, err_off: int) -> int:
    out, err, rc = (os.path.join(run_dir, n) for n in ("out", "err", "rc"))
    while True:
        ended = os.path.exists(rc)  # before draining: nothing written after it is missed
        moved = _copy(out, out_off, 1)
        out_off += moved
        moved_err = _copy(err, err_off, 2)
        err_off += moved_err
        if ended and not moved and not moved_err:
            with open(rc) as fh:
                return int(fh.read().strip() or 255) & 0xFF
        if not moved and not moved_err:
            time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(follow(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
