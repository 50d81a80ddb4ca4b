#!/usr/bin/env python
"""One command, every client, every broker: stompfast against stomp.py, stompman and raw sockets.

Run from the repository root, with the brokers up (``bash scripts/brokers.sh start``)::

    python bench/compare.py                                   # full run (4 brokers, every contender, 5 scenarios)
    python bench/compare.py --brokers artemis --n 20000 --rounds 3   # ActiveMQ Artemis alone (port 61618)
    python bench/compare.py --quick                           # CI smoke: small N, 1 round
    python bench/compare.py --brokers null --contenders asyncio,stomppy --scenarios 1,3
    python bench/compare.py --json bench/results/compare.json --png bench/results/compare.png

It reuses bench/client_compare.py (its fill/check helpers, the per-process CPU window, the
raw-socket baseline, stomp.py's and our async worker, the interleaved rounds) and adds:

* ActiveMQ Artemis (``artemis``, the stock acceptor on 61618, ``--artemis-port``): every
  contender other than ours is given the routing and window headers our client adds there
  by itself (client_compare.send_headers / subscribe_headers);
* a "broker" ``null``: bench/nullbroker.py started in its own process for the run,
  which answers CONNECT and receipts, discards SENDs and replays a prebuilt MESSAGE stream
  on SUBSCRIBE, so what is left is the client's own cost;
* contenders ``sync`` (``stompfast.Client``, the blocking client over a BlockingPortal:
  ``send`` per message, ``receive_batch(1000)`` to consume, ``msg.ack()`` per message) and
  ``stompman`` (stompman 3.x, an asyncio client: ``await client.send(body, dest)``,
  ``receipt_timeout=`` where a receipt is asked, ``subscribe``/``subscribe_with_manual_ack``
  with an async handler);
* contenders from other languages, ``go-stomp`` (go-stomp v3.1.3, Go) and ``stompjs``
  (@stomp/stompjs 7.5.0 on Node.js over plain TCP, @stomp/tcp-wrapper): programs of ours in
  bench/polyglot, built into bench/.build on first use (n/a with the reason when go or node is
  missing or the build fails), each timing its own window (bench/polyglot/__init__.py);
* scenario 5, ``latency``: publish at a fixed rate (``--rate``, 10,000 msgs/s) for
  ``--duration`` seconds (3) with a consumer (ack auto) on the same queue on the same
  connection; every SEND carries ``x-ts`` (``perf_counter_ns`` at the send call), the
  consumer records now minus that at delivery; p50/p99/p99.9/max over every message;
* ratios as messages per client-CPU-second (contender / stomp.py and contender / raw), a
  JSON file (``--json``), a PNG chart (``--png``, matplotlib) and a TARGETS block.

See bench/README.md and docs/performance.md for how each number is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("STOMP_SKIP_HOSTNAME_SCAN", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import client_compare as cc  # noqa: E402
import polyglot  # noqa: E402  (bench/polyglot: the go-stomp and stompjs programs, their build and run)

perf_counter = time.perf_counter
perf_ns = time.perf_counter_ns
Failure = cc.Failure
fmt_n = cc.fmt_n

LATENCY = 5
cc.SCENARIOS[LATENCY] = "latency"  # Measurement.as_dict looks names up there
SCENARIOS = cc.SCENARIOS
PUBLISH, RECEIPTS, DRAIN_AUTO, DRAIN_CLIENT = cc.PUBLISH, cc.RECEIPTS, cc.DRAIN_AUTO, cc.DRAIN_CLIENT
PREFETCH = cc.PREFETCH
ALL_BROKERS = ("rabbitmq", "activemq", "artemis", "null")
# contender name -> (worker key, backend)
# (for the blocking client the second field is how it consumes: the README's loop, a callback, a batch call)
CONTENDERS: Dict[str, Tuple[str, str]] = {
    "asyncio": ("ours", "asyncio"), "uvloop": ("ours", "uvloop"), "sync": ("sync", "iterate"),
    "sync-callback": ("sync", "callback"), "sync-batch": ("sync", "batch"),
    "stomppy": ("stomppy", ""), "stompman": ("stompman", ""), "raw": ("raw", ""),
    # stomp.py's own worker code, unchanged, with `import stomp` giving stompfast.compat.stomp
    "compat": ("compat", ""),
    # floors of the blocking client at no protocol cost: a round trip with reads in another thread
    # (scenario 2; floor-sync also the drains, scenarios 3 and 4, with reads in a loop thread)
    "floor-thread": ("threadfloor", ""), "floor-sync": ("syncfloor", ""),
    # scenario 2: the least any client on the stock asyncio loop does per round trip
    "floor-asyncio": ("aiofloor", ""),
    # other languages' clients, programs of ours in bench/polyglot (built on first use)
    "go-stomp": ("gostomp", ""), "stompjs": ("stompjs", ""),
}
LABELS = {"asyncio": "stompfast/asyncio", "uvloop": "stompfast/uvloop", "sync": "stompfast/sync",
          "sync-callback": "sync callback=", "sync-batch": "sync receive_batch",
          "stomppy": "stomp.py", "stompman": "stompman", "raw": "raw socket", "compat": "compat (stomp.py API)",
          "floor-thread": "floor: recv thread", "floor-sync": "floor: loop thread", "floor-asyncio": "floor: asyncio",
          "go-stomp": "go-stomp", "stompjs": "stompjs/tcp"}
POLYGLOT = tuple(polyglot.PROGRAMS)  # contenders whose program is built by bench/polyglot
SYNC_NAMES = ("sync", "sync-callback", "sync-batch")
PRIMARY = "asyncio"
FLOOR_ONLY = "a floor of a round trip (and, loop thread, of the blocking client's drains) only"
# What a contender cannot do, per (contender, broker or "*", scenario): the reason, printed as n/a.
NOT_APPLICABLE: Dict[Tuple[str, str, int], str] = {
    ("*", "null", LATENCY): "the null sink discards SENDs: nothing to consume",
    **{(name, "*", s): "a way to consume: the sends are the sync row's"
       for name in ("sync-callback", "sync-batch") for s in (PUBLISH, RECEIPTS)},
    ("sync-batch", "*", LATENCY): "the latency row's consumer is the callback",
    ("sync", "*", LATENCY): "the latency row's consumer is the callback (see sync callback=)",
    **{(name, "*", s): FLOOR_ONLY
       for name in ("floor-thread", "floor-asyncio") for s in (PUBLISH, DRAIN_AUTO, DRAIN_CLIENT, LATENCY)},
    # the loop-thread floor also has the drains: the README's blocking loops (_drain_thread_floor)
    **{("floor-sync", "*", s): FLOOR_ONLY for s in (PUBLISH, LATENCY)},
}
# How a contender's measurement differs from the scenario's definition (printed under the table).
NOTES: Dict[Tuple[str, int], str] = {
    ("stompman", DRAIN_CLIENT): "stompman cannot put a receipt on an ACK: its time ends when the last ACK is "
                                "written (not confirmed); on a real broker the queue is checked empty afterwards",
    ("sync", DRAIN_AUTO): "sync consumes as the README does: for msg in sub",
    ("sync", DRAIN_CLIENT): "sync consumes as the README does: for msg in sub: msg.ack()",
    ("sync-callback", DRAIN_AUTO): "sync callback=: subscribe(..., callback=fn), fn per message in its thread",
    ("sync-callback", DRAIN_CLIENT): "sync callback=: fn calls msg.ack() per message",
    ("sync-callback", LATENCY): "sync consumes with a callback= subscription (its own thread)",
    ("sync-batch", DRAIN_AUTO): "sync receive_batch: receive_batch(1000) (an extra; the README loop is the sync row)",
    ("sync-batch", DRAIN_CLIENT): "sync receive_batch: receive_batch(1000), msg.ack() per message",
    ("go-stomp", PUBLISH): "go-stomp v3.1.3: a Go program of ours (bench/polyglot/go) that times its own window "
                           "(getrusage RUSAGE_SELF, every thread; monotonic clock); conn.Send per message, "
                           "SendOpt.Receipt where a receipt is asked",
    ("stompjs", PUBLISH): "stompjs 7.5.0: a Node program of ours (bench/polyglot/node) over plain TCP "
                          "(@stomp/tcp-wrapper), timing its own window (process.cpuUsage(), every thread; "
                          "hrtime); client.publish per message, watchForReceipt + {receipt} where one is asked",
    ("go-stomp", DRAIN_CLIENT): "go-stomp's conn.Ack(msg) takes no receipt: its time ends when conn.Disconnect() "
                                "returns, at the RECEIPT of the DISCONNECT written after the last ACK (which "
                                "confirms every frame before it; v3.1.3's sub.Unsubscribe() can miss its receipt)",
    ("go-stomp", LATENCY): "go-stomp: a consumer goroutine reads sub.C; sends paced with time.Sleep; x-ts from "
                           "the process's monotonic clock; no receipt on SUBSCRIBE (go-stomp routes it to the "
                           "subscription, which it closes)",
    ("stompjs", DRAIN_CLIENT): "stompjs: message.ack() per message, the last message.ack({receipt}) "
                               "with client.watchForReceipt; transport plain TCP (@stomp/tcp-wrapper)",
    ("stompjs", LATENCY): "stompjs: paced with setTimeout (1 ms resolution, so bursts as the asyncio rows); "
                          "x-ts from process.hrtime.bigint(); transport plain TCP (@stomp/tcp-wrapper)",
}


def not_applicable(contender: str, broker: str, scenario: int) -> Optional[str]:
    for key in ((contender, broker, scenario), ("*", broker, scenario), (contender, "*", scenario)):
        if key in NOT_APPLICABLE:
            return NOT_APPLICABLE[key]
    return None


def percentiles(lat_ns: List[int]) -> Dict[str, float]:
    """p50/p99/p99.9/max in microseconds (nearest rank over every sample)."""
    s = sorted(lat_ns)
    n = len(s)

    def rank(q: float) -> float:
        return s[min(n - 1, max(0, int(q * n + 0.999999) - 1))] / 1000.0

    return {"p50": rank(0.50), "p99": rank(0.99), "p999": rank(0.999), "max": s[-1] / 1000.0,
            "mean": sum(s) / n / 1000.0, "samples": n}


# ---------------------------------------------------------------------------------------
# Workers (run in fresh processes: ``compare.py --worker SPEC``)
# ---------------------------------------------------------------------------------------


def _latency_result(lat: List[int], bodies: List[bytes], tag: bytes, n: int) -> Dict[str, Any]:
    out = cc.check_bodies(bodies, tag, n)
    if lat:
        out["latency_us"] = percentiles(lat)
    return out


def _ts() -> str:
    return str(perf_ns())


async def _paced_async(n: int, rate: float, send: Any, sleep: Any) -> None:
    """Call ``await send(i)`` for i in range(n) at ``rate`` per second (catching up after a late wake-up)."""
    t0 = perf_counter()
    i = 0
    while i < n:
        due = min(n, int((perf_counter() - t0) * rate) + 1)
        while i < due:
            await send(i)
            i += 1
        await sleep(max(0.0, t0 + i / rate - perf_counter()))


def _paced_sync(n: int, rate: float, send: Any) -> None:
    t0 = perf_counter()
    i = 0
    while i < n:
        due = min(n, int((perf_counter() - t0) * rate) + 1)
        while i < due:
            send(i)
            i += 1
        delay = t0 + i / rate - perf_counter()
        if delay > 0:
            time.sleep(delay)


def worker_ours(spec: Dict[str, Any], win: cc.Window) -> Dict[str, Any]:
    if spec["scenario"] != LATENCY:
        return cc.worker_ours(spec, win)
    import anyio

    from stompfast import AsyncClient

    url = "stomp://%s:%s@%s:%d/" % (spec["login"], spec["passcode"], spec["host"], spec["port"])
    dest, n, tag, rate = spec["dest"], spec["n"], spec["tag"].encode(), spec["rate"]
    bodies = cc.make_bodies(tag, n)
    lat: List[int] = []
    got: List[bytes] = []

    async def main() -> None:
        with anyio.fail_after(spec["timeout"]):
            # persistent=False: no persistent header, as the other contenders send (the same broker work)
            async with AsyncClient(url, heart_beat=(0, 0), persistent=False) as c:
                async with c.subscribe(dest, ack="auto", buffer_size=PREFETCH) as sub:
                    async def consume() -> None:
                        async for msg in sub:
                            lat.append(perf_ns() - int(msg.headers["x-ts"]))
                            got.append(msg.body)
                            if len(got) == n:
                                break

                    async def send(i: int) -> None:
                        await c.send(dest, bodies[i], headers={"x-ts": _ts()})

                    async with anyio.create_task_group() as tg:
                        win.start()
                        tg.start_soon(consume)
                        await _paced_async(n, rate, send, anyio.sleep)
                    win.stop()

    if spec["backend"] == "uvloop":
        anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})
    else:
        anyio.run(main, backend="asyncio")
    return _latency_result(lat, got, tag, n)


def worker_sync(spec: Dict[str, Any], win: cc.Window) -> Dict[str, Any]:
    from stompfast import Client

    url = "stomp://%s:%s@%s:%d/" % (spec["login"], spec["passcode"], spec["host"], spec["port"])
    dest, n, scenario, tag = spec["dest"], spec["n"], spec["scenario"], spec["tag"].encode()
    timeout = spec["timeout"]
    bodies = cc.make_bodies(tag, n) if scenario in (PUBLISH, RECEIPTS, LATENCY) else []
    out: Dict[str, Any] = {}
    # persistent=False: no persistent header, as the other contenders send (the same broker work)
    c = Client(url, heart_beat=(0, 0), persistent=False)
    c.connect(timeout=timeout)
    try:
        out["server"] = c.server
        send = c.send
        if scenario == PUBLISH:
            win.start()
            for body in bodies[:-1]:
                send(dest, body)
            send(dest, bodies[-1], receipt=True, timeout=timeout)
            win.stop()
        elif scenario == RECEIPTS:
            win.start()
            for body in bodies:
                send(dest, body, receipt=True, timeout=timeout)
            win.stop()
        elif scenario in (DRAIN_AUTO, DRAIN_CLIENT):
            got: List[bytes] = []
            client_ack = scenario == DRAIN_CLIENT
            mode = spec["backend"]
            ack_mode = "client-individual" if client_ack else "auto"

            def handle(msg: Any) -> bool:
                """What every consumer row does per message (the README's loop body); True at the last."""
                got.append(msg.body)
                last = len(got) == n
                if client_ack:
                    if last:
                        msg.ack(receipt=True, timeout=timeout)
                    else:
                        msg.ack()
                return last

            if mode == "callback":
                done = threading.Event()

                def on_message(msg: Any) -> None:
                    if handle(msg):
                        done.set()

                win.start()
                with c.subscribe(dest, ack=ack_mode, buffer_size=PREFETCH, callback=on_message, timeout=timeout):
                    if not done.wait(timeout):
                        raise Failure("sync callback: %d of %d messages within %s s" % (len(got), n, timeout))
                    win.stop()
            elif mode == "batch":
                win.start()
                with c.subscribe(dest, ack=ack_mode, buffer_size=PREFETCH, timeout=timeout) as sub:
                    while len(got) < n:
                        for msg in sub.receive_batch(1000, timeout=timeout):
                            if handle(msg):
                                break
                    win.stop()
            else:  # the README's loop, as written there
                win.start()
                with c.subscribe(dest, ack=ack_mode, buffer_size=PREFETCH, timeout=timeout) as sub:
                    for msg in sub:
                        if handle(msg):
                            break
                    win.stop()
            out.update(cc.check_bodies(got, tag, n))
        else:
            lat: List[int] = []
            got = []
            done = threading.Event()

            def on_message(msg: Any) -> None:
                lat.append(perf_ns() - int(msg.headers["x-ts"]))
                got.append(msg.body)
                if len(got) == n:
                    done.set()

            with c.subscribe(dest, ack="auto", buffer_size=PREFETCH, callback=on_message, timeout=timeout):
                win.start()
                _paced_sync(n, spec["rate"], lambda i: send(dest, bodies[i], headers={"x-ts": _ts()}))
                if not done.wait(timeout):
                    raise Failure("sync: %d of %d messages within %s s" % (len(got), n, timeout))
                win.stop()
            out.update(_latency_result(lat, got, tag, n))
    finally:
        c.close()
    return out


def worker_stomppy(spec: Dict[str, Any], win: cc.Window) -> Dict[str, Any]:
    if spec["scenario"] != LATENCY:
        return cc.worker_stomppy(spec, win)
    import stomp

    dest, n, tag, timeout = spec["dest"], spec["n"], spec["tag"].encode(), spec["timeout"]
    bodies = cc.make_bodies(tag, n)
    lat: List[int] = []
    got: List[Any] = []
    done = threading.Event()
    subscribed = threading.Event()

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame: Any) -> None:
            lat.append(perf_ns() - int(frame.headers["x-ts"]))
            got.append(frame.body)
            if len(got) == n:
                done.set()

        def on_receipt(self, frame: Any) -> None:
            subscribed.set()

    conn = stomp.Connection12([(spec["host"], spec["port"])], heartbeats=(0, 0), vhost="/")
    conn.set_listener("bench", Listener())
    conn.connect(spec["login"], spec["passcode"], wait=True)
    routing = cc.send_headers(spec.get("broker"))  # Artemis: destination-type, as our client adds
    try:
        conn.subscribe(dest, id="1", ack="auto",
                       headers={"receipt": "sub", **cc.subscribe_headers(spec.get("broker"), False)})
        if not subscribed.wait(timeout):
            raise Failure("stomp.py: no receipt for SUBSCRIBE")
        send = conn.send
        win.start()
        _paced_sync(n, spec["rate"], lambda i: send(dest, bodies[i], headers={"x-ts": _ts(), **routing}))
        if not done.wait(timeout):
            raise Failure("stomp.py: %d of %d messages within %s s" % (len(got), n, timeout))
        win.stop()
    finally:
        try:
            conn.disconnect()
        except Exception:
            pass
    return _latency_result(lat, got, tag, n)


