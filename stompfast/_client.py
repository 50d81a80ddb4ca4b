"""AsyncClient: one STOMP connection on anyio (asyncio, asyncio+uvloop, trio).

Theory of operation
-------------------
``async with AsyncClient(url) as client`` opens the TCP connection, sends
CONNECT, waits for CONNECTED (all within ``connect_timeout``), then starts the
client's own task group with up to four tasks, and nothing else:

* **reader**: reads large chunks, feeds :class:`~stompfast._protocol.StompProtocol`
  and dispatches every event of one read in one step: messages to their
  subscription buffers (each consumer woken once), receipts to their waiters.
  When a subscription's buffer is full it stops reading (backpressure; see
  :mod:`._subscription`), and while stopped it suspends the liveness check. On
  asyncio there is no reader task: the transport's ``data_received`` callback
  runs the same steps (``Inbox.on_data`` in :mod:`._inbox`), and backpressure pauses the transport
  until the full subscription's consumer takes a message (``Inbox._pause_for``);
* **writer**: :meth:`send` and friends only append encoded frames to an
  outgoing list (no await unless the list holds ``send_buffer_bytes``) and wake
  the writer when the list goes from empty to non-empty, so a burst of sends
  becomes one socket write. Frames are written when the sending task next
  yields to the event loop (any ``await`` that waits) or the buffer is full;
  a task about to wait for a receipt writes what is queued itself when the
  transport can take it at once (asyncio), saving the writer's turn;
* **heart-beat sender**: writes an EOL whenever nothing was written for half
  the negotiated interval, checking every quarter interval, so the broker sees
  at most about 0.75 interval of silence;
* **liveness watch**: if nothing at all arrived for the broker's interval times
  ``heartbeat_tolerance`` while the reader was reading, the connection is
  declared dead with :class:`~stompfast.HeartbeatTimeout`.

Background tasks never raise into the caller's code: a failure (connection
lost, ERROR frame, heart-beat timeout, framing fault) is recorded once, every
pending receipt and every subscription is failed with it, the background tasks
stop and the socket is closed. Later calls raise the same error.

Leaving the ``async with`` block sends DISCONNECT with a receipt and waits for
it, shielded and bounded by ``disconnect_timeout``, then closes the socket.

The class is put together from parts with one job each, one module per part
(docs/architecture.md draws the data flow): :mod:`._link` (open a connection,
CONNECT, install it), :mod:`._supervisor` (the broker list and reconnecting),
:mod:`._outbox` (the send queue, the writer, heart-beats: an object per
connection, the current one in ``self._outbox``), :mod:`._inbox`
(reading, dispatch to subscriptions and receipts, flow control, liveness) and
:mod:`._session` (subscribe, ACK/NACK, transactions). This module holds the
public API, the client's lifecycle (connect, close, fail; its states and their
moves are the table of :mod:`._lifecycle`) and sending.
"""

from __future__ import annotations

import itertools
import logging
import threading
from logging import DEBUG
from time import monotonic
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
    overload,
)

import anyio
import sniffio

from ._common import RETRYABLE, body_bytes, conn_log, copy_error, where
from ._config import Endpoint, check_positive
from ._framelog import FrameLog, frame_log
from ._inbox import Inbox
from ._lifecycle import CLOSED, CLOSING, CONNECTING, FAILED, NEW, OPEN, RECONNECTING, ClientState, advance, describe
from ._link import Link
from ._options import (
    ClientOptions,
    endpoints_and_policy,
    resolve as resolve_options,
    signature as options_signature,
    tls_options,
)
from ._outbox import Outbox
from ._protocol import Message, SessionState
from ._receipt import PendingReceipt, Receipt, ReceiptRegistry
from ._session import Session
from ._stats import Counters
from ._subscription import Inlet, LiveSession, SubscriptionOps
from ._supervisor import Supervisor
from ._transaction import AsyncTransaction, SessionTransaction
from ._transport import AsyncioTransport, StompTransport, describe_error
from .errors import ClientClosedError, ConfigurationError, ConnectionLostError, StompError

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

