"""The I/O edge: open a byte stream to a broker, and translate what goes wrong.

Everything above this module sees only stompfast errors: an ``OSError`` while
connecting becomes :class:`~stompfast.ConnectError`, one on an open stream
:class:`~stompfast.ConnectionLostError`, always ``raise ... from exc``.
Cancellation passes through untouched.

Two implementations of one small interface (``send``, ``receive``, ``aclose``):

* on asyncio (and uvloop), :class:`AsyncioTransport` drives an
  ``asyncio.Protocol`` directly. anyio's asyncio stream pauses and resumes
  reading around every ``receive()`` (two ``epoll_ctl`` calls per read) and ends
  every ``send()`` with a shielded checkpoint; for a STOMP round trip (SEND,
  then wait for its RECEIPT) those were the largest costs. Here received
  chunks queue up in the protocol (reading pauses only when more than
  ``READ_SIZE * 4`` bytes wait), and ``send`` is ``transport.write`` (it waits
  only while asyncio says the write buffer is full);
* elsewhere (trio), :class:`Transport` wraps the anyio byte stream; for plain
  TCP :class:`TrioTransport` writes to the socket itself, under a lock another
  thread may share (the blocking client's receipted sends and acks).

TLS: on asyncio the same protocol runs under ``loop.create_connection(ssl=ctx,
server_hostname=...)`` (push mode works unchanged); on trio the anyio stream is
a ``TLSStream`` (``tls_standard_compatible=False``: brokers often close without
a TLS close_notify). An ``ssl.SSLError`` during the handshake (a refused
certificate, a host name mismatch, a plain-TCP port) becomes
:class:`~stompfast.TLSError` (``_tls.py`` says which, and builds the client's
SSL context). WebSocket (``_websocket``) is a layer between the
socket and these same classes; the plain TCP path is not touched by either.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import sys
import threading
from collections import deque
from typing import Any, Callable, Deque, Optional, Protocol

import anyio
import sniffio
from anyio.abc import ByteStream

from ._common import describe_error
from ._tls import tls_error
from .errors import ConnectError, ConnectionLostError, ConnectTimeout, TLSError

# describe_error is _common's; it is listed here too because the transports' callers (the
# client) take it from the module whose errors it describes.
__all__ = [
    "READ_SIZE", "AsyncioTransport", "PushTransport", "StompTransport", "Transport", "WebSocketSpec",
    "describe_error", "open_transport",
]

#: Bytes asked for per read: large reads hand many frames to the scanner at once.
READ_SIZE = 256 * 1024


class StompTransport(Protocol):
    """What the client needs of a connection: the pull interface every transport has.

    ``receive`` returns ``b""`` at EOF; ``send`` waits while the socket is full;
    ``try_write`` writes at once if that needs no wait (False: nothing written,
    use ``send``); every I/O failure is a :class:`~stompfast.ConnectionLostError`.
    """

    peer: str
    closed: bool

    async def receive(self, max_bytes: int = ...) -> bytes: ...

    async def send(self, data: bytes) -> None: ...

    def try_write(self, data: bytes) -> bool: ...

    async def aclose(self) -> None: ...


class PushTransport(StompTransport, Protocol):
    """A transport that can also call the client back with each chunk (asyncio: no reader task).

    The client chooses push or pull once per connection, when it starts reading
    (``AsyncioTransport`` is the push one), never per read.
    """

    direct_ok: bool

    def start_push(self, on_data: Callable[[bytes], Any], on_eof: Callable[[Optional[BaseException]], Any]) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close_now(self) -> None: ...

    def write_from_thread(self, data: bytes) -> bool: ...


class Transport:
    """A connected byte stream with errors mapped to stompfast's (the pull transport: trio, anyio streams)."""

    __slots__ = ("_stream", "peer", "closed")

    def __init__(self, stream: ByteStream, peer: str) -> None:
        self._stream = stream
        self.peer = peer
        self.closed = False

    def try_write(self, data: bytes) -> bool:
        """Writes on an anyio stream always go through ``send`` (the client's writer task)."""
        return False

    async def send(self, data: bytes) -> None:
        try:
            await self._stream.send(data)
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ConnectionLostError(f"connection to {self.peer} lost while sending: {describe_error(exc)}") from exc

    async def receive(self, max_bytes: int = READ_SIZE) -> bytes:
        """The next bytes from the broker; ``b""`` when it closed the connection."""
        try:
            return await self._stream.receive(max_bytes)
        except anyio.EndOfStream:
            return b""
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise ConnectionLostError(f"connection to {self.peer} lost while reading: {describe_error(exc)}") from exc

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await self._stream.aclose()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass


