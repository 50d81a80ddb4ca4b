"""The stompfast exception tree.

Every exception stompfast raises on purpose derives from :class:`StompError`.
Where a builtin exception describes the same situation, the stompfast class also
derives from it, so ``except TimeoutError`` or ``except ConnectionError`` keep
working in code that does not know about stompfast::

    StompError
    ├── ConfigurationError (ValueError)        bad argument, URL or option
    ├── ProtocolError                          abstract: a rule of STOMP was broken
    │   ├── LocalProtocolError                 ... by us (we refused to send it)
    │   │   └── AlreadySettledError            a second ack/nack of one message
    │   └── RemoteProtocolError                ... by the peer (malformed bytes)
    │       └── LimitExceededError             a frame passed a configured limit
    ├── StompConnectionError (ConnectionError)
    │   ├── ConnectError                       could not open or negotiate a session
    │   │   ├── ConnectTimeout (+TimeoutError) no connection or no CONNECTED in time
    │   │   ├── TLSError                       the TLS handshake failed (certificate, host name)
    │   │   └── NotStompError                  the server answered CONNECT with something not STOMP
    │   └── ConnectionLostError                an established session ended
    │       └── HeartbeatTimeout (+TimeoutError)   the peer fell silent
    ├── ServerError                            the broker sent an ERROR frame
    │   └── AuthenticationError                ... in answer to CONNECT
    ├── StompTimeout (TimeoutError)
    │   ├── ReceiptTimeout                     no RECEIPT in time (sync facade)
    │   ├── ReceiveTimeout                     no message in time (sync facade)
    │   └── RequestTimeout                     no reply to request() in time
    ├── ClientClosedError (RuntimeError)       the client or subscription is closed
    ├── FlowControlError                       a full, unread subscription stopped the reader
    ├── MessageTooLargeError                   a message over max_frame_bytes was skipped unread
    ├── StaleMessageError                      ack/nack of a message from a dead session
    └── TransactionError                       a transaction could not be completed

Errors carry their data as attributes and survive :mod:`pickle` (Spark ships
exceptions between processes), so every constructor takes the message as its
only positional argument and the data as keywords, and ``__reduce__`` keeps both.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Tuple

__all__ = [
    "AlreadySettledError",
    "AuthenticationError",
    "ClientClosedError",
    "ConfigurationError",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionLostError",
    "FlowControlError",
    "HeartbeatTimeout",
    "LimitExceededError",
    "LocalProtocolError",
    "MessageTooLargeError",
    "NotStompError",
    "ProtocolError",
    "ReceiptTimeout",
    "ReceiveTimeout",
    "RemoteProtocolError",
    "RequestTimeout",
    "ServerError",
    "StaleMessageError",
    "StompConnectionError",
    "StompError",
    "StompTimeout",
    "TLSError",
    "TransactionError",
]


class StompError(Exception):
    """Root of every exception stompfast raises on purpose."""

    def __init__(self, message: str = "", **data: Any) -> None:
        super().__init__(message)
        self.message = message
        for key, value in data.items():
            setattr(self, key, value)

    def __reduce__(self) -> Any:
        # (class, positional args, state): keyword data lives in __dict__ and is
        # restored by pickle's default __setstate__ after __init__(message).
        return (self.__class__, (self.message,), dict(self.__dict__))

    def __str__(self) -> str:
        return self.message


class ConfigurationError(StompError, ValueError):
    """An argument, URL or option is invalid; raised before any I/O happens."""


class ProtocolError(StompError):
    """A rule of the STOMP protocol was broken (abstract: never raised itself).

    Catch :class:`LocalProtocolError` (we were about to break the rules; nothing
    was sent) or :class:`RemoteProtocolError` (the peer broke them; the
    connection cannot be trusted any more) to tell the two apart.
    """

    def __init__(self, message: str = "", **data: Any) -> None:
        if type(self) is ProtocolError:
            raise TypeError("ProtocolError is abstract: raise LocalProtocolError or RemoteProtocolError")
        super().__init__(message, **data)


class LocalProtocolError(ProtocolError):
    """We were asked to send something STOMP cannot express (nothing was sent)."""


class AlreadySettledError(LocalProtocolError):
    """A message was acked or nacked a second time; nothing was sent.

    A broker refuses a second settle of one delivery in its own way: RabbitMQ
    closes the connection (``PRECONDITION_FAILED - unknown delivery tag``), so
    the client refuses it first. In ``client`` mode an ACK of a message that a
    later message's ACK already covered is not a second settle (it is a no-op).

    Attributes:
        message_id: the message's ``message-id``.
        settled: ``"ACK"`` or ``"NACK"``, what the first call asked for (whatever
            became of it).
    """


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that are not valid STOMP.

    Attributes:
        offset: position in the received stream (bytes since the scanner was
            created) of the frame or byte at fault, when known.
        frames: the complete frames that preceded the fault in the same
            ``feed()`` call, in order. They are valid and were not returned by
            ``feed()`` because it raised; nothing received before the fault is lost.
    """

    offset: Optional[int] = None
    frames: Sequence[Any] = ()


