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
  ``activemq.prefetchSize``, Artemis a ``consumer-window-size`` in bytes: see
  ``prefetch_headers`` in ``_brokers.py``) unless the caller set one, so the broker never has
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
from typing import Any, Awaitable, Callable, Deque, Dict, Iterable, List, Mapping, Optional, Tuple

import anyio

from ._common import copy_error
from ._protocol import PREFETCH_HEADERS, Message
from .errors import ClientClosedError, ConfigurationError

__all__ = [
    "AsyncSubscription", "DEFAULT_BUFFER_SIZE", "Inlet", "LiveSession", "LOOP_CHECK_INTERVAL", "SubscriptionOps",
    "DirectDelivery", "ThreadHandoff", "WaitTimeout", "drop_unacked",
]

#: Messages a subscription buffers before the reader stops reading.
DEFAULT_BUFFER_SIZE = 1000



class Inlet:
    """A subscription as the session sees it: what to (re-)subscribe, and the buffer the reader fills.

    The client's reader (:mod:`._inbox`) appends messages here and wakes the
    consumer through ``ready``; when ``messages`` holds ``pause_at`` or more it
    stops reading and waits for ``space``. The consumer side
    (:class:`AsyncSubscription`, or a :class:`ThreadHandoff`) takes from
    ``messages`` and sets ``space`` once there is room. Data flows one way: the
    inlet never calls the client.
    """

    __slots__ = ("destination", "ack_mode", "headers", "id", "wants_receipt", "buffer_size", "pause_at", "prefetch",
                 "messages", "ready", "space", "closed", "error", "seq", "owner", "confirming", "durable",
                 "implicit", "message_classes")

    def __init__(self, owner: Any, destination: str, ack: str, headers: Optional[Dict[str, Any]],
                 buffer_size: int, receipt: bool, id: Optional[str], durable: Optional[str] = None,
                 implicit: bool = False) -> None:
        if type(buffer_size) is not int or buffer_size < 1:
            raise ConfigurationError(f"buffer_size must be a positive int, not {buffer_size!r}")
        #: the AsyncSubscription whose messages these are (``message.ack()`` goes there)
        self.owner = owner
        self.destination = destination
        self.ack_mode = ack
        self.headers: Dict[str, Any] = dict(headers or {})
        #: the reader stops reading while the buffer holds this many messages
        self.pause_at = buffer_size
        #: the broker prefetch the SUBSCRIBE asks for (the session writes the header
        #: its broker reads: StompProtocol.subscribe), or None
        self.prefetch: Optional[int] = None
        if ack != "auto" and not any(h in self.headers for h in PREFETCH_HEADERS):
            self.prefetch = buffer_size
            # The broker keeps at most buffer_size unacked messages in flight, so the
            # buffer cannot overflow and the reader need not stop for it (receipts
            # keep flowing while it is full); one more stays as a guard against a
            # broker that ignores prefetch.
            self.pause_at = buffer_size + 1
        self.buffer_size = buffer_size
        #: SUBSCRIBE asks for a receipt (and the subscriber waits for it)
        self.wants_receipt = receipt
        self.id: Optional[str] = id
        #: the durable subscription's name (the session writes the headers its broker reads), or None
        self.durable = durable
        #: the broker subscribes it by itself (RabbitMQ's /temp-queue/ replies): the client
        #: never sends SUBSCRIBE or UNSUBSCRIBE for it, its id is its destination
        self.implicit = implicit
        self.messages: Deque[Message] = deque()
        #: set() when a message arrives or the subscription closes (an anyio.Event, or a ThreadHandoff)
        self.ready: Any = anyio.Event()
        #: set() once there is room again: an anyio.Event the pull reader waits on, or the push reader's Resume
        self.space: Optional[Any] = None
        self.closed = False
        self.error: Optional[BaseException] = None
        # Messages delivered
        self.seq = 0
        #: the receipt id of a SUBSCRIBE sent and not yet confirmed: the reader confirms it with the
        #: subscription's first MESSAGE too (see Inbox._confirm_by_message)
        self.confirming: Optional[str] = None
        #: the classes the session makes this subscription's messages of, ``(message, oversized)``,
        #: or None for :class:`Message` and :class:`OversizedMessage` (the blocking client's differ)
        self.message_classes: Optional[Tuple[type, type]] = None

    def subscribed_as(self, sub_id: str) -> None:
        """(The session.) The SUBSCRIBE names it ``sub_id``: its deliveries carry that id."""
        self.id = sub_id

    def confirm_with(self, receipt_id: Optional[str]) -> None:
        """(The session.) A SUBSCRIBE with receipt ``receipt_id`` is out (None: it is confirmed or withdrawn)."""
        self.confirming = receipt_id

    def deliver(self, message: Message) -> None:
        """(The reader.) One more message for this subscription."""
        self.seq += 1
        message.seq = self.seq
        message.owner = self.owner
        self.messages.append(message)

    def close(self, error: Optional[BaseException]) -> None:
        """No more messages: wake the consumer (it raises ``error`` once the buffer is empty, if any)."""
        if self.closed:
            return
        self.closed = True
        self.error = error
        self.ready.set()
        if self.space is not None:
            self.space.set()
            self.space = None


