"""An in-process STOMP 1.0/1.1/1.2 broker for tests and demos, with fault injection.

Theory of operation
-------------------
:class:`Broker` listens on loopback with :func:`anyio.create_tcp_listener` and
runs inside the caller's event loop (``async with Broker() as broker``) or in a
thread of its own (``with Broker.in_thread() as broker``). It imports anyio
only, so it runs on asyncio, asyncio + uvloop and trio.

Its parts have a module each, and each object changes only its own state:
this module is the facade (the options, the lifecycle, the public methods,
accepting connections); ``_broker_conn`` is one client connection (its reader
and writer and the handling of each frame); ``_broker_store`` holds the
destinations (queues and topics, routing, delivery, acks, the memory limit);
``_broker_model`` has the values they pass each other (messages, queues,
deliveries, subscriptions, the counters, the faults asked for); and
``_broker_listener`` is the server socket (TCP, and TLS over it).

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
from functools import partial
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

import anyio

from .. import __version__
from .._scanner import FrameScanner
from ..frames import Frame
from ._broker_conn import Connection, Settings
from ._broker_listener import aclose_quietly, open_listener
from ._broker_model import MESSAGE_OVERHEAD, VERSIONS, BrokerStats, Faults, Tally
from ._broker_store import Store
from ._threaded import RunsInThread

__all__ = ["DEFAULT_MAX_BYTES", "MESSAGE_OVERHEAD", "Broker", "BrokerStats"]

log = logging.getLogger("stompfast.testing")

#: Default ``max_bytes`` of :class:`Broker`: 256 MiB of stored messages (about 870,000 small ones;
#: measured, the process then stays near 365 MB RSS) bounds what a producer without consumers can make the
#: broker hold, on any developer machine or CI runner, yet leaves room for any demo, test or bench
#: backlog. Real brokers do the same: RabbitMQ blocks publishers at 40% of RAM.
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
_WHEN_FULL = ("block", "error")


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
        versions: Iterable[str] = VERSIONS,
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
        if not versions or any(v not in VERSIONS for v in versions):
            raise ValueError(f"versions must be a non-empty subset of {VERSIONS}, got {versions!r}")
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
        self.versions = tuple(v for v in VERSIONS if v in versions)
        self.heart_beat = (sx, sy)
        self.users = dict(users) if users is not None else None
        self.server = server if server is not None else f"stompfast-testing/{__version__}"
        self.nack = nack
        self.heartbeat_grace = heartbeat_grace
        self.linger = linger
        self.max_bytes = max_bytes
        self.when_full = when_full
        self._limits = {
            "max_frame_bytes": max_frame_bytes,
            "max_headers": max_headers,
            "max_header_bytes": max_header_bytes,
        }
        # Invalid limits fail here, in the caller's hands, rather than at each connection.
        FrameScanner(**self._limits)  # type: ignore[arg-type]
        self.ssl_context = ssl_context
        self._tally = Tally(record, record_limit)
        self._faults = Faults()
        self._store = Store(self._tally, self._faults, nack, max_bytes)
        self._port: Optional[int] = None
        self._tg: Any = None
        self._listener: Any = None
        self._started = False
        self._closed = False
        self._conns: Dict[Connection, None] = {}
        self._conn_counter = itertools.count(1)
        self._errors: List[BaseException] = []

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> "Broker":
        if self._started:
            raise RuntimeError("a Broker can be started only once")
        self._started = True
        self._loop_thread = threading.get_ident()
        self._listener, self._port = await open_listener(
            self.host, self._requested_port, self.ssl_context, self._tally
        )
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._listener.serve, self._serve_connection, self._tg)
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        """Stop listening and close every connection at once (shielded, bounded)."""
        self._closed = True
        self._tg.cancel_scope.cancel()
        try:
            # The broker's own tasks never fail; not handing the body's exception to the task
            # group lets it propagate as it is instead of wrapped in an ExceptionGroup.
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
        return self._call(self._store.queue_depth, destination)

    def unacked(self, destination: str) -> int:
        """Number of messages of a destination delivered and not yet acked or nacked."""
        return self._call(self._store.unacked, destination)

    def consumers(self, destination: str) -> int:
        """Number of subscriptions currently on a destination."""
        return self._call(self._store.consumers, destination)

    @property
    def stats(self) -> BrokerStats:
        """A snapshot of the frame and event counters (:class:`BrokerStats`)."""
        return self._call(self._stats)

    def _stats(self) -> BrokerStats:
        c = self._tally.events
        store = self._store
        return BrokerStats(
            frames_in=dict(self._tally.frames_in),
            frames_out=dict(self._tally.frames_out),
            heartbeats_in=c["heartbeats_in"],
            heartbeats_out=c["heartbeats_out"],
            connections_accepted=c["accepted"],
            connections_refused=c["refused"],
            messages_discarded=c["discarded"],
            receipts_withheld=c["withheld"],
            tls_handshakes_failed=c["tls_handshake_failed"],
            stored_bytes=store.stored,
            stored_messages=store.stored_messages,
            producers_blocked=store.blocked,
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
        return self._call(lambda: list(self._tally.received))

    def clear_received(self) -> None:
        """Forget the frames recorded in :attr:`received`."""
        self._call(self._tally.clear_received)

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
                with anyio.move_on_after(0.05):
                    await self._store.changed()

    def wait_for_blocking(self, predicate: Callable[[], Any], timeout: float = 5.0) -> None:
        """:meth:`wait_for` for synchronous code, on a broker started with :meth:`in_thread`."""
        if self._portal is None:
            raise RuntimeError("wait_for_blocking() needs a broker started with Broker.in_thread()")
        self._portal.call(self.wait_for, predicate, timeout)

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
        self._call(self._store.publish, destination, bytes(body), dict(headers or {}))

    def purge(self, destination: str) -> int:
        """Discard the ready messages of a destination; returns how many there were."""
        return self._call(self._store.purge, destination)

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
            conn.close("abort")

    def drop_mid_frame(self) -> None:
        """Cut the next MESSAGE frame the broker sends, to any client, in half, then close that socket.

        The first ``len(frame) // 2`` bytes are written after whatever was
        queued before them, then the socket is closed. The message counts as
        delivered: on a ``client``/``client-individual`` subscription it is
        requeued and redelivered with ``redelivered:true``; on an ``auto`` one
        it is lost (counted in ``messages_discarded``). Armed until a MESSAGE is
        sent or :meth:`clear_faults` is called.
        """
        self._call(self._faults.arm_cut)

    def withhold_receipts(self, on: bool = True) -> None:
        """Stop (``on=True``) or resume sending RECEIPT frames; frames are still processed.

        A withheld receipt is never sent later (it is counted in
        ``receipts_withheld``). A DISCONNECT with a withheld receipt still closes
        the connection.
        """
        self._call(self._faults.withhold_receipts, bool(on))

    def delay_receipts(self, seconds: float) -> None:
        """Send each RECEIPT ``seconds`` after its frame was processed (0 turns the delay off).

        Frames are processed at once, so MESSAGE frames can overtake a delayed
        receipt (as RabbitMQ's confirms-based SEND receipts do). A DISCONNECT's
        receipt is delayed too, and the connection closes after it.
        """
        self._call(self._faults.delay_receipts, max(0.0, float(seconds)))

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
                conn.error(message, body)
                if close:
                    conn.close()

    def stop_heartbeats(self) -> None:
        """Stop sending heart-beat EOLs to every client (sockets stay open; the broker still reads)."""
        self._call(self._stop_heartbeats, True)

    def resume_heartbeats(self) -> None:
        """Send heart-beats again after :meth:`stop_heartbeats`."""
        self._call(self._stop_heartbeats, False)

    def send_raw(self, data: bytes) -> None:
        """Write ``data`` as is to every open client connection (e.g. a malformed frame)."""
        self._call(self._send_raw, bytes(data))

    def _send_raw(self, data: bytes) -> None:
        for conn in list(self._conns):
            conn.write(data)

    def refuse_connections(self, n: Optional[int] = None) -> None:
        """Accept and immediately close the next ``n`` TCP connections (``None``: until cleared).

        ``refuse_connections(0)`` or :meth:`clear_faults` clears it. The client
        sees its connection end before any frame (EOF, or a reset if it had
        already sent something).
        """
        if n is not None and n < 0:
            raise ValueError("n must be None or >= 0")
        self._call(self._faults.refuse_connections, math.inf if n is None else n)

    def answer_connect_with_error(self, message: str = "Simulated connect error", n: Optional[int] = 1,
                                  body: str = "") -> None:
        """Answer the next ``n`` CONNECT frames (``None``: until cleared) with ERROR, then close.

        The ERROR carries ``message:<message>`` and ``body``; no CONNECTED is
        sent. Credentials and version are not checked for those connections.
        """
        if n is not None and n < 0:
            raise ValueError("n must be None or >= 0")
        self._call(self._faults.error_on_connect, message, math.inf if n is None else n, body)

    def clear_faults(self) -> None:
        """Turn every fault off: receipts sent on time, heart-beats on, connections accepted, nothing cut."""
        self._call(self._clear_faults)

    def _clear_faults(self) -> None:
        self._faults.clear()
        self._wake_writers()

    def _stop_heartbeats(self, stopped: bool) -> None:
        self._faults.stop_heartbeats(stopped)
        self._wake_writers()

    def _wake_writers(self) -> None:
        # Each writer recomputes its heart-beat deadline, which depends on whether heart-beats are stopped.
        for conn in self._conns:
            conn.poke()

    # ------------------------------------------------------------------ connections

    async def _serve_connection(self, stream: Any) -> None:
        self._tally.count("accepted")
        if self._faults.take_refusal() or self._closed:
            self._tally.count("refused")
            await aclose_quietly(stream)
            return
        limits = self._limits
        scanner = FrameScanner(
            version=self.versions[-1],
            max_frame_bytes=limits["max_frame_bytes"],
            max_headers=limits["max_headers"],
            max_header_bytes=limits["max_header_bytes"],
        )
        settings = Settings(
            versions=self.versions,
            heart_beat=self.heart_beat,
            users=self.users,
            server=self.server,
            heartbeat_grace=self.heartbeat_grace,
            linger=self.linger,
            when_full=self.when_full,
        )
        conn = Connection(stream, scanner, next(self._conn_counter), settings, self._store, self._tally,
                          self._faults)
        try:
            await conn.serve(partial(self._opened, conn))
        # A bug of the broker: it keeps serving the others, but says so.
        except Exception as exc:
            self._errors.append(exc)
            log.exception("stompfast.testing: error while serving connection %d", conn.number)
        finally:
            conn.end_session()
            self._conns.pop(conn, None)
            self._store.touch()
            await conn.aclose()

    def _opened(self, conn: Connection) -> None:
        self._conns[conn] = None
        self._store.touch()


# Shown as stompfast.testing.Broker, the name users import (reprs, help(), pickles),
# as stompfast/__init__.py does for its names; set here because stompfast.testing imports
# this module only on first use.
Broker.__module__ = "stompfast.testing"
