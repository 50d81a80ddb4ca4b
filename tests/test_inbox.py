"""The inbox on its own: a protocol fed scripted bytes, no client, no socket (asyncio, uvloop and trio).

:class:`stompfast._inbox.Inbox` is one connection's reading side: scan, dispatch to the
subscriptions' inlets and to receipt waiters, flow control, liveness. Here it is built
around a connected :class:`~stompfast._protocol.StompProtocol` and, for the pull reader, a
:class:`ScriptedTransport` whose reads the test hands out one by one.
"""

from __future__ import annotations

import math
from typing import Any, List

import anyio
import pytest
from helpers import TIMER_SLACK

import stompfast._inbox
from stompfast._events import ErrorReceived
from stompfast._inbox import Inbox
from stompfast._protocol import StompProtocol
from stompfast._receipt import PendingReceipt
from stompfast._stats import RttHistogram
from stompfast._subscription import Inlet
from stompfast.errors import (
    ClientClosedError,
    ConnectionLostError,
    FlowControlError,
    HeartbeatTimeout,
    RemoteProtocolError,
    ServerError,
)

pytestmark = pytest.mark.anyio

WAIT = 5


def connected() -> StompProtocol:
    protocol = StompProtocol(host="/", heart_beat=(0, 0))
    protocol.connect()
    protocol.receive_data(b"CONNECTED\nversion:1.2\n\n\x00")
    return protocol


def message(i: int, sub: str = "0") -> bytes:
    return b"MESSAGE\nsubscription:%s\nmessage-id:%d\ndestination:/queue/a\n\nm%d\x00" % (sub.encode(), i, i)


class ScriptedTransport:
    """A pull transport whose reads the test feeds (``b""``: the broker closed)."""

    def __init__(self) -> None:
        self.send_chunk, self.chunks = anyio.create_memory_object_stream[bytes](10)
        self.closed = False
        self.peer = "scripted"

    async def receive(self, max_bytes: int = 0) -> bytes:
        return await self.chunks.receive()

    async def send(self, data: bytes) -> None:
        raise AssertionError("the inbox never writes")

    def try_write(self, data: bytes) -> bool:
        return False

    async def aclose(self) -> None:
        self.closed = True


class Harness:
    """An inbox with recording collaborators."""

    def __init__(self, transport: Any = None, *, stall_timeout: float = 60.0, buffer_size: int = 10,
                 ack: str = "auto") -> None:
        self.failures: List[BaseException] = []
        self.failed_receipts: List[BaseException] = []
        self.protocol = connected()
        self.owner = object()
        self.inlet = Inlet(self.owner, "/queue/a", ack, None, buffer_size, False, "0")
        self.receipts: dict = {}
        self.inbox = Inbox(
            transport if transport is not None else ScriptedTransport(),
            self.protocol,
            subs={"0": self.inlet},
            take_receipt=self.take_receipt,
            rtt=RttHistogram(),
            peer="broker:61613",
            clock=anyio.current_time,
            stall_timeout=stall_timeout,
            heartbeat_tolerance=2,
            on_failure=self.failures.append,
            fail_receipts=self.failed_receipts.append,
        )

    def take_receipt(self, receipt_id: Any) -> Any:
        return self.receipts.pop(receipt_id, None) if receipt_id is not None else None

    def receipt(self, receipt_id: str) -> PendingReceipt:
        receipt = self.receipts[receipt_id] = PendingReceipt(receipt_id)
        return receipt


