"""One live connection of :class:`~stompfast.AsyncClient`: :func:`open_link` opens it, :class:`Link` is it.

:func:`open_link` makes a fresh :class:`~stompfast._protocol.StompProtocol` (a
new STOMP session), opens the transport (TCP, TLS or WebSocket:
:func:`open_transport`), sends CONNECT and waits for CONNECTED within
``connect_timeout``, turning what goes wrong into a ConnectError that says why
(a TLS port spoken to in plain TCP, a broker that wants a client certificate,
not a STOMP port). It returns a :class:`Link`: the session, the transport, the
connection's receipt registry and the two components built on them, the
:class:`~stompfast._outbox.Outbox` (sending) and the
:class:`~stompfast._inbox.Inbox` (receiving). :meth:`Link.start` runs their
tasks; :meth:`Link.close` is the one teardown, whatever ended the connection,
and reports what was lost. A new connection is a new Link: nothing of it is
reused, so no task of an old connection can touch a new one.

Theory of operation
-------------------
A live link runs up to four tasks in the client's task group, and nothing else:

* **reader**: reads large chunks, feeds :class:`~stompfast._protocol.StompProtocol`
  and dispatches every event of one read in one step: messages to their
  subscription buffers (each consumer woken once), receipts to their waiters.
  When a subscription's buffer is full it stops reading (backpressure; see
  :mod:`._subscription`), and while stopped it suspends the liveness check. On
  asyncio there is no reader task: the transport's ``data_received`` callback
  runs the same steps (``Inbox.on_data`` in :mod:`._inbox`), and backpressure pauses the transport
  until the full subscription's consumer takes a message (``Inbox._pause_for``);
* **writer**: the client's ``send`` and friends only append encoded frames to an
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
lost, ERROR frame, heart-beat timeout, framing fault) goes to ``on_failure``,
the client's, which records it once, fails every pending receipt and every
subscription with it and closes the link: the background tasks stop and the
socket is closed.
"""

from __future__ import annotations

import ssl as _ssl
import threading
from logging import DEBUG
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple, Union

import anyio
import anyio.abc
import sniffio

from ._config import Endpoint
from ._framelog import FrameLog, frame_log
from ._inbox import Inbox, read_later_errors
from ._outbox import WRITE_THROUGH_BYTES, Outbox
from ._protocol import Connected, ErrorReceived, Message, StompProtocol
from ._receipt import PendingReceipt, ReceiptRegistry
from ._stats import ClientStats, Counters
from ._subscription import Inlet
from ._tls import client_ssl_context
from ._transport import (
    READ_SIZE,
    AsyncioTransport,
    StompTransport,
    TrioTransport,
    WebSocketSpec,
    open_transport,
)
from .errors import (
    ConnectError,
    ConnectionLostError,
    ConnectTimeout,
    NotStompError,
    RemoteProtocolError,
    StompError,
    TLSError,
)

__all__ = ["Link", "LinkSettings", "Lost", "loop_and_clock", "open_link"]

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


def not_stomp(host: str, port: int, head: bytes) -> NotStompError:
    """The error for a server at ``host:port`` that answered CONNECT with ``head``, quoted short and escaped."""
    # The first line says what the service is ("HTTP/1.1 400 ...", "AMQP..."); the
    # repr of bytes escapes everything unprintable, so the quote is safe in a log line.
    shown = head.lstrip(b"\r\n")
    end = shown.find(b"\n")
    cut = min(end + 1 if end >= 0 else len(shown), 40)
    quote = repr(shown[:cut]) + ("..." if cut < len(shown) else "")
    return NotStompError(
        f"the server at {host}:{port} does not speak STOMP (it answered {quote}):"
        " is this the broker's STOMP port?",
        host=host, port=port, received=bytes(head),
    )


#: What the TLS-port error tells a user of the client to do.
TLS_PORT_HINT = "use a stomp+ssl:// URL or ssl=True"


