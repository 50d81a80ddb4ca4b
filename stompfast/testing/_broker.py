"""An in-process STOMP 1.0/1.1/1.2 broker for tests and demos, with fault injection.

Theory of operation
-------------------
:class:`Broker` listens on loopback with :func:`anyio.create_tcp_listener` and
runs inside the caller's event loop (``async with Broker() as broker``) or in a
thread of its own (``with Broker.in_thread() as broker``). It imports anyio
only, so it runs on asyncio, asyncio + uvloop and trio.

Every accepted socket gets one handler task in the broker's task group; the
handler owns a small task group of its own with two tasks:

* the *reader* feeds what the client sends to a server-side
  :class:`~stompfast.FrameScanner` (the project's own scanner, whose limits bound
  the memory a connection can make the broker hold) and handles each frame in
  order. Until CONNECT is handled, input is fed up to one NUL at a time, so the
  frames a client pipelines after CONNECT are scanned with the negotiated
  version's rules. Receive calls time out after the client's heart-beat
  tolerance; a silent client gets ``ERROR message:Heart-beat timeout`` and is
  closed.
* the *writer* owns the socket's sending side. Everything the broker sends to a
  client (MESSAGE, RECEIPT, ERROR, heart-beat EOLs, raw bytes) is appended to
  the connection's ``outbox`` by plain synchronous code and the writer sends the
  whole outbox in one call. When nothing was written for the negotiated
  interval the writer sends an EOL (a heart-beat).

All broker state (queues, subscriptions, unacked deliveries, transactions,
faults) lives in one event loop and is changed only by synchronous code between
two awaits, so there are no locks: routing a SEND, delivering to consumers and
writing the resulting frames to their outboxes happen in one step. Consequence
useful in tests: when a client receives the RECEIPT of its SEND, the MESSAGE
frames that SEND produced are already queued to every consumer before anything
that consumer asks for later.

Destinations: ``/queue/NAME`` and ``/amq/queue/NAME`` name the same queue
(point to point, round robin among its consumers, messages kept until
consumed). ``/topic/NAME`` and ``/exchange/NAME[/KEY]`` are topics: every
subscription gets its own copy (with its own ``message-id``) in a private queue
that lives as long as the subscription; nothing is kept for absent subscribers.
Any other destination is refused with ``ERROR message:Unknown destination``.

Memory: the messages the broker holds (ready in a queue, or delivered and not
yet acked) count against ``max_bytes`` (default :data:`DEFAULT_MAX_BYTES`),
each as its body, destination and header names and values plus
:data:`MESSAGE_OVERHEAD` bytes for the Python objects holding it. Once the
total reaches the limit the broker applies producer flow control, as RabbitMQ
does under its memory alarm: a connection whose next frame is a SEND (or a
COMMIT carrying SENDs) is not served, and so not read from, until consumers on
other connections have taken the total below the limit; only then is the frame
handled and its RECEIPT sent. Other connections are served meanwhile, so
consumers can always drain (a held connection's later frames, ACKs included,
wait behind its SEND: publish and consume on separate connections). Since a
frame is admitted only while the total is below the limit, the total never
exceeds the limit by more than one message (one transaction for a COMMIT). With
``when_full="error"`` such a frame is refused instead with
``ERROR message:Memory limit reached`` and the connection closes (ActiveMQ's
``sendFailIfNoSpace``). SENDs held in an open transaction are not limited
until their COMMIT. :meth:`Broker.publish` is admitted by the same rule as a
SEND, but it never waits: on a full broker it raises ``RuntimeError`` and stores
nothing, whatever ``when_full`` says.

A delivery to a ``client`` or ``client-individual`` subscription stays unacked
until ACK or NACK. When the subscription ends (UNSUBSCRIBE, DISCONNECT, ERROR,
dropped socket) its unacked queue messages go back to the front of their queue,
in delivery order, marked ``redelivered:true``; unacked topic copies are
discarded with the subscription.

Identifiers come from counters, so a test can predict them: sessions are
``session-N`` (N counts connections from 1), message ids ``msg-N`` and the 1.2
``ack`` header of a ``client``/``client-individual`` delivery is
``<session>:N`` (unlike the message id it contains a colon, as ActiveMQ's
does, so a client's header escaping is exercised; it changes on redelivery,
while the message id stays). A ``receipt`` on CONNECT is ignored (STOMP 1.2:
"Any client frame other than CONNECT MAY specify a receipt header").

Closing: after an ERROR or a DISCONNECT the broker stops handling the client's
frames, flushes its outbox, shuts down its sending side and keeps reading (and
discarding) until the client closes or ``linger`` seconds pass, so the last
frame is not lost to a TCP reset. Faults and broker shutdown close at once.
Socket closes always run shielded with a short deadline.

Public methods are synchronous unless they say otherwise and must be called
from the broker's event loop; a broker started with :meth:`Broker.in_thread`
forwards calls made from other threads to its loop through a blocking portal.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import threading
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import anyio
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSListener

from .. import __version__
from .._protocol import MAX_HEART_BEAT_MS
from .._scanner import FrameScanner, encode_frame
from ..errors import LimitExceededError, LocalProtocolError, RemoteProtocolError
from ..frames import SERVER_COMMANDS, Frame
from ._threaded import RunsInThread

__all__ = ["DEFAULT_MAX_BYTES", "MESSAGE_OVERHEAD", "Broker", "BrokerStats"]

log = logging.getLogger("stompfast.testing")

_VERSIONS = ("1.0", "1.1", "1.2")
_ACK_MODES = ("auto", "client", "client-individual")
#: Headers of a SEND that are not copied into the MESSAGE frames it produces.
_NOT_COPIED = frozenset(
    {"receipt", "transaction", "content-length", "destination", "message-id", "subscription", "ack",
     "redelivered"}
)
_IO_ERRORS = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
#: Above this many bytes waiting in a connection's outbox the broker stops delivering to it and
#: stops reading from it until the writer has caught up (per-connection memory bound).
_OUTBOX_HIGH_WATER = 1 << 20
_READ_SIZE = 65536
#: Default ``max_bytes`` of :class:`Broker`: 256 MiB of stored messages (about 870,000 small ones;
#: measured, the process then stays near 365 MB RSS) bounds what a producer without consumers can make the
#: broker hold, on any developer machine or CI runner, yet leaves room for any demo, test or bench
#: backlog. Real brokers do the same: RabbitMQ blocks publishers at 40% of RAM.
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: Bytes a stored message counts on top of its body, destination and headers: the Python objects
#: holding it (measured with tracemalloc: about 280 bytes for a small message with one header).
MESSAGE_OVERHEAD = 256
_WHEN_FULL = ("block", "error")


class _Violation(Exception):
    """A client broke a rule: answered with ERROR (and ``receipt-id``), then the close."""

    def __init__(self, message: str, body: str = "", headers: Sequence[Tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.body = body
        self.headers = list(headers)


@dataclass(frozen=True)
class BrokerStats:
    """A snapshot of the broker's counters (:attr:`Broker.stats`).

    Attributes:
        frames_in: client frames received, by command (heart-beats excluded).
        frames_out: frames the broker sent, by command (a MESSAGE cut by
            :meth:`Broker.drop_mid_frame` counts; withheld receipts do not).
        heartbeats_in: reads that held only EOLs between frames.
        heartbeats_out: heart-beat EOLs sent.
        connections_accepted: TCP connections accepted (refused ones included).
        connections_refused: connections closed at once by :meth:`Broker.refuse_connections`.
        messages_discarded: messages thrown away: NACKed with ``nack="drop"``, sent to a
            topic without subscribers, unacked topic copies of an ended subscription,
            auto-acked messages cut by :meth:`Broker.drop_mid_frame`.
        receipts_withheld: receipts not sent because of :meth:`Broker.withhold_receipts`.
        tls_handshakes_failed: TLS handshakes that failed (``ssl_context`` brokers); such
            connections never count as accepted.
        stored_bytes: what the messages the broker holds now (ready, or delivered and
            unacked) count against ``max_bytes`` (see :class:`Broker`).
        stored_messages: how many messages those are (each topic copy counts).
        producers_blocked: connections held now by flow control (a SEND waits for room).
        sends_refused: SEND and COMMIT frames refused with ERROR because the broker was
            full (``when_full="error"``).
    """

    frames_in: Mapping[str, int] = field(default_factory=dict)
    frames_out: Mapping[str, int] = field(default_factory=dict)
    heartbeats_in: int = 0
    heartbeats_out: int = 0
    connections_accepted: int = 0
    connections_refused: int = 0
    messages_discarded: int = 0
    receipts_withheld: int = 0
    tls_handshakes_failed: int = 0
    stored_bytes: int = 0
    stored_messages: int = 0
    producers_blocked: int = 0
    sends_refused: int = 0


class _Message:
    __slots__ = ("id", "destination", "headers", "body", "redelivered", "size")

    def __init__(self, id: str, destination: str, headers: List[Tuple[str, str]], body: bytes) -> None:
        self.id = id
        self.destination = destination
        self.headers = headers
        self.body = body
        self.redelivered = False
        #: what it counts against ``max_bytes`` (characters of header text count as bytes)
        self.size = (len(body) + len(destination) + sum(len(k) + len(v) for k, v in headers)
                     + MESSAGE_OVERHEAD)


class _Queue:
    """Ready messages and the subscriptions consuming them (a topic subscription has a private one)."""

    __slots__ = ("name", "ready", "consumers", "next", "private")

    def __init__(self, name: str, private: bool = False) -> None:
        self.name = name
        self.ready: Deque[_Message] = deque()
        self.consumers: List[_Subscription] = []
        # Round-robin position in consumers
        self.next = 0
        self.private = private


class _Delivery:
    __slots__ = ("message", "ack_id", "sub")

    def __init__(self, message: _Message, ack_id: str, sub: "_Subscription") -> None:
        self.message = message
        self.ack_id = ack_id
        self.sub = sub


class _Subscription:
    __slots__ = ("conn", "id", "destination", "key", "ack", "prefetch", "queue", "topic", "unacked")

    def __init__(self, conn: "_Connection", id: Optional[str], destination: str, key: str, ack: str,
                 prefetch: int, queue: _Queue, topic: Optional[str]) -> None:
        self.conn = conn
        self.id = id
        self.destination = destination
        # Canonical destination
        self.key = key
        self.ack = ack
        # 0 = unlimited
        self.prefetch = prefetch
        self.queue = queue
        # Canonical topic name, or None for a queue subscription
        self.topic = topic
        self.unacked: "OrderedDict[str, _Delivery]" = OrderedDict()

    def can_take(self) -> bool:
        conn = self.conn
        if conn.closing or conn.version is None:
            return False
        if len(conn.outbox) >= _OUTBOX_HIGH_WATER:
            conn.throttled = True
            return False
        return not (self.ack != "auto" and self.prefetch and len(self.unacked) >= self.prefetch)


class _Connection:
    def __init__(self, stream: Any, scanner: FrameScanner, number: int) -> None:
        self.stream = stream
        self.scanner = scanner
        self.number = number
        self.session: Optional[str] = None
        # Negotiated; None until CONNECTED
        self.version: Optional[str] = None
        self.login: Optional[str] = None
        self.outbox = bytearray()
        # Set when the writer has something new to do
        self.wake = anyio.Event()
        # Set (and replaced) after each write
        self.flushed = anyio.Event()
        self.writer_done = anyio.Event()
        # None | "graceful" | "abort" | "abort-after-flush"
        self.closing: Optional[str] = None
        self.tg: Any = None
        # Seconds between broker heart-beats, 0 = none
        self.hb_out = 0.0
        # Seconds the client promised between its heart-beats, 0 = none
        self.hb_in = 0.0
        self.last_write = anyio.current_time()
        self.throttled = False
        # By id
        self.subs: Dict[str, _Subscription] = {}
        # STOMP 1.0 subscriptions without id, by destination
        self.anonymous: Dict[str, _Subscription] = {}
        self.by_ack: Dict[str, _Delivery] = {}
        self.by_message_id: Dict[str, _Delivery] = {}
        self.transactions: Dict[str, List[Tuple[str, Any]]] = {}

    def all_subs(self) -> List[_Subscription]:
        return list(self.subs.values()) + list(self.anonymous.values())


def _canonical(destination: str) -> Tuple[str, str]:
    """``(kind, key)`` for a destination: kind ``"queue"`` or ``"topic"``; raises ``_Violation``."""
    for prefix, kind, canon in (
        ("/queue/", "queue", "/queue/"),
        ("/amq/queue/", "queue", "/queue/"),
        ("/topic/", "topic", "/topic/"),
        ("/exchange/", "topic", "/exchange/"),
    ):
        if destination.startswith(prefix) and len(destination) > len(prefix):
            return kind, canon + destination[len(prefix):]
    raise _Violation(
        "Unknown destination",
        f"'{destination}' is not a valid destination.\n"
        "Valid destination types are: /queue/, /amq/queue/, /topic/, /exchange/.\n",
    )


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse_heart_beat(value: Optional[str]) -> Tuple[int, int]:
    """A client's ``heart-beat`` header: two integers of ASCII digits (the spec's grammar), capped.

    ``int()`` alone would take spaces, signs, ``_`` and non-ASCII digits; a huge
    value is clamped to MAX_HEART_BEAT_MS (one hour), as the client does.
    """
    if value is None:
        return 0, 0
    parts = value.split(",")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
        raise _Violation("Invalid heart-beat header", f"heart-beat must be two non-negative integers "
                         f"of ASCII digits separated by a comma, got {value[:64]!r}\n")
    cx, cy = (min(int(p), MAX_HEART_BEAT_MS) for p in parts)
    return cx, cy


async def _aclose(stream: Any) -> None:
    """Close ``stream`` quietly, shielded from cancellation and bounded (1 s)."""
    with anyio.move_on_after(1, shield=True):
        with contextlib.suppress(Exception):
            await stream.aclose()


class _TLSListener(TLSListener):
    """anyio's TLS listener, counting failed handshakes instead of logging them as errors."""

    def __init__(self, listener: Any, ssl_context: Any, counts: Counter[str]) -> None:
        # brokers close without close_notify, and so may this one's clients
        super().__init__(listener, ssl_context, standard_compatible=False, handshake_timeout=10)
        # The broker's counters
        self._counts = counts

    async def handle_handshake_error(  # type: ignore[override]  # (a staticmethod in anyio; ours counts)
        self, exc: BaseException, stream: Any
    ) -> None:
        self._counts["tls_handshake_failed"] += 1
        log.debug("stompfast.testing: TLS handshake failed: %r", exc)
        await _aclose(stream)
        if not isinstance(exc, Exception):
            raise exc


