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
from stompfast._receipt import PendingReceipt
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


# -- the verbs the client asks of a live link -------------------------------------------------


class DirectTransport(ScriptedTransport):
    """A scripted transport a thread may write to; ``takes`` says whether it takes the next write whole."""

    def __init__(self) -> None:
        super().__init__()
        self.takes = True
        self.direct_ok = True
        self.thread_writes: List[bytes] = []

    def write_from_thread(self, data: bytes) -> bool:
        if self.takes:
            self.thread_writes.append(bytes(data))
        return self.takes


def small(send_buffer_bytes: int) -> LinkSettings:
    return LinkSettings(
        ssl=None, server_hostname=None, connect_timeout=5.0, websocket_max_message_bytes=65536,
        send_buffer_bytes=send_buffer_bytes, stall_timeout=60.0, heartbeat_tolerance=3.0, protocol_options={},
    )


def delivered(protocol: StompProtocol) -> Any:
    """A MESSAGE of a client-individual subscription of ``protocol``, as the inbox hands it on."""
    protocol.subscribe("/queue/a", ack="client-individual", id="0")
    (message,) = protocol.receive_data(
        b"MESSAGE\ndestination:/queue/a\nmessage-id:m1\nsubscription:0\nack:a1\n\nbody\x00"
    )
    return message


async def test_offer_queues_under_the_write_through_mark_and_has_room_says_when_a_sender_must_wait():
    counters = Counters()
    link = Link(Endpoint("broker", 61613), connected(), ScriptedTransport(), settings=small(100), subs={},
                counters=counters, lock=threading.Lock(), clock=anyio.current_time)
    assert link.offer(b"x" * 60) and link.offer(b"y" * 60)
    # past the mark (here the send buffer): refused, nothing queued
    assert not link.offer(b"z") and not link.has_room()
    link.queue(b"z")
    assert link.outbox.out == [b"x" * 60, b"y" * 60, b"z"]


async def test_queue_ack_encodes_and_counts_only_when_there_is_room():
    counters, protocol = Counters(), connected()
    link = Link(Endpoint("broker", 61613), protocol, ScriptedTransport(), settings=small(100), subs={},
                counters=counters, lock=threading.Lock(), clock=anyio.current_time)
    message = delivered(protocol)
    link.queue(b"x" * 100)
    # no room: nothing encoded, so the message is not marked settled and can be acked later
    assert not link.queue_ack(message) and message.settled is None and counters.acks == 0
    link.outbox.drop()
    assert link.queue_ack(message)
    assert link.outbox.out == [b"ACK\nid:a1\n\n\x00"] and counters.acks == 1


async def test_expect_registers_a_receipt_only_for_a_frame_that_asks_for_one():
    link = make(ScriptedTransport(), connected(), [])
    assert link.expect(None) is None and link.outstanding() == []
    pending = link.expect("r-1")
    assert link.outstanding() == [pending]
    lost = ConnectionLostError("gone")
    link.close(lost)
    assert pending.error is lost and link.outstanding() == []


async def test_a_threads_send_keeps_its_receipt_only_when_the_transport_took_the_frame():
    transport, counters = DirectTransport(), Counters()
    link = make(transport, connected(), [], counters)
    # a scripted transport is not one a thread may write to; this one stands for asyncio's
    link.direct = True
    assert link.may_write_from_thread()
    refused = PendingReceipt("t1")
    transport.takes = False
    assert not link.send_from_thread(b"SEND\nreceipt:t1\n\n\x00", refused)
    assert link.outstanding() == [] and counters.thread_sends == 0
    transport.takes = True
    taken = PendingReceipt("t2")
    assert link.send_from_thread(b"SEND\nreceipt:t2\n\n\x00", taken)
    assert link.outstanding() == [taken] and counters.thread_sends == 1
    assert transport.thread_writes == [b"SEND\nreceipt:t2\n\n\x00"]


async def test_a_threads_ack_gives_the_message_its_mark_back_when_the_transport_refuses():
    transport, counters, protocol = DirectTransport(), Counters(), connected()
    link = make(transport, protocol, [], counters)
    link.direct = True
    message = delivered(protocol)
    transport.takes = False
    assert link.ack_from_thread(message) is None
    # unsettled again: the queued ACK that follows may take the mark
    assert message.settled is None and counters.thread_acks == 0
    transport.takes = True
    assert link.ack_from_thread(message) == b"ACK\nid:a1\n\n\x00" and counters.thread_acks == 1
    # a message of another session is not this link's to ack
    assert link.ack_from_thread(delivered(connected())) is None


async def test_a_thread_may_write_only_to_an_idle_live_direct_link():
    link = make(DirectTransport(), connected(), [])
    assert not link.may_write_from_thread()  # not a transport threads may write to
    link.direct = True
    assert link.may_write_from_thread()
    link.queue(b"frame")
    assert not link.may_write_from_thread()  # the loop's frame is first
    link.outbox.drop()
    link.transport.direct_ok = False  # e.g. the socket could not be duplicated: no thread writes from then on
    assert not link.may_write_from_thread() and not link.threads_may_write()
    link.transport.direct_ok = True
    link.close(ConnectionLostError("gone"))
    assert not link.may_write_from_thread()


@pytest.mark.anyio
async def test_an_error_answering_connect_wins_over_the_connect_timeout() -> None:
    # The broker answers CONNECT with ERROR in time, then leaves the connection open: reading the
    # ERRORs that may follow runs into the connect deadline. The answer is the ERROR, not a timeout
    # (seen on a loaded machine with a storm of ERRORs and the pure-Python scanner).
    import anyio

    from stompfast import AsyncClient
    from stompfast.errors import AuthenticationError

    async def broker(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await stream.receive()
            await stream.send(b"ERROR\nmessage:go away\n\n\x00")
            # The client closes its end once it has the ERROR; the broker reads until then.
            with anyio.move_on_after(5):
                try:
                    while await stream.receive():
                        pass
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    pass

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, broker)
        client = AsyncClient(f"stomp://127.0.0.1:{port}/", connect_timeout=0.2, reconnect=False, heart_beat=(0, 0))
        with pytest.raises(AuthenticationError, match="go away"):
            await client.connect()
        tg.cancel_scope.cancel()
