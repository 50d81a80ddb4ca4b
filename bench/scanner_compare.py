#!/usr/bin/env python
"""Frame scanner and encoder: stompfast (Cython and pure Python) against stomp.py, in one run.

Run from the repository root::

    python bench/scanner_compare.py                  # full run, under 2 minutes
    python bench/scanner_compare.py --quick          # CI smoke, a few seconds
    python bench/scanner_compare.py --json bench/results/scanner.json --check

What is measured
================

Receive (scan): one in-memory byte stream per workload, cut into the same chunks for
every contender (default 64 KiB, a realistic socket read, ``--chunk`` to change; by
default a prefix of each stream is also fed as one single chunk, ``--no-whole`` skips it):

* ``small``: MESSAGE frames with 11 realistic headers (an ActiveMQ 5.x delivery:
  content-length, expires, destination, subscription, priority, ack, message-id,
  persistent, content-type, timestamp, redelivered) and a 100-byte JSON body.
  ActiveMQ sends raw colons in ``message-id`` and escaped ones (``\\c``) in the 1.2
  ``ack`` header, so the unescape path is exercised. ``small-rabbitmq`` is the same
  stream in RabbitMQ's style (11 headers, no backslash anywhere); it is reported for
  information (``--no-other-flavor`` skips it, ``--flavor rabbitmq`` makes it the
  stream the targets use).
* ``large``: the same headers with a 64 KiB body (``content-length`` set); body GB/s
  is reported too.

Contenders, each consuming exactly the same list of ``bytes`` chunks:

* ``stompfast C``  -- ``stompfast._scanner_c.FrameScanner(version="1.2").feed(chunk)``
* ``stompfast py`` -- ``stompfast._scanner_py.FrameScanner(version="1.2").feed(chunk)``
* ``stomp.py``     -- stomp.py's own receive path, see below.

Encode: a SEND with 10 headers (one value holds a ``:`` that 1.2 must escape) and a
100-byte body, via our ``encode_frame`` (C and pure), against stomp.py's
``Protocol12.send()`` (its real publish path down to the socket write: header merge,
automatic content-length, 1.2 escaping, ``utils.Frame``, ``transmit()`` with its
listener loop, ``convert_frame`` and ``pack``, on a ``BaseTransport`` whose ``send()``
keeps the bytes instead of writing a socket) and, as a lower bound of its serialisation
alone, ``pack(convert_frame(Frame(...)))`` on pre-escaped headers.

The stomp.py receive harness
============================

stomp.py has no sans-I/O parser: framing lives in ``BaseTransport.__read`` (socket
reads into ``__recvbuf``, NUL search, ``content-length`` regex, per-frame slicing of
the buffer tail) and ``BaseTransport.__read_frames`` (EOL heart-beat check,
``utils.parse_frame``, optional body decode, then ``process_frame``), both called
from the I/O thread's ``__io_loop``. The harness drives that code itself, unchanged:

* ``MemoryTransport(BaseTransport)`` overrides ``receive()`` (the socket read hook
  its ``Transport`` subclass implements with ``socket.recv``) to return the next
  in-memory chunk, and ``b""`` at the end, which makes ``__read`` raise
  ``ConnectionClosedException`` exactly as a closed socket would.
* ``running`` is set to True by hand (``start()`` would connect and spawn a thread).
* The benchmark loop calls the name-mangled ``_BaseTransport__read_frames()`` until
  ``ConnectionClosedException``: that is the inner loop of ``__io_loop`` for a
  blocking socket, so every byte goes through their ``__read`` and ``parse_frame``.
* ``process_frame`` (their dispatch to listeners, a documented override point) is
  replaced by a counter: frame delivery is not part of the comparison, just as our
  side stops at the list returned by ``feed()``.
* ``auto_decode=False`` so that bodies stay ``bytes`` like ours (their default,
  ``True``, would add a UTF-8 decode of every body).

Bypassed: the ``__io_loop`` thread itself (selectors, send queue, exception logging),
the socket, ``notify``/listeners, TLS. Nothing of their framing or parsing is
re-implemented. Their ``__read`` copies the rest of its buffer after every frame, so
the whole-stream rows use a prefix of the stream small enough for that
quadratic cost to stay bounded; the 64 KiB-chunk figures are the ones that count.

Timing: ``time.perf_counter`` around one full pass over the stream (a fresh scanner or
transport per pass, built outside the timed region; ``gc.collect()`` before each pass,
GC left enabled during it). The contenders of a table group are interleaved: in each of
``--rounds`` rounds (default 10) every contender gets ``budget / rounds`` seconds of
passes (at least one), so that a noisy spell on a shared machine hits them alike; the
streams are sized so that even stomp.py's passes are short (about 0.2 s), which gives
its best pass enough samples too. The table shows the best and the median pass, the
pass count, and ``cpu%``: the share of the timed wall-clock time this process was on a
CPU (``time.process_time``); well below 100% means other processes competed and the
figures, ratios included, are unreliable (a warning is printed). Ratios and targets use
the best pass (``--stat median`` to change that).

Correctness (always, before timing): every contender yields the same number of frames;
our two scanners yield equal ``Frame`` lists, equal to the frames the stream was built
from; stomp.py's frames carry the same command, headers and body. Every encoder's
output is scanned back and must give the intended frame. A correctness failure exits
with status 2 whatever the flags.

Targets (printed as PASS/FAIL at the end; ``--check`` makes a FAIL exit with status 1):
C scanner >= 1,500,000 frames/s on small frames and >= 35x stomp.py; pure >= 5x
stomp.py; C large-body throughput >= 3 GB/s; C encode of the 10-header SEND >=
2,000,000 frames/s.
"""

