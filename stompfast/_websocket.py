"""STOMP over WebSocket (RFC 6455), with wsproto; an optional part: ``pip install 'stompfast[ws]'``.

The WebSocket is a layer under the same transports the client uses for TCP, so
the client cannot tell the difference:

* on asyncio, :class:`WebSocketLayer` is the ``asyncio.Protocol`` of the socket
  *and* the transport of the usual ``_Protocol`` above it: received WebSocket
  messages are unwrapped and their payload handed on to ``data_received``
  (push mode keeps working), and ``write`` wraps the bytes in one WebSocket
  message. The plain TCP path does not go through it (no cost there);
* on trio (any anyio backend), :class:`WebSocketStream` is an anyio
  ``ByteStream`` around the TCP or TLS stream, wrapped by the usual
  ``Transport``.

STOMP frames are a byte stream inside the messages: a received message may hold
several frames or part of one, text or binary, fragmented across WebSocket
frames or not (the scanner copes with any chunking). Each write is sent as
binary messages of at most ``max_message_bytes`` (the client option
``websocket_max_message_bytes``, default :data:`MAX_MESSAGE_BYTES`), each one
WebSocket frame: a message may hold several STOMP frames, and a STOMP frame (or
a burst) longer than the cap spans several messages (RabbitMQ's Web-STOMP,
Artemis and Spring parse messages as a byte stream; Artemis closes the
connection on a WebSocket frame over 65,536 bytes). Pings are answered; a close from the broker is
answered and ends the connection (codes other than 1000/1001 as an error);
closing sends a close frame and waits briefly for the broker's.

The upgrade request offers the subprotocols ``v12.stomp``, ``v11.stomp`` and
``v10.stomp`` of the STOMP versions offered. A refused upgrade (any status but
101) is a :class:`~stompfast.ConnectError` carrying ``status_code``.
"""

from __future__ import annotations

import asyncio
import http
import threading
from typing import Any, Iterable, List, Optional

import anyio
from anyio.abc import ByteStream

from .errors import ConfigurationError, ConnectError

__all__ = [
    "MAX_MESSAGE_BYTES", "SUBPROTOCOLS", "WebSocketLayer", "WebSocketStream", "opening_request", "require_wsproto",
    "subprotocols", "ws_url",
]

#: STOMP version -> WebSocket subprotocol name (the STOMP 1.2 spec's registry)
SUBPROTOCOLS = {"1.2": "v12.stomp", "1.1": "v11.stomp", "1.0": "v10.stomp"}
#: the default cap on the payload of each WebSocket message (one frame) the client sends:
#: Artemis's default ``webSocketMaxFramePayloadLength``, beyond which it drops the connection
MAX_MESSAGE_BYTES = 65536
#: seconds ``aclose`` waits for the broker's close frame after sending ours
CLOSE_TIMEOUT = 1.0
_CLEAN_CLOSE = (1000, 1001)


def require_wsproto() -> Any:
    """Import wsproto, or explain how to install it (ConfigurationError)."""
    try:
        import wsproto
    except ImportError as exc:
        raise ConfigurationError(
            "ws:// and wss:// URLs need the wsproto package: pip install 'stompfast[ws]'"
        ) from exc
    return wsproto


def subprotocols(versions: Iterable[str]) -> List[str]:
    """The subprotocols to offer for ``versions``, highest version first."""
    offered = set(versions)
    return [SUBPROTOCOLS[v] for v in ("1.2", "1.1", "1.0") if v in offered]


def opening_request(host: str, port: int, path: str, protocols: List[str], tls: bool) -> Any:
    """A client wsproto connection and the bytes of its opening handshake: ``(connection, request)``."""
    wsproto = require_wsproto()
    from wsproto.events import Request

    default_port = 443 if tls else 80
    authority = f"[{host}]" if ":" in host else host
    if port != default_port:
        authority = f"{authority}:{port}"
    ws = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    return ws, ws.send(Request(host=authority, target=path, subprotocols=protocols))


def ws_url(host: str, port: int, path: str, tls: bool) -> str:
    """The ``ws://`` (``wss://`` with TLS) URL of the endpoint, as error messages name it."""
    authority = f"[{host}]" if ":" in host else host
    return f"{'wss' if tls else 'ws'}://{authority}:{port}{path}"



