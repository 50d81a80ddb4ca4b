"""The inbox part of :class:`~stompfast.AsyncClient`: scan, dispatch, flow control, liveness.

Bytes read from the socket go one way: the protocol scans them into events,
``_dispatch_now`` hands one read's messages to their subscriptions' inlets
(each consumer woken once) and receipts to their waiters. When an inlet is
full the reader stops (pull mode: the reader task waits for room; push mode,
asyncio: the transport is paused until the consumer takes a message), and a
receipt awaited while the reader has been stopped for ``stall_timeout`` fails
with FlowControlError instead of hanging. The liveness watch declares the link
dead when nothing arrived for the broker's heart-beat interval times the
tolerance while the reader was reading.

The choice between the pull reader (a task calling ``transport.receive``) and
the push reader (``data_received`` callbacks) is made once per connection in
``_start_reading``. A mixin of the client, like :mod:`._outbox` (see
docs/architecture.md).
"""

from __future__ import annotations

from logging import DEBUG
from time import monotonic
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

import anyio

from ._common import conn_log
from ._framelog import frame_log
from ._lifecycle import CLOSING, ClientState
from ._protocol import ErrorReceived, Message, OversizedMessage, ReceiptReceived, SessionState, StompProtocol
from ._receipt import PendingReceipt
from ._stats import Counters
from ._subscription import Inlet
from ._transport import READ_SIZE, AsyncioTransport, PushTransport, StompTransport, describe_error
from .errors import (
    ClientClosedError,
    ConnectionLostError,
    FlowControlError,
    HeartbeatTimeout,
    RemoteProtocolError,
    ServerError,
)

__all__ = ["Inbox"]


class Resume:
    """Stands in for an inlet's space event in push mode: ``set()`` resumes reading."""

    __slots__ = ("on_space",)

    def __init__(self, on_space: Callable[[], None]) -> None:
        self.on_space = on_space

    def set(self) -> None:
        self.on_space()


