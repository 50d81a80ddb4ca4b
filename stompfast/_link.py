"""The link part of :class:`~stompfast.AsyncClient`: open one connection, CONNECT, wait for CONNECTED, install it.

``_open_link`` makes a fresh :class:`~stompfast._protocol.StompProtocol` (a new
session), opens the transport (TCP, TLS or WebSocket: :func:`open_transport`),
sends CONNECT and waits for CONNECTED within ``connect_timeout``, turning what
goes wrong into a ConnectError that says why (a TLS port spoken to in plain
TCP, a broker that wants a client certificate, not a STOMP port). Then it
installs the connection: fresh per-connection state, the reader (pull task or
push callbacks, chosen once here), the writer and the heart-beat tasks, and on
a reconnect the re-sent SUBSCRIBEs, confirmed before the link counts as up.

A mixin of the client (see docs/architecture.md).
"""

from __future__ import annotations

import ssl as _ssl
from logging import DEBUG
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Union

import anyio

from ._config import Endpoint
from ._framelog import FrameLog, frame_log
from ._inbox import Inbox
from ._outbox import WRITE_THROUGH_BYTES, Outbox
from ._protocol import Connected, ErrorReceived, StompProtocol
from ._receipt import PendingReceipt, ReceiptRegistry
from ._stats import Counters
from ._subscription import Inlet
from ._transport import READ_SIZE, AsyncioTransport, StompTransport, WebSocketSpec, open_transport
from .errors import (
    ConnectError,
    ConnectionLostError,
    ConnectTimeout,
    NotStompError,
    RemoteProtocolError,
    StompError,
    TLSError,
)

__all__ = ["Link"]

#: how a server's answer to CONNECT may begin (after heart-beat EOLs)
_ANSWERS = (b"CONNECTED\n", b"CONNECTED\r\n", b"ERROR\n", b"ERROR\r\n")
#: how many of the first bytes received are kept to judge (and quote) an answer
_HEAD = 64


def could_be_stomp(head: bytes) -> bool:
    """False when ``head``, the first bytes a server sent, cannot begin its answer to CONNECT.

    A STOMP server answers with CONNECTED or ERROR, after heart-beat EOLs at most;
    an AMQP or HTTP port, a banner or a TLS record already differ in the first bytes,
    so there is no need to wait for a frame (which may never end) to tell.
    """
    start = head.lstrip(b"\r\n")
    return any(start[: len(answer)] == answer[: len(start)] for answer in _ANSWERS)


def not_stomp(endpoint: Endpoint, head: bytes) -> NotStompError:
    """The error for a server that answered CONNECT with ``head``, quoted short and escaped."""
    # The first line says what the service is ("HTTP/1.1 400 ...", "AMQP..."); the
    # repr of bytes escapes everything unprintable, so the quote is safe in a log line.
    shown = head.lstrip(b"\r\n")
    end = shown.find(b"\n")
    cut = min(end + 1 if end >= 0 else len(shown), 40)
    quote = repr(shown[:cut]) + ("..." if cut < len(shown) else "")
    return NotStompError(
        f"the server at {endpoint.host}:{endpoint.port} does not speak STOMP (it answered {quote}):"
        " is this the broker's STOMP port?",
        host=endpoint.host, port=endpoint.port, received=bytes(head),
    )