def drop_unacked(inlets: Iterable[Inlet]) -> int:
    """A connection was lost: drop what client-ack subscriptions buffered; return how many messages that was.

    The broker redelivers those messages, and acking them on a new session
    would be wrong. Every inlet also forgets the lost reader's wake-up.
    """
    dropped = 0
    for sub in inlets:
        if sub.ack_mode != "auto" and sub.messages:
            dropped += len(sub.messages)
            sub.messages.clear()
        sub.space = None
    return dropped


class LiveSession:
    """The session of the link that is up (``protocol``), or None while no link is: shared by a client's inlets.

    A message may be acknowledged only on the session that delivered it; the
    subscription tests that against this one attribute, in the thread that acks,
    instead of asking the client (``tests/test_reconnect.py``: stale acks).
    """

    __slots__ = ("protocol",)

    def __init__(self) -> None:
        self.protocol: Any = None


class SubscriptionOps:
    """What a subscription asks of the client (its bound methods): the subscription never sees the client."""

    __slots__ = ("subscribe", "unsubscribe", "ack", "queue_ack", "check_ack", "live")

    def __init__(
        self,
        subscribe: Callable[[Inlet], Awaitable[None]],
        unsubscribe: Callable[[Inlet, bool], Awaitable[None]],
        ack: Callable[[str, Message, Optional[str], bool, Optional[Mapping[str, Any]]], Awaitable[None]],
        queue_ack: Callable[[Message], bool],
        check_ack: Callable[[Message, Inlet], None],
        live: LiveSession,
    ) -> None:
        #: SUBSCRIBE (and wait for its receipt if the inlet wants one); the session then fills the inlet
        self.subscribe = subscribe
        #: UNSUBSCRIBE ``(inlet, forget)``, bounded; the session forgets the inlet (with ``forget``, the
        #: broker deletes the durable subscription, confirmed by a receipt)
        self.unsubscribe = unsubscribe
        #: ACK or NACK ``(command, message, transaction, receipt)``, waiting as needed
        self.ack = ack
        #: the common ACK queued at once; False if it would have to wait
        self.queue_ack = queue_ack
        #: raise what an ACK of the message would be refused with (stale, auto mode...), send nothing
        self.check_ack = check_ack
        #: the session messages may be acknowledged on now
        self.live = live