def wrong_answer(
    host: str, port: int, head: bytes, data: bytes, buffered: int, tls_hint: str = TLS_PORT_HINT
) -> Optional[ConnectError]:
    """The error for a server whose answer to CONNECT cannot be STOMP, or None while it still can be.

    ``head`` is the first bytes received so far (up to 64), ``data`` the latest read, and
    ``buffered`` the bytes of a partial frame the scanner holds from earlier reads. A TLS
    record (an alert or a handshake) at the start of a read with nothing buffered means
    a TLS port spoken to in plain TCP; a head that cannot begin CONNECTED or ERROR means
    another service (:func:`could_be_stomp`). The client and the stomp.py layer both
    judge a server's first bytes with it, so both give the same errors.
    """
    if data[:1] in (b"\x15", b"\x16") and data[1:2] == b"\x03" and not buffered:
        # a TLS record (alert or handshake) where a STOMP frame was expected
        return ConnectError(f"{host}:{port} answered with TLS: it is a TLS port ({tls_hint})")
    if not could_be_stomp(head):
        return not_stomp(host, port, head)
    return None


class LinkSettings:
    """What every connection of a client is opened with: the options that do not depend on the broker.

    Args:
        ssl: the client's ``ssl=`` option (None: as each endpoint's URL scheme says).
        server_hostname: the name sent as SNI and checked against the certificate.
        connect_timeout: seconds for the transport plus CONNECTED.
        websocket_max_message_bytes: the most payload bytes in one WebSocket message.
        send_buffer_bytes: queued bytes at which senders wait for room.
        stall_timeout: seconds the reader may be stopped by a full subscription.
        heartbeat_tolerance: how many broker intervals of silence mean the connection is dead.
        protocol_options: the keywords of each connection's StompProtocol.
    """

    __slots__ = (
        "ssl", "server_hostname", "connect_timeout", "websocket_max_message_bytes", "send_buffer_bytes",
        "stall_timeout", "heartbeat_tolerance", "protocol_options",
    )

    def __init__(
        self,
        *,
        ssl: Union[bool, _ssl.SSLContext, None],
        server_hostname: Optional[str],
        connect_timeout: float,
        websocket_max_message_bytes: int,
        send_buffer_bytes: float,
        stall_timeout: float,
        heartbeat_tolerance: float,
        protocol_options: Dict[str, Any],
    ) -> None:
        self.ssl = ssl
        self.server_hostname = server_hostname
        self.connect_timeout = connect_timeout
        self.websocket_max_message_bytes = websocket_max_message_bytes
        self.send_buffer_bytes = send_buffer_bytes
        self.stall_timeout = stall_timeout
        self.heartbeat_tolerance = heartbeat_tolerance
        self.protocol_options = protocol_options

    def protocol(self, endpoint: Endpoint) -> StompProtocol:
        """A new STOMP session for ``endpoint`` (raises ConfigurationError for bad options, before any I/O)."""
        # skip_oversized: a MESSAGE over max_frame_bytes that the broker sent with
        # content-length reaches its subscription as an OversizedMessage to ack or
        # nack; failing the connection would only have it redelivered for ever.
        return StompProtocol(
            host=endpoint.virtual_host,
            login=endpoint.login,
            passcode=endpoint.passcode,
            skip_oversized=True,
            **self.protocol_options,
        )

    def tls(self, endpoint: Endpoint) -> Union[bool, _ssl.SSLContext]:
        """TLS for ``endpoint``: the ``ssl=`` option if given, else what its URL scheme says."""
        return endpoint.tls if self.ssl is None else self.ssl

    def ssl_context(self, endpoint: Endpoint) -> Optional[_ssl.SSLContext]:
        """The SSL context to connect with (None: plain TCP); a default one is made per connect."""
        tls = self.tls(endpoint)
        if isinstance(tls, _ssl.SSLContext):
            return tls
        return client_ssl_context() if tls else None


class Lost(NamedTuple):
    """What a connection took with it when it ended (:meth:`Link.close`), as the client reports it."""

    #: what ended it
    error: BaseException
    #: frames queued and never written
    dropped_frames: int = 0
    #: client-ack messages received and not yet taken (the client drops them: the broker redelivers them)
    dropped_messages: int = 0
    #: transactions open on it (the broker aborted them)
    aborted_transactions: int = 0


