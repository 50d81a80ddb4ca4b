"""The events :meth:`StompProtocol.receive_data <stompfast._protocol.StompProtocol.receive_data>` returns.

:class:`Connected`, :class:`ReceiptReceived`, :class:`ErrorReceived` and
:class:`Message` (the one users see, as ``stompfast.Message``). Like the
protocol core, nothing here imports anyio, asyncio, socket or time.
"""

from __future__ import annotations

from typing import Any, Awaitable, Mapping, Optional, Tuple, Union

from .errors import AlreadySettledError, LocalProtocolError, MessageTooLargeError, ServerError
from .frames import Frame

__all__ = [
    "Connected", "ErrorReceived", "Event", "Message", "OversizedMessage", "ReceiptReceived", "message_or_oversized",
]


class Connected:
    """The broker accepted the session (a CONNECTED frame)."""

    __slots__ = ("version", "server", "session", "heart_beat", "headers")

    def __init__(
        self, version: str, server: Optional[str], session: Optional[str], heart_beat: Tuple[int, int],
        headers: Mapping[str, str],
    ) -> None:
        self.version = version
        self.server = server
        self.session = session
        #: negotiated ``(send_ms, receive_ms)``: how often we must send, how often the broker will
        self.heart_beat = heart_beat
        self.headers = headers

    def __repr__(self) -> str:
        return f"Connected(version={self.version!r}, server={self.server!r}, heart_beat={self.heart_beat})"


class ReceiptReceived:
    """The broker confirmed the frame that carried ``receipt_id``."""

    __slots__ = ("receipt_id",)

    def __init__(self, receipt_id: str) -> None:
        self.receipt_id = receipt_id

    def __repr__(self) -> str:
        return f"ReceiptReceived({self.receipt_id!r})"


class ErrorReceived:
    """The broker sent an ERROR frame; ``error`` is the exception to raise for it.

    STOMP: "the server MUST then close the connection just after sending the
    ERROR frame", so the session is failed after this event, unless
    ``ends_session`` is false: an ERROR the broker is known to send while it keeps
    the connection (``ERRORS_THAT_KEEP_THE_SESSION`` in ``_brokers.py``), after
    which the session goes on.
    """

    __slots__ = ("error", "ends_session")

    def __init__(self, error: ServerError, ends_session: bool = True) -> None:
        self.error = error
        self.ends_session = ends_session

    @property
    def receipt_id(self) -> Optional[str]:
        return self.error.receipt_id

    def __repr__(self) -> str:
        if self.ends_session:
            return f"ErrorReceived({self.error!r})"
        return f"ErrorReceived({self.error!r}, ends_session=False)"


#: ``Message.settled`` while a blocking client's ACK is queued in the calling thread and
#: not yet encoded (the encoder makes it "ACK").
ACK_QUEUED = "ACK (queued)"


