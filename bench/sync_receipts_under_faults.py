#!/usr/bin/env python
"""The blocking client's receipted sends from several threads while the broker keeps dropping the link.

Run from the repository root (the in-process broker; no real broker needed)::

    python bench/sync_receipts_under_faults.py --seconds 6 --threads 3 --drop-every 0.05 [--backend trio]

Every ``send(receipt=True)`` must either be confirmed or raise the connection's error
(a receipt of a lost link fails; it is never re-sent); no thread may hang and no other
exception may appear. Prints the counts; exits 1 on a hang or an unexpected error.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Dict, List

from stompfast import Client, ReconnectPolicy, StompError
from stompfast.testing import Broker


def main(seconds: float, threads: int, drop_every: float, backend: str) -> int:
    errors: Dict[str, int] = {}
    confirmed = [0] * threads
    unexpected: List[str] = []
    policy = ReconnectPolicy(initial_delay=0.005, max_delay=0.02, jitter=0)
    with Broker.in_thread() as broker:
        with Client(broker.url, heart_beat=(0, 0), reconnect=policy, backend=backend) as client:
            stop = time.monotonic() + seconds

            def sender(k: int) -> None:
                i = 0
                while time.monotonic() < stop:
                    try:
                        client.send("/queue/faults-%d" % k, b"%d" % i, receipt=True, timeout=5)
                        confirmed[k] += 1
                    except StompError as exc:
                        errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                    except BaseException as exc:  # noqa: B036 - reported, not swallowed
                        unexpected.append(repr(exc))
                    i += 1

            workers = [threading.Thread(target=sender, args=(k,)) for k in range(threads)]
            for w in workers:
                w.start()
            drops = 0
            while time.monotonic() < stop:
                time.sleep(drop_every)
                broker.drop_connections()
                drops += 1
            hung = 0
            for w in workers:
                w.join(10)
                hung += w.is_alive()
            print(f"{sum(confirmed)} confirmed, errors {errors}, {drops} links dropped,"
                  f" {client.reconnects} reconnects, "
                  f"{hung} threads hung, unexpected {unexpected[:3]}")
    return 1 if hung or unexpected else 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--threads", type=int, default=3)
    p.add_argument("--drop-every", type=float, default=0.05)
    p.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    args = p.parse_args()
    sys.exit(main(args.seconds, args.threads, args.drop_every, args.backend))
