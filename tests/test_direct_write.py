"""A thread writing a receipted SEND itself (the blocking client's round trip): order and the partial write.

The direct path exists over plain TCP on every loop
(``AsyncioTransport.write_from_thread`` on asyncio and uvloop,
``TrioTransport.write_from_thread`` on trio) and over WebSocket on asyncio; over
TLS it declines and the loop writes (tests/test_transport_tls_ws.py). Its one delicate
case is a partial write: the rest must reach the wire before anything written
after it, by the loop or by another thread.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, List

import anyio
import anyio.to_thread
import pytest

from stompfast import Client
from stompfast._transport import open_transport
from stompfast.testing import Broker

pytestmark = [pytest.mark.timeout(60)]

WAIT = 5

TRANSPORT_BACKENDS = [
    pytest.param(("asyncio", {}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio-uvloop"),
    pytest.param(("trio", {}), id="trio"),
]


def unwritten(transport: Any) -> int:
    """Bytes handed to ``transport`` that the kernel has not taken yet (its tail, and asyncio's buffer)."""
    held = len(transport._tail or b"")
    if hasattr(transport, "_transport"):
        held += transport._transport.get_write_buffer_size()
    return held


class SlowReader:
    """Accepts one connection and reads nothing until ``start`` is set; then reads everything to EOF."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.port = self.listener.getsockname()[1]
        self.start = threading.Event()
        self.data = bytearray()
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            self.start.wait(WAIT * 2)
            while True:
                chunk = conn.recv(1 << 20)
                if not chunk:
                    break
                self.data += chunk
        self.done.set()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", TRANSPORT_BACKENDS)
async def test_a_partial_thread_write_reaches_the_wire_before_what_follows(anyio_backend):
    server = SlowReader()
    transport: Any = await open_transport("127.0.0.1", server.port)
    assert transport.direct_ok
    first, big, last = b"A" * 1000, bytes(range(256)) * (32 * 1024), b"C" * 1000  # 8 MiB in the middle
    await transport.send(first)
    wrote = await anyio.to_thread.run_sync(transport.write_from_thread, big)
    assert wrote  # (partly: nobody reads, so the kernel took only what fits)
    # the rest is pending: still the tail, or already handed to the loop's transport
    assert 0 < unwritten(transport) < len(big)
    # A second thread write while bytes are pending must decline, not jump ahead.
    assert not await anyio.to_thread.run_sync(transport.write_from_thread, b"X" * 10)
    server.start.set()
    await transport.send(last)  # the loop's next write, after the tail
    with anyio.fail_after(WAIT):
        while unwritten(transport):
            await anyio.sleep(0.01)
    await transport.aclose()
    assert await anyio.to_thread.run_sync(server.done.wait, WAIT)
    assert bytes(server.data) == first + big + last


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", TRANSPORT_BACKENDS)
async def test_a_thread_declines_while_the_loops_own_write_is_unfinished(anyio_backend):
    # The loop's write was more than the kernel takes: until those bytes are on the wire
    # (asyncio's buffer; uvloop's, then libuv's queue; trio's tail) a thread's write would
    # jump ahead of them, so it must decline; once they are out it may write.
    server = SlowReader()
    transport: Any = await open_transport("127.0.0.1", server.port)
    assert transport.direct_ok
    big = bytes(range(256)) * (32 * 1024)
    async with anyio.create_task_group() as tg:
        tg.start_soon(transport.send, big)  # on trio, waits in the task until the kernel took it all
        with anyio.fail_after(WAIT):
            while not unwritten(transport):
                await anyio.sleep(0.001)
        assert not await anyio.to_thread.run_sync(transport.write_from_thread, b"X" * 10)
        server.start.set()
        with anyio.fail_after(WAIT):
            while unwritten(transport):
                await anyio.sleep(0.01)
    assert await anyio.to_thread.run_sync(transport.write_from_thread, b"Z" * 10)
    await transport.aclose()
    assert await anyio.to_thread.run_sync(server.done.wait, WAIT)
    assert bytes(server.data) == big + b"Z" * 10


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", TRANSPORT_BACKENDS)
async def test_a_closed_transport_takes_no_thread_write(anyio_backend):
    server = SlowReader()
    transport: Any = await open_transport("127.0.0.1", server.port)
    server.start.set()
    await transport.aclose()
    assert not await anyio.to_thread.run_sync(transport.write_from_thread, b"X" * 10)
    assert await anyio.to_thread.run_sync(server.done.wait, WAIT)
    assert bytes(server.data) == b""


BACKENDS = [
    pytest.param(("asyncio", None), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="asyncio-uvloop"),
    pytest.param(("trio", None), id="trio"),
]


@pytest.mark.parametrize("backend", BACKENDS)
def test_receipted_sends_keep_their_place_among_queued_ones(backend):
    # One thread mixes plain sends (queued, written by the loop) with receipted
    # ones (written by the thread itself where it can): the broker must see them
    # in the order of the calls, and a receipt must cover every earlier send.
    # Every fourth send is receipted right after a receipted one, so nothing of
    # the client's is ahead of it and the thread writes it itself; one right after
    # plain sends may find them still queued (it then goes through the loop).
    name, options = backend
    with Broker.in_thread() as broker:
        with Client(broker.url, heart_beat=(0, 0), reconnect=False, backend=name, backend_options=options) as c:
            with c.subscribe("/queue/o") as sub:
                expected: List[bytes] = []
                for i in range(400):
                    body = b"%d" % i
                    expected.append(body)
                    if i % 4 in (2, 3):
                        c.send("/queue/o", body, receipt=True, timeout=WAIT)
                        # everything sent so far has reached the broker
                        assert broker.stats.frames_in.get("SEND", 0) >= i + 1
                    else:
                        c.send("/queue/o", body)
                got = [sub.receive(timeout=WAIT).body for _ in expected]
            assert got == expected
            receipts = [f.headers.get("receipt", "") for f in broker.received if f.command == "SEND"]
            direct = [r for r in receipts if r.startswith("t")]
            assert direct, "the calling thread should have written some SENDs itself"
        broker.wait_for_blocking(lambda: broker.connections == 0)  # the thread's socket dup did not keep it open


@pytest.mark.parametrize("backend", BACKENDS)
def test_acks_written_by_the_thread_keep_their_place_and_their_count(backend, monkeypatch):
    # `for m in sub: m.ack()` on client-individual: where it can, the consuming thread
    # writes each ACK itself (no loop wake-up). The broker must still see every frame in
    # the order of the calls (an ACK, then a queued SEND made after it), each message acked
    # once, and stats() must count every ACK once, whoever wrote it.
    from stompfast import AlreadySettledError, AsyncClient

    name, options = backend
    by_thread: List[str] = []
    original = AsyncClient.ack_from_thread

    def recording(self: Any, message: Any) -> bool:
        done = original(self, message)
        if done:
            by_thread.append(message.ack_id)
        return done

    monkeypatch.setattr(AsyncClient, "ack_from_thread", recording)
    n = 300
    with Broker.in_thread() as broker:
        with Client(broker.url, heart_beat=(0, 0), reconnect=False, backend=name, backend_options=options) as c:
            for i in range(n):
                c.send("/queue/acked", b"%d" % i)
            expected: List[str] = []
            with c.subscribe("/queue/acked", ack="client-individual") as sub:
                for i in range(n):
                    message = sub.receive(timeout=WAIT)
                    message.ack()
                    expected.append("ACK " + message.ack_id)
                    if i % 3 == 0:
                        c.send("/queue/after", b"%d" % i)
                        expected.append("SEND %d" % i)
                    with pytest.raises(AlreadySettledError):
                        message.ack()
                c.flush(timeout=WAIT)
                assert broker.unacked("/queue/acked") == 0
                assert broker.queue_depth("/queue/acked") == 0
            stats = c.stats()
            assert stats.acks == n
            assert stats.messages_sent == n + n // 3
        seen = []
        for f in broker.received:
            if f.command == "ACK":
                seen.append("ACK " + f.headers["id"])
            elif f.command == "SEND" and f.headers["destination"] == "/queue/after":
                seen.append("SEND " + f.body.decode())
        assert seen == expected
    assert by_thread, "the consuming thread should have written some ACKs itself"