class TrioTransport(Transport):
    """Plain TCP on trio: :class:`Transport` whose writes another thread may share (:meth:`write_from_thread`).

    The event loop's writes go to the (non-blocking) socket under a lock, as a
    thread's do, and whatever the kernel did not take waits in ``_tail``, which
    every writer sends before its own bytes: so frames never interleave and a
    thread writes only when nothing is pending. Reads stay on the anyio stream.
    """

    __slots__ = ("_sock", "_lock", "_tail", "_token", "_waiting", "_lowlevel", "direct_ok")

    def __init__(self, stream: ByteStream, peer: str) -> None:
        super().__init__(stream, peer)
        self._sock: socket.socket = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        # Every write, the loop's and a thread's, holds this lock; a thread never waits in it
        # for more than one non-blocking send.
        self._lock = threading.Lock()
        # Bytes the kernel did not take yet: they go out before anything written after them
        self._tail: Optional[bytes] = None
        # (trio is an optional extra, imported where it runs: never at stompfast's import)
        import trio

        self._token = trio.lowlevel.current_trio_token()
        self._lowlevel = trio.lowlevel
        # Held by the one task waiting for the socket to take the tail (trio allows one waiter per fd)
        self._waiting = trio.Lock()
        #: another thread may write through :meth:`write_from_thread`
        self.direct_ok = True

    def _write_some(self, data: bytes) -> bool:
        """(Under the lock.) Write the tail, then ``data``, as far as the kernel takes them; True when all went."""
        if self._tail is not None:
            data = self._tail + data
            self._tail = None
        if not data:
            return True
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent < len(data):
            self._tail = data[sent:]
            return False
        return True

    async def send(self, data: bytes) -> None:
        """Write ``data`` after anything pending; wait for the socket while the kernel's buffer is full."""
        lowlevel = self._lowlevel
        await lowlevel.checkpoint_if_cancelled()
        if not self._write(data):
            # Ours are at the end of the tail now; every writer (this task, another, a
            # thread's flush) writes the tail first, so they are out once it is empty, and
            # a cancelled wait leaves no torn frame. One task waits for the socket at a time.
            import trio

            async with self._waiting:
                while not self._write(b""):
                    try:
                        await lowlevel.wait_writable(self._sock)
                    except (trio.ClosedResourceError, OSError) as exc:
                        raise ConnectionLostError(
                            f"connection to {self.peer} lost while sending: {describe_error(exc)}"
                        ) from exc
        await lowlevel.cancel_shielded_checkpoint()

    def _write(self, data: bytes) -> bool:
        """(In trio.) :meth:`_write_some` under the lock; True when nothing is left unwritten."""
        with self._lock:
            if self.closed:
                raise ConnectionLostError(f"connection to {self.peer} lost while sending: the connection is closed")
            try:
                return self._write_some(data)
            except OSError as exc:
                raise ConnectionLostError(
                    f"connection to {self.peer} lost while sending: {describe_error(exc)}"
                ) from exc

    def write_from_thread(self, data: bytes) -> bool:
        """(Any thread but trio's.) Write ``data`` to the socket now; False (nothing written) when something is pending.

        A partial write leaves the rest as the tail and hands its flushing to
        trio (a system task), so the caller does not wait for the socket.
        """
        with self._lock:
            if self.closed or self._tail is not None:
                return False
            try:
                done = self._write_some(data)
            except OSError:
                # Trio's reader sees the failure on its side
                return False
        if not done:
            import trio

            try:
                self._token.run_sync_soon(self._start_flush)
            # trio has ended: the connection with it, whose reader reported that
            except trio.RunFinishedError:
                pass
        return True

    def _start_flush(self) -> None:
        """(In trio.) Start the task that writes a thread's tail, unless trio is already winding down."""
        import trio

        try:
            trio.lowlevel.spawn_system_task(self._flush_tail)
        # The run's end closes the system nursery; the connection ends with it
        except RuntimeError:
            pass

    async def _flush_tail(self) -> None:
        """(A trio system task.) Write what a thread's partial write left; the reader reports a lost connection."""
        # A system task must not raise: cancellation ends it quietly, a lost connection is the reader's to report
        try:
            await self.send(b"")
        except ConnectionLostError:
            pass

    async def aclose(self) -> None:
        if self.closed:
            return
        with self._lock:
            # No thread writes after this; one writing now finishes first
            self.closed = True
        try:
            await self._stream.aclose()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass


