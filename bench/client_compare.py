#!/usr/bin/env python
"""End-to-end clients on real brokers: stompfast's AsyncClient against stomp.py and raw sockets, in one run.

Run from the repository root, with the brokers up (``bash scripts/brokers.sh start``)::

    python bench/client_compare.py                        # both brokers, about 5-7 minutes
    python bench/client_compare.py --quick                # CI smoke: one broker, 5,000 messages, < 60 s
    python bench/client_compare.py --broker activemq --backends asyncio,uvloop,trio
    python bench/client_compare.py --json bench/results/client.json --check
    python bench/client_compare.py --profile 4 --broker rabbitmq --profiler cprofile   # where the CPU goes

What is measured
================

Against one broker at a time (RabbitMQ STOMP on 127.0.0.1:61613, then ActiveMQ on 61614;
``--broker`` picks one; ``--broker artemis`` adds ActiveMQ Artemis on 61618, its stock
acceptor, see below; ``--<broker>-port`` moves one), four scenarios, 100-byte bodies,
STOMP 1.2, heart-beats off:

1. ``publish``: send N messages (default 50,000), the last one with a ``receipt``; the
   time ends when that RECEIPT arrives (the broker handles one connection's frames in
   order, so it proves the broker got them all).
2. ``send+receipt``: send M messages (default 2,000), each one awaiting its RECEIPT
   before the next is sent (latency-bound).
3. ``drain auto``: the queue is filled with N messages first (untimed, raw socket);
   the time runs from SUBSCRIBE (ack auto) to the last message received.
4. ``drain client-ind``: the same with ack ``client-individual``, every message acked,
   the last ACK with a receipt; the time ends when that RECEIPT arrives (so it includes
   the broker getting every ack).

Contenders (each one doing the same broker-side work: same frames, same headers):

* ``stompfast/asyncio`` -- ``stompfast.AsyncClient(url, heart_beat=(0, 0))`` under
  ``anyio.run`` on asyncio; ``--backends`` adds ``stompfast/uvloop`` (asyncio with
  uvloop) and ``stompfast/trio``. The code is what the README shows a user writing:
  ``await c.send(dest, body)`` in a loop, ``receipt=True`` on the last or on each;
  ``async with c.subscribe(dest, ack=..., buffer_size=1000) as sub: async for msg in
  sub`` with ``await msg.ack()`` (``receipt=True`` on the last). In client-individual
  mode the subscription asks the broker for a prefetch of ``buffer_size`` (1000).
* ``stomp.py`` -- stomp.py 9 as its users write it: ``stomp.Connection12([(host, port)],
  heartbeats=(0, 0), vhost="/")`` (``vhost`` because RabbitMQ refuses its default
  ``host`` header), a ``ConnectionListener`` whose ``on_message`` collects the body and,
  in client-individual mode, calls ``conn.ack(frame.headers["ack"])`` (the last with a
  receipt), and ``on_receipt`` setting a ``threading.Event`` the main thread waits on.
  ``conn.send(dest, body)`` per message (``receipt=...`` as a header where the scenario
  asks). Its defaults are kept (``auto_decode=True``: bodies arrive as ``str``). The same
  prefetch headers as ours are passed to SUBSCRIBE in client-individual mode.
* ``raw socket`` -- the floor: a blocking ``socket`` and the cheapest correct code doing
  the same work. Publishing: frames encoded before the timed part (byte-identical to
  ours: ``destination``, ``content-length``, ``receipt`` where asked), written with
  ``sendall`` in batches of about 256 KiB. Receipts: ``sendall`` then ``recv`` until the
  NUL, check it is the RECEIPT asked for. Consuming: 256 KiB ``recv`` calls, a loop of
  ``bytes.find`` (NUL, end of headers, ``\\nack:``) that slices each body out and, in
  client-individual mode, builds one ACK per message from the ``ack`` header value
  (sent back as it is on the wire, escapes included) and writes the ACKs of one read
  with one ``sendall``. It does not honour ``content-length`` (the benchmark's bodies
  hold no NUL): it is a floor, not a client. Where a broker trickles messages out, its
  blocking ``recv`` returns fewer messages per read than our client gets (whose slower
  loop lets more pile up), so it pays more syscalls per message there (bench/README.md).

On Artemis (a stock acceptor: no ``/queue/`` prefix, new addresses MULTICAST; windows in
bytes) our client adds ``destination-type:ANYCAST`` to every SEND, ``subscription-type:ANYCAST``
to every SUBSCRIBE and, in client-individual mode, ``consumer-window-size`` of ``buffer_size``
x 1024 bytes instead of a prefetch count (it reads the CONNECTED ``server`` header; see
docs/brokers.md). Every other contender, and the parent's untimed fill and check, is given
exactly those headers (``send_headers``, ``subscribe_headers``): without them a queue
behaves as a topic there and the drains find nothing, and ``activemq.prefetchSize:1000``
would be a 1,000-byte window.

Every contender and scenario runs in a fresh subprocess (this script with ``--worker``),
so the client's CPU time is its own: ``resource.getrusage(RUSAGE_SELF)`` (user + sys,
every thread of the process: stomp.py's receiver thread included) around the timed part,
with ``time.perf_counter`` for the wall time. Connecting, building the bodies and
closing happen outside it. The broker's own CPU time over the same window is read from
``/proc/<broker pid>/stat`` and reported (``broker us/msg``), and so is the CPU the rest
of the machine used (``other%``, from ``/proc/stat``: total busy minus client minus
broker); above 20% of one CPU a warning says other processes competed. On a shared
machine each measurement first waits (``--settle``, up to 10 s) for a quiet spell: other
processes below 20% of a CPU over a quarter second.

Rounds: each scenario is measured ``--rounds`` times (default 5) per contender,
interleaved (round 1 runs every contender once, then round 2, ..., the order rotated
each round) so a noisy spell hits all contenders alike. Tables show the best and the
median; ``CPU us/msg above raw``, ``vs raw`` and the targets use the best (``--stat
median`` to change that). Before the rounds, per broker: a warm-up (fill and drain N
messages, so ActiveMQ's JIT has compiled its paths) and a correctness pass of every
contender and scenario on a small N.

Correctness (every run, timed or not): consume scenarios must receive exactly N distinct
bodies, equal to the set that was filled (each measurement's bodies carry its own tag, so
leftovers of another run are caught); publish scenarios must leave exactly N messages,
with the bodies sent, in the queue, which is then drained (untimed, raw socket; after N
the drain waits 0.3 s for extras, which fail the check). Every measurement uses the
run's own queues (``/queue/sfbench-<run id>-<scenario>``); they are drained after use and,
on RabbitMQ, deleted at the end with ``rabbitmqctl delete_queue`` when it is available.
A correctness failure prints ``CORRECTNESS FAILURE`` and exits with status 2.

Targets (printed as PASS/FAIL per broker; ``--check`` makes a FAIL exit with status 1),
for ``stompfast/asyncio`` (other backends are shown as INFO lines):
client CPU per message above the raw baseline's at most 1 us for scenario 1, 2 us for
scenario 3 and 3 us for scenario 4; throughput at least 90% of the raw baseline's in
every scenario. stomp.py's CPU above raw is printed for the record (measured on these machines
when the project started: about 7, 10-20 and 23-27 us).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

# stomp.utils resolves host names at import time; irrelevant here and it can stall.
os.environ.setdefault("STOMP_SKIP_HOSTNAME_SCAN", "1")

if importlib.util.find_spec("stompfast") is None:  # not installed: use the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parent))  # scanner_compare, whatever the working directory

import scanner_compare as sc  # noqa: E402  (the house helpers: Failure, fmt_n, environment, JSON output)

perf_counter = time.perf_counter
Failure = sc.Failure
fmt_n = sc.fmt_n
write_json = sc._write_json

BROKERS: Dict[str, Tuple[str, int]] = {"rabbitmq": ("127.0.0.1", 61613), "activemq": ("127.0.0.1", 61614),
                                        "artemis": ("127.0.0.1", 61618)}
SCENARIOS: Dict[int, str] = {1: "publish", 2: "send+receipt", 3: "drain auto", 4: "drain client-ind"}
PUBLISH, RECEIPTS, DRAIN_AUTO, DRAIN_CLIENT = 1, 2, 3, 4
BACKENDS = ("asyncio", "uvloop", "trio")
BODY_SIZE = 100
READ_SIZE = 256 * 1024
BATCH_BYTES = 256 * 1024
PREFETCH = 1000  # our default buffer_size, which our client-individual subscription asks for as prefetch
# stompfast._brokers.ARTEMIS_WINDOW_BYTES_PER_MESSAGE (tests/test_bench_compare.py checks they agree):
# not imported, so that the other contenders' workers never load stompfast (least of all in a timed part)
ARTEMIS_WINDOW_BYTES_PER_MESSAGE = 1024
OTHER_CPU_WARN = 0.2  # share of one CPU used by other processes during a timed part
# What stomp.py measured here when the project started (CPU us/msg above raw), for the record.
STOMPPY_EARLIER = {PUBLISH: "about 7", DRAIN_AUTO: "10-20", DRAIN_CLIENT: "23-27"}


def make_body(tag: bytes, i: int) -> bytes:
    head = b"%s:%08d:" % (tag, i)
    return head + b"x" * (BODY_SIZE - len(head))


def make_bodies(tag: bytes, n: int) -> List[bytes]:
    return [make_body(tag, i) for i in range(n)]


def send_headers(broker: Optional[str]) -> Dict[str, str]:
    """What every contender's SEND carries on ``broker`` besides destination and content-length.

    On Artemis (stock acceptor, no prefixes) a new address is MULTICAST: without
    ``destination-type:ANYCAST`` a ``/queue/`` SEND with no consumer yet is dropped. Our
    client adds the header by itself (from CONNECTED's server header); the others are
    given it here, so that every contender does the same broker-side work."""
    return {"destination-type": "ANYCAST"} if broker == "artemis" else {}


def subscribe_headers(broker: Optional[str], client_ack: bool) -> Dict[str, str]:
    """What every contender's SUBSCRIBE carries on ``broker`` besides destination, id and ack.

    In client-individual mode, the prefetch our subscription (``buffer_size=PREFETCH``)
    asks for: ``prefetch-count`` and ``activemq.prefetchSize`` on RabbitMQ and ActiveMQ
    (each reads its own); on Artemis, which reads both ``consumer-window-size`` and
    ``activemq.prefetchSize`` as bytes, the window our client writes there
    (``PREFETCH`` x ``ARTEMIS_WINDOW_BYTES_PER_MESSAGE`` bytes), and ``subscription-type:ANYCAST``
    in both modes (docs/brokers.md). Cheap: workers call it in their timed part, as a user would."""
    if broker == "artemis":
        h = {"subscription-type": "ANYCAST"}
        if client_ack:
            h["consumer-window-size"] = str(PREFETCH * ARTEMIS_WINDOW_BYTES_PER_MESSAGE)
        return h
    if client_ack:
        return {"prefetch-count": str(PREFETCH), "activemq.prefetchSize": str(PREFETCH)}
    return {}


def wire_headers(headers: Dict[str, str]) -> bytes:
    """``name:value\\n`` lines (the benchmark's values need no escaping)."""
    return b"".join(b"%s:%s\n" % (k.encode(), v.encode()) for k, v in headers.items())


def contender_label(c: str) -> str:
    return {"stomppy": "stomp.py", "raw": "raw socket", "aiofloor": "asyncio floor"}.get(c, c)


# ---------------------------------------------------------------------------------------
# Raw socket: the baseline contender, and the parent's untimed fill / drain / check
# ---------------------------------------------------------------------------------------


def raw_connect(host: str, port: int, login: str, passcode: str,
                timeout: float = 30.0) -> Tuple[socket.socket, bytes]:
    """A connected STOMP 1.2 session on a blocking socket; returns (socket, bytes after CONNECTED)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:%s\npasscode:%s\nheart-beat:0,0\n\n\x00"
                 % (login.encode(), passcode.encode()))
    buf = b""
    while b"\x00" not in buf:
        data = sock.recv(65536)
        if not data:
            raise Failure("%s:%d closed the connection before CONNECTED" % (host, port))
        buf += data
    end = buf.index(b"\x00")
    if not buf.startswith(b"CONNECTED"):
        raise Failure("%s:%d answered CONNECT with %r" % (host, port, buf[:end][:300]))
    return sock, buf[end + 1:]


def raw_wait_receipt(sock: socket.socket, buf: bytes, rid_line: bytes) -> bytes:
    """Read until the next frame, which must be the RECEIPT holding ``rid_line``; returns the rest."""
    while True:
        end = buf.find(b"\x00")
        if end >= 0:
            frame = buf[:end]
            if frame.lstrip(b"\r\n").startswith(b"RECEIPT") and rid_line in frame:
                return buf[end + 1:]
            raise Failure("expected the RECEIPT with %r, got %r" % (rid_line, frame[:300]))
        data = sock.recv(65536)
        if not data:
            raise Failure("the broker closed the connection while a receipt was awaited")
        buf += data


def raw_disconnect(sock: socket.socket, buf: bytes) -> None:
    try:
        sock.sendall(b"DISCONNECT\nreceipt:bye\n\n\x00")
        raw_wait_receipt(sock, buf, b"receipt-id:bye")
    except (OSError, Failure):
        pass
    finally:
        sock.close()


def raw_send_head(dest: bytes, receipt: Optional[bytes] = None, broker: Optional[str] = None) -> bytes:
    """Our client's SEND head for a 100-byte body: destination, [broker's routing,] [receipt,] content-length."""
    r = b"receipt:%s\n" % receipt if receipt is not None else b""
    return b"SEND\ndestination:%s\n%s%scontent-length:%d\n\n" % (
        dest, wire_headers(send_headers(broker)), r, BODY_SIZE)


def raw_publish_batches(dest: bytes, bodies: Sequence[bytes], last_receipt: bytes,
                        broker: Optional[str] = None) -> List[bytes]:
    """Every SEND encoded, the last with a receipt, joined into ~256 KiB batches."""
    head = raw_send_head(dest, None, broker)
    frames = [head + b + b"\x00" for b in bodies[:-1]]
    frames.append(raw_send_head(dest, last_receipt, broker) + bodies[-1] + b"\x00")
    per = max(1, BATCH_BYTES // len(frames[0]))
    return [b"".join(frames[i:i + per]) for i in range(0, len(frames), per)]


def raw_publish(sock: socket.socket, buf: bytes, batches: Sequence[bytes], rid_line: bytes) -> bytes:
    sendall = sock.sendall
    for batch in batches:
        sendall(batch)
    return raw_wait_receipt(sock, buf, rid_line)


def raw_receipts(sock: socket.socket, buf: bytes, frames: Sequence[Tuple[bytes, bytes]]) -> bytes:
    """Scenario 2: each SEND, then read until its RECEIPT."""
    sendall, recv = sock.sendall, sock.recv
    for frame, rid_line in frames:
        sendall(frame)
        while True:
            end = buf.find(b"\x00")
            if end >= 0:
                break
            data = recv(65536)
            if not data:
                raise Failure("the broker closed the connection while a receipt was awaited")
            buf += data
        if rid_line not in buf[:end] or not buf[:end].lstrip(b"\r\n").startswith(b"RECEIPT"):
            raise Failure("expected the RECEIPT with %r, got %r" % (rid_line, buf[:end][:300]))
        buf = buf[end + 1:]
    return buf


def raw_subscribe_frame(dest: bytes, client_ack: bool, broker: Optional[str] = None,
                        receipt: Optional[bytes] = None) -> bytes:
    """SUBSCRIBE id 1, with the broker's routing and (client-individual) the prefetch our
    subscription asks for (:func:`subscribe_headers`)."""
    return b"SUBSCRIBE\ndestination:%s\nid:1\nack:%s\n%s%s\n\x00" % (
        dest, b"client-individual" if client_ack else b"auto", wire_headers(subscribe_headers(broker, client_ack)),
        b"receipt:%s\n" % receipt if receipt is not None else b"")


def raw_consume(sock: socket.socket, buf: bytes, dest: bytes, n: int,
                client_ack: bool, broker: Optional[str] = None) -> Tuple[List[bytes], bytes, int]:
    """Scenarios 3 and 4: SUBSCRIBE, take n MESSAGE bodies (acking each in client mode, the
    last ACK with a receipt, and waiting for it). Returns (bodies, unparsed rest, reads)."""
    sendall, recv = sock.sendall, sock.recv
    sendall(raw_subscribe_frame(dest, client_ack, broker))
    bodies: List[bytes] = []
    append = bodies.append
    got = reads = 0
    done = False
    while True:
        data = recv(READ_SIZE)
        if not data:
            raise Failure("the broker closed the connection after %d messages" % got)
        reads += 1
        buf = buf + data if buf else data
        find, startswith = buf.find, buf.startswith
        acks: List[bytes] = []
        pos = 0
        while True:
            end = find(b"\x00", pos)
            if end < 0:
                break
            while buf[pos] == 10:  # the EOL both brokers write after each frame
                pos += 1
            if startswith(b"MESSAGE", pos):
                hend = find(b"\n\n", pos, end)
                append(buf[hend + 2:end])
                got += 1
                if client_ack:
                    a = find(b"\nack:", pos, hend) + 5
                    if got == n:
                        acks.append(b"ACK\nid:" + buf[a:find(b"\n", a)] + b"\nreceipt:done\n\n\x00")
                    else:
                        acks.append(b"ACK\nid:" + buf[a:find(b"\n", a)] + b"\n\n\x00")
            elif startswith(b"RECEIPT", pos):
                if find(b"receipt-id:done\n", pos, end) >= 0:
                    done = True
            else:
                raise Failure("unexpected frame: %r" % buf[pos:end][:300])
            pos = end + 1
        buf = buf[pos:]
        if acks:
            sendall(b"".join(acks))
        if got >= n and (done or not client_ack):
            return bodies, buf, reads


def raw_count_extras(sock: socket.socket, buf: bytes, wait: float) -> int:
    """MESSAGE frames arriving within ``wait`` seconds of silence (after a drain: should be 0)."""
    sock.settimeout(wait)
    extras = buf.count(b"MESSAGE\n")
    try:
        while True:
            data = sock.recv(READ_SIZE)
            if not data:
                break
            extras += data.count(b"MESSAGE\n")
    except socket.timeout:
        pass
    return extras


class BrokerAccess:
    """The parent's untimed raw-socket helpers: fill a queue, drain and check it, purge it."""

    def __init__(self, host: str, port: int, login: str, passcode: str, broker: Optional[str] = None) -> None:
        self.host, self.port, self.login, self.passcode = host, port, login, passcode
        self.broker = broker  # which routing headers its frames carry (send_headers, subscribe_headers)

    def connect(self) -> Tuple[socket.socket, bytes]:
        return raw_connect(self.host, self.port, self.login, self.passcode)

    def fill(self, dest: str, tag: bytes, n: int) -> None:
        sock, buf = self.connect()
        try:
            buf = raw_publish(sock, buf, raw_publish_batches(dest.encode(), make_bodies(tag, n), b"fill", self.broker),
                              b"receipt-id:fill\n")
        finally:
            raw_disconnect(sock, buf)

    def drain_check(self, dest: str, tag: bytes, n: int, timeout: float) -> Tuple[bool, str]:
        """Drain exactly n messages and check they are the n bodies of ``tag``, then that no more come."""
        sock, buf = self.connect()
        sock.settimeout(timeout)
        try:
            bodies, buf, _ = raw_consume(sock, buf, dest.encode(), n, client_ack=False, broker=self.broker)
            extras = len(bodies) - n + raw_count_extras(sock, buf, 0.3)
        except socket.timeout:
            return False, "the queue held fewer than %d messages (drain timed out)" % n
        finally:
            raw_disconnect(sock, b"")
        distinct = set(bodies)
        if extras:
            return False, "the queue held %d messages more than the %d sent" % (extras, n)
        if distinct != set(make_bodies(tag, n)):
            return False, "the queue's %d bodies (%d distinct) are not the %d sent" % (
                len(bodies), len(distinct), n)
        return True, "queue held exactly the %d messages sent" % n

    def purge(self, dest: str, idle: float = 1.0) -> int:
        sock, buf = self.connect()
        try:
            sock.sendall(raw_subscribe_frame(dest.encode(), False, self.broker))
            return raw_count_extras(sock, buf, idle)
        finally:
            raw_disconnect(sock, b"")


# ---------------------------------------------------------------------------------------
# /proc: the broker's CPU and the machine's
# ---------------------------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def listener_pid(port: int) -> Optional[int]:
    """The pid of the process listening on a local TCP port (Linux /proc; None if not found)."""
    inodes = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as fh:
                next(fh)
                for line in fh:
                    f = line.split()
                    if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add("socket:[%s]" % f[9])
        except OSError:
            continue
    if not inodes:
        return None
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                try:
                    if os.readlink("/proc/%s/fd/%s" % (pid, fd)) in inodes:
                        return int(pid)
                except OSError:
                    continue
        except OSError:
            continue
    return None


def proc_cpu(pid: Optional[int]) -> Optional[float]:
    """CPU seconds (user + sys) a process used so far."""
    if pid is None:
        return None
    try:
        with open("/proc/%d/stat" % pid) as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def machine_busy() -> Optional[float]:
    """CPU seconds the whole machine spent in processes so far (user, nice, system; all CPUs).

    Interrupt and softirq time (loopback TCP is largely softirq work, which the kernel may
    charge to no process) and steal time are left out: they are not "other processes"."""
    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:4]]
        return (f[0] + f[1] + f[2]) / CLK_TCK
    except (OSError, ValueError, IndexError):
        return None


