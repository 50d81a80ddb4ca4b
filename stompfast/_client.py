"""AsyncClient: one STOMP connection on anyio (asyncio, asyncio+uvloop, trio).

``async with AsyncClient(url) as client`` opens the TCP connection, sends
CONNECT, waits for CONNECTED (all within ``connect_timeout``), then starts the
client's own task group, where the connection runs its tasks (the reader, the
writer, the heart-beat sender, the liveness watch: :mod:`._link` tells how) and
nothing else. A failure of the connection is recorded once and ends every
pending receipt and subscription; later calls raise the same error. Leaving the
``async with`` block sends DISCONNECT with a receipt and waits for it, shielded
and bounded by ``disconnect_timeout``, then closes the socket.

The client keeps what outlives a connection and decides; the jobs are objects of
their own (docs/architecture.md draws them and says who owns what): the
current :class:`~stompfast._link.Link` (one connection: its session, its
transport, its receipts, its :mod:`._outbox` and :mod:`._inbox`; a new
connection is a new Link), the :class:`~stompfast._supervisor.Supervisor` (the
broker list and reconnecting) and the :class:`~stompfast._stats.Counters`. This
module holds the public API, the lifecycle (connect, close, fail; its states
and their moves are the table of :mod:`._lifecycle`; its endings the table of
:mod:`._ending`) and the two per-message paths that read its state directly:
the plain SEND, inline in :meth:`~AsyncClient.send`, and the common ACK. Every
other SEND is assembled and queued by a :class:`~stompfast._publishing.Publisher`;
a blocking client's thread writing its own SEND or ACK is a
:class:`~stompfast._direct_write.DirectWriter`. The subscriptions and their frames are a
:class:`~stompfast._subscribing.Subscriptions`, the transactions a
:class:`~stompfast._transaction.Transactions`; they read the client only through
its :class:`~stompfast._gate.ClientGate`. The services (``consume``, ``request``,
``health``, ``drain``) are :mod:`._consumer`'s, :mod:`._request`'s and :mod:`._health`'s.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
    overload,
)

import anyio
import anyio.abc
import anyio.lowlevel

from ._brokers import broker_of, reply_destination
from ._common import RETRYABLE, conn_log, copy_error, where
from ._config import Endpoint, check_positive
from ._consumer import DEFAULT_RETRY, AsyncConsumer, ConsumerSet, OnError
from ._direct_write import DirectWriter
from ._ending import ENDINGS, Ending
from ._gate import ClientGate
from ._health import DrainReport, Health, drain, health_of
from ._lifecycle import CLOSED, CLOSING, CONNECTING, FAILED, NEW, OPEN, RECONNECTING, ClientState, advance, describe
from ._link import Link, Lost, loop_and_clock, open_link
from ._options import (
    ClientOptions,
    endpoints_and_policy,
    link_settings,
    resolve as resolve_options,
    signature as options_signature,
)
from ._protocol import Message, SessionState
from ._publishing import Publisher
from ._receipt import Receipt
from ._request import ReplyChannel, Requester, reply_to
from ._stats import ClientStats, Counters
from ._subscribing import Subscriptions
from ._subscription import DEFAULT_BUFFER_SIZE, AsyncSubscription, LiveSession
from ._supervisor import Supervisor
from ._transaction import AsyncTransaction, Transactions
from ._transport import describe_error
from .errors import (
    ClientClosedError,
    ConfigurationError,
    ConnectionLostError,
    ConnectTimeout,
    ServerError,
    StompError,
)

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

__all__ = ["AsyncClient", "AsyncTransaction", "Receipt"]


class AsyncClient:
    """An asynchronous STOMP client: one broker connection at a time, re-established when lost.

    Args:
        url: ``stomp://login:passcode@host:port/virtual_host`` (every part optional
            but the host; port 61613; virtual host ``/``), a list of such URLs
            (failover, tried in order), or ActiveMQ's
            ``failover:(url1,url2)?initialReconnectDelay=100&...`` form.
            Keywords override what the URLs say.
            ``stomp+ssl://``, ``stomp+tls://`` and ``ssl://`` connect with TLS
            (port 61614 when none is given); ``ws://host:port/path`` and
            ``wss://...`` speak STOMP over a WebSocket (the path is the HTTP path,
            e.g. ``/ws`` for RabbitMQ's Web-STOMP; needs ``stompfast[ws]``).
            See docs/tls.md.
        login, passcode: credentials (CONNECT ``login``/``passcode``).
        virtual_host: the CONNECT ``host`` header; ``/`` by default, which works on
            RabbitMQ, ActiveMQ and Artemis alike (also for WebSocket URLs, whose
            path is not the virtual host).
        host, port: where to connect when no URL is given (default 127.0.0.1:61613).
        ssl: TLS. ``None`` (default): as the URL scheme says; ``True``: TLS with
            ``ssl.create_default_context()`` (the system's CAs, certificate and
            host name checked); an ``ssl.SSLContext``: TLS with that context as
            it is (a private CA with ``ctx.load_verify_locations(cafile)``, a
            client certificate with ``ctx.load_cert_chain(certfile, keyfile)``);
            ``False``: no TLS whatever the scheme. A failed handshake raises
            :class:`~stompfast.TLSError`.
        server_hostname: the name sent as SNI and checked against the broker's
            certificate (default: the host connected to). TLS only.
        websocket_max_message_bytes: ``ws://``/``wss://`` only: the most payload
            bytes in one WebSocket message (sent as one WebSocket frame). A write
            longer than that (a burst of frames, or one large frame) goes out as
            several messages, which brokers read as one byte stream. Default
            65,536: Artemis drops the connection on a larger WebSocket frame
            (its ``webSocketMaxFramePayloadLength``). See docs/tls.md.
        versions: STOMP versions to offer (default all three; the broker picks).
        heart_beat: ``(cx, cy)`` milliseconds: how often we can send, how often we
            want to hear from the broker (0 = never). Default ``(10000, 10000)``.
        heartbeat_tolerance: how many broker intervals of silence mean the
            connection is dead (default 3: ActiveMQ spaces its beats up to twice
            the agreed interval).
        connect_headers: extra CONNECT headers (e.g. ``{"activemq.prefetchSize": "1"}``).
        client_id: this client's identity, sent as the CONNECT ``client-id``
            header: ActiveMQ Classic and Artemis keep durable subscriptions
            (``subscribe(..., durable=name)``) under it, so a later connection with
            the same ``client_id`` finds them again. ActiveMQ Classic refuses a
            second connection with a ``client_id`` already connected. Default None.
        connect_timeout: seconds for TCP connect plus CONNECTED (ConnectTimeout).
        use_stomp_command: send ``STOMP`` instead of ``CONNECT`` (1.1+ brokers).
        routing_headers: on ActiveMQ Artemis (known by CONNECTED's ``server``
            header), give ``/queue/`` destinations ``destination-type`` and
            ``subscription-type`` ``ANYCAST`` and ``/topic/`` ones ``MULTICAST``,
            so that they are a queue and a topic as on every other broker (a
            stock Artemis makes new addresses MULTICAST). Headers you pass win.
            Default True; False sends only yours (docs/brokers.md).
        persistent: whether a SEND that does not say (no ``persistent=`` and no
            ``persistent`` header) asks the broker to store the message, so that
            it survives a broker restart. None (default): ``/queue/``
            destinations get ``persistent:true``, on every broker (each
            otherwise keeps a STOMP message in memory only); nothing is added
            elsewhere. True: every SEND gets
            ``persistent:true``; False: none does (each broker's own default,
            not persistent). docs/brokers.md has the cost, measured.
        send_buffer_bytes: unwritten outgoing bytes beyond which ``send`` waits
            (a burst is written out every 256 KiB on asyncio, so this is reached
            only when the socket does not keep up).
        stall_timeout: seconds the reader may be stopped by a full subscription
            before pending receipts fail with FlowControlError.
        disconnect_timeout: seconds to wait for the DISCONNECT receipt on close.
        max_frame_bytes, max_headers, max_header_bytes: scanner limits for
            received frames (see docs/framing.md).
        reconnect: True (default), False, or a :class:`ReconnectPolicy`. When on,
            a lost session is re-established with backoff and every
            subscription re-subscribed; pending receipts still fail with the
            error that ended the connection (they are never re-sent). See
            docs/reconnect.md.
        on_event: called with a :class:`ConnectionEvent` on every connect,
            failure, loss and retry (from the event loop; keep it quick; what it
            raises is logged and ignored).
    """

    def __init__(
        self, url: Union[str, Endpoint, Sequence[Union[str, Endpoint]], None] = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        o = resolve_options(options, "AsyncClient")
        endpoints, policy = endpoints_and_policy(url, o)
        #: every broker this client may use, in the order they are tried
        self.endpoints: Tuple[Endpoint, ...] = tuple(endpoints)
        if o["on_event"] is not None and not callable(o["on_event"]):
            raise ConfigurationError(f"on_event must be callable, not {o['on_event']!r}")
        self._settings = link_settings(o, endpoints)
        self._disconnect_timeout: float = check_positive("disconnect_timeout", o["disconnect_timeout"])
        self._counts = Counters()
        self._supervisor = Supervisor(
            self.endpoints, policy, o["on_event"], counters=self._counts, connect=self._connect_to,
            reopened=self._reopened, give_up=self._give_up,
        )
        # Guards the receipt registry and the current link against send_from_thread
        # (the blocking client's threads); the loop takes it only to fail receipts
        # in bulk and to install a link.
        self._registry_lock = threading.Lock()
        # The session acks may go to (the subscriptions' fast stale test).
        self._live = LiveSession()
        # The SENDs but the plain one, and the waits for room and receipts (a plain SEND is send's own).
        self._publisher = Publisher(self._current_link, self._check_open, self._counts)
        # A blocking client's threads writing their own SEND or ACK, under the registry lock.
        self._direct = DirectWriter(self._registry_lock, self._thread_writable, self._event_loop)
        # What the session services (subscriptions, transactions) may ask of the client.
        gate = ClientGate(
            self._current_link, self._is_open, self._is_reconnecting, self._has_failed, self._ensure_open,
            self._check_open, self._publisher.queue_when_room,
        )
        # The subscriptions by id: their inlets outlive a connection (re-subscribed after a reconnect).
        self._subs = Subscriptions(gate, self._counts, self._live, self._queue_ack, self._get_disconnect_timeout)
        self._transactions = Transactions(gate, self._counts)
        # Before the first connection, an idle link (closed, empty). Its protocol
        # (a session of its own) checks versions, heart_beat and limits before any I/O.
        self._link = Link(
            endpoints[0], self._settings.protocol(endpoints[0]), None, settings=self._settings, subs=self._subs.by_id,
            counters=self._counts, lock=self._registry_lock,
        )
        self._tg: Optional[anyio.abc.TaskGroup] = None
        # Where the client is in its life (docs and the table of moves: _lifecycle.py).
        self._state = ClientState.NEW
        self._error: Optional[BaseException] = None
        # The asyncio loop (None on trio): receipts wait on its futures.
        self._loop: Any = None
        self._clock: Callable[[], float] = anyio.current_time
        self._via_aenter = False
        # The consume()s (health and drain look at them).
        self._consumers = ConsumerSet()
        # The request/reply service (made at the first request).
        self._requests: Optional[Requester] = None

    @property
    def version(self) -> Optional[str]:
        """The negotiated STOMP version (None before CONNECTED)."""
        return self._link.protocol.version

    @property
    def server(self) -> Optional[str]:
        """The broker's ``server`` header, e.g. ``RabbitMQ/3.10.8``."""
        return self._link.protocol.server

    @property
    def session(self) -> Optional[str]:
        """The broker's ``session`` id."""
        return self._link.protocol.session

    @property
    def heart_beat(self) -> Tuple[int, int]:
        """Negotiated ``(send_ms, receive_ms)``: our beat interval, the broker's (0: none)."""
        return self._link.protocol.heart_beat

    @property
    def endpoint(self) -> Endpoint:
        """The broker of the current (or last) connection (before the first: the first of :attr:`endpoints`)."""
        return self._link.endpoint

    @property
    def reconnects(self) -> int:
        """How many times a lost session was re-established."""
        return self._counts.reconnects

    def stats(self) -> ClientStats:
        """A snapshot of this client's counters and gauges (from any thread): see :class:`ClientStats`.

        Cheap enough to call every second; the counters cost the client next to
        nothing (docs/observability.md).
        """
        requests = self._requests
        return self._link.snapshot(
            self._subs.inlets(), self._registry_lock, late_replies=requests.late if requests is not None else 0
        )

    @property
    def is_connected(self) -> bool:
        return self._state is OPEN

    def __repr__(self) -> str:
        # The URL without its passcode, and the state as a person would say it.
        state = describe(self._state, self._error)
        version = f" STOMP {self.version}" if self.version and state == "connected" else ""
        return f"<AsyncClient {self.endpoint.url} {state}{version}>"

    @property
    def disconnect_timeout(self) -> float:
        """Seconds closing may take: waiting for the DISCONNECT receipt (or an UNSUBSCRIBE's room to be queued).

        Settable, e.g. to close faster when shutting down in a hurry.
        """
        return self._disconnect_timeout

    @disconnect_timeout.setter
    def disconnect_timeout(self, seconds: float) -> None:
        self._disconnect_timeout = check_positive("disconnect_timeout", seconds)

    @property
    def error(self) -> Optional[BaseException]:
        """What ended the connection, if it failed."""
        return self._error

    async def __aenter__(self) -> "AsyncClient":
        self._via_aenter = True
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        exc_type = exc_info[0] if exc_info else None
        cancelled = exc_type is not None and issubclass(exc_type, anyio.get_cancelled_exc_class())
        try:
            await self._shutdown(cancelled=cancelled)
        finally:
            await self._exit_group()

    async def connect(self) -> None:
        """Open the connection and the STOMP session (trying each broker of the list in turn).

        Raises:
            ConnectError: the TCP connection failed or the broker closed it early
                (with several brokers: every one failed; the message lists why).
            ConnectTimeout: no connection or no CONNECTED within ``connect_timeout``.
            AuthenticationError: the broker answered CONNECT with ERROR.
            ClientClosedError: this client was already used.
        """
        if self._state is not NEW:
            raise ClientClosedError("an AsyncClient connects once; create a new one to connect again")
        self._state = advance(self._state, CONNECTING)
        self._loop, self._clock = loop_and_clock()
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            await self._supervisor.establish(first=True)
            if self._state is not CONNECTING:
                raise ClientClosedError("the client was closed while it connected")
            self._state = advance(self._state, OPEN)
            # The connection may have failed while connect() completed (an ERROR read with
            # CONNECTED): _fail recorded it but left CONNECTING, so the client is FAILED now.
            if self._error is not None:
                self._state = advance(self._state, FAILED)
            if self._supervisor.policy.enabled:
                self._supervisor.start(tg)
        except BaseException as exc:
            # (An aclose() from another task that began meanwhile ends in CLOSED itself.)
            link = self._link
            closed = exc if isinstance(exc, StompError) else ClientClosedError("the client is closed")
            self._end(Ending.CONNECT_FAILED, closed, link)
            # The task group must be left outside any scope entered after it.
            self._tg = None
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
            await link.aclose()
            raise

    async def _connect_to(self, endpoint: Endpoint, first: bool) -> Link:
        """Open a link to ``endpoint`` and make it the client's; on a reconnect, re-subscribe first.

        The broker counts as up only after CONNECTED and, on a reconnect, after it
        confirmed every re-established subscription.
        """
        link, leftover = await open_link(
            endpoint, self._settings, subs=self._subs.by_id, counters=self._counts, lock=self._registry_lock,
            clock=self._clock, loop=self._loop, on_failure=self._fail,
        )
        # A thread sending directly sees all of the new link or none of it; the
        # replaced link's counts join the client's totals (stats() sees each once).
        with self._registry_lock:
            self._link.hand_counts_over()
            self._link = link
        self._supervisor.attach()
        # Acks of this session's messages may go out from now on.
        self._live.protocol = link.protocol
        assert self._tg is not None
        link.start(self._tg, leftover)
        if not first and self._subs.by_id:
            await self._resubscribe(link)
        return link

    async def _resubscribe(self, link: Link) -> None:
        """Re-subscribe everything on a new ``link``; if the broker does not confirm it all, take the link down."""
        timeout = self._settings.connect_timeout
        try:
            await self._subs.resubscribe(link, timeout)
        except BaseException as exc:
            # Not up after all: take the link down again (quietly: the supervisor
            # reports it as a failed attempt).
            if link.alive:
                self._link_down(exc if isinstance(exc, StompError) else ConnectionLostError(str(exc)))
            await link.aclose()
            if isinstance(exc, TimeoutError):
                raise ConnectTimeout(
                    f"{link.endpoint.host}:{link.endpoint.port} did not confirm the re-established subscriptions"
                    f" within {timeout:g} s"
                ) from exc
            raise

    def _reopened(self) -> bool:
        """A lost session is re-established: open again; False if the client began to close meanwhile."""
        if self._state is not RECONNECTING:
            # aclose() began while the connection was being made: it owns the teardown now.
            return False
        self._state = advance(self._state, OPEN)
        return True

    async def aclose(self) -> None:
        """Send DISCONNECT, wait for its receipt (bounded, shielded), close the socket.

        Safe to call more than once, after a failure, and from any task (inside
        ``async with`` the task group itself is left when the block ends).
        """
        await self._shutdown()
        # connect() entered the group in this task: leave it here
        if not self._via_aenter:
            await self._exit_group()

    async def _exit_group(self) -> None:
        tg, self._tg = self._tg, None
        if tg is not None:
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)

    async def _shutdown(self, *, cancelled: bool = False) -> None:
        if self._state in (CLOSING, CLOSED):
            return
        if self._state is NEW:
            self._state = advance(self._state, CLOSED)
            return
        self._state = advance(self._state, CLOSING)
        link = self._link
        link.expect_eof()
        if self._error is None and conn_log.isEnabledFor(logging.INFO):
            conn_log.info("closing the connection to %s", where(self.endpoint))
        try:
            if self._error is None and link.protocol.state is SessionState.CONNECTED:
                with anyio.CancelScope(shield=True), anyio.move_on_after(self._disconnect_timeout):
                    await link.disconnect(cancelled)
        finally:
            self._end(Ending.CLOSED, self._error or ClientClosedError("the client is closed"), link)
            await link.aclose()

    def _fail(self, error: BaseException) -> None:
        """The connection failed with ``error``: re-establish it, or fail the client for good.

        With reconnecting on, a retryable failure (connection lost, heart-beat
        timeout, ERROR frame, framing fault) of an established session goes to
        :meth:`_link_down`. Otherwise the error is recorded once, every pending
        receipt and every subscription is failed with it, the link is closed.
        """
        if self._error is not None:
            return
        link = self._link
        if self._state in (CLOSING, CLOSED):
            # Our own close is under way (it may be what ended the connection):
            # only end the waits, so that close does not sit out its timeout.
            link.fail_receipts(error)
            return
        if link.ending() and not isinstance(error, ServerError):
            # The broker's ERROR ended this connection and its later ERRORs are being
            # read (a write refused meanwhile is a consequence): that ERROR comes next.
            return
        if (
            self._supervisor.policy.enabled
            and self._state in (OPEN, RECONNECTING)
            and self._supervisor.scope is not None
            and isinstance(error, RETRYABLE)
        ):
            self._link_down(error)
            return
        if self._state is OPEN and conn_log.isEnabledFor(logging.WARNING):
            conn_log.warning("connection to %s failed: %s", where(self.endpoint), describe_error(error))
        # (During the first connect the state stays CONNECTING: connect() is about to raise and close.)
        self._end(Ending.FAILED, error)

    def _link_down(self, error: BaseException) -> None:
        """The current link failed but the client goes on: close it, wake the supervisor.

        Pending receipts fail with ``error`` (never re-sent); queued frames that were
        never written are dropped; buffered messages of client-ack subscriptions
        are discarded (the broker redelivers them, and acking them on a new
        session would be wrong); open transactions are aborted and told.
        """
        if self._link.alive:
            self._end(Ending.LOST, error)

    def _give_up(self, error: BaseException) -> None:
        """No reconnect attempt left: fail the client for good with ``error``."""
        self._end(Ending.GAVE_UP, error)

    def _end(self, ending: Ending, error: BaseException, link: Optional[Link] = None) -> Lost:
        """The one teardown: the steps ``ENDINGS[ending]`` asks for, in their order (:mod:`._ending`).

        ``link``: the one that ends (default: the current one; a close names the link it
        began with). Returns what the link lost (empty when the row keeps the link).
        """
        steps = ENDINGS[ending]
        if link is None:
            link = self._link
        # A clean close ends the subscriptions without an error; a client that failed, with its error.
        sub_error = self._error if steps.subscriptions == "close-and-forget" else error
        was_up = self._state is OPEN
        if steps.record_error:
            self._error = error
        target = steps.moves.get(self._state)
        if target is not None:
            self._state = advance(self._state, target)
        if steps.count_loss and link.alive:
            self._counts.losses += 1
        if steps.forget_session:
            self._live.protocol = None
        if steps.fail_receipts:
            link.fail_receipts(error)
        lost = link.close(error, release=steps.release) if steps.close_link else Lost(error)
        if steps.fail_requests and self._requests is not None:
            self._requests.fail_all(error)
        dropped = self._subs.end(steps.subscriptions, sub_error)
        if dropped:
            lost = lost._replace(dropped_messages=dropped)
        if steps.lose_transactions:
            lost = lost._replace(aborted_transactions=self._transactions.lose(error))
        if steps.supervisor == "stop":
            self._supervisor.stop()
        elif steps.supervisor == "hand-over":
            self._supervisor.link_lost(link, lost, was_up=was_up)
        return lost

    async def _ensure_open(self) -> None:
        """Return when a connection is up; wait while one is being re-established.

        A call refused here (the client failed or is closed) still yields to the loop
        first: a caller retrying on the error (a loop of ``send``) cannot starve every
        other task, the reconnect and the heart-beats included.
        """
        while self._state is RECONNECTING:
            await self._supervisor.wait_up()
        if self._state is not OPEN:
            await anyio.lowlevel.checkpoint()
        self._check_open()

    # -- the gate's answers (ClientGate): what the session services may read of the client --

    def _current_link(self) -> Link:
        return self._link

    def _is_open(self) -> bool:
        return self._state is OPEN

    def _is_reconnecting(self) -> bool:
        return self._state is RECONNECTING

    def _has_failed(self) -> bool:
        return self._error is not None

    def _get_disconnect_timeout(self) -> float:
        return self._disconnect_timeout

    def _event_loop(self) -> Any:
        return self._loop

    def _thread_writable(self) -> Optional[Link]:
        """(Under the registry lock.) The link a thread's frame may be written to now as the next on its wire, or None.

        The client's own, open and alive, with nothing queued or being written by
        the loop and no stall under way (a reconnect installs a new link under this lock).
        """
        link = self._link
        return link if self._state is OPEN and link.may_write_from_thread() else None

    def _check_open(self) -> None:
        if self._error is not None:
            raise copy_error(self._error)
        if self._state is RECONNECTING:
            raise ConnectionLostError(
                f"the connection to {self.endpoint.host}:{self.endpoint.port} was lost and is being"
                " re-established"
            )
        if self._state is not OPEN:
            raise ClientClosedError(
                "the client is not connected (use `async with AsyncClient(...) as client:`)"
                if self._state in (NEW, CONNECTING)
                else "the client is closed"
            )

    @overload
    async def send(
        self, destination: str, body: Union[bytes, bytearray, memoryview, str] = ..., *,
        headers: Optional[Mapping[str, Any]] = ..., content_type: Optional[str] = ...,
        receipt: Literal[False] = ..., wait: bool = ..., content_length: bool = ...,
        ttl: Optional[float] = ..., priority: Optional[int] = ..., persistent: Optional[bool] = ...,
    ) -> None: ...

    @overload
    async def send(
        self, destination: str, body: Union[bytes, bytearray, memoryview, str] = ..., *,
        headers: Optional[Mapping[str, Any]] = ..., content_type: Optional[str] = ...,
        receipt: Literal[True], wait: bool = ..., content_length: bool = ...,
        ttl: Optional[float] = ..., priority: Optional[int] = ..., persistent: Optional[bool] = ...,
    ) -> Receipt: ...

    @overload
    async def send(
        self, destination: str, body: Union[bytes, bytearray, memoryview, str] = ..., *,
        headers: Optional[Mapping[str, Any]] = ..., content_type: Optional[str] = ...,
        receipt: bool = ..., wait: bool = ..., content_length: bool = ...,
        ttl: Optional[float] = ..., priority: Optional[int] = ..., persistent: Optional[bool] = ...,
    ) -> Optional[Receipt]: ...

    async def send(
        self,
        destination: str,
        body: Union[bytes, bytearray, memoryview, str] = b"",
        *,
        headers: Optional[Mapping[str, Any]] = None,
        content_type: Optional[str] = None,
        receipt: bool = False,
        wait: bool = True,
        content_length: bool = True,
        ttl: Optional[float] = None,
        priority: Optional[int] = None,
        persistent: Optional[bool] = None,
    ) -> Optional[Receipt]:
        """Send a message to ``destination``.

        ``body`` is sent as it is if it is bytes-like; a ``str`` is encoded as UTF-8
        and, unless ``content_type`` says otherwise, labelled
        ``text/plain;charset=utf-8``. Without ``receipt`` the frame is queued and
        the call returns (it is written when the task next yields). With
        ``receipt=True`` the call returns once the broker confirmed the frame, or,
        with ``wait=False``, at once with the pending :class:`Receipt` (pipelining).
        ``content_length=False`` leaves the ``content-length`` header out: ActiveMQ
        and Artemis then deliver a JMS TextMessage instead of a BytesMessage
        (docs/brokers.md); the body may not hold a NUL byte (LocalProtocolError).

        The message options are written in the headers the connected broker
        reads (docs/brokers.md has what each broker does with them):

        - ``ttl``: seconds (above 0, at most ten years) after which the broker
          discards the message if it is still queued: ``expiration`` (ms) on
          RabbitMQ, ``expires`` (the epoch ms, by the broker's clock) on
          ActiveMQ Classic and Artemis.
        - ``priority``: 0 to 9, the ``priority`` header. Artemis delivers higher
          ones first; RabbitMQ only on a queue declared with ``x-max-priority``,
          ActiveMQ Classic only with ``prioritizedMessages`` in its policy.
        - ``persistent``: True or False, the ``persistent`` header: whether the
          broker stores the message so that it survives a restart. Default:
          the client's ``persistent=`` option.

        A bad value, or an option together with the header it writes in
        ``headers``, raises ConfigurationError and sends nothing.

        Raises:
            ServerError: the broker refused it (with ``receipt``).
            ConnectionLostError: the connection ended before the receipt came.
            LocalProtocolError: the frame cannot be expressed (nothing was sent).
            ConfigurationError: a bad ``ttl``, ``priority`` or ``persistent`` (nothing was sent).
        """
        if self._state is not OPEN:
            await self._ensure_open()
        if (type(body) is bytes and headers is None and content_type is None and not receipt and content_length
                and ttl is None and priority is None and persistent is None):
            # The hot path, a plain SEND, stays inline: it pays no call but the encoding and the offer.
            link = self._link
            data = link.protocol.send_plain(destination, body)
            if not link.offer(data):
                await self._publisher.queue_past_mark(data)
            return None
        return await self._publisher.send(
            self._link, destination, body, headers, content_type, receipt, wait, content_length, ttl, priority,
            persistent,
        )

    def message_headers(
        self, headers: Optional[Mapping[str, Any]], ttl: Optional[float] = None, priority: Optional[int] = None,
        persistent: Optional[bool] = None,
    ) -> Dict[str, Any]:
        """(Any thread.) ``headers`` and the headers that ask the connected broker for these message options.

        What :meth:`send` writes for ``ttl``, ``priority`` and ``persistent``, the
        time to live counted from now; ConfigurationError for a bad value.
        """
        return self._link.protocol.message_headers(headers, ttl, priority, persistent, time.time())

    def _queue_ack(self, message: Message) -> bool:
        """The common ACK (no receipt, no transaction) queued now; False if that must wait (the caller awaits)."""
        return self._state is OPEN and self._link.queue_ack(message)

    def send_nowait(
        self,
        destination: str,
        body: Union[bytes, bytearray, memoryview, str] = b"",
        *,
        headers: Optional[Mapping[str, Any]] = None,
        content_type: Optional[str] = None,
        receipt: bool = False,
    ) -> Optional[Receipt]:
        """:meth:`send` without waiting, for synchronous code running in the event loop.

        The same frame, queued (or written) at once; with ``receipt=True`` the
        pending :class:`Receipt` is returned (``add_done_callback`` tells when it
        is done). This is how the blocking client sends from a loop callback
        instead of a task per call.

        Raises:
            anyio.WouldBlock: nothing was queued because the call would have to
                wait (the connection is being re-established, or the send buffer
                is full): ``await send(...)`` instead.
            ClientClosedError, ConnectionLostError, ...: as :meth:`send`.
        """
        if self._state is not OPEN:
            if self._state is RECONNECTING:
                raise anyio.WouldBlock
            self._check_open()
        return self._publisher.send_nowait(self._link, destination, body, headers, content_type, receipt)

    def send_from_thread(
        self,
        destination: str,
        body: Union[bytes, bytearray, memoryview, str],
        headers: Optional[Mapping[str, Any]],
        content_type: Optional[str],
        on_done: Callable[[Receipt], Any],
    ) -> Optional[Receipt]:
        """(Any thread.) A SEND with a receipt, written to the socket by the calling thread itself.

        The blocking client's round trip: no hop into the event loop to send, so
        the loop wakes only for the RECEIPT (``on_done(receipt)`` is then called
        in the loop). Returns None, having sent nothing, whenever that is not
        safe at this moment: TLS (its state belongs to the loop) or a trio
        WebSocket, frames queued or being written ahead of this one (order),
        bytes the transport has not written yet, a reconnect or a stall under
        way. The caller then sends through the loop.

        Raises LocalProtocolError (and TypeError for a body of another type) as
        :meth:`send` does.
        """
        return self._direct.send(destination, body, headers, content_type, on_done)

    def ack_from_thread(self, message: Message) -> bool:
        """(Any thread.) The common ACK (no receipt, no transaction, no headers) written by the calling thread.

        The blocking client's ``for message in sub: message.ack()``: the ACK goes
        to the socket from the consumer's thread, so the event loop does not wake
        to write it. False, having sent nothing and left the message as it was,
        whenever that is not safe at this moment (as :meth:`send_from_thread`:
        TLS or a trio WebSocket, frames queued or being written ahead of it, bytes the
        transport has not written yet, a reconnect or a stall under way, a
        message of another connection); the caller then queues it.
        The caller has made the checks that need no I/O (a stale message, a
        second ack) and knows nothing of its own is queued ahead of it.
        """
        return self._direct.ack(message)

    def check_send(
        self, destination: str, headers: Optional[Mapping[str, Any]] = None, content_type: Optional[str] = None
    ) -> None:
        """(Any thread.) Raise what :meth:`send` would raise for these headers on this session; send nothing.

        LocalProtocolError for a destination, header or content type the
        negotiated STOMP version cannot carry (a NUL anywhere; on 1.0 a CR or LF;
        on 1.1 a CR). For code that queues sends to be written later, so that bad
        input is refused by the call that made it.
        """
        self._link.protocol.check_send(destination, headers, content_type)

    async def wait_receipts(self, receipts: Iterable[Optional[Receipt]]) -> None:
        """Wait for every receipt of ``receipts`` (None entries are skipped); raise the first failure."""
        for receipt in receipts:
            if receipt is not None:
                await receipt.wait()

    async def flush(self) -> None:
        """Return once the broker confirmed everything sent before this call.

        Waits for every receipt outstanding now (RabbitMQ may confirm a later
        frame before earlier SENDs, so all of them are awaited, not only the last)
        and for a probe frame (BEGIN + ABORT with a receipt) that follows every
        frame sent so far, receipt or not.
        """
        await self._ensure_open()
        await self._publisher.flush(self._link)

    # -- subscriptions (their table and frames: _subscribing.Subscriptions) ---------------

    def subscribe(
        self,
        destination: str,
        *,
        ack: str = "auto",
        headers: Optional[Mapping[str, Any]] = None,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        receipt: bool = True,
        id: Optional[str] = None,
        durable: Optional[str] = None,
        selector: Optional[str] = None,
    ) -> AsyncSubscription:
        """A subscription to ``destination``, used as ``async with client.subscribe(...) as sub:``.

        Args:
            ack: ``"auto"``, ``"client"`` (cumulative acks) or ``"client-individual"``.
            headers: extra SUBSCRIBE headers, passed through (``selector``,
                ``prefetch-count``, ``activemq.prefetchSize``, ``durable``, ...).
            buffer_size: messages buffered before the reader stops reading; in the
                client modes also the broker prefetch asked for, unless ``headers``
                set one.
            receipt: wait for the broker to confirm the subscription on entry
                (errors such as a refused destination surface there).
            id: the subscription id (default: a counter; a durable subscription's is its name).
            durable: a durable subscription of this name (for a ``/topic/``): the
                broker keeps it, and the messages sent while nobody is subscribed,
                when the subscriber leaves or loses its connection; subscribing
                again with the same name (and the same ``client_id``) gets them.
                The client writes the headers the broker reads (docs/brokers.md).
                ActiveMQ Classic and Artemis need the client's ``client_id``:
                without one it is refused (ConfigurationError) once the broker is
                known. Leaving the block keeps it; ``aclose(forget=True)`` deletes it.
            selector: deliver only the messages this JMS selector (an SQL-92
                expression over their headers, e.g. ``"region = 'EU'"``) matches:
                the ``selector`` header, which ActiveMQ Classic and Artemis apply.
                RabbitMQ ignores it (it would deliver every message), so there
                the subscription is refused with ConfigurationError, as it is for
                a ``selector`` in ``headers`` (docs/brokers.md).
        """
        # Refused by this call, not when the block is entered
        return self._subs.new(destination, ack, headers, buffer_size, receipt, id, durable, selector)

    async def ack(
        self, message: Message, *, receipt: bool = False, headers: Optional[Mapping[str, Any]] = None
    ) -> None:
        """Acknowledge ``message`` (same as ``await message.ack()``)."""
        # The async ack, whatever subclass the message is
        await Message.ack(message, receipt=receipt, headers=headers)

    async def nack(
        self, message: Message, *, receipt: bool = False, headers: Optional[Mapping[str, Any]] = None
    ) -> None:
        """Refuse ``message`` (same as ``await message.nack()``; STOMP 1.1+)."""
        await Message.nack(message, receipt=receipt, headers=headers)

    # -- services: handlers, health, drain -------------------------------------------------

    async def consume(
        self,
        destination: str,
        handler: Callable[[Message], Awaitable[Any]],
        *,
        concurrency: int = 1,
        ack: str = "client-individual",
        on_error: OnError = DEFAULT_RETRY,
        prefetch: Optional[int] = None,
        headers: Optional[Mapping[str, Any]] = None,
        id: Optional[str] = None,
        durable: Optional[str] = None,
    ) -> AsyncConsumer:
        """Run ``await handler(message)`` for every message of ``destination``, ``concurrency`` at a time.

        Returns once the broker confirmed the subscription; the handlers then run
        in the client's task group until the consumer is drained or stopped, or
        the client closes. A handler that returns acks its message. One that
        raises is logged (with its traceback, rate-limited) and dealt with as
        ``on_error`` says, the same on every broker (docs/guarantees.md):

        - a :class:`RetryPolicy` (the default, ``RetryPolicy()``; ``"retry"`` is
          the same): the handler is called again on the unacknowledged message
          after a growing delay, up to ``attempts`` calls; then a persistent copy
          goes to the dead-letter destination (``/queue/jobs`` -> ``/queue/jobs.dlq``
          by default) with ``sf-attempts`` and ``sf-error`` headers, confirmed by
          the broker, and only then is the original acked;
        - ``"dead-letter"``: to the default dead-letter destination at once;
        - ``"ack"`` (drop it); ``"nack"`` or ``Nack(headers)``: the broker's own
          NACK, whose outcome differs per broker (RabbitMQ requeues it at once,
          ActiveMQ Classic and Artemis may discard it: docs/brokers.md);
        - ``"stop"``: leave it unsettled and stop the consumer (``await
          consumer.wait()`` raises the handler's error);
        - a callable ``on_error(message, exc)`` returning (or awaiting) one of those.

        In ``ack="auto"`` the broker needs no settle: ack and nack do nothing,
        retries and dead letters still happen. With ``concurrency=1`` messages are
        handled one at a time, in order.

        Args:
            prefetch: messages the broker may deliver ahead (the subscription's
                buffer; the broker's prefetch in the client ack modes). Default
                twice ``concurrency``: enough that a worker finds the next message
                waiting, little enough that the rest stays with the broker.
            headers, id, durable: as :meth:`subscribe`.

        Raises ConfigurationError for bad options (``ack="client"``, cumulative,
        needs ``concurrency=1``) and what :meth:`subscribe` raises on entry.
        """
        consumer = await self._consumers.open(
            self.subscribe, lambda: broker_of(self.server), self._publish_confirmed, destination, handler,
            concurrency=concurrency, ack=ack, on_error=on_error, prefetch=prefetch, headers=headers, id=id,
            durable=durable,
        )
        assert self._tg is not None
        consumer.start(self._tg)
        return consumer

    async def _publish_confirmed(self, destination: str, body: bytes, headers: Mapping[str, str]) -> None:
        """A SEND that returns once the broker confirmed it (a consumer's dead letters)."""
        await self.send(destination, body, headers=headers, receipt=True)

    async def request(
        self,
        destination: str,
        body: Union[bytes, bytearray, memoryview, str] = b"",
        *,
        timeout: float = 30.0,
        headers: Optional[Mapping[str, Any]] = None,
        content_type: Optional[str] = None,
    ) -> Message:
        """Send a request to ``destination`` and return the reply (a :class:`Message`).

        The request carries ``reply-to`` (this client's reply destination, of the
        kind its broker offers: docs/brokers.md) and a fresh ``correlation-id``;
        the responder answers with :meth:`reply`. Any number of requests may be
        pending at once; each gets the reply carrying its correlation id.

        The request expires with its ``timeout`` (``send(..., ttl=timeout)``): once
        the requester has given up, the broker discards it if it is still
        queued, so a responder that starts later does not process a request
        whose reply nobody waits for. ``headers`` may therefore not set
        ``expiration`` or ``expires`` (ConfigurationError).

        Raises:
            RequestTimeout: no reply within ``timeout`` seconds (a later one is
                dropped and counted in ``stats().late_replies``).
            ConnectionLostError: the connection was lost before the reply came
                (a reconnect makes a new reply destination; send again).
            LocalProtocolError: the request cannot be expressed (nothing was sent).
        """
        check_positive("timeout", timeout)
        requests = self._requests
        if requests is None:
            requests = self._requests = Requester(self.send, self._ensure_open, self._reply_channel)
        return await requests.request(destination, body, timeout=timeout, headers=headers, content_type=content_type)

    def _reply_channel(self) -> ReplyChannel:
        """A reply channel on the live connection, of the kind its broker offers (the Requester enters it)."""
        destination, implicit = reply_destination(self._link.protocol.broker, uuid.uuid4().hex[:16])
        return ReplyChannel(destination, self._subs.for_replies(destination, implicit, DEFAULT_BUFFER_SIZE), self._loop)

    async def reply(
        self,
        request: Message,
        body: Union[bytes, bytearray, memoryview, str] = b"",
        *,
        headers: Optional[Mapping[str, Any]] = None,
        content_type: Optional[str] = None,
        receipt: bool = False,
    ) -> Optional[Receipt]:
        """Answer ``request`` (a message sent with :meth:`request`, or any with a ``reply-to`` header).

        Sends ``body`` to the request's ``reply-to`` destination with its
        ``correlation-id``; the rest is :meth:`send`'s.

        Raises:
            LocalProtocolError: the message has no ``reply-to`` header.
        """
        destination, reply_headers = reply_to(request, headers)
        return await self.send(destination, body, headers=reply_headers, content_type=content_type, receipt=receipt)

    def health(self, *, handler_limit: float = 60.0) -> Health:
        """Whether this client is really working, for a readiness probe: see :class:`Health`.

        ``ready`` needs the connection up, the broker's heart-beats (if agreed)
        arriving within twice their interval, and no :meth:`consume` handler
        running for more than ``handler_limit`` seconds. Cheap (no I/O); call it
        from the event loop (the blocking client's ``health()`` does).
        """
        check_positive("handler_limit", handler_limit)
        state = describe(self._state, self._error)
        return health_of(state, self._state is OPEN, self._link, self._clock(), self._consumers, handler_limit)

    async def drain(self, timeout: float = 30.0) -> DrainReport:
        """Shut down gracefully: finish what is in flight, then close; report what could not finish.

        1. every :meth:`consume` stops taking messages; 2. the running handlers
        finish and settle; 3. the consumers' subscriptions are closed (UNSUBSCRIBE:
        what they buffered and never handled is redelivered by the broker);
        4. the receipts still pending are awaited; 5. DISCONNECT and close, as
        :meth:`aclose`. Steps 2 and 4 share ``timeout`` seconds; what was still
        unfinished then is counted in the report, never silently dropped.
        """
        check_positive("timeout", timeout)
        return await drain(
            timeout, self._consumers, lambda: self._link.outstanding() if self._state is OPEN else [], self.aclose
        )

    def transaction(self, *, receipt: bool = True) -> "AsyncTransaction":
        """A transaction: ``async with client.transaction() as tx:``.

        BEGIN on entry; COMMIT on normal exit (confirmed by a receipt unless
        ``receipt=False``); ABORT on an exception or cancellation.
        """
        return self._transactions.new(receipt)

AsyncClient.__init__.__signature__ = options_signature(AsyncClient.__init__)  # type: ignore[attr-defined]