async def test_a_read_is_dispatched_to_its_inlet_in_order_and_resolves_its_receipts():
    h = Harness()
    receipt = h.receipt("r1")
    data = b"".join(message(i) for i in range(3)) + b"RECEIPT\nreceipt-id:r1\n\n\x00"
    assert h.inbox.dispatch_now(h.protocol.receive_data(data)) is None  # nothing full
    assert [m.body for m in h.inlet.messages] == [b"m0", b"m1", b"m2"]
    assert [m.seq for m in h.inlet.messages] == [1, 2, 3] and all(m.owner is h.owner for m in h.inlet.messages)
    assert h.inlet.ready.is_set()
    assert receipt.done() and receipt.error is None and not h.receipts
    assert h.inbox.frames_in == 4 and h.inbox.receipts_ok == 1 and h.inbox.rtt.count == 1
    assert h.failures == []


async def test_messages_for_unknown_subscriptions_are_counted_as_gone():
    h = Harness()
    h.inbox.dispatch_now(h.protocol.receive_data(message(1, "9") + message(2, "9")))
    assert h.inbox.received_gone == 2 and not h.inlet.messages


async def test_a_full_inlet_is_returned_and_its_first_message_confirms_its_subscribe():
    h = Harness(buffer_size=2)
    subscribed = h.receipt("sub-0")
    h.inlet.confirming = "sub-0"
    full = h.inbox.dispatch_now(h.protocol.receive_data(message(1) + message(2)))
    assert full == [h.inlet]
    assert subscribed.done() and subscribed.error is None and h.inlet.confirming is None


async def test_an_error_that_keeps_the_session_fails_only_its_receipt_and_one_that_ends_it_fails_the_link():
    h = Harness()
    kept, other = h.receipt("r1"), h.receipt("r2")
    error = ServerError("refused", receipt_id="r1")
    h.inbox.dispatch_now([ErrorReceived(error, ends_session=False)])  # (which ERRORs these are: _brokers.py)
    assert kept.done() and kept.error is error and not other.done() and h.failures == []
    assert h.inbox.errors == 1 and h.inbox.receipts_failed == 1

    # an ending ERROR fails the link once the broker's later ERRORs are read (the reader's part, below)
    h.inbox.dispatch_now(h.protocol.receive_data(b"ERROR\nmessage:bye\n\n\x00"))
    assert h.failures == [] and h.inbox.ending and h.inbox.errors == 2
    h.inbox.close()
    assert h.failures == []


@pytest.mark.parametrize("then", [b"", None], ids=["broker-closes", "broker-stays"])
async def test_the_pull_reader_fails_an_ending_error_with_the_errors_the_broker_sends_after_it(then, monkeypatch):
    # RabbitMQ 4.x: "Processing error" first, the reason in a second ERROR, then it closes.
    # The grace is far longer than the test may take when the close must end the wait,
    # and short when the broker stays open, so that only the behaviour decides.
    monkeypatch.setattr(stompfast._inbox, "ERROR_GRACE", 60 if then is not None else 0.2)
    transport = ScriptedTransport()
    h = Harness(transport)
    started = anyio.current_time()
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.inbox.reader, [])
        await transport.send_chunk.send(b"ERROR\nmessage:Processing error\n\n\x00")
        await anyio.sleep(0.05)
        assert h.failures == [] and h.inbox.ending
        await transport.send_chunk.send(b"ERROR\nmessage:the reason\n\n\x00")
        if then is not None:
            await transport.send_chunk.send(then)
    (error,) = h.failures
    assert type(error) is ServerError and str(error) == "Processing error; then ERROR: the reason"
    assert [str(e) for e in error.errors] == ["Processing error", "the reason"]
    # the close ends the wait; a broker that stays open is waited for ERROR_GRACE
    elapsed = anyio.current_time() - started
    assert elapsed < WAIT if then is not None else 0.2 - TIMER_SLACK <= elapsed < WAIT


async def test_the_pull_reader_dispatches_reads_and_reports_the_broker_closing():
    transport = ScriptedTransport()
    h = Harness(transport)
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.inbox.reader, [])
        await transport.send_chunk.send(message(1))
        await transport.send_chunk.send(message(2))
        with anyio.fail_after(WAIT):
            while len(h.inlet.messages) < 2:
                await anyio.sleep(0.001)
        assert h.inbox.bytes_in == len(message(1)) + len(message(2))
        await transport.send_chunk.send(b"")
    assert len(h.failures) == 1 and isinstance(h.failures[0], ConnectionLostError)
    assert "broker:61613 closed the connection" in str(h.failures[0])
    assert not transport.closed  # not released: whoever reconnects closes it