class Message:
    """A MESSAGE delivered to a subscription.

    ``body`` is the bytes as received (never decoded or altered); ``text``
    decodes it as UTF-8. ``ack()`` and ``nack()`` are provided by the client the
    message came through (they are awaitable on the async client).
    """

    # The client's bookkeeping, public so that its modules can share it (not user API):
    # session: the StompProtocol the message was delivered on (an ACK on a later one is stale);
    # owner: the subscription that acks it; seq: its delivery number on that subscription;
    # settled: None, or "ACK"/"NACK" once ack() or nack() was called (a second call is refused).
    __slots__ = (
        "frame", "subscription", "message_id", "ack_id", "session", "owner", "seq", "settled", "__weakref__"
    )
    #: True for a message over ``max_frame_bytes`` that was skipped unread
    #: (:class:`OversizedMessage`): its ``body`` and ``text`` raise, ``ack()`` and ``nack()`` work.
    oversized = False

    def __init__(
        self, frame: Frame, subscription: str, message_id: Optional[str], ack_id: Optional[str], session: Any
    ) -> None:
        self.frame = frame
        #: the id of the subscription the message came through
        self.subscription = subscription
        self.message_id = message_id
        #: what an ACK or NACK must name: the ``ack`` header on 1.2, the message-id before
        self.ack_id = ack_id
        self.session = session
        self.owner: Any = None
        self.seq = 0
        self.settled: Optional[str] = None

    @property
    def body(self) -> bytes:
        return self.frame[2]

    @property
    def headers(self) -> Mapping[str, str]:
        return self.frame.headers

    @property
    def destination(self) -> Optional[str]:
        return self.frame[1].get("destination")

    @property
    def content_type(self) -> Optional[str]:
        return self.frame[1].get("content-type")

    @property
    def redelivered(self) -> bool:
        """True when the broker says it delivered this message before (``redelivered:true``)."""
        return self.frame[1].get("redelivered") == "true"

    @property
    def text(self) -> str:
        return self.frame[2].decode("utf-8")

    def claim_settle(self, command: str, *, queued: bool = False) -> None:
        """Mark the message settled by ``command`` (``"ACK"`` or ``"NACK"``); refuse a second settle.

        Called where the ACK or NACK is encoded, after every other refusal (a
        refused call leaves the message unsettled), or, for the blocking client's
        queued ACK, in the calling thread (``ACK_QUEUED``, taken over by the
        encoder with ``queued=True``).

        Raises:
            AlreadySettledError: ack() or nack() was called on it before.
        """
        settled = self.settled
        if settled is not None and not (queued and settled is ACK_QUEUED):
            raise AlreadySettledError(
                f"message {self.message_id!r} was already settled ({settled.split()[0]}): a second {command} is"
                " refused (RabbitMQ would close the connection for it)",
                message_id=self.message_id,
                settled=settled.split()[0],
            )
        self.settled = command

    def ack(
        self, *, transaction: Optional[str] = None, receipt: bool = False,
        headers: Optional[Mapping[str, Any]] = None,
    ) -> Awaitable[None]:
        """Acknowledge the message: ``await msg.ack()`` (the blocking client's SyncMessage: ``msg.ack()``).

        A message is settled once: a second ``ack()`` or ``nack()`` raises
        :class:`~stompfast.AlreadySettledError` before anything is sent, whatever
        became of the first (a call refused before sending does not count).
        ``headers``: extra ACK headers for the broker (the ones that name the
        message, the transaction or the receipt are the client's: giving one
        raises LocalProtocolError).
        """
        owner = self.owner
        if owner is None:
            raise LocalProtocolError("this message is not attached to a subscription that can ack it")
        done: Awaitable[None]
        if transaction is None and not receipt and headers is None:
            done = owner.ack_message(self)
        else:
            done = owner.ack_message(self, transaction=transaction, receipt=receipt, headers=headers)
        return done

    def nack(
        self, *, transaction: Optional[str] = None, receipt: bool = False,
        headers: Optional[Mapping[str, Any]] = None,
    ) -> Awaitable[None]:
        """Refuse the message (STOMP 1.1+): ``await msg.nack()`` (SyncMessage: ``msg.nack()``).

        Settles the message once, as :meth:`ack` does. ``headers``: extra NACK
        headers for the broker, e.g. ``{"requeue": "false"}``: RabbitMQ then
        dead-letters the message (or drops it, without a dead-letter exchange)
        instead of redelivering it (docs/brokers.md).
        """
        if self.owner is None:
            raise LocalProtocolError("this message is not attached to a subscription that can nack it")
        done: Awaitable[None] = self.owner.nack_message(
            self, transaction=transaction, receipt=receipt, headers=headers
        )
        return done

    def __repr__(self) -> str:
        body = self.frame[2]
        shown = body if len(body) <= 40 else body[:40] + b"..."
        return f"<Message {self.message_id!r} on {self.destination!r} via {self.subscription!r}: {shown!r}>"

class OversizedMessage(Message):
    """A MESSAGE over ``max_frame_bytes``, skipped unread: headers only, ack or nack it.

    The client counted its body off the wire (its ``content-length`` said where
    it ended) so that the connection could go on. ``oversized`` is True;
    ``body`` and ``text`` raise :class:`~stompfast.MessageTooLargeError` (so
    code that does not look at ``oversized`` cannot take it for an empty
    message); ``headers``, ``message_id``, ``destination`` and ``ack()`` /
    ``nack()`` are a message's.
    """

    __slots__ = ()
    oversized = True

    @property
    def size(self) -> int:
        """The skipped body's size in bytes (its ``content-length``)."""
        return int(self.frame[1]["content-length"])

    @property
    def error(self) -> MessageTooLargeError:
        """The error ``body`` raises: what was skipped, and how big it was."""
        headers = self.frame[1]
        limit = self.session.max_frame_bytes if self.session is not None else 0
        size = self.size
        return MessageTooLargeError(
            f"message {self.message_id!r} on {headers.get('destination')!r} (subscription"
            f" {self.subscription!r}) has a {size}-byte body, over max_frame_bytes={limit}: it was"
            " skipped unread; ack or nack the message so the broker does not redeliver it",
            headers=dict(headers),
            message_id=self.message_id,
            ack_id=self.ack_id,
            destination=headers.get("destination"),
            subscription=self.subscription,
            size=size,
            limit=limit,
            skipped_message=self,
        )

    @property
    def body(self) -> bytes:
        raise self.error

    @property
    def text(self) -> str:
        raise self.error

    def __repr__(self) -> str:
        return (
            f"<OversizedMessage {self.message_id!r} on {self.destination!r} via {self.subscription!r}:"
            f" {self.size} bytes skipped>"
        )


def message_or_oversized(
    frame: Frame, subscription: str, message_id: Optional[str], ack_id: Optional[str], session: Any
) -> Message:
    """The event of a MESSAGE in a feed that skipped a frame: an OversizedMessage for the skipped one.

    The session builds the events of other feeds with :class:`Message` itself, with no
    test per message: only a feed that skipped a frame can hold one to deliver unread.
    """
    cls = Message if type(frame) is Frame else OversizedMessage
    return cls(frame, subscription, message_id, ack_id, session)


Event = Union[Connected, Message, ReceiptReceived, ErrorReceived]