class AsyncSubscription:
    """A subscription to one destination; use it as ``async with client.subscribe(...) as sub``.

    Iterate it (``async for message in sub``), or call :meth:`receive` /
    :meth:`receive_batch`. Leaving the ``async with`` block unsubscribes (a
    durable subscription stays on the broker: ``aclose(forget=True)`` deletes it);
    messages still in the local buffer are dropped. In ``auto`` mode the broker
    counted them as delivered; in the other modes it redelivers every unacked
    message (RabbitMQ only once the connection closes: it keeps a cancelled
    subscription's unacked messages on the connection; ActiveMQ at once).
    When the connection fails, the buffered messages are still handed out, then
    the failure is raised.
    """

    def __init__(
        self,
        ops: SubscriptionOps,
        destination: str,
        ack: str,
        headers: Optional[Dict[str, Any]],
        buffer_size: int,
        receipt: bool,
        id: Optional[str],
        durable: Optional[str] = None,
        implicit: bool = False,
    ) -> None:
        self._ops = ops
        # Bound once: the per-ack call skips a hop
        self._queue_ack = ops.queue_ack
        self._live = ops.live
        inlet = self._inlet = Inlet(self, destination, ack, headers, buffer_size, receipt, id, durable, implicit)
        # The same deque: the hot paths skip a hop
        self._buffer = inlet.messages
        self._pause_at = inlet.pause_at
        self.destination = destination
        self.ack_mode = ack
        self.headers = inlet.headers
        self.buffer_size = buffer_size
        #: the name of a durable subscription (``subscribe(..., durable=name)``), or None
        self.durable = durable
        # Client mode: every message up to this one is acknowledged
        self._acked = 0
        #: the blocking client's subscription whose threads take and settle these messages
        #: (:meth:`handoff`), or None: its SyncMessages' ``ack()`` goes there
        self.blocking: Any = None

    @property
    def id(self) -> Optional[str]:
        """The subscription id (given, or assigned by the session on SUBSCRIBE)."""
        return self._inlet.id

    # -- user side ---------------------------------------------------------------

    async def __aenter__(self) -> "AsyncSubscription":
        await self._ops.subscribe(self._inlet)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()

    def __aiter__(self) -> "AsyncSubscription":
        return self

    async def __anext__(self) -> Message:
        # next_buffered() inlined: this is the README loop's path for every message.
        buffer = self._buffer
        if buffer:
            message = buffer.popleft()
            inlet = self._inlet
            if inlet.space is not None and len(buffer) < self._pause_at:
                inlet.space.set()
                inlet.space = None
            return message
        try:
            return await self.receive()
        except ClientClosedError:
            if self._inlet.error is None:
                raise StopAsyncIteration from None
            raise

    async def receive(self) -> Message:
        """The next message; waits for one.

        Raises:
            ClientClosedError: the subscription was closed (by ``aclose``).
            ConnectionLostError, ServerError, HeartbeatTimeout: the connection
                failed (after every buffered message was handed out).
        """
        while True:
            message = self.next_buffered()
            if message is not None:
                return message
            await self.wait_buffered()

    def next_buffered(self) -> Optional[Message]:
        """The next buffered message, or None when none is buffered; never waits.

        For a loop that takes what is there and waits by other means otherwise
        (``consume``'s workers): a coroutine per message costs more than the message.
        """
        buffer = self._buffer
        if not buffer:
            return None
        message = buffer.popleft()
        inlet = self._inlet
        if inlet.space is not None and len(buffer) < self._pause_at:
            inlet.space.set()
            inlet.space = None
        return message

    async def wait_buffered(self) -> None:
        """Return once a message is buffered, or :meth:`wake` was called; waits no longer than that.

        With :meth:`next_buffered`, a loop that takes messages and can be told
        to stop while it waits (``consume``'s workers) without a cancel scope per
        wait. Raises as :meth:`receive` does once the subscription is closed and
        its buffer is empty.
        """
        if self._buffer:
            return
        inlet = self._inlet
        if inlet.closed:
            self._raise_closed()
        if inlet.ready.is_set():
            inlet.ready = anyio.Event()
        await inlet.ready.wait()

    def wake(self) -> None:
        """Wake every task waiting in :meth:`wait_buffered` (a waiting :meth:`receive` waits on)."""
        self._inlet.ready.set()

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
        inlet = self._inlet
        if inlet.space is not None and len(buffer) < self._pause_at:
            inlet.space.set()
            inlet.space = None
        return batch

    @property
    def pending(self) -> int:
        """Messages received and not yet taken."""
        return len(self._buffer)

    @property
    def closed(self) -> bool:
        return self._inlet.closed

    async def aclose(self, *, forget: bool = False) -> None:
        """Unsubscribe (if the connection is still up) and drop the buffered messages.

        A durable subscription stays on the broker, which keeps its messages for
        the next subscriber of that name; ``forget=True`` deletes it, and with it
        the messages it holds. Deleting needs the connection: it waits for the
        broker's receipt and raises what the broker answered (ServerError) or
        why it could not be sent (ConnectionLostError...); the subscription is
        closed here either way.
        """
        inlet = self._inlet
        if forget and self.durable is None:
            raise ConfigurationError(f"subscription {self.id!r} is not durable: forget=True has nothing to delete")
        if inlet.closed:
            if forget:
                raise ClientClosedError(f"subscription {self.id!r} is closed: it can no longer delete its durable"
                                        " subscription (open it again and aclose(forget=True))")
            return
        try:
            await self._ops.unsubscribe(inlet, forget)
        finally:
            inlet.close(None)
            self._buffer.clear()

    def _raise_closed(self) -> None:
        if self._inlet.error is not None:
            raise copy_error(self._inlet.error)
        raise ClientClosedError(f"subscription {self.id!r} to {self.destination!r} is closed")

    # -- ack / nack (Message.ack and Message.nack land here) -----------------------

    async def ack_message(
        self, message: Message, *, transaction: Optional[str] = None, receipt: bool = False,
        headers: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Acknowledge ``message``; in ``client`` mode this covers every earlier message too.

        STOMP: with ack mode client, "the ACK is cumulative"; acknowledging a
        message that an acknowledgement of a later one already covered is a no-op.
        ``headers``: extra ACK headers for the broker.
        """
        client_mode = self.ack_mode == "client"
        if client_mode and message.seq <= self._acked:
            return
        if not receipt and transaction is None and not headers and self._queue_ack(message):
            if client_mode:
                self._acked = message.seq
            return
        # Covered only once it was sent: a refused ACK (a stale message, a transaction
        # the broker does not honour) must not make a later ACK of the message a no-op.
        await self._ops.ack("ACK", message, transaction, receipt, headers)
        if client_mode and message.seq > self._acked:
            self._acked = message.seq

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
            if message.seq <= self._acked:
                return True
            if not self._queue_ack(message):
                return False
            self._acked = message.seq
            return True
        return self._queue_ack(message)

    async def nack_message(
        self, message: Message, *, transaction: Optional[str] = None, receipt: bool = False,
        headers: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Refuse ``message`` (the broker redelivers or dead-letters it); cumulative in ``client`` mode.

        ``headers``: extra NACK headers for the broker, e.g. RabbitMQ's ``{"requeue": "false"}``
        to dead-letter the message (or drop it, without a dead-letter exchange) instead of
        redelivering it.
        """
        client_mode = self.ack_mode == "client"
        if client_mode and message.seq <= self._acked:
            return
        await self._ops.ack("NACK", message, transaction, receipt, headers)
        if client_mode and message.seq > self._acked:
            self._acked = message.seq

    def check_ack(self, message: Message) -> None:
        """Raise what an ACK of ``message`` would be refused with, sending nothing.

        StaleMessageError for a message of a lost connection; LocalProtocolError
        for an ``auto`` subscription or one that is gone. The blocking client
        checks its queued acks here, in the calling thread, before queueing them.
        """
        if (
            message.owner is self
            and message.session is self._live.protocol
            and not self._inlet.closed
            and self.ack_mode != "auto"
            and message.ack_id is not None
        ):
            # The common case, a message of the live session (one test instead of building the ACK)
            return
        self._ops.check_ack(message, self._inlet)

    def deliver_as(self, message_class: type, oversized_class: type) -> None:
        """Before entering: the session makes this subscription's messages of these classes (the blocking
        client's SyncMessage, whose ``ack()`` blocks), so nothing re-classes them when a thread takes one."""
        self._inlet.message_classes = (message_class, oversized_class)

    def handoff(
        self, call_soon: Callable[[Callable[[], Any]], Any], loop_alive: Callable[[], bool], blocking: Any = None,
    ) -> "ThreadHandoff":
        """Hand this subscription's messages to threads instead of tasks (the blocking client's way in).

        From then on the messages are taken with the returned
        :class:`ThreadHandoff` from any thread; ``receive`` and iteration here
        are no longer used. ``call_soon(fn)`` must run ``fn()`` in this client's
        event loop, from any thread (``loop.call_soon_threadsafe``,
        ``TrioToken.run_sync_soon``); ``loop_alive()`` says whether that loop
        still runs (a thread waiting for a message checks it every second).
        ``blocking``: the blocking client's subscription that settles the messages.
        """
        self.blocking = blocking
        handoff = ThreadHandoff(self._inlet, call_soon, loop_alive)
        # The reader's set() now wakes threads
        self._inlet.ready = handoff
        return handoff

    def deliver_to(
        self, deliver: Callable[[Message], Any], ended: Callable[[Optional[BaseException]], Any]
    ) -> None:
        """Hand this subscription's messages to ``deliver(message)`` in the reader, as they arrive.

        No task takes them and nothing is buffered: the reader calls ``deliver``
        for each message of a read, then ``ended(error)`` once the subscription
        is closed (``error`` is None for a plain close). ``receive`` and
        iteration are no longer used. For a consumer whose every step is quick
        and synchronous (the reply channel matching replies to requests): a
        task in between would add a wake-up per message.
        """
        self._inlet.ready = DirectDelivery(self._inlet, deliver, ended)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._buffer)} buffered"
        return f"<AsyncSubscription {self.id!r} to {self.destination!r} ack={self.ack_mode} {state}>"


