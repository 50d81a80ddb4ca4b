"""The outbox: one connection's outgoing frames, in order; the writer task, heart-beats, write-through.

Every outgoing frame goes through one ordered list of encoded bytes
(:attr:`Outbox.out`). A send only appends to it and wakes the writer task when
it goes from empty to non-empty, so a burst of sends becomes one socket write;
past the write-through mark the sending task writes the list out itself
(asyncio) or yields to the writer (:meth:`Outbox.catch_up`); at
``send_buffer_bytes`` a sender waits for room (:meth:`Outbox.wait_for_room`). A
task about to block on a receipt writes what is queued at once
(:meth:`Outbox.write_queued_now`).

An :class:`Outbox` belongs to one connection: it is built when the connection
is opened, with the transport it writes to, and closed with it
(:meth:`Outbox.close`), so its writer never has to ask whether the transport is
still the current one. Its collaborators are passed in (the transport, a clock,
what to call when a write finds the connection lost, how to log frames); it
knows nothing of the client. What it counts (entries and bytes written,
entries dropped, heart-beats) it counts on itself; the client adds those to its
own totals when the connection is replaced (:mod:`._stats`).
"""

from __future__ import annotations

from logging import DEBUG
from time import monotonic
from typing import Any, Callable, List, Optional

import anyio
import anyio.lowlevel

from ._framelog import frame_log
from ._transport import StompTransport
from .errors import ConnectionLostError

__all__ = ["Outbox", "WRITE_THROUGH_BYTES"]

# Queued outgoing bytes past which a send writes them out (or yields to the writer)
# instead of queueing more: a long burst of sends stays in a small, reused amount
# of memory rather than growing toward send_buffer_bytes, which costs page faults.
WRITE_THROUGH_BYTES = 256 * 1024


def _no_clock() -> float:
    return 0.0


def _no_log(direction: str, data: bytes) -> None:
    return None


def _ignore(error: BaseException) -> None:
    return None