def worker_compat(spec: Dict[str, Any], win: cc.Window) -> Dict[str, Any]:
    """stomp.py's worker, code unchanged, after stompfast.compat.install(): what a switched stomp.py user runs."""
    import stompfast.compat

    # the harness (scanner_compare) imported the real stomp.py for its parser figures; the
    # worker's code imports stomp only inside worker_stomppy, so forgetting it here is enough
    for name in [m for m in sys.modules if m == "stomp" or m.startswith("stomp.")]:
        del sys.modules[name]
    stompfast.compat.install()
    return worker_stomppy(spec, win)


def worker_stompman(spec: Dict[str, Any], win: cc.Window) -> Dict[str, Any]:
    import stompman
    from stompman.connection import Connection
    from stompman.frames import ConnectFrame

    class VhostConnection(Connection):
        """stompman always sends ``host:<server host>``; RabbitMQ takes it as the vhost and refuses
        ``127.0.0.1``. This subclass (stompman's own ``connection_class`` hook) sends ``host:/``."""

        async def write_frame(self, frame: Any) -> None:
            if isinstance(frame, ConnectFrame):
                frame.headers["host"] = "/"
            await Connection.write_frame(self, frame)

    dest, n, scenario, tag = spec["dest"], spec["n"], spec["scenario"], spec["tag"].encode()
    timeout = float(spec["timeout"])
    bodies = cc.make_bodies(tag, n) if scenario in (PUBLISH, RECEIPTS, LATENCY) else []
    out: Dict[str, Any] = {}
    # Artemis: the routing (and window) headers our client adds by itself; None elsewhere, as users write it
    routing = cc.send_headers(spec.get("broker")) or None
    sub_auto = cc.subscribe_headers(spec.get("broker"), False) or None

    async def main() -> None:
        # heart-beat: stompman sends its heart-beats at the server's asked interval, in a loop that
        # spins when that is 0; offering one per hour makes brokers ask for one per hour.
        client = stompman.Client(
            [stompman.ConnectionParameters(spec["host"], spec["port"], spec["login"], spec["passcode"])],
            heartbeat=stompman.Heartbeat(3_600_000, 0), connection_class=VhostConnection,
            no_message_restart_interval=None)
        async with asyncio.timeout(timeout):
            async with client as c:
                if scenario == PUBLISH:
                    send = c.send
                    win.start()
                    for body in bodies[:-1]:
                        await send(body, dest, headers=routing)
                    await send(bodies[-1], dest, headers=routing, receipt_timeout=timeout)
                    win.stop()
                elif scenario == RECEIPTS:
                    send = c.send
                    win.start()
                    for body in bodies:
                        await send(body, dest, headers=routing, receipt_timeout=timeout)
                    win.stop()
                elif scenario in (DRAIN_AUTO, LATENCY):
                    got: List[bytes] = []
                    lat: List[int] = []
                    done = asyncio.Event()
                    latency = scenario == LATENCY

                    async def handler(frame: Any) -> None:
                        if latency:
                            lat.append(perf_ns() - int(frame.headers["x-ts"]))
                        got.append(frame.body)
                        if len(got) == n:
                            done.set()

                    def suppressed(exc: Exception, frame: Any) -> None:
                        out["error"] = repr(exc)

                    if not latency:
                        win.start()
                    sub = await c.subscribe(dest, handler, ack="auto", on_suppressed_exception=suppressed,
                                            headers=sub_auto, receipt_timeout=timeout)
                    if latency:
                        win.start()

                        async def send1(i: int) -> None:
                            await c.send(bodies[i], dest, headers={"x-ts": _ts(), **(routing or {})})

                        await _paced_async(n, spec["rate"], send1, asyncio.sleep)
                    await done.wait()
                    win.stop()
                    await sub.unsubscribe()
                    out.update(_latency_result(lat, got, tag, n) if latency else cc.check_bodies(got, tag, n))
                else:
                    got = []
                    done = asyncio.Event()

                    async def manual(frame: Any) -> None:
                        got.append(frame.body)
                        await frame.ack()
                        if len(got) == n:
                            done.set()

                    win.start()
                    sub = await c.subscribe_with_manual_ack(
                        dest, manual, ack="client-individual", receipt_timeout=timeout,
                        headers=cc.subscribe_headers(spec.get("broker"), True))
                    await done.wait()
                    win.stop()
                    await sub.unsubscribe()
                    out.update(cc.check_bodies(got, tag, n))

    asyncio.run(main())
    return out


