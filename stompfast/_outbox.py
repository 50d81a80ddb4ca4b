"""The outbox part of :class:`~stompfast.AsyncClient`: queueing, write-through, the writer task, heart-beats.

Every outgoing frame goes through one ordered list of encoded bytes
(``_out``). A send only appends to it and wakes the writer task when it goes
from empty to non-empty, so a burst of sends becomes one socket write; past
``WRITE_THROUGH_BYTES`` the sending task writes the list out itself (asyncio)
or yields to the writer; at ``send_buffer_bytes`` it waits (backpressure). A
task about to block on a receipt writes what is queued at once
(``_flush_now``). A thread of the blocking client may write a SEND straight to
the socket (``send_from_thread``), only when nothing is queued or being written
ahead of it, so the order on the wire is always the order of the calls.

This is a mixin: its state lives on the client object (see
docs/architecture.md, "The client's parts"), because the per-message paths here
cannot afford an extra object hop. It owns the attributes listed under "owns"
and only reads those under "reads".
"""

from __future__ import annotations

from logging import DEBUG
from time import monotonic
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Union

import anyio
import anyio.lowlevel

from ._common import body_bytes
from ._framelog import frame_log
from ._lifecycle import OPEN, RECONNECTING, ClientState
from ._protocol import Message, StompProtocol
from ._receipt import PendingReceipt, Receipt
from ._stats import Counters
from ._transport import AsyncioTransport, StompTransport
from .errors import ConnectionLostError

__all__ = ["Outbox", "WRITE_THROUGH_BYTES"]

# Queued outgoing bytes past which a send writes them out (or yields to the writer)
# instead of queueing more: a long burst of sends stays in a small, reused amount
# of memory rather than growing toward send_buffer_bytes, which costs page faults.
WRITE_THROUGH_BYTES = 256 * 1024


