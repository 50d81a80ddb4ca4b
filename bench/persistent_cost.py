#!/usr/bin/env python
"""What ``persistent:true`` costs on each broker: msgs/s and CPU per message, persistent against not, one run.

Run from the repository root, with the brokers up (``bash scripts/brokers.sh start``)::

    python bench/persistent_cost.py                          # the three brokers of the tests, 3 rounds
    python bench/persistent_cost.py --rounds 5 -n 20000
    python bench/persistent_cost.py --url amq-kahadb=stomp://guest:guest@127.0.0.1:61714/

``--url NAME=URL`` (repeatable) replaces the default list (``STOMPFAST_RABBITMQ_URL``,
``STOMPFAST_ACTIVEMQ_URL``, ``STOMPFAST_ARTEMIS_URL``). Note that the ActiveMQ and Artemis
instances ``scripts/brokers.sh`` starts are non-persistent as a whole (``persistent="false"``,
``--disable-persistence``): there ``persistent:true`` is only a flag on the message and
stores nothing, so measure a broker with a store (ActiveMQ's KahaDB, Artemis's journal: their
stock configurations) to see what a production broker pays.

Per broker, per round, once with the client option ``persistent=False`` (no header: every
broker's default, not persistent) and once with ``persistent=True`` (``persistent:true`` on
every SEND), in alternating order, on a fresh ``/queue/`` each time, 100-byte bodies,
STOMP 1.2, heart-beats off, one ``AsyncClient`` on asyncio:

1. ``publish``: N sends, the last with a receipt (the broker handles a connection's frames in
   order, so its RECEIPT proves it took them all).
2. ``send+receipt``: M sends, each awaiting its RECEIPT (a confirmed send: with persistence the
   broker stores the message before it answers).
3. ``drain``: the N messages of step 1 consumed in ``client-individual`` mode, each acked
   (the last with a receipt): a job queue's consumer.

Printed per scenario: the median msgs/s of each mode, the ratio persistent / not, and CPU
per message in microseconds, the client's (``time.process_time``) and the broker's (its
process's utime + stime from ``/proc``, found by the port it listens on; ``-`` when it
cannot be read, e.g. a broker in another container). Ratios come from the same run:
quote them, not the absolute figures (shared machines are noisy).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from typing import Callable, Dict, List, Optional, Tuple

import anyio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from stompfast import AsyncClient  # noqa: E402
from stompfast._config import parse_url  # noqa: E402

BODY = b"x" * 100
SCENARIOS = ("publish", "send+receipt", "drain")


def listening_pid(port: int) -> Optional[int]:
    """The pid of the process listening on TCP ``port`` (loopback), or None if /proc does not say."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    # state 0A: LISTEN
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(fields[9])
        except OSError:
            continue
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:[") and link[8:-1] in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


def cpu_seconds(pid: Optional[int]) -> Optional[float]:
    """utime + stime of ``pid`` in seconds (None without a pid)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Meter:
    """Wall time, client CPU and broker CPU of one timed part."""

    def __init__(self, broker_pid: Optional[int]) -> None:
        self.broker_pid = broker_pid

    def __enter__(self) -> "Meter":
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        self.broker = cpu_seconds(self.broker_pid)
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        after = cpu_seconds(self.broker_pid)
        self.broker = None if after is None or self.broker is None else after - self.broker


Result = Dict[str, Tuple[float, float, Optional[float]]]


async def one_round(url: str, persistent: bool, n: int, m: int, broker_pid: Optional[int]) -> Result:
    """``{scenario: (msgs/s, client us/msg, broker us/msg or None)}`` for one mode."""
    result: Result = {}

    def record(name: str, meter: Meter, count: int) -> None:
        broker = None if meter.broker is None else meter.broker / count * 1e6
        result[name] = (count / meter.wall, meter.cpu / count * 1e6, broker)

    queue = f"/queue/stompfast-persistent-cost-{uuid.uuid4().hex[:10]}"
    async with AsyncClient(url, heart_beat=(0, 0), persistent=persistent) as client:
        with Meter(broker_pid) as meter:
            for _ in range(n - 1):
                await client.send(queue, BODY)
            await client.send(queue, BODY, receipt=True)
        record("publish", meter, n)
        confirmed = queue + "-confirmed"
        with Meter(broker_pid) as meter:
            for _ in range(m):
                await client.send(confirmed, BODY, receipt=True)
        record("send+receipt", meter, m)
        with Meter(broker_pid) as meter:
            async with client.subscribe(queue, ack="client-individual", buffer_size=1000) as sub:
                seen = 0
                async for message in sub:
                    seen += 1
                    if seen == n:
                        await message.ack(receipt=True)
                        break
                    await message.ack()
        record("drain", meter, n)
        # the confirmed sends are not drained by the timed part: empty their queue
        async with client.subscribe(confirmed, ack="auto") as sub:
            seen = 0
            async for _ in sub:
                seen += 1
                if seen == m:
                    break
    return result


def fmt(value: Optional[float], spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def measure(name: str, url: str, rounds: int, n: int, m: int) -> None:
    ep = parse_url(url)
    pid = listening_pid(ep.port)
    runs: Dict[bool, List[Result]] = {False: [], True: []}
    for r in range(rounds):
        # alternate which mode goes first, so that a warming broker favours neither
        for persistent in ((False, True) if r % 2 == 0 else (True, False)):
            runs[persistent].append(anyio.run(one_round, url, persistent, n, m, pid))

    def median(persistent: bool, scenario: str, i: int) -> Optional[float]:
        values = [run[scenario][i] for run in runs[persistent]]
        if any(v is None for v in values):
            return None
        return statistics.median(values)  # type: ignore[type-var]

    print(f"\n{name} ({url}, broker pid {pid or '-'}; {rounds} rounds, N={n}, M={m}, medians)")
    print(f"  {'scenario':<13} {'msgs/s not':>11} {'msgs/s pers':>11} {'ratio':>6}"
          f" {'client us/msg':>15} {'broker us/msg':>17} {'broker ratio':>12}")
    for scenario in SCENARIOS:
        rate_off, rate_on = median(False, scenario, 0), median(True, scenario, 0)
        cpu_off, cpu_on = median(False, scenario, 1), median(True, scenario, 1)
        brk_off, brk_on = median(False, scenario, 2), median(True, scenario, 2)
        ratio = None if not rate_off or rate_on is None else rate_on / rate_off
        brk_ratio = None if not brk_off or brk_on is None else brk_on / brk_off
        print(f"  {scenario:<13} {fmt(rate_off, ',.0f'):>11} {fmt(rate_on, ',.0f'):>11} {fmt(ratio, '.2f'):>6}"
              f" {fmt(cpu_off) + ' / ' + fmt(cpu_on):>15} {fmt(brk_off) + ' / ' + fmt(brk_on):>17}"
              f" {fmt(brk_ratio, '.2f'):>12}")


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--url", action="append", default=[], metavar="NAME=URL",
                   help="a broker to measure (repeatable; default: the three of the tests)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("-n", type=int, default=10_000, help="messages published, then drained (default 10,000)")
    p.add_argument("-m", type=int, default=500, help="confirmed sends, one at a time (default 500)")
    args = p.parse_args(argv)
    targets: List[Tuple[str, str]] = []
    for item in args.url:
        name, _, url = item.partition("=")
        if not url:
            p.error(f"--url takes NAME=URL, not {item!r}")
        targets.append((name, url))
    if not targets:
        env: Callable[[str], Optional[str]] = os.environ.get
        for name in ("rabbitmq", "activemq", "artemis"):
            url = env(f"STOMPFAST_{name.upper()}_URL")
            if url:
                targets.append((name, url))
    if not targets:
        p.error('no broker: eval "$(bash scripts/brokers.sh env)" or give --url NAME=URL')
    for name, url in targets:
        measure(name, url, args.rounds, args.n, args.m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