def worker_raw(spec: Dict[str, Any], win: cc.Window) -> Dict[str, Any]:
    if spec["scenario"] != LATENCY:
        return cc.worker_raw(spec, win)
    import select

    dest, n, tag, rate = spec["dest"].encode(), spec["n"], spec["tag"].encode(), spec["rate"]
    sock, buf = cc.raw_connect(spec["host"], spec["port"], spec["login"], spec["passcode"], spec["timeout"])
    bodies = cc.make_bodies(tag, n)
    broker = spec.get("broker")
    head = b"SEND\ndestination:%s\n%sx-ts:" % (dest, cc.wire_headers(cc.send_headers(broker)))
    tail = b"\ncontent-length:%d\n\n" % cc.BODY_SIZE
    lat: List[int] = []
    got: List[bytes] = []
    try:
        sock.sendall(cc.raw_subscribe_frame(dest, False, broker, receipt=b"sub"))
        buf = cc.raw_wait_receipt(sock, buf, b"receipt-id:sub")
        sendall, recv = sock.sendall, sock.recv
        deadline = perf_counter() + spec["timeout"]
        win.start()
        t0 = perf_counter()
        i = 0
        while len(got) < n:
            now = perf_counter()
            if i < n:
                due = min(n, int((now - t0) * rate) + 1)
                if i < due:
                    sendall(b"".join([head + str(perf_ns()).encode() + tail + bodies[j] + b"\x00"
                                      for j in range(i, due)]))
                    i = due
                wait = max(0.0, t0 + i / rate - perf_counter())
            else:
                wait = max(0.0, deadline - now)
                if not wait:
                    raise Failure("raw: %d of %d messages before the deadline" % (len(got), n))
            if not select.select([sock], [], [], wait)[0]:
                continue
            data = recv(cc.READ_SIZE)
            t_recv = perf_ns()
            if not data:
                raise Failure("the broker closed the connection")
            buf = buf + data if buf else data
            pos = 0
            while True:
                end = buf.find(b"\x00", pos)
                if end < 0:
                    break
                while buf[pos] == 10:
                    pos += 1
                if buf.startswith(b"MESSAGE", pos):
                    hend = buf.find(b"\n\n", pos, end)
                    t = buf.find(b"\nx-ts:", pos, hend) + 6
                    lat.append(t_recv - int(buf[t:buf.find(b"\n", t)]))
                    got.append(buf[hend + 2:end])
                pos = end + 1
            buf = buf[pos:]
        win.stop()
    finally:
        cc.raw_disconnect(sock, buf)
    return _latency_result(lat, got, tag, n)


