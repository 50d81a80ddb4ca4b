#!/usr/bin/env python
"""What the service calls cost: ``consume`` against the README's loop, handler scaling, ``request`` round trips.

    python bench/service_compare.py                      # every broker that answers, and the null sink
    python bench/service_compare.py --brokers rabbitmq --n 50000 --rounds 5
    python bench/service_compare.py --quick              # CI smoke: small counts, one round

Three measurements, each printed as a ratio against its peer measured in the same run:

1. **consume vs the loop** (client CPU per message, a drain of N queued messages with an ACK
   each): ``await client.consume(q, handler, concurrency=1, prefetch=P)`` against the README's
   ``async for m in sub: await m.ack()`` with the same buffer (P = 1,000, the README's
   default). Each contender runs in a fresh process; the CPU is that process's own
   ``getrusage`` over the drain. Target: consume <= 1.10x the loop. Also shown: the same
   loop calling an ``async def`` handler per message, the floor of any handler API (the
   call itself).
2. **handler scaling**: handlers that ``await anyio.sleep(0.001)``; the rate with
   ``concurrency=16`` against 16x the rate with one handler. Target: >= 0.8 (until the broker
   is the limit).
3. **a job that fails once** (``consume`` with its default retry, the delay made 1 us so
   that only CPU is compared): what the failure adds to consume's CPU per message, against
   the CPU of one confirmed publish (a SEND awaiting its receipt: the price of re-publishing
   a failed job safely, before its ACK). Target: <= 1.0, the failure path costs no more
   than one extra publish and ack. Also shown: against one more plain publish in the loop,
   unconfirmed, which the client only queues.
4. **request round trip** against ``send(receipt=True)``: sequential, one at a time, the
   responder a second client in the same process (``consume`` + ``reply``). A request
   crosses the broker twice (request, reply) and a receipted send once, so the ratio says
   what the second crossing and the responder cost on that broker. The floor is shown too:
   the same exchange written by hand (``send`` with ``reply-to`` to a reply queue of one's
   own, a plain subscription loop answering).

Brokers: the URLs of ``scripts/brokers.sh env`` (``STOMPFAST_RABBITMQ_URL`` ...) or the
defaults on 127.0.0.1; ``null`` is bench/nullbroker.py (consume vs loop only: it answers
nothing but receipts). Asyncio only (the default loop of the README's examples).

``--before DIR`` also runs the consume drains with the stompfast of another checkout
(``git worktree add /tmp/before <commit>``; build it in place) and prints this checkout's
CPU per message against it: a change's cost, before and after in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_URLS = {
    "rabbitmq": "stomp://guest:guest@127.0.0.1:61613/",
    "activemq": "stomp://guest:guest@127.0.0.1:61614/",
    "artemis": "stomp://guest:guest@127.0.0.1:61618/",
}
PREFETCH = 1000
BODY = b"x" * 100


def url_of(broker: str) -> str:
    return os.environ.get(f"STOMPFAST_{broker.upper()}_URL", DEFAULT_URLS[broker])


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- the measured side (a fresh process per measurement) ---------------------------------------


async def drain(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Drain ``n`` messages with an ACK each, by the README loop or by consume; CPU and wall of the drain."""
    import anyio

    from stompfast import AsyncClient

    n, queue = spec["n"], spec["queue"]
    async with AsyncClient(spec["url"], heart_beat=(0, 0)) as client:
        done = anyio.Event()
        count = 0
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        if spec["contender"] == "loop":
            async with client.subscribe(queue, ack="client-individual", buffer_size=PREFETCH) as sub:
                async for message in sub:
                    await message.ack()
                    count += 1
                    if count == n:
                        break
                await client.flush()
        elif spec["contender"] == "loop+publish":
            # the README loop that publishes each message on before acking it (unconfirmed)
            onward = f"{queue}-onward"
            async with client.subscribe(queue, ack="client-individual", buffer_size=PREFETCH) as sub:
                async for message in sub:
                    await client.send(onward, message.body)
                    await message.ack()
                    count += 1
                    if count == n:
                        break
                await client.flush()
        elif spec["contender"] == "loop+handler":
            # the README loop calling a handler function: the floor of any handler-based API

            async def work(message: Any) -> None:
                nonlocal count
                count += 1

            async with client.subscribe(queue, ack="client-individual", buffer_size=PREFETCH) as sub:
                async for message in sub:
                    await work(message)
                    await message.ack()
                    if count == n:
                        break
                await client.flush()
        else:
            retry = spec["contender"] == "consume, each job failing once"
            failed = set()

            async def handler(message: Any) -> None:
                nonlocal count
                if retry and message.message_id not in failed:
                    failed.add(message.message_id)
                    raise RuntimeError("fails once")
                count += 1
                if count == n:
                    done.set()

            options: Dict[str, Any] = {}
            if retry:
                # (a checkout from before RetryPolicy never measures this contender)
                from stompfast import RetryPolicy

                options["on_error"] = RetryPolicy(initial_delay=1e-6, jitter=0)
            consumer = await client.consume(queue, handler, concurrency=1, prefetch=PREFETCH, **options)
            await done.wait()
            # the last ACK is queued when the handler returns: let it out, then confirm everything
            await anyio.sleep(0)
            await client.flush()
            await consumer.stop()
        cpu, wall = cpu_seconds() - cpu0, time.perf_counter() - t0
    return {"cpu_us": cpu / n * 1e6, "rate": n / wall}


