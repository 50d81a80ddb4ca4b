"""A WebSocket server (wsproto, anyio) in front of the in-process broker, for hermetic WS tests.

``async with WSBridge(broker, ...) as bridge:`` listens on an ephemeral loopback
port; every WebSocket connection is relayed to ``broker`` over TCP. What the
broker sends can be reshaped on the way (``split``: messages of at most that
many bytes, cutting STOMP frames apart; ``fragment``: each message sent as
WebSocket frames of at most that many bytes; ``text``: text messages when the
bytes are UTF-8), and the bridge can ping the client, refuse the upgrade or
close with a code. It records what the client did (``requests``,
``client_messages``, ``client_frames``: the payload size of every data frame
the client sent, ``pongs``, ``client_close_codes``). ``max_frame``: a client
data frame with a longer payload drops the TCP connection without a close
frame, as Artemis does beyond its ``webSocketMaxFramePayloadLength``
(``dropped`` counts them).
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import anyio
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSListener
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)


class WSBridge:
    def __init__(
        self,
        broker: Any,
        *,
        path: str = "/ws",
        split: Optional[int] = None,
        fragment: Optional[int] = None,
        text: bool = False,
        ping_every: Optional[float] = None,
        refuse: Optional[int] = None,
        ssl_context: Any = None,
        subprotocol: bool = True,
        max_frame: Optional[int] = None,
    ) -> None:
        self.broker = broker
        self.path = path
        self.split = split
        self.fragment = fragment
        self.text = text
        self.ping_every = ping_every
        self.refuse = refuse
        self.ssl_context = ssl_context
        self.subprotocol = subprotocol
        self.max_frame = max_frame
        self.requests: List[Request] = []
        self.client_messages: List[Tuple[str, int]] = []  # ("bytes"|"text", length)
        self.client_frames: List[int] = []  # payload bytes of each data frame from the client
        self.dropped = 0
        self.pings_sent: List[bytes] = []
        self.pongs: List[bytes] = []
        self.client_close_codes: List[int] = []
        self.closed_connections = 0
        self._conns: List[Any] = []
        self._tg: Any = None
        self._listener: Any = None

    async def __aenter__(self) -> "WSBridge":
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(SocketAttribute.local_port)
        if self.ssl_context is not None:
            listener = TLSListener(listener, self.ssl_context, standard_compatible=False)
        self._listener = listener
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(listener.serve, self._serve)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        with anyio.move_on_after(2, shield=True):
            await self._listener.aclose()

    def url(self, path: Optional[str] = None) -> str:
        scheme = "wss" if self.ssl_context is not None else "ws"
        return f"{scheme}://127.0.0.1:{self.port}{self.path if path is None else path}"

    def close_all(self, code: int, reason: str = "") -> None:
        """Close every client connection with a close frame of ``code``."""
        for conn in self._conns:
            conn.close_code = (code, reason)
            conn.wake.set()

    async def _serve(self, stream: Any) -> None:
        ws = WSConnection(ConnectionType.SERVER)
        lock = anyio.Lock()

        async def send(data: bytes) -> None:
            async with lock:
                await stream.send(data)

        try:
            request = None
            while request is None:
                ws.receive_data(await stream.receive())
                for event in ws.events():
                    if isinstance(event, Request):
                        request = event
            self.requests.append(request)
            if self.refuse or request.target != self.path:
                status = self.refuse or 404
                body = b"no WebSocket endpoint here"
                await send(ws.send(RejectConnection(
                    status_code=status, headers=[(b"content-length", str(len(body)).encode())], has_body=True)))
                await send(ws.send(RejectData(data=body)))
                return
            chosen = request.subprotocols[0] if (self.subprotocol and request.subprotocols) else None
            await send(ws.send(AcceptConnection(subprotocol=chosen)))
            broker = await anyio.connect_tcp("127.0.0.1", self.broker.port)
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            await anyio.aclose_forcefully(stream)
            return
        conn = _Conn()
        self._conns.append(conn)
        try:
            async with anyio.create_task_group() as tg:
                async def client_to_broker() -> None:
                    # wsproto hands a frame's payload on in pieces as it arrives
                    # (frame_finished on the last one): their sum is the frame's size
                    frame = 0
                    try:
                        while True:
                            ws.receive_data(await stream.receive())
                            for event in ws.events():
                                if isinstance(event, (BytesMessage, TextMessage)):
                                    frame += len(event.data)
                                    if self.max_frame is not None and frame > self.max_frame:
                                        self.dropped += 1
                                        await anyio.aclose_forcefully(stream)
                                        tg.cancel_scope.cancel()
                                        return
                                    if event.frame_finished:
                                        self.client_frames.append(frame)
                                        frame = 0
                                if isinstance(event, BytesMessage):
                                    self.client_messages.append(("bytes", len(event.data)))
                                    await broker.send(bytes(event.data))
                                elif isinstance(event, TextMessage):
                                    self.client_messages.append(("text", len(event.data)))
                                    await broker.send(event.data.encode())
                                elif isinstance(event, Pong):
                                    self.pongs.append(bytes(event.payload))
                                elif isinstance(event, Ping):
                                    await send(ws.send(event.response()))
                                elif isinstance(event, CloseConnection):
                                    self.client_close_codes.append(event.code)
                                    if ws.state is ConnectionState.REMOTE_CLOSING:
                                        await send(ws.send(event.response()))
                                    tg.cancel_scope.cancel()
                                    return
                    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                        tg.cancel_scope.cancel()

                async def broker_to_client() -> None:
                    try:
                        while True:
                            data = await broker.receive()
                            step = self.split or len(data)
                            for i in range(0, len(data), step):
                                await send(self._message(ws, data[i:i + step]))
                    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                        if ws.state is ConnectionState.OPEN:
                            with anyio.move_on_after(1):
                                await send(ws.send(CloseConnection(code=1000)))
                        tg.cancel_scope.cancel()

                async def pinger() -> None:
                    n = 0
                    while self.ping_every:
                        await anyio.sleep(self.ping_every)
                        if ws.state is not ConnectionState.OPEN:
                            # a close under way: wsproto sends no more pings
                            return
                        n += 1
                        payload = b"ping-%d" % n
                        self.pings_sent.append(payload)
                        await send(ws.send(Ping(payload=payload)))

                async def closer() -> None:
                    await conn.wake.wait()
                    code, reason = conn.close_code
                    if ws.state is ConnectionState.OPEN:
                        await send(ws.send(CloseConnection(code=code, reason=reason)))

                tg.start_soon(client_to_broker)
                tg.start_soon(broker_to_client)
                tg.start_soon(pinger)
                tg.start_soon(closer)
        finally:
            self.closed_connections += 1
            self._conns.remove(conn)
            await anyio.aclose_forcefully(broker)
            await anyio.aclose_forcefully(stream)

    def _message(self, ws: WSConnection, data: bytes) -> bytes:
        payload: Any = data
        kind: Any = BytesMessage
        if self.text:
            try:
                payload, kind = data.decode("utf-8"), TextMessage
            except UnicodeDecodeError:
                pass
        if not self.fragment:
            return ws.send(kind(data=payload))
        out = b""
        step = self.fragment
        for i in range(0, len(payload), step):
            last = i + step >= len(payload)
            out += ws.send(kind(data=payload[i:i + step], message_finished=last))
        return out


class _Conn:
    def __init__(self) -> None:
        self.wake = anyio.Event()
        self.close_code: Tuple[int, str] = (1000, "")