def _worker_polyglot(name: str, spec: Dict[str, Any], win: cc.Window) -> Dict[str, Any]:
    """Run bench/polyglot's program for ``name`` on this measurement: the spec it gets holds the
    exact headers the Python contenders send on this broker (routing, prefetch, window)."""
    scenario, broker = spec["scenario"], spec.get("broker")
    program_spec = {k: spec[k] for k in ("scenario", "host", "port", "login", "passcode", "dest", "n", "tag",
                                         "timeout")}
    program_spec["rate"] = spec.get("rate", 10000.0)
    program_spec["send_headers"] = list(cc.send_headers(broker).items())
    program_spec["subscribe_headers"] = list(cc.subscribe_headers(broker, scenario == DRAIN_CLIENT).items())
    data = polyglot.run(name, program_spec, spec["timeout"] + 10, spec.get("broker_pid"))
    win.result = data.pop("window")
    out: Dict[str, Any] = {k: data[k] for k in ("server", "library", "runtime") if k in data}
    if "received" in data:
        n = spec["n"]
        out.update(received=data["received"], distinct=data["distinct"],
                   bodies_ok=data["received"] == n and data["distinct"] == n
                   and data["bodies_sha256"] == polyglot.expected_sha256(spec["tag"].encode(), n))
    if data.get("lat_ns"):
        out["latency_us"] = percentiles(data["lat_ns"])
    return out


def worker_gostomp(spec: Dict[str, Any], win: cc.Window) -> Dict[str, Any]:
    return _worker_polyglot("go-stomp", spec, win)


def worker_stompjs(spec: Dict[str, Any], win: cc.Window) -> Dict[str, Any]:
    return _worker_polyglot("stompjs", spec, win)


def worker_syncfloor(spec: Dict[str, Any], win: cc.Window) -> Dict[str, Any]:
    if spec["scenario"] in (DRAIN_AUTO, DRAIN_CLIENT):
        return _drain_thread_floor(spec, win)
    return cc.worker_syncfloor(spec, win)


def _drain_thread_floor(spec: Dict[str, Any], win: cc.Window) -> Dict[str, Any]:
    """Scenarios 3 and 4: the least ``for m in sub: m.ack()`` costs when the reads happen in a loop thread.

    The blocking client's shape with nothing of STOMP but ``bytes.find``: a stock asyncio
    loop in a thread of its own reads into one reused buffer (a ``BufferedProtocol``), cuts
    each read into frames, appends each MESSAGE's (ack id, body) to a deque and notifies a
    Condition once per read; the calling thread takes them one at a time, waiting on the
    Condition only when the deque is empty, and in client-individual mode writes each
    message's ACK to the socket itself, one send per ACK (the last with a receipt, waited
    for). The gap between the single-threaded raw socket and this is what the second thread
    costs by itself.
    """
    import collections

    client_ack = spec["scenario"] == DRAIN_CLIENT
    dest, n, tag = spec["dest"].encode(), spec["n"], spec["tag"].encode()
    broker = spec.get("broker")
    sock, buf = cc.raw_connect(spec["host"], spec["port"], spec["login"], spec["passcode"], spec["timeout"])
    items: Any = collections.deque()
    ready = threading.Condition()
    state: Dict[str, Any] = {"buf": buf, "receipt": False, "error": None}

    def on_bytes(data: bytes) -> None:  # in the loop thread
        b = state["buf"] + data if state["buf"] else data
        find, startswith = b.find, b.startswith
        got = []
        pos = 0
        while True:
            end = find(b"\x00", pos)
            if end < 0:
                break
            while b[pos] == 10:
                pos += 1
            if startswith(b"MESSAGE", pos):
                hend = find(b"\n\n", pos, end)
                ack = b""
                if client_ack:
                    a = find(b"\nack:", pos, hend) + 5
                    ack = b[a:find(b"\n", a)]
                got.append((ack, b[hend + 2:end]))
            elif startswith(b"RECEIPT", pos):
                state["receipt"] = True
                got.append(None)
            pos = end + 1
        state["buf"] = b[pos:]
        if got:
            with ready:
                items.extend(got)
                ready.notify()

    def on_end(error: Optional[BaseException]) -> None:
        with ready:
            state["error"] = error or Failure("the broker closed the connection")
            ready.notify()

    loop, reader = cc.start_loop_reader(sock, on_bytes, on_end)
    timeout = spec["timeout"]
    bodies: List[bytes] = []
    try:
        win.start()
        sock.sendall(cc.raw_subscribe_frame(dest, client_ack, broker))
        popleft, append, send = items.popleft, bodies.append, sock.sendall
        while len(bodies) < n:
            if not items:
                with ready:
                    while not items and state["error"] is None:
                        if not ready.wait(timeout):
                            raise Failure("%d of %d messages before the timeout" % (len(bodies), n))
                if not items:
                    raise state["error"]
            item = popleft()
            if item is None:
                continue
            ack, body = item
            append(body)
            if client_ack:
                if len(bodies) == n:
                    send(b"ACK\nid:%s\nreceipt:done\n\n\x00" % ack)
                else:
                    send(b"ACK\nid:%s\n\n\x00" % ack)
        if client_ack:
            with ready:
                while not state["receipt"] and state["error"] is None:
                    if not ready.wait(timeout):
                        raise Failure("no RECEIPT for the last ACK")
        win.stop()
    finally:
        cc.close_threaded(sock, loop, reader)
    return cc.check_bodies(bodies, tag, n)


WORKERS = {"ours": worker_ours, "sync": worker_sync, "stomppy": worker_stomppy, "compat": worker_compat,
           "syncfloor": worker_syncfloor,
           "stompman": worker_stompman,
           "raw": worker_raw, "gostomp": worker_gostomp, "stompjs": worker_stompjs}


def run_worker(spec: Dict[str, Any]) -> int:
    cc.WORKERS.update(WORKERS)  # cc.run_worker dispatches through its table
    return cc.run_worker(spec)


