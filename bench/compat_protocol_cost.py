#!/usr/bin/env python
"""What the stomp.py layer's receive path would pay for StompProtocol's events, per message.

Run from the repository root (no broker needed)::

    python bench/compat_protocol_cost.py

The stomp.py layer (``stompfast.compat.stomp``) feeds the bytes it reads to a
``FrameScanner`` and turns each frame into stomp.py's mutable ``Frame`` (a copy of the
headers, the body decoded). Driving the same bytes through the client's sans-I/O
``StompProtocol`` instead would add its session checks and one event object per frame,
from which the layer would still build the same ``Frame``. This measures both on one
in-memory MESSAGE stream (STOMP 1.2, six headers as a broker sends them, 100-byte
bodies), in reads of 200 frames (ActiveMQ's batches) and of 2 (RabbitMQ's), and prints
microseconds per message of each and the difference: the least that path would add to
the layer's CPU per consumed message (about 5 to 8 us on RabbitMQ, docs/migrating.md).
"""

import time

from stompfast import FrameScanner, encode_frame
from stompfast._protocol import StompProtocol

HEADERS = {"subscription": "1", "message-id": "T_1@@session-abc@@1", "destination": "/queue/bench",
           "ack": "T_1@@session-abc@@1", "content-type": "text/plain", "priority": "4"}
MESSAGE = encode_frame("MESSAGE", HEADERS, b"x" * 100, "1.2")
#: frames in the whole run of each read size
TOTAL = 200_000
#: best of this many runs
RUNS = 5


def through_scanner(data: bytes, reads: int) -> float:
    """Seconds for the layer's path today: the scanner, then stomp.py's Frame's parts."""
    scanner = FrameScanner(version="1.2")
    started = time.perf_counter()
    for _ in range(reads):
        for raw in scanner.feed(data):
            raw.body.decode("utf-8", "replace")
            dict(raw.headers)
    return time.perf_counter() - started


def through_protocol(data: bytes, reads: int) -> float:
    """Seconds for the same through a connected StompProtocol's events."""
    protocol = StompProtocol(host="/", versions=("1.2",), heart_beat=(0, 0))
    protocol.connect()
    protocol.receive_data(encode_frame("CONNECTED", {"version": "1.2"}, b"", "1.2"))
    started = time.perf_counter()
    for _ in range(reads):
        for event in protocol.receive_data(data):
            raw = event.frame
            raw.body.decode("utf-8", "replace")
            dict(raw.headers)
    return time.perf_counter() - started


def main() -> None:
    for per_read in (200, 2):
        data = MESSAGE * per_read
        reads = TOTAL // per_read
        scanner = min(through_scanner(data, reads) for _ in range(RUNS)) / TOTAL * 1e6
        protocol = min(through_protocol(data, reads) for _ in range(RUNS)) / TOTAL * 1e6
        print(f"{per_read:>3} frames per read: scanner {scanner:.2f} us/msg, StompProtocol {protocol:.2f} us/msg,"
              f" +{protocol - scanner:.2f} us/msg ({protocol / scanner:.2f}x)")


if __name__ == "__main__":
    main()
