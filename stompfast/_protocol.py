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
this one file (the h11 way): a frame or call not listed for the current state
is refused. Receipt, subscription and transaction ids come from counters (a
counter is cheaper than a uuid and unique within a connection, which is all
STOMP asks). Heart-beat arithmetic is here too; the time itself is passed in by
the caller (seconds, any monotonic clock).

The events it returns (:class:`Connected`, :class:`Message`, :class:`ReceiptReceived`,
:class:`ErrorReceived`) are defined in ``_events.py`` and importable from here too.
Nothing here or there imports anyio, asyncio, socket or time: a test enforces it.
"""

from __future__ import annotations

import enum
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

from ._brokers import (
    ARTEMIS_TX_ACK,
    DURABLE_NEEDS_CLIENT_ID,
    ERRORS_THAT_KEEP_THE_SESSION,
    PREFETCH_HEADERS,
    broker_of,
    check_durable,
    check_message_options,
    check_selector,
    default_persistent,
    durable_headers,
    forget_headers,
    message_option_headers,
    prefetch_headers,
    routing_type,
)
from ._common import copy_error
from ._events import ACK_QUEUED, Connected, ErrorReceived, Event, Message, OversizedMessage, ReceiptReceived
from ._scanner import FrameScanner, encode_frame
from .errors import (
    AuthenticationError,
    ConfigurationError,
    LocalProtocolError,
    RemoteProtocolError,
    ServerError,
    StaleMessageError,
)
from .frames import Frame

__all__ = [
    "ACK_MODES",
    "ERRORS_THAT_KEEP_THE_SESSION",
    "DURABLE_NEEDS_CLIENT_ID",
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
    "negotiate_heart_beat",
]

SUPPORTED_VERSIONS: Tuple[str, ...] = ("1.0", "1.1", "1.2")
#: Brokers (by the start of their ``server`` header) that escape headers on STOMP 1.0
#: sessions although 1.0 has no escaping, and the escaping rules to use with them
#: on the wire, ``(what we send, what we read)``, seen on these machines:
#: RabbitMQ escapes ``:`` as ``\c`` in what it sends and reads a backslash in what
#: it receives as an escape (an undefined one closes the connection): 1.1 both
#: ways. ActiveMQ unescapes ``\\``, ``\n`` and ``\c`` in what it receives but sends
#: raw: 1.1 out, 1.0 in.
ESCAPING_ON_1_0: Dict[str, Tuple[str, str]] = {"RabbitMQ/": ("1.1", "1.1"), "ActiveMQ/": ("1.1", "1.0")}
ACK_MODES = ("auto", "client", "client-individual")


class SessionState(enum.Enum):
    # Nothing sent yet
    IDLE = "idle"
    # CONNECT (or STOMP) sent, waiting for CONNECTED
    CONNECTING = "connecting"
    # The session is up
    CONNECTED = "connected"
    # DISCONNECT sent, waiting for its RECEIPT
    DISCONNECTING = "disconnecting"
    # DISCONNECT confirmed, or the connection ended
    CLOSED = "closed"
    # ERROR received or a protocol fault: the connection is unusable
    FAILED = "failed"

    # Enum's own __hash__ is a Python function (hash of the name); members are
    # singletons compared by identity, so the C identity hash is equivalent and
    # keeps the TRANSITIONS lookups off the per-frame path's profile.
    __hash__ = object.__hash__


S = SessionState
#: (state, what happens) -> next state. "what happens" is an outbound command
#: (``"SEND"``), an inbound one (``"<MESSAGE"``), or ``"lost"`` (the transport ended).
TRANSITIONS: Dict[Tuple[SessionState, str], SessionState] = {
    (S.IDLE, "CONNECT"): S.CONNECTING,
    (S.CONNECTING, "<CONNECTED"): S.CONNECTED,
    (S.CONNECTING, "<ERROR"): S.FAILED,
    **{
        (S.CONNECTED, c): S.CONNECTED
        for c in ("SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT")
    },
    (S.CONNECTED, "<MESSAGE"): S.CONNECTED,
    (S.CONNECTED, "<RECEIPT"): S.CONNECTED,
    (S.CONNECTED, "<ERROR"): S.FAILED,
    # An ERROR the broker is known to send without ending the connection (see
    # ERRORS_THAT_KEEP_THE_SESSION): the session goes on.
    (S.CONNECTED, "<ERROR kept"): S.CONNECTED,
    (S.DISCONNECTING, "<ERROR kept"): S.DISCONNECTING,
    (S.CONNECTED, "DISCONNECT"): S.DISCONNECTING,
    # After DISCONNECT the broker may still deliver what it had in flight, and
    # receipts for earlier frames; the DISCONNECT receipt closes the session.
    (S.DISCONNECTING, "<MESSAGE"): S.DISCONNECTING,
    (S.DISCONNECTING, "<RECEIPT"): S.DISCONNECTING,
    (S.DISCONNECTING, "<ERROR"): S.FAILED,
    **{(state, "lost"): S.CLOSED for state in (S.IDLE, S.CONNECTING, S.CONNECTED, S.DISCONNECTING)},
    (S.CLOSED, "lost"): S.CLOSED,
    (S.FAILED, "lost"): S.FAILED,
}
del S

#: what may happen in each state: ``_check`` is one set lookup on the hot path
_ALLOWED: Dict[SessionState, FrozenSet[str]] = {
    state: frozenset(what for (s, what) in TRANSITIONS if s is state) for state in SessionState
}
#: encoded SEND heads kept per (destination, content-type) before the cache is cleared
_SEND_HEADS_MAX = 1024
#: ERROR frames after the one that ended a session kept in ``ServerError.errors``; more are counted
MAX_LATER_ERRORS = 7


def check_destination(destination: Any) -> None:
    """Refuse a destination that is not a ``str``: encoded, ``5`` would go out as ``destination:5``."""
    if not isinstance(destination, str):
        raise TypeError(f"destination must be a str, not {type(destination).__name__}")


def _escape_12(value: str) -> str:
    """A header value escaped by STOMP 1.2's rules (backslash first, so added ones stay single)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace(":", "\\c")


