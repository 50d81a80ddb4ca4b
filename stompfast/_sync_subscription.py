"""Subscriptions of the sync client: :class:`Subscription` (threads take messages
from the async subscription's buffer, no crossing into the loop), :class:`SyncMessage`
(the received message, made of that class by the session: its ``ack()`` blocks) and :class:`CallbackWorker`
(the thread of a ``callback=`` subscription).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

import anyio

from ._client import AsyncClient
from ._protocol import Message, OversizedMessage
from ._subscription import AsyncSubscription, ThreadHandoff, WaitTimeout
from ._sync_loop import SyncLoop, check_timeout, timeout_error
from ._sync_outbox import ThreadOutbox
from .errors import (
    ClientClosedError,
    ConfigurationError,
    ReceiptTimeout,
    ReceiveTimeout,
    StompError,
    StompTimeout,
)

log = logging.getLogger("stompfast")

#: Messages a callback thread takes from its subscription per crossing into the loop.
CALLBACK_BATCH = 100

Callback = Callable[["SyncMessage"], Any]
ErrorHandler = Callable[[BaseException, Optional["SyncMessage"]], Any]


class SyncMessage(Message):
    """A :class:`~stompfast.Message` from a sync subscription: ``ack()`` and ``nack()`` block.

    Everything else (``body``, ``text``, ``headers``, ``destination``,
    ``message_id``, ``ack_id``, ...) is a :class:`~stompfast.Message`'s: the session
    makes a blocking subscription's MESSAGEs of this class as they arrive (the
    subscription asked for it before its SUBSCRIBE: ``AsyncSubscription.deliver_as``),
    so a thread hands them out as they are; ``ack()`` goes to the :class:`Subscription`
    it came through (its owner's ``blocking``).
    """

    __slots__ = ()

    def ack(  # type: ignore[override]  # the blocking twin: it returns once done, nothing to await
        self, *, transaction: Optional[str] = None, receipt: bool = False, timeout: Optional[float] = None,
        headers: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Acknowledge the message (cumulative in ``client`` mode); see :meth:`Subscription.ack_message`."""
        self.owner.blocking.ack_message(
            self, transaction=transaction, receipt=receipt, timeout=timeout, headers=headers
        )

    def nack(  # type: ignore[override]  # the blocking twin: it returns once done, nothing to await
        self, *, transaction: Optional[str] = None, receipt: bool = False, timeout: Optional[float] = None,
        headers: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Refuse the message (STOMP 1.1+); see :meth:`Subscription.nack_message`."""
        self.owner.blocking.nack_message(
            self, transaction=transaction, receipt=receipt, timeout=timeout, headers=headers
        )


class SyncOversizedMessage(OversizedMessage, SyncMessage):
    """An :class:`~stompfast.OversizedMessage` from a sync subscription: ``ack()`` and ``nack()`` block."""

    __slots__ = ()


async def open_subscription(
    client: AsyncClient, destination: str, kwargs: Dict[str, Any]
) -> AsyncSubscription:
    """Create and enter an AsyncSubscription; unsubscribe again if entering fails or times out."""
    sub = client.subscribe(destination, **kwargs)
    # Made of the blocking classes by the session itself: a thread hands them out as they are
    sub.deliver_as(SyncMessage, SyncOversizedMessage)
    try:
        await sub.__aenter__()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await sub.aclose()
        raise
    return sub


class Subscription:
    """A subscription of a sync :class:`Client`: ``with client.subscribe(dest) as sub: for msg in sub: ...``.

    Iterate it, or call :meth:`receive` / :meth:`receive_batch` (alias
    :meth:`receive_many`); they may be called from several threads at once,
    each message going to one of them. Iteration ends when the subscription or
    the client is closed, and raises the connection's failure after the
    buffered messages were handed out. :meth:`close` (or leaving the ``with``
    block) unsubscribes and drops the buffered messages.

    With ``callback=`` the messages go to the callback in the subscription's
    own thread instead, and ``receive`` and iteration are refused.
    """

    def __init__(
        self,
        client: AsyncClient,
        loop: SyncLoop,
        outbox: ThreadOutbox,
        sub: AsyncSubscription,
        worker: Optional["CallbackWorker"] = None,
    ) -> None:
        self._client = client
        self._loop = loop
        # Where receipt-less ACKs are queued
        self._outbox = outbox
        self._async = sub
        # Threads take the messages straight from the async buffer (no crossing into the loop)
        self._handoff = sub.handoff(loop.call_soon, loop.thread.is_alive, self)  # type: ignore[union-attr]
        # The callback thread (with ``callback=``), or None
        self._worker = worker
        if worker is not None:
            worker.attach(self, self._handoff, sub)

    # -- what the async subscription knows -------------------------------------------------

    @property
    def destination(self) -> str:
        return self._async.destination

    @property
    def ack_mode(self) -> str:
        return self._async.ack_mode

    @property
    def headers(self) -> Dict[str, Any]:
        """Your SUBSCRIBE headers (the prefetch and routing headers its broker reads are added when it is written)."""
        return self._async.headers

    @property
    def buffer_size(self) -> int:
        return self._async.buffer_size

    @property
    def durable(self) -> Optional[str]:
        """The name of a durable subscription, or None."""
        return self._async.durable

    @property
    def id(self) -> Optional[str]:
        return self._async.id

    @property
    def pending(self) -> int:
        """Messages received and not yet taken."""
        return self._async.pending

    @property
    def closed(self) -> bool:
        return self._async.closed

    # -- pulling messages -------------------------------------------------------------------

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __iter__(self) -> "Subscription":
        return self

    def __next__(self) -> SyncMessage:
        if self._worker is not None:
            self._check_pull()
        try:
            message = self._handoff.take(None)
        # The client's loop stopped under the wait: iteration ends
        except ClientClosedError:
            message = None
        if message is None:
            raise StopIteration
        return message  # type: ignore[return-value]

    def receive(self, *, timeout: Optional[float] = None) -> SyncMessage:
        """The next message; waits for one.

        Raises:
            ReceiveTimeout: none came within ``timeout`` (no message is lost:
                one arriving later is there for the next call).
            ClientClosedError: the subscription or the client was closed.
            ConnectionLostError, ServerError, HeartbeatTimeout: the connection
                failed (after every buffered message was handed out).
        """
        self._check_pull()
        return self._take(1, check_timeout(timeout))[0]

    def next_buffered(self) -> Optional[SyncMessage]:
        """The next buffered message, or None when none is buffered; never waits.

        For a loop that takes what is there and waits by other means otherwise
        (``consume``'s threads): :meth:`receive` then waits when this says None.
        """
        if self._worker is not None:
            self._check_pull()
        message = self._handoff.take_buffered()
        if message is None:
            return None
        return message  # type: ignore[return-value]

    def receive_batch(self, max_messages: int = 100, *, timeout: Optional[float] = None) -> List[SyncMessage]:
        """Up to ``max_messages`` messages: what is buffered, waiting only for the first.

        Raises like :meth:`receive` (ReceiveTimeout when not even one came).
        """
        if type(max_messages) is not int or max_messages < 1:
            raise ConfigurationError(f"max_messages must be a positive int, not {max_messages!r}")
        self._check_pull()
        return self._take(max_messages, check_timeout(timeout))

    def receive_many(self, max_messages: int = 100, *, timeout: Optional[float] = None) -> List[SyncMessage]:
        """Same as :meth:`receive_batch`."""
        return self.receive_batch(max_messages, timeout=timeout)

    def _check_pull(self) -> None:
        if self._worker is not None:
            raise ConfigurationError(
                f"subscription {self.id!r} delivers its messages to its callback; subscribe without"
                " callback= to receive or iterate"
            )

    def _take(self, max_messages: int, timeout: Optional[float]) -> List[SyncMessage]:
        """Up to ``max_messages`` messages as SyncMessages, waiting up to ``timeout`` for the first."""
        try:
            batch = self._handoff.take_batch(max_messages, timeout)
        except WaitTimeout:
            raise ReceiveTimeout(
                f"no message on {self.destination!r} within {timeout:g} s",
                destination=self.destination,
                timeout=timeout,
            ) from None
        # Closed without a failure (a failure was raised by take_batch)
        if not batch:
            raise ClientClosedError(f"subscription {self.id!r} to {self.destination!r} is closed")
        return batch  # type: ignore[return-value]

    # -- acknowledging ----------------------------------------------------------------------

    def ack_message(
        self,
        message: Message,
        *,
        transaction: Optional[str] = None,
        receipt: bool = False,
        timeout: Optional[float] = None,
        headers: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Acknowledge ``message``; in ``client`` mode this covers every earlier message too.

        Without ``receipt``, ``transaction`` or ``headers`` the ACK is queued with
        the client's other receipt-less frames and written by the loop in order (no
        wait); a message from an ended connection, or an ``auto`` subscription's,
        is refused here at once. A second ack or nack of one message raises
        :class:`~stompfast.AlreadySettledError`, before anything is sent.
        ``headers``: extra ACK headers for the broker.
        """
        if not receipt and transaction is None and headers is None:
            self._outbox.queue_ack(self._async, message, timeout)
            return
        self._loop.call(
            functools.partial(
                self._async.ack_message, message, transaction=transaction, receipt=receipt, headers=headers
            ),
            check_timeout(timeout),
            timeout_error(ReceiptTimeout if receipt else StompTimeout, "ACK not confirmed", timeout),
        )

    def nack_message(
        self,
        message: Message,
        *,
        transaction: Optional[str] = None,
        receipt: bool = False,
        timeout: Optional[float] = None,
        headers: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Refuse ``message`` (the broker redelivers or dead-letters it); cumulative in ``client`` mode.

        ``headers``: extra NACK headers for the broker, e.g. RabbitMQ's ``{"requeue": "false"}``.
        """
        self._loop.call(
            functools.partial(
                self._async.nack_message, message, transaction=transaction, receipt=receipt, headers=headers
            ),
            check_timeout(timeout),
            timeout_error(ReceiptTimeout if receipt else StompTimeout, "NACK not confirmed", timeout),
        )

    # -- closing ------------------------------------------------------------------------------

    def close(self, *, forget: bool = False) -> None:
        """Unsubscribe (if the connection is still up), drop the buffered messages, stop the callback thread.

        A callback running now is finished first (unless ``close`` is called by
        the callback itself). Idempotent and safe after a failure.

        A durable subscription stays on the broker; ``forget=True`` deletes it
        (see :meth:`AsyncSubscription.aclose`): that waits for the broker's
        receipt (within the client's ``disconnect_timeout``) and raises what
        went wrong instead of passing over it.
        """
        if forget and self._async.durable is None:
            raise ConfigurationError(f"subscription {self.id!r} is not durable: forget=True has nothing to delete")
        worker = self._worker
        if worker is not None:
            worker.stopping = True
        # Bounds the whole close, like the client's
        budget = self._client.disconnect_timeout
        deadline = time.monotonic() + budget
        # Queued ACKs go out before the UNSUBSCRIBE
        self._outbox.write_before_closing(budget)
        try:
            self._loop.call(
                functools.partial(self._async.aclose, forget=forget),
                max(deadline - time.monotonic(), 0.001),
                lambda: StompTimeout(f"UNSUBSCRIBE of {self.id!r} not done within {budget:g} s"),
            )
        except StompError:
            # the client is closed, the connection failed, or the broker is not reading:
            # either way the subscription is gone here (its aclose ran to its finally);
            # a durable subscription that was to be deleted may not be, which the caller must know
            if forget:
                raise
        finally:
            if worker is not None:
                worker.join()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.pending} pending"
        mode = " callback" if self._worker is not None else ""
        return f"<Subscription {self.id!r} to {self.destination!r} ack={self.ack_mode}{mode} {state}>"


class CallbackWorker:
    """The thread of a ``callback=`` subscription: it takes batches and calls ``callback(message)``.

    Made by :meth:`Client.subscribe`, attached to its :class:`Subscription`,
    started once the client tracks it; ``stopping`` (set by a close) drops what
    it took and did not deliver yet, and :meth:`join` waits for it and calls
    ``forget(self)`` so the client stops tracking it.
    """

    def __init__(
        self,
        callback: Callback,
        on_error: Optional[ErrorHandler],
        loop: SyncLoop,
        forget: Callable[["CallbackWorker"], None],
    ) -> None:
        self.callback = callback
        self.on_error = on_error
        self.stopping = False
        self.thread: Optional[threading.Thread] = None
        self._loop = loop
        self._forget = forget
        self._subscription: Optional[Subscription] = None
        self._handoff: Optional[ThreadHandoff] = None
        self._async: Optional[AsyncSubscription] = None

    def attach(self, subscription: Subscription, handoff: ThreadHandoff, sub: AsyncSubscription) -> None:
        """(Subscription.__init__.) The subscription it delivers for, its hand-off and async subscription."""
        self._subscription = subscription
        self._handoff = handoff
        self._async = sub

    def start(self) -> None:
        assert self._subscription is not None
        thread = threading.Thread(
            target=self._deliver, name=f"stompfast-callback-{self._subscription.id}", daemon=True
        )
        self.thread = thread
        thread.start()

    def join(self) -> None:
        """Wait for the thread to end (unless called from it), then have the client forget it."""
        thread = self.thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._forget(self)

    def _deliver(self) -> None:
        callback = self.callback
        subscription, handoff, sub = self._subscription, self._handoff, self._async
        assert subscription is not None and handoff is not None and sub is not None
        failure: Optional[BaseException] = None
        try:
            while not self.stopping:
                try:
                    batch = handoff.take_batch(CALLBACK_BATCH, None)
                except ClientClosedError:
                    # The client was closed (its loop stopped)
                    return
                except StompError as exc:
                    # The connection failed
                    failure = exc
                    return
                if not batch:
                    return
                for message in batch:
                    if self.stopping:
                        return
                    try:
                        callback(message)  # type: ignore[arg-type]  # (a SyncMessage: deliver_as)
                    except Exception as exc:
                        self._report(exc, message)  # type: ignore[arg-type]
        # SystemExit, KeyboardInterrupt... from a callback: stop clearly
        except BaseException as exc:
            failure = exc
        finally:
            if failure is not None:
                self._report(failure, None)
                # Tell the broker to stop sending to a consumer that is gone
                if not self.stopping:
                    try:
                        self._loop.call(sub.aclose)
                    except StompError:
                        pass

    def _report(self, error: BaseException, message: Optional[SyncMessage]) -> None:
        subscription = self._subscription
        assert subscription is not None
        handler = self.on_error
        if handler is not None:
            try:
                handler(error, message)
                return
            except Exception:
                log.exception(
                    "the on_error handler of subscription %r to %r raised", subscription.id, subscription.destination
                )
        if message is not None:
            log.error(
                "the callback of subscription %r to %r raised on message %r; delivery goes on",
                subscription.id,
                subscription.destination,
                message.message_id,
                exc_info=error,
            )
        else:
            log.error(
                "subscription %r to %r stopped delivering to its callback",
                subscription.id,
                subscription.destination,
                exc_info=error,
            )