class Broker(RunsInThread):
    """An in-process STOMP broker for tests and demos, with fault injection.

    ``async with Broker() as broker:`` listens on an ephemeral loopback port in
    the current event loop; :meth:`in_thread` runs one in a thread of its own for
    synchronous code. See the module docstring for the theory of operation.

    Args:
        host: address to listen on (loopback by default).
        port: TCP port; 0 picks a free one (read it from :attr:`port`).
        versions: the STOMP versions the broker speaks; the highest one shared
            with the client's ``accept-version`` wins (no ``accept-version``
            means 1.0).
        heart_beat: ``(sx, sy)`` in milliseconds, sent in CONNECTED: the
            smallest interval the broker can send heart-beats at, and the
            interval it wants the client's at. ``(0, 0)`` turns heart-beating off.
        users: ``None`` accepts any ``login``/``passcode``; a mapping
            ``{login: passcode}`` refuses any other with ``ERROR message:Bad
            CONNECT`` (as RabbitMQ does) and closes the connection.
        server: the ``server`` header of CONNECTED.
        nack: ``"requeue"`` (RabbitMQ: a NACKed message goes back to the front
            of its queue and is redelivered with ``redelivered:true``) or
            ``"drop"`` (ActiveMQ without a dead-letter queue: it is discarded).
        record: keep every client frame in :attr:`received`.
        record_limit: how many frames :attr:`received` keeps (the newest).
        heartbeat_grace: seconds added to twice the client's heart-beat interval
            before a silent client is dropped.
        linger: seconds the broker waits, after an ERROR or DISCONNECT, for the
            client to close before it closes the socket itself.
        max_frame_bytes, max_headers, max_header_bytes: limits of the
            server-side scanner (``None`` = the scanner's defaults); a client
            exceeding one gets ERROR and is closed.
        ssl_context: serve STOMP over TLS with this server-side context (e.g.
            ``ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)`` with
            ``load_cert_chain``; ``verify_mode = CERT_REQUIRED`` asks clients for
            a certificate). :attr:`url` is then ``stomp+ssl://``. A failed
            handshake closes that connection and counts in ``stats``
            (``tls_handshakes_failed``).
        max_bytes: how much the stored messages may count (body, destination and
            headers, plus :data:`MESSAGE_OVERHEAD` each) before producers are held
            or refused; default :data:`DEFAULT_MAX_BYTES` (256 MiB); ``None`` for
            no limit. The current total is ``stats.stored_bytes``.
        when_full: ``"block"`` (producer flow control, like RabbitMQ's memory
            alarm: a SEND, or a COMMIT carrying SENDs, waits unread until
            consumers take the total below ``max_bytes``; its RECEIPT comes once
            it is accepted) or ``"error"`` (like ActiveMQ's ``sendFailIfNoSpace``:
            it is answered with ``ERROR message:Memory limit reached`` and the
            connection closes). As with RabbitMQ, a connection that is held
            cannot send its ACKs either: a client that publishes and consumes
            with client acks should do so on two connections.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        versions: Iterable[str] = _VERSIONS,
        heart_beat: Tuple[int, int] = (0, 0),
        users: Optional[Mapping[str, str]] = None,
        server: Optional[str] = None,
        nack: str = "requeue",
        record: bool = True,
        record_limit: int = 10_000,
        heartbeat_grace: float = 0.1,
        linger: float = 1.0,
        max_frame_bytes: Optional[int] = None,
        max_headers: Optional[int] = None,
        max_header_bytes: Optional[int] = None,
        ssl_context: Any = None,
        max_bytes: Optional[int] = DEFAULT_MAX_BYTES,
        when_full: str = "block",
    ) -> None:
        versions = tuple(versions)
        if not versions or any(v not in _VERSIONS for v in versions):
            raise ValueError(f"versions must be a non-empty subset of {_VERSIONS}, got {versions!r}")
        sx, sy = heart_beat
        if not (isinstance(sx, int) and isinstance(sy, int) and sx >= 0 and sy >= 0):
            raise ValueError(f"heart_beat must be two non-negative ints (milliseconds), got {heart_beat!r}")
        if nack not in ("requeue", "drop"):
            raise ValueError(f"nack must be 'requeue' or 'drop', got {nack!r}")
        if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes < 1):
            raise ValueError(f"max_bytes must be a positive int or None, got {max_bytes!r}")
        if when_full not in _WHEN_FULL:
            raise ValueError(f"when_full must be 'block' or 'error', got {when_full!r}")
        self.host = host
        self._requested_port = port
        self.versions = tuple(v for v in _VERSIONS if v in versions)
        self.heart_beat = (sx, sy)
        self.users = dict(users) if users is not None else None
        self.server = server if server is not None else f"stompfast-testing/{__version__}"
        self.nack = nack
        self.heartbeat_grace = heartbeat_grace
        self.linger = linger
        self.max_bytes = max_bytes
        self.when_full = when_full
        # What the stored messages count against max_bytes
        self._stored = 0
        self._stored_messages = 0
        # Set when the total drops below max_bytes
        self._space: Optional[anyio.Event] = None
        # Connections waiting for room
        self._blocked = 0
        self._limits = {
            "max_frame_bytes": max_frame_bytes,
            "max_headers": max_headers,
            "max_header_bytes": max_header_bytes,
        }
        FrameScanner(**self._limits)  # type: ignore[arg-type]  # invalid limits fail here, not per connection
        self._record = record
        self.ssl_context = ssl_context
        self._received: Deque[Frame] = deque(maxlen=record_limit)
        self._port: Optional[int] = None
        self._tg: Any = None
        self._listener: Any = None
        self._started = False
        self._closed = False
        self._conns: Dict[_Connection, None] = {}
        self._queues: Dict[str, _Queue] = {}
        self._topics: Dict[str, List[_Subscription]] = {}
        self._counter = itertools.count(1)
        self._conn_counter = itertools.count(1)
        self._frames_in: Counter[str] = Counter()
        self._frames_out: Counter[str] = Counter()
        self._counts: Counter[str] = Counter()
        self._errors: List[BaseException] = []
        self._changed: Optional[anyio.Event] = None
        # faults
        self._withhold = False
        self._receipt_delay = 0.0
        self._stopped_heartbeats = False
        self._cut_next_message = False
        # Connections still to refuse; math.inf = until cleared
        self._refuse: Union[int, float] = 0
        self._connect_errors: Union[int, float] = 0
        self._connect_error_message = ""
        self._connect_error_body = ""

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> "Broker":
        if self._started:
            raise RuntimeError("a Broker can be started only once")
        self._started = True
        self._loop_thread = threading.get_ident()
        self._listener = await anyio.create_tcp_listener(
            local_host=self.host, local_port=self._requested_port
        )
        self._port = self._listener.extra(SocketAttribute.local_port)
        if self.ssl_context is not None:
            self._listener = _TLSListener(self._listener, self.ssl_context, self._counts)
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._listener.serve, self._serve_connection, self._tg)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        """Stop listening and close every connection at once (shielded, bounded)."""
        self._closed = True
        self._tg.cancel_scope.cancel()
        try:
            # the broker's own tasks never fail; not handing the body's exception to the task
            # group lets it propagate as it is instead of wrapped in an ExceptionGroup
            await self._tg.__aexit__(None, None, None)
        finally:
            with anyio.move_on_after(2, shield=True):
                await self._listener.aclose()

    @classmethod
    @contextlib.contextmanager
    def in_thread(
        cls,
        *args: Any,
        backend: str = "asyncio",
        backend_options: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> Iterator["Broker"]:
        """Run a broker in a thread with its own event loop; yields the started broker.

        ``with Broker.in_thread(heart_beat=(100, 100)) as broker:`` takes the
        same arguments as :class:`Broker`, plus the anyio ``backend``
        (``"asyncio"`` or ``"trio"``) and its ``backend_options`` (e.g.
        ``{"use_uvloop": True}``). Methods called on the broker from other
        threads run in the broker's loop; use :meth:`wait_for_blocking` instead
        of :meth:`wait_for`. The broker is stopped when the block exits.
        """
        yield from cls._run_in_thread(cls(*args, **kwargs), backend, backend_options)

    # ------------------------------------------------------------------ addresses

    @property
    def port(self) -> int:
        """The TCP port the broker listens on (known once started)."""
        if self._port is None:
            raise RuntimeError("the broker is not started: use `async with Broker()` or Broker.in_thread()")
        return self._port

    @property
    def url(self) -> str:
        """``stomp://HOST:PORT/`` of the listening socket (``stomp+ssl://`` with TLS)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "stomp+ssl" if self.ssl_context is not None else "stomp"
        return f"{scheme}://{host}:{self.port}/"

    def __repr__(self) -> str:
        if self._port is None:
            return f"<Broker {self.host} not started>"
        return f"<Broker {self.url} {self.connections} connection(s), {self.stats.stored_bytes:,} bytes stored>"

    # ------------------------------------------------------------------ introspection

    def queue_depth(self, destination: str) -> int:
        """Number of messages ready (not yet delivered) at a destination.

        For a queue, the messages waiting in it; for a topic, the copies waiting
        in its subscriptions' private queues (held back by prefetch or a slow
        client). Raises ``ValueError`` for a destination the broker does not serve.
        """
        return self._call(self._queue_depth, destination)

    def _queue_depth(self, destination: str) -> int:
        return sum(len(q.ready) for q in self._queues_of(destination))

    def unacked(self, destination: str) -> int:
        """Number of messages of a destination delivered and not yet acked or nacked."""
        return self._call(self._unacked, destination)

    def _unacked(self, destination: str) -> int:
        return sum(len(s.unacked) for q in self._queues_of(destination) for s in q.consumers)

    def consumers(self, destination: str) -> int:
        """Number of subscriptions currently on a destination."""
        return self._call(self._consumers, destination)

    def _consumers(self, destination: str) -> int:
        return sum(len(q.consumers) for q in self._queues_of(destination))

    def _queues_of(self, destination: str) -> List[_Queue]:
        try:
            kind, key = _canonical(destination)
        except _Violation:
            raise ValueError(f"not a destination this broker serves: {destination!r}") from None
        if kind == "queue":
            q = self._queues.get(key)
            return [q] if q is not None else []
        return [s.queue for s in self._topics.get(key, ())]

    @property
    def stats(self) -> BrokerStats:
        """A snapshot of the frame and event counters (:class:`BrokerStats`)."""
        return self._call(self._stats)

    def _stats(self) -> BrokerStats:
        c = self._counts
        return BrokerStats(
            frames_in=dict(self._frames_in),
            frames_out=dict(self._frames_out),
            heartbeats_in=c["heartbeats_in"],
            heartbeats_out=c["heartbeats_out"],
            connections_accepted=c["accepted"],
            connections_refused=c["refused"],
            messages_discarded=c["discarded"],
            receipts_withheld=c["withheld"],
            tls_handshakes_failed=c["tls_handshake_failed"],
            stored_bytes=self._stored,
            stored_messages=self._stored_messages,
            producers_blocked=self._blocked,
            sends_refused=c["sends_refused"],
        )

    @property
    def connections(self) -> int:
        """Number of client connections open now (refused ones never count)."""
        return self._call(lambda: len(self._conns))

    @property
    def sessions(self) -> List[str]:
        """The ``session`` ids of the connected (CONNECTED and not closing) clients."""
        return self._call(
            lambda: [c.session for c in self._conns if c.session is not None and c.closing is None]
        )

    @property
    def received(self) -> List[Frame]:
        """Every frame clients sent, oldest first (the newest ``record_limit``; empty if ``record=False``)."""
        return self._call(lambda: list(self._received))

    def clear_received(self) -> None:
        """Forget the frames recorded in :attr:`received`."""
        self._call(self._received.clear)

    @property
    def errors(self) -> List[BaseException]:
        """Unexpected exceptions raised while serving a client (broker bugs); empty when all is well.

        A client breaking the protocol or its connection is not an error here:
        such a client gets ERROR or is dropped, and the broker goes on.
        """
        return self._call(lambda: list(self._errors))

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 5.0) -> None:
        """Wait until ``predicate()`` is true; raise ``TimeoutError`` after ``timeout`` seconds.

        The predicate is evaluated in the broker's loop after every change of
        broker state (and at least every 50 ms), e.g.
        ``await broker.wait_for(lambda: broker.queue_depth("/queue/a") == 3)``.
        """
        with anyio.fail_after(timeout):
            while not predicate():
                if self._changed is None:
                    self._changed = anyio.Event()
                with anyio.move_on_after(0.05):
                    await self._changed.wait()

    def wait_for_blocking(self, predicate: Callable[[], Any], timeout: float = 5.0) -> None:
        """:meth:`wait_for` for synchronous code, on a broker started with :meth:`in_thread`."""
        if self._portal is None:
            raise RuntimeError("wait_for_blocking() needs a broker started with Broker.in_thread()")
        self._portal.call(self.wait_for, predicate, timeout)

    def _touch(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    # ------------------------------------------------------------------ server-side actions

    def publish(self, destination: str, body: Union[bytes, str] = b"",
                headers: Optional[Mapping[str, str]] = None) -> None:
        """Route a message as if a client had sent it (``str`` bodies are UTF-8 encoded).

        It counts against ``max_bytes`` like a SEND, and is admitted by the same
        rule: while the stored messages count below the limit. On a full broker it
        does not wait (it may run in the broker's own event loop, where waiting
        would hold the consumers that make room): it raises ``RuntimeError`` and
        stores nothing, with either ``when_full``. Consume messages, then publish
        again.

        Raises ``ValueError`` for a destination the broker does not serve.
        """
        if isinstance(body, str):
            body = body.encode()
        self._call(self._publish, destination, bytes(body), dict(headers or {}))

    def _publish(self, destination: str, body: bytes, headers: Dict[str, str]) -> None:
        if self._full():
            raise RuntimeError(
                f"Memory limit reached: the broker holds {self._stored} bytes of messages, its limit is"
                f" {self.max_bytes} (max_bytes): consume messages, then publish again"
            )
        try:
            self._route(destination, [(k, v) for k, v in headers.items() if k not in _NOT_COPIED], body)
        except _Violation:
            raise ValueError(f"not a destination this broker serves: {destination!r}") from None
        self._touch()

    def purge(self, destination: str) -> int:
        """Discard the ready messages of a destination; returns how many there were."""
        return self._call(self._purge, destination)

    def _purge(self, destination: str) -> int:
        n = 0
        for q in self._queues_of(destination):
            n += len(q.ready)
            for message in q.ready:
                self._release(message)
            q.ready.clear()
        self._touch()
        return n

    # ------------------------------------------------------------------ faults

    def drop_connections(self) -> None:
        """Close every client socket now, without a frame and without flushing what is queued.

        The clients see the connection end (EOF). Their subscriptions end as if
        they had disconnected: unacked queue messages are requeued with
        ``redelivered:true``, open transactions are aborted.
        """
        self._call(self._drop_connections)

    def _drop_connections(self) -> None:
        for conn in list(self._conns):
            self._close(conn, "abort")

    def drop_mid_frame(self) -> None:
        """Cut the next MESSAGE frame the broker sends, to any client, in half, then close that socket.

        The first ``len(frame) // 2`` bytes are written after whatever was
        queued before them, then the socket is closed. The message counts as
        delivered: on a ``client``/``client-individual`` subscription it is
        requeued and redelivered with ``redelivered:true``; on an ``auto`` one
        it is lost (counted in ``messages_discarded``). Armed until a MESSAGE is
        sent or :meth:`clear_faults` is called.
        """
        self._call(self._set, "_cut_next_message", True)

    def withhold_receipts(self, on: bool = True) -> None:
        """Stop (``on=True``) or resume sending RECEIPT frames; frames are still processed.

        A withheld receipt is never sent later (it is counted in
        ``receipts_withheld``). A DISCONNECT with a withheld receipt still closes
        the connection.
        """
        self._call(self._set, "_withhold", bool(on))

    def delay_receipts(self, seconds: float) -> None:
        """Send each RECEIPT ``seconds`` after its frame was processed (0 turns the delay off).

        Frames are processed at once, so MESSAGE frames can overtake a delayed
        receipt (as RabbitMQ's confirms-based SEND receipts do). A DISCONNECT's
        receipt is delayed too, and the connection closes after it.
        """
        self._call(self._set, "_receipt_delay", max(0.0, float(seconds)))

    def send_error(self, message: str = "Simulated error", close: bool = True, body: str = "") -> None:
        """Send ``ERROR message:<message>`` to every open client connection; then close them if ``close``.

        With ``close=True`` the connections end the way they do after any ERROR
        (subscriptions end, unacked messages are requeued, then the socket
        closes after ``linger``). With ``close=False`` the session goes on,
        which the specification does not allow: a test of a client's tolerance.
        """
        self._call(self._send_error, message, close, body)

    def _send_error(self, message: str, close: bool, body: str) -> None:
        for conn in list(self._conns):
            if conn.closing is None:
                self._error(conn, message, body)
                if close:
                    self._close(conn)

    def stop_heartbeats(self) -> None:
        """Stop sending heart-beat EOLs to every client (sockets stay open; the broker still reads)."""
        self._call(self._set, "_stopped_heartbeats", True)

    def resume_heartbeats(self) -> None:
        """Send heart-beats again after :meth:`stop_heartbeats`."""
        self._call(self._set, "_stopped_heartbeats", False)

    def send_raw(self, data: bytes) -> None:
        """Write ``data`` as is to every open client connection (e.g. a malformed frame)."""
        self._call(self._send_raw, bytes(data))

    def _send_raw(self, data: bytes) -> None:
        for conn in list(self._conns):
            self._write(conn, data)

    def refuse_connections(self, n: Optional[int] = None) -> None:
        """Accept and immediately close the next ``n`` TCP connections (``None``: until cleared).

        ``refuse_connections(0)`` or :meth:`clear_faults` clears it. The client
        sees its connection end before any frame (EOF, or a reset if it had
        already sent something).
        """
        if n is not None and n < 0:
            raise ValueError("n must be None or >= 0")
        self._call(self._set, "_refuse", math.inf if n is None else n)

    def answer_connect_with_error(self, message: str = "Simulated connect error", n: Optional[int] = 1,
                                  body: str = "") -> None:
        """Answer the next ``n`` CONNECT frames (``None``: until cleared) with ERROR, then close.

        The ERROR carries ``message:<message>`` and ``body``; no CONNECTED is
        sent. Credentials and version are not checked for those connections.
        """
        if n is not None and n < 0:
            raise ValueError("n must be None or >= 0")
        self._call(self._set_connect_error, message, math.inf if n is None else n, body)

    def _set_connect_error(self, message: str, n: Union[int, float], body: str) -> None:
        self._connect_errors = n
        self._connect_error_message = message
        self._connect_error_body = body

    def clear_faults(self) -> None:
        """Turn every fault off: receipts sent on time, heart-beats on, connections accepted, nothing cut."""
        self._call(self._clear_faults)

    def _clear_faults(self) -> None:
        self._withhold = False
        self._receipt_delay = 0.0
        self._cut_next_message = False
        self._refuse = 0
        self._connect_errors = 0
        self._set("_stopped_heartbeats", False)

    def _set(self, name: str, value: Any) -> None:
        setattr(self, name, value)
        if name == "_stopped_heartbeats":
            for conn in self._conns:
                # Recompute the heart-beat deadline
                conn.wake.set()

    # ------------------------------------------------------------------ connections

    async def _serve_connection(self, stream: Any) -> None:
        self._counts["accepted"] += 1
        if self._refuse > 0 or self._closed:
            if self._refuse > 0:
                self._refuse -= 1
            self._counts["refused"] += 1
            await _aclose(stream)
            return
        limits = self._limits
        scanner = FrameScanner(
            version=self.versions[-1],
            max_frame_bytes=limits["max_frame_bytes"],
            max_headers=limits["max_headers"],
            max_header_bytes=limits["max_header_bytes"],
        )
        conn = _Connection(stream, scanner, next(self._conn_counter))
        try:
            async with anyio.create_task_group() as tg:
                conn.tg = tg
                self._conns[conn] = None
                self._touch()
                tg.start_soon(self._write_loop, conn)
                await self._read_loop(conn)
                tg.cancel_scope.cancel()
        # A bug of the broker: keep serving the others, but say so
        except Exception as exc:
            self._errors.append(exc)
            log.exception("stompfast.testing: error while serving connection %d", conn.number)
        finally:
            self._end_session(conn)
            self._conns.pop(conn, None)
            self._touch()
            await _aclose(stream)

    async def _read_loop(self, conn: _Connection) -> None:
        stream = conn.stream
        while True:
            while len(conn.outbox) >= _OUTBOX_HIGH_WATER and conn.closing is None:
                # The client does not read: stop reading it too
                await conn.flushed.wait()
            timeout = math.inf
            if conn.hb_in and conn.closing is None:
                timeout = 2 * conn.hb_in + self.heartbeat_grace
            try:
                with anyio.move_on_after(timeout) as scope:
                    data = await stream.receive(_READ_SIZE)
            except anyio.EndOfStream:
                # the client closed its sending side: flush what was queued for it (e.g. the RECEIPT
                # of its last frame, or an ERROR), then close
                self._close(conn, linger=0)
                with anyio.move_on_after(2):
                    await conn.writer_done.wait()
                return
            except _IO_ERRORS:
                self._close(conn, "abort")
                return
            if scope.cancelled_caught:
                self._error(conn, "Heart-beat timeout",
                            f"No data received for {timeout * 1000:.0f} ms; the agreed client heart-beat "
                            f"interval is {conn.hb_in * 1000:.0f} ms.\n")
                self._close(conn, linger=0)
                continue
            if conn.closing is None:
                await self._on_data(conn, data)
                self._touch()

    async def _write_loop(self, conn: _Connection) -> None:
        stream = conn.stream
        try:
            while True:
                if conn.outbox:
                    data = bytes(conn.outbox)
                    del conn.outbox[:]
                    await stream.send(data)
                    conn.last_write = anyio.current_time()
                    conn.flushed.set()
                    conn.flushed = anyio.Event()
                    if conn.throttled:
                        conn.throttled = False
                        for sub in conn.all_subs():
                            self._dispatch(sub.queue)
                    continue
                if conn.closing == "graceful":
                    with contextlib.suppress(Exception):
                        await stream.send_eof()
                    return
                # Abort after flush (a frame was cut)
                if conn.closing is not None:
                    conn.tg.cancel_scope.cancel()
                    return
                deadline = math.inf
                if conn.hb_out and not self._stopped_heartbeats:
                    deadline = conn.last_write + conn.hb_out
                with anyio.move_on_after(deadline - anyio.current_time()):
                    await conn.wake.wait()
                if conn.wake.is_set():
                    conn.wake = anyio.Event()
                elif conn.hb_out and not self._stopped_heartbeats and conn.closing is None:
                    # Nothing written for a whole interval: a heart-beat
                    conn.outbox += b"\n"
                    self._counts["heartbeats_out"] += 1
        except _IO_ERRORS:
            self._close(conn, "abort")
        finally:
            conn.writer_done.set()

    def _write(self, conn: _Connection, data: bytes) -> bool:
        if conn.closing is not None:
            return False
        conn.outbox += data
        conn.wake.set()
        return True

    def _send(self, conn: _Connection, command: str, headers: Sequence[Tuple[str, str]],
              body: bytes = b"") -> None:
        if conn.closing is not None:
            return
        self._frames_out[command] += 1
        self._write(conn, self._encode(conn, command, headers, body))

    @staticmethod
    def _encode(conn: _Connection, command: str, headers: Sequence[Tuple[str, str]], body: bytes) -> bytes:
        version = conn.version or "1.2"
        try:
            data = encode_frame(command, headers, body, version=version)
        except LocalProtocolError:
            # blank out only what this version cannot say: CR (1.0, 1.1), LF (1.0), ':' in a name (1.0)
            def clean(text: str, name: bool) -> str:
                text = text.replace("\r", " ")
                if version == "1.0":
                    text = text.replace("\n", " ")
                    if name:
                        text = text.replace(":", "_")
                return text

            headers = [(clean(k, True) or "_", clean(v, False)) for k, v in headers]
            data = encode_frame(command, headers, body, version=version)
        return data

    def _error(self, conn: _Connection, message: str, body: str = "", receipt: Optional[str] = None,
               headers: Sequence[Tuple[str, str]] = ()) -> None:
        h = [("message", _one_line(message))]
        if receipt is not None:
            h.append(("receipt-id", receipt))
        h.extend(headers)
        b = body.encode()
        if b:
            h.append(("content-type", "text/plain"))
        self._send(conn, "ERROR", h, b)

    def _close(self, conn: _Connection, how: str = "graceful", linger: Optional[float] = None) -> None:
        """Begin closing: end the session now; the socket closes per ``how``."""
        if conn.closing is not None:
            if how == "abort" and conn.tg is not None:
                conn.tg.cancel_scope.cancel()
            return
        conn.closing = how
        self._end_session(conn)
        # A held SEND of this connection is dropped with it
        self._wake_producers()
        conn.wake.set()
        if conn.tg is None:
            return
        if how == "abort":
            conn.tg.cancel_scope.cancel()
        elif how == "graceful":
            conn.tg.start_soon(self._linger, conn, self.linger if linger is None else linger)

    async def _linger(self, conn: _Connection, seconds: float) -> None:
        # A client that reads nothing cannot hold the socket open
        with anyio.move_on_after(2 + seconds):
            await conn.writer_done.wait()
        await anyio.sleep(seconds)
        conn.tg.cancel_scope.cancel()

    def _end_session(self, conn: _Connection) -> None:
        """Abort transactions and end every subscription (requeue unacked); idempotent."""
        conn.transactions.clear()
        for sub in conn.all_subs():
            self._unsubscribe(sub)

    # ------------------------------------------------------------------ input

    async def _on_data(self, conn: _Connection, data: bytes) -> None:
        pos, n = 0, len(data)
        while pos < n and conn.closing is None:
            if conn.version is None:
                # STOMP 1.1: frames after CONNECT follow the negotiated version's escaping rules,
                # so feed up to the end of one frame (a NUL) until CONNECT has been handled
                nul = data.find(b"\0", pos)
                end = n if nul < 0 else nul + 1
            else:
                end = n
            chunk = data[pos:end] if (pos or end != n) else data
            pos = end
            fault: Optional[RemoteProtocolError] = None
            try:
                frames = conn.scanner.feed(chunk)
            except RemoteProtocolError as exc:
                frames, fault = list(exc.frames), exc
            if not frames and fault is None and conn.scanner.buffered == 0 and not chunk.strip(b"\r\n"):
                self._counts["heartbeats_in"] += 1
            for frame in frames:
                if conn.closing is not None:
                    return
                await self._on_frame(conn, frame)
            if fault is not None and conn.closing is None:
                if isinstance(fault, LimitExceededError):
                    self._error(conn, "Frame too large", f"{fault}\n",
                                headers=[("limit", f"{fault.limit_name}={fault.limit}")])
                else:
                    self._error(conn, "Malformed frame", f"{fault}\n")
                self._close(conn)

    async def _on_frame(self, conn: _Connection, frame: Frame) -> None:
        command = frame.command
        if (command in ("SEND", "COMMIT") and self._full() and self.when_full == "block"
                and conn.version is not None and self._adds(conn, frame)):
            # This connection is not read meanwhile: TCP pushes back
            await self._wait_for_space(conn)
            if conn.closing is not None:
                return
        self._frames_in[command] += 1
        if self._record:
            self._received.append(frame)
        receipt = frame.headers.get("receipt")
        try:
            if conn.version is None:
                if command not in ("CONNECT", "STOMP"):
                    raise _Violation("Illegal command", f"{command} before CONNECT: you must log in using "
                                     "CONNECT first.\n")
                self._on_connect(conn, frame)
                # STOMP 1.2: "Any client frame other than CONNECT MAY specify a receipt header"
                return
            handler = self._HANDLERS.get(command)
            if handler is None:
                if command in ("CONNECT", "STOMP"):
                    raise _Violation("Already connected", f"{command} received on a connected session.\n")
                raise _Violation("Illegal command", f"{command} is a server frame.\n"
                                 if command in SERVER_COMMANDS else f"Unknown command {command}.\n")
            handler(self, conn, frame)
        except _Violation as v:
            self._error(conn, v.message, v.body, receipt, v.headers)
            self._close(conn)
            return
        if command == "DISCONNECT":
            # STOMP 1.2 DISCONNECT: the receipt confirms every earlier frame was received; then close.
            # The session ends first, so nothing is delivered during a delayed receipt.
            self._end_session(conn)
            if receipt is not None and not self._withhold and self._receipt_delay:
                await anyio.sleep(self._receipt_delay)
            self._receipt(conn, receipt, delayed_ok=False)
            self._close(conn)
            return
        self._receipt(conn, receipt)

    # ------------------------------------------------------------------ memory limit

    def _full(self) -> bool:
        return self.max_bytes is not None and self._stored >= self.max_bytes

    @staticmethod
    def _adds(conn: _Connection, frame: Frame) -> bool:
        """Whether handling ``frame`` (a SEND or COMMIT) stores messages now."""
        tx = frame.headers.get("transaction")
        if frame.command == "SEND":
            return tx is None
        return any(command == "SEND" for command, _ in conn.transactions.get(tx or "", ()))

    async def _wait_for_space(self, conn: _Connection) -> None:
        """Return once the stored messages count below ``max_bytes``, or ``conn`` is closing."""
        self._blocked += 1
        self._touch()
        try:
            while self._full() and conn.closing is None:
                if self._space is None:
                    self._space = anyio.Event()
                await self._space.wait()
        finally:
            self._blocked -= 1
            self._touch()

    def _check_space(self) -> None:
        """``when_full="error"``: refuse a frame that would store messages while the broker is full."""
        if self._full():
            self._counts["sends_refused"] += 1
            raise _Violation(
                "Memory limit reached",
                f"The broker holds {self._stored} bytes of messages, its limit is {self.max_bytes} "
                "(max_bytes): consume messages, then send again.\n",
            )

    def _wake_producers(self) -> None:
        if self._space is not None:
            self._space.set()
            self._space = None

    def _release(self, message: _Message) -> None:
        """Forget a stored message (consumed or discarded); wake held producers once there is room."""
        self._stored -= message.size
        self._stored_messages -= 1
        if self._space is not None and not self._full():
            self._wake_producers()

    def _receipt(self, conn: _Connection, receipt: Optional[str], delayed_ok: bool = True) -> None:
        if receipt is None:
            return
        if self._withhold:
            self._counts["withheld"] += 1
        elif self._receipt_delay and delayed_ok:
            conn.tg.start_soon(self._delayed_receipt, conn, receipt, self._receipt_delay)
        else:
            self._send(conn, "RECEIPT", [("receipt-id", receipt)])

    async def _delayed_receipt(self, conn: _Connection, receipt: str, delay: float) -> None:
        await anyio.sleep(delay)
        self._send(conn, "RECEIPT", [("receipt-id", receipt)])
        self._touch()

    # ------------------------------------------------------------------ CONNECT

    def _on_connect(self, conn: _Connection, frame: Frame) -> None:
        h = frame.headers
        if self._connect_errors > 0:
            self._connect_errors -= 1
            raise _Violation(self._connect_error_message, self._connect_error_body)
        # STOMP 1.2 "Protocol Negotiation": no accept-version means 1.0; else the highest in common
        accept = h.get("accept-version")
        offered = ["1.0"] if accept is None else [v.strip() for v in accept.split(",")]
        common = [v for v in self.versions if v in offered]
        if not common:
            supported = " ".join(self.versions)
            raise _Violation(f"Supported protocol versions are {supported}",
                             f"Supported protocol versions are {supported}\n",
                             headers=[("version", ",".join(self.versions))])
        version = common[-1]
        login = h.get("login")
        if self.users is not None:
            if login is None or login not in self.users or self.users[login] != h.get("passcode"):
                who = "no login" if login is None else f"user '{login}'"
                raise _Violation("Bad CONNECT", f"Access refused for {who}: bad login or passcode.\n")
        cx, cy = _parse_heart_beat(h.get("heart-beat"))
        sx, sy = self.heart_beat
        # STOMP 1.2 "Heart-beating": none if either side says 0, else every MAX of the two
        conn.hb_in = max(cx, sy) / 1000 if cx and sy else 0.0
        conn.hb_out = max(sx, cy) / 1000 if sx and cy else 0.0
        conn.version = version
        conn.login = login
        conn.session = f"session-{conn.number}"
        conn.scanner.version = version
        self._send(conn, "CONNECTED", [
            ("version", version),
            ("session", conn.session),
            ("server", self.server),
            ("heart-beat", f"{sx},{sy}"),
        ])
        conn.last_write = anyio.current_time()

    # ------------------------------------------------------------------ frames of a session

    def _require(self, frame: Frame, name: str) -> str:
        value = frame.headers.get(name)
        if value is None:
            raise _Violation(f"Missing {name} header", f"{frame.command} requires a '{name}' header.\n")
        return value

    def _transaction(self, conn: _Connection, frame: Frame) -> Optional[List[Tuple[str, Any]]]:
        tx = frame.headers.get("transaction")
        if tx is None:
            return None
        if tx not in conn.transactions:
            raise _Violation("Unknown transaction", f"Transaction '{tx}' was not begun (or has ended).\n")
        return conn.transactions[tx]

    def _on_send(self, conn: _Connection, frame: Frame) -> None:
        destination = self._require(frame, "destination")
        # Refuse unknown destinations now, even inside a transaction
        _canonical(destination)
        headers = [(k, v) for k, v in frame.header_list if k not in _NOT_COPIED]
        held = self._transaction(conn, frame)
        if held is not None:
            held.append(("SEND", (destination, headers, frame.body)))
        else:
            self._check_space()
            self._route(destination, headers, frame.body)

    def _on_subscribe(self, conn: _Connection, frame: Frame) -> None:
        destination = self._require(frame, "destination")
        sub_id = frame.headers.get("id")
        if sub_id is None and conn.version != "1.0":
            raise _Violation("Missing id header", "SUBSCRIBE requires an 'id' header since STOMP 1.1.\n")
        if sub_id is not None and sub_id in conn.subs:
            raise _Violation("Duplicate subscription id", f"Subscription '{sub_id}' already exists.\n")
        if sub_id is None and destination in conn.anonymous:
            raise _Violation("Duplicate subscription", f"Already subscribed to '{destination}' without id.\n")
        ack = frame.headers.get("ack", "auto")
        if ack not in _ACK_MODES:
            raise _Violation("Invalid ack mode",
                             f"ack must be one of {', '.join(_ACK_MODES)}; got '{ack}'.\n")
        prefetch = 0
        for name in ("prefetch-count", "activemq.prefetchSize"):
            value = frame.headers.get(name)
            if value is not None:
                if not value.isdigit():
                    raise _Violation(f"Invalid {name}", f"{name} must be a non-negative integer; "
                                     f"got '{value}'.\n")
                prefetch = int(value)
                break
        kind, key = _canonical(destination)
        if kind == "queue":
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = _Queue(key)
            topic = None
        else:
            queue = _Queue(key, private=True)
            topic = key
        sub = _Subscription(conn, sub_id, destination, key, ack, prefetch, queue, topic)
        if sub_id is None:
            conn.anonymous[destination] = sub
        else:
            conn.subs[sub_id] = sub
        queue.consumers.append(sub)
        if topic is not None:
            self._topics.setdefault(topic, []).append(sub)
        self._dispatch(queue)

    def _on_unsubscribe(self, conn: _Connection, frame: Frame) -> None:
        sub_id = frame.headers.get("id")
        if sub_id is not None:
            sub = conn.subs.get(sub_id)
            if sub is None:
                raise _Violation("Unknown subscription", f"No subscription with id '{sub_id}'.\n")
        elif conn.version == "1.0" and "destination" in frame.headers:
            destination = frame.headers["destination"]
            sub = conn.anonymous.get(destination) or next(
                (s for s in conn.subs.values() if s.destination == destination), None)
            if sub is None:
                raise _Violation("Unknown subscription", f"No subscription to '{destination}'.\n")
        else:
            raise _Violation("Missing id header", "UNSUBSCRIBE requires an 'id' header.\n")
        self._unsubscribe(sub)

    def _find_delivery(self, conn: _Connection, frame: Frame) -> _Delivery:
        h = frame.headers
        command = frame.command
        if conn.version == "1.2":
            # STOMP 1.2 ACK: "The ACK frame MUST include an id header matching the ack header of the MESSAGE"
            ack_id = self._require(frame, "id")
            delivery = conn.by_ack.get(ack_id)
            if delivery is None:
                raise _Violation("Unknown message", f"{command} of '{ack_id}', which is no unacked message "
                                 "of this session.\n")
            return delivery
        # STOMP 1.1: message-id and subscription are required; 1.0: message-id (subscription if any)
        message_id = self._require(frame, "message-id")
        sub = None
        if conn.version == "1.1" or "subscription" in h:
            sub_id = self._require(frame, "subscription")
            sub = conn.subs.get(sub_id)
            if sub is None:
                raise _Violation("Unknown subscription", f"{command} names subscription '{sub_id}', "
                                 "which does not exist.\n")
        delivery = conn.by_message_id.get(message_id)
        if delivery is None or (sub is not None and delivery.sub is not sub):
            raise _Violation("Unknown message", f"{command} of message '{message_id}', which is no unacked "
                             "message of this " + ("subscription" if sub else "session") + ".\n")
        return delivery

    def _on_ack(self, conn: _Connection, frame: Frame) -> None:
        if frame.command == "NACK" and conn.version == "1.0":
            raise _Violation("Illegal command", "NACK does not exist in STOMP 1.0.\n")
        delivery = self._find_delivery(conn, frame)
        held = self._transaction(conn, frame)
        if held is not None:
            held.append((frame.command, delivery))
        else:
            self._settle(frame.command, delivery)

    def _on_begin(self, conn: _Connection, frame: Frame) -> None:
        tx = self._require(frame, "transaction")
        if tx in conn.transactions:
            raise _Violation("Duplicate transaction", f"Transaction '{tx}' is already open.\n")
        conn.transactions[tx] = []

    def _on_commit(self, conn: _Connection, frame: Frame) -> None:
        self._require(frame, "transaction")
        held = self._transaction(conn, frame)
        if any(command == "SEND" for command, _ in held or ()):
            self._check_space()
        del conn.transactions[frame.headers["transaction"]]
        for command, item in held or ():
            if command == "SEND":
                self._route(*item)
            # Still unacked: settle it now
            elif item.sub.unacked.get(item.ack_id) is item:
                self._settle(command, item)

    def _on_abort(self, conn: _Connection, frame: Frame) -> None:
        self._require(frame, "transaction")
        self._transaction(conn, frame)
        # Held sends and acks are forgotten
        del conn.transactions[frame.headers["transaction"]]

    def _on_disconnect(self, conn: _Connection, frame: Frame) -> None:
        # _on_frame sends the receipt and closes
        pass

    _HANDLERS: Dict[str, Callable[["Broker", _Connection, Frame], None]] = {
        "SEND": _on_send,
        "SUBSCRIBE": _on_subscribe,
        "UNSUBSCRIBE": _on_unsubscribe,
        "ACK": _on_ack,
        "NACK": _on_ack,
        "BEGIN": _on_begin,
        "COMMIT": _on_commit,
        "ABORT": _on_abort,
        "DISCONNECT": _on_disconnect,
    }

    # ------------------------------------------------------------------ routing and delivery

    def _new_message(self, destination: str, headers: List[Tuple[str, str]], body: bytes) -> _Message:
        message = _Message(f"msg-{next(self._counter)}", destination, headers, body)
        self._stored += message.size
        self._stored_messages += 1
        return message

    def _route(self, destination: str, headers: List[Tuple[str, str]], body: bytes) -> None:
        kind, key = _canonical(destination)
        if kind == "queue":
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = _Queue(key)
            queue.ready.append(self._new_message(destination, headers, body))
            self._dispatch(queue)
            return
        subs = self._topics.get(key)
        if not subs:
            # A topic keeps nothing for absent subscribers
            self._counts["discarded"] += 1
            return
        for sub in list(subs):
            sub.queue.ready.append(self._new_message(destination, headers, body))
            self._dispatch(sub.queue)

    def _dispatch(self, queue: _Queue) -> None:
        """Deliver ready messages round robin to the consumers that can take one."""
        consumers = queue.consumers
        while queue.ready and consumers:
            n = len(consumers)
            start = queue.next % n
            for i in range(n):
                sub = consumers[(start + i) % n]
                if sub.can_take():
                    queue.next = (start + i + 1) % n
                    self._deliver(sub, queue.ready.popleft())
                    break
            else:
                return

    def _deliver(self, sub: _Subscription, message: _Message) -> None:
        conn = sub.conn
        headers = [("destination", message.destination), ("message-id", message.id)]
        if sub.id is not None:
            headers.append(("subscription", sub.id))
        delivery = None
        if sub.ack != "auto":
            # Like ActiveMQ: unlike message-id, has colons
            ack_id = f"{conn.session}:{next(self._counter)}"
            delivery = _Delivery(message, ack_id, sub)
            sub.unacked[ack_id] = delivery
            conn.by_ack[ack_id] = delivery
            conn.by_message_id[message.id] = delivery
            if conn.version == "1.2":
                headers.append(("ack", ack_id))
        if message.redelivered:
            headers.append(("redelivered", "true"))
        headers.extend(message.headers)
        if self._cut_next_message:
            self._cut_next_message = False
            data = self._encode(conn, "MESSAGE", headers, message.body)
            self._frames_out["MESSAGE"] += 1
            self._write(conn, data[: len(data) // 2])
            if delivery is None:
                self._counts["discarded"] += 1
                self._release(message)
            self._close(conn, "abort-after-flush")
            return
        self._send(conn, "MESSAGE", headers, message.body)
        # Auto: consumed once sent
        if delivery is None:
            self._release(message)

    def _forget_delivery(self, delivery: _Delivery) -> None:
        sub = delivery.sub
        sub.unacked.pop(delivery.ack_id, None)
        sub.conn.by_ack.pop(delivery.ack_id, None)
        if sub.conn.by_message_id.get(delivery.message.id) is delivery:
            del sub.conn.by_message_id[delivery.message.id]

    def _settle(self, command: str, delivery: _Delivery) -> None:
        """ACK or NACK a delivery (``client`` mode: and every earlier unacked one of its subscription)."""
        sub = delivery.sub
        if sub.ack == "client":
            # STOMP 1.2: client-mode ACK "operates on the message specified in the ACK frame and all
            # messages sent to the subscription before the ACK'ed message" (NACK likewise)
            batch = []
            for d in sub.unacked.values():
                batch.append(d)
                if d is delivery:
                    break
        else:
            batch = [delivery]
        for d in batch:
            self._forget_delivery(d)
        if command == "NACK" and self.nack == "requeue":
            for d in reversed(batch):
                d.message.redelivered = True
                sub.queue.ready.appendleft(d.message)
        else:
            if command == "NACK":
                self._counts["discarded"] += len(batch)
            for d in batch:
                self._release(d.message)
        self._dispatch(sub.queue)

    def _unsubscribe(self, sub: _Subscription) -> None:
        conn = sub.conn
        if sub.id is not None:
            if conn.subs.get(sub.id) is not sub:
                return
            del conn.subs[sub.id]
        else:
            if conn.anonymous.get(sub.destination) is not sub:
                return
            del conn.anonymous[sub.destination]
        queue = sub.queue
        index = queue.consumers.index(sub)
        del queue.consumers[index]
        if index < queue.next:
            queue.next -= 1
        pending = list(sub.unacked.values())
        for d in pending:
            self._forget_delivery(d)
        if sub.topic is not None:
            subs = self._topics.get(sub.topic, [])
            if sub in subs:
                subs.remove(sub)
            if not subs:
                self._topics.pop(sub.topic, None)
            self._counts["discarded"] += len(pending)
            for message in itertools.chain((d.message for d in pending), queue.ready):
                # The private queue goes with the subscription
                self._release(message)
            queue.ready.clear()
            return
        # unacked messages go back to the front of the queue, in delivery order, for redelivery
        for d in reversed(pending):
            d.message.redelivered = True
            queue.ready.appendleft(d.message)
        self._dispatch(queue)


# Shown as stompfast.testing.X, the name users import (reprs, help(), pickles),
# as stompfast/__init__.py does for its names; set here because stompfast.testing imports
# this module only on first use.
Broker.__module__ = BrokerStats.__module__ = "stompfast.testing"