def _ignore(error: BaseException) -> None:
    """The failure callback of a link nobody watches (one that was never opened)."""


def _receipt_failer(receipts: ReceiptRegistry, counters: Counters) -> Callable[[BaseException], None]:
    """``fail(error)``: fail every receipt pending in ``receipts`` and count them as failed."""

    def fail(error: BaseException) -> None:
        counters.receipts_failed += receipts.fail(error)

    return fail


def loop_and_clock() -> Tuple[Any, Callable[[], float]]:
    """(In the event loop.) The asyncio loop receipts wait on (None elsewhere) and the loop's clock, read fast.

    The clock is what ``anyio.current_time()`` returns, without its backend lookup
    per call: the reader stamps every read with it, a consumer every message.
    """
    library = sniffio.current_async_library()
    if library == "asyncio":
        import asyncio

        loop = asyncio.get_running_loop()
        return loop, loop.time
    if library == "trio":
        import trio

        return None, trio.current_time
    return None, anyio.current_time


def _no_clock() -> float:
    """The clock of a link that was never opened (an idle link may be built outside any event loop)."""
    return 0.0


class Link:
    """One live connection: its STOMP session, its transport, its receipts, its outbox and its inbox.

    Built by :func:`open_link` once CONNECTED has come (or, with ``transport``
    None, as the idle link a client holds before its first connection: closed,
    empty). The client keeps the current link; the components reach the client
    only through the callables given here.

    Args:
        endpoint: the broker this link is connected to.
        protocol: its STOMP session (CONNECTED already received).
        transport: its transport (None: an idle link).
        settings: the client's :class:`LinkSettings`.
        subs: the client's subscriptions by id (the inbox dispatches to them).
        counters: the client's counters (connects, failed receipts, the RTT histogram).
        lock: the client's registry lock (threads that send directly take it).
        clock: the event loop's clock.
        loop: the asyncio loop (None elsewhere): receipts wait on its futures.
        on_failure: called with what ended the connection (a lost write, an EOF, an
            ERROR frame, a heart-beat timeout), unless the link was closed first.
        frames: the frame log of this connection (default: a new one), written
            while ``stompfast.frames`` is at DEBUG.
    """

    __slots__ = (
        "endpoint", "protocol", "transport", "receipts", "outbox", "inbox", "log_frames", "fail_receipts",
        "scopes", "alive", "counters", "queue", "offer", "direct",
    )

    def __init__(
        self,
        endpoint: Endpoint,
        protocol: StompProtocol,
        transport: Optional[StompTransport],
        *,
        settings: LinkSettings,
        subs: Dict[str, Inlet],
        counters: Counters,
        lock: threading.Lock,
        clock: Callable[[], float] = _no_clock,
        loop: Any = None,
        on_failure: Callable[[BaseException], Any] = _ignore,
        frames: Optional[FrameLog] = None,
    ) -> None:
        self.endpoint = endpoint
        self.protocol = protocol
        self.transport = transport
        self.receipts = ReceiptRegistry(lock, loop)
        if frames is None:
            frames = FrameLog(f"{endpoint.host}:{endpoint.port}")
        # The components get callables that hold no reference to this link: a lost
        # link must be freed by reference counting (its session may hold up to
        # max_frame_bytes of scanner buffer), not at a rare cyclic collection.
        #: ``log_frames(direction, data)``: log the frames of one read or write (``stompfast.frames`` at DEBUG)
        self.log_frames = frames.tap(protocol)
        #: ``fail_receipts(error)``: fail every pending receipt of this link, counted as failed
        self.fail_receipts = _receipt_failer(self.receipts, counters)
        # Only asyncio's transport takes a write from the sending task (try_write);
        # elsewhere writing through would mean a task switch per mark, so the
        # queue fills to send_buffer_bytes.
        through = settings.send_buffer_bytes
        if isinstance(transport, AsyncioTransport):
            through = WRITE_THROUGH_BYTES
        self.outbox = Outbox(
            transport,
            send_buffer_bytes=settings.send_buffer_bytes,
            write_through_bytes=through,
            clock=clock,
            on_lost=on_failure,
            log_frames=self.log_frames,
            beating=transport is not None and protocol.heart_beat[0] > 0,
        )
        self.inbox = Inbox(
            transport,
            protocol,
            subs=subs,
            take_receipt=self.receipts.take,
            rtt=counters.rtt,
            peer=f"{endpoint.host}:{endpoint.port}",
            clock=clock,
            loop=loop,
            stall_timeout=settings.stall_timeout,
            heartbeat_tolerance=settings.heartbeat_tolerance,
            on_failure=on_failure,
            fail_receipts=self.fail_receipts,
            log_frames=self.log_frames,
        )
        # The cancel scopes of this link's tasks (closing cancels them).
        self.scopes: List[anyio.CancelScope] = []
        # Up: opened and not closed since.
        self.alive = transport is not None
        # The client's counters: what this link's verbs do is counted there.
        self.counters = counters
        #: ``queue(data)``: queue encoded bytes for the writer (the caller made room): the outbox's, bound once
        self.queue = self.outbox.queue
        #: ``offer(data)``: queue under the write-through mark, else False (the hot paths: one call, not two)
        self.offer = self.outbox.offer
        # A transport of a kind a thread may write to itself (send_from_thread, ack_from_thread);
        # whether this one may now is its direct_ok (not over TLS, nor a trio WebSocket; it can
        # turn False later), read at each write: threads_may_write.
        self.direct = isinstance(transport, (AsyncioTransport, TrioTransport))

    def start(self, tg: anyio.abc.TaskGroup, leftover: List[Any]) -> None:
        """Run this link's tasks in ``tg``: the writer, the heart-beat sender, the liveness watch, the reader.

        ``leftover``: the events read with CONNECTED. On asyncio the transport
        calls the inbox back with each read: there is no reader task.
        """
        outbox, inbox = self.outbox, self.inbox
        self._spawn(tg, outbox.writer(), "stompfast-writer")
        beat_ms, watch_ms = self.protocol.heart_beat
        if beat_ms:
            self._spawn(tg, outbox.heartbeat_sender(beat_ms / 1000.0), "stompfast-heartbeat")
        # The watch starts before the reader: leftover bytes may end the link at
        # once, and its scopes with it.
        if watch_ms:
            self._spawn(tg, inbox.liveness(watch_ms / 1000.0), "stompfast-liveness")
        if inbox.push:
            inbox.start_push(leftover)
        else:
            self._spawn(tg, inbox.reader(leftover), "stompfast-reader")

    def _spawn(self, tg: anyio.abc.TaskGroup, coro: Any, name: str) -> None:
        """Run ``coro`` in ``tg`` under a cancel scope of this link's own.

        The client's task group is entered in the caller's task, so its own cancel
        scope also covers the caller's code inside ``async with``: a link must stop
        its tasks through their own scopes, never through the group's.
        """
        scope = anyio.CancelScope()
        self.scopes.append(scope)

        async def run() -> None:
            with scope:
                await coro

        tg.start_soon(run, name=name)

    def register(self, receipt_id: Optional[str]) -> PendingReceipt:
        """A pending receipt for ``receipt_id`` (failed at once while a full subscription stalls the reader)."""
        assert receipt_id is not None
        inbox = self.inbox
        if inbox.stalled and inbox.paused_on is not None:
            inbox.receipts_failed += 1
            return self.receipts.register(receipt_id, inbox.stall_error(inbox.paused_on))
        return self.receipts.register(receipt_id)

    # -- the verbs of a live connection: the client asks these, never the outbox, inbox or receipts --

    def expect(self, receipt_id: Optional[str]) -> Optional[PendingReceipt]:
        """The pending receipt for a frame encoded with ``receipt_id`` (None: the frame asks for none)."""
        return None if receipt_id is None else self.register(receipt_id)

    def has_room(self) -> bool:
        """Whether a frame may be queued now without waiting (``send_buffer_bytes``)."""
        return self.outbox.has_room()

    async def wait_for_room(self) -> None:
        """Return once a frame may be queued, or this link is closed (the caller checks which)."""
        await self.outbox.wait_for_room()

    async def catch_up(self) -> None:
        """The queue is past the write-through mark: write it out, or let the writer take it."""
        await self.outbox.catch_up()

    def write_now(self) -> None:
        """Write what is queued from the calling task, if the transport takes it at once (before a wait)."""
        self.outbox.write_queued_now()

    def write_first(self, data: bytes) -> bool:
        """Write ``data`` from the calling task, unqueued, if nothing is queued ahead and the transport takes it."""
        outbox = self.outbox
        return not outbox.out and outbox.try_write_frame(data)

    def queue_ack(self, message: Message) -> bool:
        """The common ACK of ``message`` (no receipt, no transaction) queued now; False: no room (nothing done).

        Encoded only once there is room: encoding marks the message settled.
        """
        outbox = self.outbox
        if outbox.out_bytes < outbox.send_buffer_bytes:
            outbox.queue(self.protocol.ack_plain(message))
            self.counters.acks += 1
            return True
        return False

    def outstanding(self) -> List[PendingReceipt]:
        """The receipts this connection awaits now (a copy)."""
        return self.receipts.outstanding()

    def silence(self, now: float) -> float:
        """Seconds since the broker last sent anything, at ``now`` (the loop's clock)."""
        return now - self.inbox.last_received

    def reader_paused(self) -> bool:
        """Whether a full subscription stops the reader now."""
        return self.inbox.paused_on is not None

    def ending(self) -> bool:
        """Whether the broker's ERROR ended this connection and its later ERRORs are being read."""
        return self.inbox.ending

    def hand_counts_over(self) -> None:
        """(Under the registry lock.) This link is replaced: what its outbox and inbox counted joins the totals."""
        self.counters.add_link(self.outbox, self.inbox)

    def snapshot(self, subs: Iterable[Inlet], lock: threading.Lock, late_replies: int) -> ClientStats:
        """The client's :class:`~stompfast.ClientStats` with this link's counts and gauges."""
        return self.counters.snapshot(self.outbox, self.inbox, len(self.receipts), subs, lock,
                                      late_replies=late_replies)

    # -- a blocking client's threads write their own frames (under the client's registry lock) --

    def may_write_from_thread(self) -> bool:
        """(Under the registry lock.) Whether a thread's frame written now is the next on this link's wire.

        Alive, a transport a thread may write to, nothing queued or being written
        by the loop, no stall under way.
        """
        return self.alive and self.threads_may_write() and self.outbox.idle() and not self.inbox.stalled

    def threads_may_write(self) -> bool:
        """Whether this link's transport takes a thread's own writes now (checked before the registry lock)."""
        return self.direct and self.transport.direct_ok  # type: ignore[union-attr]  # (direct: it has one)

    def _wrote_from_thread(self, data: bytes) -> None:
        """A thread wrote ``data`` itself: its bytes count, and the heart-beat sender knows the link was not idle."""
        self.counters.thread_bytes += len(data)
        self.outbox.note_thread_write()

    def send_from_thread(self, data: bytes, receipt: PendingReceipt) -> bool:
        """(Under the registry lock, :meth:`may_write_from_thread` true.) Write a receipted SEND from this thread.

        ``receipt`` is kept before the write (its RECEIPT may come at once);
        False, having kept nothing: the transport did not take it all.
        """
        self.receipts.adopt(receipt)
        if not self.transport.write_from_thread(data):  # type: ignore[union-attr]  # (direct: it has one)
            self.receipts.take(receipt.receipt_id)
            return False
        self.counters.thread_sends += 1
        self._wrote_from_thread(data)
        return True

    def ack_from_thread(self, message: Message) -> Optional[bytes]:
        """(Under the registry lock, :meth:`may_write_from_thread` true.) ``message``'s plain ACK, by this thread.

        Returns the bytes written; None, having sent nothing and left the message
        as it was: it is of another connection, or the transport did not take the ACK.
        """
        protocol = self.protocol
        if message.session is not protocol:
            return None
        settled = message.settled
        data: bytes = protocol.ack_plain(message)
        if not self.transport.write_from_thread(data):  # type: ignore[union-attr]  # (direct: it has one)
            # The mark the encoding took goes back, so that the queued ACK that follows can take it
            message.settled = settled
            return None
        self.counters.thread_acks += 1
        self._wrote_from_thread(data)
        return data

    def expect_eof(self) -> None:
        """Our close is under way: an EOF from now on ends it, it is not a loss."""
        self.inbox.expect_eof()

    async def disconnect(self, cancelled: bool) -> None:
        """DISCONNECT with a receipt, written from the calling task, and wait for the receipt (the client's close).

        Written from the caller: when the client's ``async with`` block is left by a
        cancellation, the writer task is cancelled too. On trio the reader task is
        cancelled with the block then (``cancelled``), so no receipt could be read
        and none is awaited. A connection that goes down meanwhile ends it quietly.
        """
        try:
            data, receipt_id = self.protocol.disconnect(receipt=True)
            receipt = self.register(receipt_id)
            self.queue(data)
            self.counters.control += 1
            await self.outbox.write_queued()
            if not cancelled or self.inbox.push:
                await receipt.wait()
        except StompError:
            # the connection went down while we were leaving
            pass

    def close(self, error: BaseException, *, release: bool = False) -> Lost:
        """End this link (the one teardown, whatever ended it): what it lost is returned.

        Pending receipts fail with ``error`` (never re-sent); frames never written
        are dropped; the outbox wakes every sender waiting for room; the inbox
        dispatches nothing more; the tasks stop; on asyncio the socket is
        closed now. ``release``: the client will not reconnect, so on trio the
        reader frees the socket on its way out (else :meth:`aclose` does).
        Closing a closed link loses nothing more.
        """
        if not self.alive:
            return Lost(error)
        self.alive = False
        self.fail_receipts(error)
        dropped = self.outbox.drop()
        self.outbox.close()
        self.inbox.close(release=release)
        for scope in self.scopes:
            scope.cancel()
        self.inbox.abort()
        self.protocol.connection_lost()
        return Lost(error, dropped)

    async def aclose(self) -> None:
        """Close the transport (shielded: this runs in teardowns that may be cancelled)."""
        if self.transport is not None:
            with anyio.CancelScope(shield=True):
                await self.transport.aclose()