def wait_quiet(broker_pid: Optional[int], limit: float, max_wait: float, window: float = 0.25) -> float:
    """Wait (up to ``max_wait`` s) until processes other than the broker use less than ``limit``
    CPUs over a ``window``; returns the last share seen. A shared machine is then measured in
    its quiet spells rather than during another job's burst."""
    deadline = perf_counter() + max_wait
    share = 0.0
    while True:
        m0, b0, t0 = machine_busy(), proc_cpu(broker_pid), perf_counter()
        time.sleep(window)
        m1, b1, t1 = machine_busy(), proc_cpu(broker_pid), perf_counter()
        if m0 is None or m1 is None:
            return 0.0
        share = max(0.0, (m1 - m0) - ((b1 - b0) if b0 is not None and b1 is not None else 0.0)) / (t1 - t0)
        if share < limit or t1 >= deadline:
            return share


# ---------------------------------------------------------------------------------------
# The worker: one contender, one scenario, one fresh process
# ---------------------------------------------------------------------------------------


class Window:
    """The timed part: wall time, this process's CPU (all threads), the broker's and the machine's."""

    def __init__(self, broker_pid: Optional[int], profile: Optional[Dict[str, Any]] = None) -> None:
        self.broker_pid = broker_pid
        self.profile = profile
        self.profiler: Any = None
        self.result: Dict[str, Any] = {}

    def start(self) -> None:
        gc.collect()
        if self.profile and self.profile.get("kind") == "cprofile":
            import cProfile

            self.profiler = cProfile.Profile()
        self.b0, self.m0 = proc_cpu(self.broker_pid), machine_busy()
        self.r0 = resource.getrusage(resource.RUSAGE_SELF)
        if self.profiler is not None:
            self.profiler.enable()
        self.t0 = perf_counter()

    def stop(self) -> None:
        t1 = perf_counter()
        if self.profiler is not None:
            self.profiler.disable()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        b1, m1 = proc_cpu(self.broker_pid), machine_busy()
        r0 = self.r0
        self.result = {
            "wall": t1 - self.t0,
            "cpu_user": r1.ru_utime - r0.ru_utime,
            "cpu_sys": r1.ru_stime - r0.ru_stime,
            "nvcsw": r1.ru_nvcsw - r0.ru_nvcsw,
            "nivcsw": r1.ru_nivcsw - r0.ru_nivcsw,
            "broker_cpu": None if b1 is None or self.b0 is None else b1 - self.b0,
            "machine_busy": None if m1 is None or self.m0 is None else m1 - self.m0,
        }
        if self.profiler is not None:
            self.profiler.dump_stats(self.profile["out"])