class _Handshake:
    """Feeds the upgrade response to wsproto; ``done`` once it was accepted (or raises)."""

    def __init__(self, ws: Any, url: str) -> None:
        self.ws = ws
        self.url = url
        self.accepted: Any = None
        self.refused: Any = None
        self.body = b""

    def feed(self, data: bytes) -> bool:
        from wsproto.events import AcceptConnection, RejectConnection, RejectData
        from wsproto.utilities import RemoteProtocolError as WSRemoteProtocolError

        try:
            self.ws.receive_data(data)
            for event in self.ws.events():
                if isinstance(event, AcceptConnection):
                    self.accepted = event
                    return True
                if isinstance(event, RejectConnection):
                    self.refused = event
                    if not event.has_body:
                        raise self.refused_error()
                elif isinstance(event, RejectData):
                    self.body += event.data
                    if event.body_finished or len(self.body) > 4096:
                        raise self.refused_error()
        except WSRemoteProtocolError as exc:
            raise ConnectError(f"WebSocket upgrade for {self.url} failed: {exc}") from exc
        # More to read: the rest of the response, or of its body
        return False

    def refused_error(self) -> ConnectError:
        status = self.refused.status_code
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        body = self.body[:200].decode("utf-8", "replace").strip()
        detail = f": {body}" if body else ""
        return ConnectError(
            f"WebSocket upgrade for {self.url} refused: HTTP {status} {phrase}{detail}"
            " (is the path right? RabbitMQ's Web-STOMP listens on /ws)",
            status_code=status,
        )

    def eof_error(self) -> ConnectError:
        # Refused, and closed before the end of the body
        if self.refused is not None:
            return self.refused_error()
        return ConnectError(f"{self.url} closed the connection during the WebSocket upgrade")


def _answer_close(conn: Any, event: Any) -> "tuple[bytes, Optional[str]]":
    """The reply to a CloseConnection event, and the error it means (None for a clean close)."""
    from wsproto.connection import ConnectionState
    from wsproto.events import CloseConnection

    state = conn.state
    # The broker closed: echo its code
    if state is ConnectionState.REMOTE_CLOSING:
        reply = conn.send(event.response())
        if event.code in _CLEAN_CLOSE:
            return reply, None
        reason = f" ({event.reason})" if event.reason else ""
        return reply, f"WebSocket closed by the broker with code {event.code}{reason}"
    # wsproto refused the broker's frames (invalid UTF-8...)
    if state is ConnectionState.OPEN:
        reply = conn.send(CloseConnection(code=event.code, reason=event.reason))
        hint = ""
        # RFC 6455: text messages must be UTF-8
        if event.code == 1007:
            hint = (
                "; the broker sent a body that is not UTF-8 in a text message (RabbitMQ:"
                " web_stomp.ws_frame = binary in rabbitmq.conf sends binary messages)"
            )
        return reply, f"invalid WebSocket data from the broker: {event.reason} (closed with code {event.code}){hint}"
    # The answer to our own close frame
    return b"", None


def _split(conn: Any, message: Any, data: bytes, cap: int) -> bytes:
    """``data`` as binary WebSocket messages of at most ``cap`` bytes each, ready to write at once."""
    # memoryview slices: wsproto copies each payload while masking it, so no copy here.
    # One write of the joined messages costs less than a write per message.
    view = memoryview(data)
    send = conn.send
    return b"".join([send(message(data=view[i:i + cap])) for i in range(0, len(view), cap)])


# -- asyncio -------------------------------------------------------------------------------


