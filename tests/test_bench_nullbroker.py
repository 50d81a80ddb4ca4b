"""bench/nullbroker.py, the benchmark's null sink / replay server, does what the comparison relies on."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

NULLBROKER = Path(__file__).resolve().parents[1] / "bench" / "nullbroker.py"


@pytest.fixture
def port() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, str(NULLBROKER), "--port", "0", "--loop", "asyncio"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline().decode()  # type: ignore[union-attr]
        assert line.startswith("LISTENING "), (line, proc.stderr.read())  # type: ignore[union-attr]
        yield int(line.split()[1])
    finally:
        proc.kill()
        proc.wait(5)


class Conn:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self) -> Tuple[str, dict, bytes]:
        while b"\x00" not in self.buf:
            data = self.sock.recv(1 << 16)
            assert data, "connection closed"
            self.buf += data
        end = self.buf.index(b"\x00")
        raw, self.buf = self.buf[:end].lstrip(b"\n"), self.buf[end + 1:]
        head, _, body = raw.partition(b"\n\n")
        lines = head.decode().split("\n")
        headers = dict(line.split(":", 1) for line in lines[1:])
        return lines[0], headers, body


def test_connect_receipts_sends_and_replay(port: int) -> None:
    c = Conn(port)
    c.send(b"CONNECT\naccept-version:1.2\nhost:/\nheart-beat:0,0\n\n\x00")
    cmd, headers, _ = c.frame()
    assert cmd == "CONNECTED" and headers["version"] == "1.2" and headers["heart-beat"] == "0,0"

    # SENDs are discarded, a receipt is answered (in order) and the SENDs are counted.
    sends = b"".join(b"SEND\ndestination:/queue/t\ncontent-length:3\n\nabc\x00" for _ in range(500))
    c.send(sends + b"SEND\ndestination:/queue/t\nreceipt:r1\ncontent-length:3\n\nabc\x00")
    assert c.frame()[:2] == ("RECEIPT", {"receipt-id": "r1"})
    c.send(b"DISCONNECT\nreceipt:bye\n\n\x00")
    assert c.frame()[:2] == ("RECEIPT", {"receipt-id": "bye"})
    c.sock.close()

    ctl = Conn(port)
    ctl.send(b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00")
    assert ctl.frame()[0] == "CONNECTED"
    ctl.send(b"SEND\ndestination:/nullbroker/stats\nx-dest:/queue/t\nreceipt:s\n\n\x00")
    cmd, headers, _ = ctl.frame()
    assert cmd == "RECEIPT" and headers["x-sends"] == "501"

    # Replay: exactly N MESSAGE frames with the subscription id and the prepared bodies.
    n = 30000  # several 1 MiB chunks, so the flow-controlled pump is exercised
    ctl.send(b"SEND\ndestination:/nullbroker/prepare\nx-dest:/queue/r\nx-tag:tg\nx-n:%d\nreceipt:p\n\n\x00" % n)
    assert ctl.frame()[:2] == ("RECEIPT", {"receipt-id": "p"})
    ctl.send(b"SUBSCRIBE\ndestination:/queue/r\nid:sub-7\nack:client-individual\nreceipt:s1\n\n\x00")
    assert ctl.frame()[:2] == ("RECEIPT", {"receipt-id": "s1"})
    bodies: List[bytes] = []
    t0 = time.perf_counter()
    while len(bodies) < n:
        cmd, headers, body = ctl.frame()
        assert cmd == "MESSAGE" and headers["subscription"] == "sub-7" and "sub-7" in headers["ack"]
        assert int(headers["content-length"]) == len(body) == 100
        bodies.append(body)
    assert time.perf_counter() - t0 < 4
    assert bodies[0].startswith(b"tg:00000000:") and bodies[-1].startswith(b"tg:%08d:" % (n - 1))
    assert len(set(bodies)) == n
    # ...and no more: an ACK with a receipt is answered next.
    ctl.send(b"ACK\nid:x\nreceipt:a\n\n\x00")
    assert ctl.frame()[:2] == ("RECEIPT", {"receipt-id": "a"})
    ctl.sock.close()