def check_bodies(bodies: Sequence[Any], tag: bytes, n: int) -> Dict[str, Any]:
    got = [b.encode() if isinstance(b, str) else bytes(b) for b in bodies]
    distinct = set(got)
    ok = len(got) == n and distinct == set(make_bodies(tag, n))
    return {"received": len(got), "distinct": len(distinct), "bodies_ok": ok}


def worker_ours(spec: Dict[str, Any], win: Window) -> Dict[str, Any]:
    import anyio

    from stompfast import AsyncClient

    url = "stomp://%s:%s@%s:%d/" % (spec["login"], spec["passcode"], spec["host"], spec["port"])
    dest, n, scenario, tag = spec["dest"], spec["n"], spec["scenario"], spec["tag"].encode()
    bodies = make_bodies(tag, n) if scenario in (PUBLISH, RECEIPTS) else []
    out: Dict[str, Any] = {}

    async def main() -> None:
        with anyio.fail_after(spec["timeout"]):
            # persistent=False: no persistent header, as the other contenders send (the same broker work)
            async with AsyncClient(url, heart_beat=(0, 0), persistent=False) as c:
                out["server"] = c.server
                send = c.send
                if scenario == PUBLISH:
                    last = bodies[-1]
                    win.start()
                    for body in bodies[:-1]:
                        await send(dest, body)
                    await send(dest, last, receipt=True)
                    win.stop()
                elif scenario == RECEIPTS:
                    win.start()
                    for body in bodies:
                        await send(dest, body, receipt=True)
                    win.stop()
                else:
                    got: List[bytes] = []
                    append = got.append
                    count = 0
                    if scenario == DRAIN_AUTO:
                        win.start()
                        async with c.subscribe(dest, ack="auto", buffer_size=PREFETCH) as sub:
                            async for msg in sub:
                                append(msg.body)
                                count += 1
                                if count == n:
                                    break
                            win.stop()
                    else:
                        win.start()
                        async with c.subscribe(dest, ack="client-individual", buffer_size=PREFETCH) as sub:
                            async for msg in sub:
                                append(msg.body)
                                count += 1
                                if count == n:
                                    await msg.ack(receipt=True)
                                    break
                                await msg.ack()
                            win.stop()
                    out.update(check_bodies(got, tag, n))

    backend = spec["backend"]
    if backend == "trio":
        anyio.run(main, backend="trio")
    elif backend == "uvloop":
        anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})
    else:
        anyio.run(main, backend="asyncio")
    return out


