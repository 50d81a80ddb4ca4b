#!/usr/bin/env python
"""How closely an open-loop (``--rate``) producer of the load generator holds its schedule, per event loop.

Run from the repository root (no broker: the producer's real send loop hands each SEND
to a client that only looks at the clock)::

    python bench/loadgen_schedule.py [--rates 1000,10000] [--duration 2] [--loops asyncio,uvloop,trio]

For each loop and rate, printed: the producer's CPU seconds per wall second, its send lag
(actual send time minus intended time, the figure ``stompfast bench`` reports as
``send_lag_us``) at p50 and p99, and how many messages were handed over before their
intended time. That count must be 0: latency is measured from the intended time, so an
early send would read as less latency than the message had.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stompfast.loadgen import H_TS, LoadConfig  # noqa: E402
from stompfast.loadgen.plan import plan_workers  # noqa: E402
from stompfast.loadgen.producer import ProducerState, send_all  # noqa: E402
from stompfast.loadgen.timeline import Recorder  # noqa: E402


class _ClockClient:
    """Counts the SENDs handed over before their intended time (the ``sf-ts`` header)."""

    def __init__(self) -> None:
        self.early = 0

    async def send(self, destination: str, body: bytes, headers: Dict[str, str]) -> None:
        if time.time_ns() < int(headers[H_TS]):
            self.early += 1


async def _one(rate: float, duration: float) -> Dict[str, Any]:
    config = LoadConfig(rate=rate, duration=duration, count=None)
    (worker,) = plan_workers(config, "stomp://127.0.0.1:61613", ["/queue/schedule"], "schedule")
    ps = ProducerState(worker.producers[0], 1)
    client = _ClockClient()
    t0 = time.time_ns()
    cpu0 = time.process_time()
    await send_all(ps, client, t0, worker, Recorder(t0, 10**9))
    return {
        "cpu_per_wall": (time.process_time() - cpu0) / duration,
        "lag_p50_us": ps.lag.get_value_at_percentile(50),
        "lag_p99_us": ps.lag.get_value_at_percentile(99),
        "early": client.early,
        "sent": ps.sent,
    }


# the backends `stompfast bench --loop` runs on
_BACKENDS: Dict[str, Tuple[str, Dict[str, Any]]] = {
    "asyncio": ("asyncio", {}),
    "uvloop": ("asyncio", {"use_uvloop": True}),
    "trio": ("trio", {}),
}


def _run(loop: str, rate: float, duration: float) -> Dict[str, Any]:
    backend, options = _BACKENDS[loop]
    result: Dict[str, Any] = anyio.run(_one, rate, duration, backend=backend, backend_options=options)
    return result


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="1000,10000", help="msgs/s, comma-separated (default 1000,10000)")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per row (default 2)")
    parser.add_argument("--loops", default="asyncio,uvloop,trio", help="event loops (default asyncio,uvloop,trio)")
    args = parser.parse_args(argv)
    print(f"{'loop':8} {'msgs/s':>7} {'CPU s/wall s':>13} {'lag p50':>9} {'lag p99':>9} {'sent early':>11}")
    bad = 0
    for rate in (float(r) for r in args.rates.split(",")):
        for loop in args.loops.split(","):
            r = _run(loop, rate, args.duration)
            bad += r["early"]
            print(
                f"{loop:8} {rate:7,.0f} {r['cpu_per_wall']:13.3f} {r['lag_p50_us']:>6,} us {r['lag_p99_us']:>6,} us"
                f" {r['early']:>5,} of {r['sent']:,}"
            )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
