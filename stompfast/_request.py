"""Request/reply: one reply destination per client, and the requests waiting on it.

``await client.request(destination, body)`` sends with ``reply-to`` (the client's
reply destination, of the kind its broker offers: :func:`~stompfast._brokers.reply_destination`)
and a fresh ``correlation-id``, and waits for the reply that carries it back.
:class:`ReplyChannel` owns the reply subscription and the pending requests by
correlation id; a pump task in the client's task group hands each reply to its
request. A reply nobody waits for (it came after its request timed out) is
dropped and counted. When the connection is lost, every pending request fails
with that error: its reply would go to a destination of the lost connection.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any, Dict, Mapping, Optional, Tuple

import anyio

from ._common import copy_error
from ._events import Message
from ._subscription import AsyncSubscription
from .errors import ClientClosedError, LocalProtocolError, StompError

__all__ = ["PendingReply", "ReplyChannel", "reply_to"]


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
    """One request's wait for its reply."""

    __slots__ = ("event", "message", "error")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.message: Optional[Message] = None
        self.error: Optional[BaseException] = None

    async def wait(self) -> Message:
        await self.event.wait()
        if self.error is not None:
            raise copy_error(self.error)
        assert self.message is not None
        return self.message


class ReplyChannel:
    """A client's reply destination, its subscription, and the requests waiting for replies."""

    __slots__ = ("destination", "subscription", "pending", "ids", "prefix", "late", "ready", "error")

    def __init__(self, destination: str, subscription: AsyncSubscription) -> None:
        #: the ``reply-to`` every request carries
        self.destination = destination
        self.subscription = subscription
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
        pending = self.pending[correlation_id] = PendingReply()
        return correlation_id, pending

    def forget(self, correlation_id: str) -> None:
        self.pending.pop(correlation_id, None)

    def deliver(self, message: Message) -> None:
        """A reply arrived: hand it to its request, or count it late."""
        pending = self.pending.pop(message.headers.get("correlation-id", ""), None)
        if pending is None:
            self.late += 1
            return
        pending.message = message
        pending.event.set()

    def fail_all(self, error: BaseException) -> None:
        """Every pending request fails with ``error`` (the connection that would carry the replies ended)."""
        pending, self.pending = self.pending, {}
        for waiter in pending.values():
            waiter.error = error
            waiter.event.set()

    async def pump(self) -> None:
        """(A task in the client's task group.) Hand every reply to its request until the subscription ends."""
        try:
            async for message in self.subscription:
                self.deliver(message)
            self.fail_all(ClientClosedError("the client is closed: no reply can come"))
        except StompError as exc:
            self.fail_all(exc)
