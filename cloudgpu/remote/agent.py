"""The file-sync agent: the one program run on the instance's end of a transfer.

The client sends it with its two modules (cloudgpu.remote.syncwire, syncdest) as one
``python3 -c SOURCE OP ROOT`` program (cloudgpu.remote.scripts), and runs the very same
modules itself on its own end, so both sides run the same code. It must therefore
import nothing but the standard library and those two modules.

Operations (stdin/stdout are the SSH channel):

* ``recv ROOT``: print the tree's manifest (length-prefixed, compressed: kind, size,
  mtime, path), then read a stream from stdin and write it under ROOT.
* ``send ROOT``: read the peer's manifest from stdin, stream what differs to stdout.

Either way one SSH session does the whole sync: the manifest goes one way and the
changed files the other. The receiver hashes what it reads; a mismatch removes the files
it wrote and fails, so a corrupted transfer is never mistaken for a good one and the
next sync sends those files again. Files whose kind, size and mtime (whole seconds)
match the peer's manifest are not sent at all: one stream, no per-file round trip.

Exit statuses: 0 ok, 2 usage, 3 integrity failure, 4 I/O error (e.g. disk full), 5 the
source does not exist.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

from cloudgpu.remote.syncdest import unpack
from cloudgpu.remote.syncwire import (
    EXIT_IO,
    EXIT_MISSING,
    LENGTH,
    Reader,
    SyncError,
    Writer,
    big_pipe,
    changed,
    encode_manifest,
    pack,
    read_manifest,
    scan,
    write_all,
)


def iter_stdin() -> Callable[[int], bytes]:
    fd = sys.stdin.fileno()
    big_pipe(fd)
    return lambda n: os.read(fd, n)


def _stdout_sink(b: bytes) -> None:
    write_all(1, b)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("recv", "send"):
        sys.stderr.write("usage: agent recv|send ROOT\n")
        return 2
    op, root = argv[0], os.fsencode(os.path.expanduser(argv[1]))
    try:
        if op == "recv":
            manifest = encode_manifest(scan(root))
            _stdout_sink(LENGTH.pack(len(manifest)) + manifest)
            result = unpack(root, Reader(iter_stdin()))
            _stdout_sink(json.dumps(result).encode() + b"\n")
        else:
            peer = read_manifest(Reader(iter_stdin()))
            local = scan(root)
            if not local:
                raise SyncError(f"{argv[1]}: no such file or directory", EXIT_MISSING)
            pack(root, local, changed(local, peer), Writer(_stdout_sink))
    except SyncError as exc:
        sys.stderr.write(f"{exc}\n")
        return exc.code
    except OSError as exc:
        name = os.fsdecode(exc.filename) if isinstance(exc.filename, bytes) else exc.filename
        sys.stderr.write(f"{name or argv[1]}: {exc.strerror}\n")
        return EXIT_IO
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