def worker_stomppy(spec: Dict[str, Any], win: Window) -> Dict[str, Any]:
    import stomp

    dest, n, scenario, tag = spec["dest"], spec["n"], spec["scenario"], spec["tag"].encode()
    timeout = spec["timeout"]
    bodies = make_bodies(tag, n) if scenario in (PUBLISH, RECEIPTS) else []
    routing = send_headers(spec.get("broker")) or None  # Artemis: destination-type (as our client adds)

    class Listener(stomp.ConnectionListener):
        def __init__(self) -> None:
            self.event = threading.Event()
            self.receipt: Optional[str] = None
            self.bodies: List[Any] = []
            self.error: Optional[str] = None
            self.ack_each = False

        def on_message(self, frame: Any) -> None:
            self.bodies.append(frame.body)
            if self.ack_each:
                if len(self.bodies) == n:
                    conn.ack(frame.headers["ack"], receipt="done")
                else:
                    conn.ack(frame.headers["ack"])
            elif len(self.bodies) == n:
                self.event.set()

        def on_receipt(self, frame: Any) -> None:
            self.receipt = frame.headers["receipt-id"]
            self.event.set()

        def on_error(self, frame: Any) -> None:
            self.error = "ERROR frame: %s %s" % (frame.headers, frame.body)
            self.event.set()

        def on_disconnected(self) -> None:
            self.error = self.error or "disconnected"
            self.event.set()

    def wait(what: str) -> None:
        if not listener.event.wait(timeout):
            raise Failure("stomp.py: no %s within %s s" % (what, timeout))
        if listener.error:
            raise Failure("stomp.py: %s" % listener.error)

    conn = stomp.Connection12([(spec["host"], spec["port"])], heartbeats=(0, 0), vhost="/")
    listener = Listener()
    conn.set_listener("bench", listener)
    conn.connect(spec["login"], spec["passcode"], wait=True)
    out: Dict[str, Any] = {}
    try:
        if scenario == PUBLISH:
            send, last = conn.send, bodies[-1]
            win.start()
            for body in bodies[:-1]:
                send(dest, body, headers=routing)
            send(dest, last, receipt="last", headers=routing)
            wait("receipt")
            win.stop()
            if listener.receipt != "last":
                raise Failure("stomp.py: got receipt %r, expected 'last'" % listener.receipt)
        elif scenario == RECEIPTS:
            send, event = conn.send, listener.event
            rids = ["r%d" % i for i in range(n)]
            win.start()
            for body, rid in zip(bodies, rids):
                event.clear()
                send(dest, body, receipt=rid, headers=routing)
                wait("receipt")
                if listener.receipt != rid:
                    raise Failure("stomp.py: got receipt %r, expected %r" % (listener.receipt, rid))
            win.stop()
        elif scenario == DRAIN_AUTO:
            win.start()
            conn.subscribe(dest, id="1", ack="auto", headers=subscribe_headers(spec.get("broker"), False))
            wait("message %d" % n)
            win.stop()
            out.update(check_bodies(listener.bodies, tag, n))
        else:
            listener.ack_each = True
            win.start()
            conn.subscribe(dest, id="1", ack="client-individual", headers=subscribe_headers(spec.get("broker"), True))
            wait("receipt of the last ACK")
            win.stop()
            if listener.receipt != "done":
                raise Failure("stomp.py: got receipt %r, expected 'done'" % listener.receipt)
            out.update(check_bodies(listener.bodies, tag, n))
    finally:
        try:
            conn.disconnect()
        except Exception:
            pass
    return out


def worker_raw(spec: Dict[str, Any], win: Window) -> Dict[str, Any]:
    dest, n, scenario, tag = spec["dest"].encode(), spec["n"], spec["scenario"], spec["tag"].encode()
    broker = spec.get("broker")
    sock, buf = raw_connect(spec["host"], spec["port"], spec["login"], spec["passcode"], spec["timeout"])
    out: Dict[str, Any] = {}
    try:
        if scenario == PUBLISH:
            batches = raw_publish_batches(dest, make_bodies(tag, n), b"last", broker)
            win.start()
            buf = raw_publish(sock, buf, batches, b"receipt-id:last\n")
            win.stop()
        elif scenario == RECEIPTS:
            frames = [(raw_send_head(dest, b"r%d" % i, broker) + body + b"\x00", b"receipt-id:r%d\n" % i)
                      for i, body in enumerate(make_bodies(tag, n))]
            win.start()
            buf = raw_receipts(sock, buf, frames)
            win.stop()
        else:
            win.start()
            bodies, buf, reads = raw_consume(sock, buf, dest, n, client_ack=scenario == DRAIN_CLIENT, broker=broker)
            win.stop()
            out["reads"] = reads
            out.update(check_bodies(bodies, tag, n))
    finally:
        raw_disconnect(sock, buf)
    return out


def worker_aiofloor(spec: Dict[str, Any], win: Window) -> Dict[str, Any]:
    """Scenario 2 only: the least any asyncio client does per round trip.

    The raw socket's frames, written by an ``asyncio.BufferedProtocol`` (reads land in one
    reused buffer, as in our client) whose ``buffer_updated`` completes a future once a
    whole frame is in; the task awaits that future, checks the
    RECEIPT and sends the next SEND. No parsing beyond ``bytes.find``, no STOMP client:
    what is left is the event loop's own cost (an epoll wait, a callback and a task wake-up
    per round trip) on the stock asyncio loop. It tells how much of our client's distance
    from the blocking raw socket is asyncio's, not ours.
    """
    import asyncio

    if spec["scenario"] != RECEIPTS:
        raise Failure("the asyncio floor is measured in scenario 2 only")
    dest, n, tag = spec["dest"].encode(), spec["n"], spec["tag"].encode()
    sock, buf = raw_connect(spec["host"], spec["port"], spec["login"], spec["passcode"], spec["timeout"])
    frames = [(raw_send_head(dest, b"r%d" % i, spec.get("broker")) + body + b"\x00", b"receipt-id:r%d\n" % i)
              for i, body in enumerate(make_bodies(tag, n))]

    class Floor(asyncio.BufferedProtocol):
        def __init__(self) -> None:
            self.buf = buf
            self.waiter: Optional[asyncio.Future] = None
            self.view = memoryview(bytearray(65536))

        def get_buffer(self, sizehint: int) -> memoryview:
            return self.view

        def buffer_updated(self, nbytes: int) -> None:
            self.buf += self.view[:nbytes]
            waiter = self.waiter
            if waiter is not None and b"\x00" in self.buf and not waiter.done():
                waiter.set_result(None)

        def connection_lost(self, exc: Optional[BaseException]) -> None:
            waiter = self.waiter
            if waiter is not None and not waiter.done():
                waiter.set_exception(Failure("the broker closed the connection while a receipt was awaited"))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        transport, proto = await loop.create_connection(Floor, sock=sock)
        try:
            win.start()
            for frame, rid_line in frames:
                proto.waiter = waiter = loop.create_future()
                transport.write(frame)
                if b"\x00" not in proto.buf:
                    await waiter
                end = proto.buf.index(b"\x00")
                head = proto.buf[:end]
                if rid_line not in head or not head.lstrip(b"\r\n").startswith(b"RECEIPT"):
                    raise Failure("expected the RECEIPT with %r, got %r" % (rid_line, head[:300]))
                proto.buf = proto.buf[end + 1:]
            win.stop()
            proto.waiter = waiter = loop.create_future()
            transport.write(b"DISCONNECT\nreceipt:bye\n\n\x00")
            try:
                await asyncio.wait_for(waiter, 5)
            except (asyncio.TimeoutError, Failure):
                pass
        finally:
            transport.close()

    asyncio.run(main())
    return {}


def start_loop_reader(sock: socket.socket, on_bytes: Callable[[bytes], None],
                      on_end: Callable[[Optional[BaseException]], None]) -> Tuple[Any, Any]:
    """A stock asyncio loop in a daemon thread reading ``sock`` (a duplicate of it) as our blocking client does.

    Reads land in one reused buffer (an ``asyncio.BufferedProtocol``) and go to
    ``on_bytes`` in the loop thread; ``on_end(error)`` when the connection ends. The
    caller keeps writing on ``sock``; returns ``(loop, thread)``.
    """
    import asyncio
    import threading

    class Reader(asyncio.BufferedProtocol):
        view = memoryview(bytearray(65536))

        def get_buffer(self, sizehint: int) -> memoryview:
            return self.view

        def buffer_updated(self, nbytes: int) -> None:
            on_bytes(bytes(self.view[:nbytes]))

        def connection_lost(self, exc: Optional[BaseException]) -> None:
            on_end(exc)

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    reading = socket.socket(fileno=os.dup(sock.fileno()))  # asyncio owns this one; the caller writes on `sock`
    reading.setblocking(False)
    asyncio.run_coroutine_threadsafe(loop.create_connection(Reader, sock=reading), loop).result(10)
    return loop, thread


def close_threaded(sock: socket.socket, loop: Any, reader: Any) -> None:
    """Say DISCONNECT (best effort), close ``sock`` (which ends a reader blocked in it), stop ``loop`` if any, join."""
    try:
        sock.sendall(b"DISCONNECT\n\n\x00")
    except OSError:
        pass
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    if loop is not None:
        loop.call_soon_threadsafe(loop.stop)
    reader.join(5)


