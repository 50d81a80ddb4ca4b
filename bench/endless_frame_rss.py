#!/usr/bin/env python
"""RSS of a reconnecting client whose broker sends a frame that never ends, session after session.

Run from the repository root (no broker needed: a scripted hostile server on loopback)::

    python bench/endless_frame_rss.py --sessions 10 [--backend trio] [--max-frame-bytes 104857600]

Each session the server answers CONNECTED and then streams one MESSAGE body without
end; the client fails it at ``max_frame_bytes`` and reconnects. Printed: the client's
RSS (MiB) at each reconnect and its peak. A client that keeps failed sessions' buffers
grows by about ``max_frame_bytes`` per session; a correct one stays flat.
"""

from __future__ import annotations

import argparse
import resource
import sys
from pathlib import Path
from typing import List

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hostile import HostileServer, endless_frame  # noqa: E402

from stompfast import AsyncClient, ReconnectPolicy  # noqa: E402


def rss_mib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return -1


async def main(sessions: int, max_frame_bytes: int) -> None:
    seen: List[int] = []
    policy = ReconnectPolicy(initial_delay=0.01, max_delay=0.02, jitter=0)
    with HostileServer(endless_frame) as server:
        client = AsyncClient(
            server.url, heart_beat=(0, 0), max_frame_bytes=max_frame_bytes, reconnect=policy,
            on_event=lambda e: seen.append(rss_mib()) if e.kind == "connected" else None,
        )
        async with client:
            while len(seen) < sessions:
                await anyio.sleep(0.05)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"{sessions} sessions, max_frame_bytes {max_frame_bytes / 2**20:g} MiB: RSS at each connect (MiB) {seen}; "
          f"peak {peak} MiB")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=10)
    p.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    p.add_argument("--max-frame-bytes", type=int, default=100 * 1024 * 1024)
    args = p.parse_args()
    anyio.run(main, args.sessions, args.max_frame_bytes, backend=args.backend)
