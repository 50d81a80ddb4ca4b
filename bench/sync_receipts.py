#!/usr/bin/env python
"""The blocking client's receipted send on every event loop and transport, beside stomp.py and two floors.

Run from the repository root, with RabbitMQ started by ``scripts/brokers.sh`` (its
plain, TLS and WebSocket ports; ``eval "$(bash scripts/brokers.sh env)"`` sets the URLs)::

    python bench/sync_receipts.py [--n 3000] [--rounds 3] [--only uvloop,trio] [--baseline ../old-checkout]

What a user writes -- ``client.send(dest, body, receipt=True)`` in a loop, 100-byte
bodies -- on each (loop, transport) our blocking client offers: the stock asyncio
loop, uvloop and trio, over plain TCP, TLS and WebSocket. Each runs in a fresh
process; the figures are that process's CPU per round trip (``getrusage``: every
thread) and its round trips per second. Beside them, with the same loop and
transport and nothing of STOMP but ``bytes.find``:

* ``floor: hop`` -- the calling thread hands the raw SEND to the event loop
  (``call_soon_threadsafe`` / trio's ``run_sync_soon`` into a writer task), the
  loop writes it, reads the RECEIPT and releases the thread. The least any client
  whose loop does the writing spends: a loop wake-up to write, one to read, one
  to release the caller.
* ``floor: direct`` -- the calling thread writes the raw SEND to the socket itself
  (over WebSocket framed with wsproto) and the loop only reads: plain TCP on every
  loop, WebSocket on asyncio (a TLS connection's state belongs to the loop, as
  trio's WebSocket stream does in our client). The least a client of our design spends.

and stomp.py (plain TCP and TLS: its receiver thread reads, the caller writes).
Ratios are against the floors and stomp.py of the same run; quote ratios, not
absolute times (the machine is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import select
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

BODY = b"x" * 100
WARMUP = 200
LOOPS = ("asyncio", "uvloop", "trio")
TRANSPORTS = ("tcp", "tls", "ws")


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def urls() -> Dict[str, str]:
    """The broker's URL per transport, from the environment ``scripts/brokers.sh env`` sets."""
    found = {
        "tcp": os.environ.get("STOMPFAST_RABBITMQ_URL", "stomp://guest:guest@127.0.0.1:61613/"),
        "tls": os.environ.get("STOMPFAST_RABBITMQ_TLS_URL", ""),
        "ws": os.environ.get("STOMPFAST_RABBITMQ_WS_URL", ""),
    }
    return {k: v for k, v in found.items() if v}


def tls_context() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=os.environ["STOMPFAST_TLS_CA"])


class Timed:
    """N round trips after a warm-up: the process's CPU and the wall time of the measured ones."""

    def __init__(self, n: int) -> None:
        self.n = n

    def run(self, one: Callable[[int], None]) -> Dict[str, float]:
        for i in range(WARMUP):
            one(i)
        c0, t0 = cpu(), time.perf_counter()
        for i in range(WARMUP, WARMUP + self.n):
            one(i)
        c1, t1 = cpu(), time.perf_counter()
        return {"cpu_us": (c1 - c0) / self.n * 1e6, "rate": self.n / (t1 - t0)}


# --- our blocking client ---------------------------------------------------------------


def worker_ours(loop: str, transport: str, url: str, dest: str, n: int) -> Dict[str, float]:
    from stompfast import Client

    backend = "trio" if loop == "trio" else "asyncio"
    options = {"use_uvloop": True} if loop == "uvloop" else None
    kwargs: Dict[str, Any] = {"ssl": tls_context()} if transport == "tls" else {}
    with Client(url, backend=backend, backend_options=options, heart_beat=(0, 0), **kwargs) as client:
        def one(i: int) -> None:
            client.send(dest, BODY, receipt=True)

        return Timed(n).run(one)


# --- stomp.py ---------------------------------------------------------------------------


def worker_stomppy(transport: str, url: str, dest: str, n: int) -> Dict[str, float]:
    import stomp

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 61613
    got: Dict[str, Any] = {"ids": set()}
    cond = threading.Condition()

    class Listener(stomp.ConnectionListener):  # type: ignore[misc]
        def on_receipt(self, frame: Any) -> None:
            with cond:
                got["ids"].add(frame.headers["receipt-id"])
                cond.notify_all()

    conn = stomp.Connection12([(host, port)], vhost="/", heartbeats=(0, 0))
    if transport == "tls":
        conn.set_ssl(for_hosts=[(host, port)], ca_certs=os.environ["STOMPFAST_TLS_CA"])
    conn.set_listener("timing", Listener())
    conn.connect(parts.username or "guest", parts.password or "guest", wait=True)

    def one(i: int) -> None:
        rid = "r%d" % i
        conn.send(dest, BODY, receipt=rid)
        with cond:
            while rid not in got["ids"]:
                if not cond.wait(10):
                    raise RuntimeError("no RECEIPT within 10 s")
            got["ids"].discard(rid)

    try:
        return Timed(n).run(one)
    finally:
        conn.disconnect()