class Inbox(Counters):
    """Incoming frames: the reader, dispatch to inlets and receipt waiters, flow control (a part of AsyncClient)."""

    # owns (the receipt registry: registered here, reset per connection by the link, written by
    # send_from_thread under the registry lock)
    _receipts: Dict[str, PendingReceipt]
    _paused_on: Optional[Inlet]
    _stalled: bool
    _stall_handle: Any
    _last_received: float
    _watching: bool
    _push: bool
    _push_transport: Optional[PushTransport]
    # reads
    _subs: Dict[str, Inlet]
    _transport: Optional[StompTransport]
    _protocol: StompProtocol
    _error: Optional[BaseException]
    _state: ClientState
    _link_alive: bool
    _loop: Any
    _clock: Callable[[], float]
    _registry_lock: Any
    _stall_timeout: float
    _heartbeat_tolerance: float
    endpoint: Any

    if TYPE_CHECKING:  # provided by the client's other parts

        def _log_frames(self, direction: str, data: bytes) -> None:
            raise NotImplementedError

        def _fail(self, error: BaseException) -> None:
            raise NotImplementedError

        def _background(self, coro: Any, name: str) -> None:
            raise NotImplementedError

    def _drop_inbox(self) -> int:
        """The link is lost: not paused any more; client-ack buffers dropped (the broker redelivers them,
        and acking them on a new session would be wrong); return how many messages that was."""
        self._paused_on = None
        self._stalled = False
        dropped = 0
        for sub in self._subs.values():
            if sub.ack_mode != "auto" and sub.messages:
                dropped += len(sub.messages)
                sub.messages.clear()
            sub.space = None
        return dropped

    def _attach_inbox(self, watch_ms: int, leftover: List[Any]) -> None:
        """A new connection: not paused, not stalled; the reader (push or pull) and the liveness watch."""
        self._paused_on = None
        self._stalled = False
        self._stall_handle = None
        self._push = False
        self._push_transport = None
        self._last_received = anyio.current_time()
        self._watching = bool(watch_ms)
        if watch_ms:  # (before the reader: leftover bytes may end the link at once, and its scopes with it)
            self._background(self._liveness(watch_ms / 1000.0), "stompfast-liveness")
        self._start_reading(leftover)

    async def _liveness(self, interval: float) -> None:
        limit = interval * self._heartbeat_tolerance
        grace = min(0.05, interval / 10)
        while True:
            now = anyio.current_time()
            deadline = self._last_received + limit
            if now < deadline:
                await anyio.sleep(deadline - now)
                continue
            if self._paused_on is not None:  # we are not reading: silence proves nothing
                self._last_received = now
                continue
            # The event loop may have been busy elsewhere: let a ready reader run first.
            await anyio.sleep(grace)
            if anyio.current_time() - self._last_received > limit and self._paused_on is None:
                self._fail(
                    HeartbeatTimeout(
                        f"nothing received from {self.endpoint.host}:{self.endpoint.port} for"
                        f" {anyio.current_time() - self._last_received:.2f} s (heart-beat interval"
                        f" {interval:g} s, tolerance x{self._heartbeat_tolerance:g})"
                    )
                )
                return

    async def _reader(self, leftover: List[Any]) -> None:
        transport = self._transport
        assert transport is not None
        protocol = self._protocol
        try:
            if leftover:
                await self._dispatch(leftover)
            while True:
                data = await transport.receive(READ_SIZE)
                if not data:
                    if self._transport is not transport or not self._link_alive:
                        # Another task (the writer, the heart-beat watch) took this link down
                        # while the EOF was on its way to us: it is handled, and the
                        # protocol's CLOSED state is that loss, not our close.
                        return
                    if protocol.state is SessionState.CLOSED or self._state is CLOSING:
                        # our close: a broker may end it without the DISCONNECT's RECEIPT
                        # (RabbitMQ's Web-STOMP closes the WebSocket): stop waiting for it
                        self._fail(ClientClosedError("the client is closed"))
                        return
                    cut = " in the middle of a frame" if protocol.buffered else ""
                    raise ConnectionLostError(
                        f"{self.endpoint.host}:{self.endpoint.port} closed the connection{cut}"
                    )
                if self._watching:
                    self._last_received = anyio.current_time()
                if frame_log.isEnabledFor(DEBUG):
                    self._log_frames("<", data)
                self._n_bytes_in += len(data)
                try:
                    events = protocol.receive_data(data)
                except RemoteProtocolError as exc:
                    early = getattr(exc, "events", None)
                    if early:
                        await self._dispatch(early)
                    raise
                if events:
                    await self._dispatch(events)
        except (ConnectionLostError, RemoteProtocolError) as exc:
            if self._transport is transport:
                # (without the traceback: its frames hold this connection's session)
                self._fail(exc.with_traceback(None))
        finally:
            protocol.connection_lost()
            if self._error is not None:  # a dead connection: free the socket now
                with anyio.CancelScope(shield=True):
                    await transport.aclose()

    def _start_reading(self, leftover: List[Any]) -> None:
        transport = self._transport
        if isinstance(transport, AsyncioTransport):  # the one backend choice, made per connection
            self._push = True
            self._push_transport = transport
            full = self._dispatch_now(leftover) if leftover else None
            if full and self._error is None:
                self._pause_for(full[0])
            transport.start_push(self._on_data, self._on_eof)
        else:
            self._background(self._reader(leftover), "stompfast-reader")

    def _dispatch_now(self, events: List[Any]) -> Optional[List[Inlet]]:
        """Hand one read's events to subscriptions and receipts; return the subscriptions now full."""
        self._n_frames_in += len(events)
        subs = self._subs
        touched: List[Inlet] = []
        last_id: Optional[str] = None
        last: Optional[Inlet] = None
        for event in events:
            if type(event) is Message:
                if event.subscription != last_id:
                    last_id = event.subscription
                    last = subs.get(last_id)
                    if last is not None and last not in touched:
                        touched.append(last)
                if last is not None:
                    last.deliver(event)
                else:
                    self._n_received_gone += 1
                # else: a message for a subscription we left; the broker redelivers
                # it in client modes, and in auto mode it was unwanted anyway
            elif type(event) is ReceiptReceived:
                receipt = self._receipts.pop(event.receipt_id, None)
                if receipt is not None:
                    self._n_receipts_ok += 1
                    self._rtt.record(monotonic() - receipt.sent_at)
                    receipt.resolve()
            elif type(event) is ErrorReceived:
                self._n_errors += 1
                if not event.ends_session:
                    self._error_kept(event.error)
                    continue
                for sub in touched:
                    sub.ready.set()
                self._fail(event.error)
                return None
            elif type(event) is OversizedMessage:
                # Last in the chain, so the per-message path pays nothing for it:
                # a message skipped unread goes to its subscription like any other.
                inlet = subs.get(event.subscription)
                if inlet is not None:
                    if inlet not in touched:
                        touched.append(inlet)
                    inlet.deliver(event)
                else:
                    self._n_received_gone += 1
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

    def _error_kept(self, error: ServerError) -> None:
        """An ERROR after which the broker keeps the session: fail the receipt it names, else log it.

        Which ERRORs these are is the protocol's table (``ERRORS_THAT_KEEP_THE_SESSION``,
        docs/errors.md). The connection, the subscriptions and every other pending
        receipt go on untouched.
        """
        peer = f"{self.endpoint.host}:{self.endpoint.port}"
        receipt = self._receipts.pop(error.receipt_id, None) if error.receipt_id is not None else None
        if receipt is not None:
            self._n_receipts_failed += 1
            receipt.reject(error)
            conn_log.info("%s refused a frame and kept the session: %s", peer, error)
        else:
            conn_log.info("%s sent ERROR and kept the session: %s", peer, error)

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
        receipt = self._receipts.pop(receipt_id, None) if receipt_id is not None else None
        if receipt is not None:
            self._n_receipts_ok += 1
            self._rtt.record(monotonic() - receipt.sent_at)
            receipt.resolve()

    async def _dispatch(self, events: List[Any]) -> None:
        full = self._dispatch_now(events)
        if full:
            for sub in full:
                if len(sub.messages) >= sub.pause_at and not sub.closed:
                    await self._wait_for_space(sub)

    def _on_data(self, data: bytes) -> None:
        if self._error is not None:
            return
        if self._watching:
            self._last_received = self._loop.time()
        if frame_log.isEnabledFor(DEBUG):
            self._log_frames("<", data)
        self._n_bytes_in += len(data)
        try:
            try:
                events = self._protocol.receive_data(data)
            except RemoteProtocolError as exc:
                early = getattr(exc, "events", None)
                if early:
                    self._dispatch_now(early)
                self._fail(exc.with_traceback(None))  # its frames would keep the failed session alive
                return
            if events:
                full = self._dispatch_now(events)
                if full and self._error is None:
                    self._pause_for(full[0])
        except Exception as exc:  # a bug must reach the waiters, not asyncio's logger
            self._fail(exc)

    def _on_eof(self, error: Optional[BaseException]) -> None:
        protocol = self._protocol
        try:
            if self._error is None and (protocol.state is SessionState.CLOSED or self._state is CLOSING):
                # our close: a broker may end it without the DISCONNECT's RECEIPT (RabbitMQ's
                # Web-STOMP closes the WebSocket); stop waiting for it (_fail only ends the waits)
                self._fail(ClientClosedError("the client is closed"))
            elif self._error is None:
                peer = f"{self.endpoint.host}:{self.endpoint.port}"
                if error is not None:
                    lost = ConnectionLostError(f"connection to {peer} lost while reading: {describe_error(error)}")
                    lost.__cause__ = error  # as `raise ... from` does on the pull path
                    self._fail(lost)
                else:
                    cut = " in the middle of a frame" if protocol.buffered else ""
                    self._fail(ConnectionLostError(f"{peer} closed the connection{cut}"))
        finally:
            protocol.connection_lost()

    def _pause_for(self, sub: Inlet) -> None:
        """Stop reading until ``sub`` has room (push-mode twin of :meth:`_wait_for_space`)."""
        self._paused_on = sub
        self._push_transport.pause_reading()  # type: ignore[union-attr]
        sub.space = Resume(self._on_space)
        if len(sub.messages) < sub.pause_at:
            # a thread consuming it (the blocking client) took messages before
            # _space was there for it to see: there is room already
            sub.space = None
            self._on_space()
            return
        if self._stall_handle is None:
            self._stall_handle = self._loop.call_later(self._stall_timeout, self._on_stall)

    def _on_stall(self) -> None:
        self._stall_handle = None
        sub = self._paused_on
        if sub is not None and self._error is None:
            # Stopped for stall_timeout: receipts cannot arrive until this buffer drains.
            self._stalled = True
            self._fail_receipts_for_stall(sub)

    def _unpause(self) -> None:
        if self._stall_handle is not None:
            self._stall_handle.cancel()
            self._stall_handle = None
        self._paused_on = None
        self._stalled = False

    def _on_space(self) -> None:
        """A paused-on subscription has room (or closed): read again unless another is full."""
        if self._paused_on is None:
            return
        self._unpause()
        if self._error is not None:
            return
        self._last_received = self._loop.time()
        for sub in self._subs.values():
            if len(sub.messages) >= sub.pause_at and not sub.closed:
                self._pause_for(sub)
                return
        self._push_transport.resume_reading()  # type: ignore[union-attr]

    async def _wait_for_space(self, sub: Inlet) -> None:
        self._paused_on = sub
        try:
            while True:
                # space first, then the length: a thread that takes messages (the
                # blocking client) either sees the event or left room we see here
                space = sub.space = anyio.Event()
                if not (len(sub.messages) >= sub.pause_at and not sub.closed and self._error is None):
                    sub.space = None
                    break
                with anyio.move_on_after(self._stall_timeout):
                    await space.wait()
                    continue
                # Stopped for stall_timeout: receipts cannot arrive until this buffer drains.
                self._stalled = True
                self._fail_receipts_for_stall(sub)
                await space.wait()
        finally:
            self._paused_on = None
            self._stalled = False
            self._last_received = anyio.current_time()

    def _stall_error(self, sub: Inlet) -> FlowControlError:
        return FlowControlError(
            f"the reader has been stopped for {self._stall_timeout:g} s by subscription {sub.id!r} to"
            f" {sub.destination!r}, whose buffer of {sub.buffer_size} messages is full and unread: no"
            " receipt can arrive until it is drained (consume it, raise buffer_size, or use client"
            " acks, which limit the broker's prefetch to the buffer)",
            subscription=sub.id,
            destination=sub.destination,
        )

    def _fail_receipts_for_stall(self, sub: Inlet) -> None:
        self._fail_receipts(self._stall_error(sub))

    def _fail_receipts(self, error: BaseException) -> None:
        """Fail every pending receipt with ``error`` and forget them.

        Under the registry lock: the blocking client registers receipts from its
        own threads (:meth:`send_from_thread`), which must not land between the
        snapshot and the clear, nor change the dict while it is iterated.
        """
        with self._registry_lock:
            receipts = list(self._receipts.values())
            self._receipts.clear()
        self._n_receipts_failed += len(receipts)
        for receipt in receipts:
            receipt.reject(error)

    def _register(self, receipt_id: Optional[str]) -> PendingReceipt:
        assert receipt_id is not None
        receipt = PendingReceipt(receipt_id, self._loop, monotonic())
        if self._stalled and self._paused_on is not None:
            self._n_receipts_failed += 1
            receipt.reject(self._stall_error(self._paused_on))
        else:
            self._receipts[receipt_id] = receipt
        return receipt