async def test_an_eof_after_the_inbox_was_closed_is_no_news_and_a_released_socket_is_freed():
    transport = ScriptedTransport()
    h = Harness(transport)
    h.inbox.close(release=True)  # the client failed for good meanwhile
    await transport.send_chunk.send(b"")
    with anyio.fail_after(WAIT):
        await h.inbox.reader([])
    assert h.failures == [] and transport.closed


async def test_an_eof_during_our_close_ends_the_waits_as_a_close():
    transport = ScriptedTransport()
    h = Harness(transport)
    h.inbox.closing = True
    await transport.send_chunk.send(b"")
    with anyio.fail_after(WAIT):
        await h.inbox.reader([])
    assert len(h.failures) == 1 and isinstance(h.failures[0], ClientClosedError)


async def test_a_framing_fault_is_reported_after_the_events_before_it():
    transport = ScriptedTransport()
    h = Harness(transport)
    await transport.send_chunk.send(message(1) + b"NOT A COMMAND\n\n\x00")
    with anyio.fail_after(WAIT):
        await h.inbox.reader([])
    assert [m.body for m in h.inlet.messages] == [b"m1"]
    assert len(h.failures) == 1 and isinstance(h.failures[0], RemoteProtocolError)


async def test_a_full_inlet_stops_the_pull_reader_and_a_stall_fails_the_receipts():
    transport = ScriptedTransport()
    h = Harness(transport, stall_timeout=0.05, buffer_size=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.inbox.reader, [])
        await transport.send_chunk.send(message(1))
        with anyio.fail_after(WAIT):
            while not h.failed_receipts:
                await anyio.sleep(0.005)
        assert h.inbox.paused_on is h.inlet and h.inbox.stalled
        assert isinstance(h.failed_receipts[0], FlowControlError)
        await transport.send_chunk.send(message(2))  # not read while the inlet is full
        await anyio.sleep(0.02)
        assert len(h.inlet.messages) == 1
        h.inlet.messages.popleft()  # the consumer takes it: room
        h.inlet.space.set()
        with anyio.fail_after(WAIT):
            while len(h.inlet.messages) < 1 or h.inlet.messages[0].body != b"m2":
                await anyio.sleep(0.005)
        assert h.inbox.paused_on is h.inlet  # (full again with m2)
        tg.cancel_scope.cancel()


async def test_the_liveness_watch_fails_the_link_after_the_tolerated_silence_only():
    h = Harness()
    with anyio.fail_after(WAIT):
        await h.inbox.liveness(0.05)  # tolerance 2: 0.1 s of silence
    assert len(h.failures) == 1 and isinstance(h.failures[0], HeartbeatTimeout)
    assert "broker:61613" in str(h.failures[0])

    h = Harness()
    h.inbox.paused_on = h.inlet  # not reading: silence proves nothing
    with anyio.move_on_after(0.3):
        await h.inbox.liveness(0.05)
    assert h.failures == []


def test_an_inbox_never_connected_is_closed():
    inbox = Inbox(None, StompProtocol(host="/"), subs={}, take_receipt=lambda receipt_id: None, rtt=RttHistogram())
    assert inbox.closed and not inbox.push and inbox.last_received == 0.0
    inbox.on_data(b"MESSAGE\n\n\x00")  # closed: nothing is scanned
    assert inbox.bytes_in == 0 and not math.isnan(inbox.last_received)
    assert isinstance(inbox.stall_error(Inlet(object(), "/q", "auto", None, 3, False, "7")), FlowControlError)

