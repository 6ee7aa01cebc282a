"""`python -m tests.faults`: run the fault matrix and print its summary table.

Runs pytest over tests/faults (every case, slow ones included) with each case writing
its row, then prints a Markdown table (cases, leaks, data lost, wrong exit codes, and
one row per case) and writes it to bench/results/faults.md, the figure the README
quotes. Exit status: pytest's (0 when every case held).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.faults.record import REPORT_ENV

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / "faults.md"


def table(rows: list[dict[str, Any]], seconds: float) -> str:
    passed = sum(r["passed"] for r in rows)
    leaks = sum(r["leaks"] for r in rows)
    lost = sum(r["data_lost"] for r in rows)
    wrong = sum(not r["exit_ok"] for r in rows)
    out = [
        f"Fault matrix: {len(rows)} cases, {passed} held; instances or tagged resources "
        f"left: {leaks}; cases with data lost: {lost}; wrong exit codes: {wrong} "
        f"({seconds:.0f} s, `python -m tests.faults`, {time.strftime('%Y-%m-%d')}).",
        "",
        "| cloud | fault | stage | leaks | data lost | exit ok | what the user is left with |",
        "|---|---|---|---:|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["cloud"], r["fault"], r["stage"])):
        out.append(
            f"| {r['cloud']} | {r['fault']} | {r['stage']} | {r['leaks']} | "
            f"{'YES' if r['data_lost'] else 'no'} | {'yes' if r['exit_ok'] else 'NO'} | "
            f"{r['outcome'].replace('|', '/')} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "rows.jsonl"
        env = {**os.environ, REPORT_ENV: str(report)}
        t0 = time.monotonic()
        rc = subprocess.call(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "tests/faults", *argv],
            cwd=ROOT,
            env=env,
        )
        seconds = time.monotonic() - t0
        text = report.read_text() if report.exists() else ""
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    md = table(rows, seconds)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(md)
    print(md)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