from __future__ import annotations

import argparse
import base64
import gc
import importlib
import importlib.util
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

# stomp.utils resolves the host names at import time; that is irrelevant here and can stall.
os.environ.setdefault("STOMP_SKIP_HOSTNAME_SCAN", "1")

import stomp  # noqa: E402
import stomp.exception  # noqa: E402
import stomp.protocol  # noqa: E402
import stomp.transport  # noqa: E402
import stomp.utils  # noqa: E402

if importlib.util.find_spec("stompfast") is None:  # not installed: use the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

perf_counter = time.perf_counter
process_time = time.process_time

CHUNK = 65536
CPU_SHARE_WARN = 0.9  # warn when the process was on a CPU less than this share of the timed wall time
LARGE_BODY = 65536

# ---------------------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------------------

Expected = Tuple[str, Dict[str, str], bytes]


def _json_body(i: int, size: int = 100) -> bytes:
    body = (
        '{"order":%08d,"sku":"SKU-4711","qty":3,"price":"19.99","cur":"EUR"' % i
    ).encode()
    body = body + b',"pad":"' + b"x" * (size - len(body) - 10) + b'"}'
    assert len(body) == size, len(body)
    return body


def _large_body(size: int = LARGE_BODY) -> bytes:
    rnd = random.Random(20240601)
    return base64.b64encode(rnd.randbytes(size))[:size]  # printable, no NUL


def _message_headers(i: int, body_len: int, flavor: str) -> List[Tuple[str, str, str]]:
    """(name, wire value, unescaped value) in the order the broker sends them."""
    ts = str(1700000000000 + i)
    if flavor == "activemq":
        mid = "ID:bench-host-39051-1700000000000-5:1:-1:1:%d" % i
        return [
            ("content-length", str(body_len), str(body_len)),
            ("expires", "0", "0"),
            ("destination", "/queue/orders.eu-west-1", "/queue/orders.eu-west-1"),
            ("subscription", "sub-0", "sub-0"),
            ("priority", "4", "4"),
            ("ack", mid.replace(":", "\\c"), mid),
            ("message-id", mid, mid),
            ("persistent", "true", "true"),
            ("content-type", "application/json", "application/json"),
            ("timestamp", ts, ts),
            ("redelivered", "false", "false"),
        ]
    if flavor == "rabbitmq":
        mid = "T_sub-0@@session-5mZ0q2mDq1nW0Qx8m2Yy9A@@%d" % i
        return [
            ("subscription", "sub-0", "sub-0"),
            ("destination", "/queue/orders.eu-west-1", "/queue/orders.eu-west-1"),
            ("message-id", mid, mid),
            ("ack", mid, mid),
            ("redelivered", "false", "false"),
            ("content-type", "application/json", "application/json"),
            ("persistent", "true", "true"),
            ("priority", "4", "4"),
            ("timestamp", ts, ts),
            ("expires", "1700000060000", "1700000060000"),
            ("content-length", str(body_len), str(body_len)),
        ]
    raise ValueError(flavor)


def build_stream(kind: str, n: int, flavor: str = "activemq") -> Tuple[bytes, List[Expected]]:
    """The wire bytes of ``n`` MESSAGE frames and the frames they must scan to."""
    large = _large_body() if kind == "large" else b""
    parts: List[bytes] = []
    expected: List[Expected] = []
    for i in range(n):
        body = large if kind == "large" else _json_body(i)
        hdrs = _message_headers(i, len(body), flavor)
        head = "MESSAGE\n" + "".join("%s:%s\n" % (k, w) for k, w, _ in hdrs) + "\n"
        parts.append(head.encode())
        parts.append(body)
        parts.append(b"\x00")
        expected.append(("MESSAGE", {k: v for k, _, v in hdrs}, body))
    return b"".join(parts), expected