async def open_link(
    endpoint: Endpoint,
    settings: LinkSettings,
    *,
    subs: Dict[str, Inlet],
    counters: Counters,
    lock: threading.Lock,
    clock: Callable[[], float],
    loop: Any,
    on_failure: Callable[[BaseException], Any],
) -> Tuple[Link, List[Any]]:
    """Connect to ``endpoint``, send CONNECT, wait for CONNECTED: the new link and the events read after it.

    The keywords are :class:`Link`'s. Everything is bounded by
    ``settings.connect_timeout``; on any failure the transport is closed.

    Raises:
        ConnectTimeout, ConnectError (NotStompError, TLSError), AuthenticationError, ServerError.
    """
    protocol = settings.protocol(endpoint)
    frames = FrameLog(f"{endpoint.host}:{endpoint.port}")
    # A StompTransport once open
    transport: Any = None
    try:
        websocket = None
        if endpoint.websocket:
            from ._websocket import subprotocols

            websocket = WebSocketSpec(
                endpoint.path, subprotocols(protocol.versions), settings.websocket_max_message_bytes
            )
        try:
            with anyio.fail_after(settings.connect_timeout):
                transport = await open_transport(
                    endpoint.host,
                    endpoint.port,
                    ssl_context=settings.ssl_context(endpoint),
                    server_hostname=settings.server_hostname,
                    websocket=websocket,
                )
                connect = protocol.connect()
                if frame_log.isEnabledFor(DEBUG):
                    frames.feed(">", connect)
                counters.connects += 1
                counters.bytes_out += len(connect)
                await transport.send(connect)
                leftover = await _await_connected(transport, protocol, endpoint, settings, frames, counters)
        except TimeoutError as exc:
            if protocol.ending_error is not None:
                # The ERROR came in time; reading the ERRORs after it ran into the deadline (a storm
                # of them on a loaded machine): the broker's answer is the error, not a timeout
                raise protocol.ending_error from None
            raise ConnectTimeout(
                f"no CONNECTED from {endpoint.host}:{endpoint.port} within {settings.connect_timeout:g} s"
            ) from exc
        except ConnectionLostError as exc:
            raise _closed_early(endpoint, settings, exc) from exc
    except BaseException:
        if transport is not None:
            with anyio.CancelScope(shield=True):
                await transport.aclose()
        raise
    link = Link(
        endpoint, protocol, transport, settings=settings, subs=subs, counters=counters, lock=lock, clock=clock,
        loop=loop, on_failure=on_failure, frames=frames,
    )
    return link, leftover