class _Protocol:
    """The asyncio protocol behind :class:`AsyncioTransport` (asyncio.Protocol's methods)."""

    def __init__(self) -> None:
        self.chunks: Deque[bytes] = deque()
        self.size = 0
        self.paused_reading = False
        self.eof = False
        self.error: Optional[BaseException] = None
        self.transport: Any = None
        # Future a receive() waits on
        self.reader: Any = None
        # Future a send() waits on while writing is paused
        self.drain: Any = None
        # Push mode: called with each chunk from data_received
        self.on_data: Any = None
        # Push mode: called once with the error (or None) at EOF
        self.on_eof: Any = None
        # Called once when the connection is lost (the transport's own clean-up)
        self.on_lost: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.on_data is not None:
            self.on_data(data)
            return
        self.chunks.append(data)
        self.size += len(data)
        if self.size > READ_SIZE * 4 and not self.paused_reading:
            self.paused_reading = True
            self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake_reader()
        self._push_eof()
        # Close our side too
        return False

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self.eof = True
        self.error = exc
        on_lost, self.on_lost = self.on_lost, None
        if on_lost is not None:
            on_lost()
        self._wake_reader()
        self._push_eof()
        if self.drain is not None and not self.drain.done():
            self.drain.set_result(None)

    def pause_writing(self) -> None:
        if self.drain is None or self.drain.done():
            self.drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.drain is not None and not self.drain.done():
            self.drain.set_result(None)

    def _push_eof(self) -> None:
        on_eof, self.on_eof = self.on_eof, None
        if on_eof is not None:
            self.on_data = None
            on_eof(self.error)

    def _wake_reader(self) -> None:
        if self.reader is not None and not self.reader.done():
            self.reader.set_result(None)


class _BufferedProtocol(_Protocol, asyncio.BufferedProtocol):
    """:class:`_Protocol` as an ``asyncio.BufferedProtocol``: the loop reads into one reused buffer.

    A plain protocol gets a fresh ``bytes`` per read, which asyncio allocates at
    the full read size (256 KiB) and then shrinks: an ``mmap``, an ``mremap`` and
    a ``munmap`` per read, plus page faults on big reads. Here the loop calls
    ``recv_into`` on one preallocated buffer. In push mode the received bytes go to
    ``on_data`` as a memoryview valid for that call only (both scanners copy what
    they keep; the view is released afterwards, so a leak would fail loudly rather
    than read bytes the next read overwrote); queued chunks are copied to bytes.
    """

    def __init__(self) -> None:
        super().__init__()
        self._view = memoryview(bytearray(READ_SIZE))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        on_data = self.on_data
        if on_data is None:
            self.data_received(bytes(self._view[:nbytes]))
            return
        view = self._view[:nbytes]
        try:
            on_data(view)
        finally:
            view.release()