class LimitExceededError(RemoteProtocolError):
    """A received frame is larger than a configured limit allows.

    Attributes:
        limit_name: ``"max_frame_bytes"``, ``"max_headers"`` or ``"max_header_bytes"``.
        limit: the configured value that was exceeded.
    """

    limit_name: str = ""
    limit: int = 0


class MessageTooLargeError(StompError):
    """A MESSAGE over ``max_frame_bytes`` was skipped unread; the connection is fine.

    The client counted its body off the wire without keeping it (the broker's
    ``content-length`` said where it ended) and delivered the message in its
    place with an empty body: reading that message's ``body`` or ``text`` raises
    this error. Ack or nack the message (``exc.skipped_message``, or the message
    you hold) so the broker stops redelivering it; on an ``auto`` subscription
    there is nothing to ack, and this error is all that is left of it.

    Attributes:
        headers: the message's headers (a dict).
        message_id, ack_id, destination, subscription: from those headers
            (``ack_id`` is what an ACK or NACK names).
        size: the body's size in bytes, as its ``content-length`` said.
        limit: the client's ``max_frame_bytes``; ``limit_name`` is ``"max_frame_bytes"``.
        skipped_message: the :class:`~stompfast.Message` to ack or nack (None
            after a pickle round trip: it belongs to a live connection).
    """

    headers: Mapping[str, str] = {}
    message_id: Optional[str] = None
    ack_id: Optional[str] = None
    destination: Optional[str] = None
    subscription: Optional[str] = None
    size: int = 0
    limit: int = 0
    limit_name: str = "max_frame_bytes"
    skipped_message: Any = None

    def __reduce__(self) -> Any:
        # The message holds its live session: it cannot cross a process.
        state = dict(self.__dict__)
        state.pop("skipped_message", None)
        return (self.__class__, (self.message,), state)


class StompConnectionError(StompError, ConnectionError):
    """The connection to the broker could not be made or did not last."""


class ConnectError(StompConnectionError):
    """Opening the connection or negotiating the STOMP session failed."""


class TLSError(ConnectError):
    """The TLS handshake with the broker failed: nothing was sent over the connection.

    Most often the broker's certificate was refused: it is not signed by a CA the
    SSL context trusts (``ctx.load_verify_locations(cafile)``), it is not valid
    for the host name connected to (``server_hostname=`` overrides the name
    checked), or it expired; or the broker refused ours (a client certificate,
    ``ctx.load_cert_chain``).

    Attributes:
        reason: OpenSSL's reason, e.g. ``"CERTIFICATE_VERIFY_FAILED"`` (or None).
        verify_message: the certificate check that failed, e.g. ``"unable to get
            local issuer certificate"`` or ``"Hostname mismatch, certificate is not
            valid for 'wrong.example'."`` (None when the failure was not a
            certificate check).
    """

    reason: Optional[str] = None
    verify_message: Optional[str] = None


class NotStompError(ConnectError):
    """The server answered CONNECT with bytes that are not STOMP: the URL names another service's port.

    Raised instead of a :class:`RemoteProtocolError` when what came before the
    session was up cannot start a CONNECTED or ERROR frame (an AMQP or HTTP
    greeting, a banner), broke STOMP's framing, or was a frame other than
    CONNECTED or ERROR. A wrong port does not fix itself: like an
    :class:`AuthenticationError`, it ends the first connect, and during a
    reconnect it is a ``connect_failed`` event (the next broker is tried).

    Attributes:
        host: the host connected to.
        port: the port connected to.
        received: the first bytes the server sent (at most 64).
    """

    host: str = ""
    port: int = 0
    received: bytes = b""


