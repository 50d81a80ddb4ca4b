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
  ``_subscription``), and while stopped it suspends the liveness check. On
  asyncio there is no reader task: the transport's ``data_received`` callback
  runs the same steps (``_on_data``), and backpressure pauses the transport
  until the full subscription's consumer takes a message (``_pause_for``);
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
"""

from __future__ import annotations

import itertools
import logging
import random
import ssl as _ssl
import threading
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
import anyio.lowlevel
import sniffio

from ._config import Endpoint, check_positive, parse_urls
from ._options import ClientOptions
from ._options import resolve as resolve_options
from ._options import signature as options_signature
from ._protocol import (
    Connected,
    ErrorReceived,
    Message,
    ReceiptReceived,
    SessionState,
    StompProtocol,
)
from ._reconnect import ConnectionEvent, ReconnectPolicy
from ._subscription import DEFAULT_BUFFER_SIZE, AsyncSubscription, _copy
from ._transport import READ_SIZE, AsyncioTransport, Transport, WebSocketSpec, _describe, open_transport
from .errors import (
    ClientClosedError,
    ConfigurationError,
    ConnectError,
    ConnectionLostError,
    ConnectTimeout,
    FlowControlError,
    HeartbeatTimeout,
    RemoteProtocolError,
    ServerError,
    StaleMessageError,
    StompError,
    StompTimeout,
    TLSError,
    TransactionError,
)

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

log = logging.getLogger("stompfast")
#: Connections: connected, a connect that failed, a session lost, closed (INFO / WARNING).
conn_log = logging.getLogger("stompfast.client")
#: The reconnect supervisor: each wait before an attempt, and giving up.
reconnect_log = logging.getLogger("stompfast.reconnect")

#: The options StompProtocol takes, passed on to each connection's session.
_PROTOCOL_OPTIONS = (
    "versions", "heart_beat", "connect_headers", "use_stomp_command", "max_frame_bytes", "max_headers",
    "max_header_bytes",
)

# Queued outgoing bytes past which a send writes them out (or yields to the writer)
# instead of queueing more: a long burst of sends stays in a small, reused amount
# of memory rather than growing toward send_buffer_bytes, which costs page faults.
WRITE_THROUGH_BYTES = 256 * 1024

#: What ends one connection but not the client when reconnecting is on.
_RETRYABLE = (ConnectError, ConnectionLostError, ServerError, RemoteProtocolError, StompTimeout)

__all__ = ["AsyncClient", "AsyncTransaction", "Receipt"]

TEXT_CONTENT_TYPE = "text/plain;charset=utf-8"


def _body_bytes(body: Any, content_type: Optional[str]) -> Tuple[bytes, Optional[str]]:
    """A SEND body as bytes: a ``str`` is UTF-8 (labelled text/plain unless ``content_type`` says otherwise)."""
    if type(body) is bytes:
        return body, content_type
    if isinstance(body, str):
        return body.encode("utf-8"), TEXT_CONTENT_TYPE if content_type is None else content_type
    if isinstance(body, (bytes, bytearray, memoryview)):  # (bytes subclasses too)
        return bytes(body), content_type
    raise TypeError(f"body must be bytes or str, not {type(body).__name__}")


def _where(endpoint: Optional[Endpoint]) -> str:
    """An endpoint for a log line: its URL without the passcode."""
    return endpoint.url if endpoint is not None else "?"


def _log_event(kind: str, endpoint: Optional[Endpoint], protocol: Any, fields: Dict[str, Any]) -> None:
    """Log a connection event (the on_event hook's, also without a hook): what operators look for."""
    error = fields.get("error")
    if kind == "connected":
        if conn_log.isEnabledFor(logging.INFO):
            conn_log.info(
                "%s %s (STOMP %s, server %s)", "reconnected to" if fields.get("reconnected") else "connected to",
                _where(endpoint), protocol.version, protocol.server or "unnamed",
            )
    elif kind == "connecting":
        conn_log.debug("connecting to %s (attempt %s)", _where(endpoint), fields.get("attempt"))
    elif kind == "connect_failed":
        conn_log.warning("could not connect to %s: %s", _where(endpoint), _describe(error))
    elif kind == "disconnected":
        conn_log.warning(
            "connection to %s lost after %.1f s: %s (%d queued frame(s) and %d buffered message(s) dropped,"
            " %d transaction(s) aborted)", _where(endpoint), fields.get("uptime", 0.0), _describe(error),
            fields.get("dropped_frames", 0), fields.get("dropped_messages", 0), fields.get("aborted_transactions", 0),
        )
    elif kind == "reconnecting":
        reconnect_log.info("reconnecting in %.2f s (attempt %s)", fields.get("delay", 0.0), fields.get("attempt"))
    elif kind == "gave_up":
        reconnect_log.error("gave up reconnecting: %s", _describe(error))


class Receipt:
    """A frame's confirmation from the broker, awaited with ``await receipt``.

    Many can be outstanding at once; :meth:`AsyncClient.wait_receipts` awaits a
    group, :meth:`AsyncClient.flush` everything sent so far. Any number of tasks
    may wait on one receipt; cancelling one waiter does not disturb the others.
    """

    __slots__ = ("receipt_id", "_done", "_error", "_waiters", "_loop", "_callbacks")

    def __init__(self, receipt_id: str, loop: Any = None) -> None:
        self.receipt_id = receipt_id
        self._done = False
        self._error: Optional[BaseException] = None
        # Created only when a task actually waits: a pipelined receipt that is
        # confirmed before anybody awaits it costs no synchronisation object.
        # On asyncio (``loop`` given) waiters are bare loop futures, elsewhere
        # anyio Events: an anyio.Event looks the backend up on every construction.
        self._waiters: Optional[List[Any]] = None
        self._loop = loop
        self._callbacks: Optional[List[Callable[["Receipt"], Any]]] = None

    def done(self) -> bool:
        """True once the RECEIPT arrived or the wait failed."""
        return self._done

    @property
    def error(self) -> Optional[BaseException]:
        return self._error

    async def wait(self) -> "Receipt":
        """Wait for the RECEIPT; raise what made it impossible (ServerError, ConnectionLostError...)."""
        if not self._done:
            waiters = self._waiters
            if waiters is None:
                waiters = self._waiters = []
            loop = self._loop
            if loop is not None:
                waiter = loop.create_future()
                waiters.append(waiter)
                try:
                    await waiter
                finally:
                    if not self._done:  # cancelled: forget this waiter only
                        waiters.remove(waiter)
            else:
                event = anyio.Event()
                waiters.append(event)
                try:
                    await event.wait()
                finally:
                    if not self._done:
                        waiters.remove(event)
        if self._error is not None:
            raise _copy(self._error)
        return self

    def __await__(self) -> Any:
        return self.wait().__await__()

    def add_done_callback(self, fn: Callable[["Receipt"], Any]) -> None:
        """Call ``fn(receipt)`` in the event loop once the receipt is done (at once if it is).

        For synchronous code in the loop that cannot await (the blocking client
        completes a thread's wait from here); ``fn`` must be quick and must not raise.
        """
        if self._done:
            fn(self)
        elif self._callbacks is None:
            self._callbacks = [fn]
        else:
            self._callbacks.append(fn)

    def _set(self) -> None:
        if self._done:
            return
        self._done = True
        if self._callbacks is not None:
            for fn in self._callbacks:
                fn(self)
        waiters = self._waiters
        if waiters:
            if self._loop is not None:
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
            else:
                for event in waiters:
                    event.set()

    def _fail(self, error: BaseException) -> None:
        if not self._done:
            self._error = error
            self._set()

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error else "confirmed")
        return f"<Receipt {self.receipt_id!r} {state}>"


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
        versions: STOMP versions to offer (default all three; the broker picks).
        heart_beat: ``(cx, cy)`` milliseconds: how often we can send, how often we
            want to hear from the broker (0 = never). Default ``(10000, 10000)``.
        heartbeat_tolerance: how many broker intervals of silence mean the
            connection is dead (default 3: ActiveMQ spaces its beats up to twice
            the agreed interval).
        connect_headers: extra CONNECT headers (e.g. ``{"client-id": "app-1"}``).
        connect_timeout: seconds for TCP connect plus CONNECTED (ConnectTimeout).
        use_stomp_command: send ``STOMP`` instead of ``CONNECT`` (1.1+ brokers).
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
        host, port, login, passcode, virtual_host = o["host"], o["port"], o["login"], o["passcode"], o["virtual_host"]
        reconnect, on_event, ssl, server_hostname = o["reconnect"], o["on_event"], o["ssl"], o["server_hostname"]
        heartbeat_tolerance, send_buffer_bytes = o["heartbeat_tolerance"], o["send_buffer_bytes"]
        if url is not None:
            endpoints, failover = parse_urls(url)
        else:
            endpoints, failover = [Endpoint(host or "127.0.0.1")], {}
        if (host is not None or port is not None) and len(endpoints) > 1:
            raise ConfigurationError("host= and port= apply to a single broker, not to a list of URLs")
        if port is not None and (type(port) is not int or not 0 < port < 65536):
            raise ConfigurationError(f"port must be an int from 1 to 65535, not {port!r}")
        for endpoint in endpoints:
            if host is not None:
                endpoint.host = host
            if port is not None:
                endpoint.port = port
            if login is not None:
                endpoint.login = login
            if passcode is not None:
                endpoint.passcode = passcode
            if virtual_host is not None:
                endpoint.virtual_host = virtual_host
        #: every broker this client may use, in the order they are tried
        self.endpoints: Tuple[Endpoint, ...] = tuple(endpoints)
        #: the broker of the current (or last) connection
        self.endpoint = endpoints[0]
        if isinstance(reconnect, ReconnectPolicy):
            policy = reconnect
        elif isinstance(reconnect, bool):
            policy = ReconnectPolicy(enabled=reconnect)
        else:
            raise ConfigurationError(f"reconnect must be a bool or a ReconnectPolicy, not {reconnect!r}")
        if failover:
            policy = ReconnectPolicy.from_failover_options(failover, policy)
        self._policy = policy
        if on_event is not None and not callable(on_event):
            raise ConfigurationError(f"on_event must be callable, not {on_event!r}")
        self._on_event = on_event
        if ssl is not None and not isinstance(ssl, (bool, _ssl.SSLContext)):
            raise ConfigurationError(f"ssl must be None, a bool or an ssl.SSLContext, not {type(ssl).__name__}")
        self._ssl_option: Union[bool, _ssl.SSLContext, None] = ssl
        if server_hostname is not None:
            if not (ssl or (ssl is None and any(ep.tls for ep in endpoints))):
                raise ConfigurationError("server_hostname is for TLS connections (ssl=True or a stomp+ssl:// URL)")
            if not isinstance(server_hostname, str) or not server_hostname:
                raise ConfigurationError(f"server_hostname must be a non-empty str, not {server_hostname!r}")
        self._server_hostname = server_hostname
        if any(ep.websocket for ep in endpoints):
            from ._websocket import require_wsproto

            require_wsproto()
        self._heartbeat_tolerance = check_positive("heartbeat_tolerance", heartbeat_tolerance)
        if heartbeat_tolerance < 1:
            raise ConfigurationError("heartbeat_tolerance must be at least 1 (a multiple of the broker's interval)")
        self._connect_timeout = check_positive("connect_timeout", o["connect_timeout"])
        self._send_buffer_bytes = check_positive("send_buffer_bytes", send_buffer_bytes)
        self._write_through_bytes = send_buffer_bytes
        self._stall_timeout = check_positive("stall_timeout", o["stall_timeout"])
        self._disconnect_timeout = check_positive("disconnect_timeout", o["disconnect_timeout"])
        # One protocol object per connection (a new session each time); making the
        # first one now checks versions, heart_beat and limits before any I/O.
        self._protocol_options: Dict[str, Any] = {name: o[name] for name in _PROTOCOL_OPTIONS}
        self._protocol = self._make_protocol(self.endpoint)
        self._transport: Optional[Transport] = None
        self._tg: Optional[anyio.abc.TaskGroup] = None
        self._state = "new"  # new -> connecting -> open -> closing -> closed
        self._error: Optional[BaseException] = None
        self._receipts: Dict[str, Receipt] = {}
        # Guards the receipt registry and the installed connection against
        # send_from_thread (the blocking client's threads); the loop takes it only
        # to fail receipts in bulk and to install a connection.
        self._registry_lock = threading.Lock()
        self._thread_receipts = itertools.count(1)  # receipt ids "t<n>" of send_from_thread
        self._subs: Dict[str, AsyncSubscription] = {}
        self._out: List[bytes] = []
        self._out_bytes = 0
        self._wakeup = anyio.Event()
        self._drained: Optional[anyio.Event] = None
        self._loop: Any = None  # the asyncio loop (None on trio): receipts wait on its futures
        self._clock: Callable[[], float] = anyio.current_time
        self._last_sent = 0.0
        self._last_received = 0.0
        self._paused_on: Optional[AsyncSubscription] = None
        self._stalled = False
        self._scopes: List[anyio.CancelScope] = []
        self._via_aenter = False
        self._beating = False  # a heart-beat sender runs: note when we last wrote
        self._watching = False  # a liveness watch runs: note when we last read
        self._push = False  # asyncio: frames are dispatched from data_received, no reader task
        self._stall_handle: Any = None
        self._writing = False  # the writer task is inside transport.send
        # reconnecting
        self._link_alive = False  # a connection is installed and has not failed
        self._lost: Optional[anyio.Event] = None  # set when the current connection fails
        self._lost_info: Tuple[Any, ...] = ()
        self._up_event: Optional[anyio.Event] = None  # set while a connection is up
        self._next_up: Optional[anyio.Event] = None  # becomes _up_event when the connection fails
        self._supervisor: Optional[anyio.CancelScope] = None
        self._transactions: Set["AsyncTransaction"] = set()
        self._up_since = 0.0  # when the current session came up (anyio clock)
        #: how many times a lost session was re-established
        self.reconnects = 0

    def _make_protocol(self, endpoint: Endpoint) -> StompProtocol:
        return StompProtocol(
            host=endpoint.virtual_host, login=endpoint.login, passcode=endpoint.passcode, **self._protocol_options
        )

    # -- properties -------------------------------------------------------------------

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
        return self._state == "open" and self._error is None

    def __repr__(self) -> str:
        # the URL without its passcode; the state as a person would say it
        state = {"open": "connected", "new": "not connected"}.get(self._state, self._state)
        if self._error is not None and self._state not in ("closing", "closed"):
            state = f"failed: {type(self._error).__name__}"
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

    # -- connect / close ----------------------------------------------------------------

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
        if self._state != "new":
            raise ClientClosedError("an AsyncClient connects once; create a new one to connect again")
        self._state = "connecting"
        if sniffio.current_async_library() == "asyncio":
            import asyncio

            self._loop = asyncio.get_running_loop()
            self._clock = self._loop.time  # what anyio.current_time() returns there, minus two calls
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            await self._establish(first=True)
            self._state = "open"
            if self._policy.enabled:
                scope = self._supervisor = anyio.CancelScope()

                async def supervise() -> None:
                    with scope:
                        await self._supervise()

                tg.start_soon(supervise, name="stompfast-reconnect")
        except BaseException:
            self._state = "closed"
            self._link_alive = False
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

    def _tls(self, endpoint: Endpoint) -> Union[bool, _ssl.SSLContext]:
        """TLS for ``endpoint``: the ``ssl=`` keyword if given, else what its URL scheme says."""
        return endpoint.tls if self._ssl_option is None else self._ssl_option

    def _ssl_context(self, endpoint: Endpoint) -> Optional[_ssl.SSLContext]:
        """The SSL context to connect with (None: plain TCP); a default one is made per connect."""
        tls = self._tls(endpoint)
        if isinstance(tls, _ssl.SSLContext):
            return tls
        return _ssl.create_default_context() if tls else None

    async def _establish(self, *, first: bool, streak: int = 0) -> int:
        """Try the broker list until one answers CONNECTED, per the reconnect policy.

        ``streak`` counts the failures before this call that the backoff goes on
        from (sessions that died young; see ``ReconnectPolicy.stable_after``);
        only this call's own failures count toward the attempt limit. Returns
        the streak when a broker answered: ``streak`` plus this call's failures.
        """
        policy = self._policy
        limit = policy.connect_attempts if first else policy.max_attempts
        failed = 0
        while True:
            endpoints = list(self.endpoints)
            if policy.randomize and len(endpoints) > 1:
                random.shuffle(endpoints)
            errors: List[Tuple[Endpoint, BaseException]] = []
            for endpoint in endpoints:
                self._emit("connecting", endpoint, attempt=failed + 1)
                try:
                    await self._open_link(endpoint, resubscribe=not first)
                except _RETRYABLE as exc:
                    errors.append((endpoint, exc))
                    self._emit("connect_failed", endpoint, attempt=failed + 1, error=exc)
                    continue
                self._up_since = anyio.current_time()
                self._emit("connected", endpoint, attempt=failed + 1, reconnected=not first)
                return streak + failed
            failed += 1
            if limit is not None and failed >= limit:
                if len(errors) == 1:
                    raise errors[0][1]
                summary = "; ".join(f"{ep.url}: {exc}" for ep, exc in errors)
                raise ConnectError(f"no broker of {len(errors)} could be used: {summary}") from errors[-1][1]
            delay = policy.delay(failed if first else streak + failed + 1)  # the supervisor slept delay(streak + 1)
            self._emit("reconnecting", None, attempt=failed + 1, delay=delay, error=errors[-1][1])
            await anyio.sleep(delay)

    async def _open_link(self, endpoint: Endpoint, *, resubscribe: bool) -> None:
        """Connect to ``endpoint``, wait for CONNECTED, start the connection's tasks.

        The broker counts as up only after CONNECTED and, on a reconnect, after it
        confirmed every re-established subscription.
        """
        protocol = self._make_protocol(endpoint)
        transport: Any = None  # a Transport or an AsyncioTransport (one interface: the refactoring issue)
        try:
            leftover: List[Any] = []
            websocket = None
            if endpoint.websocket:
                from ._websocket import subprotocols

                websocket = WebSocketSpec(endpoint.path, subprotocols(protocol.versions))
            try:
                with anyio.fail_after(self._connect_timeout):
                    transport = await open_transport(
                        endpoint.host,
                        endpoint.port,
                        ssl_context=self._ssl_context(endpoint),
                        server_hostname=self._server_hostname,
                        websocket=websocket,
                    )
                    await transport.send(protocol.connect())
                    leftover = await self._await_connected(transport, protocol, endpoint)
            except TimeoutError as exc:
                raise ConnectTimeout(
                    f"no CONNECTED from {endpoint.host}:{endpoint.port} within {self._connect_timeout:g} s"
                ) from exc
            except ConnectionLostError as exc:
                cause = exc.__cause__
                if isinstance(cause, _ssl.SSLError):
                    # TLS 1.3: a client certificate the broker refuses is reported after the
                    # handshake, on the first read
                    raise TLSError(
                        f"{endpoint.host}:{endpoint.port} ended the TLS session before CONNECTED: {exc}"
                        " (does the broker want a client certificate? ctx.load_cert_chain)",
                        reason=getattr(cause, "reason", None),
                    ) from exc
                hint = (
                    " (over TLS: does the broker want a client certificate? ctx.load_cert_chain)"
                    if self._tls(endpoint)
                    else ""
                )
                raise ConnectError(
                    f"{endpoint.host}:{endpoint.port} closed the connection before CONNECTED: {exc}{hint}"
                ) from exc
        except BaseException:
            if transport is not None:
                with anyio.CancelScope(shield=True):
                    await transport.aclose()
            raise
        # Install the new connection: fresh per-connection state, fresh tasks.
        with self._registry_lock:  # (a thread sending directly sees all of it or none)
            self._protocol = protocol
            self._transport = transport
            self._receipts = {}
        self.endpoint = endpoint
        self._out = []
        self._out_bytes = 0
        # Only asyncio's transport takes a write from the sending task (try_write);
        # elsewhere writing through would mean a task switch per mark, so the
        # queue fills to send_buffer_bytes as before.
        self._write_through_bytes = (
            min(WRITE_THROUGH_BYTES, self._send_buffer_bytes)
            if isinstance(transport, AsyncioTransport)
            else self._send_buffer_bytes
        )
        self._wakeup = anyio.Event()
        self._drained = None
        self._paused_on = None
        self._stalled = False
        self._stall_handle = None
        self._push = False
        self._scopes = []
        self._lost = anyio.Event()
        self._next_up = anyio.Event()
        if self._up_event is None:
            self._up_event = anyio.Event()
        self._link_alive = True
        now = anyio.current_time()
        self._last_sent = self._last_received = now
        self._start_reading(leftover)
        self._background(self._writer(), "stompfast-writer")
        send_ms, receive_ms = protocol.heart_beat
        self._beating, self._watching = bool(send_ms), bool(receive_ms)
        if send_ms:
            self._background(self._heartbeat_sender(send_ms / 1000.0), "stompfast-heartbeat")
        if receive_ms:
            self._background(self._liveness(receive_ms / 1000.0), "stompfast-liveness")
        if resubscribe and self._subs:
            try:
                pending = []
                for sub in list(self._subs.values()):
                    data, _, receipt_id = protocol.subscribe(
                        sub.destination, ack=sub.ack_mode, headers=sub.headers, id=sub.id, receipt=True
                    )
                    pending.append(self._register(receipt_id))
                    self._queue(data)
                self._flush_now()
                with anyio.fail_after(self._connect_timeout):
                    await self.wait_receipts(pending)
            except BaseException as exc:
                # Not up after all: take the connection down again (quietly: the
                # caller reports it as a failed attempt).
                if self._link_alive:
                    self._link_down(exc if isinstance(exc, StompError) else ConnectionLostError(str(exc)))
                with anyio.CancelScope(shield=True):
                    await transport.aclose()
                if isinstance(exc, TimeoutError):
                    raise ConnectTimeout(
                        f"{endpoint.host}:{endpoint.port} did not confirm the re-established subscriptions"
                        f" within {self._connect_timeout:g} s"
                    ) from exc
                raise

    async def _await_connected(self, transport: Any, protocol: StompProtocol, endpoint: Endpoint) -> List[Any]:
        while True:
            data = await transport.receive(READ_SIZE)
            if not data:
                hint = "is this a STOMP port?"
                if self._tls(endpoint) and not protocol.buffered:
                    hint += " Over TLS, a broker that wants a client certificate closes like this: ctx.load_cert_chain"
                raise ConnectError(
                    f"{endpoint.host}:{endpoint.port} closed the connection before CONNECTED ({hint})"
                )
            if data[:1] in (b"\x15", b"\x16") and data[1:2] == b"\x03" and not protocol.buffered:
                # a TLS record (alert or handshake) where a STOMP frame was expected
                raise ConnectError(
                    f"{endpoint.host}:{endpoint.port} answered with TLS: it is a TLS port"
                    " (use a stomp+ssl:// URL or ssl=True)"
                )
            events = protocol.receive_data(data)
            for i, event in enumerate(events):
                if isinstance(event, Connected):
                    return events[i + 1 :]
                if isinstance(event, ErrorReceived):
                    raise event.error

    # -- reconnecting ---------------------------------------------------------------------

    def _emit(self, kind: str, endpoint: Optional[Endpoint], **fields: Any) -> None:
        _log_event(kind, endpoint, self._protocol, fields)
        if self._on_event is None:
            return
        try:
            self._on_event(ConnectionEvent(kind, endpoint.url if endpoint is not None else None, **fields))
        except Exception:
            log.exception("stompfast: the on_event hook raised (ignored)")

    def _link_down(self, error: BaseException) -> None:
        """The current connection failed but the client goes on: clean up, wake the supervisor.

        Pending receipts fail with ``error`` (never re-sent); queued frames that were
        never written are dropped; buffered messages of client-ack subscriptions
        are discarded (the broker redelivers them, and acking them on a new
        session would be wrong); open transactions are aborted and told.
        """
        if not self._link_alive:
            return
        self._link_alive = False
        if self._state == "open":
            self._state = "reconnecting"
            self._up_event = self._next_up
        self._fail_receipts(error)
        dropped_frames = sum(1 for data in self._out if data != b"\n")
        self._out.clear()
        self._out_bytes = 0
        self._stop_connection()
        self._paused_on = None
        self._stalled = False
        self._protocol.connection_lost()
        dropped_messages = 0
        for sub in self._subs.values():
            if sub.ack_mode != "auto" and sub._buffer:
                dropped_messages += len(sub._buffer)
                sub._buffer.clear()
            sub._space = None
        transactions = list(self._transactions)
        self._transactions.clear()
        for tx in transactions:
            tx._lose(error)
        self._lost_info = (error, dropped_frames, dropped_messages, len(transactions))
        if self._lost is not None:
            self._lost.set()

    async def _supervise(self) -> None:
        """Wait for the connection to fail; re-establish it; repeat (runs while the client is open)."""
        streak = 0  # failed attempts in a row, sessions shorter than stable_after included
        while True:
            lost = self._lost
            assert lost is not None
            await lost.wait()
            error, dropped_frames, dropped_messages, aborted = self._lost_info
            self._lost_info = ()
            if self._transport is not None:
                with anyio.CancelScope(shield=True):
                    await self._transport.aclose()
            uptime = anyio.current_time() - self._up_since
            self._emit(
                "disconnected",
                self.endpoint,
                error=error,
                dropped_frames=dropped_frames,
                dropped_messages=dropped_messages,
                aborted_transactions=aborted,
                uptime=uptime,
            )
            policy = self._policy
            # A session that died young is one more failed attempt for the backoff,
            # not a fresh start: a flapping broker sees the delay grow to max_delay.
            # (The first session came from connect(), not from an attempt of ours.)
            streak = streak + 1 if uptime < policy.stable_after and self.reconnects else 0
            delay = policy.delay(streak + 1)
            self._emit("reconnecting", None, attempt=streak + 1, delay=delay, error=error)
            del error  # (nothing of a lost connection is kept while the next one runs)
            await anyio.sleep(delay)
            try:
                streak = await self._establish(first=False, streak=streak)
            except ClientClosedError:
                return  # closed while re-establishing (e.g. waiting for the re-sent SUBSCRIBEs)
            except _RETRYABLE as exc:
                self._emit("gave_up", None, error=exc)
                self._give_up(exc)
                return
            self.reconnects += 1
            self._state = "open"
            up = self._up_event
            if up is not None:
                up.set()

    def _give_up(self, error: BaseException) -> None:
        """No attempt left: fail the client for good with ``error``."""
        self._error = error
        self._fail_receipts(error)
        for sub in self._subs.values():
            sub._close(error)
        if self._up_event is not None:
            self._up_event.set()

    async def _ensure_open(self) -> None:
        """Return when a connection is up; wait while one is being re-established."""
        while self._state == "reconnecting" and self._error is None:
            up = self._up_event
            assert up is not None
            await up.wait()
        self._check_open()

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
        if self._state in ("closing", "closed", "new"):
            self._state = "closed" if self._state == "new" else self._state
            return
        self._state = "closing"
        if self._error is None and conn_log.isEnabledFor(logging.INFO):
            conn_log.info("closing the connection to %s", _where(self.endpoint))
        try:
            with anyio.CancelScope(shield=True):
                if self._error is None and self._protocol.state is SessionState.CONNECTED:
                    with anyio.move_on_after(self._disconnect_timeout):
                        try:
                            data, receipt_id = self._protocol.disconnect(receipt=True)
                            receipt = self._register(receipt_id)
                            self._queue(data)
                            # Written from here: when the block is left by a
                            # cancellation, the writer task is cancelled too.
                            await self._write_queued()
                            if not cancelled or self._push:
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
                sub._close(self._error)
            self._subs.clear()
            if self._error is None:
                self._error = closed
            self._link_alive = False
            for tx in list(self._transactions):
                tx._lose(self._error)
            self._transactions.clear()
            for scope in self._scopes:
                scope.cancel()
            if self._supervisor is not None:
                self._supervisor.cancel()
            if self._up_event is not None:
                self._up_event.set()
            with anyio.CancelScope(shield=True):
                if self._transport is not None:
                    await self._transport.aclose()
            if self._drained is not None:
                self._drained.set()
            self._state = "closed"

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

    # -- failure ------------------------------------------------------------------------

    def _fail(self, error: BaseException) -> None:
        """The connection failed with ``error``: re-establish it, or fail the client for good.

        With reconnecting on, a retryable failure (connection lost, heart-beat
        timeout, ERROR frame, framing fault) of an established session goes to
        :meth:`_link_down`. Otherwise the error is recorded once, every pending
        receipt and every subscription is failed with it, the tasks stop.
        """
        if self._error is not None:
            return
        if self._state in ("closing", "closed"):
            # Our own close is under way (it may be what ended the connection):
            # only end the waits, so that close does not sit out its timeout.
            self._fail_receipts(error)
            return
        if (
            self._policy.enabled
            and self._state in ("open", "reconnecting")
            and self._supervisor is not None
            and isinstance(error, _RETRYABLE)
        ):
            self._link_down(error)
            return
        if self._state == "open" and conn_log.isEnabledFor(logging.WARNING):
            conn_log.warning("connection to %s failed: %s", _where(self.endpoint), _describe(error))
        self._error = error
        self._link_alive = False
        self._fail_receipts(error)
        for sub in self._subs.values():
            sub._close(error)
        for tx in list(self._transactions):
            tx._lose(error)
        self._transactions.clear()
        self._stop_connection()
        if self._push:
            self._protocol.connection_lost()
        if self._supervisor is not None:
            self._supervisor.cancel()
        if self._up_event is not None:
            self._up_event.set()

    def _stop_connection(self) -> None:
        """Wake senders waiting for buffer room, stop this connection's tasks; in push mode close its socket.

        (On trio the reader task closes the socket on its way out, or the
        supervisor does before reconnecting.)
        """
        if self._drained is not None:
            self._drained.set()
            self._drained = None
        self._wakeup.set()
        for scope in self._scopes:
            scope.cancel()
        if self._push:
            self._unpause()
            self._transport.close_now()  # type: ignore[union-attr]

    def _check_open(self) -> None:
        if self._error is not None:
            raise _copy(self._error)
        if self._state == "reconnecting":
            raise ConnectionLostError(
                f"the connection to {self.endpoint.host}:{self.endpoint.port} was lost and is being"
                " re-established"
            )
        if self._state != "open":
            raise ClientClosedError(
                "the client is not connected (use `async with AsyncClient(...) as client:`)"
                if self._state in ("new", "connecting")
                else "the client is closed"
            )

    # -- writing ------------------------------------------------------------------------

    def _queue(self, data: bytes) -> None:
        """Queue encoded bytes for the writer (no wait: the caller checked the bound)."""
        out = self._out
        out.append(data)
        self._out_bytes += len(data)
        if len(out) == 1:
            self._wakeup.set()

    def _flush_now(self) -> None:
        """Write everything queued from the calling task, if the transport can take it at once.

        Used just before a task blocks on a receipt: the frames would otherwise
        wait for the writer task's turn (a wake-up and an event-loop iteration per
        round trip). Bursts of sends without receipts are still coalesced.
        """
        out = self._out
        if out and self._transport is not None and self._error is None:
            if self._transport.try_write(out[0] if len(out) == 1 else b"".join(out)):
                out.clear()
                self._out_bytes = 0
                if self._drained is not None:
                    self._drained.set()
                    self._drained = None
                if self._beating:
                    self._last_sent = self._clock()

    async def _write_queued(self) -> None:
        """Write what is queued from the calling task, unless the writer task is writing."""
        if self._writing or not self._out or self._transport is None:
            return
        out = self._out
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self._out_bytes = 0
        await self._transport.send(data)

    def _write_now(self, data: bytes) -> bool:
        """Write ``data`` from the calling task if the transport takes it at once (asyncio)."""
        transport = self._transport
        if transport is None or self._error is not None or not transport.try_write(data):
            return False
        if self._beating:
            self._last_sent = self._clock()
        return True

    async def _write(self, data: bytes) -> None:
        if self._out_bytes >= self._send_buffer_bytes:
            while self._out_bytes >= self._send_buffer_bytes and self._error is None:
                if self._drained is None:
                    self._drained = anyio.Event()
                await self._drained.wait()
            self._check_open()
        self._queue(data)

    async def _write_through(self, data: bytes) -> None:
        """Queue ``data`` past the write-through mark: write the queue out now, or let the writer.

        A burst of sends never yields on its own, so without this the queue would
        grow to ``send_buffer_bytes`` before the writer task got a turn. While the
        writer is busy (the socket is full) the sender waits for it to take the
        queue, so on asyncio at most about two marks' worth is held, one being
        written and one queued.
        """
        await self._write(data)
        if self._writing:
            # The writer task waits for the socket (the broker is slower than we
            # are): wait until it takes this queue rather than queue up to
            # send_buffer_bytes, which only costs memory and page faults.
            while self._writing and self._out_bytes >= self._write_through_bytes and self._error is None:
                if self._drained is None:
                    self._drained = anyio.Event()
                await self._drained.wait()
            return
        self._flush_now()  # asyncio: straight into the socket, no task switch
        if self._out:
            await anyio.lowlevel.checkpoint()  # elsewhere, or a full socket: the writer's turn

    async def _writer(self) -> None:
        transport = self._transport
        assert transport is not None
        out = self._out
        try:
            while True:
                if not out:
                    if self._transport is not transport:
                        return  # a connection that was replaced: leave the client's state alone
                    if self._wakeup.is_set():
                        self._wakeup = anyio.Event()
                    await self._wakeup.wait()
                    if not out:
                        continue
                # _writing before the queue looks empty: a thread sending directly
                # (send_from_thread) must never pass frames taken but not yet written
                self._writing = True
                data = out[0] if len(out) == 1 else b"".join(out)
                out.clear()
                self._out_bytes = 0
                if self._drained is not None:
                    self._drained.set()
                    self._drained = None
                try:
                    await transport.send(data)
                finally:
                    self._writing = False
                if self._beating:
                    self._last_sent = self._clock()
        except ConnectionLostError as exc:
            if self._transport is transport:
                self._fail(exc)

    async def _heartbeat_sender(self, interval: float) -> None:
        # STOMP: "the sender MUST send new data over the network connection at
        # least every <n> milliseconds"; beats go out after half an interval of
        # silence, checked every quarter interval, so a strict broker (ActiveMQ
        # drops a client ~1.4 intervals late) never sees one late.
        half, quarter = interval / 2, interval / 4
        while True:
            await anyio.sleep(quarter)
            if not self._out and anyio.current_time() - self._last_sent >= half:
                self._queue(b"\n")

    async def _liveness(self, interval: float) -> None:
        limit = interval * self._heartbeat_tolerance
        grace = min(0.05, interval / 10)
        while True:
            now = anyio.current_time()
            deadline = self._last_received + limit
            if now < deadline:
                await anyio.sleep(deadline - now)
                continue
            if self._paused_on is not None:  # we are not reading: silence proves nothing
                self._last_received = now
                continue
            # The event loop may have been busy elsewhere: let a ready reader run first.
            await anyio.sleep(grace)
            if anyio.current_time() - self._last_received > limit and self._paused_on is None:
                self._fail(
                    HeartbeatTimeout(
                        f"nothing received from {self.endpoint.host}:{self.endpoint.port} for"
                        f" {anyio.current_time() - self._last_received:.2f} s (heart-beat interval"
                        f" {interval:g} s, tolerance x{self._heartbeat_tolerance:g})"
                    )
                )
                return

    # -- reading ------------------------------------------------------------------------

    async def _reader(self, leftover: List[Any]) -> None:
        transport = self._transport
        assert transport is not None
        protocol = self._protocol
        try:
            if leftover:
                await self._dispatch(leftover)
            while True:
                data = await transport.receive(READ_SIZE)
                if not data:
                    if self._transport is not transport or not self._link_alive:
                        # Another task (the writer, the heart-beat watch) took this link down
                        # while the EOF was on its way to us: it is handled, and the
                        # protocol's CLOSED state is that loss, not our close.
                        return
                    if protocol.state is SessionState.CLOSED or self._state == "closing":
                        # our close: a broker may end it without the DISCONNECT's RECEIPT
                        # (RabbitMQ's Web-STOMP closes the WebSocket): stop waiting for it
                        self._fail(ClientClosedError("the client is closed"))
                        return
                    cut = " in the middle of a frame" if protocol.buffered else ""
                    raise ConnectionLostError(
                        f"{self.endpoint.host}:{self.endpoint.port} closed the connection{cut}"
                    )
                if self._watching:
                    self._last_received = anyio.current_time()
                try:
                    events = protocol.receive_data(data)
                except RemoteProtocolError as exc:
                    early = getattr(exc, "events", None)
                    if early:
                        await self._dispatch(early)
                    raise
                if events:
                    await self._dispatch(events)
        except (ConnectionLostError, RemoteProtocolError) as exc:
            if self._transport is transport:
                # (without the traceback: its frames hold this connection's session)
                self._fail(exc.with_traceback(None))
        finally:
            protocol.connection_lost()
            if self._error is not None:  # a dead connection: free the socket now
                with anyio.CancelScope(shield=True):
                    await transport.aclose()

    def _start_reading(self, leftover: List[Any]) -> None:
        transport = self._transport
        if isinstance(transport, AsyncioTransport):
            self._push = True
            full = self._dispatch_now(leftover) if leftover else None
            if full and self._error is None:
                self._pause_for(full[0])
            transport.start_push(self._on_data, self._on_eof)
        else:
            self._background(self._reader(leftover), "stompfast-reader")

    def _dispatch_now(self, events: List[Any]) -> Optional[List[AsyncSubscription]]:
        """Hand one read's events to subscriptions and receipts; return the subscriptions now full."""
        subs = self._subs
        touched: List[AsyncSubscription] = []
        last_id: Optional[str] = None
        last: Optional[AsyncSubscription] = None
        for event in events:
            if type(event) is Message:
                if event.subscription != last_id:
                    last_id = event.subscription
                    last = subs.get(last_id)
                    if last is not None and last not in touched:
                        touched.append(last)
                if last is not None:
                    last._deliver(event)
                # else: a message for a subscription we left; the broker redelivers
                # it in client modes, and in auto mode it was unwanted anyway
            elif type(event) is ReceiptReceived:
                receipt = self._receipts.pop(event.receipt_id, None)
                if receipt is not None:
                    receipt._set()
            elif type(event) is ErrorReceived:
                for sub in touched:
                    sub._ready.set()
                self._fail(event.error)
                return None
        full = None
        for sub in touched:
            sub._ready.set()
            if len(sub._buffer) >= sub._pause_at and not sub._closed:
                if full is None:
                    full = [sub]
                else:
                    full.append(sub)
        return full

    async def _dispatch(self, events: List[Any]) -> None:
        full = self._dispatch_now(events)
        if full:
            for sub in full:
                if len(sub._buffer) >= sub._pause_at and not sub._closed:
                    await self._wait_for_space(sub)

    # asyncio push mode: the same steps as _reader, run from the protocol's callbacks

    def _on_data(self, data: bytes) -> None:
        if self._error is not None:
            return
        if self._watching:
            self._last_received = self._loop.time()
        try:
            try:
                events = self._protocol.receive_data(data)
            except RemoteProtocolError as exc:
                early = getattr(exc, "events", None)
                if early:
                    self._dispatch_now(early)
                self._fail(exc.with_traceback(None))  # its frames would keep the failed session alive
                return
            if events:
                full = self._dispatch_now(events)
                if full and self._error is None:
                    self._pause_for(full[0])
        except Exception as exc:  # a bug must reach the waiters, not asyncio's logger
            self._fail(exc)

    def _on_eof(self, error: Optional[BaseException]) -> None:
        protocol = self._protocol
        try:
            if self._error is None and (protocol.state is SessionState.CLOSED or self._state == "closing"):
                # our close: a broker may end it without the DISCONNECT's RECEIPT (RabbitMQ's
                # Web-STOMP closes the WebSocket); stop waiting for it (_fail only ends the waits)
                self._fail(ClientClosedError("the client is closed"))
            elif self._error is None:
                peer = f"{self.endpoint.host}:{self.endpoint.port}"
                if error is not None:
                    lost = ConnectionLostError(f"connection to {peer} lost while reading: {_describe(error)}")
                    lost.__cause__ = error  # as `raise ... from` does on the pull path
                    self._fail(lost)
                else:
                    cut = " in the middle of a frame" if protocol.buffered else ""
                    self._fail(ConnectionLostError(f"{peer} closed the connection{cut}"))
        finally:
            protocol.connection_lost()

    def _pause_for(self, sub: AsyncSubscription) -> None:
        """Stop reading until ``sub`` has room (push-mode twin of :meth:`_wait_for_space`)."""
        self._paused_on = sub
        self._transport.pause_reading()  # type: ignore[union-attr]
        sub._space = _Resume(self)
        if len(sub._buffer) < sub._pause_at:
            # a thread consuming it (the blocking client) took messages before
            # _space was there for it to see: there is room already
            sub._space = None
            self._on_space()
            return
        if self._stall_handle is None:
            self._stall_handle = self._loop.call_later(self._stall_timeout, self._on_stall)

    def _on_stall(self) -> None:
        self._stall_handle = None
        sub = self._paused_on
        if sub is not None and self._error is None:
            # Stopped for stall_timeout: receipts cannot arrive until this buffer drains.
            self._stalled = True
            self._fail_receipts_for_stall(sub)

    def _unpause(self) -> None:
        if self._stall_handle is not None:
            self._stall_handle.cancel()
            self._stall_handle = None
        self._paused_on = None
        self._stalled = False

    def _on_space(self) -> None:
        """A paused-on subscription has room (or closed): read again unless another is full."""
        if self._paused_on is None:
            return
        self._unpause()
        if self._error is not None:
            return
        self._last_received = self._loop.time()
        for sub in self._subs.values():
            if len(sub._buffer) >= sub._pause_at and not sub._closed:
                self._pause_for(sub)
                return
        self._transport.resume_reading()  # type: ignore[union-attr]

    async def _wait_for_space(self, sub: AsyncSubscription) -> None:
        self._paused_on = sub
        try:
            while True:
                # _space first, then the length: a thread that takes messages (the
                # blocking client) either sees the event or left room we see here
                space = sub._space = anyio.Event()
                if not (len(sub._buffer) >= sub._pause_at and not sub._closed and self._error is None):
                    sub._space = None
                    break
                with anyio.move_on_after(self._stall_timeout):
                    await space.wait()
                    continue
                # Stopped for stall_timeout: receipts cannot arrive until this buffer drains.
                self._stalled = True
                self._fail_receipts_for_stall(sub)
                await space.wait()
        finally:
            self._paused_on = None
            self._stalled = False
            self._last_received = anyio.current_time()

    def _stall_error(self, sub: AsyncSubscription) -> FlowControlError:
        return FlowControlError(
            f"the reader has been stopped for {self._stall_timeout:g} s by subscription {sub.id!r} to"
            f" {sub.destination!r}, whose buffer of {sub.buffer_size} messages is full and unread: no"
            " receipt can arrive until it is drained (consume it, raise buffer_size, or use client"
            " acks, which limit the broker's prefetch to the buffer)",
            subscription=sub.id,
            destination=sub.destination,
        )

    def _fail_receipts_for_stall(self, sub: AsyncSubscription) -> None:
        self._fail_receipts(self._stall_error(sub))

    def _fail_receipts(self, error: BaseException) -> None:
        """Fail every pending receipt with ``error`` and forget them.

        Under the registry lock: the blocking client registers receipts from its
        own threads (:meth:`send_from_thread`), which must not land between the
        snapshot and the clear, nor change the dict while it is iterated.
        """
        with self._registry_lock:
            receipts = list(self._receipts.values())
            self._receipts.clear()
        for receipt in receipts:
            receipt._fail(error)

    def _register(self, receipt_id: Optional[str]) -> Receipt:
        assert receipt_id is not None
        receipt = Receipt(receipt_id, self._loop)
        if self._stalled and self._paused_on is not None:
            receipt._fail(self._stall_error(self._paused_on))
        else:
            self._receipts[receipt_id] = receipt
        return receipt

    # -- the API ------------------------------------------------------------------------

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
        if self._error is not None or self._state != "open":
            await self._ensure_open()
        if type(body) is bytes and headers is None and content_type is None and not receipt:
            data = self._protocol.send_plain(destination, body)  # the hot path: a plain SEND
        else:
            data, receipt_id = self._encode_send(destination, body, headers, content_type, receipt)
            if receipt_id is not None:
                return await self._send_receipted(data, receipt_id, wait)
        if self._out_bytes < self._write_through_bytes:  # _queue, inlined: the hot path
            out = self._out
            out.append(data)
            self._out_bytes += len(data)
            if len(out) == 1:
                self._wakeup.set()
        else:
            await self._write_through(data)
        return None

    def _encode_send(
        self, destination: str, body: Any, headers: Optional[Mapping[str, Any]], content_type: Optional[str],
        receipt: bool,
    ) -> Tuple[bytes, Optional[str]]:
        """The SEND frame of :meth:`send` and its receipt id (the body rules are send's)."""
        body, content_type = _body_bytes(body, content_type)
        return self._protocol.send(destination, body, headers, content_type=content_type, receipt=receipt)

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
        if self._error is not None or self._state != "open":
            if self._state == "reconnecting" and self._error is None:
                raise anyio.WouldBlock
            self._check_open()
        if self._out_bytes >= self._send_buffer_bytes:
            raise anyio.WouldBlock
        data, receipt_id = self._encode_send(destination, body, headers, content_type, receipt)
        if receipt_id is None:
            self._queue(data)
            if self._out_bytes >= self._write_through_bytes:
                self._flush_now()
            return None
        pending = self._register(receipt_id)
        if not self._out and self._write_now(data):
            return pending
        self._queue(data)
        self._flush_now()
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
        body, content_type = _body_bytes(body, content_type)
        with self._registry_lock:
            if (
                self._error is not None
                or self._state != "open"
                or not self._link_alive
                or self._transport is not transport
                or self._out
                or self._writing
                or self._stalled
            ):
                return None
            receipt_id = "t%d" % next(self._thread_receipts)
            data = self._protocol.encode_send(destination, body, headers, content_type, receipt_id)
            receipt = Receipt(receipt_id, self._loop)
            receipt.add_done_callback(on_done)  # before anything can complete it
            self._receipts[receipt_id] = receipt
            if not transport.write_from_thread(data):
                del self._receipts[receipt_id]
                return None
            if self._beating:
                self._last_sent = self._clock()
        return receipt

    async def _send_receipted(self, data: bytes, receipt_id: str, wait: bool) -> Receipt:
        pending = self._register(receipt_id)
        if wait and not self._out and self._write_now(data):
            # Nothing queued ahead of it and the caller is about to block: write
            # it from this task (no writer wake-up, no extra loop iteration).
            await pending.wait()
            return pending
        await self._write(data)
        if wait:
            self._flush_now()
            await pending.wait()
        return pending

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
        pending = list(self._receipts.values())
        data, receipt_id = self._protocol.probe()
        probe = self._register(receipt_id)
        await self._write(data)
        pending.append(probe)
        self._flush_now()
        await self.wait_receipts(pending)

    def subscribe(
        self,
        destination: str,
        *,
        ack: str = "auto",
        headers: Optional[Mapping[str, Any]] = None,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        receipt: bool = True,
        id: Optional[str] = None,
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
            id: the subscription id (default: a counter).
        """
        return AsyncSubscription(self, destination, ack, dict(headers) if headers else None, buffer_size, receipt, id)

    async def _subscribe(self, sub: AsyncSubscription) -> None:
        await self._ensure_open()
        data, sub_id, receipt_id = self._protocol.subscribe(
            sub.destination, ack=sub.ack_mode, headers=sub.headers, id=sub.id, receipt=sub._receipt
        )
        sub.id = sub_id
        self._subs[sub_id] = sub
        try:
            pending = self._register(receipt_id) if receipt_id is not None else None
            await self._write(data)
            if pending is not None:
                await pending.wait()
        except BaseException:
            # Refused or interrupted (a timeout): withdraw it, so that it is neither
            # left running on the broker nor re-established after a reconnect.
            if self._subs.get(sub_id) is sub:
                del self._subs[sub_id]
                if self._link_alive and self._error is None and self._protocol.state is SessionState.CONNECTED:
                    try:
                        data, _ = self._protocol.unsubscribe(sub_id)
                        self._queue(data)
                    except StompError:
                        pass
            raise

    async def _unsubscribe(self, sub: AsyncSubscription) -> None:
        if sub.id is None or self._subs.get(sub.id) is not sub:
            return
        del self._subs[sub.id]
        if self._error is None and self._state == "open" and self._protocol.state is SessionState.CONNECTED:
            data, _ = self._protocol.unsubscribe(sub.id)
            # Bounded like DISCONNECT: a broker that stops reading (TCP flow control)
            # must not hold the caller here; the subscription is gone locally anyway.
            with anyio.move_on_after(self._disconnect_timeout):
                await self._write(data)
                return
            log.debug("stompfast: UNSUBSCRIBE %r not queued within %g s", sub.id, self._disconnect_timeout)

    def _check_stale(self, command: str, message: Message) -> None:
        """Refuse an ACK/NACK of a message delivered on a connection that is gone (or going).

        During a reconnect the failed connection's protocol is still the current
        one, so the session test alone would let the ack through to
        ``_check_open`` and a ConnectionLostError; the broker redelivers the
        message, so it is stale either way and never sent on another connection.
        """
        if (message._session is not self._protocol or not self._link_alive) and self._error is None:
            raise StaleMessageError(
                f"message {message.message_id!r} was delivered on a connection that was lost; the broker"
                f" redelivers unacknowledged messages, so this {command} was not sent"
            )

    async def _ack(self, command: str, message: Message, transaction: Optional[str], receipt: bool) -> None:
        self._check_stale(command, message)
        if self._state != "reconnecting" or self._error is not None:
            self._check_open()
        # else: the message came on the new connection while it confirms the
        # re-established subscriptions (a broker may deliver first): it is live, so
        # the ACK goes out on it; only a lost connection's messages are stale.
        if command == "ACK":
            data, receipt_id = self._protocol.ack(message, transaction=transaction, receipt=receipt)
        else:
            data, receipt_id = self._protocol.nack(message, transaction=transaction, receipt=receipt)
        if receipt_id is None:
            await self._write(data)
            return
        pending = self._register(receipt_id)
        await self._write(data)
        self._flush_now()
        await pending.wait()

    async def ack(self, message: Message, *, receipt: bool = False) -> None:
        """Acknowledge ``message`` (same as ``await message.ack()``)."""
        await Message.ack(message, receipt=receipt)  # (the async ack, whatever subclass the message is)

    async def nack(self, message: Message, *, receipt: bool = False) -> None:
        """Refuse ``message`` (same as ``await message.nack()``; STOMP 1.1+)."""
        await Message.nack(message, receipt=receipt)

    def transaction(self, *, receipt: bool = True) -> "AsyncTransaction":
        """A transaction: ``async with client.transaction() as tx:``.

        BEGIN on entry; COMMIT on normal exit (confirmed by a receipt unless
        ``receipt=False``); ABORT on an exception or cancellation.
        """
        return AsyncTransaction(self, receipt)


AsyncClient.__init__.__signature__ = options_signature(AsyncClient.__init__)  # type: ignore[attr-defined]


class _Resume:
    """Stands in for a subscription's space event in push mode: ``set()`` resumes reading."""

    __slots__ = ("_client",)

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    def set(self) -> None:
        self._client._on_space()


class AsyncTransaction:
    """An open transaction; its ``send``, ``ack`` and ``nack`` carry its id.

    If the connection is lost while it is open, the broker aborts it; the
    transaction then refuses further use with :class:`TransactionError` (its
    ``__cause__`` is what ended the connection), and leaving the block normally
    raises that error instead of committing.
    """

    def __init__(self, client: AsyncClient, receipt: bool) -> None:
        self._client = client
        self._receipt = receipt
        self.id: Optional[str] = None
        self._done = False
        self._lost: Optional[BaseException] = None

    async def __aenter__(self) -> "AsyncTransaction":
        client = self._client
        await client._ensure_open()
        data, self.id, _ = client._protocol.begin()
        await client._write(data)
        client._transactions.add(self)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            await self.commit()
        else:
            with anyio.CancelScope(shield=True):
                await self.abort()

    def _lose(self, error: BaseException) -> None:
        """The connection ended while the transaction was open: the broker aborted it."""
        if not self._done and self._lost is None:
            self._lost = error

    def _check(self) -> str:
        if self._lost is not None:
            raise TransactionError(
                f"transaction {self.id!r} was aborted: the connection ended while it was open ({self._lost})"
            ) from self._lost
        if self._done or self.id is None:
            raise TransactionError(f"transaction {self.id!r} is not open")
        return self.id

    async def send(self, destination: str, body: Union[bytes, str] = b"", **kwargs: Any) -> None:
        """Send within the transaction: the broker delivers it on COMMIT."""
        tx = self._check()
        client = self._client
        client._check_open()
        content_type = kwargs.pop("content_type", None)
        headers = kwargs.pop("headers", None)
        if kwargs:
            raise TypeError(f"unexpected arguments: {', '.join(kwargs)}")
        if isinstance(body, str):
            body = body.encode("utf-8")
            content_type = content_type or TEXT_CONTENT_TYPE
        data, _ = client._protocol.send(destination, bytes(body), headers, content_type=content_type, transaction=tx)
        await client._write(data)

    async def ack(self, message: Message) -> None:
        """Acknowledge ``message`` within the transaction (takes effect on COMMIT)."""
        await Message.ack(message, transaction=self._check())  # (the async ack, whatever the subclass)

    async def nack(self, message: Message) -> None:
        """Refuse ``message`` within the transaction (takes effect on COMMIT)."""
        await Message.nack(message, transaction=self._check())

    async def commit(self) -> None:
        """COMMIT (confirmed by a receipt unless the transaction was made with ``receipt=False``)."""
        tx = self._check()
        self._done = True
        client = self._client
        client._transactions.discard(self)
        client._check_open()
        data, receipt_id = client._protocol.commit(tx, receipt=self._receipt)
        pending = client._register(receipt_id) if receipt_id is not None else None
        await client._write(data)
        if pending is not None:
            await pending.wait()

    async def abort(self) -> None:
        """ABORT: the broker drops the transaction's sends and acks."""
        if self._done or self.id is None:
            return
        self._done = True
        client = self._client
        client._transactions.discard(self)
        if self._lost is not None or client._error is not None or client._state != "open":
            return  # the session is gone: the broker aborted it already
        data, _ = client._protocol.abort(self.id)
        await client._write(data)