class AsyncioTransport:
    """A connected asyncio transport with the interface of :class:`Transport`."""

    __slots__ = ("_transport", "_protocol", "peer", "closed", "direct_ok", "_lock", "_direct", "_tail", "_loop")

    def __init__(self, transport: Any, protocol: _Protocol, peer: str, direct_ok: bool = False) -> None:
        self._transport = transport
        self._protocol = protocol
        self.peer = peer
        self.closed = False
        #: another thread may write through :meth:`write_from_thread` (plain TCP, the stock loop or uvloop)
        self.direct_ok = direct_ok
        # Every write, the loop's and a thread's, holds this lock, so their bytes
        # never interleave; a thread's partial write leaves its rest in _tail,
        # which goes out before anything written after it.
        self._lock = threading.Lock()
        # A dup of the socket, for threads
        self._direct: Optional[socket.socket] = None
        self._tail: Optional[bytes] = None
        self._loop: Any = None
        if direct_ok:
            self._loop = asyncio.get_running_loop()
            protocol.on_lost = self._close_direct

    def try_write(self, data: bytes) -> bool:
        """Write ``data`` now if the transport takes it without waiting; False leaves it to ``send``."""
        protocol = self._protocol
        if protocol.eof or self._transport.is_closing() or (protocol.drain is not None and not protocol.drain.done()):
            return False
        with self._lock:
            if self._tail is not None:
                self._write_tail()
            self._transport.write(data)
        return True

    async def send(self, data: bytes) -> None:
        protocol = self._protocol
        if protocol.eof or self._transport.is_closing():
            raise ConnectionLostError(f"connection to {self.peer} lost while sending: {describe_error(protocol.error)}")
        with self._lock:
            if self._tail is not None:
                self._write_tail()
            self._transport.write(data)
        drain = protocol.drain
        if drain is not None and not drain.done():
            await drain

    async def receive(self, max_bytes: int = READ_SIZE) -> bytes:
        """The next bytes from the broker (everything queued); ``b""`` when it closed the connection."""
        protocol = self._protocol
        while not protocol.chunks:
            if protocol.eof:
                if protocol.error is not None:
                    raise ConnectionLostError(
                        f"connection to {self.peer} lost while reading: {describe_error(protocol.error)}"
                    ) from protocol.error
                return b""
            protocol.reader = asyncio.get_running_loop().create_future()
            try:
                await protocol.reader
            finally:
                protocol.reader = None
        chunks = protocol.chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join([chunks.popleft() for _ in range(len(chunks))])
        protocol.size = 0
        if protocol.paused_reading:
            protocol.paused_reading = False
            self._transport.resume_reading()
        return data

    def start_push(self, on_data: Any, on_eof: Any) -> None:
        """Hand every received chunk to ``on_data`` from ``data_received`` itself.

        No reader task: the bytes are scanned and dispatched in the event loop's
        own callback, which saves a task wake-up per read. ``on_eof(error)`` is
        called once when the stream ends (``error`` None for a clean close).
        Chunks received before the switch are delivered first.
        """
        protocol = self._protocol
        chunks = protocol.chunks
        data = b"".join(chunks) if chunks else b""
        chunks.clear()
        protocol.size = 0
        if protocol.paused_reading:
            protocol.paused_reading = False
            self._transport.resume_reading()
        eof = protocol.eof
        if not eof:
            protocol.on_data = on_data
            protocol.on_eof = on_eof
        if data:
            on_data(data)
        if eof:
            on_eof(protocol.error)

    def pause_reading(self) -> None:
        if not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if not self._transport.is_closing():
            self._transport.resume_reading()

    def write_from_thread(self, data: bytes) -> bool:
        """(Any thread but the loop's.) Write ``data`` to the socket now; False when it cannot be done safely.

        Only while asyncio holds nothing unwritten (its buffer empty, writing not
        paused) and no earlier thread write left a tail: then these bytes are the
        next on the wire. A partial write keeps the rest as the tail, handed to
        the loop at once and written before anything else. False (nothing was
        written) leaves the frame to the loop.
        """
        protocol = self._protocol
        with self._lock:
            transport = self._transport
            if (
                self.closed
                or self._tail is not None
                or protocol.eof
                or transport.is_closing()
                or transport.get_write_buffer_size()
                or (protocol.drain is not None and not protocol.drain.done())
            ):
                return False
            sock = self._direct
            if sock is None:
                try:
                    sock = self._direct = socket.socket(fileno=os.dup(transport.get_extra_info("socket").fileno()))
                # A platform whose sockets are not file descriptors
                except OSError:
                    self.direct_ok = False
                    return False
            wire = self._on_the_wire(data)
            if wire is None:
                return False
            try:
                sent = sock.send(wire)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError:
                # The loop sees the failure on its side
                return False
            if sent < len(wire):
                self._tail = wire[sent:]
                self._loop.call_soon_threadsafe(self._flush_tail)
            return True

    def _on_the_wire(self, data: bytes) -> Optional[bytes]:
        """(Under the lock.) The bytes ``data`` is on the socket (None: not writable now).

        ``data`` itself here; the WebSocket transport frames it.
        """
        return data

    def _write_tail(self) -> None:
        """(Under the lock.) Hand what a thread's partial write left to the loop's transport, ahead of anything else."""
        tail, self._tail = self._tail, None
        if tail is not None:
            self._transport.write(tail)

    def _flush_tail(self) -> None:
        """(In the loop.) Write what a thread's partial write left, unless a loop write took it already."""
        with self._lock:
            if not self._transport.is_closing():
                self._write_tail()

    def _close_direct(self) -> None:
        """Close the threads' duplicate of the socket (else it would hold the connection open)."""
        with self._lock:
            sock, self._direct = self._direct, None
        if sock is not None:
            sock.close()

    def close_now(self) -> None:
        """Close without waiting (push mode, from a callback); no callback is made after this."""
        self.closed = True
        self._protocol.on_data = self._protocol.on_eof = None
        self._close_direct()
        self._transport.close()

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._close_direct()
        self._transport.close()