def _closed_early(endpoint: Endpoint, settings: LinkSettings, exc: ConnectionLostError) -> ConnectError:
    """The error for a connection that ended before CONNECTED, with a hint on TLS client certificates."""
    cause = exc.__cause__
    if isinstance(cause, _ssl.SSLError):
        # TLS 1.3: a client certificate the broker refuses is reported after the
        # handshake, on the first read
        return TLSError(
            f"{endpoint.host}:{endpoint.port} ended the TLS session before CONNECTED: {exc}"
            " (does the broker want a client certificate? ctx.load_cert_chain)",
            reason=getattr(cause, "reason", None),
        )
    hint = ""
    if settings.tls(endpoint):
        hint = " (over TLS: does the broker want a client certificate? ctx.load_cert_chain)"
    return ConnectError(f"{endpoint.host}:{endpoint.port} closed the connection before CONNECTED: {exc}{hint}")


async def _await_connected(
    transport: Any,
    protocol: StompProtocol,
    endpoint: Endpoint,
    settings: LinkSettings,
    frames: FrameLog,
    counters: Counters,
) -> List[Any]:
    """Read until CONNECTED (its events after it are returned) or ERROR (raised), judging what comes."""
    # The first bytes received, to judge and quote a server that is not STOMP
    head = b""
    while True:
        data = await transport.receive(READ_SIZE)
        if frame_log.isEnabledFor(DEBUG):
            frames.feed("<", data)
        counters.bytes_in += len(data)
        if len(head) < _HEAD:
            head += data[: _HEAD - len(head)]
        if not data:
            hint = "is this a STOMP port?"
            if settings.tls(endpoint) and not protocol.buffered:
                hint += " Over TLS, a broker that wants a client certificate closes like this: ctx.load_cert_chain"
            raise ConnectError(
                f"{endpoint.host}:{endpoint.port} closed the connection before CONNECTED ({hint})"
            )
        wrong = wrong_answer(endpoint.host, endpoint.port, head, data, protocol.buffered)
        if wrong is not None:
            raise wrong
        try:
            events = protocol.receive_data(data)
        except RemoteProtocolError as exc:
            # A fault of the scanner (it has an offset) or a frame other than CONNECTED
            # or ERROR: no STOMP server answers CONNECT so. A CONNECTED the session
            # refuses (a version not offered, a bad heart-beat) comes from a STOMP
            # server and keeps its own, more precise, error.
            if exc.offset is None and head.lstrip(b"\r\n").startswith(b"CONNECTED"):
                raise
            raise not_stomp(endpoint.host, endpoint.port, head) from exc
        for i, event in enumerate(events):
            if isinstance(event, Connected):
                # The rest are dispatched, and counted, with the session's
                counters.frames_in += 1
                return events[i + 1 :]
            if isinstance(event, ErrorReceived):
                counters.frames_in += 1
                counters.errors += 1
                await read_later_errors(transport, protocol)
                raise protocol.ending_error  # type: ignore[misc]  # (an ERROR came)