class DirectDelivery:
    """Stands in for an inlet's ``ready`` event: the reader's ``set()`` delivers what it buffered, at once.

    See :meth:`AsyncSubscription.deliver_to`.
    """

    __slots__ = ("_inlet", "_deliver", "_ended")

    def __init__(
        self, inlet: Inlet, deliver: Callable[[Message], Any], ended: Callable[[Optional[BaseException]], Any]
    ) -> None:
        self._inlet = inlet
        self._deliver = deliver
        self._ended = ended

    def set(self) -> None:
        """(The reader, in the loop.) Messages arrived or the subscription closed."""
        messages, deliver = self._inlet.messages, self._deliver
        while messages:
            deliver(messages.popleft())
        if self._inlet.closed:
            self._ended(self._inlet.error)

    def is_set(self) -> bool:
        return False


#: How often a thread waiting on the loop (a ThreadHandoff, the blocking client) checks that the loop still runs.
LOOP_CHECK_INTERVAL = 1.0


class WaitTimeout(Exception):
    """ThreadHandoff.take's timeout passed (not a TimeoutError: a failure can be one, HeartbeatTimeout)."""


class ThreadHandoff:
    """Threads take a subscription's messages here, without a task or a trip into the event loop.

    The reader appends each read's messages to the subscription's buffer in the
    loop and calls :meth:`set` (it stands in for the inlet's ``ready``
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
        sub: Inlet,
        call_soon: Callable[[Callable[[], Any]], Any],
        loop_alive: Callable[[], bool],
    ) -> None:
        self._sub = sub
        self._loop_alive = loop_alive
        self._buffer = sub.messages
        self._cond = threading.Condition(threading.Lock())
        # Threads inside wait(): only then does set() take the lock
        self._waiting = 0
        self._call_soon = call_soon
        # A _resume_reader is scheduled and has not run yet
        self._waking = False

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
        if self._sub.space is not None:
            self._reader_may_resume()
        return message

    def take_buffered(self) -> Optional[Message]:
        """The next buffered message, or None when none is buffered (no wait, no failure raised)."""
        try:
            message = self._buffer.popleft()
        except IndexError:
            return None
        if self._sub.space is not None:
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
        # Another thread took them first
        except IndexError:
            pass
        # An interrupt (KeyboardInterrupt) mid-batch: put them back, in order
        except BaseException:
            buffer.extendleft(reversed(batch))
            raise
        if self._sub.space is not None:
            self._reader_may_resume()
        return batch

    def pending(self) -> int:
        return len(self._buffer)

    def _wait(self, timeout: Optional[float]) -> Optional[Message]:
        sub, buffer = self._sub, self._buffer
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            # Before the buffer is looked at again: set() cannot be missed
            self._waiting += 1
            try:
                while True:
                    if buffer:
                        try:
                            return buffer.popleft()
                        # Taken by a thread that did not wait
                        except IndexError:
                            continue
                    if sub.closed:
                        break
                    wait = LOOP_CHECK_INTERVAL
                    if deadline is not None:
                        wait = min(wait, deadline - time.monotonic())
                        if wait <= 0:
                            raise WaitTimeout
                    if not self._cond.wait(wait) and not self._loop_alive():
                        raise ClientClosedError("the client's event loop stopped while waiting")
            finally:
                self._waiting -= 1
        if sub.error is not None:
            raise copy_error(sub.error)
        return None

    def _reader_may_resume(self) -> None:
        """(Any thread.) The reader waits for room: let the loop restart it once there is room.

        Only once the buffer is down to half its size: restarting it at the first
        free slot, as a task does for free, would cost a loop wake-up per message.
        """
        if not self._waking and len(self._buffer) <= self._sub.pause_at // 2:
            self._waking = True
            try:
                self._call_soon(self._resume_reader)
            # The loop is gone: nothing is reading any more
            except RuntimeError:
                self._waking = False

    def _resume_reader(self) -> None:
        """(In the loop.) Restart a reader stopped by this subscription's full buffer."""
        self._waking = False
        sub = self._sub
        space = sub.space
        if space is not None and len(sub.messages) <= sub.pause_at // 2:
            sub.space = None
            space.set()