class WebSocketAsyncioTransport(AsyncioTransport):
    """:class:`AsyncioTransport` over a :class:`~stompfast._websocket.WebSocketLayer`: closes politely.

    A thread's direct write is framed (masked) by the layer under the transport's
    lock, which the layer's own writes (a pong, a close frame) hold too; a
    partial write's rest is socket bytes, written past the layer.
    """

    __slots__ = ()

    def __init__(self, layer: Any, protocol: _Protocol, peer: str, direct_ok: bool = False) -> None:
        super().__init__(layer, protocol, peer, direct_ok)
        layer.write_lock = self._lock

    def _on_the_wire(self, data: bytes) -> Optional[bytes]:
        return self._transport.frame(data)  # type: ignore[no-any-return]

    def _write_tail(self) -> None:
        tail, self._tail = self._tail, None
        if tail is not None:
            self._transport.write_raw(tail)

    async def aclose(self) -> None:
        """Send a close frame, wait for the broker's (at most CLOSE_TIMEOUT), close the socket."""
        if self.closed:
            return
        self.closed = True
        from ._websocket import CLOSE_TIMEOUT

        layer = self._transport
        layer.start_close()
        if not layer.closed.done():
            with anyio.move_on_after(CLOSE_TIMEOUT):
                await layer.closed
        layer.close()


class WebSocketSpec:
    """What the WebSocket upgrade request asks for (the HTTP path, the subprotocols), and the cap on sent messages."""

    __slots__ = ("path", "subprotocols", "max_message_bytes")

    def __init__(self, path: str, subprotocols: "list[str]", max_message_bytes: int = 65536) -> None:
        self.path = path
        self.subprotocols = subprotocols
        #: payload bytes per WebSocket message (one frame) sent at most: longer writes are split
        self.max_message_bytes = max_message_bytes


async def _open_asyncio(
    host: str, port: int, peer: str, ssl_context: Optional[ssl.SSLContext], server_hostname: Optional[str]
) -> AsyncioTransport:
    loop = asyncio.get_running_loop()
    if ssl_context is None:
        transport, protocol = await loop.create_connection(_BufferedProtocol, host, port)
    else:
        transport, protocol = await loop.create_connection(
            _BufferedProtocol, host, port, ssl=ssl_context, server_hostname=server_hostname or host
        )
    # Threads may write a plain TCP socket directly (the blocking client's receipted
    # sends and acks) where the loop's transport writes to the kernel in its write()
    # call or keeps the unwritten bytes counted in get_write_buffer_size() until
    # the kernel has them: the stock selector loop and uvloop. A TLS transport
    # keeps its own state (the SSL object), which only the loop may touch.
    direct_ok = ssl_context is None and _writes_through(loop)
    return AsyncioTransport(transport, protocol, peer, direct_ok)


