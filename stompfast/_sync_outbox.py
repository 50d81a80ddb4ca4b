"""The sync client's outbox: its ordered queue of receipt-less sends and acks,
filled by the calling threads and written by one drainer task in the event loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, List, Mapping, Optional, Tuple

import anyio

from ._client import AsyncClient
from ._common import copy_error
from ._events import ACK_QUEUED
from ._protocol import Message
from ._subscription import LOOP_CHECK_INTERVAL, AsyncSubscription
from .errors import ClientClosedError, LocalProtocolError, StaleMessageError, StompError, StompTimeout

log = logging.getLogger("stompfast")

#: queued receipt-less sends beyond which ``send`` waits for them to be written
_FAST_MAX_MESSAGES = 10_000


class ThreadOutbox:
    """The sync client's ordered queue of receipt-less frames, written by one drainer task in the loop.

    Calling threads ``put`` sends and acks; the first ``put`` into an idle queue
    wakes the drainer with one cheap loop wake-up (``call_soon``, no task, no
    future), so a burst of frames costs one crossing, not one per frame. The
    drainer lives for the connection (in the client's host task) and writes the
    queue in order through the async client, which applies its backpressure.
    It holds no reference to the :class:`Client` (an abandoned client must
    still be garbage collected and closed by its finalizer).
    """

    __slots__ = ("queue", "queued_bytes", "lock", "idle", "active", "wakeup", "ended", "error", "closed",
                 "_client", "_send", "_check", "_ack_from_thread", "_limit_bytes", "_call_soon", "_loop_thread")

    def __init__(self, client: AsyncClient, call_soon: Callable[[Callable[[], Any]], Any],
                 loop_thread: threading.Thread, limit_bytes: int) -> None:
        self.queue: Deque[Tuple[Any, ...]] = deque()
        self.queued_bytes = 0
        self.lock = threading.Lock()
        # Notified when the queue is written out (or dropped)
        self.idle = threading.Condition(self.lock)
        # The drainer was woken for the queue and has not emptied it yet
        self.active = False
        # (loop side) the drainer waits on it
        self.wakeup: Optional[anyio.Event] = None
        # The drainer has run and is gone
        self.ended = False
        # What stopped the last drain, raised by the next call
        self.error: Optional[BaseException] = None
        # The client is closed: nothing more is queued (set by Client.close)
        self.closed = False
        self._client = client
        self._send = client.send
        # Raises what the session's version cannot carry
        self._check = client.check_send
        self._ack_from_thread = client.ack_from_thread
        # Queued bytes beyond which a send waits (send_buffer_bytes)
        self._limit_bytes = limit_bytes
        self._call_soon = call_soon
        self._loop_thread = loop_thread

    def put(self, item: Tuple[Any, ...], size: int) -> None:
        """(Any thread.) Queue one frame's arguments; wake the drainer if the queue was idle."""
        with self.lock:
            self.queue.append(item)
            self.queued_bytes += size
            if self.active:
                return
            self.active = True
        try:
            self._call_soon(self._wake)
        # The loop is gone
        except RuntimeError:
            self._drop()
            raise ClientClosedError("the client is closed (its event loop has stopped)") from None

    def _drop(self) -> None:
        with self.lock:
            self.queue.clear()
            self.queued_bytes = 0
            self.active = False
            self.idle.notify_all()

    def _wait_drained(self, timeout: Optional[float]) -> None:
        """(Any thread.) Wait until the drainer emptied the queue; StompTimeout after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while self.active:
                wait = LOOP_CHECK_INTERVAL
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        raise StompTimeout(
                            f"the queued sends were not written within {timeout:g} s (no room in the send buffer)"
                        )
                if not self.idle.wait(wait) and not self._loop_thread.is_alive():
                    self.queue.clear()
                    self.queued_bytes = 0
                    self.active = False
                    raise ClientClosedError("the client's event loop stopped while writing queued sends")

    # -- the calling threads' side: sends and acks without a receipt ----------------------------

    def queue_send(
        self, destination: str, body: Any, headers: Optional[Mapping[str, Any]], content_type: Optional[str],
        timeout: Optional[float], options: Optional[Tuple[Any, Any, Any]] = None,
    ) -> None:
        """Queue a SEND for the drainer (the fast path of ``Client.send``).

        The frame is encoded and written in the loop, in the order the calls
        were made. A failure to write it (the connection ended) is raised by the
        next call that sends. When the queue holds ``send_buffer_bytes`` or
        10,000 messages, the caller waits for it to drain (backpressure, bounded
        by ``timeout``). ``options``: ``(ttl, priority, persistent)``, checked by
        the caller, or None; the loop writes them in the headers of the broker
        connected when the frame is encoded.
        """
        if self.error is not None or self.closed:
            self._raise_error()
        # Read across threads: set once, never cleared
        failed = self._client.error
        if failed is not None:
            raise copy_error(failed)
        if type(body) is not bytes and not isinstance(body, (str, bytearray, memoryview)):
            raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
        if headers is not None or content_type is not None or type(destination) is not str \
                or not destination.isprintable():
            self._check_queued(destination, headers, content_type)
        if len(self.queue) >= _FAST_MAX_MESSAGES or self.queued_bytes >= self._limit_bytes:
            self.wait_written(timeout)
        self.put((destination, body, headers, content_type, options), len(body))

    def _check_queued(self, destination: Any, headers: Optional[Mapping[str, Any]], content_type: Any) -> None:
        """Refuse here, in this call, what the session's version cannot carry (not later, in the drainer)."""
        self._check(destination, headers, content_type)

    def queue_ack(self, sub: AsyncSubscription, message: Message, timeout: Optional[float]) -> None:
        """Queue an ACK (no receipt, no transaction) behind the queued sends; checked here first."""
        if self.error is not None or self.closed:
            self._raise_error()
        failed = self._client.error
        if failed is not None:
            raise copy_error(failed)
        # The refusals that need no I/O, raised here rather than by a later call:
        # a stale message, then the protocol's own (auto mode, a subscription gone).
        sub.check_ack(message)
        # Settled here, in the caller's thread, so that a second ack of it is refused
        # by this call (claim_settle inlined: this runs once per message); the loop's
        # encoder takes the mark over (StompProtocol.ack_plain).
        if message.settled is not None:
            message.claim_settle("ACK")
        # Nothing of ours queued or being written ahead of it: the thread writes it
        # itself where the transport allows, so the loop does not wake to write it
        # (``client`` mode's cumulative bookkeeping is the loop's, so it queues)
        if not self.active and sub.ack_mode == "client-individual" and self._ack_from_thread(message):
            return
        message.settled = ACK_QUEUED
        if len(self.queue) >= _FAST_MAX_MESSAGES:
            self.wait_written(timeout)
        self.put((None, sub, message, None, None), 0)

    def wait_written(self, timeout: Optional[float]) -> None:
        """Wait until the queued frames are written; raise what stopped them."""
        self._wait_drained(timeout)
        if self.error is not None:
            self._raise_error()

    def write_before_closing(self, timeout: float) -> None:
        """Let the queued frames go out before a close, for at most ``timeout`` seconds.

        A broker that stops reading (TCP flow control, as RabbitMQ applies in a
        memory or disk alarm) must not hold a close for ever: what is still
        queued then is dropped with the connection, and said so in the log.
        """
        try:
            self.wait_written(timeout)
        except StompTimeout:
            log.warning(
                "stompfast: closing with %d queued frame(s) unwritten after %g s (the broker is not reading)",
                len(self.queue), timeout,
            )
        except StompError:
            # The connection failed: they could not be written; close anyway
            pass

    def _raise_error(self) -> None:
        error, self.error = self.error, None
        if error is not None:
            raise error
        raise ClientClosedError("the client is closed")

    # -- the loop's side: the drainer ---------------------------------------------------------

    def _wake(self) -> None:
        """(In the loop.)"""
        wakeup = self.wakeup
        if wakeup is not None:
            wakeup.set()
            return
        if not self.ended:
            # The drainer has not started yet: it looks at ``active`` when it does
            return
        # The drainer is gone (the connection's host task has ended): nothing will
        # write these; end the waits instead of leaving them for ever.
        with self.lock:
            self.queue.clear()
            self.queued_bytes = 0
            self.active = False
            if self.error is None:
                self.error = ClientClosedError("the client is closed")
            self.idle.notify_all()

    async def drainer(self) -> None:
        """(In the loop, for the life of the connection.) Write the queue out, woken once per burst."""
        self.wakeup = anyio.Event()
        # Woken before we were listening
        if self.active:
            self.wakeup.set()
        try:
            while True:
                await self.wakeup.wait()
                self.wakeup = anyio.Event()
                await self._drain()
        finally:
            self.wakeup = None
            self.ended = True

    def _unencodable(self, destination: Any, headers: Any, content_type: Any) -> bool:
        """True when the session's version cannot carry this SEND (the check its caller made)."""
        try:
            self._check(destination, headers, content_type)
        except (LocalProtocolError, TypeError):
            return True
        return False

    async def _drain(self) -> None:
        send = self._send
        queue = self.queue
        batch: List[Tuple[Any, ...]] = []
        try:
            while True:
                with self.lock:
                    if not queue:
                        self.active = False
                        self.idle.notify_all()
                        return
                    batch = list(queue)
                    queue.clear()
                    self.queued_bytes = 0
                for i, (destination, body, headers, content_type, options) in enumerate(batch):
                    try:
                        # An ACK: (None, subscription, message, None, None)
                        if destination is None:
                            try:
                                # No await per ACK unless it must wait
                                if not body.ack_nowait(headers):
                                    await body.ack_message(headers)
                            except StaleMessageError:
                                # its connection was lost after the ACK was queued: the
                                # broker redelivers the message; nothing to report later
                                log.debug("dropped a queued ACK of %r: its connection was lost", headers)
                        else:
                            try:
                                if options is None:
                                    await send(destination, body, headers=headers, content_type=content_type)
                                else:
                                    ttl, priority, persistent = options
                                    await send(destination, body, headers=headers, content_type=content_type,
                                               ttl=ttl, priority=priority, persistent=persistent)
                            except (LocalProtocolError, TypeError) as exc:
                                if not self._unencodable(destination, headers, content_type):
                                    # The session refused it (its state): as any failure
                                    raise
                                # checked when queued, so only a session of another version
                                # (a failover) gets here: this frame cannot be written, the
                                # rest can; the next call reports it
                                log.error("a queued SEND to %r could not be encoded: %s", destination, exc)
                                if self.error is None:
                                    self.error = exc
                    except Exception:
                        batch = batch[i:]
                        raise
                batch = []
        except BaseException as exc:
            with self.lock:
                dropped = len(batch) + len(queue)
                queue.clear()
                self.queued_bytes = 0
                self.active = False
                if isinstance(exc, Exception):
                    # Python 3.11+
                    if dropped and hasattr(exc, "add_note"):
                        exc.add_note(f"{dropped} queued send(s) of this client were not written")
                    self.error = exc
                self.idle.notify_all()
            if not isinstance(exc, Exception):
                raise
