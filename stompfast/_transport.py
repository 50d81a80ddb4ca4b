"""The anyio edge: open a byte stream to a broker, and translate what goes wrong.

Everything above this module sees only stompfast errors: an ``OSError`` while
connecting becomes :class:`~stompfast.ConnectError`, one on an open stream
:class:`~stompfast.ConnectionLostError`, always ``raise ... from exc``.
Cancellation passes through untouched.
"""

from __future__ import annotations

import socket
from typing import Optional

import anyio
from anyio.abc import ByteStream

from .errors import ConnectError, ConnectionLostError, ConnectTimeout

__all__ = ["READ_SIZE", "Transport", "open_transport"]

#: Bytes asked for per read: large reads hand many frames to the scanner at once.
READ_SIZE = 256 * 1024


class Transport:
    """A connected byte stream with errors mapped to stompfast's."""

    __slots__ = ("_stream", "peer", "closed")

    def __init__(self, stream: ByteStream, peer: str) -> None:
        self._stream = stream
        self.peer = peer
        self.closed = False

    async def send(self, data: bytes) -> None:
        try:
            await self._stream.send(data)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ConnectionLostError(f"connection to {self.peer} lost while sending: {_describe(exc)}") from exc

    async def receive(self, max_bytes: int = READ_SIZE) -> bytes:
        """The next bytes from the broker; ``b""`` when it closed the connection."""
        try:
            return await self._stream.receive(max_bytes)
        except anyio.EndOfStream:
            return b""
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ConnectionLostError(f"connection to {self.peer} lost while reading: {_describe(exc)}") from exc

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await self._stream.aclose()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass


async def open_transport(host: str, port: int, *, timeout: Optional[float] = None) -> Transport:
    """Open a TCP connection (TCP_NODELAY on: STOMP frames are small and latency matters).

    Raises:
        ConnectError: refused, unreachable or unresolvable.
        ConnectTimeout: not open within ``timeout`` (a ConnectError too).
    """
    peer = f"{host}:{port}"
    try:
        with anyio.fail_after(timeout):
            stream = await anyio.connect_tcp(host, port)
    except TimeoutError as exc:
        raise ConnectTimeout(f"could not connect to {peer}: no answer within {timeout:g} s") from exc
    except OSError as exc:
        raise ConnectError(f"could not connect to {peer}: {_describe(exc)}") from exc
    try:
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, anyio.TypedAttributeLookupError):  # not a TCP socket (tests may pass others)
        pass
    return Transport(stream, peer)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