def _thread_floor(spec: Dict[str, Any], win: Window, asyncio_reader: bool) -> Dict[str, Any]:
    """Scenario 2 only: the least a blocking client whose reads happen in another thread does.

    The calling thread writes each raw SEND to the socket itself and blocks on a
    lock; the reading thread finds the RECEIPT with ``bytes.find`` and releases it.
    Two wake-ups per round trip (the reader's, then the caller's) and nothing else.
    With ``asyncio_reader`` the reading thread is a stock asyncio loop (a
    ``BufferedProtocol``, as in our blocking client, whose loop thread must serve
    heart-beats while the caller is busy); without it a plain thread blocked in
    ``recv`` (stomp.py's design).
    """
    import threading

    if spec["scenario"] != RECEIPTS:
        raise Failure("the thread floors are measured in scenario 2 only")
    dest, n, tag = spec["dest"].encode(), spec["n"], spec["tag"].encode()
    sock, buf = raw_connect(spec["host"], spec["port"], spec["login"], spec["passcode"], spec["timeout"])
    frames = [(raw_send_head(dest, b"r%d" % i, spec.get("broker")) + body + b"\x00", b"receipt-id:r%d\n" % i)
              for i, body in enumerate(make_bodies(tag, n))]
    state: Dict[str, Any] = {"buf": buf, "waiting": None, "got": None, "error": None}

    def on_bytes(data: bytes) -> None:  # in the reading thread
        state["buf"] += data
        lock = state["waiting"]
        if lock is not None and b"\x00" in state["buf"]:
            state["waiting"] = None
            lock.release()

    def on_end(error: Optional[BaseException]) -> None:
        state["error"] = error or Failure("the broker closed the connection while a receipt was awaited")
        lock = state["waiting"]
        if lock is not None:
            state["waiting"] = None
            lock.release()

    loop: Any = None
    if asyncio_reader:
        loop, reader = start_loop_reader(sock, on_bytes, on_end)
    else:
        def read_loop() -> None:
            try:
                while True:
                    data = sock.recv(65536)
                    if not data:
                        break
                    on_bytes(data)
            except OSError as exc:
                on_end(exc)
            else:
                on_end(None)

        reader = threading.Thread(target=read_loop, daemon=True)
        reader.start()
    try:
        win.start()
        for frame, rid_line in frames:
            lock = threading.Lock()
            lock.acquire()
            state["waiting"] = lock
            sock.sendall(frame)
            if not lock.acquire(timeout=spec["timeout"]):
                raise Failure("no RECEIPT within the timeout")
            if state["error"] is not None:
                raise state["error"]
            end = state["buf"].index(b"\x00")
            head = state["buf"][:end]
            if rid_line not in head or not head.lstrip(b"\r\n").startswith(b"RECEIPT"):
                raise Failure("expected the RECEIPT with %r, got %r" % (rid_line, head[:300]))
            state["buf"] = state["buf"][end + 1:]
        win.stop()
    finally:
        close_threaded(sock, loop, reader)
    return {}


def worker_threadfloor(spec: Dict[str, Any], win: Window) -> Dict[str, Any]:
    return _thread_floor(spec, win, asyncio_reader=False)


def worker_syncfloor(spec: Dict[str, Any], win: Window) -> Dict[str, Any]:
    return _thread_floor(spec, win, asyncio_reader=True)


WORKERS = {"ours": worker_ours, "stomppy": worker_stomppy, "raw": worker_raw, "aiofloor": worker_aiofloor,
           "threadfloor": worker_threadfloor, "syncfloor": worker_syncfloor}
# contenders measured in some scenarios only
ONLY_IN = {"aiofloor": (RECEIPTS,), "threadfloor": (RECEIPTS,), "syncfloor": (RECEIPTS,)}


def run_worker(spec: Dict[str, Any]) -> int:
    """Entry point of ``--worker SPEC``: print one ``RESULT {json}`` line."""
    win = Window(spec.get("broker_pid"), spec.get("profile"))
    result: Dict[str, Any] = {"ok": False}
    try:
        extra = WORKERS[spec["contender"]](spec, win)
        result.update(extra)
        if not win.result:
            raise Failure("the timed part did not complete")
        result.update(win.result)
        if "bodies_ok" in extra and not extra["bodies_ok"]:
            raise Failure("received %d bodies (%d distinct), expected the %d filled"
                          % (extra["received"], extra["distinct"], spec["n"]))
        result["ok"] = True
    except BaseException as exc:  # report anything, the parent decides
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
        for sub in getattr(exc, "exceptions", ()):  # an exception group from a task group
            result["error"] += " | %s: %s" % (type(sub).__name__, sub)
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


# ---------------------------------------------------------------------------------------
# The parent: brokers, rounds, verification
# ---------------------------------------------------------------------------------------


class Measurement:
    def __init__(self, broker: str, scenario: int, contender: str, n: int, rnd: int,
                 data: Dict[str, Any]) -> None:
        self.broker, self.scenario, self.contender, self.n, self.round = broker, scenario, contender, n, rnd
        self.data = data

    @property
    def ok(self) -> bool:
        return bool(self.data.get("ok"))

    @property
    def wall(self) -> float:
        return self.data["wall"]

    @property
    def cpu(self) -> float:
        return self.data["cpu_user"] + self.data["cpu_sys"]

    @property
    def rate(self) -> float:
        return self.n / self.wall

    @property
    def cpu_us(self) -> float:
        return 1e6 * self.cpu / self.n

    @property
    def broker_us(self) -> Optional[float]:
        b = self.data.get("broker_cpu")
        return None if b is None else 1e6 * b / self.n

    @property
    def other_share(self) -> Optional[float]:
        """CPUs' worth used by neither the client nor the broker during the timed part."""
        m, b = self.data.get("machine_busy"), self.data.get("broker_cpu")
        if m is None or b is None:
            return None
        return max(0.0, (m - b - self.cpu) / self.wall)

    def as_dict(self) -> Dict[str, Any]:
        d = {"broker": self.broker, "scenario": self.scenario, "scenario_name": SCENARIOS[self.scenario],
             "contender": self.contender, "n": self.n, "round": self.round}
        d.update(self.data)
        if self.ok:
            d.update({"msgs_per_s": self.rate, "cpu_us_per_msg": self.cpu_us,
                      "broker_us_per_msg": self.broker_us,
                      "other_cpus": self.other_share})
        return d


def progress(args: argparse.Namespace, msg: str) -> None:
    if args.progress:
        print("  " + msg, file=sys.stderr, flush=True)


def spawn_worker(spec: Dict[str, Any], timeout: float, wrap: Sequence[str] = (),
                 script: Optional[str] = None) -> Dict[str, Any]:
    """Run one measurement in a fresh ``script --worker`` process (default: this script)."""
    cmd = list(wrap) + [sys.executable, str(Path(script or __file__).resolve()), "--worker", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout,
                              env=dict(os.environ, STOMP_SKIP_HOSTNAME_SCAN="1"))
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "worker timed out after %.0f s" % timeout}
    for line in proc.stdout.decode(errors="replace").splitlines()[::-1]:
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = proc.stderr.decode(errors="replace").strip().splitlines()[-5:]
    return {"ok": False,
            "error": "worker exited %d without a result: %s" % (proc.returncode, " / ".join(tail))}


