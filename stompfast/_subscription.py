"""AsyncSubscription: an async iterator of messages over a bounded local buffer.

The client's reader task appends every message of one socket read to the
buffer of its subscription in one step and wakes the consumer once. The
consumer takes from the buffer without awaiting while it has messages, so a
busy subscription costs no task switch per message.

Backpressure: when a buffer holds ``buffer_size`` messages or more after a
read, the reader stops reading the socket until the consumer takes some. The
broker then sees TCP backpressure, which holds back *every* subscription of the
connection (and RECEIPTs): that is the price of one socket. Two things keep it
from turning into a silent hang:

* ``client`` and ``client-individual`` subscriptions ask the broker for a
  prefetch equal to ``buffer_size`` (RabbitMQ ``prefetch-count``, ActiveMQ
  ``activemq.prefetchSize``) unless the caller set one, so the broker never has
  more unacknowledged messages in flight than the buffer holds and the reader
  never stops for them;
* a receipt or ``flush()`` awaited while the reader has been stopped for
  ``stall_timeout`` fails with :class:`~stompfast.FlowControlError` naming the
  subscription to drain, instead of waiting forever.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional

import anyio

from ._protocol import Message
from .errors import ClientClosedError, ConfigurationError

if TYPE_CHECKING:  # pragma: no cover
    from ._client import AsyncClient

__all__ = ["AsyncSubscription", "DEFAULT_BUFFER_SIZE", "ThreadHandoff", "WaitTimeout"]

#: Messages a subscription buffers before the reader stops reading.
DEFAULT_BUFFER_SIZE = 1000

_PREFETCH_HEADERS = ("prefetch-count", "activemq.prefetchSize")


class AsyncSubscription:
    """A subscription to one destination; use it as ``async with client.subscribe(...) as sub``.

    Iterate it (``async for message in sub``), or call :meth:`receive` /
    :meth:`receive_batch`. Leaving the ``async with`` block unsubscribes;
    messages still in the local buffer are dropped. In ``auto`` mode the broker
    counted them as delivered; in the other modes it redelivers every unacked
    message (RabbitMQ only once the connection closes: it keeps a cancelled
    subscription's unacked messages on the connection; ActiveMQ at once).
    When the connection fails, the buffered messages are still handed out, then
    the failure is raised.
    """

    def __init__(
        self,
        client: "AsyncClient",
        destination: str,
        ack: str,
        headers: Optional[Dict[str, Any]],
        buffer_size: int,
        receipt: bool,
        id: Optional[str],
    ) -> None:
        if type(buffer_size) is not int or buffer_size < 1:
            raise ConfigurationError(f"buffer_size must be a positive int, not {buffer_size!r}")
        self._client = client
        self.destination = destination
        self.ack_mode = ack
        self.headers: Dict[str, Any] = dict(headers or {})
        #: the reader stops reading while the buffer holds this many messages
        self._pause_at = buffer_size
        if ack != "auto" and not any(h in self.headers for h in _PREFETCH_HEADERS):
            for h in _PREFETCH_HEADERS:
                self.headers[h] = str(buffer_size)
            # The broker keeps at most buffer_size unacked messages in flight, so the
            # buffer cannot overflow and the reader need not stop for it (receipts
            # keep flowing while it is full); one more stays as a guard against a
            # broker that ignores prefetch.
            self._pause_at = buffer_size + 1
        self.buffer_size = buffer_size
        self._receipt = receipt
        self.id: Optional[str] = id
        self._buffer: Deque[Message] = deque()
        self._ready = anyio.Event()  # set when a message arrives or the subscription closes
        # set() once we have room again: an anyio.Event the pull reader waits on, or the push
        # reader's _Resume (it restarts reading)
        self._space: Optional[Any] = None
        self._closed = False
        self._error: Optional[BaseException] = None
        self._seq = 0  # messages delivered
        self._acked = 0  # client mode: every message up to this one is acknowledged

    # -- user side ---------------------------------------------------------------

    async def __aenter__(self) -> "AsyncSubscription":
        await self._client._subscribe(self)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    def __aiter__(self) -> "AsyncSubscription":
        return self

    async def __anext__(self) -> Message:
        buffer = self._buffer
        if buffer:
            message = buffer.popleft()
            if self._space is not None and len(buffer) < self._pause_at:
                self._space.set()
                self._space = None
            return message
        try:
            return await self.receive()
        except ClientClosedError:
            if self._error is None:
                raise StopAsyncIteration from None
            raise

    async def receive(self) -> Message:
        """The next message; waits for one.

        Raises:
            ClientClosedError: the subscription was closed (by ``aclose``).
            ConnectionLostError, ServerError, HeartbeatTimeout: the connection
                failed (after every buffered message was handed out).
        """
        buffer = self._buffer
        while not buffer:
            if self._closed:
                self._raise_closed()
            if self._ready.is_set():
                self._ready = anyio.Event()
            await self._ready.wait()
        message = buffer.popleft()
        if self._space is not None and len(buffer) < self._pause_at:
            self._space.set()
            self._space = None
        return message

    async def receive_batch(self, max_messages: int = 100) -> List[Message]:
        """Up to ``max_messages`` buffered messages; waits until there is at least one."""
        if not self._buffer:
            first = await self.receive()
            batch = [first]
        else:
            batch = []
        buffer = self._buffer
        take = min(max_messages - len(batch), len(buffer))
        popleft = buffer.popleft
        for _ in range(take):
            batch.append(popleft())
        if self._space is not None and len(buffer) < self._pause_at:
            self._space.set()
            self._space = None
        return batch

    @property
    def pending(self) -> int:
        """Messages received and not yet taken."""
        return len(self._buffer)

    @property
    def closed(self) -> bool:
        return self._closed

    async def aclose(self) -> None:
        """Unsubscribe (if the connection is still up) and drop the buffered messages."""
        if self._closed:
            return
        try:
            await self._client._unsubscribe(self)
        finally:
            self._close(None)
            self._buffer.clear()

    def _raise_closed(self) -> None:
        if self._error is not None:
            raise _copy(self._error)
        raise ClientClosedError(f"subscription {self.id!r} to {self.destination!r} is closed")

    # -- ack / nack (Message.ack and Message.nack land here) -----------------------

    async def ack_message(self, message: Message, *, transaction: Optional[str] = None, receipt: bool = False) -> None:
        """Acknowledge ``message``; in ``client`` mode this covers every earlier message too.

        STOMP: with ack mode client, "the ACK is cumulative"; acknowledging a
        message that an acknowledgement of a later one already covered is a no-op.
        """
        if self.ack_mode == "client":
            if message._seq <= self._acked:
                return
            self._acked = message._seq
        if not receipt and transaction is None and self._queue_ack(message):
            return
        await self._client._ack("ACK", message, transaction, receipt)

    def ack_nowait(self, message: Message) -> bool:
        """(In the loop.) The common ACK (no receipt, no transaction) queued now; False if it must wait.

        True: the ACK is queued to be written (or, in ``client`` mode, a later
        ACK already covered the message). False: nothing was done, because the
        connection is not open or the send buffer is full; ``await
        ack_message(message)`` then waits. Raises what :meth:`ack_message`
        raises for the message itself (StaleMessageError, LocalProtocolError).
        For callers that cannot await per message (the blocking client's writer).
        """
        if self.ack_mode == "client":
            if message._seq <= self._acked:
                return True
            if not self._queue_ack(message):
                return False
            self._acked = message._seq
            return True
        return self._queue_ack(message)

    def _queue_ack(self, message: Message) -> bool:
        client = self._client
        if (
            client._error is None
            and client._state == "open"
            and client._out_bytes < client._send_buffer_bytes
        ):  # the common ack: encode and queue, no await needed
            data = client._protocol.ack_plain(message)
            out = client._out  # client._queue, inlined: calling it costs ~5% of a client-ack drain
            out.append(data)
            client._out_bytes += len(data)
            if len(out) == 1:
                client._wakeup.set()
            return True
        return False

    async def nack_message(self, message: Message, *, transaction: Optional[str] = None, receipt: bool = False) -> None:
        """Refuse ``message`` (the broker redelivers or dead-letters it); cumulative in ``client`` mode."""
        if self.ack_mode == "client":
            if message._seq <= self._acked:
                return
            self._acked = message._seq
        await self._client._ack("NACK", message, transaction, receipt)

    # -- reader side ---------------------------------------------------------------

    def _deliver(self, message: Message) -> None:
        self._seq += 1
        message._seq = self._seq
        message._owner = self
        self._buffer.append(message)

    def check_ack(self, message: Message) -> None:
        """Raise what an ACK of ``message`` would be refused with, sending nothing.

        StaleMessageError for a message of a lost connection; LocalProtocolError
        for an ``auto`` subscription or one that is gone. The blocking client
        checks its queued acks here, in the calling thread, before queueing them.
        """
        client = self._client
        if (
            message._owner is self
            and message._session is client._protocol
            and client._link_alive
            and not self._closed
            and self.ack_mode != "auto"
            and message.ack_id is not None
        ):
            return  # the common case, a message of this live session (one test instead of building the ACK)
        client._check_stale("ACK", message)
        client._protocol._ack_headers("ACK", message, None)

    def handoff(
        self, call_soon: Callable[[Callable[[], Any]], Any], loop_alive: Callable[[], bool]
    ) -> "ThreadHandoff":
        """Hand this subscription's messages to threads instead of tasks (the blocking client's way in).

        From then on the messages are taken with the returned
        :class:`ThreadHandoff` from any thread; ``receive`` and iteration here
        are no longer used. ``call_soon(fn)`` must run ``fn()`` in this client's
        event loop, from any thread (``loop.call_soon_threadsafe``,
        ``TrioToken.run_sync_soon``); ``loop_alive()`` says whether that loop
        still runs (a thread waiting for a message checks it every second).
        """
        handoff = ThreadHandoff(self, call_soon, loop_alive)
        self._ready = handoff  # type: ignore[assignment]  # the reader's set() now wakes threads
        return handoff

    def _close(self, error: Optional[BaseException]) -> None:
        if self._closed:
            return
        self._closed = True
        self._error = error
        self._ready.set()
        if self._space is not None:
            self._space.set()
            self._space = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._buffer)} buffered"
        return f"<AsyncSubscription {self.id!r} to {self.destination!r} ack={self.ack_mode} {state}>"


#: How often a thread waiting on the loop (a ThreadHandoff, the blocking client) checks that the loop still runs.
_LOOP_CHECK_INTERVAL = 1.0


class WaitTimeout(Exception):
    """ThreadHandoff.take's timeout passed (not a TimeoutError: a failure can be one, HeartbeatTimeout)."""


class ThreadHandoff:
    """Threads take a subscription's messages here, without a task or a trip into the event loop.

    The reader appends each read's messages to the subscription's buffer in the
    loop and calls :meth:`set` (it stands in for the subscription's ``_ready``
    event), which wakes the threads waiting here, if any; a thread takes what is
    buffered with ``deque.popleft`` (atomic), so a busy subscription costs no
    thread crossing per message, nor per batch while messages are buffered.

    The one thing a thread cannot do itself is restart a reader stopped by a full
    buffer (that belongs to the loop): after taking, it schedules that with
    ``call_soon`` when the reader waits for room, once until it ran.
    """

    __slots__ = ("_sub", "_buffer", "_cond", "_waiting", "_call_soon", "_loop_alive", "_waking")

    def __init__(
        self,
        sub: AsyncSubscription,
        call_soon: Callable[[Callable[[], Any]], Any],
        loop_alive: Callable[[], bool],
    ) -> None:
        self._sub = sub
        self._loop_alive = loop_alive
        self._buffer = sub._buffer
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0  # threads inside wait(): only then does set() take the lock
        self._call_soon = call_soon
        self._waking = False  # a _resume_reader is scheduled and has not run yet

    # -- loop side: the subscription's "ready" event -----------------------------------

    def set(self) -> None:
        """(In the loop.) Messages arrived or the subscription closed: wake the waiting threads."""
        if self._waiting:
            with self._cond:
                self._cond.notify_all()

    def is_set(self) -> bool:
        return False

    # -- thread side ---------------------------------------------------------------

    def take(self, timeout: Optional[float]) -> Optional[Message]:
        """The next message, waiting up to ``timeout`` seconds (None: for ever) for one.

        Returns None when the subscription was closed without a failure and
        nothing is left; raises the connection's failure once the buffered
        messages are handed out, :class:`WaitTimeout` when ``timeout`` passed
        (nothing was taken) and ClientClosedError when the loop stopped. An
        interrupt while waiting takes nothing.
        """
        try:
            message = self._buffer.popleft()
        except IndexError:
            waited = self._wait(timeout)
            if waited is None:
                return None
            message = waited
        if self._sub._space is not None:
            self._reader_may_resume()
        return message

    def take_batch(self, max_messages: int, timeout: Optional[float]) -> List[Message]:
        """Up to ``max_messages`` messages: waits (as :meth:`take`) only for the first; [] when closed."""
        first = self.take(timeout)
        if first is None:
            return []
        batch = [first]
        buffer = self._buffer
        popleft = buffer.popleft
        try:
            for _ in range(min(max_messages - 1, len(buffer))):
                batch.append(popleft())
        except IndexError:  # another thread took them first
            pass
        except BaseException:  # an interrupt (KeyboardInterrupt) mid-batch: put them back, in order
            buffer.extendleft(reversed(batch))
            raise
        if self._sub._space is not None:
            self._reader_may_resume()
        return batch

    def pending(self) -> int:
        return len(self._buffer)

    def _wait(self, timeout: Optional[float]) -> Optional[Message]:
        sub, buffer = self._sub, self._buffer
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._waiting += 1  # before the buffer is looked at again: set() cannot be missed
            try:
                while True:
                    if buffer:
                        try:
                            return buffer.popleft()
                        except IndexError:  # taken by a thread that did not wait
                            continue
                    if sub._closed:
                        break
                    wait = _LOOP_CHECK_INTERVAL
                    if deadline is not None:
                        wait = min(wait, deadline - time.monotonic())
                        if wait <= 0:
                            raise WaitTimeout
                    if not self._cond.wait(wait) and not self._loop_alive():
                        raise ClientClosedError("the client's event loop stopped while waiting")
            finally:
                self._waiting -= 1
        if sub._error is not None:
            raise _copy(sub._error)
        return None

    def _reader_may_resume(self) -> None:
        """(Any thread.) The reader waits for room: let the loop restart it once there is room.

        Only once the buffer is down to half its size: restarting it at the first
        free slot, as a task does for free, would cost a loop wake-up per message.
        """
        if not self._waking and len(self._buffer) <= self._sub._pause_at // 2:
            self._waking = True
            try:
                self._call_soon(self._resume_reader)
            except RuntimeError:  # the loop is gone: nothing is reading any more
                self._waking = False

    def _resume_reader(self) -> None:
        """(In the loop.) Restart a reader stopped by this subscription's full buffer."""
        self._waking = False
        sub = self._sub
        space = sub._space
        if space is not None and len(sub._buffer) <= sub._pause_at // 2:
            sub._space = None
            space.set()


def _copy(error: BaseException) -> BaseException:
    """A fresh instance of a stored error, so each waiter gets its own traceback."""
    try:
        reduced: Any = error.__reduce__()
        func, args, state = reduced[:3]
        fresh = func(*args)
        if state:
            fresh.__dict__.update(state)
        fresh.__cause__ = error.__cause__
        return fresh
    except Exception:  # pragma: no cover - an exotic error that will not copy
        return error