async def confirmed_sends(spec: Dict[str, Any]) -> Dict[str, Any]:
    """``n`` sends one at a time, each waiting for its receipt: the CPU of one confirmed publish.

    What re-publishing a failed job safely costs, over and above the ACK: the copy must
    be confirmed before the original is acked. (Measured alone: a receipt awaited inside
    a drain stalls on Artemis, whose byte window lets more than the buffer in flight.)
    """
    from stompfast import AsyncClient

    n, queue = spec["n"], spec["queue"]
    async with AsyncClient(spec["url"], heart_beat=(0, 0), persistent=False) as client:
        await client.send(queue, BODY, receipt=True)
        cpu0 = cpu_seconds()
        for _ in range(n):
            await client.send(queue, BODY, receipt=True)
        cpu = cpu_seconds() - cpu0
    return {"cpu_us": cpu / n * 1e6}


async def scale(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Handlers that await 1 ms: the rate with ``concurrency`` of them."""
    import anyio

    from stompfast import AsyncClient

    n, queue = spec["n"], spec["queue"]
    async with AsyncClient(spec["url"], heart_beat=(0, 0)) as client:
        done = anyio.Event()
        count = 0

        async def handler(message: Any) -> None:
            nonlocal count
            await anyio.sleep(0.001)
            count += 1
            if count == n:
                done.set()

        t0 = time.perf_counter()
        consumer = await client.consume(queue, handler, concurrency=spec["concurrency"])
        await done.wait()
        wall = time.perf_counter() - t0
        await consumer.drain(5)
    return {"rate": n / wall}


async def sleep_floor(spec: Dict[str, Any]) -> Dict[str, Any]:
    """The scaling floor without STOMP: ``concurrency`` tasks that only await 1 ms, ``n`` times in all."""
    import anyio

    per_task = spec["n"] // spec["concurrency"]

    async def task() -> None:
        for _ in range(per_task):
            await anyio.sleep(0.001)

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(spec["concurrency"]):
            tg.start_soon(task)
    return {"rate": per_task * spec["concurrency"] / (time.perf_counter() - t0)}


async def round_trips(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Sequential round trips: ``request`` (a responder in this process), the same by hand, or a receipted send."""
    import anyio

    from stompfast import AsyncClient

    n, queue = spec["n"], spec["queue"]
    async with AsyncClient(spec["url"], heart_beat=(0, 0)) as client:
        if spec["contender"] == "receipt":
            await client.send(queue, BODY, receipt=True)
            t0 = time.perf_counter()
            for _ in range(n):
                await client.send(queue, BODY, receipt=True)
            wall = time.perf_counter() - t0
        elif spec["contender"] == "by hand":
            # The floor: the same two broker crossings written with send() and a reply
            # subscription of one's own, the responder a raw loop that answers and acks
            # (as consume's worker does), with no request machinery.
            replies = f"/queue/sf-bench-svc-replies-{uuid.uuid4().hex[:10]}"
            async with AsyncClient(spec["url"], heart_beat=(0, 0)) as responder:
                async with client.subscribe(replies) as inbox, responder.subscribe(
                    queue, ack="client-individual", buffer_size=2
                ) as requests:

                    async def serve() -> None:
                        async for message in requests:
                            await responder.send(message.headers["reply-to"], message.body)
                            await message.ack()

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(serve)
                        await client.send(queue, BODY, headers={"reply-to": replies})
                        await inbox.receive()
                        t0 = time.perf_counter()
                        for _ in range(n):
                            await client.send(queue, BODY, headers={"reply-to": replies})
                            await inbox.receive()
                        wall = time.perf_counter() - t0
                        tg.cancel_scope.cancel()
        else:
            async with AsyncClient(spec["url"], heart_beat=(0, 0)) as responder:

                async def answer(message: Any) -> None:
                    await responder.reply(message, message.body)

                await responder.consume(queue, answer)
                await client.request(queue, BODY, timeout=30)
                t0 = time.perf_counter()
                for _ in range(n):
                    await client.request(queue, BODY, timeout=30)
                wall = time.perf_counter() - t0
                await responder.drain(5)
    return {"rtt_us": wall / n * 1e6}


def sync_drain(spec: Dict[str, Any]) -> Dict[str, Any]:
    """The blocking client's drain: ``for m in sub: m.ack()`` (its README loop) or ``Client.consume``."""
    import threading

    from stompfast import Client

    n, queue = spec["n"], spec["queue"]
    with Client(spec["url"], heart_beat=(0, 0)) as client:
        count = 0
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        if spec["contender"] == "sync loop":
            with client.subscribe(queue, ack="client-individual", buffer_size=PREFETCH) as sub:
                for message in sub:
                    message.ack()
                    count += 1
                    if count == n:
                        break
                client.flush()
        else:
            done = threading.Event()

            def handler(message: Any) -> None:
                nonlocal count
                count += 1
                if count == n:
                    done.set()

            consumer = client.consume(queue, handler, prefetch=PREFETCH)
            done.wait()
            # the last ACK is queued when the handler returns
            while consumer.stats().acked < n:
                time.sleep(0.0005)
            client.flush()
            consumer.stop()
        cpu, wall = cpu_seconds() - cpu0, time.perf_counter() - t0
    return {"cpu_us": cpu / n * 1e6, "rate": n / wall}


WORKERS = {"drain": drain, "sends": confirmed_sends, "scale": scale, "sleep-floor": sleep_floor, "rtt": round_trips}


def worker_main(spec_json: str) -> None:
    import anyio

    spec = json.loads(spec_json)
    if spec["kind"] == "sync-drain":
        result = sync_drain(spec)
    else:
        result = anyio.run(WORKERS[spec["kind"]], spec)
    print(json.dumps(result))


# -- the driver ------------------------------------------------------------------------------------


def measure(spec: Dict[str, Any], path: Optional[str] = None) -> Dict[str, Any]:
    """Run ``spec`` in a fresh process; with ``path``, on the stompfast found there (``--before``)."""
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [path, env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True, timeout=600,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{spec['kind']} {spec.get('contender')}: {done.stderr[-2000:]}")
    result: Dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def fill(url: str, queue: str, n: int) -> None:
    """Put ``n`` messages on ``queue`` (confirmed) before a drain."""
    import anyio

    from stompfast import AsyncClient

    async def go() -> None:
        async with AsyncClient(url, heart_beat=(0, 0)) as client:
            for i in range(n):
                await client.send(queue, BODY)
                if i % 5000 == 4999:
                    await client.flush()
            await client.flush()

    anyio.run(go)


class NullSink:
    """bench/nullbroker.py in its own process; ``prepare`` makes a destination replay N messages."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "nullbroker.py"), "--port", "0"], stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.url = f"stomp://127.0.0.1:{int(line.split()[1])}/"

    def prepare(self, queue: str, n: int) -> None:
        import anyio

        from stompfast import AsyncClient

        async def go() -> None:
            async with AsyncClient(self.url, heart_beat=(0, 0)) as client:
                headers = {"x-dest": queue, "x-tag": "svc", "x-n": str(n), "x-size": str(len(BODY))}
                await client.send("/nullbroker/prepare", b"", headers=headers, receipt=True)

        anyio.run(go)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def answers(url: str) -> bool:
    import socket

    from stompfast._config import parse_url

    endpoint = parse_url(url)
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=2):
            return True
    except OSError:
        return False


def run_broker(broker: str, args: argparse.Namespace) -> List[Dict[str, Any]]:
    rows: List[Dict[str, Any]] = []
    null = NullSink() if broker == "null" else None
    url = null.url if null is not None else url_of(broker)
    try:
        drains: Dict[str, List[Dict[str, Any]]] = {
            "loop": [], "loop+handler": [], "consume": [], "sync loop": [], "sync consume": [],
            "loop+publish": [], "consume, each job failing once": [],
        }
        if args.before:
            drains.update({"consume (before)": [], "sync consume (before)": []})
        for _ in range(args.rounds):
            for contender in drains:
                queue = f"/queue/sf-bench-svc-{uuid.uuid4().hex[:10]}"
                if null is not None:
                    null.prepare(queue, args.n)
                else:
                    fill(url, queue, args.n)
                kind = "sync-drain" if contender.startswith("sync") else "drain"
                before = contender.endswith(" (before)")
                spec = {"kind": kind, "url": url, "queue": queue, "n": args.n,
                        "contender": contender.replace(" (before)", "")}
                drains[contender].append(measure(spec, args.before if before else None))
        loop_cpu = statistics.median(r["cpu_us"] for r in drains["loop"])
        consume_cpu = statistics.median(r["cpu_us"] for r in drains["consume"])
        floor_cpu = statistics.median(r["cpu_us"] for r in drains["loop+handler"])
        rows.append({"broker": broker, "what": "consume(concurrency=1) CPU/msg vs the README loop",
                     "ours": consume_cpu, "peer": loop_cpu, "ratio": consume_cpu / loop_cpu, "target": "<= 1.10",
                     "ok": consume_cpu / loop_cpu <= 1.10, "unit": "us/msg"})
        rows.append({"broker": broker, "what": "  the loop calling a handler vs the README loop (floor)",
                     "ours": floor_cpu, "peer": loop_cpu, "ratio": floor_cpu / loop_cpu, "target": "info",
                     "ok": True, "unit": "us/msg"})
        sync_loop_cpu = statistics.median(r["cpu_us"] for r in drains["sync loop"])
        sync_consume_cpu = statistics.median(r["cpu_us"] for r in drains["sync consume"])
        rows.append({"broker": broker, "what": "Client.consume(concurrency=1) vs for m in sub: m.ack()",
                     "ours": sync_consume_cpu, "peer": sync_loop_cpu, "ratio": sync_consume_cpu / sync_loop_cpu,
                     "target": "<= 1.10", "ok": sync_consume_cpu / sync_loop_cpu <= 1.10, "unit": "us/msg"})
        retry_cpu = statistics.median(r["cpu_us"] for r in drains["consume, each job failing once"])
        confirmed = [measure({"kind": "sends", "url": url, "queue": f"/queue/sf-bench-svc-{uuid.uuid4().hex[:10]}",
                              "n": min(args.n, 5000)})["cpu_us"] for _ in range(args.rounds)]
        confirmed_cpu = statistics.median(confirmed)
        added = retry_cpu - consume_cpu
        rows.append({"broker": broker, "what": "a job failing once: added CPU vs a confirmed publish",
                     "ours": added, "peer": confirmed_cpu, "ratio": added / confirmed_cpu, "target": "<= 1.00",
                     "ok": added <= confirmed_cpu, "unit": "us/msg"})
        publish_cpu = statistics.median(r["cpu_us"] for r in drains["loop+publish"])
        rows.append({"broker": broker, "what": "  the same vs one more plain publish in the loop",
                     "ours": added, "peer": publish_cpu - loop_cpu, "ratio": added / (publish_cpu - loop_cpu),
                     "target": "info", "ok": True, "unit": "us/msg"})
        for contender, now in (("consume (before)", consume_cpu), ("sync consume (before)", sync_consume_cpu)):
            if contender in drains:
                then = statistics.median(r["cpu_us"] for r in drains[contender])
                rows.append({"broker": broker, "what": f"  {contender.replace(' (before)', '')}: this checkout vs"
                             " --before", "ours": now, "peer": then, "ratio": now / then, "target": "info",
                             "ok": True, "unit": "us/msg"})
        if null is not None:
            return rows
        rates: Dict[int, List[float]] = {1: [], 16: []}
        for _ in range(args.rounds):
            for concurrency in rates:
                n = args.scale_n * concurrency
                queue = f"/queue/sf-bench-svc-{uuid.uuid4().hex[:10]}"
                fill(url, queue, n)
                rates[concurrency].append(measure({"kind": "scale", "url": url, "queue": queue, "n": n,
                                                   "concurrency": concurrency})["rate"])
        rate_1, rate_16 = statistics.median(rates[1]), statistics.median(rates[16])
        ratio = rate_16 / (16 * rate_1)
        rows.append({"broker": broker, "what": "16 handlers of 1 ms: rate vs 16x one handler's",
                     "ours": rate_16, "peer": 16 * rate_1, "ratio": ratio, "target": ">= 0.80",
                     "ok": ratio >= 0.8, "unit": "msgs/s"})
        # The same ratio for tasks that only sleep (no STOMP): what the event loop's timers allow.
        floor = {c: measure({"kind": "sleep-floor", "n": args.scale_n * c, "concurrency": c})["rate"] for c in (1, 16)}
        rows.append({"broker": broker, "what": "  16 tasks that only sleep 1 ms vs 16x one (the floor)",
                     "ours": floor[16], "peer": 16 * floor[1], "ratio": floor[16] / (16 * floor[1]),
                     "target": "info", "ok": True, "unit": "sleeps/s"})
        rtts: Dict[str, List[float]] = {"receipt": [], "request": [], "by hand": []}
        for _ in range(args.rounds):
            for contender in rtts:
                queue = f"/queue/sf-bench-svc-{uuid.uuid4().hex[:10]}"
                rtts[contender].append(measure({"kind": "rtt", "url": url, "queue": queue, "n": args.rtt_n,
                                                "contender": contender})["rtt_us"])
        request, receipt = statistics.median(rtts["request"]), statistics.median(rtts["receipt"])
        by_hand = statistics.median(rtts["by hand"])
        rows.append({"broker": broker, "what": "request() round trip vs send(receipt=True)",
                     "ours": request, "peer": receipt, "ratio": request / receipt, "target": "<= 1.10",
                     "ok": request / receipt <= 1.10, "unit": "us"})
        rows.append({"broker": broker, "what": "  request() vs the same by hand (send + own reply queue)",
                     "ours": request, "peer": by_hand, "ratio": request / by_hand, "target": "info",
                     "ok": True, "unit": "us"})
        return rows
    finally:
        if null is not None:
            null.close()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--brokers", default="null,rabbitmq,activemq,artemis")
    parser.add_argument("--n", type=int, default=20000, help="messages per drain (default 20,000)")
    parser.add_argument("--scale-n", type=int, default=300, help="messages per handler in the scaling test")
    parser.add_argument("--rtt-n", type=int, default=500, help="sequential round trips (default 500)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3; medians)")
    parser.add_argument("--quick", action="store_true", help="CI smoke: 2,000 messages, 100 round trips, 1 round")
    parser.add_argument("--json", help="also write the rows as JSON")
    parser.add_argument("--before", help="a checkout of an earlier stompfast: its consume drains too, for a ratio")
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return 0
    if args.quick:
        args.n, args.scale_n, args.rtt_n, args.rounds = 2000, 60, 100, 1
    rows: List[Dict[str, Any]] = []
    for broker in args.brokers.split(","):
        if broker != "null" and not answers(url_of(broker)):
            print(f"{broker}: not answering at {url_of(broker)} (scripts/brokers.sh start): skipped")
            continue
        rows.extend(run_broker(broker, args))
    print(f"{'broker':9} {'measurement':52} {'ours':>12} {'peer':>12} {'ratio':>7} {'target':>8}")
    for row in rows:
        verdict = "PASS" if row["ok"] else "FAIL"
        print(f"{row['broker']:9} {row['what']:52} {row['ours']:12,.2f} {row['peer']:12,.2f} {row['ratio']:7.3f}"
              f" {row['target']:>8}  {verdict}  ({row['unit']})")
    print(f"n={args.n:,} per drain (prefetch {PREFETCH}), {args.scale_n} per handler, {args.rtt_n} round trips,"
          f" {args.rounds} round(s), medians; each measurement in a fresh process")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
