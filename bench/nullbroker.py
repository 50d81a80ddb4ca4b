#!/usr/bin/env python
"""A null sink / replay STOMP server: the cheapest thing a client can talk to, so the client is the bottleneck.

Run it in its own process (the comparison in ``bench/compare.py`` does)::

    python bench/nullbroker.py --port 0          # prints "LISTENING <port>" once bound

What it does, per connection (STOMP 1.2 framing, no broker semantics at all):

* ``CONNECT``/``STOMP`` -> ``CONNECTED`` (``version:1.2``, ``heart-beat:0,<client's cx>``: it
  never sends heart-beats and tolerates the client's, which are ignored).
* every frame carrying a ``receipt`` header -> ``RECEIPT`` with that ``receipt-id``
  (``DISCONNECT`` included; frames are handled in order, so a receipt still proves that
  everything sent before it arrived).
* ``SEND`` is discarded; the SENDs of a connection are counted (``bytes.count``) and the count
  is kept under the destination of its first SEND when the connection ends, for
  ``stats`` (below).
* ``ACK``/``NACK``/``UNSUBSCRIBE``/``BEGIN``/... are discarded (receipts answered).
* ``SUBSCRIBE`` to a destination that was *prepared* replays the prepared stream of N
  ``MESSAGE`` frames as fast as the socket takes it: the frames were encoded once, at
  preparation, in ~1 MiB chunks; the only per-SUBSCRIBE work is one ``bytes.replace`` per
  chunk that puts the subscription id in, done while earlier chunks are being written
  (asyncio flow control: ``pause_writing``/``resume_writing``). A SUBSCRIBE to a destination
  not prepared gets nothing.

Control frames (from the benchmark's parent process, each with a ``receipt``):

* ``SEND`` to ``/nullbroker/prepare`` with ``x-dest``, ``x-tag``, ``x-n`` (and optional
  ``x-size``, default 100): prepares ``x-dest`` with N messages whose bodies are
  ``b"<tag>:%08d:" % i`` padded with ``x`` to the size (bench/client_compare.py's
  ``make_body``).
* ``SEND`` to ``/nullbroker/stats`` with ``x-dest``: the RECEIPT carries ``x-sends`` (SENDs
  counted for that destination by connections that ended) and resets it.

Cost: the fast path of a read is a few C-level scans of the chunk (``rfind`` of the last
NUL, ``in`` for ``receipt:``, ``SUBSCRIBE``, ``CONNECT``, ``STOMP``, ``count`` of ``SEND``);
only a read holding one of those markers is split into frames. Limits (it is a benchmark
tool): bodies must not contain NUL bytes or those markers (the benchmark's do not), and
MESSAGE frames look like RabbitMQ's (``subscription``, ``destination``, ``message-id``,
``redelivered``, ``ack``, ``content-length``; an EOL after each frame).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Dict, List, Optional, Tuple

CHUNK = 1 << 20
HIGH_WATER = 4 << 20
SUB_MARK = b"\x01SUBID\x01"

prepared: Dict[str, List[bytes]] = {}  # destination -> chunks of MESSAGE frames holding SUB_MARK
send_counts: Dict[str, int] = {}


def make_body(tag: bytes, i: int, size: int = 100) -> bytes:
    head = b"%s:%08d:" % (tag, i)
    return head + b"x" * (size - len(head))


def build_stream(dest: str, tag: bytes, n: int, size: int = 100) -> List[bytes]:
    """N MESSAGE frames, RabbitMQ-style, cut into ~1 MiB chunks at frame boundaries."""
    d = dest.encode()
    chunks: List[bytes] = []
    part: List[bytes] = []
    length = 0
    for i in range(n):
        frame = (b"MESSAGE\nsubscription:%s\ndestination:%s\nmessage-id:T_%s@@session-nb@@%d\n"
                 b"redelivered:false\nack:T_%s@@session-nb@@%d\ncontent-length:%d\n\n%s\x00\n"
                 % (SUB_MARK, d, SUB_MARK, i + 1, SUB_MARK, i + 1, size, make_body(tag, i, size)))
        part.append(frame)
        length += len(frame)
        if length >= CHUNK:
            chunks.append(b"".join(part))
            part, length = [], 0
    if part:
        chunks.append(b"".join(part))
    return chunks


def parse_headers(frame: bytes) -> Tuple[bytes, Dict[bytes, bytes]]:
    """Command and first-wins headers of one frame (without its NUL); no unescaping needed here."""
    frame = frame.lstrip(b"\r\n")
    hend = frame.find(b"\n\n")
    head = frame if hend < 0 else frame[:hend]
    lines = head.split(b"\n")
    headers: Dict[bytes, bytes] = {}
    for line in lines[1:]:
        k, _, v = line.rstrip(b"\r").partition(b":")
        headers.setdefault(k, v)
    return lines[0].rstrip(b"\r"), headers


class NullProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: Optional[asyncio.Transport] = None
        self.pending = b""
        self.sends = 0
        self.send_dest: Optional[str] = None
        self.recorded = False
        self.replays: List[Tuple[List[bytes], int, bytes]] = []  # (chunks, next index, subscription id)
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=HIGH_WATER)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        if self.pending:
            data = self.pending + data
        last = data.rfind(b"\x00")
        if last < 0:
            self.pending = data
            return
        self.pending = data[last + 1:]
        if not self.sends:
            self._note_dest(data, last)
        self.sends += data.count(b"SEND\n", 0, last)
        if (b"receipt:" in data or b"SUBSCRIBE" in data or b"CONNECT" in data or b"STOMP" in data):
            for frame in data[:last].split(b"\x00"):
                self.handle(frame)

    def _note_dest(self, data: bytes, last: int) -> None:
        i = data.find(b"SEND\n", 0, last)
        if i >= 0:
            j = data.find(b"\ndestination:", i, last)
            if j >= 0:
                self.send_dest = data[j + 13:data.find(b"\n", j + 13)].decode()

    def handle(self, frame: bytes) -> None:
        if not frame.strip(b"\r\n"):
            return  # heart-beat EOLs
        command, headers = parse_headers(frame)
        if command in (b"CONNECT", b"STOMP"):
            cx = headers.get(b"heart-beat", b"0,0").split(b",")[0] or b"0"
            self.write(b"CONNECTED\nversion:1.2\nserver:stompfast-nullbroker/1\nsession:nb-%d\n"
                       b"heart-beat:0,%s\n\n\x00\n" % (os.getpid(), cx))
            return
        extra = b""
        if command == b"SEND":
            dest = headers.get(b"destination", b"")
            if dest == b"/nullbroker/prepare":
                self.sends -= 1
                d = headers[b"x-dest"].decode()
                prepared[d] = build_stream(d, headers[b"x-tag"], int(headers[b"x-n"]),
                                           int(headers.get(b"x-size", b"100")))
            elif dest == b"/nullbroker/stats":
                self.sends -= 1
                extra = b"x-sends:%d\n" % send_counts.pop(headers[b"x-dest"].decode(), 0)
        elif command == b"SUBSCRIBE":
            chunks = prepared.get(headers.get(b"destination", b"").decode(), [])
            if chunks:
                self.replays.append((chunks, 0, headers.get(b"id", b"")))
        elif command == b"DISCONNECT":
            self.record()
        rid = headers.get(b"receipt")
        if rid is not None:
            self.write(b"RECEIPT\nreceipt-id:%s\n%s\n\x00\n" % (rid, extra))
        if command == b"SUBSCRIBE":
            self.pump()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def pump(self) -> None:
        """Write replay chunks until the transport's buffer is above its high-water mark."""
        while self.replays and not self.paused:
            chunks, i, sid = self.replays[0]
            if i >= len(chunks):
                self.replays.pop(0)
                continue
            self.replays[0] = (chunks, i + 1, sid)
            self.write(chunks[i].replace(SUB_MARK, sid))  # may call pause_writing

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.pump()

    def record(self) -> None:
        if not self.recorded:
            self.recorded = True
            if self.send_dest is not None:
                send_counts[self.send_dest] = send_counts.get(self.send_dest, 0) + self.sends

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self.record()
        self.replays.clear()
        self.transport = None


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(NullProtocol, host, port)
    bound = server.sockets[0].getsockname()[1]
    sys.stdout.write("LISTENING %d\n" % bound)
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: any free port (printed as LISTENING <port>)")
    p.add_argument("--loop", choices=("auto", "asyncio", "uvloop"), default="auto",
                   help="event loop (auto: uvloop when installed)")
    args = p.parse_args(argv)
    use_uvloop = args.loop == "uvloop"
    if args.loop == "auto":
        try:
            import uvloop  # noqa: F401

            use_uvloop = True
        except ImportError:
            use_uvloop = False
    try:
        if use_uvloop:
            import uvloop

            uvloop.run(serve(args.host, args.port))
        else:
            asyncio.run(serve(args.host, args.port))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
