"""The inbox: one connection's incoming frames: scan, dispatch, flow control, liveness.

Bytes read from the socket go one way: the protocol scans them into events,
:meth:`Inbox.dispatch_now` hands one read's messages to their subscriptions'
inlets (each consumer woken once) and receipts to their waiters. When an inlet
is full the reader stops (pull mode: the reader task waits for room; push mode,
asyncio: the transport is paused until the consumer takes a message), and a
receipt awaited while the reader has been stopped for ``stall_timeout`` fails
with FlowControlError instead of hanging. The liveness watch declares the
connection dead when nothing arrived for the broker's heart-beat interval times
the tolerance while the reader was reading.

An :class:`Inbox` belongs to one connection: the link builds it with that
connection's transport, protocol and receipt registry, and the client's
subscriptions (the inlets outlive connections; the dict is the client's). The
choice between the pull reader (a task calling ``transport.receive``:
:meth:`Inbox.reader`) and the push reader (``data_received`` callbacks:
:meth:`Inbox.start_push`) is made once, from the transport (``push``). When the
connection ends the client closes it (:meth:`Inbox.close`), so its reader never
asks whether the transport is still the current one. What it counts (frames
and bytes in, receipts, ERRORs) it counts on itself; the client adds that to
its totals when the connection is replaced (:mod:`._stats`).
"""

from __future__ import annotations

from logging import DEBUG
from time import monotonic
from typing import Any, Callable, Dict, List, Optional

import anyio

from ._common import conn_log, describe_error
from ._framelog import frame_log
from ._protocol import ErrorReceived, Message, ReceiptReceived, SessionState, StompProtocol
from ._receipt import PendingReceipt
from ._stats import RttHistogram
from ._subscription import Inlet
from ._transport import READ_SIZE, AsyncioTransport, StompTransport
from .errors import (
    ClientClosedError,
    ConnectionLostError,
    FlowControlError,
    HeartbeatTimeout,
    RemoteProtocolError,
    ServerError,
)

__all__ = ["ERROR_GRACE", "Inbox", "read_later_errors"]

#: Seconds the client reads on after an ERROR that ends the session, for the ERRORs a
#: broker sends after it (RabbitMQ 4.x puts the reason in a second frame); the wait
#: ends at once when the broker closes the connection, as STOMP says it must.
ERROR_GRACE = 0.5


async def read_later_errors(transport: StompTransport, protocol: StompProtocol) -> None:
    """After an ERROR that ended the session: feed ``protocol`` until the broker closes, at most ERROR_GRACE s.

    The protocol folds each later ERROR into its ``ending_error``; a read that
    fails ends the wait as an EOF does (the ERROR is what ended the connection).
    """
    with anyio.move_on_after(ERROR_GRACE):
        while protocol.reading_errors:
            try:
                data = await transport.receive(READ_SIZE)
            except ConnectionLostError:
                return
            if not data:
                return
            protocol.receive_data(data)


def _no_clock() -> float:
    return 0.0


def _no_log(direction: str, data: bytes) -> None:
    return None


class Resume:
    """Stands in for an inlet's space event in push mode: ``set()`` resumes reading."""

    __slots__ = ("on_space",)

    def __init__(self, on_space: Callable[[], None]) -> None:
        self.on_space = on_space

    def set(self) -> None:
        self.on_space()