class WebSocketLayer(asyncio.Protocol):
    """asyncio protocol of the socket and transport of the ``_Protocol`` above it."""

    def __init__(
        self, inner: Any, ws: Any, request: bytes, url: str, loop: Any, max_message_bytes: int = MAX_MESSAGE_BYTES
    ) -> None:
        self._inner = inner
        self._max = max_message_bytes
        #: held by the layer's own writes (a pong, a close frame); the transport above holds it
        #: around the writes it makes (``write``), and a thread writing directly holds it too
        self.write_lock = threading.Lock()
        self._handshake: Optional[_Handshake] = _Handshake(ws, url)
        self._request = request
        # wsproto's Connection once the upgrade is accepted
        self._conn: Any = None
        self._raw: Any = None
        # We sent (or are about to send) a close frame
        self._closing = False
        # The inner protocol was told the connection ended
        self._lost = False
        # Result: AcceptConnection; exception: ConnectError
        self.opened = loop.create_future()
        # The broker's close frame, or the socket's end
        self.closed = loop.create_future()
        # a connect given up on (cancelled, timed out) must not leave "exception never retrieved"
        self.opened.add_done_callback(lambda f: f.cancelled() or f.exception())
        from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
        from wsproto.utilities import LocalProtocolError

        self._LocalProtocolError = LocalProtocolError
        self._BytesMessage, self._TextMessage = BytesMessage, TextMessage
        self._Ping, self._Close = Ping, CloseConnection

    # protocol side, called by the socket's transport

    def connection_made(self, transport: Any) -> None:
        self._raw = transport
        transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        conn = self._conn
        if conn is None:
            self._handshake_data(data)
            return
        if self._closing and conn.state.name == "CLOSED":
            # Bytes after the close handshake: nothing more to read
            return
        conn.receive_data(data)
        self._process(conn.events())

    def _handshake_data(self, data: bytes) -> None:
        handshake = self._handshake
        if handshake is None or self.opened.done():
            return
        try:
            if not handshake.feed(data):
                return
        except ConnectError as exc:
            self.opened.set_exception(exc)
            self._raw.close()
            return
        self._handshake = None
        self._conn = handshake.ws.connection
        self.opened.set_result(handshake.accepted)
        self._inner.connection_made(self)
        # Frames that came with the 101 response
        self._process(self._conn.events())

    def _process(self, events: Any) -> None:
        BytesMessage, TextMessage = self._BytesMessage, self._TextMessage
        inner = self._inner
        for event in events:
            kind = type(event)
            if kind is BytesMessage:
                if event.data and not self._lost:
                    inner.data_received(bytes(event.data))
            elif kind is TextMessage:
                if event.data and not self._lost:
                    inner.data_received(event.data.encode("utf-8"))
            elif kind is self._Ping:
                with self.write_lock:
                    if not self._closing and not self._raw.is_closing():
                        self._raw.write(self._conn.send(event.response()))
            elif kind is self._Close:
                self._on_close(event)
                return

    def _on_close(self, event: Any) -> None:
        with self.write_lock:
            reply, error = _answer_close(self._conn, event)
            if reply and not self._raw.is_closing():
                self._raw.write(reply)
            self._closing = True
        if not self.closed.done():
            self.closed.set_result(event)
        if error is not None:
            self._tell_lost(ConnectionError(error))
        self._raw.close()

    def _tell_lost(self, exc: Optional[BaseException]) -> None:
        if not self._lost:
            self._lost = True
            self._inner.connection_lost(exc)

    def eof_received(self) -> bool:
        if self._conn is None:
            if not self.opened.done():
                self.opened.set_exception(self._handshake.eof_error())  # type: ignore[union-attr]
            return False
        return bool(self._inner.eof_received())

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        if not self.opened.done():
            self.opened.set_exception(
                self._handshake.eof_error() if self._handshake is not None else ConnectError("connection lost")
            )
        if not self.closed.done():
            self.closed.set_result(None)
        if self._conn is not None:
            self._tell_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    # transport side, called by AsyncioTransport and the _Protocol

    def write(self, data: bytes) -> None:
        """(The transport above, holding ``write_lock``.) ``data`` as WebSocket messages, to the socket."""
        if self._closing:
            return
        if len(data) <= self._max:
            self._raw.write(self._conn.send(self._BytesMessage(data=data)))
            return
        self._raw.write(_split(self._conn, self._BytesMessage, data, self._max))

    def frame(self, data: bytes) -> Optional[bytes]:
        """(Holding ``write_lock``, any thread.) ``data`` as WebSocket messages' bytes; None once closing."""
        if self._closing:
            return None
        try:
            if len(data) <= self._max:
                return self._conn.send(self._BytesMessage(data=data))  # type: ignore[no-any-return]
            return _split(self._conn, self._BytesMessage, data, self._max)
        # The broker's close frame came in meanwhile: wsproto sends nothing more
        except self._LocalProtocolError:
            return None

    def write_raw(self, data: bytes) -> None:
        """(Holding ``write_lock``.) Socket bytes already framed (the rest of a thread's partial write)."""
        self._raw.write(data)

    def get_write_buffer_size(self) -> int:
        return int(self._raw.get_write_buffer_size())

    def is_closing(self) -> bool:
        return self._closing or self._raw.is_closing()

    def start_close(self) -> None:
        """Send our close frame (code 1000) unless a close is already under way."""
        with self.write_lock:
            if not self._closing and self._conn is not None and not self._raw.is_closing():
                self._closing = True
                try:
                    self._raw.write(self._conn.send(self._Close(code=1000)))
                except self._LocalProtocolError:
                    pass
            self._closing = True

    def close(self) -> None:
        self.start_close()
        self._raw.close()

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._raw.get_extra_info(name, default)