class Outbox:
    """One connection's outgoing frames: the queue, the writer task, the heart-beat sender.

    Args:
        transport: where the frames go (None: an outbox that was never connected,
            the client's before its first connection; it is closed).
        send_buffer_bytes: queued bytes at which senders wait for room.
        write_through_bytes: queued bytes past which a sender writes the queue out
            itself (or lets the writer run) rather than queue more.
        clock: the event loop's clock (heart-beats: when we last wrote).
        on_lost: called with the ConnectionLostError a write raised, unless the
            outbox was closed meanwhile.
        log_frames: called with ``(">", data)`` for every write while
            ``stompfast.frames`` is at DEBUG.
        beating: a heart-beat sender will run (it also says so when it starts):
            writes note their time from the start.
    """

    __slots__ = (
        "transport", "out", "out_bytes", "send_buffer_bytes", "write_through_bytes", "wakeup", "drained",
        "writing", "beating", "last_sent", "thread_sent_at", "closed", "clock", "on_lost", "log_frames",
        "entries_written", "bytes_out", "entries_dropped", "frames_dropped", "heartbeats",
    )

    def __init__(
        self,
        transport: Optional[StompTransport],
        *,
        send_buffer_bytes: float,
        write_through_bytes: float,
        clock: Callable[[], float] = _no_clock,
        on_lost: Callable[[BaseException], Any] = _ignore,
        log_frames: Callable[[str, bytes], Any] = _no_log,
        beating: bool = False,
    ) -> None:
        self.transport = transport
        #: encoded frames not yet written, in order (heart-beats are ``b"\n"``)
        self.out: List[bytes] = []
        self.out_bytes = 0
        self.send_buffer_bytes = send_buffer_bytes
        self.write_through_bytes = min(write_through_bytes, send_buffer_bytes)
        #: set when ``out`` goes from empty to non-empty (the writer waits on it)
        self.wakeup = anyio.Event()
        #: set (and dropped) when the queue is taken: senders waiting for room wait on it
        self.drained: Optional[anyio.Event] = None
        # The writer task is inside transport.send
        self.writing = False
        # A heart-beat sender runs: note when we last wrote.
        self.beating = beating
        self.clock = clock
        self.last_sent = clock()
        # When a thread last wrote to the transport itself (time.monotonic: the loop's
        # clock may not be readable from other threads, as trio's is not); None: not since
        # the heart-beat sender last looked.
        self.thread_sent_at: Optional[float] = None
        self.closed = transport is None
        self.on_lost = on_lost
        self.log_frames = log_frames
        # counted here, added to the client's totals when the connection is replaced
        # Entries written (a frame each; heart-beat EOLs too)
        self.entries_written = 0
        self.bytes_out = 0
        # Entries dropped with a lost connection (heart-beats too)
        self.entries_dropped = 0
        # The same, frames only
        self.frames_dropped = 0
        self.heartbeats = 0

    def queue(self, data: bytes) -> None:
        """Queue encoded bytes for the writer (no wait: the caller checked the bound)."""
        out = self.out
        out.append(data)
        self.out_bytes += len(data)
        if len(out) == 1:
            self.wakeup.set()

    def offer(self, data: bytes) -> bool:
        """Queue ``data`` if the queue is under the write-through mark (the hot path of a plain SEND or ACK).

        False, having queued nothing: the caller first waits for room or lets the
        queue be written (``catch_up``).
        """
        if self.out_bytes < self.write_through_bytes:
            out = self.out
            out.append(data)
            self.out_bytes += len(data)
            if len(out) == 1:
                self.wakeup.set()
            return True
        return False

    def has_room(self) -> bool:
        """Whether a sender may queue now (the queue holds less than ``send_buffer_bytes``)."""
        return self.out_bytes < self.send_buffer_bytes

    def idle(self) -> bool:
        """Nothing queued and nothing being written: a frame written now by another writer is the next on the wire."""
        return not self.out and not self.writing

    def write_queued_now(self) -> None:
        """Write everything queued from the calling task, if the transport can take it at once.

        Used just before a task blocks on a receipt: the frames would otherwise
        wait for the writer task's turn (a wake-up and an event-loop iteration per
        round trip). Bursts of sends without receipts are still coalesced. Where
        the transport takes no write outside the writer (trio), nothing happens.
        """
        out = self.out
        if out and not self.closed:
            data = out[0] if len(out) == 1 else b"".join(out)
            if self.transport.try_write(data):  # type: ignore[union-attr]  # (not closed: it has one)
                self._taken(data)
                if self.beating:
                    self.last_sent = self.clock()

    def try_write_frame(self, data: bytes) -> bool:
        """Write ``data`` (not queued) from the calling task if the transport takes it at once (asyncio).

        The caller made sure nothing is queued ahead of it.
        """
        if self.closed or not self.transport.try_write(data):  # type: ignore[union-attr]
            return False
        self.entries_written += 1
        self.bytes_out += len(data)
        if frame_log.isEnabledFor(DEBUG):
            self.log_frames(">", data)
        if self.beating:
            self.last_sent = self.clock()
        return True

    async def write_queued(self) -> None:
        """Write what is queued from the calling task and wait for the transport, unless the writer is writing."""
        if self.writing or not self.out or self.transport is None:
            return
        out = self.out
        data = out[0] if len(out) == 1 else b"".join(out)
        self._taken(data)
        await self.transport.send(data)

    def _taken(self, data: bytes) -> None:
        """The whole queue was taken as ``data`` to be written: count it, empty it, wake who waits for room.

        (Every batch write goes through here, once per batch, never per frame.)
        """
        out = self.out
        self.entries_written += len(out)
        self.bytes_out += len(data)
        out.clear()
        self.out_bytes = 0
        if self.drained is not None:
            self.drained.set()
            self.drained = None
        if frame_log.isEnabledFor(DEBUG):
            self.log_frames(">", data)

    async def wait_for_room(self) -> None:
        """Return once the queue holds less than ``send_buffer_bytes``, or the outbox is closed."""
        while self.out_bytes >= self.send_buffer_bytes and not self.closed:
            if self.drained is None:
                self.drained = anyio.Event()
            await self.drained.wait()

    async def catch_up(self) -> None:
        """The queue is past the write-through mark: write it out now, or let the writer take it.

        A burst of sends never yields on its own, so without this the queue would
        grow to ``send_buffer_bytes`` before the writer task got a turn. While the
        writer is busy (the socket is full) the sender waits for it to take the
        queue, so on asyncio at most about two marks' worth is held, one being
        written and one queued.
        """
        if self.writing:
            # The writer task waits for the socket (the broker is slower than we
            # are): wait until it takes this queue rather than queue up to
            # send_buffer_bytes, which only costs memory and page faults.
            while self.writing and self.out_bytes >= self.write_through_bytes and not self.closed:
                if self.drained is None:
                    self.drained = anyio.Event()
                await self.drained.wait()
            return
        # asyncio: straight into the socket, no task switch
        self.write_queued_now()
        if self.out:
            # Elsewhere, or a full socket: the writer's turn
            await anyio.lowlevel.checkpoint()

    async def writer(self) -> None:
        """The writer task: write the queue in one write whenever it is not empty; until closed."""
        transport = self.transport
        assert transport is not None
        out = self.out
        try:
            while True:
                if not out:
                    if self.closed:
                        return
                    if self.wakeup.is_set():
                        self.wakeup = anyio.Event()
                    await self.wakeup.wait()
                    if not out:
                        continue
                # writing before the queue looks empty: a thread sending directly
                # (send_from_thread) must never pass frames taken but not yet written
                self.writing = True
                data = out[0] if len(out) == 1 else b"".join(out)
                self._taken(data)
                try:
                    await transport.send(data)
                finally:
                    self.writing = False
                if self.beating:
                    self.last_sent = self.clock()
        except ConnectionLostError as exc:
            if not self.closed:
                self.on_lost(exc)

    async def heartbeat_sender(self, interval: float) -> None:
        """Queue a heart-beat EOL whenever nothing was written for half of ``interval`` (seconds)."""
        # STOMP: "the sender MUST send new data over the network connection at
        # least every <n> milliseconds"; beats go out after half an interval of
        # silence, checked every quarter interval, so a strict broker (ActiveMQ
        # drops a client ~1.4 intervals late) never sees one late.
        self.beating = True
        half, quarter = interval / 2, interval / 4
        while True:
            await anyio.sleep(quarter)
            thread_sent_at = self.thread_sent_at
            if thread_sent_at is not None:
                self.thread_sent_at = None
                # the thread's write, on the loop's clock
                self.last_sent = max(self.last_sent, self.clock() - (monotonic() - thread_sent_at))
            if not self.out and self.clock() - self.last_sent >= half:
                self.heartbeats += 1
                self.queue(b"\n")

    def note_thread_write(self) -> None:
        """(Any thread.) A thread wrote a frame to the transport itself: the heart-beat sender counts it as sent.

        (A note overwritten before the sender read it costs at most one needless heart-beat.)
        """
        if self.beating:
            self.thread_sent_at = monotonic()

    def drop(self) -> int:
        """The connection is lost: drop what was never written; return how many frames that was."""
        out = self.out
        dropped = sum(1 for data in out if data != b"\n")
        self.entries_dropped += len(out)
        self.frames_dropped += dropped
        out.clear()
        self.out_bytes = 0
        return dropped

    def close(self) -> None:
        """No more writes: wake the writer (it returns) and every sender waiting for room (they find it closed)."""
        self.closed = True
        if self.drained is not None:
            self.drained.set()
            self.drained = None
        self.wakeup.set()