def _writes_through(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop``'s TCP transports are safe for :meth:`AsyncioTransport.write_from_thread`.

    The stock selector loop, and uvloop: its ``write()`` tries the socket at
    once and counts what the kernel did not take (its own buffer, then libuv's
    write queue) until it is written, so an empty write buffer seen under the
    transport's lock means every byte handed to it is on the wire. Other loops
    (the proactor, unknown ones) are left to write for themselves.
    """
    if isinstance(loop, asyncio.selector_events.BaseSelectorEventLoop):
        return True
    uvloop = sys.modules.get("uvloop")
    return uvloop is not None and isinstance(loop, uvloop.Loop)


async def _open_asyncio_ws(
    host: str,
    port: int,
    peer: str,
    ssl_context: Optional[ssl.SSLContext],
    server_hostname: Optional[str],
    ws: WebSocketSpec,
) -> AsyncioTransport:
    from ._websocket import WebSocketLayer, opening_request, ws_url

    loop = asyncio.get_running_loop()
    tls = ssl_context is not None
    wsconn, request = opening_request(host, port, ws.path, ws.subprotocols, tls)
    protocol = _Protocol()
    layer = WebSocketLayer(protocol, wsconn, request, ws_url(host, port, ws.path, tls), loop, ws.max_message_bytes)
    kwargs: Any = {"ssl": ssl_context, "server_hostname": server_hostname or host} if tls else {}
    raw, _ = await loop.create_connection(lambda: layer, host, port, **kwargs)
    try:
        await layer.opened
    except BaseException:
        raw.abort()
        raise
    # Over plain TCP a thread may write too (framed by the layer): as _open_asyncio says
    return WebSocketAsyncioTransport(layer, protocol, peer, direct_ok=not tls and _writes_through(loop))


async def open_transport(
    host: str,
    port: int,
    *,
    timeout: Optional[float] = None,
    ssl_context: Optional[ssl.SSLContext] = None,
    server_hostname: Optional[str] = None,
    websocket: Optional[WebSocketSpec] = None,
) -> "Transport | AsyncioTransport":
    """Open a TCP connection (TCP_NODELAY on: STOMP frames are small and latency matters).

    With ``ssl_context``, TLS on top (SNI and the certificate check use
    ``server_hostname``, by default ``host``); with ``websocket``, a WebSocket
    upgrade on top of that.

    Raises:
        ConnectError: refused, unreachable or unresolvable; WebSocket upgrade
            refused (``status_code`` attribute).
        TLSError: the TLS handshake failed (a ConnectError too).
        ConnectTimeout: not open within ``timeout`` (a ConnectError too).
    """
    peer = f"{host}:{port}"
    if sniffio.current_async_library() == "asyncio":
        try:
            with anyio.fail_after(timeout):
                # asyncio turns TCP_NODELAY on for every TCP transport it makes
                if websocket is not None:
                    return await _open_asyncio_ws(host, port, peer, ssl_context, server_hostname, websocket)
                return await _open_asyncio(host, port, peer, ssl_context, server_hostname)
        # Ours (a refused WebSocket upgrade): it is an OSError too
        except ConnectError:
            raise
        except TimeoutError as exc:
            raise ConnectTimeout(f"could not connect to {peer}: no answer within {timeout:g} s") from exc
        except ssl.SSLError as exc:
            raise tls_error(peer, exc, server_hostname or host) from exc
        except OSError as exc:
            if ssl_context is not None and isinstance(exc, ConnectionResetError):
                raise TLSError(
                    f"TLS handshake with {peer} failed: the connection was reset (is this a TLS port?)"
                ) from exc
            raise ConnectError(f"could not connect to {peer}: {describe_error(exc)}") from exc
    try:
        with anyio.fail_after(timeout):
            if ssl_context is None:
                stream: Any = await anyio.connect_tcp(host, port)
            else:
                stream = await anyio.connect_tcp(
                    host,
                    port,
                    tls=True,
                    ssl_context=ssl_context,
                    tls_hostname=server_hostname or host,
                    tls_standard_compatible=False,
                )
            _nodelay(stream)
            if websocket is not None:
                from ._websocket import WebSocketStream

                try:
                    stream = await WebSocketStream.connect(
                        stream,
                        host,
                        port,
                        websocket.path,
                        websocket.subprotocols,
                        ssl_context is not None,
                        websocket.max_message_bytes,
                    )
                except BaseException:
                    await anyio.aclose_forcefully(stream)
                    raise
    except ConnectError:
        raise
    except TimeoutError as exc:
        raise ConnectTimeout(f"could not connect to {peer}: no answer within {timeout:g} s") from exc
    except ssl.SSLError as exc:
        raise tls_error(peer, exc, server_hostname or host) from exc
    except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
        if ssl_context is not None:
            raise TLSError(
                f"TLS handshake with {peer} failed: the broker closed the connection (is this a TLS port?)"
            ) from exc
        raise ConnectError(f"{peer} closed the connection while connecting") from exc
    except OSError as exc:
        raise ConnectError(f"could not connect to {peer}: {describe_error(exc)}") from exc
    if ssl_context is None and websocket is None and sniffio.current_async_library() == "trio":
        return TrioTransport(stream, peer)
    return Transport(stream, peer)


def _nodelay(stream: Any) -> None:
    try:
        sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # Not a TCP socket (tests may pass others)
    except (OSError, anyio.TypedAttributeLookupError):
        pass