class ConnectionLostError(StompConnectionError):
    """An established session ended; whatever waited on it was not completed."""


class StompTimeout(StompError, TimeoutError):
    """Something stompfast waited for did not happen in time."""


class HeartbeatTimeout(ConnectionLostError, StompTimeout):
    """The peer sent nothing for longer than the negotiated heart-beat tolerance."""


class ConnectTimeout(ConnectError, StompTimeout):
    """The TCP connection or the CONNECTED frame did not come in time."""


class ReceiptTimeout(StompTimeout):
    """A RECEIPT did not arrive in time (sync facade ``timeout=``)."""


class ReceiveTimeout(StompTimeout):
    """No message arrived in time (sync facade ``timeout=``)."""


class RequestTimeout(StompTimeout):
    """No reply to a ``request()`` came within its ``timeout``; a reply that comes later is dropped.

    Attributes:
        destination: where the request was sent.
        correlation_id: the request's ``correlation-id`` (what a late reply carries).
        timeout: the seconds waited.
    """

    destination: Optional[str] = None
    correlation_id: Optional[str] = None
    timeout: Optional[float] = None


class ServerError(StompError):
    """The broker sent an ERROR frame.

    A broker may send more than one ERROR before it closes the connection
    (RabbitMQ 4.x sends ``Processing error`` and then, in a second frame, the
    reason). The client reads on until the broker closes (a short, bounded wait)
    and folds every later ERROR into the first: the message names each one's
    reason, and ``errors`` holds them all.

    Attributes:
        headers: the first ERROR frame's headers (a mapping, first of repeats wins).
        body: the first ERROR frame's body, which often holds the details.
        receipt_id: the ``receipt-id`` header, when the ERROR answers a receipt.
        errors: one ServerError per ERROR frame the broker sent before it closed,
            in order, this first one's own frame included (at most 8; the
            message says how many more came).
    """

    headers: Mapping[str, str] = {}
    body: bytes = b""
    receipt_id: Optional[str] = None
    errors: Tuple["ServerError", ...] = ()

    def __init__(self, message: str = "", **data: Any) -> None:
        # A Frame's read-only mapping does not pickle; a dict does
        if "headers" in data:
            data["headers"] = dict(data["headers"])
        super().__init__(message, **data)

    def followed_by(self, later: Sequence["ServerError"], more: int = 0) -> "ServerError":
        """A new error of this class: this one with the ERRORs the broker sent after it folded in.

        ``later``: the errors of the later frames kept, in order; ``more``: the
        frames after those, only counted. The first frame's headers, body and
        receipt id stay the error's own; the message gains each later reason it
        does not already say.
        """
        message = self.message
        for error in later:
            if error.message and error.message not in message:
                message += f"; then ERROR: {error.message}"
        if more:
            message += f" (and {more:,} more ERROR frame{'s' if more != 1 else ''})"
        return type(self)(
            message, headers=self.headers, body=self.body, receipt_id=self.receipt_id, errors=(self, *later)
        )


class AuthenticationError(ServerError):
    """The broker refused the CONNECT frame (bad login, passcode or virtual host)."""


class FlowControlError(StompError):
    """A receipt cannot arrive: a full subscription buffer nobody reads stopped the reader.

    The client stops reading the socket while a subscription's buffer is full
    (that is its backpressure). A receipt or ``flush()`` awaited meanwhile would
    wait forever if nothing drains that buffer, so after ``stall_timeout`` it fails
    with this error instead. Attributes: ``subscription`` (its id), ``destination``.
    """


class ClientClosedError(StompError, RuntimeError):
    """The client, subscription or transaction is closed and cannot be used."""


class StaleMessageError(StompError):
    """An ack or nack was asked for a message delivered on a session that has ended.

    The broker redelivers such messages on its own; the ack is not sent on a new
    session, where it would refer to nothing or to the wrong message.
    """


class TransactionError(StompError):
    """A transaction could not be begun, committed or aborted."""
