"""Shell text that ends a process group on the far side: TERM, then KILL after a grace.

One text for every way a job's group is stopped (a command followed over SSH, a detached
run, a pod's exec). It must run under any POSIX sh, dash included (Debian's and Ubuntu's
/bin/sh, and what a pod's ``sh -c`` usually is): dash's ``kill`` reads ``-TERM -- -PGID``
as a bad number, so the signal is named with ``-s``, which every POSIX kill accepts.
"""

from __future__ import annotations

KILL_GRACE_S = 5


def kill_group(pgid: str) -> str:
    """Shell text ending process group ``pgid`` (a number, or shell text such as ``$g``)."""
    g = f"-{pgid}"
    return (
        f"kill -s TERM -- {g} 2>/dev/null; i=0; "
        f"while kill -s 0 -- {g} 2>/dev/null && [ $i -lt {KILL_GRACE_S * 10} ]; "
        f"do sleep 0.1; i=$((i+1)); done; kill -s KILL -- {g} 2>/dev/null; true"
    )
