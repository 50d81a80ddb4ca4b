"""Paths where a client could pile up memory, each driven for a while with RSS watched.

Each ``path_*`` function pushes messages at one path for ``seconds`` (or until
``messages`` were pushed) and returns a :class:`Result` with the RSS growth of the
process that holds the client: the peak over the run minus the RSS when the
pushing began (for the CLI, a process of its own, one second after it started:
imported and connected).
tests/test_memory_bounds.py runs each briefly (``STOMPFAST_MEMORY_SECONDS``,
default 4); ``python bench/memory_table.py`` runs them for 60 s or 1,000,000
messages and prints the table. Every path must stay under 50 MB of growth.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional

import anyio
from hostile import Conn, HostileServer

from stompfast import AsyncClient, Client, StompTimeout, encode_frame
from stompfast.testing import Broker

MB = 1_000_000
LIMIT = 50 * MB
SETTLE = 1.0  # seconds before the CLI's baseline is taken
NULLBROKER = Path(__file__).resolve().parents[1] / "bench" / "nullbroker.py"
BODY = b"x" * 100


class Result:
    def __init__(self, path: str, what: str) -> None:
        self.path = path
        self.what = what  # what pushed against it, in words
        self.pushed = 0  # messages
        self.seconds = 0.0
        self.baseline = 0
        self.peak = 0

    @property
    def growth(self) -> int:
        return max(0, self.peak - self.baseline)

    def __repr__(self) -> str:
        return (f"{self.path}: {self.pushed:,} messages in {self.seconds:.1f} s, "
                f"RSS {self.baseline / MB:.1f} -> peak {self.peak / MB:.1f} MB (+{self.growth / MB:.1f})")


def rss(pid: Optional[int] = None) -> int:
    """Resident set size of ``pid`` (this process by default), in bytes; 0 once it is gone."""
    try:
        with open(f"/proc/{pid or 'self'}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Watch:
    """Samples RSS every 20 ms in a thread: baseline after SETTLE seconds, then the peak."""

    def __init__(self, result: Result, pid: Optional[int] = None, settle: float = 0.0) -> None:
        self.result, self.pid, self.settle = result, pid, settle
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            now = rss(self.pid)
            if not now:
                continue
            if not self.result.baseline:
                if time.monotonic() - self.started >= self.settle:
                    self.result.baseline = self.result.peak = now
            elif now > self.result.peak:
                self.result.peak = now

    def stop(self) -> Result:
        self._stop.set()
        self._thread.join()
        self.result.seconds = time.monotonic() - self.started
        if not self.result.baseline:  # shorter than the settling time: too quick to say anything
            raise AssertionError(f"{self.result.path}: ran {self.result.seconds:.2f} s, less than {self.settle} s")
        return self.result


# -- the CLI's receipts ------------------------------------------------------------------------


def path_cli_receipts(seconds: float, messages: int) -> Result:
    """`stompfast send --count N` (every message receipted, window 1000) to the null sink; the CLI's RSS."""
    result = Result("CLI send --count, receipts", "receipted SENDs, window 1000, null sink")
    broker = subprocess.Popen([sys.executable, str(NULLBROKER), "--port", "0", "--loop", "asyncio"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = broker.stdout.readline().decode()  # type: ignore[union-attr]
        assert line.startswith("LISTENING "), line
        port = int(line.split()[1])
        cli = subprocess.Popen(
            [sys.executable, "-m", "stompfast", "send", "--url", f"stomp://127.0.0.1:{port}/", "-q",
             "--count", str(messages), "--receipt-window", "1000", "/queue/mem", BODY.decode()],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        watch = Watch(result, cli.pid, settle=SETTLE)  # the baseline once imported and connected
        try:
            cli.wait(seconds)
            result.pushed = messages
        except subprocess.TimeoutExpired:
            cli.terminate()
            cli.wait(10)
        watch.stop()
        if cli.returncode not in (0, 143, -15):  # done, or stopped by our SIGTERM (a clean stop: 143)
            raise AssertionError(f"stompfast send failed: {cli.returncode} {cli.stderr.read()!r}")  # type: ignore
        deadline = time.monotonic() + 5
        while not result.pushed and time.monotonic() < deadline:  # counted once the sink saw the connection end
            result.pushed = _null_count(port, "/queue/mem")
            time.sleep(0.05)
    finally:
        broker.kill()
        broker.wait(5)
    return result


def _null_count(port: int, destination: str) -> int:
    """SENDs the null sink counted for ``destination`` (its stats control frame)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00SEND\ndestination:/nullbroker/stats\n"
                     b"x-dest:%s\nreceipt:s\n\n\x00" % destination.encode())
        buf = b""
        while buf.count(b"\x00") < 2:
            data = sock.recv(65536)
            if not data:
                break
            buf += data
    for line in buf.split(b"\x00")[1].split(b"\n"):
        if line.startswith(b"x-sends:"):
            return int(line.split(b":")[1])
    return 0


# -- the test broker's limit -------------------------------------------------------------------


def _send_until(client: Client, destination: str, seconds: float, messages: int, result: Result) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and result.pushed < messages:
        try:
            client.send(destination, BODY, timeout=0.2)
            result.pushed += 1
        except StompTimeout:
            pass  # held back: that is the point


def path_test_broker_limit(seconds: float, messages: int) -> Result:
    """SENDs into a queue nobody reads on the in-process broker (max_bytes 8 MiB): it holds the producer."""
    result = Result("test broker, a queue nobody reads", "SENDs, max_bytes 8 MiB, flow control")
    with Broker.in_thread(max_bytes=8 * 1024 * 1024) as broker:
        with Client(broker.url, heart_beat=(0, 0), disconnect_timeout=0.5) as client:
            watch = Watch(result)
            _send_until(client, "/queue/mem", seconds, messages, result)
            watch.stop()
            # the limit admits a SEND while below it: at most one message over
            assert broker.stats.stored_bytes <= 8 * 1024 * 1024 + 1024, broker.stats.stored_bytes
    return result


# -- the send queue, under a broker that stops reading ----------------------------------------


def _never_reads(stop: threading.Event) -> Callable[[Conn], None]:
    def handler(conn: Conn) -> None:
        conn.connected()
        stop.wait(600)

    return handler


def path_send_queue_stalled(seconds: float, messages: int) -> Result:
    """Receipt-less sends from the blocking client to a server that stopped reading after CONNECTED."""
    result = Result("send queue, broker stops reading", "receipt-less SENDs (blocking client)")
    stop = threading.Event()
    with HostileServer(_never_reads(stop)) as server:
        try:
            with Client(server.url, heart_beat=(0, 0), reconnect=False, disconnect_timeout=0.5) as client:
                watch = Watch(result)
                _send_until(client, "/queue/mem", seconds, messages, result)
                watch.stop()
        finally:
            stop.set()
    return result


# -- an auto-mode subscription nobody reads ------------------------------------------------


def _pusher(counter: List[int], stop: threading.Event) -> Callable[[Conn], None]:
    """CONNECTED, the SUBSCRIBE confirmed, then MESSAGE frames as fast as the socket takes them."""

    def handler(conn: Conn) -> None:
        conn.connected()
        sub = conn.expect("SUBSCRIBE")
        if "receipt" in sub.headers:
            conn.send("RECEIPT", {"receipt-id": sub.headers["receipt"]})
        sid = sub.headers["id"]
        block = b"".join(
            encode_frame("MESSAGE", {"subscription": sid, "message-id": str(i), "destination": "/queue/mem"}, BODY)
            for i in range(500)
        )
        conn.sock.settimeout(0.2)
        pending = block
        while not stop.is_set():
            try:
                sent = conn.sock.send(pending)
            except socket.timeout:
                continue  # the client stopped reading: its buffer is full
            counter[0] += pending.count(b"\x00", 0, sent)
            pending = pending[sent:] or block

    return handler


def path_auto_unread(seconds: float, messages: int) -> Result:
    """A server pushing MESSAGEs at an auto-ack subscription (buffer_size 1000) that nobody reads."""
    result = Result("auto-ack subscription nobody reads", "MESSAGEs pushed as fast as TCP takes them")
    counter, stop = [0], threading.Event()
    with HostileServer(_pusher(counter, stop)) as server:
        try:
            with Client(server.url, heart_beat=(0, 0), reconnect=False, disconnect_timeout=0.5) as client:
                with client.subscribe("/queue/mem", ack="auto", buffer_size=1000):
                    watch = Watch(result)
                    deadline = time.monotonic() + seconds
                    while time.monotonic() < deadline and counter[0] < messages:
                        time.sleep(0.05)
                    watch.stop()
                    result.pushed = counter[0]  # (a close reads on to its receipt, dropping what comes)
        finally:
            stop.set()
    return result


def path_websocket_unread(seconds: float, messages: int) -> Result:
    """As path_auto_unread, over the WebSocket transport (a WebSocket bridge in front of the pusher)."""
    from wsbridge import WSBridge

    result = Result("WebSocket, auto-ack subscription nobody reads", "MESSAGEs pushed through a WS bridge")
    counter, stop = [0], threading.Event()

    async def main() -> None:
        async with WSBridge(server) as bridge:
            async with AsyncClient(bridge.url(), heart_beat=(0, 0), reconnect=False, disconnect_timeout=0.5) as c:
                async with c.subscribe("/queue/mem", ack="auto", buffer_size=1000):
                    watch = Watch(result)
                    deadline = time.monotonic() + seconds
                    while time.monotonic() < deadline and counter[0] < messages:
                        await anyio.sleep(0.05)
                    watch.stop()
                    result.pushed = counter[0]

    with HostileServer(_pusher(counter, stop)) as server:
        try:
            anyio.run(main)
        finally:
            stop.set()
    return result


PATHS = [path_cli_receipts, path_test_broker_limit, path_send_queue_stalled, path_auto_unread, path_websocket_unread]


def seconds_from_env(default: float = 4.0) -> float:
    return float(os.environ.get("STOMPFAST_MEMORY_SECONDS", default))