__all__ = ["AsyncClient", "AsyncTransaction", "Receipt"]

#: The options StompProtocol takes, passed on to each connection's session.
PROTOCOL_OPTIONS = (
    "versions", "heart_beat", "connect_headers", "use_stomp_command", "max_frame_bytes", "max_headers",
    "max_header_bytes", "routing_headers", "client_id",
)


class AsyncClient(Link, Supervisor, Session, Counters):
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
        heartbeat_tolerance, send_buffer_bytes = o["heartbeat_tolerance"], o["send_buffer_bytes"]
        endpoints, self._policy = endpoints_and_policy(url, o)
        #: every broker this client may use, in the order they are tried
        self.endpoints: Tuple[Endpoint, ...] = tuple(endpoints)
        #: the broker of the current (or last) connection
        self.endpoint = endpoints[0]
        if o["on_event"] is not None and not callable(o["on_event"]):
            raise ConfigurationError(f"on_event must be callable, not {o['on_event']!r}")
        self._on_event = o["on_event"]
        self._ssl_option, self._server_hostname = tls_options(o["ssl"], o["server_hostname"], endpoints)
        self._heartbeat_tolerance = check_positive("heartbeat_tolerance", heartbeat_tolerance)
        if heartbeat_tolerance < 1:
            raise ConfigurationError("heartbeat_tolerance must be at least 1 (a multiple of the broker's interval)")
        self._connect_timeout = check_positive("connect_timeout", o["connect_timeout"])
        self._send_buffer_bytes = check_positive("send_buffer_bytes", send_buffer_bytes)
        self._stall_timeout = check_positive("stall_timeout", o["stall_timeout"])
        self._disconnect_timeout = check_positive("disconnect_timeout", o["disconnect_timeout"])
        ws_max = o["websocket_max_message_bytes"]
        if type(ws_max) is not int or ws_max < 1:
            raise ConfigurationError(f"websocket_max_message_bytes must be a positive int, not {ws_max!r}")
        self._websocket_max_message_bytes = ws_max
        # One protocol object per connection (a new session each time); making the
        # first one now checks versions, heart_beat and limits before any I/O.
        self._protocol_options: Dict[str, Any] = {name: o[name] for name in PROTOCOL_OPTIONS}
        self._protocol = self._make_protocol(self.endpoint)
        self._transport: Optional[StompTransport] = None
        self._tg: Optional[anyio.abc.TaskGroup] = None
        # Where the client is in its life (docs and the table of moves: _lifecycle.py).
        self._state = ClientState.NEW
        self._error: Optional[BaseException] = None
        # Guards the receipt registry and the installed connection against
        # send_from_thread (the blocking client's threads); the loop takes it only
        # to fail receipts in bulk and to install a connection.
        self._registry_lock = threading.Lock()
        # The current connection's receipt registry (before the first: an empty one).
        self._receipts = ReceiptRegistry(self._registry_lock)
        self._thread_receipts = itertools.count(1)  # receipt ids "t<n>" of send_from_thread
        self._subs: Dict[str, Inlet] = {}
        # The current connection's outbox (before the first: a closed, empty one).
        self._outbox = Outbox(None, send_buffer_bytes=send_buffer_bytes, write_through_bytes=send_buffer_bytes)
        self._loop: Any = None  # the asyncio loop (None on trio): receipts wait on its futures
        self._clock: Callable[[], float] = anyio.current_time
        self._scopes: List[anyio.CancelScope] = []
        self._via_aenter = False
        self._frames: Optional[FrameLog] = None  # this connection's frame log (stompfast.frames at DEBUG)
        # reconnecting
        self._link_alive = False  # a connection is installed and has not failed
        self._lost: Optional[anyio.Event] = None  # set when the current connection fails
        self._lost_info: Tuple[Any, ...] = ()
        self._up_event: Optional[anyio.Event] = None  # set while a connection is up
        self._next_up: Optional[anyio.Event] = None  # becomes _up_event when the connection fails
        self._supervisor: Optional[anyio.CancelScope] = None
        self._transactions: Set[SessionTransaction] = set()
        self._up_since = 0.0  # when the current session came up (anyio clock)
        #: how many times a lost session was re-established
        self.reconnects = 0
        self._sub_ops: Optional[SubscriptionOps] = None
        self._live = LiveSession()  # the session acks may go to (the subscriptions' fast stale test)
        self._init_counters()
        # The current connection's inbox (before the first: a closed one).
        self._inbox = Inbox(None, self._protocol, subs=self._subs, receipts=self._receipts.pending, rtt=self._rtt)

    @property
    def version(self) -> Optional[str]:
        """The negotiated STOMP version (None before CONNECTED)."""
        return self._protocol.version

    @property
    def server(self) -> Optional[str]:
        """The broker's ``server`` header, e.g. ``RabbitMQ/3.10.8``."""
        return self._protocol.server

    @property
    def session(self) -> Optional[str]:
        """The broker's ``session`` id."""
        return self._protocol.session

    @property
    def heart_beat(self) -> Tuple[int, int]:
        """Negotiated ``(send_ms, receive_ms)``: our beat interval, the broker's (0: none)."""
        return self._protocol.heart_beat

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
        if sniffio.current_async_library() == "asyncio":
            import asyncio

            self._loop = asyncio.get_running_loop()
            self._clock = self._loop.time  # what anyio.current_time() returns there, minus two calls
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            await self._establish(first=True)
            if self._state is not CONNECTING:
                raise ClientClosedError("the client was closed while it connected")
            self._state = advance(self._state, OPEN)
            # The connection may have failed while connect() completed (an ERROR read with
            # CONNECTED): _fail recorded it but left CONNECTING, so the client is FAILED now.
            if self._error is not None:
                self._state = advance(self._state, FAILED)
            if self._policy.enabled:
                scope = self._supervisor = anyio.CancelScope()

                async def supervise() -> None:
                    with scope:
                        await self._supervise()

                tg.start_soon(supervise, name="stompfast-reconnect")
        except BaseException:
            # An aclose() from another task that began meanwhile ends in CLOSED itself.
            if self._state is CONNECTING:
                self._state = advance(self._state, CLOSED)
            self._link_alive = False
            self._live.protocol = None
            for scope in self._scopes:
                scope.cancel()
            # The task group must be left outside any scope entered after it.
            self._tg = None
            tg.cancel_scope.cancel()
            await tg.__aexit__(None, None, None)
            if self._transport is not None:
                with anyio.CancelScope(shield=True):
                    await self._transport.aclose()
            raise

    async def aclose(self) -> None:
        """Send DISCONNECT, wait for its receipt (bounded, shielded), close the socket.

        Safe to call more than once, after a failure, and from any task (inside
        ``async with`` the task group itself is left when the block ends).
        """
        await self._shutdown()
        if not self._via_aenter:  # connect() entered the group in this task: leave it here
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
        self._inbox.closing = True  # (an EOF from now on is the end of our close, not a loss)
        if self._error is None and conn_log.isEnabledFor(logging.INFO):
            conn_log.info("closing the connection to %s", where(self.endpoint))
        try:
            with anyio.CancelScope(shield=True):
                if self._error is None and self._protocol.state is SessionState.CONNECTED:
                    with anyio.move_on_after(self._disconnect_timeout):
                        try:
                            data, receipt_id = self._protocol.disconnect(receipt=True)
                            receipt = self._register(receipt_id)
                            self._outbox.queue(data)
                            self._n_control += 1
                            # Written from here: when the block is left by a
                            # cancellation, the writer task is cancelled too.
                            await self._outbox.write_queued()
                            if not cancelled or self._inbox.push:
                                # (on trio the reader task is cancelled with the
                                # block: no receipt could be read, so none is awaited)
                                await receipt.wait()
                        except StompError:
                            pass  # the connection went down while we were leaving
        finally:
            # Stop the background tasks through their own scopes: the task group
            # is left by __aexit__ (or here, after a manual connect()).
            closed = ClientClosedError("the client is closed")
            self._fail_receipts(self._error or closed)
            for sub in list(self._subs.values()):
                sub.close(self._error)
                self._n_received_gone += sub.seq
            self._subs.clear()
            if self._error is None:
                self._error = closed
            self._link_alive = False
            self._live.protocol = None
            self._lose_transactions(self._error)
            self._inbox.close(release=True)
            for scope in self._scopes:
                scope.cancel()
            if self._supervisor is not None:
                self._supervisor.cancel()
            if self._up_event is not None:
                self._up_event.set()
            with anyio.CancelScope(shield=True):
                if self._transport is not None:
                    await self._transport.aclose()
            self._outbox.close()
            self._state = advance(self._state, CLOSED)

    def _background(self, coro: Any, name: str) -> None:
        """Run ``coro`` in the task group under a cancel scope of its own.

        The task group is entered in the caller's task, so its own cancel scope
        also covers the caller's code inside ``async with``: a failure must stop
        the background tasks through their own scopes, never through the group's.
        """
        scope = anyio.CancelScope()
        self._scopes.append(scope)

        async def run() -> None:
            with scope:
                await coro

        assert self._tg is not None
        self._tg.start_soon(run, name=name)

    def _fail(self, error: BaseException) -> None:
        """The connection failed with ``error``: re-establish it, or fail the client for good.

        With reconnecting on, a retryable failure (connection lost, heart-beat
        timeout, ERROR frame, framing fault) of an established session goes to
        :meth:`_link_down`. Otherwise the error is recorded once, every pending
        receipt and every subscription is failed with it, the tasks stop.
        """
        if self._error is not None:
            return
        if self._state in (CLOSING, CLOSED):
            # Our own close is under way (it may be what ended the connection):
            # only end the waits, so that close does not sit out its timeout.
            self._fail_receipts(error)
            return
        if (
            self._policy.enabled
            and self._state in (OPEN, RECONNECTING)
            and self._supervisor is not None
            and isinstance(error, RETRYABLE)
        ):
            self._link_down(error)
            return
        if self._state is OPEN and conn_log.isEnabledFor(logging.WARNING):
            conn_log.warning("connection to %s failed: %s", where(self.endpoint), describe_error(error))
        self._error = error
        # During the first connect the state stays CONNECTING: connect() is about to raise and close.
        if self._state in (OPEN, RECONNECTING):
            self._state = advance(self._state, FAILED)
        if self._link_alive:
            self._n_losses += 1
        self._link_alive = False
        self._live.protocol = None
        self._fail_receipts(error)
        for sub in self._subs.values():
            sub.close(error)
        self._lose_transactions(error)
        self._stop_connection(release=True)
        if self._inbox.push:
            self._protocol.connection_lost()
        if self._supervisor is not None:
            self._supervisor.cancel()
        if self._up_event is not None:
            self._up_event.set()

    def _stop_connection(self, *, release: bool) -> None:
        """Close the outbox (senders waiting for room wake) and the inbox, stop this connection's tasks;
        push mode: close its socket.

        ``release``: the client failed for good. On trio the reader task then
        closes the socket on its way out; otherwise the supervisor does before
        reconnecting.
        """
        self._outbox.close()
        self._inbox.close(release=release)
        for scope in self._scopes:
            scope.cancel()
        self._inbox.abort()

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
        receipt: Literal[False] = ..., wait: bool = ...,
    ) -> None: ...

    @overload
    async def send(
        self, destination: str, body: Union[bytes, bytearray, memoryview, str] = ..., *,
        headers: Optional[Mapping[str, Any]] = ..., content_type: Optional[str] = ...,
        receipt: Literal[True], wait: bool = ...,
    ) -> Receipt: ...

    @overload
    async def send(
        self, destination: str, body: Union[bytes, bytearray, memoryview, str] = ..., *,
        headers: Optional[Mapping[str, Any]] = ..., content_type: Optional[str] = ...,
        receipt: bool = ..., wait: bool = ...,
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
    ) -> Optional[Receipt]:
        """Send a message to ``destination``.

        ``body`` is sent as it is if it is bytes-like; a ``str`` is encoded as UTF-8
        and, unless ``content_type`` says otherwise, labelled
        ``text/plain;charset=utf-8``. Without ``receipt`` the frame is queued and
        the call returns (it is written when the task next yields). With
        ``receipt=True`` the call returns once the broker confirmed the frame, or,
        with ``wait=False``, at once with the pending :class:`Receipt` (pipelining).

        Raises:
            ServerError: the broker refused it (with ``receipt``).
            ConnectionLostError: the connection ended before the receipt came.
            LocalProtocolError: the frame cannot be expressed (nothing was sent).
        """
        if self._state is not OPEN:
            await self._ensure_open()
        if type(body) is bytes and headers is None and content_type is None and not receipt:
            data = self._protocol.send_plain(destination, body)  # the hot path: a plain SEND
        else:
            data, receipt_id = self._encode_send(destination, body, headers, content_type, receipt)
            if receipt_id is not None:
                return await self._send_receipted(data, receipt_id, wait)
        outbox = self._outbox
        if outbox.out_bytes < outbox.write_through_bytes:  # outbox.queue, inlined: the hot path
            out = outbox.out
            out.append(data)
            outbox.out_bytes += len(data)
            if len(out) == 1:
                outbox.wakeup.set()
        else:
            await self._queue_when_room(data)
            await self._outbox.catch_up()
        return None

    def _encode_send(
        self, destination: str, body: Any, headers: Optional[Mapping[str, Any]], content_type: Optional[str],
        receipt: bool,
    ) -> Tuple[bytes, Optional[str]]:
        """The SEND frame of :meth:`send` and its receipt id (the body rules are send's)."""
        body, content_type = body_bytes(body, content_type)
        return self._protocol.send(destination, body, headers, content_type=content_type, receipt=receipt)

    def _register(self, receipt_id: Optional[str]) -> PendingReceipt:
        """A pending receipt for ``receipt_id`` in the current connection's registry (failed at once in a stall)."""
        assert receipt_id is not None
        inbox = self._inbox
        if inbox.stalled and inbox.paused_on is not None:
            self._n_receipts_failed += 1
            return self._receipts.register(receipt_id, inbox.stall_error(inbox.paused_on))
        return self._receipts.register(receipt_id)

    def _fail_receipts(self, error: BaseException) -> None:
        """Fail every pending receipt of the current connection with ``error`` (counted as failed)."""
        self._n_receipts_failed += self._receipts.fail(error)

    async def _queue_when_room(self, data: bytes) -> None:
        """Queue ``data`` on the current connection's outbox, waiting first while it holds ``send_buffer_bytes``.

        Raises what :meth:`_check_open` raises when the connection went down (or
        the client closed) while waiting.
        """
        outbox = self._outbox
        if outbox.out_bytes >= outbox.send_buffer_bytes:
            await outbox.wait_for_room()
            self._check_open()
            outbox = self._outbox  # (the connection may have been replaced meanwhile)
        outbox.queue(data)

    async def _send_receipted(self, data: bytes, receipt_id: str, wait: bool) -> Receipt:
        pending = self._register(receipt_id)
        outbox = self._outbox
        if wait and not outbox.out and outbox.try_write_frame(data):
            # Nothing queued ahead of it and the caller is about to block: write
            # it from this task (no writer wake-up, no extra loop iteration).
            await pending.wait()
            return pending
        await self._queue_when_room(data)
        if wait:
            self._outbox.write_queued_now()
            await pending.wait()
        return pending

    def _queue_ack(self, message: Message) -> bool:
        """The common ACK (no receipt, no transaction) queued now; False if that must wait (the caller awaits)."""
        outbox = self._outbox
        if self._state is OPEN and outbox.out_bytes < outbox.send_buffer_bytes:
            data = self._protocol.ack_plain(message)
            self._n_acks += 1
            out = outbox.out  # outbox.queue, inlined: calling it costs ~5% of a client-ack drain
            out.append(data)
            outbox.out_bytes += len(data)
            if len(out) == 1:
                outbox.wakeup.set()
            return True
        return False

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
        outbox = self._outbox
        if outbox.out_bytes >= outbox.send_buffer_bytes:
            raise anyio.WouldBlock
        data, receipt_id = self._encode_send(destination, body, headers, content_type, receipt)
        if receipt_id is None:
            outbox.queue(data)
            if outbox.out_bytes >= outbox.write_through_bytes:
                outbox.write_queued_now()
            return None
        pending = self._register(receipt_id)
        if not outbox.out and outbox.try_write_frame(data):
            return pending
        outbox.queue(data)
        outbox.write_queued_now()
        return pending

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
        safe at this moment: not plain TCP on the stock asyncio loop, frames
        queued or being written ahead of this one (order), the asyncio write
        buffer not empty, a reconnect or a stall under way. The caller then
        sends through the loop.

        Raises LocalProtocolError (and TypeError for a body of another type) as
        :meth:`send` does.
        """
        transport = self._transport
        if type(transport) is not AsyncioTransport or not transport.direct_ok:
            return None
        body, content_type = body_bytes(body, content_type)
        with self._registry_lock:
            outbox = self._outbox
            if (
                self._state is not OPEN
                or not self._link_alive
                or outbox.transport is not transport
                or outbox.out
                or outbox.writing
                or self._inbox.stalled
            ):
                return None
            receipt_id = "t%d" % next(self._thread_receipts)
            data = self._protocol.encode_send(destination, body, headers, content_type, receipt_id)
            receipt = PendingReceipt(receipt_id, self._loop, monotonic())
            receipt.add_done_callback(on_done)  # before anything can complete it
            pending = self._receipts.pending
            pending[receipt_id] = receipt
            if not transport.write_from_thread(data):
                del pending[receipt_id]
                return None
            self._n_thread_sends += 1  # (threads' own counters, under the lock: the loop's are not)
            self._n_thread_bytes += len(data)
            if outbox.beating:
                outbox.last_sent = self._clock()
        if frame_log.isEnabledFor(DEBUG):
            self._log_frames(">", data)  # (after the write: the log takes a lock of its own)
        return receipt

    def check_send(
        self, destination: str, headers: Optional[Mapping[str, Any]] = None, content_type: Optional[str] = None
    ) -> None:
        """(Any thread.) Raise what :meth:`send` would raise for these headers on this session; send nothing.

        LocalProtocolError for a destination, header or content type the
        negotiated STOMP version cannot carry (a NUL anywhere; on 1.0 a CR or LF;
        on 1.1 a CR). For code that queues sends to be written later, so that bad
        input is refused by the call that made it.
        """
        self._protocol.check_send(destination, headers, content_type)

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
        pending = list(self._receipts.pending.values())
        data, receipt_id = self._protocol.probe()
        probe = self._register(receipt_id)
        await self._queue_when_room(data)
        self._n_control += 1
        self._n_extra_frames += 1  # (the probe is two frames in one entry: BEGIN and ABORT)
        pending.append(probe)
        self._outbox.write_queued_now()
        await self.wait_receipts(pending)


AsyncClient.__init__.__signature__ = options_signature(AsyncClient.__init__)  # type: ignore[attr-defined]
