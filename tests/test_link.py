"""One connection on its own: a Link on a scripted transport, no client, no socket (asyncio, uvloop and trio).

:class:`stompfast._link.Link` is one live connection: its session, its transport, its
receipt registry, its outbox and its inbox. :meth:`Link.close` is the one teardown,
whatever ended the connection; it reports what was lost. These tests build a link around a
connected :class:`~stompfast._protocol.StompProtocol` and a :class:`ScriptedTransport` that
records writes and hands out the reads the test feeds.
"""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any, List

import anyio
import pytest

from stompfast._config import Endpoint
from stompfast._link import Link, LinkSettings, Lost
from stompfast._protocol import SessionState, StompProtocol
from stompfast._stats import Counters
from stompfast._subscription import Inlet, drop_unacked
from stompfast.errors import ConnectionLostError

pytestmark = pytest.mark.anyio

WAIT = 5


def connected(heart_beat: str = "0,0") -> StompProtocol:
    protocol = StompProtocol(host="/", heart_beat=(1000, 1000))
    protocol.connect()
    protocol.receive_data(b"CONNECTED\nversion:1.2\nheart-beat:%s\n\n\x00" % heart_beat.encode())
    return protocol


class ScriptedTransport:
    """A pull transport: records writes; reads are what the test feeds (``b""``: the broker closed)."""

    def __init__(self) -> None:
        self.send_chunk, self.chunks = anyio.create_memory_object_stream[bytes](10)
        self.writes: List[bytes] = []
        self.closed = False
        self.peer = "scripted"

    async def receive(self, max_bytes: int = 0) -> bytes:
        return await self.chunks.receive()

    async def send(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def try_write(self, data: bytes) -> bool:
        return False

    async def aclose(self) -> None:
        self.closed = True


SETTINGS = LinkSettings(
    ssl=None, server_hostname=None, connect_timeout=5.0, websocket_max_message_bytes=65536,
    send_buffer_bytes=1 << 20, stall_timeout=60.0, heartbeat_tolerance=3.0, protocol_options={},
)


def make(transport: Any, protocol: StompProtocol, failures: List[BaseException], counters: Any = None) -> Link:
    return Link(
        Endpoint("broker", 61613), protocol, transport, settings=SETTINGS, subs={},
        counters=Counters() if counters is None else counters, lock=threading.Lock(), clock=anyio.current_time,
        on_failure=failures.append,
    )


async def test_a_started_link_writes_what_is_queued_and_reads_into_its_receipts():
    transport, failures = ScriptedTransport(), []
    link = make(transport, connected(), failures)
    assert link.alive
    async with anyio.create_task_group() as tg:
        link.start(tg, [])
        receipt = link.register("r1")
        link.outbox.queue(b"SEND\ndestination:/queue/a\nreceipt:r1\n\n\x00")
        with anyio.fail_after(WAIT):
            while not transport.writes:
                await anyio.sleep(0.005)
            await transport.send_chunk.send(b"RECEIPT\nreceipt-id:r1\n\n\x00")
            await receipt.wait()
        link.close(ConnectionLostError("test over"))
    assert transport.writes == [b"SEND\ndestination:/queue/a\nreceipt:r1\n\n\x00"] and failures == []


async def test_closing_is_the_one_teardown_and_reports_what_was_lost():
    transport, failures, counters = ScriptedTransport(), [], Counters()
    protocol = connected("1000,1000")
    link = make(transport, protocol, failures, counters)
    async with anyio.create_task_group() as tg:
        link.start(tg, [])
        # the writer, the heart-beat sender, the liveness watch and the reader
        assert len(link.scopes) == 4
        pending = [link.register("r1"), link.register("r2")]
        # queued, not yet written (no checkpoint since): the close drops them
        link.outbox.queue(b"SEND\ndestination:/queue/a\n\n\x00")
        link.outbox.queue(b"SEND\ndestination:/queue/b\n\n\x00")
        error = ConnectionLostError("the broker went away")
        lost = link.close(error)
        assert lost == Lost(error, dropped_frames=2)
        assert all(r.done() and r.error is error for r in pending) and len(link.receipts) == 0
        assert link.outbox.closed and link.inbox.closed and not link.alive
        assert all(scope.cancel_called for scope in link.scopes)
        assert protocol.state is SessionState.CLOSED
        # closing again loses nothing more, and fails nothing twice
        again = ConnectionLostError("again")
        assert link.close(again) == Lost(again)
    assert counters.receipts_failed == 2
    await link.aclose()
    assert transport.closed and failures == []


async def test_a_lost_link_is_freed_by_reference_counting():
    # Its session may hold up to max_frame_bytes of scanner buffer: it must go when the
    # link goes, not at a rare cyclic collection (tests/test_hostile.py measures the RSS).
    transport, failures = ScriptedTransport(), []
    link = make(transport, connected(), failures)
    async with anyio.create_task_group() as tg:
        link.start(tg, [])
        link.register("r1")
        link.outbox.queue(b"SEND\ndestination:/queue/a\n\n\x00")
        await anyio.sleep(0.01)
        link.close(ConnectionLostError("gone"))
    await link.aclose()
    # (the link and its components are slotted, without weak references: their
    # session and transport, reachable only through them, stand for them)
    refs = [weakref.ref(link.protocol), weakref.ref(transport)]
    gc.collect()
    gc.disable()
    try:
        del link, transport
        assert [ref() for ref in refs] == [None, None]
    finally:
        gc.enable()


def test_an_idle_link_is_closed_and_empty():
    link = Link(
        Endpoint("broker", 61613), StompProtocol(host="/"), None, settings=SETTINGS, subs={}, counters=Counters(),
        lock=threading.Lock(),
    )
    assert not link.alive and link.outbox.closed and link.inbox.closed and len(link.receipts) == 0
    assert link.close(ConnectionLostError("never opened")).dropped_frames == 0


def test_a_lost_links_client_ack_buffers_are_dropped_and_auto_ones_kept():
    owner = object()
    auto = Inlet(owner, "/queue/a", "auto", None, 10, False, "0")
    client = Inlet(owner, "/queue/b", "client", None, 10, False, "1")
    individual = Inlet(owner, "/queue/c", "client-individual", None, 10, False, "2")
    for inlet in (auto, client, individual):
        inlet.messages.extend([object(), object()])
        inlet.space = anyio.Event()
    assert drop_unacked([auto, client, individual]) == 4
    assert len(auto.messages) == 2 and not client.messages and not individual.messages
    assert all(inlet.space is None for inlet in (auto, client, individual))