class Inbox:
    """One connection's incoming frames: the reader, dispatch to inlets and receipt waiters, flow control.

    Args:
        transport: where the bytes come from (None: an inbox that was never
            connected, the client's before its first connection; it is closed).
        protocol: the connection's session, which scans the bytes into events.
        subs: the client's subscriptions by id (read, never changed here).
        take_receipt: the connection's :meth:`ReceiptRegistry.take
            <stompfast._receipt.ReceiptRegistry.take>`: RECEIPTs and ERRORs naming a
            receipt take it from there to resolve it.
        rtt: the client's receipt round-trip histogram.
        peer: ``host:port``, for messages.
        clock: the event loop's clock.
        loop: the asyncio loop (push mode's stall timer), None elsewhere.
        stall_timeout: seconds the reader may be stopped by a full inlet before
            ``fail_receipts`` is called with a FlowControlError.
        heartbeat_tolerance: how many broker intervals of silence mean the connection is dead.
        on_failure: called with what ended the connection (EOF, a framing fault, an
            ERROR frame, a heart-beat timeout), unless the inbox was closed meanwhile.
        fail_receipts: called to fail every pending receipt (a stall).
        log_frames: called with ``("<", data)`` for every read while ``stompfast.frames`` is at DEBUG.
    """

    __slots__ = (
        "transport", "protocol", "subs", "take_receipt", "rtt", "peer", "clock", "loop", "stall_timeout",
        "heartbeat_tolerance", "on_failure", "fail_receipts", "log_frames", "push", "closed", "closing",
        "release", "paused_on", "stalled", "stall_handle", "last_received", "watching", "ending", "ending_handle",
        "frames_in", "bytes_in", "received_gone", "receipts_ok", "receipts_failed", "errors",
    )

    def __init__(
        self,
        transport: Optional[StompTransport],
        protocol: StompProtocol,
        *,
        subs: Dict[str, Inlet],
        take_receipt: Callable[[Optional[str]], Optional[PendingReceipt]],
        rtt: RttHistogram,
        peer: str = "",
        clock: Callable[[], float] = _no_clock,
        loop: Any = None,
        stall_timeout: float = 60.0,
        heartbeat_tolerance: float = 3.0,
        on_failure: Callable[[BaseException], Any] = lambda error: None,
        fail_receipts: Callable[[BaseException], Any] = lambda error: None,
        log_frames: Callable[[str, bytes], Any] = _no_log,
    ) -> None:
        self.transport = transport
        self.protocol = protocol
        self.subs = subs
        self.take_receipt = take_receipt
        self.rtt = rtt
        self.peer = peer
        self.clock = clock
        self.loop = loop
        self.stall_timeout = stall_timeout
        self.heartbeat_tolerance = heartbeat_tolerance
        self.on_failure = on_failure
        self.fail_receipts = fail_receipts
        self.log_frames = log_frames
        #: asyncio: frames are dispatched from data_received, no reader task (the one backend choice)
        self.push = isinstance(transport, AsyncioTransport)
        # The connection ended: read and dispatch nothing more
        self.closed = transport is None
        # Our close is under way: an EOF is its end, not a loss
        self.closing = False
        # (pull) the client failed for good: the reader frees the socket on its way out
        self.release = False
        # An ERROR ended the session and the broker's later ERRORs are being read (ERROR_GRACE)
        self.ending = False
        # (push) the timer that ends that reading
        self.ending_handle: Any = None
        # The full inlet the reader waits for
        self.paused_on: Optional[Inlet] = None
        # Stopped for stall_timeout: new receipts fail at once
        self.stalled = False
        self.stall_handle: Any = None
        self.last_received = clock()
        # A liveness watch runs (the broker beats): note when we last read. Known
        # from the session at once, before the watch's task first runs.
        self.watching = transport is not None and protocol.heart_beat[1] > 0
        # counted here, added to the client's totals when the connection is replaced
        self.frames_in = 0
        self.bytes_in = 0
        # Messages for subscriptions that are gone or unknown
        self.received_gone = 0
        self.receipts_ok = 0
        self.receipts_failed = 0
        self.errors = 0

    def expect_eof(self) -> None:
        """Our close is under way: an EOF from now on ends it, it is not a loss."""
        self.closing = True

    def close(self, *, release: bool = False) -> None:
        """The connection ended (or our close is done): dispatch nothing more; push mode: stop the stall timer.

        ``release``: the client failed for good, so nobody else will close the
        socket; a pull reader frees it on its way out.
        """
        self.closed = True
        self.release = self.release or release
        if self.ending_handle is not None:
            self.ending_handle.cancel()
            self.ending_handle = None
        if self.push:
            self._unpause()

    def abort(self) -> None:
        """Push mode: close the socket now (no reader task will; on trio the reader closes it on its way out)."""
        if self.push:
            self.transport.close_now()  # type: ignore[union-attr]  # (push: an AsyncioTransport)

    async def liveness(self, interval: float) -> None:
        """The liveness watch: ``on_failure(HeartbeatTimeout)`` after ``interval`` x tolerance of silence."""
        self.watching = True
        limit = interval * self.heartbeat_tolerance
        grace = min(0.05, interval / 10)
        clock = self.clock
        while True:
            now = clock()
            deadline = self.last_received + limit
            if now < deadline:
                await anyio.sleep(deadline - now)
                continue
            # An ERROR ended the session: its own failure is on its way
            if self.ending:
                return
            # We are not reading: silence proves nothing
            if self.paused_on is not None:
                self.last_received = now
                continue
            # The event loop may have been busy elsewhere: let a ready reader run first.
            await anyio.sleep(grace)
            if clock() - self.last_received > limit and self.paused_on is None:
                self.on_failure(
                    HeartbeatTimeout(
                        f"nothing received from {self.peer} for"
                        f" {clock() - self.last_received:.2f} s (heart-beat interval"
                        f" {interval:g} s, tolerance x{self.heartbeat_tolerance:g})"
                    )
                )
                return

    async def reader(self, leftover: List[Any]) -> None:
        """The pull reader task: read, scan, dispatch (``leftover``: the events that came with CONNECTED)."""
        transport = self.transport
        assert transport is not None
        protocol = self.protocol
        try:
            if leftover:
                await self._dispatch(leftover)
            while not self.ending:
                data = await transport.receive(READ_SIZE)
                if not data:
                    if self.closed:
                        # Another task (the writer, the heart-beat watch) took this connection down
                        # while the EOF was on its way to us: it is handled, and the
                        # protocol's CLOSED state is that loss, not our close.
                        return
                    if protocol.state is SessionState.CLOSED or self.closing:
                        # our close: a broker may end it without the DISCONNECT's RECEIPT
                        # (RabbitMQ's Web-STOMP closes the WebSocket): stop waiting for it
                        self.on_failure(ClientClosedError("the client is closed"))
                        return
                    cut = " in the middle of a frame" if protocol.buffered else ""
                    raise ConnectionLostError(f"{self.peer} closed the connection{cut}")
                if self.watching:
                    self.last_received = self.clock()
                if frame_log.isEnabledFor(DEBUG):
                    self.log_frames("<", data)
                self.bytes_in += len(data)
                try:
                    events = protocol.receive_data(data)
                except RemoteProtocolError as exc:
                    early = getattr(exc, "events", None)
                    if early:
                        await self._dispatch(early)
                    raise
                if events:
                    await self._dispatch(events)
            await read_later_errors(transport, protocol)
            self._error_read()
        except (ConnectionLostError, RemoteProtocolError) as exc:
            if not self.closed:
                # (without the traceback: its frames hold this connection's session)
                self.on_failure(exc.with_traceback(None))
        finally:
            protocol.connection_lost()
            # A dead connection: free the socket now
            if self.release:
                with anyio.CancelScope(shield=True):
                    await transport.aclose()

    def start_push(self, leftover: List[Any]) -> None:
        """Push mode (asyncio): dispatch ``leftover``, then have the transport call :meth:`on_data` per read."""
        transport = self.transport
        assert isinstance(transport, AsyncioTransport)
        full = self.dispatch_now(leftover) if leftover else None
        if full and not self.closed:
            self._pause_for(full[0])
        transport.start_push(self.on_data, self.on_eof)

    def dispatch_now(self, events: List[Any]) -> Optional[List[Inlet]]:
        """Hand one read's events to subscriptions and receipts; return the subscriptions now full."""
        self.frames_in += len(events)
        subs = self.subs
        touched: List[Inlet] = []
        last_id: Optional[str] = None
        last: Optional[Inlet] = None
        for event in events:
            # isinstance: as cheap as a type test for a Message itself (CPython checks the
            # exact type first), and it also takes an OversizedMessage and the blocking
            # client's SyncMessage, which the session makes for its subscriptions.
            if isinstance(event, Message):
                if event.subscription != last_id:
                    last_id = event.subscription
                    last = subs.get(last_id)
                    if last is not None and last not in touched:
                        touched.append(last)
                if last is not None:
                    last.deliver(event)
                else:
                    self.received_gone += 1
                # else: a message for a subscription we left; the broker redelivers
                # it in client modes, and in auto mode it was unwanted anyway
            elif type(event) is ReceiptReceived:
                receipt = self.take_receipt(event.receipt_id)
                if receipt is not None:
                    self.receipts_ok += 1
                    self.rtt.record(monotonic() - receipt.sent_at)
                    receipt.resolve()
            elif type(event) is ErrorReceived:
                self.errors += 1
                if not event.ends_session:
                    self._error_kept(event.error)
                    continue
                for sub in touched:
                    sub.ready.set()
                self._ended_by_error()
                return None
        full = None
        for sub in touched:
            sub.ready.set()
            if sub.confirming is not None:
                self._confirm_by_message(sub)
            if len(sub.messages) >= sub.pause_at and not sub.closed:
                if full is None:
                    full = [sub]
                else:
                    full.append(sub)
        return full

    def _ended_by_error(self) -> None:
        """An ERROR ended the session: fail now, or once the broker's later ERRORs are read (ERROR_GRACE)."""
        if not self.protocol.reading_errors or self.closed:
            self.on_failure(self.protocol.ending_error)  # type: ignore[arg-type]  # (an ERROR came)
            return
        self.ending = True
        if self.push:
            self.ending_handle = self.loop.call_later(ERROR_GRACE, self._error_read)
        # (pull: the reader reads on, read_later_errors)

    def _error_read(self) -> None:
        """The broker closed after its ERROR, or ERROR_GRACE passed: fail with every ERROR it sent."""
        if self.ending_handle is not None:
            self.ending_handle.cancel()
            self.ending_handle = None
        if self.ending and not self.closed:
            self.on_failure(self.protocol.ending_error)  # type: ignore[arg-type]  # (an ERROR came)
        self.ending = False

    def _error_kept(self, error: ServerError) -> None:
        """An ERROR after which the broker keeps the session: fail the receipt it names, else log it.

        Which ERRORs these are is the protocol's table (``ERRORS_THAT_KEEP_THE_SESSION``,
        docs/errors.md). The connection, the subscriptions and every other pending
        receipt go on untouched.
        """
        receipt = self.take_receipt(error.receipt_id)
        if receipt is not None:
            self.receipts_failed += 1
            receipt.reject(error)
            conn_log.info("%s refused a frame and kept the session: %s", self.peer, error)
        else:
            conn_log.info("%s sent ERROR and kept the session: %s", self.peer, error)

    def _confirm_by_message(self, sub: Inlet) -> None:
        """A subscription whose SUBSCRIBE awaits its RECEIPT got a MESSAGE: that confirms it too.

        A broker delivers on a subscription only once it has registered it, so the
        first MESSAGE is as good a confirmation as the RECEIPT. It must count as
        one: a broker that delivers before it confirms (in ``auto`` mode there is
        no prefetch to hold it back) can fill the buffer and stop the reader with
        the RECEIPT still unread behind the messages, and nothing would drain the
        buffer, since the subscriber gets the subscription only once it is
        confirmed. Called once per read per subscription, not per message. The
        RECEIPT, when it comes, finds no waiter and is ignored.
        """
        receipt_id = sub.confirming
        sub.confirming = None
        receipt = self.take_receipt(receipt_id)
        if receipt is not None:
            self.receipts_ok += 1
            self.rtt.record(monotonic() - receipt.sent_at)
            receipt.resolve()

    async def _dispatch(self, events: List[Any]) -> None:
        full = self.dispatch_now(events)
        if full:
            for sub in full:
                if len(sub.messages) >= sub.pause_at and not sub.closed:
                    await self._wait_for_space(sub)

    def on_data(self, data: bytes) -> None:
        """(Push mode: the transport's data_received.) Scan and dispatch one read."""
        if self.closed:
            return
        if self.watching:
            self.last_received = self.clock()
        if frame_log.isEnabledFor(DEBUG):
            self.log_frames("<", data)
        self.bytes_in += len(data)
        try:
            try:
                events = self.protocol.receive_data(data)
            except RemoteProtocolError as exc:
                early = getattr(exc, "events", None)
                if early:
                    self.dispatch_now(early)
                # Its frames would keep the failed session alive
                self.on_failure(exc.with_traceback(None))
                return
            if self.ending:
                # The broker's last words after its ERROR (folded by the protocol)
                if not self.protocol.reading_errors:
                    self._error_read()
                return
            if events:
                full = self.dispatch_now(events)
                if full and not self.closed:
                    self._pause_for(full[0])
        # A bug must reach the waiters, not asyncio's logger
        except Exception as exc:
            self.on_failure(exc)

    def on_eof(self, error: Optional[BaseException]) -> None:
        """(Push mode: the transport's connection_lost.) The connection ended: why, unless it was ours."""
        protocol = self.protocol
        try:
            if self.ending:
                # The broker closed after its ERROR, as STOMP says it must
                self._error_read()
            elif not self.closed and (protocol.state is SessionState.CLOSED or self.closing):
                # our close: a broker may end it without the DISCONNECT's RECEIPT (RabbitMQ's
                # Web-STOMP closes the WebSocket); stop waiting for it (the client only ends the waits)
                self.on_failure(ClientClosedError("the client is closed"))
            elif not self.closed:
                if error is not None:
                    lost = ConnectionLostError(f"connection to {self.peer} lost while reading: {describe_error(error)}")
                    # As `raise ... from` does on the pull path
                    lost.__cause__ = error
                    self.on_failure(lost)
                else:
                    cut = " in the middle of a frame" if protocol.buffered else ""
                    self.on_failure(ConnectionLostError(f"{self.peer} closed the connection{cut}"))
        finally:
            protocol.connection_lost()

    def _pause_for(self, sub: Inlet) -> None:
        """Stop reading until ``sub`` has room (push-mode twin of :meth:`_wait_for_space`)."""
        self.paused_on = sub
        self.transport.pause_reading()  # type: ignore[union-attr]  # (push: an AsyncioTransport)
        sub.space = Resume(self._on_space)
        if len(sub.messages) < sub.pause_at:
            # a thread consuming it (the blocking client) took messages before
            # space was there for it to see: there is room already
            sub.space = None
            self._on_space()
            return
        if self.stall_handle is None:
            self.stall_handle = self.loop.call_later(self.stall_timeout, self._on_stall)

    def _on_stall(self) -> None:
        self.stall_handle = None
        sub = self.paused_on
        if sub is not None and not self.closed:
            # Stopped for stall_timeout: receipts cannot arrive until this buffer drains.
            self.stalled = True
            self.fail_receipts(self.stall_error(sub))

    def _unpause(self) -> None:
        if self.stall_handle is not None:
            self.stall_handle.cancel()
            self.stall_handle = None
        self.paused_on = None
        self.stalled = False

    def _on_space(self) -> None:
        """A paused-on subscription has room (or closed): read again unless another is full."""
        if self.paused_on is None:
            return
        self._unpause()
        if self.closed:
            return
        self.last_received = self.clock()
        for sub in self.subs.values():
            if len(sub.messages) >= sub.pause_at and not sub.closed:
                self._pause_for(sub)
                return
        self.transport.resume_reading()  # type: ignore[union-attr]  # (push: an AsyncioTransport)

    async def _wait_for_space(self, sub: Inlet) -> None:
        self.paused_on = sub
        try:
            while True:
                # space first, then the length: a thread that takes messages (the
                # blocking client) either sees the event or left room we see here
                space = sub.space = anyio.Event()
                if not (len(sub.messages) >= sub.pause_at and not sub.closed and not self.closed):
                    sub.space = None
                    break
                with anyio.move_on_after(self.stall_timeout):
                    await space.wait()
                    continue
                # Stopped for stall_timeout: receipts cannot arrive until this buffer drains.
                self.stalled = True
                self.fail_receipts(self.stall_error(sub))
                await space.wait()
        finally:
            self.paused_on = None
            self.stalled = False
            self.last_received = self.clock()

    def stall_error(self, sub: Inlet) -> FlowControlError:
        """The error of a receipt that cannot arrive while ``sub``'s full buffer stops the reader."""
        return FlowControlError(
            f"the reader has been stopped for {self.stall_timeout:g} s by subscription {sub.id!r} to"
            f" {sub.destination!r}, whose buffer of {sub.buffer_size} messages is full and unread: no"
            " receipt can arrive until it is drained (consume it, raise buffer_size, or use client"
            " acks, which limit the broker's prefetch to the buffer)",
            subscription=sub.id,
            destination=sub.destination,
        )