class Outbox(Counters):
    """Outgoing frames, in order: the queue, the writer task, the heart-beat sender (a part of AsyncClient)."""

    # owns
    _out: List[bytes]
    _out_bytes: int
    _send_buffer_bytes: float
    _write_through_bytes: float
    _wakeup: anyio.Event
    _drained: Optional[anyio.Event]
    _writing: bool
    _beating: bool
    _last_sent: float
    # reads
    _transport: Optional[StompTransport]
    _protocol: StompProtocol
    _error: Optional[BaseException]
    _state: ClientState
    _link_alive: bool
    _stalled: bool
    _clock: Callable[[], float]
    _loop: Any
    _registry_lock: Any
    _thread_receipts: Any
    _receipts: Any

    _scopes: List[anyio.CancelScope]

    if TYPE_CHECKING:  # provided by the client's other parts

        def _log_frames(self, direction: str, data: bytes) -> None:
            raise NotImplementedError

        def _check_open(self) -> None:
            raise NotImplementedError

        def _background(self, coro: Any, name: str) -> None:
            raise NotImplementedError

        def _fail(self, error: BaseException) -> None:
            raise NotImplementedError

        def _register(self, receipt_id: Optional[str]) -> PendingReceipt:
            raise NotImplementedError

        def _encode_send(self, destination: str, body: Any, headers: Optional[Mapping[str, Any]],
                         content_type: Optional[str], receipt: bool) -> Any:
            raise NotImplementedError

    def _drop_outbox(self) -> int:
        """The link is lost: drop what was never written; return how many frames that was."""
        dropped = sum(1 for data in self._out if data != b"\n")
        self._n_entries_dropped += len(self._out)
        self._n_frames_dropped += dropped
        self._out.clear()
        self._out_bytes = 0
        return dropped

    def _attach_outbox(self, transport: StompTransport, beat_ms: int) -> None:
        """A new connection: an empty queue, its write-through mark, the writer and heart-beat tasks."""
        self._out = []
        self._out_bytes = 0
        # Only asyncio's transport takes a write from the sending task (try_write);
        # elsewhere writing through would mean a task switch per mark, so the
        # queue fills to send_buffer_bytes as before.
        self._write_through_bytes = (
            min(WRITE_THROUGH_BYTES, self._send_buffer_bytes)
            if isinstance(transport, AsyncioTransport)
            else self._send_buffer_bytes
        )
        self._wakeup = anyio.Event()
        self._drained = None
        self._last_sent = anyio.current_time()
        self._background(self._writer(), "stompfast-writer")
        self._beating = bool(beat_ms)
        if beat_ms:
            self._background(self._heartbeat_sender(beat_ms / 1000.0), "stompfast-heartbeat")

    def _queue(self, data: bytes) -> None:
        """Queue encoded bytes for the writer (no wait: the caller checked the bound)."""
        out = self._out
        out.append(data)
        self._out_bytes += len(data)
        if len(out) == 1:
            self._wakeup.set()

    def _flush_now(self) -> None:
        """Write everything queued from the calling task, if the transport can take it at once.

        Used just before a task blocks on a receipt: the frames would otherwise
        wait for the writer task's turn (a wake-up and an event-loop iteration per
        round trip). Bursts of sends without receipts are still coalesced.
        """
        out = self._out
        if out and self._transport is not None and self._error is None:
            data = out[0] if len(out) == 1 else b"".join(out)
            if self._transport.try_write(data):
                self._taken(data)
                if self._beating:
                    self._last_sent = self._clock()

    def _taken(self, data: bytes) -> None:
        """The whole queue was taken as ``data`` to be written: count it, empty it, wake who waits for room.

        (Every batch write goes through here: the writer task, :meth:`_flush_now`,
        :meth:`_write_queued`; once per batch, never per frame.)
        """
        out = self._out
        self._n_entries_written += len(out)
        self._n_bytes_out += len(data)
        out.clear()
        self._out_bytes = 0
        if self._drained is not None:
            self._drained.set()
            self._drained = None
        if frame_log.isEnabledFor(DEBUG):
            self._log_frames(">", data)

    async def _write_queued(self) -> None:
        """Write what is queued from the calling task, unless the writer task is writing."""
        if self._writing or not self._out or self._transport is None:
            return
        out = self._out
        data = out[0] if len(out) == 1 else b"".join(out)
        self._taken(data)
        await self._transport.send(data)

    def _write_now(self, data: bytes) -> bool:
        """Write ``data`` from the calling task if the transport takes it at once (asyncio)."""
        transport = self._transport
        if transport is None or self._error is not None or not transport.try_write(data):
            return False
        self._n_entries_written += 1
        self._n_bytes_out += len(data)
        if frame_log.isEnabledFor(DEBUG):
            self._log_frames(">", data)
        if self._beating:
            self._last_sent = self._clock()
        return True

    async def _write(self, data: bytes) -> None:
        if self._out_bytes >= self._send_buffer_bytes:
            while self._out_bytes >= self._send_buffer_bytes and self._error is None:
                if self._drained is None:
                    self._drained = anyio.Event()
                await self._drained.wait()
            self._check_open()
        self._queue(data)

    async def _write_through(self, data: bytes) -> None:
        """Queue ``data`` past the write-through mark: write the queue out now, or let the writer.

        A burst of sends never yields on its own, so without this the queue would
        grow to ``send_buffer_bytes`` before the writer task got a turn. While the
        writer is busy (the socket is full) the sender waits for it to take the
        queue, so on asyncio at most about two marks' worth is held, one being
        written and one queued.
        """
        await self._write(data)
        if self._writing:
            # The writer task waits for the socket (the broker is slower than we
            # are): wait until it takes this queue rather than queue up to
            # send_buffer_bytes, which only costs memory and page faults.
            while self._writing and self._out_bytes >= self._write_through_bytes and self._error is None:
                if self._drained is None:
                    self._drained = anyio.Event()
                await self._drained.wait()
            return
        self._flush_now()  # asyncio: straight into the socket, no task switch
        if self._out:
            await anyio.lowlevel.checkpoint()  # elsewhere, or a full socket: the writer's turn

    async def _writer(self) -> None:
        transport = self._transport
        assert transport is not None
        out = self._out
        try:
            while True:
                if not out:
                    if self._transport is not transport:
                        return  # a connection that was replaced: leave the client's state alone
                    if self._wakeup.is_set():
                        self._wakeup = anyio.Event()
                    await self._wakeup.wait()
                    if not out:
                        continue
                # _writing before the queue looks empty: a thread sending directly
                # (send_from_thread) must never pass frames taken but not yet written
                self._writing = True
                data = out[0] if len(out) == 1 else b"".join(out)
                self._taken(data)
                try:
                    await transport.send(data)
                finally:
                    self._writing = False
                if self._beating:
                    self._last_sent = self._clock()
        except ConnectionLostError as exc:
            if self._transport is transport:
                self._fail(exc)

    async def _heartbeat_sender(self, interval: float) -> None:
        # STOMP: "the sender MUST send new data over the network connection at
        # least every <n> milliseconds"; beats go out after half an interval of
        # silence, checked every quarter interval, so a strict broker (ActiveMQ
        # drops a client ~1.4 intervals late) never sees one late.
        half, quarter = interval / 2, interval / 4
        while True:
            await anyio.sleep(quarter)
            if not self._out and anyio.current_time() - self._last_sent >= half:
                self._n_heartbeats += 1
                self._queue(b"\n")

    def _queue_ack(self, message: Message) -> bool:
        """The common ACK (no receipt, no transaction) queued now; False if that must wait (the caller awaits)."""
        if self._state is OPEN and self._out_bytes < self._send_buffer_bytes:
            data = self._protocol.ack_plain(message)
            self._n_acks += 1
            out = self._out  # _queue, inlined: calling it costs ~5% of a client-ack drain
            out.append(data)
            self._out_bytes += len(data)
            if len(out) == 1:
                self._wakeup.set()
            return True
        return False

    def send_nowait(
        self,
        destination: str,
        body: Union[bytes, bytearray, memoryview, str] = b"",
        *,
        headers: Optional[Mapping[str, Any]] = None,
        content_type: Optional[str] = None,
        receipt: bool = False,
    ) -> Optional[Receipt]:
        """:meth:`send` without waiting, for synchronous code running in the event loop.

        The same frame, queued (or written) at once; with ``receipt=True`` the
        pending :class:`Receipt` is returned (``add_done_callback`` tells when it
        is done). This is how the blocking client sends from a loop callback
        instead of a task per call.

        Raises:
            anyio.WouldBlock: nothing was queued because the call would have to
                wait (the connection is being re-established, or the send buffer
                is full): ``await send(...)`` instead.
            ClientClosedError, ConnectionLostError, ...: as :meth:`send`.
        """
        if self._state is not OPEN:
            if self._state is RECONNECTING:
                raise anyio.WouldBlock
            self._check_open()
        if self._out_bytes >= self._send_buffer_bytes:
            raise anyio.WouldBlock
        data, receipt_id = self._encode_send(destination, body, headers, content_type, receipt)
        if receipt_id is None:
            self._queue(data)
            if self._out_bytes >= self._write_through_bytes:
                self._flush_now()
            return None
        pending = self._register(receipt_id)
        if not self._out and self._write_now(data):
            return pending
        self._queue(data)
        self._flush_now()
        return pending

    def send_from_thread(
        self,
        destination: str,
        body: Union[bytes, bytearray, memoryview, str],
        headers: Optional[Mapping[str, Any]],
        content_type: Optional[str],
        on_done: Callable[[Receipt], Any],
    ) -> Optional[Receipt]:
        """(Any thread.) A SEND with a receipt, written to the socket by the calling thread itself.

        The blocking client's round trip: no hop into the event loop to send, so
        the loop wakes only for the RECEIPT (``on_done(receipt)`` is then called
        in the loop). Returns None, having sent nothing, whenever that is not
        safe at this moment: not plain TCP on the stock asyncio loop, frames
        queued or being written ahead of this one (order), the asyncio write
        buffer not empty, a reconnect or a stall under way. The caller then
        sends through the loop.

        Raises LocalProtocolError (and TypeError for a body of another type) as
        :meth:`send` does.
        """
        transport = self._transport
        if type(transport) is not AsyncioTransport or not transport.direct_ok:
            return None
        body, content_type = body_bytes(body, content_type)
        with self._registry_lock:
            if (
                self._state is not OPEN
                or not self._link_alive
                or self._transport is not transport
                or self._out
                or self._writing
                or self._stalled
            ):
                return None
            receipt_id = "t%d" % next(self._thread_receipts)
            data = self._protocol.encode_send(destination, body, headers, content_type, receipt_id)
            receipt = PendingReceipt(receipt_id, self._loop, monotonic())
            receipt.add_done_callback(on_done)  # before anything can complete it
            self._receipts[receipt_id] = receipt
            if not transport.write_from_thread(data):
                del self._receipts[receipt_id]
                return None
            self._n_thread_sends += 1  # (threads' own counters, under the lock: the loop's are not)
            self._n_thread_bytes += len(data)
            if self._beating:
                self._last_sent = self._clock()
        if frame_log.isEnabledFor(DEBUG):
            self._log_frames(">", data)  # (after the write: the log takes a lock of its own)
        return receipt

    async def _send_receipted(self, data: bytes, receipt_id: str, wait: bool) -> Receipt:
        pending = self._register(receipt_id)
        if wait and not self._out and self._write_now(data):
            # Nothing queued ahead of it and the caller is about to block: write
            # it from this task (no writer wake-up, no extra loop iteration).
            await pending.wait()
            return pending
        await self._write(data)
        if wait:
            self._flush_now()
            await pending.wait()
        return pending