# --- the floors -------------------------------------------------------------------------


def send_frame(dest: str, i: int) -> bytes:
    return b"SEND\ndestination:%s\nreceipt:r%d\ncontent-length:%d\n\n%s\x00" % (dest.encode(), i, len(BODY), BODY)


def send_from_thread(sock: socket.socket, data: bytes) -> None:
    """The calling thread's write on its duplicate of the loop's socket.

    A duplicate shares the open file's O_NONBLOCK with the loop's socket, which
    must stay non-blocking: wait for room with ``select``.
    """
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view):]
        except BlockingIOError:
            select.select([], [sock], [])


def connect_frame(url: str) -> bytes:
    parts = urlsplit(url)
    return b"CONNECT\naccept-version:1.2\nhost:/\nlogin:%s\npasscode:%s\nheart-beat:0,0\n\n\x00" % (
        (parts.username or "guest").encode(), (parts.password or "guest").encode())


class Waiter:
    """The caller's side of a round trip: one lock per frame, released by the reader on the next NUL."""

    def __init__(self) -> None:
        self.buf = b""
        self.waiting: Optional[threading.Lock] = None
        self.error: Optional[BaseException] = None

    def arm(self) -> threading.Lock:
        lock = threading.Lock()
        lock.acquire()
        self.waiting = lock
        return lock

    def feed(self, data: bytes) -> None:
        """(In the reader.) Bytes from the broker; release the caller when a whole frame is in."""
        self.buf += data
        lock = self.waiting
        if lock is not None and b"\x00" in self.buf:
            self.waiting = None
            lock.release()

    def end(self, error: Optional[BaseException]) -> None:
        self.error = error or ConnectionError("the broker closed the connection")
        lock = self.waiting
        if lock is not None:
            self.waiting = None
            lock.release()

    def take(self, lock: threading.Lock, expect: bytes) -> None:
        """(In the caller.) Wait for the frame, check it is ``expect`` (a command or a receipt id line)."""
        if not lock.acquire(timeout=10):
            raise RuntimeError("no frame within 10 s")
        if self.error is not None:
            raise self.error
        end = self.buf.index(b"\x00")
        head, self.buf = self.buf[:end], self.buf[end + 1:]
        if expect not in head:
            raise RuntimeError("expected %r, got %r" % (expect, head[:200]))


class WsCodec:
    """wsproto's client side (stompfast's own WebSocket library): the upgrade request, framing, unframing."""

    def __init__(self, url: str) -> None:
        from wsproto import ConnectionType, WSConnection
        from wsproto.events import Request

        parts = urlsplit(url)
        self.conn = WSConnection(ConnectionType.CLIENT)
        self.request: bytes = self.conn.send(Request(
            host="%s:%s" % (parts.hostname, parts.port), target=parts.path or "/ws", subprotocols=["v12.stomp"]))
        self.accepted = threading.Event()

    def frame(self, data: bytes) -> bytes:
        from wsproto.events import Message

        return self.conn.send(Message(data=data))

    def unframe(self, data: bytes) -> List[bytes]:
        """The STOMP bytes of the WebSocket messages completed by ``data``; notes the upgrade's answer."""
        from wsproto.events import AcceptConnection, BytesMessage, TextMessage

        self.conn.receive_data(data)
        out = []
        for event in self.conn.events():
            if isinstance(event, BytesMessage):
                out.append(bytes(event.data))
            elif isinstance(event, TextMessage):
                out.append(event.data.encode())
            elif isinstance(event, AcceptConnection):
                self.accepted.set()
            else:
                raise RuntimeError("unexpected WebSocket event %r" % (event,))
        return out


def plain(data: bytes) -> bytes:
    return data


