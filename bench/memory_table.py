"""The memory table: each path where a client could pile up memory, pushed for 60 s or 1,000,000 messages.

    python bench/memory_table.py [--seconds 60] [--messages 1000000] [--markdown]

The paths are tests/memory_paths.py's (tests/test_memory_bounds.py runs them for a
few seconds each): the CLI's receipts, the test broker's limit, the send queue
under a broker that stops reading, an auto-ack subscription nobody reads, and the
same over WebSocket. One row each: what pushed, how many messages, for how long,
RSS at the start and its growth. Exit status 1 if a path grew by 50 MB or more.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _tables import print_table  # noqa: E402
from memory_paths import LIMIT, MB, PATHS  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rows = []
    for path in PATHS:
        r = path(args.seconds, args.messages)
        print(r, file=sys.stderr)
        rows.append((r.path, r.what, f"{r.pushed:,}", f"{r.seconds:.0f} s", f"{r.baseline / MB:.1f} MB",
                     f"+{r.growth / MB:.1f} MB", "ok" if r.growth < LIMIT else "OVER 50 MB"))
    head = ("path", "pushed against it", "messages taken", "time", "RSS at start", "RSS growth", "< 50 MB")
    print_table(head, rows, args.markdown)
    return 0 if all(row[-1] == "ok" for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
