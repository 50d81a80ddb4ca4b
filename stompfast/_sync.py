"""Client: the blocking twin of AsyncClient, run on an event loop in a background thread.

Theory of operation
-------------------
A :class:`Client` owns (or shares) a :class:`Portal`: an anyio event loop
running in a daemon thread, entered through an
:class:`anyio.from_thread.BlockingPortal`. The protocol logic exists once, in
the async client; the sync modules cross threads, bounds waits and wraps results,
and it crosses as rarely as the guarantees allow:

* **Taking messages crosses nothing.** A sync subscription takes messages from
  the async subscription's buffer in the calling thread
  (:class:`~stompfast._subscription.ThreadHandoff`: ``deque.popleft``, a
  condition waited on only when the buffer is empty, notified by the reader once
  per read). A message handed out is the received ``Message`` itself, re-classed
  as :class:`SyncMessage`.
* **Receipt-less sends and acks cross once per burst.** They go on an ordered
  queue (:class:`~stompfast._sync_outbox.ThreadOutbox`) written by one drainer task of the connection, woken
  by the first frame of a burst with one cheap loop wake-up. A ``client-individual``
  ACK with nothing queued ahead of it crosses nothing where the calling thread can
  write it itself (:meth:`AsyncClient.ack_from_thread`, as for a receipted send).
* **A receipted send crosses only back.** Over plain TCP (any loop) and
  WebSocket (asyncio) the calling thread writes the frame itself
  (:meth:`AsyncClient.send_from_thread`); elsewhere one loop callback does. The
  RECEIPT releases the waiting thread (no task, no future per call). Other
  blocking calls hand one coroutine of the async client to the loop.
* **Connection lifetime.** ``connect()`` starts one *host task* in the loop
  that enters ``async with AsyncClient(...)`` and then waits for ``close()``.
  The async client's task group lives in that task from the first byte to the
  last, as anyio requires; ``close()`` wakes it, and leaving the block sends
  DISCONNECT (bounded by ``disconnect_timeout``) and stops the background tasks.
* **Timeouts.** Async methods take no timeout (callers use anyio's); the sync ones
  take ``timeout=`` (seconds, ``None`` = wait for ever). A coroutine handed to
  the loop waits inside a cancel scope with that deadline *in the loop*, so a
  timeout cancels the awaited operation there (nothing keeps waiting for an
  answer nobody reads); ``receive`` and a receipted ``send`` wait in the calling
  thread and stop waiting there (nothing was taken; the frame was sent and its
  receipt may still come). Only a deadline of our own becomes a :class:`~stompfast.StompTimeout`
  subclass: ``ReceiptTimeout`` (a RECEIPT did not come), ``ReceiveTimeout`` (no
  message), ``ConnectTimeout`` (no CONNECTED), plain ``StompTimeout`` (no room
  in the send buffer). A timeout raised by the async client itself (e.g.
  ``HeartbeatTimeout``) passes through unchanged.
* **No message is lost to a timeout or an interrupt.** A wait that times out
  has taken nothing; a ``receive_batch`` interrupted (``KeyboardInterrupt``)
  between two messages puts back what it had taken, in order.
* **Callbacks.** ``subscribe(..., callback=fn)`` starts one daemon thread per
  subscription that pulls batches and calls ``fn(message)`` for each, so a slow
  callback holds up only its own subscription (through its bounded buffer),
  never the reader, the heart-beats or other subscriptions. An exception from
  ``fn`` goes to ``on_error(exc, message)`` (or is logged on the ``stompfast``
  logger) and delivery goes on with the next message; a failure of the
  connection goes to ``on_error(exc, None)`` and ends the thread.
* **Closing.** ``close()`` is idempotent and safe after a failure; it joins the
  callback threads and stops the loop thread when the client owns it. Every
  thread is a daemon, so an interpreter exiting with an open client does not
  hang; a client dropped without ``close()`` is closed by a finalizer.

Modules
-------
* ``_sync.py``: :class:`Client` (this module; it re-exports the others' public classes).
* ``_sync_loop.py``: :class:`Portal` (the loop thread), ``SyncLoop`` (calling into
  the loop, bounded by a timeout there), the host task and ``ClientLifetime``.
* ``_sync_outbox.py``: ``ThreadOutbox``, the queue of receipt-less sends and acks and its drainer.
* ``_sync_receipts.py``: :class:`ReceiptFuture`, the tasks that settle it, ``Handover``.
* ``_sync_subscription.py``: :class:`Subscription`, :class:`SyncMessage`, ``CallbackWorker``.
* ``_sync_transaction.py``: :class:`Transaction`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import threading
import time
import weakref
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
from anyio.from_thread import BlockingPortal

from ._brokers import broker_of, check_message_options
from ._client import AsyncClient
from ._common import copy_error
from ._config import Endpoint, check_positive
from ._consumer import DEFAULT_RETRY, OnError, check_consume_options, warn_if_nack_loses
from ._health import DrainReport, Health
from ._options import ClientOptions, resolve as resolve_options, signature as options_signature
from ._protocol import Message
from ._receipt import Receipt
from ._request import reply_to
from ._stats import ClientStats
from ._subscription import DEFAULT_BUFFER_SIZE
from ._sync_consumer import Consumer, check_sync_handler
from ._sync_loop import (
    ClientLifetime,
    Portal,
    SyncLoop,
    call_soon_threadsafe,
    check_timeout,
    host_connection,
    running_asyncio_loop,
    timeout_error,
)
from ._sync_outbox import ThreadOutbox
from ._sync_receipts import (
    Handover,
    ReceiptFuture,
    confirmed_future,
    receipts_of,
    send_pipelined,
    wait_and_settle,
)
from ._sync_subscription import (
    Callback,
    CallbackWorker,
    ErrorHandler,
    Subscription,
    SyncMessage,
    open_subscription,
)
from ._sync_transaction import Transaction
from .errors import (
    ClientClosedError,
    ConfigurationError,
    ReceiptTimeout,
    RequestTimeout,
    StompError,
    StompTimeout,
)

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

__all__ = ["Client", "Portal", "ReceiptFuture", "Subscription", "SyncMessage", "Transaction"]


class Client:
    """A blocking STOMP client for one broker connection: the twin of :class:`~stompfast.AsyncClient`.

    ``with Client(url) as client:`` connects (or call :meth:`connect` and
    :meth:`close`). The connection options are the async client's (see
    :class:`~stompfast.AsyncClient`); the extra ones choose where it runs:

    Args:
        portal: run on a shared event loop: a :class:`Portal` (started if it is
            not yet) or an :class:`anyio.from_thread.BlockingPortal`. The client
            never stops a portal it was given.
        backend: without ``portal``, the anyio backend of the client's own loop
            thread: ``"asyncio"`` (default) or ``"trio"``.
        backend_options: options for :func:`anyio.run`, e.g. ``{"use_uvloop": True}``.

    ``on_event`` is called from the loop's thread: keep it quick, and hand work
    to your own threads if it must do more.

    Every blocking method takes a keyword ``timeout`` (seconds; ``None``, the
    default, waits for ever) and raises a :class:`~stompfast.StompTimeout`
    subclass when it passes; the wait is then cancelled in the loop. Methods may
    be called from any number of threads at once.
    """

    def __init__(
        self,
        url: Union[str, Endpoint, Sequence[Union[str, Endpoint]], None] = None,
        *,
        portal: Union[Portal, BlockingPortal, None] = None,
        backend: Optional[str] = None,
        backend_options: Optional[Mapping[str, Any]] = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        send_buffer_bytes = resolve_options(options, "Client")["send_buffer_bytes"]
        self._lock = threading.Lock()
        self._connected = False
        self._callback_workers: Set[CallbackWorker] = set()
        # The consume()s started here (health and drain look at them).
        self._consumers: List[Consumer] = []
        # Pipelined receipts not settled yet (loop only)
        self._outstanding: Set[ReceiptFuture] = set()
        # Sends without a receipt: queued here by the calling threads, written by one
        # drain task per burst (one thread crossing per burst, not per message).
        # ``self._outbox.closed`` is this client's closed flag.
        # Receipt-less sends and acks, written by one drainer per burst
        self._outbox: ThreadOutbox
        self._owner: Optional[Portal] = None
        shared: Optional[Portal] = None
        if portal is None:
            self._owner = Portal(backend or "asyncio", backend_options, name="stompfast-client").start()
            blocking = self._owner.portal
        elif backend is not None or backend_options is not None:
            raise ConfigurationError(
                "backend and backend_options choose the loop of a client's own thread; with portal= the"
                " shared portal's loop is used"
            )
        elif isinstance(portal, Portal):
            shared = portal
            blocking = portal.start().portal
        elif isinstance(portal, BlockingPortal):
            blocking = portal
        else:
            raise ConfigurationError(
                f"portal must be a stompfast.Portal or an anyio BlockingPortal, not {portal!r}"
            )
        self._portal = blocking
        # Calling into the loop
        self._loop = loop = SyncLoop(blocking)
        # (the loop's thread and call_soon, known once in it: kept here too for send's hot path)
        self._loop_thread: Optional[threading.Thread] = None
        # Runs fn() in the loop, from any thread
        self._call_soon: Callable[[Callable[[], Any]], Any]
        self._async: AsyncClient
        build = functools.partial(AsyncClient, url, **options)
        try:
            # The async client makes anyio primitives, which belong to the loop: build it there.
            self._async, self._closing, self._loop_thread, aio_loop, self._call_soon = loop.wait(
                loop.spawn(
                    lambda: (
                        build(), anyio.Event(), threading.current_thread(), running_asyncio_loop(),
                        call_soon_threadsafe(),
                    )
                )
            )
            loop.bind(self._loop_thread, aio_loop, self._call_soon)
            self._outbox = ThreadOutbox(self._async, self._call_soon, self._loop_thread, send_buffer_bytes)
        except BaseException:
            if self._owner is not None:
                self._owner.close()
            raise
        self._life = ClientLifetime(blocking, self._closing, self._owner, shared)
        self._finalizer = weakref.finalize(self, self._life.abandon)
        # At exit the daemon threads simply end with the process
        self._finalizer.atexit = False

    # -- properties -----------------------------------------------------------------------

    @property
    def portal(self) -> BlockingPortal:
        """The anyio BlockingPortal of the loop this client runs on (to run your own coroutines there)."""
        return self._portal

    @property
    def async_client(self) -> AsyncClient:
        """The :class:`AsyncClient` this client drives: for your coroutines run in its loop (``portal.call``)."""
        return self._async

    @property
    def endpoint(self) -> Endpoint:
        """The broker of the current (or last) connection (host, port, login, virtual host)."""
        return self._async.endpoint

    @property
    def endpoints(self) -> Tuple[Endpoint, ...]:
        """Every broker this client may use, in the order they are tried."""
        return self._async.endpoints

    @property
    def reconnects(self) -> int:
        """How many times a lost session was re-established."""
        return self._async.reconnects

    def stats(self) -> ClientStats:
        """A snapshot of the connection's counters and gauges (:class:`~stompfast.ClientStats`); any thread.

        Sends and acks still in this client's own queue, not yet handed to the
        connection, are counted once they are.
        """
        return self._async.stats()

    @property
    def version(self) -> Optional[str]:
        """The negotiated STOMP version (None before CONNECTED)."""
        return self._async.version

    @property
    def server(self) -> Optional[str]:
        """The broker's ``server`` header, e.g. ``RabbitMQ/3.10.8``."""
        return self._async.server

    @property
    def session(self) -> Optional[str]:
        """The broker's ``session`` id."""
        return self._async.session

    @property
    def heart_beat(self) -> Tuple[int, int]:
        """Negotiated ``(send_ms, receive_ms)``: our beat interval, the broker's (0: none)."""
        return self._async.heart_beat

    @property
    def is_connected(self) -> bool:
        return self._async.is_connected

    @property
    def disconnect_timeout(self) -> float:
        """Seconds ``close()`` may take in all (queued sends, then the DISCONNECT receipt)."""
        return self._async.disconnect_timeout

    @property
    def error(self) -> Optional[BaseException]:
        """What ended the connection, if it failed."""
        return self._async.error

    # -- connect / close ------------------------------------------------------------------

    def __enter__(self) -> "Client":
        self.connect()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def connect(self, *, timeout: Optional[float] = None) -> None:
        """Open the connection and the STOMP session.

        ``connect_timeout`` bounds it as on the async client; ``timeout``, when
        given, bounds it too. A failed connect closes the client.

        Raises:
            ConnectError, ConnectTimeout, AuthenticationError: as AsyncClient.connect.
            ClientClosedError: this client was connected or closed before.
        """
        timeout = check_timeout(timeout)
        with self._lock:
            if self._outbox.closed or self._connected:
                raise ClientClosedError("a Client connects once; create a new one to connect again")
            self._connected = True
            ready: "concurrent.futures.Future[None]" = concurrent.futures.Future()
            life = self._life
            life.host = self._loop.spawn(
                host_connection, self._async, self._closing, timeout, ready, self._outbox.drainer
            )
            if life.shared is not None:
                life.shared.register_client(life)
        try:
            self._loop.wait(ready, life.host)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Disconnect (DISCONNECT and its receipt) and release everything, within ``disconnect_timeout``.

        Queued receipt-less sends and acks are written first; the whole close,
        those included, takes at most about ``disconnect_timeout`` even when the
        broker stops reading (what is still queued then is dropped and logged).

        Joins the callback threads (a callback running now is finished first)
        and stops the loop thread when the client owns it. Idempotent, safe
        after a failure, callable from any thread but the loop's (including a
        callback's).
        """
        budget = self._async.disconnect_timeout
        deadline = time.monotonic() + budget
        outbox = self._outbox
        if not outbox.closed:
            outbox.write_before_closing(budget)
        with self._lock:
            if outbox.closed:
                return
            outbox.closed = True
            for worker in self._callback_workers:
                # What a callback thread took but did not deliver yet is dropped
                worker.stopping = True
        # One budget for the whole close: what the queued sends used of it is not
        # waited for again on the DISCONNECT receipt.
        remaining = deadline - time.monotonic()
        if remaining < budget:
            self._async.disconnect_timeout = max(remaining, 0.001)
        try:
            self._life.close()
        finally:
            with self._lock:
                workers = list(self._callback_workers)
            for worker in workers:
                worker.join()
            if self._owner is not None:
                self._owner.close()
            self._finalizer.detach()

    # -- sending --------------------------------------------------------------------------

    @overload
    def send(
        self, destination: str, body: Union[bytes, bytearray, memoryview, str] = ..., *,
        headers: Optional[Mapping[str, Any]] = ..., content_type: Optional[str] = ...,
        receipt: Literal[False] = ..., wait: bool = ..., timeout: Optional[float] = ..., content_length: bool = ...,
        ttl: Optional[float] = ..., priority: Optional[int] = ..., persistent: Optional[bool] = ...,
    ) -> None: ...

    @overload
    def send(
        self, destination: str, body: Union[bytes, bytearray, memoryview, str] = ..., *,
        headers: Optional[Mapping[str, Any]] = ..., content_type: Optional[str] = ...,
        receipt: Literal[True], wait: bool = ..., timeout: Optional[float] = ..., content_length: bool = ...,
        ttl: Optional[float] = ..., priority: Optional[int] = ..., persistent: Optional[bool] = ...,
    ) -> ReceiptFuture: ...

    @overload
    def send(
        self, destination: str, body: Union[bytes, bytearray, memoryview, str] = ..., *,
        headers: Optional[Mapping[str, Any]] = ..., content_type: Optional[str] = ...,
        receipt: bool = ..., wait: bool = ..., timeout: Optional[float] = ..., content_length: bool = ...,
        ttl: Optional[float] = ..., priority: Optional[int] = ..., persistent: Optional[bool] = ...,
    ) -> Optional[ReceiptFuture]: ...

    def send(
        self,
        destination: str,
        body: Union[bytes, bytearray, memoryview, str] = b"",
        *,
        headers: Optional[Mapping[str, Any]] = None,
        content_type: Optional[str] = None,
        receipt: bool = False,
        wait: bool = True,
        timeout: Optional[float] = None,
        content_length: bool = True,
        ttl: Optional[float] = None,
        priority: Optional[int] = None,
        persistent: Optional[bool] = None,
    ) -> Optional[ReceiptFuture]:
        """Send a message to ``destination`` (body rules as :meth:`AsyncClient.send`).

        Without ``receipt`` the frame is queued and the call returns. With
        ``receipt=True`` it returns a confirmed :class:`ReceiptFuture` once the
        broker confirmed the frame, or with ``wait=False`` at once, pending.
        ``content_length=False``: as :meth:`AsyncClient.send` (a JMS TextMessage on
        ActiveMQ and Artemis; the call returns once the frame is queued in the loop).
        ``ttl``, ``priority`` and ``persistent``: as :meth:`AsyncClient.send` (a
        queued send's time to live counts from when the loop writes it, normally
        within a millisecond of the call).

        Raises:
            ReceiptTimeout: ``receipt`` and no RECEIPT within ``timeout`` (the
                frame was sent; its receipt may still come).
            StompTimeout: no room in the send buffer within ``timeout``.
            ServerError, ConnectionLostError, LocalProtocolError, ConfigurationError: as AsyncClient.send.
        """
        timeout = check_timeout(timeout)
        options = None
        if ttl is not None or priority is not None or persistent is not None:
            # Refused by this call, in this thread; mapped to the broker's headers where it is encoded
            check_message_options(ttl, priority, persistent, headers)
            options = (ttl, priority, persistent)
        if not receipt and content_length:
            self._outbox.queue_send(destination, body, headers, content_type, timeout, options)
            return None
        if options is not None:
            # The paths below write at once (or in the loop, now): the connected broker's headers
            headers = self._async.message_headers(headers, ttl, priority, persistent)
        # Keep the order of sends made from this client
        self._outbox.wait_written(timeout)
        if not receipt:
            # content_length=False: the queued fast path always writes a length
            send = functools.partial(
                self._async.send, destination, body, headers=headers, content_type=content_type, content_length=False
            )
            self._loop.call(send, timeout, timeout_error(StompTimeout, "SEND not queued", timeout))
            return None

        # Built only when it happens (this is the hot path)
        def on_timeout() -> BaseException:
            return ReceiptTimeout(f"no RECEIPT for the SEND to {destination!r} within {timeout:g} s", timeout=timeout)

        if wait:
            confirmed = None
            if content_length:
                confirmed = self._send_and_wait(destination, body, headers, content_type, timeout, on_timeout)
            # It would have had to wait in the loop (reconnecting, buffer full), or it has no length: a task
            if confirmed is None:
                send = functools.partial(
                    self._async.send, destination, body, headers=headers, content_type=content_type, receipt=True,
                    content_length=content_length,
                )
                confirmed = self._loop.call(send, timeout, on_timeout)
            return confirmed_future(confirmed)
        send = functools.partial(
            self._async.send, destination, body, headers=headers, content_type=content_type, receipt=True, wait=False,
            content_length=content_length,
        )
        ready: "concurrent.futures.Future[ReceiptFuture]" = concurrent.futures.Future()
        task = self._loop.spawn(send_pipelined, send, timeout, on_timeout, ready, self._outstanding)
        return self._loop.wait(ready, task)

    def message_headers(
        self, headers: Optional[Mapping[str, Any]], ttl: Optional[float] = None, priority: Optional[int] = None,
        persistent: Optional[bool] = None,
    ) -> Dict[str, Any]:
        """``headers`` and the headers that ask the connected broker for these message options (see
        :meth:`AsyncClient.message_headers`); any thread."""
        return self._async.message_headers(headers, ttl, priority, persistent)

    def _send_and_wait(
        self, destination: str, body: Any, headers: Optional[Mapping[str, Any]], content_type: Optional[str],
        timeout: Optional[float], on_timeout: Callable[[], BaseException],
    ) -> Optional[Receipt]:
        """A SEND with a receipt, confirmed: one loop callback, and this thread woken once, by the RECEIPT.

        No task and no future per call (``SyncLoop.call`` makes both, which doubled the
        CPU of a round trip): the callback writes the frame and hangs this
        thread's wake-up on the receipt. Returns None, having sent nothing, when
        the send would have to wait in the loop (then a task does it).
        """
        handover = Handover()
        client = self._async
        # Plain TCP, nothing queued ahead: this thread
        # writes the SEND itself and the loop wakes only for the RECEIPT.
        direct = client.send_from_thread(destination, body, headers, content_type, handover.set)
        if direct is not None:
            return self._receipt_when_done(handover, timeout, on_timeout)

        # In the loop
        def start() -> None:
            try:
                receipt = client.send_nowait(
                    destination, body, headers=headers, content_type=content_type, receipt=True
                )
            except anyio.WouldBlock:
                handover.set(None)
                return
            except BaseException as exc:
                handover.set(None, exc)
                return
            assert receipt is not None
            receipt.add_done_callback(handover.set)

        try:
            self._call_soon(start)
        except RuntimeError:
            raise ClientClosedError("the client is closed (its event loop has stopped)") from None
        return self._receipt_when_done(handover, timeout, on_timeout)

    def _receipt_when_done(
        self, handover: Handover, timeout: Optional[float], on_timeout: Callable[[], BaseException]
    ) -> Optional[Receipt]:
        """Wait for ``handover`` (a receipt done, a refusal, or None); raise the receipt's failure."""
        if not handover.wait(timeout, self._loop_thread):  # type: ignore[arg-type]
            raise on_timeout()
        if handover.error is not None:
            raise handover.error
        receipt: Optional[Receipt] = handover.value
        if receipt is not None and receipt.error is not None:
            raise copy_error(receipt.error)
        return receipt

    def wait_receipts(
        self, receipts: Iterable[Optional[ReceiptFuture]], *, timeout: Optional[float] = None
    ) -> None:
        """Wait for every receipt of ``receipts`` (None entries are skipped); raise the first failure.

        When it returns, every future of ``receipts`` is done.

        Raises:
            ReceiptTimeout: not all of them came within ``timeout``.
        """
        timeout = check_timeout(timeout)
        futures = list(receipts)
        pending = receipts_of(futures)
        self._loop.call(
            functools.partial(
                wait_and_settle, functools.partial(self._async.wait_receipts, pending), futures
            ),
            timeout,
            timeout_error(ReceiptTimeout, f"not every one of {len(pending)} RECEIPTs came", timeout),
        )

    def flush(self, *, timeout: Optional[float] = None) -> None:
        """Return once the broker confirmed everything sent before this call (see AsyncClient.flush).

        When it returns, every ReceiptFuture of an earlier send is done.

        Raises:
            ReceiptTimeout: not confirmed within ``timeout``.
        """
        timeout = check_timeout(timeout)
        self._outbox.wait_written(timeout)
        self._loop.call(
            functools.partial(wait_and_settle, self._async.flush, self._outstanding),
            timeout,
            timeout_error(ReceiptTimeout, "flush: not confirmed", timeout),
        )

    # -- subscribing ------------------------------------------------------------------------

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
        callback: Optional[Callback] = None,
        on_error: Optional[ErrorHandler] = None,
        timeout: Optional[float] = None,
    ) -> Subscription:
        """Subscribe to ``destination`` now and return the :class:`Subscription`.

        Unlike the async client, SUBSCRIBE is sent (and, with ``receipt``,
        confirmed) before this returns; ``with client.subscribe(...) as sub:``
        unsubscribes when the block ends. The other arguments are
        :meth:`AsyncClient.subscribe`'s.

        Args:
            callback: deliver every message to ``callback(message)`` in a thread
                of the subscription's own instead of to ``receive``/iteration.
            on_error: with ``callback``: ``on_error(exc, message)`` gets what
                ``callback`` raised (delivery goes on with the next message), and
                ``on_error(exc, None)`` the failure that ended the subscription.
                Without it, both are logged on the ``stompfast`` logger.
            timeout: bound on the SUBSCRIBE's receipt (ReceiptTimeout; the
                subscription is then withdrawn).
        """
        timeout = check_timeout(timeout)
        if callback is not None and not callable(callback):
            raise ConfigurationError(f"callback must be callable, not {callback!r}")
        if on_error is not None and (callback is None or not callable(on_error)):
            raise ConfigurationError("on_error needs a callback= and must be callable")
        kwargs = {"ack": ack, "headers": headers, "buffer_size": buffer_size, "receipt": receipt, "id": id,
                  "durable": durable, "selector": selector}
        sub = self._loop.call(
            functools.partial(open_subscription, self._async, destination, kwargs),
            timeout,
            timeout_error(ReceiptTimeout, f"no RECEIPT for the SUBSCRIBE to {destination!r}", timeout),
        )
        worker = None if callback is None else CallbackWorker(callback, on_error, self._loop, self._forget)
        subscription = Subscription(self._async, self._loop, self._outbox, sub, worker)
        if worker is not None:
            with self._lock:
                self._callback_workers.add(worker)
            worker.start()
        return subscription

    def consume(
        self,
        destination: str,
        handler: Callable[[SyncMessage], Any],
        *,
        concurrency: int = 1,
        ack: str = "client-individual",
        on_error: OnError = DEFAULT_RETRY,
        prefetch: Optional[int] = None,
        headers: Optional[Mapping[str, Any]] = None,
        id: Optional[str] = None,
        durable: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Consumer:
        """Call ``handler(message)`` for every message of ``destination`` in ``concurrency`` threads.

        The blocking twin of :meth:`AsyncClient.consume` (the same options and
        settling); returns once the subscription is confirmed (within
        ``timeout``, which also bounds each settle). ``handler`` is a plain
        function; with ``concurrency=1`` messages are handled one at a time, in
        order. Stop it with ``consumer.drain(timeout)`` or :meth:`drain`.
        """
        prefetch = check_consume_options(concurrency, prefetch, ack, on_error)
        check_sync_handler(handler)
        sub = self.subscribe(
            destination, ack=ack, headers=headers, buffer_size=prefetch, id=id, durable=durable, timeout=timeout
        )
        warn_if_nack_loses(on_error, broker_of(self.server), destination)
        def publish(dead_letter: str, body: bytes, dead_headers: Mapping[str, str]) -> None:
            self.send(dead_letter, body, headers=dead_headers, receipt=True, timeout=timeout)

        consumer = Consumer(
            sub, handler, concurrency=concurrency, on_error=on_error, publish=publish, settle_timeout=timeout
        )
        with self._lock:
            self._consumers = [c for c in self._consumers if c.running]
            self._consumers.append(consumer)
        consumer.start()
        return consumer

    def request(
        self,
        destination: str,
        body: Union[bytes, bytearray, memoryview, str] = b"",
        *,
        timeout: float = 30.0,
        headers: Optional[Mapping[str, Any]] = None,
        content_type: Optional[str] = None,
    ) -> Message:
        """Send a request and return the reply (see :meth:`AsyncClient.request`); any thread.

        Raises RequestTimeout when no reply came within ``timeout`` seconds.
        """
        check_positive("timeout", timeout)
        # Keep the order of sends made from this client
        self._outbox.wait_written(timeout)
        request = functools.partial(
            self._async.request, destination, body, timeout=timeout, headers=headers, content_type=content_type
        )
        # The async request bounds itself; the margin covers a loop that is slow to answer.
        reply: Message = self._loop.call(
            request, timeout + 5.0, timeout_error(RequestTimeout, f"no reply from {destination!r}", timeout)
        )
        return reply

    def reply(
        self,
        request: Message,
        body: Union[bytes, bytearray, memoryview, str] = b"",
        *,
        headers: Optional[Mapping[str, Any]] = None,
        content_type: Optional[str] = None,
        receipt: bool = False,
        timeout: Optional[float] = None,
    ) -> Optional[ReceiptFuture]:
        """Answer ``request`` at its ``reply-to`` with its ``correlation-id`` (see :meth:`AsyncClient.reply`)."""
        destination, reply_headers = reply_to(request, headers)
        return self.send(
            destination, body, headers=reply_headers, content_type=content_type, receipt=receipt, timeout=timeout
        )

    def health(self, *, handler_limit: float = 60.0, timeout: Optional[float] = None) -> Health:
        """Whether this client is really working (see :meth:`AsyncClient.health`); any thread."""
        check_positive("handler_limit", handler_limit)
        if self._outbox.closed:
            return Health(
                state="closed", connected=False, heartbeat_interval=0.0, silence=0.0, reader_paused=False,
                handlers_running=0, handlers_wedged=0,
            )
        health: Health = self._loop.call(
            lambda: self._health_in_loop(handler_limit), check_timeout(timeout),
            timeout_error(StompTimeout, "health: the event loop did not answer", timeout),
        )
        with self._lock:
            consumers = [c for c in self._consumers if c.running]
        return dataclasses.replace(
            health,
            handlers_running=sum(c.stats().running for c in consumers),
            handlers_wedged=sum(c.wedged(handler_limit) for c in consumers),
        )

    async def _health_in_loop(self, handler_limit: float) -> Health:
        return self._async.health(handler_limit=handler_limit)

    def drain(self, timeout: float = 30.0) -> DrainReport:
        """Shut down gracefully (see :meth:`AsyncClient.drain`): finish what is in flight, close, report.

        Every :meth:`consume` stops taking messages; the running handlers finish
        and settle; the consumers' subscriptions close; the sends and receipts
        still pending are awaited; then :meth:`close`. ``timeout`` bounds the
        waits; what did not finish in it is counted in the report. Not from a
        handler's thread.
        """
        check_positive("timeout", timeout)
        deadline = time.monotonic() + timeout
        with self._lock:
            consumers = [c for c in self._consumers if c.running]
        for consumer in consumers:
            consumer.stop_taking()
        unfinished = 0
        unhandled = 0
        for consumer in consumers:
            consumer.wait_stopped(max(0.0, deadline - time.monotonic()))
        for consumer in consumers:
            unfinished += consumer.stats().running
            unhandled += consumer.subscription.pending
            consumer.subscription.close()
        unconfirmed = 0
        if self.is_connected:
            try:
                self.flush(timeout=max(0.001, deadline - time.monotonic()))
            except ReceiptTimeout:
                unconfirmed = sum(1 for future in list(self._outstanding) if not future.done())
            except StompError:
                pass
        self.close()
        return DrainReport(
            handlers_unfinished=unfinished, messages_unhandled=unhandled, receipts_unconfirmed=unconfirmed
        )

    def ack(
        self, message: Message, *, receipt: bool = False, timeout: Optional[float] = None,
        headers: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Acknowledge ``message`` (same as ``message.ack()``)."""
        self._loop.call(
            functools.partial(self._async.ack, message, receipt=receipt, headers=headers),
            check_timeout(timeout),
            timeout_error(ReceiptTimeout if receipt else StompTimeout, "ACK not confirmed", timeout),
        )

    def nack(
        self, message: Message, *, receipt: bool = False, timeout: Optional[float] = None,
        headers: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Refuse ``message`` (same as ``message.nack()``; STOMP 1.1+); ``headers``: extra NACK headers."""
        self._loop.call(
            functools.partial(self._async.nack, message, receipt=receipt, headers=headers),
            check_timeout(timeout),
            timeout_error(ReceiptTimeout if receipt else StompTimeout, "NACK not confirmed", timeout),
        )

    def transaction(self, *, receipt: bool = True, timeout: Optional[float] = None) -> Transaction:
        """A transaction: ``with client.transaction() as tx:``.

        BEGIN on entry; COMMIT on normal exit (confirmed by a receipt unless
        ``receipt=False``; ``timeout`` bounds it: ReceiptTimeout); ABORT on an
        exception.
        """
        return Transaction(self._loop, self._outbox, self._async.transaction(receipt=receipt), check_timeout(timeout))

    def _forget(self, worker: CallbackWorker) -> None:
        with self._lock:
            self._callback_workers.discard(worker)

    def __repr__(self) -> str:
        state = "connected" if self.is_connected else ("closed" if self._outbox.closed else "not connected")
        return f"<Client {self._async.endpoint.url} {state}>"


Client.__init__.__signature__ = options_signature(Client.__init__)  # type: ignore[attr-defined]