def worker_floor_asyncio(loop_kind: str, transport: str, url: str, dest: str, n: int,
                         direct: bool) -> Dict[str, float]:
    import asyncio

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 61613
    waiter = Waiter()
    ws = WsCodec(url) if transport == "ws" else None

    class Reader(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            if ws is None:
                waiter.feed(data)
                return
            for message in ws.unframe(data):
                waiter.feed(message)

        def connection_lost(self, exc: Optional[BaseException]) -> None:
            waiter.end(exc)

    if loop_kind == "uvloop":
        import uvloop

        loop: Any = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    kwargs: Dict[str, Any] = {"ssl": tls_context(), "server_hostname": host} if transport == "tls" else {}
    made = asyncio.run_coroutine_threadsafe(loop.create_connection(Reader, host, port, **kwargs), loop)
    tr, _ = made.result(10)
    frame_of: Callable[[bytes], bytes] = plain if ws is None else ws.frame
    if ws is not None:
        loop.call_soon_threadsafe(tr.write, ws.request)
        if not ws.accepted.wait(10):
            raise RuntimeError("no WebSocket upgrade")
    lock = waiter.arm()
    loop.call_soon_threadsafe(tr.write, frame_of(connect_frame(url)))
    waiter.take(lock, b"CONNECTED")
    sock: Optional[socket.socket] = None
    if direct:
        sock = socket.socket(fileno=os.dup(tr.get_extra_info("socket").fileno()))

    def one(i: int) -> None:
        lock = waiter.arm()
        if sock is not None:
            send_from_thread(sock, frame_of(send_frame(dest, i)))
        else:
            loop.call_soon_threadsafe(tr.write, frame_of(send_frame(dest, i)))
        waiter.take(lock, b"receipt-id:r%d\n" % i)

    try:
        return Timed(n).run(one)
    finally:
        loop.call_soon_threadsafe(tr.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        if sock is not None:
            sock.close()


def worker_floor_trio(transport: str, url: str, dest: str, n: int, direct: bool) -> Dict[str, float]:
    import trio

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 61613
    waiter = Waiter()
    ws = WsCodec(url) if transport == "ws" else None
    ready: Dict[str, Any] = {}
    started = threading.Event()
    stop = threading.Event()

    async def main() -> None:
        stream: Any = await trio.open_tcp_stream(host, port)
        raw_sock = stream.socket
        if transport == "tls":
            stream = trio.SSLStream(stream, tls_context(), server_hostname=host)
            await stream.do_handshake()
        if ws is not None:
            await stream.send_all(ws.request)
            while not ws.accepted.is_set():
                ws.unframe(await stream.receive_some(65536))
        to_write, writes = trio.open_memory_channel[bytes](1000)

        async def writer() -> None:
            async for data in writes:
                await stream.send_all(data)

        async def reader() -> None:
            try:
                while True:
                    data = await stream.receive_some(65536)
                    if not data:
                        waiter.end(None)
                        return
                    if ws is None:
                        waiter.feed(data)
                    else:
                        for message in ws.unframe(data):
                            waiter.feed(message)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                waiter.end(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            nursery.start_soon(reader)
            ready.update(token=trio.lowlevel.current_trio_token(), send=to_write.send_nowait, sock=raw_sock)
            started.set()
            await trio.to_thread.run_sync(stop.wait)
            nursery.cancel_scope.cancel()

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("trio did not start")
    token, send = ready["token"], ready["send"]
    frame_of: Callable[[bytes], bytes] = plain if ws is None else ws.frame
    lock = waiter.arm()
    token.run_sync_soon(send, frame_of(connect_frame(url)))
    waiter.take(lock, b"CONNECTED")
    sock: Optional[socket.socket] = None
    if direct:
        sock = socket.socket(fileno=os.dup(ready["sock"].fileno()))

    def one(i: int) -> None:
        lock = waiter.arm()
        if sock is not None:
            send_from_thread(sock, send_frame(dest, i))
        else:
            token.run_sync_soon(send, frame_of(send_frame(dest, i)))
        waiter.take(lock, b"receipt-id:r%d\n" % i)

    try:
        return Timed(n).run(one)
    finally:
        stop.set()
        thread.join(5)
        if sock is not None:
            sock.close()


# --- the run ----------------------------------------------------------------------------


def contenders(available: Dict[str, str]) -> List[Tuple[str, Dict[str, Any]]]:
    """Every (label, worker spec) this machine can run, in the order of the table."""
    out: List[Tuple[str, Dict[str, Any]]] = []
    for transport in TRANSPORTS:
        if transport not in available:
            continue
        if transport != "ws":
            out.append(("stomp.py/%s" % transport, {"kind": "stomppy", "transport": transport}))
        for loop in LOOPS:
            out.append(("stompfast/%s/%s" % (loop, transport), {"kind": "ours", "loop": loop, "transport": transport}))
            out.append(("floor: hop/%s/%s" % (loop, transport),
                        {"kind": "floor", "loop": loop, "transport": transport, "direct": False}))
            # a thread may write plain TCP on every loop, and a WebSocket on asyncio
            if transport == "tcp" or (transport == "ws" and loop != "trio"):
                out.append(("floor: direct/%s/%s" % (loop, transport),
                            {"kind": "floor", "loop": loop, "transport": transport, "direct": True}))
    return out


def run_worker(spec: Dict[str, Any]) -> Dict[str, float]:
    url, dest, n = spec["url"], spec["dest"], spec["n"]
    if spec["kind"] == "ours":
        return worker_ours(spec["loop"], spec["transport"], url, dest, n)
    if spec["kind"] == "stomppy":
        return worker_stomppy(spec["transport"], url, dest, n)
    if spec["loop"] == "trio":
        return worker_floor_trio(spec["transport"], url, dest, n, spec["direct"])
    return worker_floor_asyncio(spec["loop"], spec["transport"], url, dest, n, spec["direct"])


def spawn(spec: Dict[str, Any]) -> Dict[str, Any]:
    env = dict(os.environ)
    if spec.get("baseline"):
        # another checkout's stompfast first on the path (its compiled scanner must be built there)
        env["PYTHONPATH"] = os.pathsep.join([spec["baseline"]] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)],
                          capture_output=True, text=True, timeout=300, env=env)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def median(values: List[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=3000, help="measured round trips per process (default 3000)")
    p.add_argument("--rounds", type=int, default=3, help="processes per contender, interleaved (default 3)")
    p.add_argument("--only", default="", help="comma-separated substrings of the contenders to run")
    p.add_argument("--baseline", metavar="DIR",
                   help="also run our rows with the stompfast of another checkout (a git worktree of an earlier "
                        "commit, its extension built), interleaved, labelled 'was:'")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(run_worker(json.loads(args.worker))))
        return 0
    available = urls()
    missing = [t for t in TRANSPORTS if t not in available]
    if missing:
        print("not measured (no URL in the environment; eval \"$(bash scripts/brokers.sh env)\"): %s"
              % ", ".join(missing))
    chosen = contenders(available)
    if args.baseline:
        baseline = os.path.abspath(args.baseline)
        chosen = [item for label, spec in chosen
                  for item in ([(label, spec)] + ([("was: " + label, dict(spec, baseline=baseline))]
                                                  if spec["kind"] == "ours" else []))]
    try:
        import stomp  # noqa: F401
    except ImportError:
        print("stomp.py is not installed (pip install -e '.[bench]'): its rows are left out")
        chosen = [(label, spec) for label, spec in chosen if spec["kind"] != "stomppy"]
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        chosen = [(label, spec) for label, spec in chosen
                  if any(w in label for w in wanted) or label.startswith("stomp.py")]
    # A topic nobody subscribes to: the broker confirms every SEND and keeps nothing, so
    # nothing piles up between runs; the client's work is that of any receipted send.
    dest = "/topic/bench-sync-receipts-%s" % uuid.uuid4().hex[:8]
    results: Dict[str, List[Dict[str, Any]]] = {label: [] for label, _ in chosen}
    started = time.monotonic()
    for rnd in range(args.rounds):
        # interleaved, and each round in another order, so drift in the machine's load is shared
        order = chosen if rnd % 2 == 0 else list(reversed(chosen))
        for label, spec in order:
            full = dict(spec, url=available[spec["transport"]], dest=dest, n=args.n)
            results[label].append(spawn(full))
            sys.stderr.write(".")
            sys.stderr.flush()
    sys.stderr.write("\n")
    table: Dict[str, Dict[str, float]] = {}
    for label, runs in results.items():
        good = [r for r in runs if "error" not in r]
        if not good:
            print("%-28s failed: %s" % (label, runs[0].get("error")))
            continue
        table[label] = {"cpu_us": median([r["cpu_us"] for r in good]),
                        "cpu_min": min(r["cpu_us"] for r in good), "cpu_max": max(r["cpu_us"] for r in good),
                        "rate": median([r["rate"] for r in good])}
    import stompfast

    try:
        stomp_version = version("stomp-py")
    except PackageNotFoundError:
        stomp_version = "not installed"
    print("Python %s, stompfast %s, stomp.py %s; %s; %d round trips x %d rounds (medians; CPU range in"
          " brackets); %.0f s" % (platform.python_version(), stompfast.__version__, stomp_version,
                                  available["tcp"], args.n, args.rounds, time.monotonic() - started))
    header = "%-28s %16s %9s %10s %9s %11s" % ("contender", "CPU us/rt", "rt/s", "vs stomp.py", "vs hop",
                                                "vs direct")
    print(header)
    print("-" * len(header))
    for label, _ in chosen:
        row = table.get(label)
        if row is None:
            continue
        parts = label.split("/")
        transport = parts[-1]
        loop = parts[-2] if len(parts) >= 3 else ""

        def ratio(other: str, label: str = label, row: Dict[str, float] = row) -> str:
            peer = table.get(other)
            return "%.2fx" % (row["cpu_us"] / peer["cpu_us"]) if peer and other != label else "-"

        print("%-28s %6.1f [%4.0f-%4.0f] %9.0f %10s %9s %11s" % (
            label, row["cpu_us"], row["cpu_min"], row["cpu_max"], row["rate"],
            ratio("stomp.py/%s" % transport) if transport != "ws" else "-",
            ratio("floor: hop/%s/%s" % (loop, transport)) if loop else "-",
            ratio("floor: direct/%s/%s" % (loop, transport)) if loop else "-"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
