"""Request/reply: one reply destination per client, and the requests waiting on it.

``await client.request(destination, body)`` sends with ``reply-to`` (the client's
reply destination, of the kind its broker offers: :func:`~stompfast._brokers.reply_destination`)
and a fresh ``correlation-id``, and waits for the reply that carries it back.
:class:`ReplyChannel` owns the reply subscription and the pending requests by
correlation id; the reader hands each reply to its request as it arrives (no
task in between); :class:`Requester` is the service itself, opening the channel at
the first request. A reply nobody waits for (it came after its request timed out) is
dropped and counted. When the connection is lost, every pending request fails
with that error: its reply would go to a destination of the lost connection.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any, Awaitable, Callable, Dict, Mapping, Optional, Tuple

import anyio

from ._brokers import MAX_TTL
from ._common import copy_error
from ._events import Message
from ._subscription import AsyncSubscription
from .errors import ClientClosedError, LocalProtocolError, RequestTimeout

__all__ = ["PendingReply", "ReplyChannel", "Requester", "reply_to"]


def reply_to(request: Message, headers: Optional[Mapping[str, Any]]) -> Tuple[str, Dict[str, Any]]:
    """Where a reply to ``request`` goes and its headers (``correlation-id`` copied; both clients' ``reply``).

    Raises LocalProtocolError when the request has no ``reply-to`` header.
    """
    destination = request.headers.get("reply-to")
    if not destination:
        raise LocalProtocolError(f"message {request.message_id!r} has no reply-to header: there is nobody to reply to")
    reply_headers = dict(headers) if headers else {}
    correlation_id = request.headers.get("correlation-id")
    if correlation_id is not None:
        reply_headers.setdefault("correlation-id", correlation_id)
    return destination, reply_headers


class PendingReply:
    """One request's wait for its reply.

    On asyncio (``loop`` given) the wait is a bare loop future with a timer for
    the timeout, elsewhere an anyio Event under a cancel scope: a cancel scope and
    an anyio Event per request cost more on asyncio than the rest of the request.
    """

    __slots__ = ("_loop", "_waiter", "_message", "_error")

    def __init__(self, loop: Any = None) -> None:
        self._loop = loop
        self._waiter: Any = loop.create_future() if loop is not None else anyio.Event()
        self._message: Optional[Message] = None
        self._error: Optional[BaseException] = None

    def resolve(self, message: Message) -> None:
        """(The reader.) The reply came."""
        if self._message is None and self._error is None:
            self._message = message
            self._wake()

    def fail(self, error: BaseException) -> None:
        """No reply can come: the wait raises ``error``."""
        if self._message is None and self._error is None:
            self._error = error
            self._wake()

    def _wake(self) -> None:
        if self._loop is None:
            self._waiter.set()
        elif not self._waiter.done():
            self._waiter.set_result(None)

    async def wait(self, timeout: float) -> Optional[Message]:
        """The reply, or None when none came within ``timeout`` seconds; raises what made it impossible."""
        if self._message is None and self._error is None:
            if self._loop is not None:
                waiter = self._waiter
                timer = self._loop.call_later(timeout, _time_out, waiter)
                try:
                    await waiter
                finally:
                    timer.cancel()
            else:
                with anyio.move_on_after(timeout):
                    await self._waiter.wait()
        if self._error is not None:
            raise copy_error(self._error)
        return self._message


def _time_out(waiter: Any) -> None:
    """(A loop timer.) The request's timeout passed: its wait returns without a reply."""
    if not waiter.done():
        waiter.set_result(None)


class ReplyChannel:
    """A client's reply destination, its subscription, and the requests waiting for replies.

    The subscription delivers straight from the reader (``deliver_to``): each reply
    is matched to its request in the read that brought it, with no task in between.
    """

    __slots__ = ("destination", "subscription", "pending", "ids", "prefix", "late", "ready", "error", "loop")

    def __init__(self, destination: str, subscription: AsyncSubscription, loop: Any = None) -> None:
        #: the ``reply-to`` every request carries
        self.destination = destination
        self.subscription = subscription
        # The asyncio loop the waits are futures of (None elsewhere: see PendingReply).
        self.loop = loop
        # Pending requests by correlation id.
        self.pending: Dict[str, PendingReply] = {}
        self.ids = itertools.count(1)
        # Unique per client, so that replies meant for another client are never taken for ours.
        self.prefix = uuid.uuid4().hex[:12]
        #: replies that came for no pending request (after its timeout): dropped
        self.late = 0
        # Set once the subscription is open (or could not be opened: ``error``).
        self.ready = anyio.Event()
        self.error: Optional[BaseException] = None
        subscription.deliver_to(self.deliver, self.ended)

    def opened(self) -> None:
        """The reply subscription is open: requests waiting for the channel go on."""
        self.ready.set()

    def not_opened(self, error: BaseException) -> None:
        """The reply subscription could not be opened: requests waiting for the channel raise ``error``."""
        self.error = error
        self.ready.set()

    def expect(self) -> "tuple[str, PendingReply]":
        """A new correlation id and the wait for its reply."""
        correlation_id = f"{self.prefix}-{next(self.ids)}"
        pending = self.pending[correlation_id] = PendingReply(self.loop)
        return correlation_id, pending

    def forget(self, correlation_id: str) -> None:
        self.pending.pop(correlation_id, None)

    def deliver(self, message: Message) -> None:
        """(The reader.) A reply arrived: hand it to its request, or count it late."""
        pending = self.pending.pop(message.headers.get("correlation-id", ""), None)
        if pending is None:
            self.late += 1
        else:
            pending.resolve(message)

    def ended(self, error: Optional[BaseException]) -> None:
        """(The reader.) The reply subscription ended: no reply can come to the pending requests."""
        self.fail_all(error if error is not None else ClientClosedError("the client is closed: no reply can come"))

    def fail_all(self, error: BaseException) -> None:
        """Every pending request fails with ``error`` (the connection that would carry the replies ended)."""
        pending, self.pending = self.pending, {}
        for waiter in pending.values():
            waiter.fail(error)


class Requester:
    """A client's request/reply service: :meth:`request` over the reply channel it opens at the first request.

    Args:
        send: the client's ``send`` (the request goes out as any message does).
        ensure_open: the client's wait for a live connection (raises when there is none).
        new_channel: the client's reply channel on the live connection (its
            subscription not entered yet): made at the first request.
    """

    __slots__ = ("_send", "_ensure_open", "_new_channel", "_channel")

    def __init__(
        self,
        send: Callable[..., Awaitable[Any]],
        ensure_open: Callable[[], Awaitable[None]],
        new_channel: Callable[[], ReplyChannel],
    ) -> None:
        self._send = send
        self._ensure_open = ensure_open
        self._new_channel = new_channel
        self._channel: Optional[ReplyChannel] = None

    @property
    def late(self) -> int:
        """Replies that came after their request gave up (dropped)."""
        return self._channel.late if self._channel is not None else 0

    def fail_all(self, error: BaseException) -> None:
        """The connection ended: every pending request fails with ``error``; the next request opens a new channel."""
        if self._channel is not None:
            self._channel.fail_all(error)

    async def request(
        self, destination: str, body: Any, *, timeout: float, headers: Optional[Mapping[str, Any]],
        content_type: Optional[str],
    ) -> Message:
        """Send a request with ``reply-to`` and a fresh ``correlation-id``; the reply (AsyncClient.request)."""
        channel = self._channel
        # Open (its ready event set, no error): no wait, not even a checkpoint.
        if channel is None or not channel.ready.is_set() or channel.error is not None:
            channel = await self._open()
        correlation_id, pending = channel.expect()
        request_headers = dict(headers) if headers else {}
        request_headers["reply-to"] = channel.destination
        request_headers["correlation-id"] = correlation_id
        try:
            # It expires when the requester stops waiting for its reply
            await self._send(
                destination, body, headers=request_headers, content_type=content_type, ttl=min(timeout, MAX_TTL)
            )
            reply = await pending.wait(timeout)
        finally:
            channel.forget(correlation_id)
        if reply is None:
            raise RequestTimeout(
                f"no reply from {destination!r} within {timeout:g} s (correlation-id {correlation_id})",
                destination=destination, correlation_id=correlation_id, timeout=timeout,
            )
        return reply

    async def _open(self) -> ReplyChannel:
        """The reply channel, opened at the first request (concurrent first requests share it)."""
        if self._channel is None:
            await self._ensure_open()
        channel = self._channel
        if channel is None:
            channel = self._channel = self._new_channel()
            try:
                await channel.subscription.__aenter__()
            except BaseException as exc:
                self._channel = None
                channel.not_opened(exc)
                raise
            channel.opened()
        else:
            await channel.ready.wait()
            if channel.error is not None:
                raise copy_error(channel.error)
        return channel