class BrokerRun:
    """Everything measured on one broker."""

    def __init__(self, name: str, args: argparse.Namespace, run_id: str,
                 contenders: List[Tuple[str, str]]) -> None:
        self.name = name
        self.args = args
        self.host, self.port = BROKERS[name]
        port = getattr(args, "%s_port" % name, None)  # --rabbitmq-port, --activemq-port, --artemis-port
        if port:
            self.port = port
        self.access = BrokerAccess(self.host, self.port, args.login, args.passcode, name)
        self.run_id = run_id
        self.contenders = contenders
        self.pid = listener_pid(self.port)
        self.queues: List[str] = []
        self.measurements: List[Measurement] = []
        self.failures: List[str] = []
        self.seq = 0
        self.server = "?"

    def queue(self, scenario: int) -> str:
        dest = "/queue/sfbench-%s-s%d" % (self.run_id, scenario)
        if dest not in self.queues:
            self.queues.append(dest)
        return dest

    def count_of(self, scenario: int, quick_n: Optional[int] = None) -> int:
        if quick_n is not None:
            return quick_n
        return self.args.receipts if scenario == RECEIPTS else self.args.n

    def ready(self) -> Optional[str]:
        try:
            sock, buf = self.access.connect()
        except (OSError, Failure) as exc:
            return str(exc)
        raw_disconnect(sock, buf)
        return None

    def one(self, scenario: int, key: str, backend: str, n: int, rnd: int,
            profile: Optional[Dict[str, Any]] = None, wrap: Sequence[str] = ()) -> Measurement:
        """Fill (consume scenarios), run one worker, check the queue (publish scenarios)."""
        self.seq += 1
        tag = "%s%d" % (self.run_id[-4:], self.seq)
        dest = self.queue(scenario)
        label = key if key != "ours" else "stompfast/" + backend
        timeout = 60.0 + n / 500.0
        data: Dict[str, Any] = {"ok": False}
        try:
            if scenario in (DRAIN_AUTO, DRAIN_CLIENT):
                self.access.fill(dest, tag.encode(), n)
            if self.args.settle > 0:
                wait_quiet(self.pid, OTHER_CPU_WARN, self.args.settle)
            spec = {"contender": key, "backend": backend, "scenario": scenario, "host": self.host,
                    "port": self.port, "login": self.args.login, "passcode": self.args.passcode, "dest": dest,
                    "n": n, "tag": tag, "timeout": timeout, "broker_pid": self.pid, "profile": profile,
                    "broker": self.name}
            data = spawn_worker(spec, timeout + 30, wrap)
            if data.get("ok") and scenario in (PUBLISH, RECEIPTS):
                ok, what = self.access.drain_check(dest, tag.encode(), n, timeout)
                data["queue_check"] = what
                if not ok:
                    data["ok"] = False
                    data["error"] = what
        except (OSError, Failure) as exc:  # the untimed fill or check failed
            data = {"ok": False, "error": "fill/check: %s: %s" % (type(exc).__name__, exc)}
        if not data.get("ok"):
            try:
                purged = self.access.purge(dest)
            except (OSError, Failure):
                purged = 0
            self.failures.append("%s, scenario %d (%s), %s, n=%d: %s%s" % (
                self.name, scenario, SCENARIOS[scenario], contender_label(label), n, data.get("error"),
                " (purged %d leftover messages)" % purged if purged else ""))
        if data.get("server"):
            self.server = data["server"]
        return Measurement(self.name, scenario, label, n, rnd, data)

    def warmup(self) -> None:
        """Fill and drain N messages (untimed) so the broker's JIT and caches are warm."""
        dest, tag = self.queue(0), ("%sw" % self.run_id[-4:]).encode()
        self.access.fill(dest, tag, self.args.n)
        ok, what = self.access.drain_check(dest, tag, self.args.n, 60 + self.args.n / 500)
        if not ok:
            raise Failure("%s warm-up: %s" % (self.name, what))

    def preflight(self) -> None:
        """Every contender and scenario once on a small N; any wrong count stops the run."""
        for scenario in self.args.scenarios:
            n = min(self.args.preflight_n, self.count_of(scenario))
            for key, backend in self.contenders:
                if scenario not in ONLY_IN.get(key, (scenario,)):
                    continue
                m = self.one(scenario, key, backend, n, 0)
                if not m.ok:
                    raise Failure(self.failures[-1])
                progress(self.args, "%-9s preflight scenario %d %-18s ok"
                         % (self.name, scenario, m.contender))

    def measure(self) -> None:
        rounds = self.args.rounds
        for scenario in self.args.scenarios:
            n = self.count_of(scenario)
            for rnd in range(rounds):
                k = rnd % len(self.contenders)
                order = self.contenders[k:] + self.contenders[:k]
                for key, backend in order:
                    if scenario not in ONLY_IN.get(key, (scenario,)):
                        continue
                    m = self.one(scenario, key, backend, n, rnd + 1)
                    self.measurements.append(m)
                    if m.ok:
                        progress(self.args, "%-9s scenario %d round %d/%d %-18s %9s msgs/s %7.2f us/msg" % (
                            self.name, scenario, rnd + 1, rounds, m.contender, fmt_n(m.rate), m.cpu_us))
                    else:
                        progress(self.args, "%-9s scenario %d round %d/%d %-18s FAILED: %s" % (
                            self.name, scenario, rnd + 1, rounds, m.contender, m.data.get("error")))

    def cleanup(self) -> str:
        """Queues are drained already; on RabbitMQ also delete them (they are durable)."""
        if self.name != "rabbitmq":
            return ""
        ctl = "/usr/sbin/rabbitmqctl" if os.path.exists("/usr/sbin/rabbitmqctl") else "rabbitmqctl"
        deleted = 0
        for dest in self.queues:
            try:
                r = subprocess.run([ctl, "-q", "delete_queue", dest.rsplit("/", 1)[1]],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
                deleted += r.returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                break
        return "deleted %d of the run's %d RabbitMQ queues" % (deleted, len(self.queues))


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------


class Summary:
    """Best and median of one contender in one scenario on one broker."""

    def __init__(self, ms: List[Measurement]) -> None:
        good = [m for m in ms if m.ok]
        self.reps = len(good)
        self.failed = len(ms) - len(good)
        self.n = ms[0].n if ms else 0
        self.rates = [m.rate for m in good]
        self.cpus = [m.cpu_us for m in good]
        self.brokers = [m.broker_us for m in good if m.broker_us is not None]
        self.shares = [m.cpu / m.wall for m in good]
        self.bshares = [m.data["broker_cpu"] / m.wall for m in good if m.data.get("broker_cpu") is not None]
        self.others = [m.other_share for m in good if m.other_share is not None]
        self.csw = [(m.data["nvcsw"] + m.data["nivcsw"]) / m.n for m in good]
        self.reads = [m.data["reads"] for m in good if "reads" in m.data]

    def rate(self, stat: str) -> Optional[float]:
        if not self.rates:
            return None
        return max(self.rates) if stat == "best" else statistics.median(self.rates)

    def cpu(self, stat: str) -> Optional[float]:
        if not self.cpus:
            return None
        return min(self.cpus) if stat == "best" else statistics.median(self.cpus)

    def med(self, values: List[float]) -> Optional[float]:
        return statistics.median(values) if values else None


def summarize(run: BrokerRun) -> Dict[Tuple[int, str], Summary]:
    groups: Dict[Tuple[int, str], List[Measurement]] = {}
    for m in run.measurements:
        groups.setdefault((m.scenario, m.contender), []).append(m)
    return {k: Summary(v) for k, v in groups.items()}


def _f(x: Optional[float], fmt: str, width: int) -> str:
    return ("%" + str(width) + "s") % ("-" if x is None else fmt % x)


def print_table(run: BrokerRun, labels: List[str], stat: str) -> None:
    sums = summarize(run)
    print()
    print("%s (%s, %s:%d): N=%s per drain/publish, %s receipts; best and median of %d rounds" % (
        run.name.upper(), run.server, run.host, run.port, fmt_n(run.args.n), fmt_n(run.args.receipts),
        run.args.rounds))
    hdr = ("%-18s %-18s %10s %10s %8s %8s %8s %7s %9s %6s %6s %5s %6s %5s" % (
        "scenario", "contender", "msgs/s", "msgs/s", "CPU us", "CPU us", "above", "vs raw", "stomp.py", "cli",
        "broker", "brk", "cs", "other"))
    hdr2 = ("%-18s %-18s %10s %10s %8s %8s %8s %7s %9s %6s %6s %5s %6s %5s" % (
        "", "", "best", "median", "/msg best", "/msg med", "raw", "thr %", "CPU/ours", "cpu%", "us/msg",
        "cpu%",
        "/msg", "cpu%"))
    print(hdr)
    print(hdr2)
    print("-" * len(hdr))
    for scenario in run.args.scenarios:
        raw = sums.get((scenario, "raw"))
        st = sums.get((scenario, "stomppy"))
        for label in labels:
            s = sums.get((scenario, label))
            name = "%d %s" % (scenario, SCENARIOS[scenario])
            if s is None or not s.reps:
                if scenario in ONLY_IN.get(label, (scenario,)):
                    print("%-18s %-18s %10s" % (name, contender_label(label), "FAILED" if s else "not run"))
                continue
            above = None if raw is None or raw.cpu(stat) is None else s.cpu(stat) - raw.cpu(stat)
            vs = None if raw is None or raw.rate(stat) is None else 100.0 * s.rate(stat) / raw.rate(stat)
            ratio = None
            if label.startswith("stompfast/") and st is not None and st.cpu(stat) is not None:
                ratio = st.cpu(stat) / s.cpu(stat)
            other = s.med(s.others)
            print("%-18s %-18s %10s %10s %8.2f %8.2f %8s %7s %9s %6.0f %6s %5s %6.2f %5s%s" % (
                name, contender_label(label), fmt_n(s.rate("best")), fmt_n(s.rate("median")), s.cpu("best"),
                s.cpu("median"), _f(above, "%+.2f", 8), _f(vs, "%.0f%%", 7), _f(ratio, "%.1fx", 9),
                100 * s.med(s.shares), _f(s.med(s.brokers), "%.1f", 6), _f(None if not s.bshares else
                                                                         100 * s.med(s.bshares), "%.0f", 5),
                s.med(s.csw), _f(None if other is None else 100 * other, "%.0f", 5),
                "  (%d failed)" % s.failed if s.failed else ""))
        if raw is not None and raw.reads and scenario in (DRAIN_AUTO, DRAIN_CLIENT):
            print("%-18s %-18s raw reader: %.1f messages per 256 KiB recv (median)" % (
                "", "", raw.n / statistics.median(raw.reads)))
    print("columns: CPU = client process user+sys (all threads) per message; above raw = CPU us/msg minus "
          "the raw socket's; vs raw = throughput as %% of the raw socket's; stomp.py CPU/ours = how many "
          "times our "
          "CPU per message stomp.py spends; cli/brk cpu%% = share of one CPU the client/broker used over the "
          "timed wall time (median); broker us/msg = broker CPU per message (median); cs/msg = context "
          "switches per message; other cpu%% = CPU used by other processes (median). Ratios use the %s."
          % stat)


def evaluate_targets(run: BrokerRun, labels: List[str], stat: str) -> List[Dict[str, Any]]:
    sums = summarize(run)
    out: List[Dict[str, Any]] = []

    def add(verdict: str, target: str, shown: str, threshold: str, value: Optional[float]) -> None:
        out.append({"broker": run.name, "verdict": verdict, "target": target, "shown": shown,
                    "threshold_shown": threshold, "value": value})

    cpu_limits = {PUBLISH: 1.0, DRAIN_AUTO: 2.0, DRAIN_CLIENT: 3.0}
    ours = [lab for lab in labels if lab.startswith("stompfast/")]
    for label in ours:
        primary = label == "stompfast/asyncio"
        for scenario in run.args.scenarios:
            s, raw = sums.get((scenario, label)), sums.get((scenario, "raw"))
            have = s is not None and s.reps and raw is not None and raw.reps
            if scenario in cpu_limits:
                lim = cpu_limits[scenario]
                value = s.cpu(stat) - raw.cpu(stat) if have else None
                verdict = ("PASS" if value <= lim else "FAIL") if value is not None else "FAIL"
                add(verdict if primary else "INFO",
                    "%s CPU above raw, %d %s" % (label, scenario, SCENARIOS[scenario]),
                    "not measured" if value is None else "%+.2f us/msg" % value,
                    ("target <= %.0f us" if primary else "target <= %.0f us, not judged") % lim, value)
            value = 100.0 * s.rate(stat) / raw.rate(stat) if have else None
            verdict = ("PASS" if value >= 90.0 else "FAIL") if value is not None else "FAIL"
            add(verdict if primary else "INFO",
                "%s throughput vs raw, %d %s" % (label, scenario, SCENARIOS[scenario]),
                "not measured" if value is None else "%.1f%%" % value,
                "target >= 90%" if primary else "target >= 90%, not judged", value)
    floor, raw = sums.get((RECEIPTS, "aiofloor")), sums.get((RECEIPTS, "raw"))
    if floor is not None and floor.reps and raw is not None and raw.reps:
        value = 100.0 * floor.rate(stat) / raw.rate(stat)
        add("INFO", "asyncio floor throughput vs raw, 2 %s" % SCENARIOS[RECEIPTS], "%.1f%%" % value,
            "the stock asyncio loop's own limit", value)
        for label in ours:
            s = sums.get((RECEIPTS, label))
            if s is not None and s.reps:
                value = 100.0 * s.rate(stat) / floor.rate(stat)
                add("INFO", "%s throughput vs asyncio floor, 2 %s" % (label, SCENARIOS[RECEIPTS]),
                    "%.1f%%" % value, "no target", value)
    for scenario in run.args.scenarios:
        s, raw = sums.get((scenario, "stomppy")), sums.get((scenario, "raw"))
        if s is None or not s.reps or raw is None or not raw.reps:
            continue
        value = s.cpu(stat) - raw.cpu(stat)
        add("INFO", "stomp.py CPU above raw, %d %s" % (scenario, SCENARIOS[scenario]), "%+.2f us/msg" % value,
            "earlier: %s" % (STOMPPY_EARLIER[scenario] + " us" if scenario in STOMPPY_EARLIER
                               else "no figure"),
            value)
    return out


def environment() -> Dict[str, Any]:
    """Reuses scanner_compare's environment block (python, CPU, stompfast and stomp.py versions)."""
    ours, missing = sc.load_ours()
    env = sc.environment(ours, missing)
    for mod in ("anyio", "trio", "uvloop"):
        try:
            from importlib.metadata import version

            env[mod] = version(mod)
        except Exception:
            env[mod] = "not installed"
    try:
        import stompfast._scanner as sel

        env["scanner"] = sel.IMPLEMENTATION
    except Exception as exc:
        env["scanner"] = "? (%s)" % exc
    return env


# ---------------------------------------------------------------------------------------
# Profiling one of our runs
# ---------------------------------------------------------------------------------------


def print_cprofile(path: str, n: int, top: int) -> None:
    import pstats

    st = pstats.Stats(path)
    rows = []
    for (fname, line, func), (_cc, nc, tt, ct, _) in st.stats.items():  # type: ignore[attr-defined]
        rows.append((tt, ct, nc, "%s:%d(%s)" % (_short(fname), line, func)))
    total = sum(r[0] for r in rows)
    print("cProfile of the timed part: %.3f s of profiled time, %d messages (%.2f us/msg under the profiler)"
          % (total, n, 1e6 * total / n))
    print("%10s %7s %10s %10s %12s  %s"
          % ("self us/msg", "self %", "cum us/msg", "calls", "calls/msg", "function"))
    for tt, ct, nc, name in sorted(rows, reverse=True)[:top]:
        print("%10.3f %6.1f%% %10.3f %10d %12.2f  %s"
              % (1e6 * tt / n, 100 * tt / total, 1e6 * ct / n, nc, nc / n, name))


def _short(fname: str) -> str:
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in fname:
            return fname.split(marker, 1)[1]
    return fname


SETUP_FRAMES = ("_find_and_load", "make_bodies", "check_bodies", "Window.", "_shutdown")


def print_pyspy(path: str, top: int) -> None:
    """Self and inclusive sample shares per function from py-spy's collapsed (``raw``) output
    (py-spy names frames ``function (file:line)``; lines are merged here), setup dropped."""
    selfs: Dict[str, int] = {}
    incl: Dict[str, int] = {}
    total = 0
    with open(path) as fh:
        for line in fh:
            stack, _, count = line.rstrip().rpartition(" ")
            if not count.isdigit() or not stack.strip() or any(s in stack for s in SETUP_FRAMES):
                continue
            c = int(count)
            total += c
            frames = [_merge_line(fr) for fr in stack.split(";")]
            selfs[frames[-1]] = selfs.get(frames[-1], 0) + c
            for fr in set(frames):
                incl[fr] = incl.get(fr, 0) + c
    if not total:
        print("py-spy recorded no samples")
        return
    print("py-spy: %d samples on a CPU (idle waits are not sampled), imports and setup dropped" % total)
    print("%7s  %s" % ("self %", "function (file)"))
    for name, c in sorted(selfs.items(), key=lambda kv: -kv[1])[:top]:
        print("%6.1f%%  %s" % (100 * c / total, name))
    print("%7s  %s" % ("incl %", "function (file)"))
    for name, c in sorted(incl.items(), key=lambda kv: -kv[1])[:top]:
        print("%6.1f%%  %s" % (100 * c / total, name))


def _merge_line(frame: str) -> str:
    """``f (path/x.py:12)`` -> ``f (path/x.py)``."""
    head, sep, tail = frame.rpartition(":")
    return head + ")" if sep and tail.rstrip(")").isdigit() else frame


def run_profile(args: argparse.Namespace, run_id: str) -> int:
    name = args.broker[0]
    backend = args.backends[0]
    run = BrokerRun(name, args, run_id, [("ours", backend)])
    err = run.ready()
    if err:
        print("%s is not ready: %s" % (name, err))
        return 2
    scenario = args.profile
    n = run.count_of(scenario)
    out_dir = Path(args.profile_out or "bench/results")
    out_dir.mkdir(parents=True, exist_ok=True)
    base = out_dir / ("profile-%s-s%d-%s" % (name, scenario, args.profiler))
    wrap: List[str] = []
    profile: Optional[Dict[str, Any]] = None
    if args.profiler == "cprofile":
        profile = {"kind": "cprofile", "out": str(base) + ".pstats"}
    else:
        pyspy = Path(sys.executable).with_name("py-spy")
        wrap = [str(pyspy) if pyspy.exists() else "py-spy", "record", "--rate", "1000",
                "--format", "raw", "--output", str(base) + ".txt", "--"]
    print("profiling stompfast/%s, scenario %d (%s), N=%s on %s with %s"
          % (backend, scenario, SCENARIOS[scenario], fmt_n(n), name, args.profiler))
    try:
        m = run.one(scenario, "ours", backend, n, 1, profile=profile, wrap=wrap)
    finally:
        run.cleanup()
    if not m.ok:
        print("FAILED: %s" % m.data.get("error"))
        return 2
    print("run: %s msgs/s, %.2f CPU us/msg (the profiler's overhead included)" % (fmt_n(m.rate), m.cpu_us))
    if args.profiler == "cprofile":
        print_cprofile(str(base) + ".pstats", n, args.profile_top)
        print("stats: %s.pstats (python -m pstats)" % base)
    else:
        print_pyspy(str(base) + ".txt", args.profile_top)
        print("collapsed stacks: %s.txt (flamegraph.pl or speedscope)" % base)
    return 0


# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="CI smoke: 5,000 messages (500 receipts), one broker, 2 rounds, under a minute")
    p.add_argument("--json", metavar="PATH", help="also write every measurement as JSON")
    p.add_argument("--check", action="store_true", help="exit 1 when a target FAILs")
    p.add_argument("--broker", action="append", choices=sorted(BROKERS),
                   help="broker to measure (repeatable; default both, rabbitmq first; --quick: rabbitmq)")
    p.add_argument("--backends", default="asyncio",
                   help="our client's event loops, comma-separated from asyncio,uvloop,trio or 'all' "
                        "(default asyncio)")
    p.add_argument("--scenarios", default="1,2,3,4", help="scenarios to run (default 1,2,3,4)")
    p.add_argument("--n", type=int, help="messages per publish/drain scenario (default 50000, quick 5000)")
    p.add_argument("--receipts", type=int, help="messages in the receipt-per-message scenario (default 2000, "
                                               "quick 500)")
    p.add_argument("--rounds", type=int, help="interleaved rounds per scenario (default 5, quick 2)")
    p.add_argument("--settle", type=float, default=None,
                   help="before each measurement, wait up to this many seconds for other processes to use "
                        "less than 20%% of a CPU (default 10, quick 2; 0 disables)")
    p.add_argument("--stat", choices=("best", "median"), default="best",
                   help="statistic for the derived columns and targets (default best)")
    p.add_argument("--preflight-n", type=int, default=1000,
                   help="messages per contender and scenario in the correctness pass (default 1000)")
    p.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the broker warm-up")
    p.add_argument("--no-floor", action="store_true",
                   help="leave out the asyncio floor (scenario 2: the least an asyncio client can do)")
    p.add_argument("--login", default="guest")
    p.add_argument("--passcode", default="guest")
    p.add_argument("--rabbitmq-port", type=int, help="RabbitMQ STOMP port (default 61613)")
    p.add_argument("--activemq-port", type=int, help="ActiveMQ STOMP port (default 61614)")
    p.add_argument("--artemis-port", type=int, help="ActiveMQ Artemis STOMP port, the stock acceptor "
                                                    "without prefixes (default 61618)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="one line per measurement on stderr (default: when stderr is a terminal)")
    p.add_argument("--profile", type=int, choices=sorted(SCENARIOS), metavar="SCENARIO",
                   help="instead of the comparison: run our client once on scenario 1-4 under a profiler "
                        "(first --broker, first --backends)")
    p.add_argument("--profiler", choices=("cprofile", "py-spy"), default="cprofile")
    p.add_argument("--profile-out", metavar="DIR", help="where profiles go (default bench/results)")
    p.add_argument("--profile-top", type=int, default=30, help="profile rows to print (default 30)")
    p.add_argument("--worker", metavar="SPEC", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    q = args.quick
    args.n = args.n or (5000 if q else 50000)
    args.receipts = args.receipts or (500 if q else 2000)
    args.rounds = args.rounds or (2 if q else 5)
    if args.settle is None:
        args.settle = 2.0 if q else 10.0
    args.preflight_n = min(args.preflight_n, 500 if q else args.preflight_n)
    if not args.broker:
        args.broker = ["rabbitmq"] if (q or args.profile) else ["rabbitmq", "activemq"]
    args.backends = (list(BACKENDS) if args.backends == "all"
                     else [b.strip() for b in args.backends.split(",")])
    for b in args.backends:
        if b not in BACKENDS:
            p.error("unknown backend %r (choose from %s)" % (b, ", ".join(BACKENDS)))
    try:
        args.scenarios = sorted({int(s) for s in args.scenarios.split(",")})
    except ValueError:
        p.error("--scenarios takes numbers 1-4")
    if not set(args.scenarios) <= set(SCENARIOS):
        p.error("--scenarios takes numbers 1-4")
    if args.progress is None:
        args.progress = sys.stderr.isatty()
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return run_worker(json.loads(args.worker))
    run_id = "%x%04x" % (int(time.time()), os.getpid() & 0xFFFF)
    if args.profile:
        return run_profile(args, run_id)

    contenders: List[Tuple[str, str]] = [("ours", b) for b in args.backends] + [("stomppy", ""), ("raw", "")]
    labels = ["stompfast/" + b for b in args.backends] + ["stomppy", "raw"]
    if RECEIPTS in args.scenarios and not args.no_floor:
        contenders.append(("aiofloor", ""))
        labels.append("aiofloor")
    env = environment()
    print("stompfast end-to-end client comparison  (%s; %s, %s CPUs)"
          % (env["python"], env["cpu"], env["cpus"]))
    print("stompfast %s (scanner: %s) on anyio %s; stomp.py %s; trio %s; uvloop %s"
          % (env["stompfast"], env["scanner"], env["anyio"], env["stomp.py"], env["trio"], env["uvloop"]))
    print("brokers: %s; contenders: %s; scenarios %s; N=%s, receipts %s; %d interleaved rounds, each "
          "contender+scenario in a fresh process; derived columns and targets use the %s"
          % (", ".join(args.broker), ", ".join(contender_label(c) for c in labels),
             ",".join(map(str, args.scenarios)), fmt_n(args.n), fmt_n(args.receipts), args.rounds, args.stat))
    sys.stdout.flush()

    started = perf_counter()
    runs: List[BrokerRun] = []
    notes: List[str] = []
    try:
        for name in args.broker:
            run = BrokerRun(name, args, run_id, contenders)
            err = run.ready()
            if err:
                print("\n%s: NOT READY (%s); start it with `bash scripts/brokers.sh start %s`"
                      % (name, err, name))
                notes.append("%s not measured: %s" % (name, err))
                runs.append(run)
                continue
            runs.append(run)
            try:
                t0 = perf_counter()
                if args.warmup:
                    run.warmup()
                run.preflight()
                progress(args, "%-9s warm-up and correctness pass in %.1f s" % (name, perf_counter() - t0))
                run.measure()
            finally:
                note = run.cleanup()
                if note:
                    notes.append(note)
            print_table(run, labels, args.stat)
            sys.stdout.flush()
    except Failure as exc:
        print("\nCORRECTNESS FAILURE: %s" % exc)
        if args.json:
            write_json(args.json, {"environment": env, "args": vars(args), "correctness_failure": str(exc),
                                   "measurements": [m.as_dict() for r in runs for m in r.measurements]})
        return 2
    elapsed = perf_counter() - started

    failures = [f for r in runs for f in r.failures]
    print()
    print("correctness: every measurement checked its counts: consumers received exactly N distinct bodies, "
          "the set filled; publishers' queues held exactly the N bodies sent (drained afterwards, no extras "
          "within 0.3 s).%s" % ("" if not failures else " %d MEASUREMENTS FAILED:" % len(failures)))
    for f in failures:
        print("  FAILED " + f)
    busy = [(r.name, m) for r in runs for m in r.measurements  # /proc/stat ticks: judge windows >= 0.5 s
            if m.ok and m.other_share is not None and m.other_share > OTHER_CPU_WARN and m.wall >= 0.5]
    if busy:
        print("WARNING: other processes used more than %d%% of a CPU during %d timed parts (%s); those "
              "figures are less reliable." % (100 * OTHER_CPU_WARN, len(busy), ", ".join(sorted({
                  "%s %d %s" % (b, m.scenario, contender_label(m.contender)) for b, m in busy}))))
    for note in notes:
        print("note: " + note)

    targets: List[Dict[str, Any]] = []
    for run in runs:
        if not run.measurements:
            targets.append({"broker": run.name, "verdict": "FAIL", "target": "%s measured" % run.name,
                            "shown": "not measured", "threshold_shown": "-", "value": None})
            continue
        targets += evaluate_targets(run, labels, args.stat)
    print()
    print("TARGETS (%s of %d rounds; CPU = client process us/msg)" % (args.stat, args.rounds))
    for t in targets:
        print("  %-4s %-9s %-55s %-14s (%s)" % (t["verdict"], t["broker"], t["target"], t["shown"],
                                                 t["threshold_shown"]))
    judged = [t for t in targets if t["verdict"] != "INFO"]
    failed = [t for t in judged if t["verdict"] != "PASS"]
    print("%d/%d targets passed; measured in %.0f s" % (len(judged) - len(failed), len(judged), elapsed))

    if args.json:
        write_json(args.json, {
            "environment": env,
            "args": vars(args),
            "run_id": run_id,
            "brokers": {r.name: {"server": r.server, "port": r.port, "pid": r.pid} for r in runs},
            "measurements": [m.as_dict() for r in runs for m in r.measurements],
            "targets": targets,
            "failures": failures,
            "elapsed_s": elapsed,
        })
        print("wrote %s" % args.json)
    if failures:
        return 2
    return 1 if (args.check and failed) else 0


if __name__ == "__main__":
    sys.exit(main())