# -- arithmetic -----------------------------------------------------------------------


#: The largest heart-beat interval taken from a broker, in ms (one hour): larger
#: values are clamped to it. See :func:`negotiate_heart_beat`.
#: The headers of an ACK or NACK that the client writes itself: extra headers may not replace them.
SETTLE_RESERVED = frozenset({"id", "message-id", "subscription", "transaction", "receipt"})


def _add_settle_headers(command: str, h: Dict[str, Any], headers: Mapping[str, Any]) -> None:
    """Add the caller's extra ``headers`` to an ACK or NACK's ``h`` (the client's own are refused)."""
    for name, value in headers.items():
        if name in SETTLE_RESERVED:
            raise LocalProtocolError(
                f"the {command} header {name!r} is written by the client (it names the message, the"
                " transaction or the receipt): it cannot be given in headers"
            )
        h[name] = value


MAX_HEART_BEAT_MS = 3_600_000


def negotiate_heart_beat(client: Tuple[int, int], server: Optional[str]) -> Tuple[int, int]:
    """Negotiated ``(send_ms, receive_ms)`` from our ``heart-beat`` and the broker's header.

    STOMP 1.1 "Heart-beating": client to server, 0 if ``cx`` or ``sy`` is 0, else
    ``MAX(cx, sy)``; server to client, 0 if ``sx`` or ``cy`` is 0, else ``MAX(sx, cy)``.
    A missing header is "0,0".

    The header is read strictly. STOMP 1.2: "When used, the heart-beat header MUST
    contain two positive integers separated by a comma": each is one or more ASCII
    digits (``0`` allowed, as the spec's own "0,0"), nothing else, so no sign,
    space, ``_`` or non-ASCII digit (all of which ``int()`` would take). Anything
    else is a :class:`~stompfast.RemoteProtocolError` naming the header. An empty
    header is taken as a missing one ("0,0": no beats either way, the safe reading).

    A broker value above :data:`MAX_HEART_BEAT_MS` (one hour) is clamped to it
    rather than refused: the session is still usable, we beat at least hourly (the
    spec's "at least every <n> milliseconds" is kept by beating more often), and
    ``heart-beat:99999999999,1`` can no longer push the liveness deadline ~9.5 years
    out. No broker beats less often than every few minutes (RabbitMQ's default is
    60 s); an hour only bounds a mistaken or hostile header. Our own ``(cx, cy)``
    are not clamped: they are the caller's choice.
    """
    cx, cy = client
    sx = sy = 0
    if server:
        parts = server.split(",")
        if len(parts) != 2 or not all(part.isascii() and part.isdigit() for part in parts):
            shown = repr(server) if len(server) <= 64 else f"{server[:64]!r}..."
            raise RemoteProtocolError(
                f"CONNECTED has an invalid heart-beat header {shown}: it must be two integers of ASCII digits"
                " separated by a comma"
            )
        # at most 10 digits go through int(): anything longer is over the cap anyway
        sx, sy = (min(int(part) if len(part) <= 10 else MAX_HEART_BEAT_MS, MAX_HEART_BEAT_MS) for part in parts)
    send = 0 if cx == 0 or sy == 0 else max(cx, sy)
    receive = 0 if sx == 0 or cy == 0 else max(sx, cy)
    return send, receive