class Link(Counters):
    """Opening and installing one connection (a part of AsyncClient)."""

    # owns: the installed connection (_protocol, _transport, endpoint, _scopes, _frames); reads the options
    _protocol_options: Dict[str, Any]
    _ssl_option: Union[bool, _ssl.SSLContext, None]
    _server_hostname: Optional[str]
    _connect_timeout: float
    _websocket_max_message_bytes: int
    _registry_lock: Any
    _subs: Dict[str, Inlet]
    _protocol: StompProtocol
    _transport: Optional[StompTransport]
    _receipts: ReceiptRegistry
    _outbox: Outbox
    _inbox: Inbox
    _send_buffer_bytes: float
    _stall_timeout: float
    _heartbeat_tolerance: float
    _clock: Callable[[], float]
    _loop: Any
    _scopes: List[anyio.CancelScope]
    _link_alive: bool
    _frames: Optional[FrameLog]
    endpoint: Endpoint

    if TYPE_CHECKING:  # provided by the client's other parts

        def _attach_supervisor(self) -> None:
            raise NotImplementedError

        def _link_down(self, error: BaseException) -> None:
            raise NotImplementedError

        def _fail(self, error: BaseException) -> None:
            raise NotImplementedError

        def _background(self, coro: Any, name: str) -> None:
            raise NotImplementedError

        def _register(self, receipt_id: Optional[str]) -> PendingReceipt:
            raise NotImplementedError

        def _fail_receipts(self, error: BaseException) -> None:
            raise NotImplementedError

        async def wait_receipts(self, receipts: Any) -> None:
            raise NotImplementedError

    def _make_protocol(self, endpoint: Endpoint) -> StompProtocol:
        # skip_oversized: a MESSAGE over max_frame_bytes that the broker sent with
        # content-length reaches its subscription as an OversizedMessage to ack or
        # nack; failing the connection would only have it redelivered for ever.
        return StompProtocol(
            host=endpoint.virtual_host,
            login=endpoint.login,
            passcode=endpoint.passcode,
            skip_oversized=True,
            **self._protocol_options,
        )

    def _tls(self, endpoint: Endpoint) -> Union[bool, _ssl.SSLContext]:
        """TLS for ``endpoint``: the ``ssl=`` keyword if given, else what its URL scheme says."""
        return endpoint.tls if self._ssl_option is None else self._ssl_option

    def _ssl_context(self, endpoint: Endpoint) -> Optional[_ssl.SSLContext]:
        """The SSL context to connect with (None: plain TCP); a default one is made per connect."""
        tls = self._tls(endpoint)
        if isinstance(tls, _ssl.SSLContext):
            return tls
        return _ssl.create_default_context() if tls else None

    def _log_frames(self, direction: str, data: bytes) -> None:
        """(Only with ``stompfast.frames`` at DEBUG: see :mod:`._framelog`.) Log the frames of ``data``."""
        frames = self._frames
        if frames is None:  # logging turned on in the middle of this connection
            with self._registry_lock:  # (send_from_thread logs from its thread)
                frames = self._frames
                if frames is None:
                    frames = self._frames = FrameLog(f"{self.endpoint.host}:{self.endpoint.port}")
        frames.feed(direction, data, self._protocol.version)

    async def _open_link(self, endpoint: Endpoint, *, resubscribe: bool) -> None:
        """Connect to ``endpoint``, wait for CONNECTED, start the connection's tasks.

        The broker counts as up only after CONNECTED and, on a reconnect, after it
        confirmed every re-established subscription.
        """
        protocol = self._make_protocol(endpoint)
        frames = FrameLog(f"{endpoint.host}:{endpoint.port}") if frame_log.isEnabledFor(DEBUG) else None
        transport: Any = None  # a StompTransport once open
        try:
            leftover: List[Any] = []
            websocket = None
            if endpoint.websocket:
                from ._websocket import subprotocols

                websocket = WebSocketSpec(
                    endpoint.path, subprotocols(protocol.versions), self._websocket_max_message_bytes
                )
            try:
                with anyio.fail_after(self._connect_timeout):
                    transport = await open_transport(
                        endpoint.host,
                        endpoint.port,
                        ssl_context=self._ssl_context(endpoint),
                        server_hostname=self._server_hostname,
                        websocket=websocket,
                    )
                    connect = protocol.connect()
                    if frames is not None:
                        frames.feed(">", connect)
                    self._n_connects += 1
                    self._n_bytes_out += len(connect)
                    await transport.send(connect)
                    leftover = await self._await_connected(transport, protocol, endpoint, frames)
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
        outbox = Outbox(
            transport,
            send_buffer_bytes=self._send_buffer_bytes,
            # Only asyncio's transport takes a write from the sending task (try_write);
            # elsewhere writing through would mean a task switch per mark, so the
            # queue fills to send_buffer_bytes.
            write_through_bytes=(
                WRITE_THROUGH_BYTES if isinstance(transport, AsyncioTransport) else self._send_buffer_bytes
            ),
            clock=self._clock,
            on_lost=self._fail,
            log_frames=self._log_frames,
        )
        receipts = ReceiptRegistry(self._registry_lock, self._loop)
        inbox = Inbox(
            transport,
            protocol,
            subs=self._subs,
            receipts=receipts.pending,
            rtt=self._rtt,
            peer=f"{endpoint.host}:{endpoint.port}",
            clock=self._clock,
            loop=self._loop,
            stall_timeout=self._stall_timeout,
            heartbeat_tolerance=self._heartbeat_tolerance,
            on_failure=self._fail,
            fail_receipts=self._fail_receipts,
            log_frames=self._log_frames,
        )
        with self._registry_lock:  # (a thread sending directly sees all of it or none)
            self._protocol = protocol
            self._transport = transport
            self._receipts = receipts
            # (the replaced parts' counts join the client's totals: stats() sees each once)
            self._count_parts(self._outbox, self._inbox)
            self._outbox = outbox
            self._inbox = inbox
        self.endpoint = endpoint
        self._frames = frames
        self._scopes = []
        # each part starts over on the new connection, and starts its tasks
        self._attach_supervisor()
        self._background(outbox.writer(), "stompfast-writer")
        beat_ms = protocol.heart_beat[0]
        if beat_ms:
            outbox.beating = True
            self._background(outbox.heartbeat_sender(beat_ms / 1000.0), "stompfast-heartbeat")
        watch_ms = protocol.heart_beat[1]
        if watch_ms:  # (before the reader: leftover bytes may end the link at once, and its scopes with it)
            inbox.watching = True
            self._background(inbox.liveness(watch_ms / 1000.0), "stompfast-liveness")
        if inbox.push:  # asyncio: the transport calls the inbox back with each read, no reader task
            inbox.start_push(leftover)
        else:
            self._background(inbox.reader(leftover), "stompfast-reader")
        if resubscribe and self._subs:
            try:
                pending = []
                for sub in list(self._subs.values()):
                    data, _, receipt_id = protocol.subscribe(
                        sub.destination, ack=sub.ack_mode, headers=sub.headers, id=sub.id, receipt=True,
                        prefetch=sub.prefetch, durable=sub.durable,
                    )
                    pending.append(self._register(receipt_id))
                    # (as on a first SUBSCRIBE: its first MESSAGE confirms it too)
                    sub.confirming = receipt_id
                    outbox.queue(data)
                    self._n_control += 1
                outbox.write_queued_now()
                with anyio.fail_after(self._connect_timeout):
                    await self.wait_receipts(pending)
                for sub in self._subs.values():
                    sub.confirming = None
            except BaseException as exc:
                for sub in self._subs.values():
                    sub.confirming = None
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

    async def _await_connected(
        self, transport: Any, protocol: StompProtocol, endpoint: Endpoint, frames: Optional[FrameLog]
    ) -> List[Any]:
        head = b""  # the first bytes received, to judge and quote a server that is not STOMP
        while True:
            data = await transport.receive(READ_SIZE)
            if frames is not None:
                frames.feed("<", data)
            self._n_bytes_in += len(data)
            if len(head) < _HEAD:
                head += data[: _HEAD - len(head)]
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
            if not could_be_stomp(head):
                raise not_stomp(endpoint, head)
            try:
                events = protocol.receive_data(data)
            except RemoteProtocolError as exc:
                # A fault of the scanner (it has an offset) or a frame other than CONNECTED
                # or ERROR: no STOMP server answers CONNECT so. A CONNECTED the session
                # refuses (a version not offered, a bad heart-beat) comes from a STOMP
                # server and keeps its own, more precise, error.
                if exc.offset is None and head.lstrip(b"\r\n").startswith(b"CONNECTED"):
                    raise
                raise not_stomp(endpoint, head) from exc
            for i, event in enumerate(events):
                if isinstance(event, Connected):
                    self._n_frames_in += 1  # (the rest are dispatched, and counted, with the session's)
                    return events[i + 1 :]
                if isinstance(event, ErrorReceived):
                    self._n_frames_in += 1
                    self._n_errors += 1
                    raise event.error