def chunked(data: bytes, size: Optional[int]) -> List[bytes]:
    if not size or size >= len(data):
        return [data]
    return [data[i : i + size] for i in range(0, len(data), size)]


# The SEND of the encode benchmark: 10 headers, 100-byte body (content-length is added).
SEND_DESTINATION = "/queue/orders.eu-west-1"
SEND_CONTENT_TYPE = "application/json"
SEND_OTHER_HEADERS = {
    "persistent": "true",
    "priority": "4",
    "expires": "0",
    "receipt": "r-42",
    "correlation-id": "ID:order-service-7:42",  # a ':' that 1.2 escapes as \c
    "reply-to": "/temp-queue/order-replies",
    "app-id": "order-service",
    "x-trace-id": "4bf92f3577b34da6a3ce929d0e0e4736",
}
SEND_HEADERS = {"destination": SEND_DESTINATION, "content-type": SEND_CONTENT_TYPE, **SEND_OTHER_HEADERS}
SEND_BODY = _json_body(7)
assert len(SEND_HEADERS) == 10


# ---------------------------------------------------------------------------------------
# Contenders
# ---------------------------------------------------------------------------------------


class Failure(Exception):
    """A contender gave wrong output: the run stops with exit status 2."""


def load_ours() -> Tuple[Dict[str, Any], Dict[str, str]]:
    """Import both implementations directly (not through the selector)."""
    mods: Dict[str, Any] = {}
    missing: Dict[str, str] = {}
    for key, name in (("c", "stompfast._scanner_c"), ("py", "stompfast._scanner_py")):
        try:
            mods[key] = importlib.import_module(name)
        except Exception as exc:  # ImportError, or a half-written module
            missing[key] = "%s: %s" % (type(exc).__name__, exc)
    return mods, missing


def ours_pass(mod: Any, chunks: Sequence[bytes]) -> Callable[[], int]:
    """Setup for one timed pass of our scanner; the returned callable is what is timed."""
    feed = mod.FrameScanner(version="1.2").feed

    def run() -> int:
        n = 0
        for chunk in chunks:
            n += len(feed(chunk))
        return n

    return run


def ours_collect(mod: Any, chunks: Sequence[bytes]) -> list:
    sc = mod.FrameScanner(version="1.2")
    out: list = []
    for chunk in chunks:
        out.extend(sc.feed(chunk))
    if sc.buffered != 0:
        raise Failure("%s: %d bytes left buffered after the last frame" % (mod.__name__, sc.buffered))
    return out


class MemoryTransport(stomp.transport.BaseTransport):
    """stomp.py's BaseTransport reading from memory instead of a socket (see module docstring)."""

    def __init__(self, chunks: Sequence[bytes]) -> None:
        super().__init__(auto_decode=False)
        self._next = iter(chunks).__next__
        self.running = True  # what start() sets before it spawns the I/O thread
        self.frames = 0

    def receive(self) -> bytes:  # the socket.recv() of stomp.transport.Transport
        try:
            return self._next()
        except StopIteration:
            return b""  # a closed socket: __read raises ConnectionClosedException

    def process_frame(self, f: Any, frame_str: bytes) -> None:  # dispatch replaced by a counter
        self.frames += 1


class CollectingTransport(MemoryTransport):
    def __init__(self, chunks: Sequence[bytes]) -> None:
        super().__init__(chunks)
        self.collected: list = []

    def process_frame(self, f: Any, frame_str: bytes) -> None:
        self.frames += 1
        self.collected.append(f)


def _drive(transport: MemoryTransport) -> int:
    read_frames = transport._BaseTransport__read_frames  # type: ignore[attr-defined]
    try:
        while True:  # __io_loop's inner loop, blocking socket
            read_frames()
    except stomp.exception.ConnectionClosedException:
        pass
    return transport.frames


def stomppy_pass(chunks: Sequence[bytes]) -> Callable[[], int]:
    transport = MemoryTransport(chunks)
    return lambda: _drive(transport)


def stomppy_collect(chunks: Sequence[bytes]) -> list:
    transport = CollectingTransport(chunks)
    _drive(transport)
    if transport._BaseTransport__recvbuf:  # type: ignore[attr-defined]
        raise Failure("stomp.py: bytes left in __recvbuf after the last frame")
    return transport.collected


class CaptureTransport(stomp.transport.BaseTransport):
    """stomp.py's BaseTransport whose socket write keeps the last frame."""

    last: bytes = b""

    def send(self, encoded_frame: bytes) -> None:
        self.last = encoded_frame