def spawn_worker(spec: Dict[str, Any], timeout: float, wrap: Sequence[str] = ()) -> Dict[str, Any]:
    return cc.spawn_worker(spec, timeout, wrap, script=__file__)  # the worker must know our contenders


# ---------------------------------------------------------------------------------------
# The null broker and its "access" (prepare instead of fill, a SEND count instead of a drain)
# ---------------------------------------------------------------------------------------


class NullBroker:
    """bench/nullbroker.py in its own process for the duration of the run."""

    def __init__(self) -> None:
        script = Path(__file__).resolve().with_name("nullbroker.py")
        self.proc = subprocess.Popen([sys.executable, str(script), "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        line = self.proc.stdout.readline().decode()  # type: ignore[union-attr]
        if not line.startswith("LISTENING "):
            self.proc.kill()
            raise Failure("nullbroker did not start: %r %r" % (line, self.proc.stderr.read()))  # type: ignore
        self.port = int(line.split()[1])

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(5)


class NullAccess(cc.BrokerAccess):
    def _control(self, headers: bytes) -> bytes:
        sock, buf = self.connect()
        try:
            sock.sendall(b"SEND\n%sreceipt:ctl\n\n\x00" % headers)
            while b"\x00" not in buf:
                data = sock.recv(65536)
                if not data:
                    raise Failure("nullbroker closed the control connection")
                buf += data
            frame = buf[:buf.index(b"\x00")]
            buf = buf[len(frame) + 1:]
            return frame
        finally:
            cc.raw_disconnect(sock, buf)

    def fill(self, dest: str, tag: bytes, n: int) -> None:
        self._control(b"destination:/nullbroker/prepare\nx-dest:%s\nx-tag:%s\nx-n:%d\n" % (dest.encode(), tag, n))

    def drain_check(self, dest: str, tag: bytes, n: int, timeout: float) -> Tuple[bool, str]:
        frame = self._control(b"destination:/nullbroker/stats\nx-dest:%s\n" % dest.encode())
        i = frame.find(b"x-sends:")
        sends = int(frame[i + 8:frame.index(b"\n", i)]) if i >= 0 else -1
        if sends != n:
            return False, "the null broker counted %d SENDs to %s, expected %d" % (sends, dest, n)
        return True, "the null broker counted exactly the %d SENDs" % n

    def purge(self, dest: str, idle: float = 1.0) -> int:
        return 0


# ---------------------------------------------------------------------------------------
# The parent
# ---------------------------------------------------------------------------------------


class Run(cc.BrokerRun):
    def __init__(self, name: str, args: argparse.Namespace, run_id: str, contenders: List[Tuple[str, str]],
                 names: List[str]) -> None:
        super().__init__(name, args, run_id, contenders)
        self.names = names  # contender names, parallel to contenders
        if name == "null":
            self.access = NullAccess(self.host, self.port, args.login, args.passcode)
        self.skipped: Dict[Tuple[int, str], str] = {}

    def count_of(self, scenario: int, quick_n: Optional[int] = None) -> int:
        if scenario == LATENCY:
            return max(1, int(self.args.rate * self.args.duration))
        return super().count_of(scenario, quick_n)

    def one(self, scenario: int, key: str, backend: str, n: int, rnd: int,
            profile: Optional[Dict[str, Any]] = None, wrap: Sequence[str] = ()) -> cc.Measurement:
        self.seq += 1
        tag = "%s%d" % (self.run_id[-4:], self.seq)
        dest = self.queue(scenario)
        name = next(nm for nm, kb in zip(self.names, self.contenders) if kb == (key, backend))
        label = LABELS[name]
        timeout = 60.0 + n / 500.0
        data: Dict[str, Any] = {"ok": False}
        try:
            if scenario in (DRAIN_AUTO, DRAIN_CLIENT):
                self.access.fill(dest, tag.encode(), n)
            if self.args.settle > 0:
                cc.wait_quiet(self.pid, cc.OTHER_CPU_WARN, self.args.settle)
            spec = {"contender": key, "backend": backend, "scenario": scenario, "host": self.host,
                    "port": self.port, "login": self.args.login, "passcode": self.args.passcode, "dest": dest,
                    "n": n, "tag": tag, "timeout": timeout, "broker_pid": self.pid, "profile": profile,
                    "rate": self.args.rate, "broker": self.name}
            data = spawn_worker(spec, timeout + 30, wrap)
            if data.get("ok") and scenario in (PUBLISH, RECEIPTS):
                ok, what = self.access.drain_check(dest, tag.encode(), n, timeout)
                data["queue_check"] = what
                if not ok:
                    data.update(ok=False, error=what)
            elif data.get("ok") and self.name != "null":  # nothing may be left over (stompman's ACKs included)
                left = self.access.purge(dest, 0.3)
                if left:
                    data.update(ok=False, error="%d messages were left in the queue (unacknowledged?)" % left)
        except (OSError, Failure) as exc:
            data = {"ok": False, "error": "fill/check: %s: %s" % (type(exc).__name__, exc)}
        if not data.get("ok"):
            try:
                purged = self.access.purge(dest)
            except (OSError, Failure):
                purged = 0
            self.failures.append("%s, scenario %d (%s), %s, n=%d: %s%s" % (
                self.name, scenario, SCENARIOS[scenario], label, n, data.get("error"),
                " (purged %d leftover messages)" % purged if purged else ""))
        if data.get("server"):
            self.server = data["server"]
        return cc.Measurement(self.name, scenario, label, n, rnd, data)

    def applicable(self, scenario: int) -> List[Tuple[str, str]]:
        out = []
        for name, kb in zip(self.names, self.contenders):
            why = not_applicable(name, self.name, scenario)
            if why:
                self.skipped[(scenario, LABELS[name])] = why
            else:
                out.append(kb)
        return out

    def warmup(self) -> None:
        if self.name != "null":
            super().warmup()

    def preflight(self) -> None:
        for scenario in self.args.scenarios:
            n = min(self.args.preflight_n, self.count_of(scenario))
            for key, backend in self.applicable(scenario):
                m = self.one(scenario, key, backend, n, 0)
                if not m.ok:
                    raise Failure(self.failures[-1])
                cc.progress(self.args, "%-9s preflight scenario %d %-18s ok" % (self.name, scenario, m.contender))

    def measure(self) -> None:
        rounds = self.args.rounds
        for scenario in self.args.scenarios:
            n = self.count_of(scenario)
            contenders = self.applicable(scenario)
            for rnd in range(rounds):
                k = rnd % max(1, len(contenders))
                for key, backend in contenders[k:] + contenders[:k]:
                    m = self.one(scenario, key, backend, n, rnd + 1)
                    self.measurements.append(m)
                    if m.ok:
                        lat = m.data.get("latency_us")
                        cc.progress(self.args, "%-9s scenario %d round %d/%d %-18s %9s msgs/s %7.2f us/msg%s" % (
                            self.name, scenario, rnd + 1, rounds, m.contender, fmt_n(m.rate), m.cpu_us,
                            "  p99 %.0f us" % lat["p99"] if lat else ""))
                    else:
                        cc.progress(self.args, "%-9s scenario %d round %d/%d %-18s FAILED: %s" % (
                            self.name, scenario, rnd + 1, rounds, m.contender, m.data.get("error")))

    def cleanup(self) -> str:
        return "" if self.name == "null" else super().cleanup()


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------


def best_latency(ms: List[cc.Measurement], stat: str) -> Optional[Dict[str, float]]:
    """The round with the lowest (best) or the median p99, all its percentiles."""
    good = sorted((m.data["latency_us"] for m in ms if m.ok and m.data.get("latency_us")), key=lambda d: d["p99"])
    if not good:
        return None
    return good[0] if stat == "best" else good[(len(good) - 1) // 2]


def rows_of(run: Run, labels: List[str], stat: str) -> List[Dict[str, Any]]:
    """One row per scenario and contender: the figures the table, the JSON and the chart show."""
    groups: Dict[Tuple[int, str], List[cc.Measurement]] = {}
    for m in run.measurements:
        groups.setdefault((m.scenario, m.contender), []).append(m)
    sums = {k: cc.Summary(v) for k, v in groups.items()}
    rows = []
    for scenario in run.args.scenarios:
        st, raw = sums.get((scenario, "stomp.py")), sums.get((scenario, "raw socket"))
        for label in labels:
            row: Dict[str, Any] = {"broker": run.name, "scenario": scenario, "scenario_name": SCENARIOS[scenario],
                                   "contender": label}
            s = sums.get((scenario, label))
            if (scenario, label) in run.skipped:
                row["na"] = run.skipped[(scenario, label)]
            elif s is None or not s.reps:
                row["na"] = "FAILED" if s else "not run"
            else:
                cpu = s.cpu(stat)
                row.update({
                    "reps": s.reps, "failed": s.failed,
                    "msgs_per_s_best": s.rate("best"), "msgs_per_s_median": s.rate("median"),
                    "cpu_us_best": s.cpu("best"), "cpu_us_median": s.cpu("median"),
                    "msgs_per_cpu_s": 1e6 / cpu if cpu else None,
                    "vs_stomppy": (st.cpu(stat) / cpu) if st is not None and st.reps and cpu else None,
                    "vs_raw_cpu": (raw.cpu(stat) / cpu) if raw is not None and raw.reps and cpu else None,
                    "vs_raw_rate": (s.rate(stat) / raw.rate(stat)) if raw is not None and raw.reps else None,
                    "client_cpu_share": s.med(s.shares),
                    "broker_us": s.med(s.brokers),
                    "other_cpu_share": s.med(s.others),
                    "latency_us": best_latency(groups[(scenario, label)], stat),
                })
            rows.append(row)
    return rows


def _x(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return "%.0fx" % v if v >= 10 else "%.1fx" % v if v >= 1 else "%.2fx" % v


def print_table(run: Run, rows: List[Dict[str, Any]], stat: str) -> None:
    print()
    print("%s (%s, %s:%d): N=%s per publish/drain, %s receipts, latency %s msgs/s for %.1f s; %d round(s)" % (
        run.name.upper(), run.server, run.host, run.port, fmt_n(run.args.n), fmt_n(run.args.receipts),
        fmt_n(run.args.rate), run.args.duration, run.args.rounds))
    hdr = "%-18s %-18s %10s %10s %8s %8s %9s %8s %8s %6s %s" % (
        "scenario", "contender", "msgs/s", "msgs/s", "CPU us", "CPU us", "msgs/CPUs", "msgs/CPUs", "thr",
        "cli", "latency us")
    hdr2 = "%-18s %-18s %10s %10s %8s %8s %9s %8s %8s %6s %s" % (
        "", "", "best", "median", "/msg best", "/msg med", "/stomp.py", "/raw", "/raw", "cpu%",
        "p50 / p99 / p99.9 / max")
    print(hdr)
    print(hdr2)
    print("-" * (len(hdr) + 12))
    for r in rows:
        name = "%d %s" % (r["scenario"], r["scenario_name"])
        if "na" in r:
            if r["na"] == FLOOR_ONLY:  # a floor row outside its scenario: nothing to say
                continue
            print("%-18s %-18s %s" % (name, r["contender"], "n/a: " + r["na"] if r["na"] not in ("FAILED", "not run")
                                      else r["na"]))
            continue
        lat = r["latency_us"]
        print("%-18s %-18s %10s %10s %8.2f %8.2f %9s %8s %8s %6.0f %s%s" % (
            name, r["contender"], fmt_n(r["msgs_per_s_best"]), fmt_n(r["msgs_per_s_median"]), r["cpu_us_best"],
            r["cpu_us_median"], _x(r["vs_stomppy"]), _x(r["vs_raw_cpu"]), _x(r["vs_raw_rate"]),
            100 * r["client_cpu_share"],
            "%.0f / %.0f / %.0f / %.0f" % (lat["p50"], lat["p99"], lat["p999"], lat["max"]) if lat else "",
            "  (%d failed)" % r["failed"] if r["failed"] else ""))
    print("msgs/CPUs = messages per client-CPU-second (user+sys, all threads) relative to stomp.py's and to the "
          "raw socket's; thr/raw = throughput relative to the raw socket's; cli cpu%% = client CPU over wall time "
          "(median). Ratios use the %s round." % stat)


def evaluate_targets(all_rows: List[Dict[str, Any]], names: List[str], stat: str = "best") -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    primary = LABELS[PRIMARY]
    ours = [LABELS[n] for n in names if n in ("asyncio", "uvloop") + SYNC_NAMES]

    def add(verdict: str, broker: str, target: str, shown: str, threshold: str, value: Optional[float]) -> None:
        out.append({"broker": broker, "verdict": verdict, "target": target, "shown": shown,
                    "threshold_shown": threshold, "value": value})

    index = {(r["broker"], r["scenario"], r["contender"]): r for r in all_rows}
    brokers = list(dict.fromkeys(r["broker"] for r in all_rows))
    scenarios = sorted({r["scenario"] for r in all_rows})
    for label in ours:
        judged = label == primary
        for b in brokers:
            for s in scenarios:
                r = index.get((b, s, label))
                if r is None or ("na" in r and r["na"] not in ("FAILED", "not run")):
                    continue
                v = r.get("vs_stomppy")
                verdict = "PASS" if v is not None and v >= 10 else "FAIL"
                shown = "-" if v is None else "%.1fx" % v
                floor = (index.get((b, s, "raw socket")) or {}).get("vs_stomppy")
                if verdict == "FAIL" and floor is not None and floor < 10:
                    # no client can do better than the cheapest code for the same frames
                    shown += " (raw socket %.1fx: out of reach)" % floor
                add(verdict if judged else "INFO", b, "%s msgs/CPU-s vs stomp.py, %d %s" % (label, s, SCENARIOS[s]),
                    shown, ">= 10x" + ("" if judged else ", not judged"), v)
    for label in ours:
        judged = label == primary
        for s, floor in ((PUBLISH, 1_000_000), (DRAIN_AUTO, 500_000)):
            r = index.get(("null", s, label))
            if r is None:
                continue
            v = r.get("msgs_per_s_best")
            verdict = "PASS" if v is not None and v >= floor else "FAIL"
            share = r.get("client_cpu_share")
            add(verdict if judged else "INFO", "null", "%s msgs/s, %d %s (one connection)" % (label, s, SCENARIOS[s]),
                "-" if v is None else "%s/s (cli %.0f%%)" % (fmt_n(v), 100 * (share or 0)),
                ">= %s/s" % fmt_n(floor) + ("" if judged else ", not judged"), v)
    # issue 25: the compat layer, used as stomp.py code uses it, against stomp.py in the same run:
    # publish and drains at >= 2x stomp.py's msgs per client-CPU-second, receipts no slower
    compat = LABELS["compat"]
    if "compat" in names:
        for b in brokers:
            if b == "null":
                continue
            for s, need in ((PUBLISH, 2.0), (RECEIPTS, 1.0), (DRAIN_AUTO, 2.0), (DRAIN_CLIENT, 2.0)):
                r = index.get((b, s, compat))
                if r is None or ("na" in r and r["na"] not in ("FAILED", "not run")):
                    continue
                v = r.get("vs_stomppy")
                add("PASS" if v is not None and v >= need else "FAIL", b,
                    "%s msgs/CPU-s vs stomp.py, %d %s" % (compat, s, SCENARIOS[s]),
                    "-" if v is None else "%.1fx" % v, ">= %gx" % need, v)
    raw = index.get(("rabbitmq", LATENCY, "raw socket"))
    for label in ours:
        judged = label == primary
        r = index.get(("rabbitmq", LATENCY, label))
        if r is None or raw is None:
            continue
        mine, theirs = (r.get("latency_us") or {}).get("p99"), (raw.get("latency_us") or {}).get("p99")
        ok = mine is not None and theirs is not None and mine <= theirs + 1000
        add(("PASS" if ok else "FAIL") if judged else "INFO", "rabbitmq",
            "%s p99 latency at the fixed rate vs raw" % label,
            "-" if mine is None or theirs is None else "%.0f us (raw %.0f us)" % (mine, theirs),
            "<= raw + 1000 us" + ("" if judged else ", not judged"), mine)
    polyglot_targets(index, brokers, names, stat, add)
    return out


def polyglot_targets(index: Dict[Tuple[str, int, str], Dict[str, Any]], brokers: List[str], names: List[str],
                     stat: str, add: Any) -> None:
    """The issue's targets against the other languages' clients, measured in the same run.

    AsyncClient (asyncio and uvloop each): throughput >= go-stomp's and >= stompjs's in scenarios
    1, 3 and 4, client CPU per message <= 1.5x go-stomp's there, and in scenario 2 (latency-bound)
    throughput within 10% of the faster of the two; the blocking client: >= 0.8x go-stomp's
    throughput in every scenario it has (1-4). Every broker the run measured, the null sink included."""
    rate_key, cpu_key = "msgs_per_s_%s" % stat, "cpu_us_%s" % stat

    def row(b: str, s: int, name: str) -> Optional[Dict[str, Any]]:
        r = index.get((b, s, LABELS[name]))
        return None if r is None or "na" in r and r["na"] not in ("FAILED", "not run") else r

    def ratio(mine: Optional[Dict[str, Any]], theirs: Optional[Dict[str, Any]], key: str) -> Optional[float]:
        a, b = (mine or {}).get(key), (theirs or {}).get(key)
        return a / b if a is not None and b else None

    others = [n for n in POLYGLOT if n in names]
    for b in brokers:
        for me in [n for n in ("asyncio", "uvloop") if n in names]:
            label = LABELS[me]
            for s in (PUBLISH, DRAIN_AUTO, DRAIN_CLIENT):
                mine = row(b, s, me)
                if mine is None:
                    continue
                for other in others:
                    theirs = row(b, s, other)
                    if theirs is None:
                        continue
                    v = ratio(mine, theirs, rate_key)
                    add("PASS" if v is not None and v >= 1.0 else "FAIL", b,
                        "%s msgs/s vs %s, %d %s" % (label, LABELS[other], s, SCENARIOS[s]),
                        "-" if v is None else "%.2fx (%s/s vs %s/s)" % (v, fmt_n(mine[rate_key] or 0),
                                                                       fmt_n(theirs[rate_key] or 0)),
                        ">= 1x", v)
                theirs = row(b, s, "go-stomp") if "go-stomp" in others else None
                if theirs is not None:
                    v = ratio(mine, theirs, cpu_key)
                    add("PASS" if v is not None and v <= 1.5 else "FAIL", b,
                        "%s CPU us/msg vs go-stomp, %d %s" % (label, s, SCENARIOS[s]),
                        "-" if v is None else "%.2fx (%.2f vs %.2f us)" % (v, mine[cpu_key], theirs[cpu_key]),
                        "<= 1.5x", v)
            mine = row(b, RECEIPTS, me)
            fastest = max((r for r in (row(b, RECEIPTS, o) for o in others) if r is not None and r.get(rate_key)),
                          key=lambda r: r[rate_key], default=None)
            if mine is not None and fastest is not None:
                v = ratio(mine, fastest, rate_key)
                add("PASS" if v is not None and v >= 0.9 else "FAIL", b,
                    "%s msgs/s vs the faster of %s, %d %s" % (label, "/".join(LABELS[o] for o in others), RECEIPTS,
                                                              SCENARIOS[RECEIPTS]),
                    "-" if v is None else "%.2fx of %s (%s/s)" % (v, fastest["contender"], fmt_n(fastest[rate_key])),
                    ">= 0.9x", v)
        if "sync" in names and "go-stomp" in others:
            for s in (PUBLISH, RECEIPTS, DRAIN_AUTO, DRAIN_CLIENT):
                mine, theirs = row(b, s, "sync"), row(b, s, "go-stomp")
                if mine is None or theirs is None:
                    continue
                v = ratio(mine, theirs, rate_key)
                add("PASS" if v is not None and v >= 0.8 else "FAIL", b,
                    "%s msgs/s vs go-stomp, %d %s" % (LABELS["sync"], s, SCENARIOS[s]),
                    "-" if v is None else "%.2fx (%s/s vs %s/s)" % (v, fmt_n(mine[rate_key] or 0),
                                                                   fmt_n(theirs[rate_key] or 0)),
                    ">= 0.8x", v)


def write_png(path: str, all_rows: List[Dict[str, Any]], labels: List[str], title: str) -> Optional[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return "no PNG: matplotlib is not installed (%s)" % exc
    brokers = list(dict.fromkeys(r["broker"] for r in all_rows))
    fig, axes = plt.subplots(len(brokers), 2, figsize=(15, 3.6 * len(brokers)), squeeze=False)
    for bi, b in enumerate(brokers):
        rows = [r for r in all_rows if r["broker"] == b]
        scen = list(dict.fromkeys(r["scenario"] for r in rows))
        width = 0.8 / max(1, len(labels))
        for col, (key, ylabel) in enumerate((("vs_stomppy", "msgs per client-CPU-s / stomp.py's"),
                                              ("msgs_per_s_best", "msgs/s (best round)"))):
            ax = axes[bi][col]
            for li, label in enumerate(labels):
                xs, ys = [], []
                for si, s in enumerate(scen):
                    r = next((r for r in rows if r["scenario"] == s and r["contender"] == label), None)
                    if r is not None and r.get(key):
                        xs.append(si + (li - (len(labels) - 1) / 2) * width)
                        ys.append(r[key])
                ax.bar(xs, ys, width, label=label)
            ax.set_yscale("log")
            ax.set_xticks(range(len(scen)))
            ax.set_xticklabels(["%d %s" % (s, SCENARIOS[s]) for s in scen], fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.set_title("%s: %s" % (b, ylabel), fontsize=9)
            if key == "vs_stomppy":
                ax.axhline(10, color="red", linestyle="--", linewidth=0.8)
            ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize=7, ncol=3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return None


# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="CI smoke: 2,000 messages, 200 receipts, 0.5 s latency "
                                                        "run, 1 round, no warm-up")
    p.add_argument("--brokers", default=",".join(ALL_BROKERS), help="comma-separated from %s" % ",".join(ALL_BROKERS))
    p.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated from %s" % ",".join(CONTENDERS))
    p.add_argument("--scenarios", default="1,2,3,4,5", help="comma-separated from 1-5")
    p.add_argument("--n", type=int, help="messages per publish/drain scenario (default 50000)")
    p.add_argument("--receipts", type=int, help="messages in scenario 2 (default 2000)")
    p.add_argument("--rate", type=float, default=10000.0, help="scenario 5 publish rate, msgs/s (default 10000)")
    p.add_argument("--duration", type=float, help="scenario 5 seconds of publishing (default 3)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 2)")
    p.add_argument("--settle", type=float, help="wait up to this many s for a quiet machine before each "
                                                "measurement (default 3, quick 0.5)")
    p.add_argument("--stat", choices=("best", "median"), default="best")
    p.add_argument("--preflight-n", type=int, default=1000)
    p.add_argument("--no-warmup", dest="warmup", action="store_false")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--png", metavar="FILE")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target FAILs")
    p.add_argument("--login", default="guest")
    p.add_argument("--passcode", default="guest")
    p.add_argument("--rabbitmq-port", type=int, help="RabbitMQ STOMP port (default 61613)")
    p.add_argument("--activemq-port", type=int, help="ActiveMQ Classic STOMP port (default 61614)")
    p.add_argument("--artemis-port", type=int, help="ActiveMQ Artemis STOMP port, the stock acceptor without "
                                                    "prefixes (default 61618)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--worker", metavar="SPEC", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    q = args.quick
    args.n = args.n or (2000 if q else 50000)
    args.receipts = args.receipts or (200 if q else 2000)
    args.duration = args.duration or (0.5 if q else 3.0)
    args.rounds = args.rounds or (1 if q else 2)
    args.settle = args.settle if args.settle is not None else (0.5 if q else 3.0)
    args.preflight_n = min(args.preflight_n, 300 if q else args.preflight_n)
    if q:
        args.warmup = False
    args.broker_list = [b.strip() for b in args.brokers.split(",") if b.strip()]
    args.contender_list = [c.strip() for c in args.contenders.split(",") if c.strip()]
    for b in args.broker_list:
        if b not in ALL_BROKERS:
            p.error("unknown broker %r (choose from %s)" % (b, ", ".join(ALL_BROKERS)))
    for c in args.contender_list:
        if c not in CONTENDERS:
            p.error("unknown contender %r (choose from %s)" % (c, ", ".join(CONTENDERS)))
    try:
        args.scenarios = sorted({int(s) for s in args.scenarios.split(",")})
    except ValueError:
        p.error("--scenarios takes numbers 1-5")
    if not set(args.scenarios) <= set(SCENARIOS):
        p.error("--scenarios takes numbers 1-5")
    if args.progress is None:
        args.progress = sys.stderr.isatty()
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return run_worker(json.loads(args.worker))
    run_id = "%x%04x" % (int(time.time()), os.getpid() & 0xFFFF)
    names = args.contender_list
    for name in names:
        if name in POLYGLOT:  # build (or find built) before anything is measured; n/a with the reason if not
            _, why = polyglot.ensure(name)
            if why:
                for s in SCENARIOS:
                    NOT_APPLICABLE[(name, "*", s)] = why
    contenders = [CONTENDERS[c] for c in names]
    labels = [LABELS[c] for c in names]
    env = cc.environment()
    for mod in ("stompman", "matplotlib"):
        try:
            from importlib.metadata import version

            env[mod] = version(mod)
        except Exception:
            env[mod] = "not installed"
    try:
        env["loadavg"] = " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        pass
    print("stompfast client comparison  (%s; %s, %s CPUs; load average %s)"
          % (env["python"], env["cpu"], env["cpus"], env.get("loadavg", "?")))
    print("stompfast %s (scanner: %s) on anyio %s, uvloop %s; stomp.py %s; stompman %s"
          % (env["stompfast"], env["scanner"], env["anyio"], env["uvloop"], env["stomp.py"], env["stompman"]))
    env.update(polyglot.versions(names))
    if any(n in POLYGLOT for n in names):
        print("other languages: %s" % "; ".join("%s %s%s" % (n, env[n], "" if not not_applicable(n, "*", PUBLISH)
                                                               else " n/a: " + not_applicable(n, "*", PUBLISH))
                                                for n in names if n in POLYGLOT))
    print("brokers: %s; contenders: %s; scenarios %s; N=%s, receipts %s, latency %s msgs/s x %.1f s; %d rounds"
          % (", ".join(args.broker_list), ", ".join(labels), ",".join(map(str, args.scenarios)), fmt_n(args.n),
             fmt_n(args.receipts), fmt_n(args.rate), args.duration, args.rounds))
    sys.stdout.flush()

    started = perf_counter()
    runs: List[Run] = []
    notes: List[str] = []
    all_rows: List[Dict[str, Any]] = []
    null: Optional[NullBroker] = None
    try:
        for name in args.broker_list:
            if name == "null":
                null = NullBroker()
                cc.BROKERS["null"] = ("127.0.0.1", null.port)
            run = Run(name, args, run_id, contenders, names)
            if name == "null" and null is not None:
                run.pid = null.proc.pid
            err = run.ready()
            runs.append(run)
            if err:
                print("\n%s: NOT READY (%s)" % (name, err))
                notes.append("%s not measured: %s" % (name, err))
                continue
            try:
                t0 = perf_counter()
                if args.warmup:
                    run.warmup()
                run.preflight()
                cc.progress(args, "%-9s warm-up and correctness pass in %.1f s" % (name, perf_counter() - t0))
                run.measure()
            finally:
                note = run.cleanup()
                if note:
                    notes.append(note)
            rows = rows_of(run, labels, args.stat)
            all_rows += rows
            print_table(run, rows, args.stat)
            sys.stdout.flush()
    except Failure as exc:
        print("\nCORRECTNESS FAILURE: %s" % exc)
        if args.json:
            cc.write_json(args.json, {"environment": env, "args": vars(args), "correctness_failure": str(exc),
                                      "measurements": [m.as_dict() for r in runs for m in r.measurements]})
        return 2
    finally:
        if null is not None:
            null.stop()
    elapsed = perf_counter() - started

    print()
    shown = [(c, s, t) for (c, s), t in NOTES.items() if c in names and s in args.scenarios]
    for c, s, t in shown:
        print("note: %s, scenario %d: %s" % (LABELS[c], s, t))
    failures = [f for r in runs for f in r.failures]
    print("correctness: consumers received exactly the N distinct bodies filled or replayed; publishers' "
          "messages were all in the queue (real brokers) or counted by the null sink.%s"
          % ("" if not failures else " %d MEASUREMENTS FAILED:" % len(failures)))
    for f in failures:
        print("  FAILED " + f)
    busy = [(r.name, m) for r in runs for m in r.measurements
            if m.ok and m.other_share is not None and m.other_share > cc.OTHER_CPU_WARN and m.wall >= 0.5]
    if busy:
        print("WARNING: other processes used more than %d%% of a CPU during %d timed parts; those figures are "
              "less reliable." % (100 * cc.OTHER_CPU_WARN, len(busy)))
    for note in notes:
        print("note: " + note)

    targets = evaluate_targets(all_rows, names, args.stat)
    print()
    print("TARGETS (%s of %d rounds; judged for %s, other clients of ours as INFO%s)"
          % (args.stat, args.rounds, LABELS[PRIMARY],
             "; the targets against go-stomp and stompjs are judged for each client of ours they name"
             if any(n in POLYGLOT for n in names) else ""))
    for t in targets:
        print("  %-4s %-9s %-58s %-26s (%s)" % (t["verdict"], t["broker"], t["target"], t["shown"],
                                                 t["threshold_shown"]))
    judged = [t for t in targets if t["verdict"] != "INFO"]
    failed = [t for t in judged if t["verdict"] != "PASS"]
    print("%d/%d targets passed; measured in %.0f s" % (len(judged) - len(failed), len(judged), elapsed))

    if args.json:
        cc.write_json(args.json, {
            "environment": env, "args": vars(args), "run_id": run_id,
            "rows": all_rows,
            "measurements": [m.as_dict() for r in runs for m in r.measurements],
            "targets": targets, "failures": failures, "elapsed_s": elapsed,
        })
        print("wrote %s" % args.json)
    if args.png:
        err = write_png(args.png, all_rows, labels, "stompfast %s vs stomp.py %s, stompman %s, raw; %s" % (
            env["stompfast"], env["stomp.py"], env["stompman"], env["cpu"]))
        print(err or "wrote %s" % args.png)
    if failures:
        return 2
    return 1 if (args.strict and failed) else 0


if __name__ == "__main__":
    sys.exit(main())