# -- anyio streams (trio) ------------------------------------------------------------------


class WebSocketStream(ByteStream):
    """An anyio byte stream of STOMP bytes over a WebSocket on ``stream``."""

    def __init__(self, stream: ByteStream, conn: Any, url: str, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage

        self._BytesMessage, self._TextMessage = BytesMessage, TextMessage
        self._Ping, self._Close = Ping, CloseConnection
        self._stream = stream
        self._conn = conn
        self.url = url
        self._max = max_message_bytes
        # What the broker accepted (v12.stomp...)
        self.subprotocol: Optional[str] = None
        self._pending: List[bytes] = []
        self._eof = False
        self._error: Optional[str] = None
        self._send_lock = anyio.Lock()
        self._receiving = False
        self._closed = False

    @classmethod
    async def connect(
        cls,
        stream: ByteStream,
        host: str,
        port: int,
        path: str,
        protocols: List[str],
        tls: bool,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> "WebSocketStream":
        """Upgrade ``stream``; raises ConnectError when the server refuses."""
        url = ws_url(host, port, path, tls)
        ws, request = opening_request(host, port, path, protocols, tls)
        handshake = _Handshake(ws, url)
        await stream.send(request)
        while True:
            try:
                data = await stream.receive(65536)
            except anyio.EndOfStream:
                raise handshake.eof_error() from None
            if handshake.feed(data):
                break
        self = cls(stream, ws.connection, url, max_message_bytes)
        self.subprotocol = handshake.accepted.subprotocol
        self._handle(list(ws.connection.events()))
        return self

    def _handle(self, events: List[Any]) -> List[bytes]:
        """Sort events: payload kept in ``_pending``; returns the pongs to send."""
        replies = []
        for event in events:
            kind = type(event)
            if kind is self._BytesMessage:
                if event.data:
                    self._pending.append(bytes(event.data))
            elif kind is self._TextMessage:
                if event.data:
                    self._pending.append(event.data.encode("utf-8"))
            elif kind is self._Ping:
                if self._conn.state.name == "OPEN":
                    replies.append(self._conn.send(event.response()))
            elif kind is self._Close:
                reply, self._error = _answer_close(self._conn, event)
                if reply:
                    replies.append(reply)
                self._eof = True
                break
        return replies

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while not self._pending:
            if self._eof:
                if self._error is not None:
                    raise anyio.BrokenResourceError(self._error)
                raise anyio.EndOfStream
            self._receiving = True
            try:
                data = await self._stream.receive(max_bytes)
            finally:
                self._receiving = False
            self._conn.receive_data(data)
            for reply in self._handle(list(self._conn.events())):
                await self._send_raw(reply)
        pending = self._pending
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        return data

    async def _send_raw(self, data: bytes) -> None:
        async with self._send_lock:
            await self._stream.send(data)

    async def send(self, item: bytes) -> None:
        if self._conn.state.name != "OPEN":
            raise anyio.BrokenResourceError(self._error or "the WebSocket is closed")
        if len(item) <= self._max:
            await self._send_raw(self._conn.send(self._BytesMessage(data=item)))
        else:
            await self._send_raw(_split(self._conn, self._BytesMessage, item, self._max))

    async def send_eof(self) -> None:
        raise NotImplementedError("a WebSocket cannot be half-closed")

    async def aclose(self) -> None:
        """Close handshake (bounded by CLOSE_TIMEOUT), then close the stream."""
        from wsproto.utilities import LocalProtocolError

        if self._closed:
            return
        self._closed = True
        try:
            with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
                if self._conn.state.name == "OPEN":
                    await self._send_raw(self._conn.send(self._Close(code=1000)))
                # wait for the broker's answer, unless another task is reading
                while not self._eof and not self._receiving and self._conn.state.name == "LOCAL_CLOSING":
                    data = await self._stream.receive(65536)
                    self._conn.receive_data(data)
                    self._handle(list(self._conn.events()))
        except (
            OSError,
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            # A reader task still unwinding: no polite close then
            anyio.BusyResourceError,
            # wsproto: the WebSocket is closed already
            LocalProtocolError,
        ):
            pass
        finally:
            await self._stream.aclose()

    @property
    def extra_attributes(self) -> Any:
        return self._stream.extra_attributes
