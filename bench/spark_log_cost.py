#!/usr/bin/env python
"""What the Spark source's exactly-once log costs per message: bytes, and time to write (with fsync) and read.

    python bench/spark_log_cost.py [--dir DIR]   # DIR: where the log goes (default: a temporary directory)

Each batch is the rows the reader would log: 100-byte bodies with six headers, as
``messages_to_arrow`` builds them. The write is the best of five (``BatchLog.write``:
an Arrow IPC stream, fsynced, renamed into place); building the rows is shown beside
it, as the source pays it with or without the log. Needs the ``spark`` extra (pyarrow).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any, Dict, List

from stompfast.spark._log import BatchLog
from stompfast.spark._source import messages_to_arrow


class _Delivery:
    """A delivery as the reader holds it (what ``messages_to_arrow`` reads)."""

    def __init__(self, i: int) -> None:
        self.headers: Dict[str, str] = {
            "destination": "/queue/q", "message-id": f"ID:host-1234-{i}", "subscription": "stompfast-0-0",
            "ack": f"ack-{i}", "content-length": "100", "x-id": f"id-{i}",
        }
        self.message_id = self.headers["message-id"]
        self.subscription = "stompfast-0-0"
        self.body = b"x" * 100


def measure(directory: str, n: int) -> Dict[str, float]:
    """Bytes per message and microseconds per message to build, write and read a batch of ``n``."""
    deliveries: List[Any] = [_Delivery(i) for i in range(n)]
    log = BatchLog(directory)
    started = time.perf_counter()
    batch = messages_to_arrow(deliveries)
    build = time.perf_counter() - started
    best = float("inf")
    size = 0
    for k in range(5):
        started = time.perf_counter()
        size = log.write(k * n, (k + 1) * n, batch)
        best = min(best, time.perf_counter() - started)
    started = time.perf_counter()
    log.read(0, n)
    read = time.perf_counter() - started
    return {"bytes": size / n, "write_us": best / n * 1e6, "batch_write_ms": best * 1e3,
            "read_us": read / n * 1e6, "build_us": build / n * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where the log is written (default: a temporary directory)")
    args = parser.parse_args()
    for n in (1_000, 50_000):
        with tempfile.TemporaryDirectory(dir=args.dir) as directory:
            m = measure(directory, n)
        print(f"batch of {n:>6,}: {m['bytes']:.0f} bytes/msg, write+fsync {m['write_us']:.2f} us/msg"
              f" ({m['batch_write_ms']:.1f} ms a batch), read {m['read_us']:.2f} us/msg,"
              f" building the rows {m['build_us']:.2f} us/msg")


if __name__ == "__main__":
    main()
