"""The hostile-server table: each misbehaving server, what the client ends in, how fast, how much memory.

    python bench/hostile_table.py [--markdown]

Runs every case of tests/hostile.py (the same ones tests/test_hostile_suite.py
asserts) on the AsyncClient (asyncio, asyncio+uvloop, trio) and on the blocking
Client (asyncio and trio portals), and prints one row per case: the error (or
"works on" for harmless junk), the slowest time to it over the five clients, and
the largest memory peak traced over a run (tracemalloc: the client's allocations,
with the case's limits of 1 MiB per frame and 64 KiB of headers). Exit status 1
if any outcome is not the documented one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, List, Tuple

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _tables import print_table  # noqa: E402
from hostile import CASES, Case, HostileServer, Outcome, run_async, run_blocking  # noqa: E402

CLIENTS: List[Tuple[str, Any]] = [
    ("async/asyncio", ("asyncio", {})),
    ("async/uvloop", ("asyncio", {"use_uvloop": True})),
    ("async/trio", ("trio", {})),
    ("blocking/asyncio", ("asyncio", None)),
    ("blocking/trio", ("trio", None)),
]


def run(case: Case, client: str, backend: Tuple[str, Any]) -> Outcome:
    with HostileServer(case.handler) as server:
        if client.startswith("async/"):
            return anyio.run(run_async, case, server.url, backend=backend[0], backend_options=backend[1])
        return run_blocking(case, server.url, backend[0], backend[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args()
    bad = 0
    rows = []
    for case in CASES:
        outcomes = [(name, run(case, name, backend)) for name, backend in CLIENTS]
        wrong = []
        for name, outcome in outcomes:
            try:
                outcome.check(case)
            except AssertionError as exc:
                wrong.append(f"{name}: {exc}")
        bad += bool(wrong)
        first = outcomes[0][1]
        ends = "works on" if case.error is None else f"{type(first.error).__name__} in {first.phase}"
        slowest = max(o.elapsed for _, o in outcomes)
        peak = max(o.peak for _, o in outcomes)
        detail = "" if first.error is None else str(first.error)[:90]
        rows.append((case.name, ends, f"{slowest * 1000:.0f} ms", f"{peak / 1024:.0f} KiB",
                     "ok" if not wrong else "WRONG", detail))
        for line in wrong:
            print("  " + line, file=sys.stderr)
    head = ("case", "client ends in", "slowest of 5", "peak memory", "as documented", "error message (async/asyncio)")
    print_table(head, rows, args.markdown)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