def stomppy_protocol() -> Tuple[Any, CaptureTransport]:
    transport = CaptureTransport(auto_decode=False)
    proto = stomp.protocol.Protocol12(transport)  # registers itself as a listener, as in real use
    return proto, transport


def stomppy_encode_full(proto: Any) -> None:
    proto.send(SEND_DESTINATION, SEND_BODY, content_type=SEND_CONTENT_TYPE, headers=SEND_OTHER_HEADERS)


_BARE_HEADERS = {k: v.replace(":", "\\c") for k, v in SEND_HEADERS.items()}  # escaped beforehand
_BARE_HEADERS["content-length"] = len(SEND_BODY)


def stomppy_encode_bare() -> bytes:
    return stomp.utils.pack(stomp.utils.convert_frame(stomp.utils.Frame("SEND", _BARE_HEADERS, SEND_BODY)))


# ---------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------


Setup = Callable[[], Callable[[], int]]


def _one_pass(setup: Setup, expect: int) -> Tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one pass."""
    run = setup()  # a fresh scanner / transport, outside the timed region
    gc.collect()
    c0 = process_time()
    t0 = perf_counter()
    n = run()
    t1 = perf_counter()
    c1 = process_time()
    if n != expect:
        raise Failure("a timed pass gave %d frames, expected %d" % (n, expect))
    return t1 - t0, c1 - c0


def measure(setups: Sequence[Tuple[str, Setup]], expect: int, budget: float, rounds: int,
            max_reps: int) -> Dict[str, Tuple[List[float], float]]:
    """Time every contender, interleaved: ``rounds`` rounds, each giving each contender
    ``budget / rounds`` seconds of passes (at least one), so that a slow spell of a
    shared machine hits all contenders alike and the ratios stay meaningful.

    Returns, per contender, the wall time of every pass and the share of that wall
    time this process spent on a CPU (below 1 when other processes competed)."""
    times: Dict[str, List[float]] = {key: [] for key, _ in setups}
    cpu: Dict[str, float] = {key: 0.0 for key, _ in setups}
    slice_s = budget / rounds
    for _ in range(rounds):
        for key, setup in setups:
            started = perf_counter()
            while True:
                wall, used = _one_pass(setup, expect)
                times[key].append(wall)
                cpu[key] += used
                if perf_counter() - started >= slice_s or len(times[key]) >= max_reps:
                    break
    return {key: (times[key], min(1.0, cpu[key] / sum(times[key]))) for key in times}


def _progress(msg: str) -> None:
    if sys.stderr.isatty():
        print("  measured " + msg, file=sys.stderr, flush=True)


class Row:
    def __init__(self, group: str, contender: str, frames: int, body_bytes: int, wire_bytes: int,
                 times: List[float], cpu_share: float) -> None:
        self.cpu_share = cpu_share
        self.group = group
        self.contender = contender
        self.frames = frames
        self.body_bytes = body_bytes
        self.wire_bytes = wire_bytes
        self.times = times

    def t(self, stat: str) -> float:
        return min(self.times) if stat == "best" else statistics.median(self.times)

    def fps(self, stat: str) -> float:
        return self.frames / self.t(stat)

    def body_gbps(self, stat: str) -> float:
        return self.body_bytes / self.t(stat) / 1e9

    def wire_mbps(self, stat: str) -> float:
        return self.wire_bytes / self.t(stat) / 1e6

    def as_dict(self) -> Dict[str, Any]:
        return {
            "group": self.group,
            "contender": self.contender,
            "frames_per_pass": self.frames,
            "body_bytes_per_pass": self.body_bytes,
            "wire_bytes_per_pass": self.wire_bytes,
            "reps": len(self.times),
            "times_s": self.times,
            "cpu_share": self.cpu_share,
            "best_frames_per_s": self.fps("best"),
            "median_frames_per_s": self.fps("median"),
            "best_body_gb_per_s": self.body_gbps("best"),
            "median_body_gb_per_s": self.body_gbps("median"),
        }


NAMES = {"c": "stompfast C", "py": "stompfast py", "stomp": "stomp.py"}


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise Failure(msg)


def verify_scan(group: str, ours: Dict[str, Any], chunks: List[bytes], expected: List[Expected]) -> None:
    got: Dict[str, list] = {}
    for k, m in ours.items():
        try:
            got[k] = ours_collect(m, chunks)
        except Failure:
            raise
        except Exception as exc:
            raise Failure("%s: %s raised %s: %s" % (group, NAMES[k], type(exc).__name__, exc)) from exc
    st = stomppy_collect(chunks)
    counts = {NAMES[k]: len(v) for k, v in got.items()}
    counts["stomp.py"] = len(st)
    _check(len(set(counts.values())) == 1 and len(st) == len(expected),
           "%s: frame counts differ: %s (stream holds %d)" % (group, counts, len(expected)))
    for k, frames in got.items():
        for i, (f, e) in enumerate(zip(frames, expected)):
            _check((f.command, dict(f.headers), f.body) == e,
                   "%s: %s frame %d differs from the frame the stream was built from: %r"
                   % (group, NAMES[k], i, f))
    if "c" in got and "py" in got:
        _check(got["c"] == got["py"], "%s: the C and pure scanners gave different frames" % group)
        _check(all(type(a) is type(b) for a, b in zip(got["c"], got["py"])),
               "%s: the C and pure scanners return different Frame types" % group)
    for i, (f, e) in enumerate(zip(st, expected)):
        _check((f.cmd, f.headers, f.body) == e, "%s: stomp.py frame %d differs: %s" % (group, i, f))


def run_scan_group(group: str, chunks: List[bytes], expected: List[Expected], ours: Dict[str, Any],
                   args: argparse.Namespace, budget: float) -> List[Row]:
    verify_scan(group, ours, chunks, expected)
    n = len(expected)
    body = sum(len(e[2]) for e in expected)
    wire = sum(len(c) for c in chunks)
    rows = []
    setups: List[Tuple[str, Setup]] = []
    for key in ("c", "py"):
        if key in ours:
            setups.append((key, (lambda m=ours[key]: ours_pass(m, chunks))))
    setups.append(("stomp", lambda: stomppy_pass(chunks)))
    timed = measure(setups, n, budget, args.rounds, args.max_reps)
    for key, _ in setups:
        rows.append(Row(group, key, n, body, wire, *timed[key]))
        _progress("%-26s %-13s %3d passes" % (group, NAMES[key], len(timed[key][0])))
    return rows


def verify_encode(ours: Dict[str, Any]) -> Dict[str, bytes]:
    scan_mod = ours.get("py") or ours.get("c")
    outputs: Dict[str, bytes] = {}
    for key, mod in ours.items():
        try:
            outputs[key] = mod.encode_frame("SEND", SEND_HEADERS, SEND_BODY, version="1.2")
        except Exception as exc:
            raise Failure("encode: %s raised %s: %s" % (NAMES[key], type(exc).__name__, exc)) from exc
    proto, transport = stomppy_protocol()
    stomppy_encode_full(proto)
    outputs["stomp"] = transport.last
    outputs["stomp-bare"] = stomppy_encode_bare()
    want = ("SEND", {**SEND_HEADERS, "content-length": str(len(SEND_BODY))}, SEND_BODY)
    if scan_mod is not None:
        for key, wire in outputs.items():
            try:
                frames = scan_mod.FrameScanner(version="1.2").feed(wire)
            except Exception as exc:
                raise Failure("encode: %s output %r does not scan: %s" % (key, wire, exc)) from exc
            _check(len(frames) == 1, "encode: %s output does not scan to one frame: %r" % (key, wire))
            f = frames[0]
            _check((f.command, dict(f.headers), f.body) == want,
                   "encode: %s output scans to %r, wanted %r" % (key, f, want))
    else:  # nothing of ours to scan with: use stomp.py's parser on its own output
        for key in ("stomp", "stomp-bare"):
            f = stomp.utils.parse_frame(outputs[key].rstrip(b"\x00"))
            _check((f.cmd, f.headers, f.body) == want, "encode: %s output parses to %s" % (key, f))
    return outputs


def run_encode(ours: Dict[str, Any], args: argparse.Namespace) -> List[Row]:
    outputs = verify_encode(ours)
    k = args.encode_loops
    loop = range(k)
    rows = []
    setups: List[Tuple[str, Setup]] = []

    def ours_setup(mod: Any) -> Callable[[], int]:
        enc = mod.encode_frame
        headers, body = SEND_HEADERS, SEND_BODY

        def run() -> int:
            for _ in loop:
                enc("SEND", headers, body)
            return k

        return run

    def full_setup() -> Callable[[], int]:
        proto, _ = stomppy_protocol()
        send = proto.send
        dest, body, ct, other = SEND_DESTINATION, SEND_BODY, SEND_CONTENT_TYPE, SEND_OTHER_HEADERS

        def run() -> int:
            for _ in loop:
                send(dest, body, content_type=ct, headers=other)
            return k

        return run

    def bare_setup() -> Callable[[], int]:
        pack, convert, Frame = stomp.utils.pack, stomp.utils.convert_frame, stomp.utils.Frame
        headers, body = _BARE_HEADERS, SEND_BODY

        def run() -> int:
            for _ in loop:
                pack(convert(Frame("SEND", headers, body)))
            return k

        return run

    for key in ("c", "py"):
        if key in ours:
            setups.append((key, (lambda m=ours[key]: ours_setup(m))))
    setups.append(("stomp", full_setup))
    setups.append(("stomp-bare", bare_setup))
    timed = measure(setups, k, args.encode_budget, args.rounds, args.max_reps)
    for key, _ in setups:
        rows.append(Row("encode", key, k, len(SEND_BODY) * k, len(outputs[key]) * k, *timed[key]))
        _progress("%-26s %-37s %3d passes" % ("encode", ENCODE_LABELS[key], len(timed[key][0])))
    return rows


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------

ENCODE_LABELS = {
    "c": "stompfast C encode_frame",
    "py": "stompfast py encode_frame",
    "stomp": "stomp.py Protocol12.send (transmit)",
    "stomp-bare": "stomp.py pack(convert_frame(Frame))",
}


def fmt_n(x: float) -> str:
    return "{:,.0f}".format(x)


def ratio(a: Optional[Row], b: Optional[Row], stat: str) -> str:
    if a is None or b is None:
        return "n/a"
    return "%.1fx" % (a.fps(stat) / b.fps(stat))


def print_scan_table(rows: List[Row], stat: str) -> None:
    print()
    print("RECEIVE: frames scanned from one in-memory stream, same chunks for every contender")
    hdr = "%-24s %-13s %14s %14s %9s %9s %5s %5s %11s" % (
        "stream / chunking", "contender", "frames/s best", "frames/s med", "body GB/s", "wire MB/s", "reps",
        "cpu%", "vs stomp.py")
    print(hdr)
    print("-" * len(hdr))
    groups: Dict[str, Dict[str, Row]] = {}
    for r in rows:
        groups.setdefault(r.group, {})[r.contender] = r
    for group, by in groups.items():
        base = by.get("stomp")
        for key in ("c", "py", "stomp"):
            r = by.get(key)
            if r is None:
                print("%-24s %-13s %14s" % (group, NAMES[key], "not available"))
                continue
            print("%-24s %-13s %14s %14s %9.3f %9.1f %5d %5.0f %11s" % (
                group, NAMES[key], fmt_n(r.fps("best")), fmt_n(r.fps("median")), r.body_gbps(stat),
                r.wire_mbps(stat), len(r.times), 100 * r.cpu_share, ratio(r, base, stat)))
        print("%-24s ratios (%s): C/stomp.py %s, pure/stomp.py %s, C/pure %s" % (
            "", stat, ratio(by.get("c"), base, stat), ratio(by.get("py"), base, stat),
            ratio(by.get("c"), by.get("py"), stat)))
    print()


def print_encode_table(rows: List[Row], stat: str) -> None:
    by = {r.contender: r for r in rows}
    print("ENCODE: SEND, 10 headers + content-length, 100-byte body, STOMP 1.2")
    hdr = "%-37s %14s %14s %9s %5s %5s %11s %11s" % (
        "encoder", "frames/s best", "frames/s med", "ns/frame", "reps", "cpu%", "vs send()", "vs convert")
    print(hdr)
    print("-" * len(hdr))
    for key in ("c", "py", "stomp", "stomp-bare"):
        r = by.get(key)
        if r is None:
            print("%-37s %14s" % (ENCODE_LABELS[key], "not available"))
            continue
        print("%-37s %14s %14s %9.0f %5d %5.0f %11s %11s" % (
            ENCODE_LABELS[key], fmt_n(r.fps("best")), fmt_n(r.fps("median")), 1e9 / r.fps(stat), len(r.times),
            100 * r.cpu_share, ratio(r, by.get("stomp"), stat), ratio(r, by.get("stomp-bare"), stat)))
    print()


def evaluate_targets(rows: List[Row], chunk_label: str, stat: str,
                     missing: Dict[str, str]) -> List[Dict[str, Any]]:
    idx = {(r.group, r.contender): r for r in rows}
    small = "small / " + chunk_label
    large = "large / " + chunk_label
    c_small, py_small, st_small = idx.get((small, "c")), idx.get((small, "py")), idx.get((small, "stomp"))
    c_large, c_enc = idx.get((large, "c")), idx.get(("encode", "c"))
    checks: List[Tuple[str, Optional[float], float, str]] = [
        ("C scanner, small frames, frames/s", c_small and c_small.fps(stat), 1_500_000, "{:,.0f}"),
        ("C scanner / stomp.py, small frames",
         c_small and st_small and c_small.fps(stat) / st_small.fps(stat), 35, "{:.2f}x"),
        ("pure scanner / stomp.py, small frames",
         py_small and st_small and py_small.fps(stat) / st_small.fps(stat), 5, "{:.2f}x"),
        ("C scanner, large bodies, body GB/s", c_large and c_large.body_gbps(stat), 3.0, "{:.2f}"),
        ("C encode_frame, 10-header SEND, frames/s", c_enc and c_enc.fps(stat), 2_000_000, "{:,.0f}"),
    ]
    out = []
    for name, value, target, fmt in checks:
        if value is None:
            who = "py" if name.startswith("pure") else "c"
            verdict = "FAIL"
            shown = "not measured (%s)" % ("extension not importable" if who in missing else "no data")
        else:
            verdict = "PASS" if value >= target else "FAIL"
            shown = fmt.format(value)
        out.append({"target": name, "value": value, "threshold": target, "verdict": verdict,
                    "shown": shown, "threshold_shown": fmt.format(target)})
    return out


def environment(ours: Dict[str, Any], missing: Dict[str, str]) -> Dict[str, Any]:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import stompfast

        sf_version = getattr(stompfast, "__version__", "?")
        sf_path = os.path.dirname(stompfast.__file__)
    except Exception as exc:
        sf_version, sf_path = "not importable (%s)" % exc, "-"
    try:
        from importlib.metadata import version

        stomp_version = version("stomp.py")
    except Exception:
        stomp_version = ".".join(map(str, getattr(stomp, "__version__", ("?",))))
    return {
        "python": "%s %s" % (platform.python_implementation(), platform.python_version()),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "stompfast": sf_version,
        "stompfast_path": sf_path,
        "implementations": {k: getattr(m, "__file__", "?") for k, m in ours.items()},
        "missing": missing,
        "stomp.py": stomp_version,
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="CI smoke: small streams, short budgets (a few seconds)")
    p.add_argument("--json", metavar="PATH", help="also write every measurement as JSON")
    p.add_argument("--check", action="store_true", help="exit 1 when a target FAILs")
    p.add_argument("--chunk", type=int, default=CHUNK, help="socket-read chunk size in bytes (default 65536)")
    p.add_argument("--whole", action=argparse.BooleanOptionalAction, default=None,
                   help="also feed a stream prefix as one chunk (default: on, off with --quick)")
    p.add_argument("--flavor", choices=("activemq", "rabbitmq"), default="activemq",
                   help="header style of the MESSAGE frames the targets use (default activemq)")
    p.add_argument("--other-flavor", action=argparse.BooleanOptionalAction, default=None,
                   help="also scan the small stream in the other header style "
                        "(default: on, off with --quick)")
    p.add_argument("--small-frames", type=int, help="frames in the small stream (default 5000, quick 2000)")
    p.add_argument("--large-frames", type=int, help="frames in the large stream (default 256, quick 32)")
    p.add_argument("--budget", type=float, help="seconds per contender and stream (default 1.5, quick 0.15)")
    p.add_argument("--encode-budget", type=float, help="seconds per encoder (default 1.0, quick 0.15)")
    p.add_argument("--encode-loops", type=int, help="encodes per timed pass (default 5000, quick 2000)")
    p.add_argument("--rounds", type=int,
                   help="interleaved rounds; every contender gets at least one pass per round "
                        "(default 10, quick 2)")
    p.add_argument("--max-reps", type=int, default=500, help="maximum timed passes (default 500)")
    p.add_argument("--stat", choices=("best", "median"), default="best",
                   help="statistic for ratios and targets (default best)")
    args = p.parse_args(argv)

    q = args.quick
    args.small_frames = args.small_frames or (2000 if q else 5000)
    args.large_frames = args.large_frames or (32 if q else 256)
    args.budget = args.budget if args.budget is not None else (0.15 if q else 1.5)
    args.encode_budget = args.encode_budget if args.encode_budget is not None else (0.15 if q else 1.0)
    args.encode_loops = args.encode_loops or (2000 if q else 5000)
    args.rounds = args.rounds or (2 if q else 10)
    if args.whole is None:
        args.whole = not q
    if args.other_flavor is None:
        args.other_flavor = not q

    ours, missing = load_ours()
    env = environment(ours, missing)
    print("stompfast scanner/encoder comparison  (%s; %s, %s CPUs)"
          % (env["python"], env["cpu"], env["cpus"]))
    print("stompfast %s at %s; stomp.py %s" % (env["stompfast"], env["stompfast_path"], env["stomp.py"]))
    for key in ("c", "py"):
        if key in ours:
            print("  %-13s %s" % (NAMES[key], env["implementations"][key]))
        else:
            print("  %-13s NOT AVAILABLE: %s" % (NAMES[key], missing[key]))
    if "c" in ours and not str(env["implementations"]["c"]).endswith((".so", ".pyd")):
        print("  WARNING: stompfast._scanner_c is not a compiled extension")
    chunk_label = "%d KiB" % (args.chunk // 1024) if args.chunk % 1024 == 0 else "%d B" % args.chunk
    print("streams: small %d frames, large %d frames (%s flavour); chunks of %s%s; budget %.2fs/contender, "
          "%d interleaved rounds; ratios/targets use the %s pass" % (
              args.small_frames, args.large_frames, args.flavor, chunk_label,
              (", plus the other header style" if args.other_flavor else "")
              + (", plus whole-stream prefixes" if args.whole else ""),
              args.budget, args.rounds, args.stat))
    sys.stdout.flush()

    started = perf_counter()
    rows: List[Row] = []
    enc_rows: List[Row] = []
    try:
        small, small_exp = build_stream("small", args.small_frames, args.flavor)
        large, large_exp = build_stream("large", args.large_frames, args.flavor)
        rows += run_scan_group("small / " + chunk_label, chunked(small, args.chunk), small_exp, ours, args,
                               args.budget)
        rows += run_scan_group("large / " + chunk_label, chunked(large, args.chunk), large_exp, ours, args,
                               args.budget)
        if args.other_flavor:  # the same small stream with the other broker's header style
            other = "rabbitmq" if args.flavor == "activemq" else "activemq"
            s3, s3_exp = build_stream("small", args.small_frames, other)
            rows += run_scan_group("small-%s / %s" % (other, chunk_label), chunked(s3, args.chunk), s3_exp,
                                   ours, args, args.budget)
        if args.whole:
            # stomp.py's __read copies its buffer tail per frame (quadratic in one read): use prefixes.
            ns, nl = min(args.small_frames, 2000), min(args.large_frames, 64)
            s2, s2_exp = build_stream("small", ns, args.flavor)
            l2, l2_exp = build_stream("large", nl, args.flavor)
            rows += run_scan_group("small / whole (%d fr)" % ns, [s2], s2_exp, ours, args, args.budget / 2)
            rows += run_scan_group("large / whole (%d fr)" % nl, [l2], l2_exp, ours, args, args.budget / 2)
        enc_rows = run_encode(ours, args)
    except Failure as exc:
        print("\nCORRECTNESS FAILURE: %s" % exc)
        if args.json:
            _write_json(args.json, {"environment": env, "args": vars(args), "correctness_failure": str(exc)})
        return 2
    elapsed = perf_counter() - started

    print_scan_table(rows, args.stat)
    print_encode_table(enc_rows, args.stat)
    print("correctness: all contenders gave the same frame count on every stream; our scanners' frames are "
          "equal to each other and to the source frames; stomp.py's carry the same command/headers/body; "
          "every "
          "encoder's output scans back to the intended SEND.")
    busy = [r for r in rows + enc_rows if r.cpu_share < CPU_SHARE_WARN]
    if busy:
        print()
        print("WARNING: other processes competed for the CPU during timing (cpu%% below %d%% for %s); "
              "figures and ratios are unreliable, run again on a quiet machine."
              % (100 * CPU_SHARE_WARN, ", ".join("%s %s" % (r.group, r.contender) for r in busy)))
    targets = evaluate_targets(rows + enc_rows, chunk_label, args.stat, missing)
    print()
    print("TARGETS (%s pass, %s chunks, %s flavour)" % (args.stat, chunk_label, args.flavor))
    for t in targets:
        print("  %-4s %-42s %-22s (target >= %s)"
              % (t["verdict"], t["target"], t["shown"], t["threshold_shown"]))
    failed = [t for t in targets if t["verdict"] != "PASS"]
    print("%d/%d targets passed; measured in %.1f s" % (len(targets) - len(failed), len(targets), elapsed))

    if args.json:
        _write_json(args.json, {
            "environment": env,
            "args": vars(args),
            "scan": [r.as_dict() for r in rows],
            "encode": [r.as_dict() for r in enc_rows],
            "targets": targets,
            "elapsed_s": elapsed,
            "cpu_contended": bool(busy),
        })
        print("wrote %s" % args.json)
    return 1 if (args.check and failed) else 0


def _write_json(path: str, data: Dict[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        json.dump(data, fh, indent=2, default=str)
        fh.write("\n")


if __name__ == "__main__":
    sys.exit(main())