def _check_versions(versions: Iterable[str]) -> Tuple[str, ...]:
    if isinstance(versions, str):
        versions = [v.strip() for v in versions.split(",")]
    result = tuple(versions)
    if not result:
        raise ConfigurationError("versions must name at least one STOMP version")
    for v in result:
        if v not in SUPPORTED_VERSIONS:
            raise ConfigurationError(f"unsupported STOMP version {v!r}: choose from {', '.join(SUPPORTED_VERSIONS)}")
    return result


def _check_heart_beat(heart_beat: Sequence[int]) -> Tuple[int, int]:
    try:
        cx, cy = heart_beat
    except (TypeError, ValueError):
        raise ConfigurationError(f"heart_beat must be a pair of milliseconds (cx, cy), not {heart_beat!r}") from None
    for v in (cx, cy):
        if type(v) is not int or v < 0:
            raise ConfigurationError(f"heart_beat values must be non-negative int milliseconds, not {heart_beat!r}")
    return cx, cy


# -- the session ------------------------------------------------------------------------


class StompProtocol:
    """One STOMP client session over one connection, without I/O.

    Args:
        host: the CONNECT ``host`` header (the virtual host). ``"/"`` by default,
            which RabbitMQ reads as its default vhost and ActiveMQ and Artemis
            ignore; ``None`` leaves the header out (STOMP 1.1+ requires it).
        login, passcode: credentials, sent as ``login``/``passcode``.
        versions: the versions to offer, preferred last as the spec orders them.
        heart_beat: ``(cx, cy)`` in ms: the smallest interval we can send at, the
            interval we want to receive at (0: none).
        connect_headers: more CONNECT headers.
        client_id: the CONNECT ``client-id`` header: the identity ActiveMQ Classic
            and Artemis keep durable subscriptions under.
        use_stomp_command: send ``STOMP`` instead of ``CONNECT`` (1.1+ only).
        max_frame_bytes, max_headers, max_header_bytes: the scanner's limits.
        skip_oversized: a MESSAGE over ``max_frame_bytes`` with ``content-length``
            is skipped unread and delivered as an :class:`OversizedMessage`
            (headers only, to ack or nack) instead of failing the session; any
            other frame over a limit still fails it (the client turns this on).
        persistent: what a SEND that carries no ``persistent`` header gets
            (:func:`default_persistent`): None, ``persistent:true`` on every
            ``/queue/`` destination; True, on every SEND; False, on none (the
            brokers' default: not persistent).
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
        self.versions = _check_versions(versions)
        self.requested_heart_beat = _check_heart_beat(heart_beat)
        if use_stomp_command and self.versions == ("1.0",):
            raise ConfigurationError("the STOMP command needs version 1.1 or later; 1.0 brokers only know CONNECT")
        self.host = host
        self.login = login
        self.passcode = passcode
        self.connect_headers = dict(connect_headers or {})
        if client_id is not None:
            if not isinstance(client_id, str) or not client_id:
                raise ConfigurationError(f"client_id must be a non-empty str, not {client_id!r}")
            given = self.connect_headers.get("client-id")
            if given is not None and given != client_id:
                raise ConfigurationError(
                    f"client_id={client_id!r} and connect_headers' client-id {given!r} differ: give one"
                )
            self.connect_headers["client-id"] = client_id
        #: the connection's client-id (client_id=, or connect_headers'), or None
        self.client_id: Optional[str] = self.connect_headers.get("client-id")
        self.use_stomp_command = use_stomp_command
        #: on Artemis, /queue/ and /topic/ get their routing-type headers (ANYCAST, MULTICAST)
        self.routing_headers = routing_headers
        if persistent is not None and type(persistent) is not bool:
            raise ConfigurationError(f"persistent must be True, False or None, not {persistent!r}")
        #: the client's persistent= option: which SENDs get persistent:true when they do not say
        self.persistent = persistent
        #: the broker named by CONNECTED's server header (broker_of), once connected
        self.broker: Optional[str] = None
        # routing_headers, and the broker is Artemis
        self._routing = False
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
        # The escaping rules of what we send (see ESCAPING_ON_1_0)
        self._wire_version = "1.0"
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
        # Id -> ack mode
        self._subscriptions: Dict[str, str] = {}
        # Id -> durable name, for the durable ones
        self._durable: Dict[str, str] = {}
        self._next_sub = 0
        self._next_tx = 0
        self._transactions: Set[str] = set()
        self.disconnect_receipt: Optional[str] = None
        # The ERROR that ended the session, and the ERRORs the broker sent after it
        self._ending: Optional[ServerError] = None
        self._later_errors: List[ServerError] = []
        self._more_errors = 0
        # Later bytes are still scanned for ERRORs (until a framing fault)
        self._reading_errors = False

    # -- state -------------------------------------------------------------------

    @property
    def state(self) -> SessionState:
        """Where the session is in :data:`TRANSITIONS`."""
        return self._state

    @state.setter
    def state(self, state: SessionState) -> None:
        self._state = state
        self._allowed = _ALLOWED[state]

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
            if self._ending is not None:
                # The broker's ERROR ended the session: that is why nothing more can be
                # sent, and a driver may not have failed its caller with it yet (it is
                # still reading the broker's later ERRORs).
                raise copy_error(self.ending_error)  # type: ignore[arg-type]  # (an ERROR came)
            raise LocalProtocolError(f"cannot send {what} while the session is {self.state.value}")

    def _encode(self, command: str, headers: Any, body: bytes = b"") -> bytes:
        return encode_frame(command, headers, body, self._wire_version)

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

    def _add_persistence(self, h: Dict[str, Any], destination: str) -> None:
        """``persistent:true`` where :func:`default_persistent` says so and the caller's headers do not say.

        Every broker keeps a STOMP message that does not ask to be persistent in
        memory only: a broker restart loses it. Called where a SEND's head is
        built (once per destination on the hot path).
        """
        if "persistent" not in h and default_persistent(self.broker, destination, self.persistent):
            h["persistent"] = "true"

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

    def _add_routing(self, h: Dict[str, Any], name: str, destination: str) -> None:
        """On Artemis, ``name`` (destination-type or subscription-type) for a /queue/ or /topic/ destination.

        A stock Artemis makes new addresses MULTICAST: without it a ``/queue/``
        behaves as a topic (what is sent before a consumer exists is dropped).
        A header the caller set wins.
        """
        if self._routing and name not in h:
            kind = routing_type(destination)
            if kind is not None:
                h[name] = kind

    # -- outbound ----------------------------------------------------------------

    def connect(self) -> bytes:
        """The CONNECT (or STOMP) frame that opens the session."""
        self._check("CONNECT")
        headers: Dict[str, str] = {}
        if self.versions != ("1.0",):
            headers["accept-version"] = ",".join(self.versions)
        if self.host is not None:
            headers["host"] = self.host
        if self.login is not None:
            headers["login"] = self.login
        if self.passcode is not None:
            headers["passcode"] = self.passcode
        # Brokers enforce a heart-beat header even when the session settles on 1.0,
        # so it is sent whenever beats are wanted.
        if self.requested_heart_beat != (0, 0):
            headers["heart-beat"] = "%d,%d" % self.requested_heart_beat
        for name, value in self.connect_headers.items():
            headers.setdefault(name, value)
        command = "STOMP" if self.use_stomp_command else "CONNECT"
        # CONNECT is never escaped on any version
        data = encode_frame(command, headers, b"", "1.2")
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
            return self._send_without_length(destination, body, headers, content_type, receipt, transaction)
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
        return self._encode("SEND", h, body), receipt_id

    def _send_headers(
        self, destination: str, headers: Optional[Mapping[str, Any]], content_type: Optional[str], receipt: bool,
        transaction: Optional[str],
    ) -> Tuple[Dict[str, Any], Optional[str]]:
        """The headers of a SEND (ours first, then the caller's, then Artemis routing) and its receipt id."""
        check_destination(destination)
        h: Dict[str, Any] = {"destination": destination}
        if content_type is not None:
            h["content-type"] = content_type
        if transaction is not None:
            self._check_transaction(transaction)
            h["transaction"] = transaction
        receipt_id = self._finish(h, receipt, headers)
        self._add_routing(h, "destination-type", destination)
        self._add_persistence(h, destination)
        return h, receipt_id

    def _send_without_length(
        self, destination: str, body: bytes, headers: Optional[Mapping[str, Any]], content_type: Optional[str],
        receipt: bool, transaction: Optional[str],
    ) -> Tuple[bytes, Optional[str]]:
        """The SEND of :meth:`send` with ``content_length=False``: the head encoded alone, then the body."""
        nul = body.find(b"\0")
        if nul >= 0:
            raise LocalProtocolError(
                f"the body holds a NUL byte (at offset {nul}): without content-length the frame would end"
                " there; send it with content_length=True (a BytesMessage on ActiveMQ and Artemis)"
            )
        if headers and any(name.lower() == "content-length" for name in headers if isinstance(name, str)):
            raise LocalProtocolError("content_length=False and a content-length header contradict each other")
        h, receipt_id = self._send_headers(destination, headers, content_type, receipt, transaction)
        # An empty body gets no content-length from the encoder: its head is ours.
        head = self._encode("SEND", h)
        return b"".join((head[:-1], body, b"\0")), receipt_id

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
        h: Dict[str, Any] = {"destination": destination}
        if content_type is not None:
            h["content-type"] = content_type
        self._finish(h, False, headers)
        self._encode("SEND", h)

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
        h: Dict[str, Any] = {"destination": destination}
        if content_type is not None:
            h["content-type"] = content_type
        h["receipt"] = receipt_id
        if headers:
            for name, value in headers.items():
                if name not in h:
                    h[name] = value
        self._add_routing(h, "destination-type", destination)
        self._add_persistence(h, destination)
        return encode_frame("SEND", h, body, self._wire_version)

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
        # Here, on a cache miss only: the hot path pays nothing
        check_destination(destination)
        h = {"destination": destination}
        if content_type is not None:
            h["content-type"] = content_type
        self._add_routing(h, "destination-type", destination)
        self._add_persistence(h, destination)
        # "SEND\n...\n" without the blank line and NUL
        head = self._encode("SEND", h)[:-2]
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
    ) -> Tuple[bytes, str, Optional[str]]:
        """A SUBSCRIBE frame; returns ``(bytes, subscription_id, receipt_id or None)``.

        ``prefetch``: at most this many unacknowledged messages in flight, asked
        in the header this broker reads (:func:`prefetch_headers`), unless
        ``headers`` name one of :data:`PREFETCH_HEADERS`. On Artemis a
        ``/queue/`` or ``/topic/`` destination gets its ``subscription-type``
        unless ``headers`` set it or ``routing_headers`` is off.

        ``durable``: a durable subscription of this name, in the headers this
        broker reads (:func:`durable_headers`; headers the caller set win); its
        id is the name. Refused (ConfigurationError) on a broker that needs a
        ``client-id`` (:data:`DURABLE_NEEDS_CLIENT_ID`) when the session has none.

        A ``selector`` header is refused (ConfigurationError) on a broker that
        ignores it (:data:`SELECTOR_IGNORED`: RabbitMQ), which would deliver
        every message of the destination.
        """
        self._check("SUBSCRIBE")
        check_destination(destination)
        if ack not in ACK_MODES:
            raise ConfigurationError(f"ack must be one of {', '.join(ACK_MODES)}, not {ack!r}")
        if ack == "client-individual" and self.version == "1.0":
            raise LocalProtocolError("ack mode client-individual needs STOMP 1.1 or later; this session is 1.0")
        # A broker that ignores selectors would deliver every message: refused, nothing sent
        check_selector(self.broker, self.server, headers)
        if durable is not None:
            self.check_durable(durable, id)
            id = durable
        if id is None:
            self._next_sub += 1
            id = str(self._next_sub)
        elif id in self._subscriptions:
            raise LocalProtocolError(f"subscription id {id!r} is already in use on this connection")
        h: Dict[str, Any] = {"destination": destination, "id": id, "ack": ack}
        receipt_id = self._finish(h, receipt, headers)
        if prefetch is not None and not any(name in h for name in PREFETCH_HEADERS):
            h.update(prefetch_headers(self.broker, prefetch))
        if durable is not None:
            for name, value in durable_headers(self.broker, durable).items():
                h.setdefault(name, value)
        self._add_routing(h, "subscription-type", destination)
        data = self._encode("SUBSCRIBE", h)
        self._subscriptions[id] = ack
        if durable is not None:
            self._durable[id] = durable
        return data, id, receipt_id

    def check_durable(self, durable: Any, id: Optional[str] = None) -> None:
        """Raise what :meth:`subscribe` would refuse ``durable=`` (and ``id``) with on this session.

        Before CONNECTED the broker is not known yet and only the name is checked.
        """
        check_durable(durable, id)
        if self.client_id is None and self.broker in DURABLE_NEEDS_CLIENT_ID:
            raise ConfigurationError(
                f"a durable subscription on {self.server or self.broker} needs a client identity: create the"
                " client with client_id=... (the broker keeps the subscription under it, and a later"
                " connection with the same client_id finds it again)"
            )

    def unsubscribe(
        self, subscription: str, *, receipt: bool = False, forget: bool = False
    ) -> Tuple[bytes, Optional[str]]:
        """An UNSUBSCRIBE frame; returns ``(bytes, receipt_id or None)``.

        A durable subscription stays on the broker (its messages wait for the
        next subscriber of that name) unless ``forget``: then the bytes delete it
        too, in the headers this broker reads (:func:`forget_headers`). ActiveMQ
        Classic refuses to delete a durable subscription that still has a consumer
        ("Durable consumer is in use"), so there the bytes are two frames: a plain
        UNSUBSCRIBE, then the one that deletes (the receipt, if any, is on it).
        """
        self._check("UNSUBSCRIBE")
        if subscription not in self._subscriptions:
            raise LocalProtocolError(f"no subscription {subscription!r} on this connection")
        name = self._durable.get(subscription)
        if forget and name is None:
            raise LocalProtocolError(f"subscription {subscription!r} is not durable: there is nothing to forget")
        # STOMP 1.0 names the subscription by destination or id; id works on every broker.
        h: Dict[str, Any] = {"id": subscription}
        first = b""
        if forget and name is not None:
            if self.broker == "activemq":
                first = self._encode("UNSUBSCRIBE", {"id": subscription})
            h.update(forget_headers(self.broker, name))
        receipt_id = self._finish(h, receipt)
        data = first + self._encode("UNSUBSCRIBE", h)
        del self._subscriptions[subscription]
        self._durable.pop(subscription, None)
        return data, receipt_id

    def ack_mode(self, subscription: str) -> Optional[str]:
        return self._subscriptions.get(subscription)

    def check_ack(self, message: Message) -> None:
        """Raise what an ACK of ``message`` would be refused with on this session; send nothing."""
        self.ack_headers("ACK", message, None)

    def check_transactional_settle(self, command: str) -> None:
        """Refuse an ACK or NACK (``command``) inside a transaction where the broker ignores the transaction."""
        if self.broker == "artemis":
            raise LocalProtocolError(ARTEMIS_TX_ACK.format(command=command))

    def ack_headers(self, command: str, message: Message, transaction: Optional[str]) -> Dict[str, str]:
        """The headers of an ACK or NACK (``command``) of ``message``, or what refuses it.

        StaleMessageError for a message of another session, LocalProtocolError for a
        subscription that is gone or in ``auto`` mode or a transaction not open,
        RemoteProtocolError for a message without the id header the ACK must name.
        """
        if message.session is not self:
            raise StaleMessageError(
                f"message {message.message_id!r} was delivered on an earlier session; the broker redelivers"
                " unacknowledged messages of a lost session, so this " + command + " was not sent"
            )
        mode = self._subscriptions.get(message.subscription)
        if mode is None:
            raise LocalProtocolError(
                f"cannot {command} message {message.message_id!r}: its subscription {message.subscription!r} is gone"
            )
        if mode == "auto":
            raise LocalProtocolError(
                f"cannot {command} message {message.message_id!r}: subscription {message.subscription!r} uses"
                " ack mode auto, where the broker needs no acknowledgement"
            )
        if transaction is not None:
            self.check_transactional_settle(command)
        if self.version == "1.2":
            if message.ack_id is None:
                raise RemoteProtocolError(f"the broker sent message {message.message_id!r} without an ack header")
            h = {"id": message.ack_id}
        else:
            if message.message_id is None:
                raise RemoteProtocolError("the broker sent a MESSAGE without a message-id header")
            h = {"message-id": message.message_id}
            if self.version == "1.1":
                h["subscription"] = message.subscription
        if transaction is not None:
            self._check_transaction(transaction)
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
            _add_settle_headers("ACK", h, headers)
        receipt_id = self._finish(h, receipt)
        data = self._encode("ACK", h)
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
            and self._subscriptions.get(message.subscription, "auto") != "auto"
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
                    ack_id = _escape_12(ack_id)
                return b"ACK\nid:%s\n\n\0" % ack_id.encode("utf-8")
        if "ACK" not in self._allowed:
            self._check("ACK")
        h = self.ack_headers("ACK", message, None)
        message.claim_settle("ACK", queued=True)
        return self._encode("ACK", h)

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
            _add_settle_headers("NACK", h, headers)
        receipt_id = self._finish(h, receipt)
        data = self._encode("NACK", h)
        message.claim_settle("NACK")
        return data, receipt_id

    def _check_transaction(self, transaction: str) -> None:
        if transaction not in self._transactions:
            raise LocalProtocolError(f"no open transaction {transaction!r} on this connection")

    def begin(self, transaction: Optional[str] = None, *, receipt: bool = False) -> Tuple[bytes, str, Optional[str]]:
        """A BEGIN frame; returns ``(bytes, transaction_id, receipt_id)``."""
        self._check("BEGIN")
        if transaction is None:
            self._next_tx += 1
            transaction = f"tx{self._next_tx}"
        elif transaction in self._transactions:
            raise LocalProtocolError(f"transaction {transaction!r} is already open")
        h: Dict[str, Any] = {"transaction": transaction}
        receipt_id = self._finish(h, receipt)
        data = self._encode("BEGIN", h)
        self._transactions.add(transaction)
        return data, transaction, receipt_id

    def _end(self, command: str, transaction: str, receipt: bool) -> Tuple[bytes, Optional[str]]:
        self._check(command)
        self._check_transaction(transaction)
        h: Dict[str, Any] = {"transaction": transaction}
        receipt_id = self._finish(h, receipt)
        data = self._encode(command, h)
        self._transactions.discard(transaction)
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
        data = self._encode("DISCONNECT", h)
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
            if self._reading_errors:
                self._read_later_errors(data)
            return []
        try:
            frames = self._scanner.feed(data)
        except RemoteProtocolError as exc:
            # Raises on its own fault, with its events
            events = self._events(exc.frames)
            if events and type(events[-1]) is ErrorReceived:
                # The fault came after the broker's ERROR: ignored, and ends the reading of later ERRORs
                self._reading_errors = False
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
                append(
                    (OversizedMessage if skipping and type(frame) is not Frame else Message)(
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
                if not connecting and self._error_keeps_session(frame[1]):
                    self._move("<ERROR kept")
                    append(ErrorReceived(self._server_error(frame, connecting), ends_session=False))
                    continue
                self._move("<ERROR")
                self._ending = self._server_error(frame, connecting)
                self._reading_errors = True
                # The connection ends here: of the later frames only ERRORs count
                after = next(i for i, f in enumerate(frames) if f is frame) + 1
                self._fold_errors(frames[after:])
                append(ErrorReceived(self.ending_error))  # type: ignore[arg-type]  # (set above)
                return
            else:
                raise RemoteProtocolError(f"the broker sent a {command} frame, which only clients send")

    def _connected(self, frame: Frame) -> Connected:
        headers = frame[1]
        version = headers.get("version", "1.0")
        if version not in self.versions:
            self.state = SessionState.FAILED
            raise RemoteProtocolError(
                f"the broker chose STOMP {version}, which we did not offer ({', '.join(self.versions)})"
            )
        self.version = version
        # STOMP 1.2 acks name the MESSAGE's ack header
        self._ack_header = version == "1.2"
        self.server = headers.get("server")
        self.broker = broker_of(self.server)
        self._routing = self.routing_headers and self.broker == "artemis"
        send_rules = read_rules = version
        if version == "1.0" and self.server:
            for prefix, rules in ESCAPING_ON_1_0.items():
                if self.server.startswith(prefix):
                    send_rules, read_rules = rules
        self._wire_version = send_rules
        self._scanner.version = read_rules
        self.session = headers.get("session")
        self.heart_beat = negotiate_heart_beat(self.requested_heart_beat, headers.get("heart-beat"))
        return Connected(version, self.server, self.session, self.heart_beat, frame.headers)

    @property
    def ending_error(self) -> Optional[ServerError]:
        """The ERROR that ended the session with every later ERROR folded in (``ServerError.errors``); None before."""
        if self._ending is None or not (self._later_errors or self._more_errors):
            return self._ending
        return self._ending.followed_by(self._later_errors, self._more_errors)

    @property
    def reading_errors(self) -> bool:
        """An ERROR ended the session and later bytes may still bring ERRORs (until a framing fault)."""
        return self._reading_errors

    def _read_later_errors(self, data: bytes) -> None:
        try:
            frames = self._scanner.feed(data)
        except RemoteProtocolError as exc:
            # Whatever came before the fault still counts; nothing after it can be read
            self._reading_errors = False
            frames = exc.frames  # type: ignore[assignment]
        self._fold_errors(frames)

    def _fold_errors(self, frames: Sequence[Frame]) -> None:
        connecting = isinstance(self._ending, AuthenticationError)
        for frame in frames:
            if frame[0] == "ERROR":
                if len(self._later_errors) < MAX_LATER_ERRORS:
                    self._later_errors.append(self._server_error(frame, connecting))
                else:
                    self._more_errors += 1

    def _error_keeps_session(self, headers: Mapping[str, str]) -> bool:
        """Whether the broker that sent this ERROR keeps the session after it (ERRORS_THAT_KEEP_THE_SESSION)."""
        server = self.server
        if not server:
            return False
        for prefix, keeps in ERRORS_THAT_KEEP_THE_SESSION.items():
            if server.startswith(prefix):
                return bool(keeps(headers))
        return False

    @staticmethod
    def _server_error(frame: Frame, connecting: bool) -> ServerError:
        headers = frame[1]
        message = headers.get("message") or "the broker sent ERROR without a message"
        body = frame[2]
        detail = body.decode("utf-8", "replace").strip() if body else ""
        text = f"{message}: {detail}" if detail and detail not in message else message
        cls = AuthenticationError if connecting else ServerError
        return cls(text, headers=dict(headers), body=body, receipt_id=headers.get("receipt-id"))

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
