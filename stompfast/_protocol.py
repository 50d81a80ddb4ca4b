"""Sans-I/O STOMP client session: frames in, events out; calls in, bytes out.

Theory of operation
-------------------
:class:`StompProtocol` owns no socket, task, clock or lock. The client feeds it
the bytes it reads (:meth:`~StompProtocol.receive_data`, which returns events)
and asks it for the bytes of every frame it wants to send (:meth:`connect`,
:meth:`send`, :meth:`subscribe`, ...). Each outbound call checks the session
state and the rules of the negotiated version *before* anything is encoded, so
a refused call (``LocalProtocolError``) leaves nothing half-sent.

The session moves through the states of :data:`TRANSITIONS`, a table kept in
``_protocol_states.py`` (the h11 way): a frame or call not listed for the
current state is refused, and this class is the one object that moves the
state. Ids come from counters (cheaper than a uuid and unique within a
connection, which is all STOMP asks). Heart-beat arithmetic is here too; the
time itself is passed in by the caller (seconds, any monotonic clock).

Its parts, each in a module of its own and owned by the session: the rules as
pure functions (``_protocol_rules.py``), the CONNECT offer and what CONNECTED
settles (``_protocol_handshake.py``), the open subscriptions and what an ACK or
NACK names (``_protocol_subscriptions.py``), the open transactions
(``_protocol_transactions.py``), the encoding of the frames it decided to send
(``_protocol_encoder.py``) and the broker's ERRORs read as exceptions
(``_protocol_errors.py``). The per-message paths (the common SEND, the 1.2 ACK,
a MESSAGE in) stay here, inline. The events it returns are defined in
``_events.py`` and importable from here too. Nothing here or there imports
anyio, asyncio, socket or time: a test enforces it.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ._brokers import (
    ARTEMIS_TX_ACK,
    PREFETCH_HEADERS,
    check_durable,
    check_message_options,
    check_selector,
    message_option_headers,
)
from ._common import copy_error
from ._events import (
    ACK_QUEUED,
    Connected,
    ErrorReceived,
    Event,
    Message,
    OversizedMessage,
    ReceiptReceived,
    message_or_oversized,
)
from ._protocol_encoder import FrameEncoder, check_without_length, send_headers
from ._protocol_errors import BrokerErrors, error_keeps_session, server_error
from ._protocol_handshake import Handshake
from ._protocol_rules import (
    ACK_MODES,
    MAX_HEART_BEAT_MS,
    SUPPORTED_VERSIONS,
    add_settle_headers,
    check_ack_mode,
    check_destination,
    check_persistent,
    escape_12,
    negotiate_heart_beat,
)
from ._protocol_states import ALLOWED, TRANSITIONS, SessionState
from ._protocol_subscriptions import Subscriptions
from ._protocol_transactions import Transactions
from ._scanner import FrameScanner
from .errors import LocalProtocolError, RemoteProtocolError, ServerError
from .frames import Frame

__all__ = [
    "ACK_MODES",
    "PREFETCH_HEADERS",
    "SUPPORTED_VERSIONS",
    "TRANSITIONS",
    "Connected",
    "ErrorReceived",
    "MAX_HEART_BEAT_MS",
    "Message",
    "OversizedMessage",
    "ReceiptReceived",
    "SessionState",
    "StompProtocol",
    "check_destination",
    "negotiate_heart_beat",
]


#: encoded SEND heads kept per (destination, content-type) before the cache is cleared
_SEND_HEADS_MAX = 1024


# -- the session ------------------------------------------------------------------------


class StompProtocol:
    """One STOMP client session over one connection, without I/O.

    Args:
        host, login, passcode, versions, heart_beat, connect_headers, client_id,
            use_stomp_command: what the CONNECT offers (:class:`Handshake` has each).
        max_frame_bytes, max_headers, max_header_bytes: the scanner's limits.
        skip_oversized: a MESSAGE over ``max_frame_bytes`` with ``content-length``
            is skipped unread and delivered as an :class:`OversizedMessage`
            (headers only, to ack or nack) instead of failing the session; any
            other frame over a limit still fails it (the client turns this on).
        persistent: what a SEND that carries no ``persistent`` header gets
            (:func:`default_persistent`): None, ``persistent:true`` on every
            ``/queue/`` destination; True, on every SEND; False, on none (the
            brokers' default: not persistent).
        routing_headers: on Artemis, /queue/ and /topic/ get their routing-type
            headers (ANYCAST, MULTICAST).
    """

    def __init__(
        self,
        *,
        host: Optional[str] = "/",
        login: Optional[str] = None,
        passcode: Optional[str] = None,
        versions: Iterable[str] = SUPPORTED_VERSIONS,
        heart_beat: Sequence[int] = (0, 0),
        connect_headers: Optional[Mapping[str, str]] = None,
        use_stomp_command: bool = False,
        max_frame_bytes: Optional[int] = None,
        max_headers: Optional[int] = None,
        max_header_bytes: Optional[int] = None,
        skip_oversized: bool = False,
        routing_headers: bool = True,
        client_id: Optional[str] = None,
        persistent: Optional[bool] = None,
    ) -> None:
        # What the CONNECT offers, checked now: a bad option fails here, not at connect time.
        self._handshake = Handshake(
            versions=versions, heart_beat=heart_beat, host=host, login=login, passcode=passcode,
            connect_headers=connect_headers, client_id=client_id, use_stomp_command=use_stomp_command,
        )
        check_persistent(persistent)
        #: the broker named by CONNECTED's server header (broker_of), once connected
        self.broker: Optional[str] = None
        # The encoder writes every frame but the per-message ones, and keeps persistent= and
        # routing_headers=; it learns the broker and the escaping to use at CONNECTED.
        self._encoder = FrameEncoder(persistent=persistent, routing_headers=routing_headers)
        self.state = SessionState.IDLE
        self._send_heads: Dict[Tuple[str, Optional[str]], bytes] = {}
        # The heads of send_plain, by destination
        self._plain_heads: Dict[str, bytes] = {}
        self._last_length = -1
        self._length_line = b""
        self.version: Optional[str] = None
        self.server: Optional[str] = None
        self.session: Optional[str] = None
        self.heart_beat: Tuple[int, int] = (0, 0)
        self._ack_header = False
        # Before negotiation, header values are read with 1.0 rules and CONNECTED
        # is never unescaped anyway.
        self._scanner = FrameScanner(
            version="1.2",
            max_frame_bytes=max_frame_bytes,
            max_headers=max_headers,
            max_header_bytes=max_header_bytes,
            skip_oversized=skip_oversized,
        )
        # The scanner's count of SkippedFrames already made OversizedMessages
        self._skipped = 0
        self._receipts = 0
        self._subscriptions = Subscriptions()
        self._transactions = Transactions()
        self.disconnect_receipt: Optional[str] = None
        # The ERROR that ended the session, and the ERRORs the broker sent after it
        self._errors = BrokerErrors()

    # -- state -------------------------------------------------------------------

    @property
    def state(self) -> SessionState:
        """Where the session is in :data:`TRANSITIONS`."""
        return self._state

    @state.setter
    def state(self, state: SessionState) -> None:
        self._state = state
        self._allowed = ALLOWED[state]

    def _move(self, what: str) -> None:
        state = TRANSITIONS.get((self._state, what))
        if state is not None:
            self.state = state
            return
        # (raised outside any except block: a chained KeyError's traceback would hold this session)
        if what.startswith("<"):
            # named with the state the frame came in, not FAILED, which it causes
            error = RemoteProtocolError(f"the broker sent {what[1:]} while the session is {self._state.value}")
            self.state = SessionState.FAILED
            raise error
        raise LocalProtocolError(f"cannot send {what} while the session is {self._state.value}")

    def _check(self, what: str) -> None:
        if what not in self._allowed:
            if self._errors.ending is not None:
                # The broker's ERROR ended the session: that is why nothing more can be
                # sent, and a driver may not have failed its caller with it yet (it is
                # still reading the broker's later ERRORs).
                raise copy_error(self.ending_error)  # type: ignore[arg-type]  # (an ERROR came)
            raise LocalProtocolError(f"cannot send {what} while the session is {self.state.value}")

    def _receipt_id(self) -> str:
        self._receipts += 1
        return f"r{self._receipts}"

    def _finish(self, h: Dict[str, Any], receipt: bool, extra: Optional[Mapping[str, Any]] = None) -> Optional[str]:
        """Add a ``receipt`` header if asked, then the caller's headers (never overriding ours)."""
        receipt_id = None
        if receipt:
            receipt_id = self._receipt_id()
            h["receipt"] = receipt_id
        if extra:
            for name, value in extra.items():
                if name not in h:
                    h[name] = value
        return receipt_id

    def message_headers(
        self, headers: Optional[Mapping[str, Any]], ttl: Optional[float], priority: Optional[int],
        persistent: Optional[bool], now: float,
    ) -> Dict[str, Any]:
        """``headers`` and the headers that ask this session's broker for ``ttl``, ``priority`` and ``persistent``.

        ``now``: the time of the send, in seconds since the epoch (this module
        reads no clock). ConfigurationError for a bad value, or for an option
        whose header ``headers`` also set; nothing is recorded either way.
        """
        check_message_options(ttl, priority, persistent, headers)
        h = dict(headers) if headers else {}
        h.update(message_option_headers(self.broker, ttl, priority, persistent, now))
        return h

    # -- outbound ----------------------------------------------------------------

    def connect(self) -> bytes:
        """The CONNECT (or STOMP) frame that opens the session."""
        self._check("CONNECT")
        data = self._handshake.frame()
        self._move("CONNECT")
        return data

    def send(
        self,
        destination: str,
        body: bytes = b"",
        headers: Optional[Mapping[str, Any]] = None,
        *,
        content_type: Optional[str] = None,
        receipt: bool = False,
        transaction: Optional[str] = None,
        content_length: bool = True,
    ) -> Tuple[bytes, Optional[str]]:
        """A SEND frame; returns ``(bytes, receipt_id or None)``.

        ``content_length=False``: no ``content-length`` header, so that ActiveMQ and
        Artemis deliver a JMS TextMessage (they make a BytesMessage of a SEND that
        has one). The frame then ends at the first NUL: a body holding one, or a
        ``content-length`` in ``headers``, raises LocalProtocolError.
        """
        if "SEND" not in self._allowed:
            self._check("SEND")
        if not content_length:
            check_without_length(body, headers)
            h, receipt_id = self._send_headers(destination, headers, content_type, receipt, transaction)
            return self._encoder.send_without_length(h, destination, body), receipt_id
        if not headers and transaction is None:
            # The common SEND: its head is encoded once per destination and content
            # type; the same bytes encode_frame would build, in the same order
            # (destination, content-type, receipt, content-length).
            try:
                head = self._send_heads.get((destination, content_type))
            # Unhashable: not a str either
            except TypeError:
                check_destination(destination)
                raise
            if head is None:
                head = self._send_head(destination, content_type)
            receipt_id = None
            # Receipt ids are "r<n>": nothing to escape
            if receipt:
                self._receipts += 1
                receipt_id = "r%d" % self._receipts
                head = b"%sreceipt:r%d\n" % (head, self._receipts)
            if body:
                n = len(body)
                # Messages of one size in a row reuse the line
                if n != self._last_length:
                    self._last_length = n
                    self._length_line = b"content-length:%d\n\n" % n
                return b"".join((head, self._length_line, body, b"\0")), receipt_id
            return head + b"\n\0", receipt_id
        h, receipt_id = self._send_headers(destination, headers, content_type, receipt, transaction)
        return self._encoder.send(h, destination, body), receipt_id

    def _send_headers(
        self, destination: str, headers: Optional[Mapping[str, Any]], content_type: Optional[str], receipt: bool,
        transaction: Optional[str],
    ) -> Tuple[Dict[str, Any], Optional[str]]:
        """The headers of a SEND (ours first, then the caller's) and its receipt id; the encoder adds the broker's."""
        check_destination(destination)
        if transaction is not None:
            self._transactions.check(transaction)
        receipt_id = self._receipt_id() if receipt else None
        return send_headers(destination, content_type, transaction, receipt_id, headers), receipt_id

    def check_send(
        self, destination: str, headers: Optional[Mapping[str, Any]] = None, content_type: Optional[str] = None
    ) -> None:
        """Raise what :meth:`send` would raise for this destination and these headers; record nothing.

        For callers that queue a SEND to be encoded later (the blocking client's
        receipt-less sends): a header this session's version cannot carry is then
        refused by the call that asked for it. Any thread; the session's state is
        not checked (a queued send may wait for a reconnect).
        """
        check_destination(destination)
        self._encoder.encode("SEND", send_headers(destination, content_type, None, None, headers))

    def encode_send(
        self,
        destination: str,
        body: bytes,
        headers: Optional[Mapping[str, Any]],
        content_type: Optional[str],
        receipt_id: str,
    ) -> bytes:
        """The SEND frame :meth:`send` builds with a receipt, for the caller's own ``receipt_id``.

        Safe to call from another thread while the session is used elsewhere: it
        reads the session state and the negotiated escaping and changes nothing
        (no receipt counter, no cached heads). The bytes are ``send``'s for the
        same arguments (destination, content-type, receipt, then the caller's
        headers that name none of those).
        """
        if "SEND" not in self._allowed:
            self._check("SEND")
        check_destination(destination)
        return self._encoder.send(send_headers(destination, content_type, None, receipt_id, headers), destination, body)

    def send_plain(self, destination: str, body: bytes) -> bytes:
        """The hot SEND: ``body`` is ``bytes``; no headers, content type, receipt or transaction.

        The same bytes as ``send(destination, body)[0]``, with less per-call work
        (positional arguments, one dict lookup by destination, no tuple returned).
        """
        if "SEND" not in self._allowed:
            self._check("SEND")
        try:
            head = self._plain_heads.get(destination)
        # Unhashable: not a str either
        except TypeError:
            check_destination(destination)
            raise
        if head is None:
            head = self._send_head(destination, None)
        n = len(body)
        if n:
            if n != self._last_length:
                self._last_length = n
                self._length_line = b"content-length:%d\n\n" % n
            return b"".join((head, self._length_line, body, b"\0"))
        return head + b"\n\0"

    def _send_head(self, destination: str, content_type: Optional[str]) -> bytes:
        # Here, on a cache miss only: the hot path pays nothing.
        head = self._encoder.send_head(destination, content_type)
        if len(self._send_heads) >= _SEND_HEADS_MAX:
            self._send_heads.clear()
            self._plain_heads.clear()
        self._send_heads[(destination, content_type)] = head
        if content_type is None:
            self._plain_heads[destination] = head
        return head

    def subscribe(
        self,
        destination: str,
        *,
        ack: str = "auto",
        headers: Optional[Mapping[str, Any]] = None,
        id: Optional[str] = None,
        receipt: bool = False,
        prefetch: Optional[int] = None,
        durable: Optional[str] = None,
        message_classes: Optional[Tuple[type, type]] = None,
    ) -> Tuple[bytes, str, Optional[str]]:
        """A SUBSCRIBE frame; returns ``(bytes, subscription_id, receipt_id or None)``.

        ``message_classes``: ``(message, oversized)``, the classes of the events this
        subscription's MESSAGEs become (the blocking client's SyncMessage, whose ``ack()``
        blocks); default :class:`Message` and :class:`OversizedMessage`.

        ``prefetch`` (at most this many unacknowledged messages in flight) and
        ``durable`` (a durable subscription of this name, which is its id) are asked
        in the headers this broker reads, with Artemis's routing type
        (:meth:`FrameEncoder.subscribe`; headers the caller set win). Refused
        (ConfigurationError): ``durable`` on a broker that needs a ``client-id``
        the session lacks (:func:`check_durable`), and a ``selector`` header on a
        broker that ignores it (:data:`SELECTOR_IGNORED`: RabbitMQ), which would
        deliver every message of the destination.
        """
        self._check("SUBSCRIBE")
        check_destination(destination)
        check_ack_mode(ack, self.version)
        # A broker that ignores selectors would deliver every message: refused, nothing sent
        check_selector(self.broker, self.server, headers)
        if durable is not None:
            self.check_durable(durable, id)
            id = durable
        id = self._subscriptions.new_id(id)
        h: Dict[str, Any] = {"destination": destination, "id": id, "ack": ack}
        receipt_id = self._finish(h, receipt, headers)
        data = self._encoder.subscribe(h, destination, prefetch, durable)
        self._subscriptions.opened(id, ack, durable, message_classes)
        return data, id, receipt_id

    def check_durable(self, durable: Any, id: Optional[str] = None) -> None:
        """Raise what :meth:`subscribe` would refuse ``durable=`` (and ``id``) with on this session.

        Before CONNECTED the broker is not known yet and only the name is checked.
        """
        check_durable(durable, id, self.broker, self.server, self._handshake.client_id)

    def unsubscribe(
        self, subscription: str, *, receipt: bool = False, forget: bool = False
    ) -> Tuple[bytes, Optional[str]]:
        """An UNSUBSCRIBE frame; returns ``(bytes, receipt_id or None)``.

        A durable subscription stays on the broker (its messages wait for the
        next subscriber of that name) unless ``forget``: then the bytes delete it
        too, as this broker needs (:meth:`FrameEncoder.unsubscribe`).
        """
        self._check("UNSUBSCRIBE")
        name = self._subscriptions.durable_name(subscription, forget)
        receipt_id = self._receipt_id() if receipt else None
        data = self._encoder.unsubscribe(subscription, name, receipt_id)
        self._subscriptions.closed(subscription)
        return data, receipt_id

    def ack_mode(self, subscription: str) -> Optional[str]:
        return self._subscriptions.modes.get(subscription)

    def check_ack(self, message: Message) -> None:
        """Raise what an ACK of ``message`` would be refused with on this session; send nothing."""
        self.ack_headers("ACK", message, None)

    def check_transactional_settle(self, command: str) -> None:
        """Refuse an ACK or NACK (``command``) inside a transaction where the broker ignores the transaction."""
        if self.broker == "artemis":
            raise LocalProtocolError(ARTEMIS_TX_ACK.format(command=command))

    def ack_headers(self, command: str, message: Message, transaction: Optional[str]) -> Dict[str, str]:
        """The headers of an ACK or NACK (``command``) of ``message``, or what refuses it.

        :meth:`Subscriptions.settle_headers` names the message or refuses it; here,
        LocalProtocolError for a transaction that is not open or that the broker ignores.
        """
        h = self._subscriptions.settle_headers(command, message, self, self.version)
        if transaction is not None:
            self.check_transactional_settle(command)
            self._transactions.check(transaction)
            h["transaction"] = transaction
        return h

    def ack(
        self, message: Message, *, transaction: Optional[str] = None, receipt: bool = False,
        headers: Optional[Mapping[str, Any]] = None,
    ) -> Tuple[bytes, Optional[str]]:
        """An ACK frame for ``message`` (header names per version); returns ``(bytes, receipt_id)``.

        STOMP 1.2: "The ACK frame MUST include an id header matching the ack header
        of the MESSAGE being acknowledged"; 1.1: message-id and subscription; 1.0:
        message-id. ``headers``: extra headers for the broker (see :meth:`nack`).
        """
        if "ACK" not in self._allowed:
            self._check("ACK")
        h = self.ack_headers("ACK", message, transaction)
        if headers:
            add_settle_headers("ACK", h, headers)
        receipt_id = self._finish(h, receipt)
        data = self._encoder.encode("ACK", h)
        # After every refusal (the encoder's too): a refused ACK leaves it unsettled
        message.claim_settle("ACK")
        return data, receipt_id

    def ack_plain(self, message: Message) -> bytes:
        """The hot ACK: no transaction, no receipt. The same bytes and refusals as ``ack(message)[0]``.

        On STOMP 1.2 (the version RabbitMQ and ActiveMQ settle on) it is built
        directly from the message's ack id; anything else goes through :meth:`ack`.
        """
        if (
            self._ack_header
            and message.session is self
            and "ACK" in self._allowed
            and self._subscriptions.modes.get(message.subscription, "auto") != "auto"
        ):
            ack_id = message.ack_id
            if ack_id is not None:
                # claim_settle inlined (this runs once per message): a queued ACK's mark is taken over
                settled = message.settled
                if settled is not None and settled is not ACK_QUEUED:
                    message.claim_settle("ACK")
                message.settled = "ACK"
                if "\\" in ack_id or ":" in ack_id or "\n" in ack_id or "\r" in ack_id:
                    # ActiveMQ's ids hold ':'
                    ack_id = escape_12(ack_id)
                return b"ACK\nid:%s\n\n\0" % ack_id.encode("utf-8")
        if "ACK" not in self._allowed:
            self._check("ACK")
        # Not through ack_headers, which would add a call per ACK on 1.0 and 1.1 sessions: with no
        # transaction, settle_headers is all that ack_headers does.
        h = self._subscriptions.settle_headers("ACK", message, self, self.version)
        message.claim_settle("ACK", queued=True)
        return self._encoder.encode("ACK", h)

    def nack(
        self, message: Message, *, transaction: Optional[str] = None, receipt: bool = False,
        headers: Optional[Mapping[str, Any]] = None,
    ) -> Tuple[bytes, Optional[str]]:
        """A NACK frame for ``message`` (STOMP 1.1+); returns ``(bytes, receipt_id)``.

        ``headers``: extra headers the broker reads, e.g. RabbitMQ's
        ``{"requeue": "false"}`` (dead-letter the message instead of redelivering it).
        The headers that name the message, the transaction and the receipt are the
        client's: giving one raises LocalProtocolError.
        """
        self._check("NACK")
        if self.version == "1.0":
            raise LocalProtocolError("NACK does not exist in STOMP 1.0; this session is 1.0")
        h = self.ack_headers("NACK", message, transaction)
        if headers:
            add_settle_headers("NACK", h, headers)
        receipt_id = self._finish(h, receipt)
        data = self._encoder.encode("NACK", h)
        message.claim_settle("NACK")
        return data, receipt_id

    def begin(self, transaction: Optional[str] = None, *, receipt: bool = False) -> Tuple[bytes, str, Optional[str]]:
        """A BEGIN frame; returns ``(bytes, transaction_id, receipt_id)``."""
        self._check("BEGIN")
        transaction = self._transactions.new_id(transaction)
        h: Dict[str, Any] = {"transaction": transaction}
        receipt_id = self._finish(h, receipt)
        data = self._encoder.encode("BEGIN", h)
        self._transactions.opened(transaction)
        return data, transaction, receipt_id

    def _end(self, command: str, transaction: str, receipt: bool) -> Tuple[bytes, Optional[str]]:
        self._check(command)
        self._transactions.check(transaction)
        h: Dict[str, Any] = {"transaction": transaction}
        receipt_id = self._finish(h, receipt)
        data = self._encoder.encode(command, h)
        self._transactions.ended(transaction)
        return data, receipt_id

    def commit(self, transaction: str, *, receipt: bool = False) -> Tuple[bytes, Optional[str]]:
        """A COMMIT frame; returns ``(bytes, receipt_id)``."""
        return self._end("COMMIT", transaction, receipt)

    def abort(self, transaction: str, *, receipt: bool = False) -> Tuple[bytes, Optional[str]]:
        """An ABORT frame; returns ``(bytes, receipt_id)``."""
        return self._end("ABORT", transaction, receipt)

    def probe(self) -> Tuple[bytes, str]:
        """A harmless frame whose RECEIPT proves the broker processed everything before it.

        BEGIN and ABORT of a fresh transaction, the receipt on the ABORT: both
        brokers accept it, unlike an UNSUBSCRIBE of an unknown id (an ERROR).
        """
        begin, tx, _ = self.begin()
        abort, receipt_id = self.abort(tx, receipt=True)
        return begin + abort, receipt_id  # type: ignore[return-value]

    def disconnect(self, *, receipt: bool = True) -> Tuple[bytes, Optional[str]]:
        """The DISCONNECT frame; with ``receipt`` the broker confirms it has seen everything."""
        self._check("DISCONNECT")
        h: Dict[str, Any] = {}
        receipt_id = self.disconnect_receipt = self._finish(h, receipt)
        data = self._encoder.encode("DISCONNECT", h)
        self._move("DISCONNECT")
        return data, receipt_id

    # -- inbound -----------------------------------------------------------------

    def receive_data(self, data: bytes) -> List[Event]:
        """Scan received bytes; return the events they complete, in order.

        Heart-beat EOLs produce no event (the caller notes that bytes arrived).

        An ERROR frame is the last event: STOMP says "the server MUST then close
        the connection just after sending the ERROR frame", so the session is
        failed, and whatever the broker sends after it (frames, bytes, even a
        framing fault) gives no event, in this call and every later one. Events
        before the ERROR are returned with it, never lost. Some brokers send more
        than one ERROR before they close (RabbitMQ 4.x: the reason comes second),
        so later bytes are still scanned for ERROR frames, which are folded into
        :attr:`ending_error`: a driver reads on until the broker closes (briefly,
        while :attr:`reading_errors`) and then raises that.

        Raises:
            RemoteProtocolError: the broker broke framing or the session rules;
                the session is failed. The events of the frames before the fault
                are not lost: they are in ``events`` on the exception.
        """
        if self._state is SessionState.FAILED:
            # After ERROR (or a fault) only a later ERROR counts
            if self._errors.reading:
                self._read_later_errors(data)
            return []
        try:
            frames = self._scanner.feed(data)
        except RemoteProtocolError as exc:
            # Raises on its own fault, with its events
            events = self._events(exc.frames)
            if events and type(events[-1]) is ErrorReceived:
                # The fault came after the broker's ERROR: ignored, and ends the reading of later ERRORs
                self._errors.stop_reading()
                return events
            self.state = SessionState.FAILED
            exc.events = events  # type: ignore[attr-defined]
            raise
        if not frames:
            return []
        return self._events(frames)

    def _events(self, frames: Sequence[Frame]) -> List[Event]:
        events: List[Event] = []
        # Checked once per feed, not per frame: skipped messages are rare, and only
        # a feed that skipped one can hold a frame to deliver as an OversizedMessage.
        skipping = self._scanner.skipped != self._skipped
        try:
            self._append_events(frames, events, skipping)
        except RemoteProtocolError as exc:
            self.state = SessionState.FAILED
            exc.events = events  # type: ignore[attr-defined]  # the frames before the fault
            raise
        finally:
            if skipping:
                self._skipped = self._scanner.skipped
        return events

    @property
    def max_frame_bytes(self) -> int:
        """The largest frame the scanner takes (``max_frame_bytes``)."""
        return self._scanner.max_frame_bytes

    def _append_events(self, frames: Sequence[Frame], events: List[Event], skipping: bool) -> None:
        """Turn ``frames`` into ``events``; with ``skipping``, a skipped frame (not a Frame) is an OversizedMessage."""
        append = events.append
        # Only a feed that skipped a frame (rare) builds its MESSAGEs through the function that
        # picks the class; every other feed builds Message itself, with no test per message.
        message = message_or_oversized if skipping else Message
        # Subscriptions whose events are of classes of their own (the blocking client's)
        classes = self._subscriptions.classes
        connected, disconnecting = SessionState.CONNECTED, SessionState.DISCONNECTING
        for frame in frames:
            command = frame[0]
            if command == "MESSAGE":
                # Not the property: this runs once per message
                state = self._state
                if state is not connected and state is not disconnecting:
                    self._move("<MESSAGE")
                headers = frame[1]
                subscription = headers.get("subscription")
                if subscription is None:
                    raise RemoteProtocolError(f"the broker sent a MESSAGE without a subscription header: {frame!r}")
                message_id = headers.get("message-id")
                make = message
                if classes:
                    pair = classes.get(subscription)
                    if pair is not None:
                        make = pair[0] if type(frame) is Frame else pair[1]
                append(
                    make(
                        frame,
                        subscription,
                        message_id,
                        headers.get("ack", message_id) if self._ack_header else message_id,
                        self,
                    )
                )
            elif command == "RECEIPT":
                # CONNECTED stays CONNECTED
                if self._state is not connected:
                    self._move("<RECEIPT")
                receipt_id = frame[1].get("receipt-id")
                if receipt_id is None:
                    raise RemoteProtocolError("the broker sent a RECEIPT without a receipt-id header")
                if receipt_id == self.disconnect_receipt:
                    self.state = SessionState.CLOSED
                append(ReceiptReceived(receipt_id))
            elif command == "CONNECTED":
                self._move("<CONNECTED")
                append(self._connected(frame))
            elif command == "ERROR":
                connecting = self._state is SessionState.CONNECTING
                if not connecting and error_keeps_session(self.server, frame[1]):
                    self._move("<ERROR kept")
                    append(ErrorReceived(server_error(frame, connecting), ends_session=False))
                    continue
                self._move("<ERROR")
                # The connection ends here: of the later frames only ERRORs count, and end folds them in
                append(ErrorReceived(self._errors.end(frame, connecting, frames)))
                return
            else:
                raise RemoteProtocolError(f"the broker sent a {command} frame, which only clients send")

    def _connected(self, frame: Frame) -> Connected:
        # A refused CONNECTED raises before any field changes; _events fails the session.
        settled = self._handshake.settle(frame[1])
        self.version, self.server, self.broker = settled.version, settled.server, settled.broker
        self.session, self.heart_beat = settled.session, settled.heart_beat
        # STOMP 1.2 acks name the MESSAGE's ack header
        self._ack_header = settled.version == "1.2"
        self._encoder.negotiated(settled.send_rules, settled.broker)
        self._scanner.version = settled.read_rules
        return Connected(settled.version, settled.server, settled.session, settled.heart_beat, frame.headers)

    @property
    def versions(self) -> Tuple[str, ...]:
        """The versions the CONNECT offers, preferred last."""
        return self._handshake.versions

    @property
    def client_id(self) -> Optional[str]:
        """The connection's client-id (``client_id=``, or ``connect_headers``'), or None."""
        return self._handshake.client_id

    @property
    def ending_error(self) -> Optional[ServerError]:
        """The ERROR that ended the session with every later ERROR folded in (``ServerError.errors``); None before."""
        return self._errors.error

    @property
    def reading_errors(self) -> bool:
        """An ERROR ended the session and later bytes may still bring ERRORs (until a framing fault)."""
        return self._errors.reading

    def _read_later_errors(self, data: bytes) -> None:
        try:
            frames = self._scanner.feed(data)
        except RemoteProtocolError as exc:
            # Whatever came before the fault still counts; nothing after it can be read
            self._errors.stop_reading()
            frames = exc.frames  # type: ignore[assignment]
        self._errors.fold(frames)

    def connection_lost(self) -> None:
        """The transport ended (EOF or error): the session is over."""
        self.state = TRANSITIONS.get((self.state, "lost"), self.state)

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held by the scanner (a frame cut short if the link ends now)."""
        return self._scanner.buffered

    # -- heart-beats ---------------------------------------------------------------

    def heartbeat(self) -> bytes:
        """The bytes of one heart-beat (an EOL)."""
        return b"\n"

    def send_interval(self) -> float:
        """Seconds between our heart-beats (0: none)."""
        return self.heart_beat[0] / 1000.0

    def receive_interval(self) -> float:
        """Seconds between the broker's heart-beats (0: none expected)."""
        return self.heart_beat[1] / 1000.0

    def peer_silent_too_long(self, last_received: float, now: float, tolerance: float) -> bool:
        """True when nothing arrived for longer than the receive interval times ``tolerance``.

        STOMP: "If the receiver has not received a heart-beat or other data within
        the expected interval, it MAY consider the connection dead." ActiveMQ spaces
        its beats up to twice the agreed interval (AMQ-4710), hence a tolerance.
        """
        interval = self.heart_beat[1]
        return interval > 0 and (now - last_received) * 1000.0 > interval * tolerance
