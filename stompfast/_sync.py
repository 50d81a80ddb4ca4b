"""Client: the blocking twin of AsyncClient, run on an event loop in a background thread.

Theory of operation
-------------------
A :class:`Client` owns (or shares) a :class:`Portal`: an anyio event loop
running in a daemon thread, entered through an
:class:`anyio.from_thread.BlockingPortal`. The protocol logic exists once, in
the async client; this module crosses threads, bounds waits and wraps results,
and it crosses as rarely as the guarantees allow:

* **Taking messages crosses nothing.** A sync subscription takes messages from
  the async subscription's buffer in the calling thread
  (:class:`~stompfast._subscription.ThreadHandoff`: ``deque.popleft``, a
  condition waited on only when the buffer is empty, notified by the reader once
  per read). A message handed out is the received ``Message`` itself, re-classed
  as :class:`SyncMessage`.
* **Receipt-less sends and acks cross once per burst.** They go on an ordered
  queue (:class:`_Outbox`) written by one drainer task of the connection, woken
  by the first frame of a burst with one cheap loop wake-up.
* **A receipted send crosses only back.** On the stock asyncio loop over plain
  TCP the calling thread writes the frame itself
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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import math
import threading
import time
import weakref
from collections import deque
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Coroutine,
    Deque,
    Dict,
    Iterable,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
    Union,
    overload,
)

import anyio
import sniffio
from anyio.from_thread import BlockingPortal

from ._client import AsyncClient, AsyncTransaction, Receipt
from ._config import Endpoint
from ._options import ClientOptions
from ._options import resolve as resolve_options
from ._options import signature as options_signature
from ._protocol import Message
from ._common import copy_error
from ._subscription import DEFAULT_BUFFER_SIZE, LOOP_CHECK_INTERVAL, AsyncSubscription, WaitTimeout
from .errors import (
    ClientClosedError,
    ConfigurationError,
    ConnectTimeout,
    LocalProtocolError,
    ReceiptTimeout,
    ReceiveTimeout,
    StaleMessageError,
    StompError,
    StompTimeout,
)

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

__all__ = ["Client", "Portal", "ReceiptFuture", "Subscription", "SyncMessage", "Transaction"]

log = logging.getLogger("stompfast")

#: The anyio backends a Portal can run (uvloop is ``backend_options={"use_uvloop": True}``).
BACKENDS = ("asyncio", "trio")

#: Messages a callback thread takes from its subscription per crossing into the loop.
CALLBACK_BATCH = 100

#: queued receipt-less sends beyond which ``send`` waits for them to be written
_FAST_MAX_MESSAGES = 10_000

Callback = Callable[["SyncMessage"], Any]
ErrorHandler = Callable[[BaseException, Optional["SyncMessage"]], Any]


def _check_timeout(timeout: Optional[float]) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise ConfigurationError(f"timeout must be None or a number of seconds >= 0, not {timeout!r}")
    return float(timeout)


def _running_asyncio_loop() -> Any:
    """The running asyncio loop, or None under another backend (trio)."""
    if sniffio.current_async_library() != "asyncio":
        return None
    return asyncio.get_running_loop()


def _call_soon_threadsafe() -> Callable[[Callable[[], Any]], Any]:
    """(In the loop.) A function that runs ``fn()`` in this loop soon, callable from any thread.

    The cheapest way in: one wake-up of the loop, no task, no future (anyio's
    portal makes a task and a future per call). Raises RuntimeError once the
    loop is gone.
    """
    if sniffio.current_async_library() == "asyncio":
        return asyncio.get_running_loop().call_soon_threadsafe
    import trio

    return trio.lowlevel.current_trio_token().run_sync_soon


async def _bounded(
    fn: Callable[[], Awaitable[Any]], timeout: Optional[float], on_timeout: Optional[Callable[[], BaseException]]
) -> Any:
    """Await ``fn()``; if ``timeout`` seconds pass first, cancel it and raise ``on_timeout()``.

    Only the deadline of this scope becomes the timeout error: a ``TimeoutError``
    raised by ``fn`` itself (``HeartbeatTimeout``, ``ConnectTimeout``) passes through.
    """
    if timeout is None:
        return await fn()
    with anyio.CancelScope(deadline=anyio.current_time() + timeout):
        return await fn()
    assert on_timeout is not None  # (a timeout comes with its error)
    raise on_timeout()  # reached only when our deadline cancelled fn


def _timeout_error(
    cls: Type[StompTimeout], what: str, timeout: Optional[float]
) -> Callable[[], BaseException]:
    return lambda: cls(f"{what} within {timeout:g} s", timeout=timeout)


# -- the event loop thread -------------------------------------------------------------


class Portal:
    """An anyio event loop in a daemon thread, for one or many sync clients.

    Every :class:`Client` needs an event loop to run on. By default each client
    starts its own; a ``Portal`` lets several share one thread::

        with Portal(backend="trio") as portal:
            with Client(url_a, portal=portal) as a, Client(url_b, portal=portal) as b:
                ...

    Args:
        backend: ``"asyncio"`` or ``"trio"``.
        backend_options: passed to :func:`anyio.run`, e.g. ``{"use_uvloop": True}``.
        name: the thread's name.

    ``start()`` (or entering the ``with`` block) starts the thread; ``close()``
    (or leaving the block) cancels whatever still runs on it (a client still
    open is disconnected, shielded and bounded) and joins the thread.
    """

    def __init__(
        self,
        backend: str = "asyncio",
        backend_options: Optional[Mapping[str, Any]] = None,
        *,
        name: str = "stompfast-portal",
    ) -> None:
        if backend not in BACKENDS:
            raise ConfigurationError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
        if backend_options is not None and not isinstance(backend_options, Mapping):
            raise ConfigurationError(f"backend_options must be a mapping, not {backend_options!r}")
        self.backend = backend
        self.backend_options: Dict[str, Any] = dict(backend_options or {})
        self.name = name
        self._lock = threading.Lock()
        self._portal: Optional[BlockingPortal] = None
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self._lives: Set["_Lifetime"] = set()  # connected clients, closed cleanly by close()

    def __enter__(self) -> "Portal":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def portal(self) -> BlockingPortal:
        """The :class:`anyio.from_thread.BlockingPortal` into the loop (after :meth:`start`)."""
        if self._portal is None:
            raise ClientClosedError("the Portal is not running (use `with Portal() as portal:` or start())")
        return self._portal

    @property
    def running(self) -> bool:
        return self._portal is not None

    @property
    def thread(self) -> Optional[threading.Thread]:
        """The thread the event loop runs in (None before :meth:`start`)."""
        return self._thread

    def start(self) -> "Portal":
        """Start the loop thread and return once it runs; no-op if it already does."""
        with self._lock:
            if self._closed:
                raise ClientClosedError("this Portal is closed; create a new one")
            if self._portal is not None:
                return self
            ready: "concurrent.futures.Future[BlockingPortal]" = concurrent.futures.Future()
            thread = threading.Thread(target=self._run, args=(ready,), name=self.name, daemon=True)
            thread.start()
            try:
                self._portal = ready.result()
            except BaseException:
                thread.join()
                raise
            self._thread = thread
        return self

    def _run(self, ready: "concurrent.futures.Future[BlockingPortal]") -> None:
        async def serve() -> None:
            async with BlockingPortal() as portal:
                ready.set_result(portal)
                await portal.sleep_until_stopped()

        try:
            anyio.run(serve, backend=self.backend, backend_options=self.backend_options)
        except BaseException as exc:  # the loop could not start, or died
            if ready.done():
                log.exception("the event loop of %r ended with an error", self)
                return
            if isinstance(exc, (LookupError, ImportError)):
                extra = "trio" if self.backend == "trio" else "uvloop"
                error: BaseException = ConfigurationError(
                    f"cannot start the {self.backend} event loop with options {self.backend_options!r}"
                    f" ({exc}); is it installed? (pip install 'stompfast[{extra}]')"
                )
                error.__cause__ = exc
            else:
                error = exc
            ready.set_exception(error)

    def close(self) -> None:
        """Close the clients still connected through it, stop the loop and join its thread (idempotent).

        Clients are closed as by their ``close()`` (DISCONNECT, bounded by their
        ``disconnect_timeout``); whatever else still runs on the loop is cancelled.
        """
        with self._lock:
            portal, thread = self._portal, self._thread
            if thread is not None and thread.ident == threading.get_ident():
                raise RuntimeError("a Portal cannot be closed from its own event loop thread")
            self._closed = True
            lives, self._lives = list(self._lives), set()
        for life in lives:
            life.close()
        with self._lock:
            self._portal = None
        if portal is None or thread is None:
            return
        try:
            portal.call(portal.stop, True)
        except RuntimeError:  # stopped already
            pass
        thread.join()

    def _register(self, life: "_Lifetime") -> None:
        with self._lock:
            self._lives.add(life)

    def _unregister(self, life: "_Lifetime") -> None:
        with self._lock:
            self._lives.discard(life)

    def __repr__(self) -> str:
        state = "running" if self._portal is not None else ("closed" if self._closed else "new")
        return f"<Portal {self.backend} {state}>"


# -- receipts and messages ---------------------------------------------------------------


#: The condition shared by futures created finished (:meth:`ReceiptFuture._confirmed`).
_DONE_CONDITION = threading.Condition()


class ReceiptFuture(concurrent.futures.Future):
    """A pending RECEIPT as a concurrent.futures.Future, from ``send(..., receipt=True, wait=False)``.

    ``result(timeout)`` returns the receipt id once the broker confirmed the
    frame and raises what made that impossible (``ServerError``,
    ``ConnectionLostError``, ``FlowControlError``, ``ClientClosedError``), or
    :class:`~stompfast.ReceiptTimeout` when ``timeout`` seconds pass first (the
    receipt stays pending: wait again, or :meth:`Client.flush`). It works with
    :func:`concurrent.futures.wait` and ``as_completed``. The frame is already
    on its way, so ``cancel()`` returns False.
    """

    def __init__(self, receipt: Receipt) -> None:
        super().__init__()
        self._receipt = receipt
        self.set_running_or_notify_cancel()

    @property
    def receipt_id(self) -> str:
        return self._receipt.receipt_id

    @property
    def error(self) -> Optional[BaseException]:
        """What failed the receipt (None while pending or once confirmed)."""
        return super().exception(0) if self.done() else None

    def wait(self, *, timeout: Optional[float] = None) -> "ReceiptFuture":
        """Wait for the RECEIPT and return this future; raise like :meth:`result`."""
        self.result(timeout)
        return self

    def result(self, timeout: Optional[float] = None) -> Any:
        """The receipt id, once confirmed; ReceiptTimeout after ``timeout`` seconds."""
        try:
            return super().result(_check_timeout(timeout))
        except concurrent.futures.TimeoutError:
            if self.done():  # the receipt's own error is a TimeoutError, or it came just now
                return super().result(0)
            raise ReceiptTimeout(
                f"no RECEIPT {self.receipt_id!r} within {timeout:g} s",
                receipt_id=self.receipt_id,
                timeout=timeout,
            ) from None

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """The receipt's failure (None once confirmed); ReceiptTimeout after ``timeout`` seconds."""
        try:
            return super().exception(_check_timeout(timeout))
        except concurrent.futures.TimeoutError:
            raise ReceiptTimeout(
                f"no RECEIPT {self.receipt_id!r} within {timeout:g} s",
                receipt_id=self.receipt_id,
                timeout=timeout,
            ) from None

    @classmethod
    def _confirmed(cls, receipt: Receipt) -> "ReceiptFuture":
        """A future born done (``send(receipt=True)`` returns one per call, after the RECEIPT came).

        What ``__init__`` + ``set_running_or_notify_cancel`` + ``set_result`` leave
        behind, without their locking and notifying: nobody can be waiting on a
        future nobody has seen yet. Finished futures never wait or notify on their
        condition (they only enter it briefly), so they share one.
        """
        future = cls.__new__(cls)
        future._condition = _DONE_CONDITION
        future._state = concurrent.futures._base.FINISHED
        future._result = receipt.receipt_id
        future._exception = None
        future._waiters = []
        future._done_callbacks = []  # type: ignore[attr-defined]  # (typeshed leaves it out)
        future._receipt = receipt
        return future

    def _settle(self, error: Optional[BaseException]) -> None:
        if self.done():
            return
        if error is None:
            self.set_result(self.receipt_id)
        else:
            self.set_exception(error)

    def __repr__(self) -> str:
        state = "pending" if not self.done() else ("failed" if self.error is not None else "confirmed")
        return f"<ReceiptFuture {self.receipt_id!r} {state}>"


class SyncMessage(Message):
    """A :class:`~stompfast.Message` from a sync subscription: ``ack()`` and ``nack()`` block.

    Everything else (``body``, ``text``, ``headers``, ``destination``,
    ``message_id``, ``ack_id``, ...) is the received message's: it *is* the
    received message, re-classed when a thread takes it (no copy, no wrapper), with
    the sync :class:`Subscription` it came through.
    """

    __slots__ = ()

    def ack(  # type: ignore[override]  # the blocking twin: it returns once done, nothing to await
        self, *, transaction: Optional[str] = None, receipt: bool = False, timeout: Optional[float] = None
    ) -> None:
        """Acknowledge the message (cumulative in ``client`` mode); see :meth:`Subscription.ack_message`."""
        self._sync.ack_message(self, transaction=transaction, receipt=receipt, timeout=timeout)

    def nack(  # type: ignore[override]  # the blocking twin: it returns once done, nothing to await
        self, *, transaction: Optional[str] = None, receipt: bool = False, timeout: Optional[float] = None
    ) -> None:
        """Refuse the message (STOMP 1.1+); see :meth:`Subscription.nack_message`."""
        self._sync.nack_message(self, transaction=transaction, receipt=receipt, timeout=timeout)


# -- tasks run in the loop -----------------------------------------------------------------


def _connect_timeout(client: AsyncClient, timeout: Optional[float]) -> ConnectTimeout:
    ep = client.endpoint
    return ConnectTimeout(f"no CONNECTED from {ep.host}:{ep.port} within {timeout:g} s", timeout=timeout)


async def _host(
    client: AsyncClient,
    closing: anyio.Event,
    timeout: Optional[float],
    ready: "concurrent.futures.Future[None]",
    drainer: Callable[[], Coroutine[Any, Any, None]],
) -> None:
    """Hold ``async with client`` open in one task until ``closing`` is set; run ``drainer`` meanwhile.

    ``timeout`` bounds the connect only: the deadline is lifted once connected.
    It is set on a scope around the whole block because the client's task group
    is entered inside ``__aenter__`` and must be left outside any scope entered
    after it.
    """
    try:
        with anyio.CancelScope() as scope:
            if timeout is not None:
                scope.deadline = anyio.current_time() + timeout
            async with client:
                if scope.cancel_called:  # the deadline passed just as CONNECTED came
                    raise _connect_timeout(client, timeout)
                scope.deadline = math.inf
                ready.set_result(None)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(drainer, name="stompfast-sync-drainer")
                    await closing.wait()
                    tg.cancel_scope.cancel()
        if scope.cancelled_caught and not ready.done():
            raise _connect_timeout(client, timeout)
    except anyio.get_cancelled_exc_class():
        if not ready.done():
            ready.set_exception(ClientClosedError("the client's event loop stopped while connecting"))
        raise
    except BaseException as exc:
        if not ready.done():
            ready.set_exception(exc)
        else:
            raise


async def _send_pipelined(
    send: Callable[[], Awaitable[Receipt]],
    timeout: Optional[float],
    on_timeout: Callable[[], BaseException],
    ready: "concurrent.futures.Future[ReceiptFuture]",
    outstanding: Set[ReceiptFuture],
) -> None:
    """Send with a receipt, hand back a ReceiptFuture at once, then settle it when the RECEIPT comes.

    ``outstanding`` (touched only in the loop) lets flush() settle the futures
    it covered in the step it returns, before this task's turn comes.
    """
    try:
        receipt = await _bounded(send, timeout, on_timeout)
    except anyio.get_cancelled_exc_class():
        ready.set_exception(ClientClosedError("the client's event loop stopped"))
        raise
    except BaseException as exc:
        ready.set_exception(exc)
        return
    future = ReceiptFuture(receipt)
    outstanding.add(future)
    ready.set_result(future)
    try:
        await receipt.wait()
    except anyio.get_cancelled_exc_class():
        future._settle(ClientClosedError("the client's event loop stopped before the RECEIPT came"))
        raise
    except BaseException as exc:
        future._settle(exc)
    else:
        future._settle(None)
    finally:
        outstanding.discard(future)


def _settle_done(futures: Iterable[Optional[ReceiptFuture]]) -> None:
    """(In the loop.) Settle every future whose RECEIPT came or failed, without waiting for its watcher."""
    for future in list(futures):
        if future is not None and future._receipt.done():
            error = future._receipt.error
            future._settle(None if error is None else copy_error(error))


async def _wait_and_settle(
    wait: Callable[[], Awaitable[None]], futures: Iterable[Optional[ReceiptFuture]]
) -> None:
    await wait()
    _settle_done(futures)


async def _open_subscription(
    client: AsyncClient, destination: str, kwargs: Dict[str, Any]
) -> AsyncSubscription:
    """Create and enter an AsyncSubscription; unsubscribe again if entering fails or times out."""
    sub = client.subscribe(destination, **kwargs)
    try:
        await sub.__aenter__()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await sub.aclose()
        raise
    return sub


class _Lifetime:
    """A client's connection as its finalizer and its Portal see it: no reference to the Client.

    Closing sets ``closing``, so the host task leaves ``async with`` normally and
    DISCONNECT goes out; a cancelled host task could not send it (the async
    client's writer is cancelled with it).
    """

    __slots__ = ("portal", "closing", "owner", "shared", "host")

    def __init__(
        self, portal: BlockingPortal, closing: anyio.Event, owner: Optional[Portal], shared: Optional[Portal]
    ) -> None:
        self.portal = portal
        self.closing = closing
        self.owner = owner  # the Portal the client started for itself
        self.shared = shared  # the Portal it was given
        self.host: Optional["concurrent.futures.Future[None]"] = None

    def close(self) -> None:
        """End the host task (DISCONNECT, bounded by disconnect_timeout) and wait for it; idempotent."""
        if self.shared is not None:
            self.shared._unregister(self)
        host = self.host
        if host is None or host.done():
            return
        try:
            self.portal.call(self.closing.set)
            host.result()
        except (RuntimeError, concurrent.futures.CancelledError):
            pass  # the loop is gone (an anyio portal stopped first): nothing left to close

    def abandon(self) -> None:
        """Finalizer of a Client dropped without close(): close it in a thread (GC can run anywhere)."""

        def close() -> None:
            try:
                self.close()
                if self.owner is not None:
                    self.owner.close()
            except Exception:  # pragma: no cover - nothing to report to at this point
                log.debug("closing an abandoned client failed", exc_info=True)

        threading.Thread(target=close, name="stompfast-finalizer", daemon=True).start()


class _Handover:
    """One result handed from the event loop to one waiting thread: a lock released once.

    Cheaper than a concurrent.futures.Future (no condition, no callbacks): the
    thread blocks in ``acquire`` and the loop's ``set`` releases it.
    """

    __slots__ = ("_lock", "value", "error")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self.value: Any = None
        self.error: Optional[BaseException] = None

    def set(self, value: Any = None, error: Optional[BaseException] = None) -> None:
        """(In the loop, once.)"""
        self.value = value
        self.error = error
        self._lock.release()

    def wait(self, timeout: Optional[float], loop_thread: threading.Thread) -> bool:
        """(In the waiting thread.) True once set; False after ``timeout``; ClientClosedError if the loop died."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = LOOP_CHECK_INTERVAL
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return False
            if self._lock.acquire(timeout=wait):
                return True
            if not loop_thread.is_alive():
                raise ClientClosedError("the client's event loop stopped while waiting")


class _Outbox:
    """The sync client's ordered queue of receipt-less frames, written by one drainer task in the loop.

    Calling threads ``put`` sends and acks; the first ``put`` into an idle queue
    wakes the drainer with one cheap loop wake-up (``call_soon``, no task, no
    future), so a burst of frames costs one crossing, not one per frame. The
    drainer lives for the connection (in the client's host task) and writes the
    queue in order through the async client, which applies its backpressure.
    It holds no reference to the :class:`Client` (an abandoned client must
    still be garbage collected and closed by its finalizer).
    """

    __slots__ = ("queue", "queued_bytes", "lock", "idle", "active", "wakeup", "ended", "error", "_send",
                 "_check", "_call_soon", "_loop_thread")

    def __init__(self, send: Callable[..., Awaitable[Any]], check: Callable[..., None],
                 call_soon: Callable[[Callable[[], Any]], Any], loop_thread: threading.Thread) -> None:
        self.queue: Deque[Tuple[Any, ...]] = deque()
        self.queued_bytes = 0
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)  # notified when the queue is written out (or dropped)
        self.active = False  # the drainer was woken for the queue and has not emptied it yet
        self.wakeup: Optional[anyio.Event] = None  # (loop side) the drainer waits on it
        self.ended = False  # the drainer has run and is gone
        self.error: Optional[BaseException] = None  # what stopped the last drain, raised by the next call
        self._send = send
        self._check = check  # raises what the session's version cannot carry (AsyncClient.check_send)
        self._call_soon = call_soon
        self._loop_thread = loop_thread

    def put(self, item: Tuple[Any, ...], size: int) -> None:
        """(Any thread.) Queue one frame's arguments; wake the drainer if the queue was idle."""
        with self.lock:
            self.queue.append(item)
            self.queued_bytes += size
            if self.active:
                return
            self.active = True
        try:
            self._call_soon(self._wake)
        except RuntimeError:  # the loop is gone
            self._drop()
            raise ClientClosedError("the client is closed (its event loop has stopped)") from None

    def _drop(self) -> None:
        with self.lock:
            self.queue.clear()
            self.queued_bytes = 0
            self.active = False
            self.idle.notify_all()

    def wait_written(self, timeout: Optional[float]) -> None:
        """(Any thread.) Wait until the drainer emptied the queue; StompTimeout after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while self.active:
                wait = LOOP_CHECK_INTERVAL
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        raise StompTimeout(
                            f"the queued sends were not written within {timeout:g} s (no room in the send buffer)"
                        )
                if not self.idle.wait(wait) and not self._loop_thread.is_alive():
                    self.queue.clear()
                    self.queued_bytes = 0
                    self.active = False
                    raise ClientClosedError("the client's event loop stopped while writing queued sends")

    def _wake(self) -> None:
        """(In the loop.)"""
        wakeup = self.wakeup
        if wakeup is not None:
            wakeup.set()
            return
        if not self.ended:
            return  # the drainer has not started yet: it looks at ``active`` when it does
        # The drainer is gone (the connection's host task has ended): nothing will
        # write these; end the waits instead of leaving them for ever.
        with self.lock:
            self.queue.clear()
            self.queued_bytes = 0
            self.active = False
            if self.error is None:
                self.error = ClientClosedError("the client is closed")
            self.idle.notify_all()

    async def drainer(self) -> None:
        """(In the loop, for the life of the connection.) Write the queue out, woken once per burst."""
        self.wakeup = anyio.Event()
        if self.active:  # woken before we were listening
            self.wakeup.set()
        try:
            while True:
                await self.wakeup.wait()
                self.wakeup = anyio.Event()
                await self._drain()
        finally:
            self.wakeup = None
            self.ended = True

    def _unencodable(self, destination: Any, headers: Any, content_type: Any) -> bool:
        """True when the session's version cannot carry this SEND (the check its caller made)."""
        try:
            self._check(destination, headers, content_type)
        except (LocalProtocolError, TypeError):
            return True
        return False

    async def _drain(self) -> None:
        send = self._send
        queue = self.queue
        batch: List[Tuple[Any, ...]] = []
        try:
            while True:
                with self.lock:
                    if not queue:
                        self.active = False
                        self.idle.notify_all()
                        return
                    batch = list(queue)
                    queue.clear()
                    self.queued_bytes = 0
                for i, (destination, body, headers, content_type) in enumerate(batch):
                    try:
                        if destination is None:  # an ACK: (None, subscription, message, None)
                            try:
                                if not body.ack_nowait(headers):  # no await per ACK unless it must wait
                                    await body.ack_message(headers)
                            except StaleMessageError:
                                # its connection was lost after the ACK was queued: the
                                # broker redelivers the message; nothing to report later
                                log.debug("dropped a queued ACK of %r: its connection was lost", headers)
                        else:
                            try:
                                await send(destination, body, headers=headers, content_type=content_type)
                            except (LocalProtocolError, TypeError) as exc:
                                if not self._unencodable(destination, headers, content_type):
                                    raise  # the session refused it (its state): as any failure
                                # checked when queued, so only a session of another version
                                # (a failover) gets here: this frame cannot be written, the
                                # rest can; the next call reports it
                                log.error("a queued SEND to %r could not be encoded: %s", destination, exc)
                                if self.error is None:
                                    self.error = exc
                    except Exception:
                        batch = batch[i:]
                        raise
                batch = []
        except BaseException as exc:
            with self.lock:
                dropped = len(batch) + len(queue)
                queue.clear()
                self.queued_bytes = 0
                self.active = False
                if isinstance(exc, Exception):
                    if dropped and hasattr(exc, "add_note"):  # Python 3.11+
                        exc.add_note(f"{dropped} queued send(s) of this client were not written")
                    self.error = exc
                self.idle.notify_all()
            if not isinstance(exc, Exception):
                raise


# -- the client ----------------------------------------------------------------------------


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
        self._closed = False
        self._connected = False
        self._callback_subs: Set["Subscription"] = set()
        self._outstanding: Set[ReceiptFuture] = set()  # pipelined receipts not settled yet (loop only)
        # Sends without a receipt: queued here by the calling threads, written by one
        # drain task per burst (one thread crossing per burst, not per message).
        self._outbox: _Outbox  # receipt-less sends and acks, written by one drainer per burst
        self._fast_limit_bytes = send_buffer_bytes
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
        self._loop_thread_id: Optional[int] = None
        self._loop_thread: Optional[threading.Thread] = None
        self._aio_loop: Any = None  # the asyncio loop the portal runs (None on trio)
        self._call_soon: Callable[[Callable[[], Any]], Any]  # runs fn() in the loop, from any thread
        build = functools.partial(AsyncClient, url, **options)
        try:
            # The async client makes anyio primitives, which belong to the loop: build it there.
            self._async, self._closing, self._loop_thread, self._aio_loop, self._call_soon = self._wait(
                self._spawn(
                    lambda: (
                        build(), anyio.Event(), threading.current_thread(), _running_asyncio_loop(),
                        _call_soon_threadsafe(),
                    )
                )
            )
            self._loop_thread_id = self._loop_thread.ident
            self._outbox = _Outbox(self._async.send, self._async.check_send, self._call_soon, self._loop_thread)
        except BaseException:
            if self._owner is not None:
                self._owner.close()
            raise
        self._life = _Lifetime(blocking, self._closing, self._owner, shared)
        self._finalizer = weakref.finalize(self, self._life.abandon)
        self._finalizer.atexit = False  # at exit the daemon threads simply end with the process

    # -- crossing into the loop -----------------------------------------------------------

    def _spawn(self, fn: Callable[..., Any], *args: Any) -> "concurrent.futures.Future[Any]":
        try:
            return self._portal.start_task_soon(fn, *args)
        except RuntimeError as exc:  # the portal is stopped, or we are on its own thread
            if self._loop_thread_id == threading.get_ident():
                raise RuntimeError(
                    "a sync Client cannot be called from its own event loop thread; use AsyncClient there"
                ) from exc
            raise ClientClosedError("the client is closed (its event loop has stopped)") from exc

    @staticmethod
    def _wait(
        future: "concurrent.futures.Future[Any]", task: Optional["concurrent.futures.Future[Any]"] = None
    ) -> Any:
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise ClientClosedError("the client's event loop stopped while waiting") from None
        except BaseException:
            if not future.done():  # interrupted here (KeyboardInterrupt): cancel the wait in the loop too
                (task or future).cancel()
            raise

    def _call(
        self,
        fn: Callable[[], Awaitable[Any]],
        timeout: Optional[float] = None,
        on_timeout: Optional[Callable[[], BaseException]] = None,
    ) -> Any:
        """Run ``fn()`` in the loop, bounded by ``timeout`` there, and return its result here.

        On asyncio the call is a plain task made with ``run_coroutine_threadsafe``:
        one hand-over into the loop and one back. anyio's ``start_task_soon`` first
        waits for the loop to start a task in the portal's task group (a round trip
        of its own), which made a sync round trip (a receipt, a receive) cost ~3x
        stomp.py's CPU. The task is not in that task group; what ends it is what
        ends any call: its result, the client failing or closing (the async client
        fails its waiters), or the loop shutting down, which cancels every task.
        """
        if timeout is not None:
            assert on_timeout is not None
        loop = self._aio_loop
        if loop is None:
            return self._wait(self._spawn(_bounded, fn, timeout, on_timeout))
        if self._loop_thread_id == threading.get_ident():
            raise RuntimeError("a sync Client cannot be called from its own event loop thread; use AsyncClient there")
        if not loop.is_running():
            raise ClientClosedError("the client is closed (its event loop has stopped)")
        coro = _bounded(fn, timeout, on_timeout)
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # the loop closed just now
            coro.close()
            raise ClientClosedError("the client is closed (its event loop has stopped)") from None
        return self._wait_on_loop(future, loop)

    @staticmethod
    def _wait_on_loop(future: "concurrent.futures.Future[Any]", loop: Any) -> Any:
        """:meth:`_wait` for a task handed to ``loop`` directly: a loop that ends before running it ends the wait."""
        while True:
            try:
                return future.result(LOOP_CHECK_INTERVAL)
            except concurrent.futures.CancelledError:
                raise ClientClosedError("the client's event loop stopped while waiting") from None
            except BaseException as exc:
                if future.done():
                    raise  # the call's own outcome (its timeouts included)
                if isinstance(exc, TimeoutError):  # only this wait's check interval
                    if loop.is_closed():  # the loop stopped before it ever ran the task
                        future.cancel()
                        raise ClientClosedError("the client's event loop stopped while waiting") from None
                    continue
                future.cancel()  # interrupted here (KeyboardInterrupt): cancel the call in the loop too
                raise

    # -- sends without a receipt ----------------------------------------------------------

    def _send_queued(
        self, destination: str, body: Any, headers: Optional[Mapping[str, Any]], content_type: Optional[str],
        timeout: Optional[float],
    ) -> None:
        """Queue a SEND for the outbox's drainer (the fast path of ``send``).

        The frame is encoded and written in the loop, in the order the calls
        were made. A failure to write it (the connection ended) is raised by the
        next call that sends. When the queue holds ``send_buffer_bytes`` or
        10,000 messages, the caller waits for it to drain (backpressure, bounded
        by ``timeout``).
        """
        outbox = self._outbox
        if outbox.error is not None or self._closed:
            self._raise_fast_error()
        failed = self._async.error  # read across threads: set once, never cleared
        if failed is not None:
            raise copy_error(failed)
        if type(body) is not bytes and not isinstance(body, (str, bytearray, memoryview)):
            raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
        if headers is not None or content_type is not None or type(destination) is not str \
                or not destination.isprintable():
            self._check_queued(destination, headers, content_type)
        if len(outbox.queue) >= _FAST_MAX_MESSAGES or outbox.queued_bytes >= self._fast_limit_bytes:
            self._sync_fast(timeout)
        outbox.put((destination, body, headers, content_type), len(body))

    def _check_queued(self, destination: Any, headers: Optional[Mapping[str, Any]], content_type: Any) -> None:
        """Refuse here, in this call, what the session's version cannot carry (not later, in the drainer)."""
        self._async.check_send(destination, headers, content_type)

    def _ack_queued(self, sub: AsyncSubscription, message: Message, timeout: Optional[float]) -> None:
        """Queue an ACK (no receipt, no transaction) behind the queued sends; checked here first."""
        outbox = self._outbox
        if outbox.error is not None or self._closed:
            self._raise_fast_error()
        failed = self._async.error
        if failed is not None:
            raise copy_error(failed)
        # The refusals that need no I/O, raised here rather than by a later call:
        # a stale message, then the protocol's own (auto mode, a subscription gone).
        sub.check_ack(message)
        if len(outbox.queue) >= _FAST_MAX_MESSAGES:
            self._sync_fast(timeout)
        outbox.put((None, sub, message, None), 0)

    def _sync_fast(self, timeout: Optional[float]) -> None:
        """Wait until the queued sends are written; raise what stopped them."""
        self._outbox.wait_written(timeout)
        if self._outbox.error is not None:
            self._raise_fast_error()

    def _write_queued_before_closing(self, timeout: float) -> None:
        """Let the queued receipt-less frames go out before a close, for at most ``timeout`` seconds.

        A broker that stops reading (TCP flow control, as RabbitMQ applies in a
        memory or disk alarm) must not hold a close for ever: what is still
        queued then is dropped with the connection, and said so in the log.
        """
        try:
            self._sync_fast(timeout)
        except StompTimeout:
            log.warning(
                "stompfast: closing with %d queued frame(s) unwritten after %g s (the broker is not reading)",
                len(self._outbox.queue), timeout,
            )
        except StompError:
            pass  # the connection failed: they could not be written; close anyway

    def _raise_fast_error(self) -> None:
        outbox = self._outbox
        error, outbox.error = outbox.error, None
        if error is not None:
            raise error
        raise ClientClosedError("the client is closed")

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
        timeout = _check_timeout(timeout)
        with self._lock:
            if self._closed or self._connected:
                raise ClientClosedError("a Client connects once; create a new one to connect again")
            self._connected = True
            ready: "concurrent.futures.Future[None]" = concurrent.futures.Future()
            life = self._life
            life.host = self._spawn(_host, self._async, self._closing, timeout, ready, self._outbox.drainer)
            if life.shared is not None:
                life.shared._register(life)
        try:
            self._wait(ready, life.host)
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
        if not self._closed:
            self._write_queued_before_closing(budget)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for sub in self._callback_subs:
                sub._stopping = True  # what a callback thread took but did not deliver yet is dropped
        # One budget for the whole close: what the queued sends used of it is not
        # waited for again on the DISCONNECT receipt.
        remaining = deadline - time.monotonic()
        if remaining < budget:
            self._async.disconnect_timeout = max(remaining, 0.001)
        try:
            self._life.close()
        finally:
            with self._lock:
                subs = list(self._callback_subs)
            for sub in subs:
                sub._join()
            if self._owner is not None:
                self._owner.close()
            self._finalizer.detach()

    # -- sending --------------------------------------------------------------------------

    @overload
    def send(
        self, destination: str, body: Union[bytes, bytearray, memoryview, str] = ..., *,
        headers: Optional[Mapping[str, Any]] = ..., content_type: Optional[str] = ...,
        receipt: Literal[False] = ..., wait: bool = ..., timeout: Optional[float] = ...,
    ) -> None: ...

    @overload
    def send(
        self, destination: str, body: Union[bytes, bytearray, memoryview, str] = ..., *,
        headers: Optional[Mapping[str, Any]] = ..., content_type: Optional[str] = ...,
        receipt: Literal[True], wait: bool = ..., timeout: Optional[float] = ...,
    ) -> ReceiptFuture: ...

    @overload
    def send(
        self, destination: str, body: Union[bytes, bytearray, memoryview, str] = ..., *,
        headers: Optional[Mapping[str, Any]] = ..., content_type: Optional[str] = ...,
        receipt: bool = ..., wait: bool = ..., timeout: Optional[float] = ...,
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
    ) -> Optional[ReceiptFuture]:
        """Send a message to ``destination`` (body rules as :meth:`AsyncClient.send`).

        Without ``receipt`` the frame is queued and the call returns. With
        ``receipt=True`` it returns a confirmed :class:`ReceiptFuture` once the
        broker confirmed the frame, or with ``wait=False`` at once, pending.

        Raises:
            ReceiptTimeout: ``receipt`` and no RECEIPT within ``timeout`` (the
                frame was sent; its receipt may still come).
            StompTimeout: no room in the send buffer within ``timeout``.
            ServerError, ConnectionLostError, LocalProtocolError: as AsyncClient.send.
        """
        timeout = _check_timeout(timeout)
        if not receipt:
            self._send_queued(destination, body, headers, content_type, timeout)
            return None
        self._sync_fast(timeout)  # keep the order of sends made from this client

        def on_timeout() -> BaseException:  # built only when it happens (this is the hot path)
            return ReceiptTimeout(f"no RECEIPT for the SEND to {destination!r} within {timeout:g} s", timeout=timeout)

        if wait:
            confirmed = self._send_and_wait(destination, body, headers, content_type, timeout, on_timeout)
            if confirmed is None:  # it would have had to wait in the loop (reconnecting, buffer full): a task
                send = functools.partial(
                    self._async.send, destination, body, headers=headers, content_type=content_type, receipt=True
                )
                confirmed = self._call(send, timeout, on_timeout)
            return ReceiptFuture._confirmed(confirmed)
        send = functools.partial(
            self._async.send, destination, body, headers=headers, content_type=content_type, receipt=True, wait=False
        )
        ready: "concurrent.futures.Future[ReceiptFuture]" = concurrent.futures.Future()
        task = self._spawn(_send_pipelined, send, timeout, on_timeout, ready, self._outstanding)
        return self._wait(ready, task)

    def _send_and_wait(
        self, destination: str, body: Any, headers: Optional[Mapping[str, Any]], content_type: Optional[str],
        timeout: Optional[float], on_timeout: Callable[[], BaseException],
    ) -> Optional[Receipt]:
        """A SEND with a receipt, confirmed: one loop callback, and this thread woken once, by the RECEIPT.

        No task and no future per call (``_call`` makes both, which doubled the
        CPU of a round trip): the callback writes the frame and hangs this
        thread's wake-up on the receipt. Returns None, having sent nothing, when
        the send would have to wait in the loop (then a task does it).
        """
        handover = _Handover()
        client = self._async
        # Plain TCP on the stock asyncio loop, nothing queued ahead: this thread
        # writes the SEND itself and the loop wakes only for the RECEIPT.
        direct = client.send_from_thread(destination, body, headers, content_type, handover.set)
        if direct is not None:
            return self._receipt_when_done(handover, timeout, on_timeout)

        def start() -> None:  # in the loop
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
        self, handover: "_Handover", timeout: Optional[float], on_timeout: Callable[[], BaseException]
    ) -> Optional[Receipt]:
        """Wait for ``handover`` (a receipt done, a refusal, or None); raise the receipt's failure."""
        if not handover.wait(timeout, self._loop_thread):  # type: ignore[arg-type]
            raise on_timeout()
        if handover.error is not None:
            raise handover.error
        receipt = handover.value
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
        timeout = _check_timeout(timeout)
        futures = list(receipts)
        pending: List[Optional[Receipt]] = []
        for r in futures:
            if r is not None and not isinstance(r, ReceiptFuture):
                raise TypeError(f"wait_receipts takes the ReceiptFutures of this client, not {r!r}")
            pending.append(None if r is None else r._receipt)
        self._call(
            functools.partial(
                _wait_and_settle, functools.partial(self._async.wait_receipts, pending), futures
            ),
            timeout,
            _timeout_error(ReceiptTimeout, f"not every one of {len(pending)} RECEIPTs came", timeout),
        )

    def flush(self, *, timeout: Optional[float] = None) -> None:
        """Return once the broker confirmed everything sent before this call (see AsyncClient.flush).

        When it returns, every ReceiptFuture of an earlier send is done.

        Raises:
            ReceiptTimeout: not confirmed within ``timeout``.
        """
        timeout = _check_timeout(timeout)
        self._sync_fast(timeout)
        self._call(
            functools.partial(_wait_and_settle, self._async.flush, self._outstanding),
            timeout,
            _timeout_error(ReceiptTimeout, "flush: not confirmed", timeout),
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
        callback: Optional[Callback] = None,
        on_error: Optional[ErrorHandler] = None,
        timeout: Optional[float] = None,
    ) -> "Subscription":
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
        timeout = _check_timeout(timeout)
        if callback is not None and not callable(callback):
            raise ConfigurationError(f"callback must be callable, not {callback!r}")
        if on_error is not None and (callback is None or not callable(on_error)):
            raise ConfigurationError("on_error needs a callback= and must be callable")
        kwargs = {"ack": ack, "headers": headers, "buffer_size": buffer_size, "receipt": receipt, "id": id}
        sub = self._call(
            functools.partial(_open_subscription, self._async, destination, kwargs),
            timeout,
            _timeout_error(ReceiptTimeout, f"no RECEIPT for the SUBSCRIBE to {destination!r}", timeout),
        )
        subscription = Subscription(self, sub, callback, on_error)
        if callback is not None:
            with self._lock:
                self._callback_subs.add(subscription)
            subscription._start()
        return subscription

    def ack(self, message: Message, *, receipt: bool = False, timeout: Optional[float] = None) -> None:
        """Acknowledge ``message`` (same as ``message.ack()``)."""
        self._call(
            functools.partial(self._async.ack, message, receipt=receipt),
            _check_timeout(timeout),
            _timeout_error(ReceiptTimeout if receipt else StompTimeout, "ACK not confirmed", timeout),
        )

    def nack(self, message: Message, *, receipt: bool = False, timeout: Optional[float] = None) -> None:
        """Refuse ``message`` (same as ``message.nack()``; STOMP 1.1+)."""
        self._call(
            functools.partial(self._async.nack, message, receipt=receipt),
            _check_timeout(timeout),
            _timeout_error(ReceiptTimeout if receipt else StompTimeout, "NACK not confirmed", timeout),
        )

    def transaction(self, *, receipt: bool = True, timeout: Optional[float] = None) -> "Transaction":
        """A transaction: ``with client.transaction() as tx:``.

        BEGIN on entry; COMMIT on normal exit (confirmed by a receipt unless
        ``receipt=False``; ``timeout`` bounds it: ReceiptTimeout); ABORT on an
        exception.
        """
        return Transaction(self, self._async.transaction(receipt=receipt), _check_timeout(timeout))

    def _forget(self, sub: "Subscription") -> None:
        with self._lock:
            self._callback_subs.discard(sub)

    def __repr__(self) -> str:
        state = "connected" if self.is_connected else ("closed" if self._closed else "not connected")
        return f"<Client {self._async.endpoint.url} {state}>"


Client.__init__.__signature__ = options_signature(Client.__init__)  # type: ignore[attr-defined]


# -- subscriptions -----------------------------------------------------------------------------


class Subscription:
    """A subscription of a sync :class:`Client`: ``with client.subscribe(dest) as sub: for msg in sub: ...``.

    Iterate it, or call :meth:`receive` / :meth:`receive_batch` (alias
    :meth:`receive_many`); they may be called from several threads at once,
    each message going to one of them. Iteration ends when the subscription or
    the client is closed, and raises the connection's failure after the
    buffered messages were handed out. :meth:`close` (or leaving the ``with``
    block) unsubscribes and drops the buffered messages.

    With ``callback=`` the messages go to the callback in the subscription's
    own thread instead, and ``receive`` and iteration are refused.
    """

    def __init__(
        self,
        client: Client,
        sub: AsyncSubscription,
        callback: Optional[Callback] = None,
        on_error: Optional[ErrorHandler] = None,
    ) -> None:
        self._client = client
        self._async = sub
        # Threads take the messages straight from the async buffer (no crossing into the loop)
        self._handoff = sub.handoff(client._call_soon, client._loop_thread.is_alive)  # type: ignore[union-attr]
        self._callback = callback
        self._on_error = on_error
        self._worker: Optional[threading.Thread] = None
        self._stopping = False

    # -- what the async subscription knows -------------------------------------------------

    @property
    def destination(self) -> str:
        return self._async.destination

    @property
    def ack_mode(self) -> str:
        return self._async.ack_mode

    @property
    def headers(self) -> Dict[str, Any]:
        """The SUBSCRIBE headers sent (yours plus the prefetch ones added in client modes)."""
        return self._async.headers

    @property
    def buffer_size(self) -> int:
        return self._async.buffer_size

    @property
    def id(self) -> Optional[str]:
        return self._async.id

    @property
    def pending(self) -> int:
        """Messages received and not yet taken."""
        return self._async.pending

    @property
    def closed(self) -> bool:
        return self._async.closed

    # -- pulling messages -------------------------------------------------------------------

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __iter__(self) -> "Subscription":
        return self

    def __next__(self) -> SyncMessage:
        if self._callback is not None:
            self._check_pull()
        try:
            message = self._handoff.take(None)
        except ClientClosedError:  # the client's loop stopped under the wait: iteration ends
            message = None
        if message is None:
            raise StopIteration
        message.__class__ = SyncMessage  # (the same object: no copy, no wrapper)
        message._sync = self
        return message  # type: ignore[return-value]

    def receive(self, *, timeout: Optional[float] = None) -> SyncMessage:
        """The next message; waits for one.

        Raises:
            ReceiveTimeout: none came within ``timeout`` (no message is lost:
                one arriving later is there for the next call).
            ClientClosedError: the subscription or the client was closed.
            ConnectionLostError, ServerError, HeartbeatTimeout: the connection
                failed (after every buffered message was handed out).
        """
        self._check_pull()
        return self._take(1, _check_timeout(timeout))[0]

    def receive_batch(self, max_messages: int = 100, *, timeout: Optional[float] = None) -> List[SyncMessage]:
        """Up to ``max_messages`` messages: what is buffered, waiting only for the first.

        Raises like :meth:`receive` (ReceiveTimeout when not even one came).
        """
        if type(max_messages) is not int or max_messages < 1:
            raise ConfigurationError(f"max_messages must be a positive int, not {max_messages!r}")
        self._check_pull()
        return self._take(max_messages, _check_timeout(timeout))

    def receive_many(self, max_messages: int = 100, *, timeout: Optional[float] = None) -> List[SyncMessage]:
        """Same as :meth:`receive_batch`."""
        return self.receive_batch(max_messages, timeout=timeout)

    def _check_pull(self) -> None:
        if self._callback is not None:
            raise ConfigurationError(
                f"subscription {self.id!r} delivers its messages to its callback; subscribe without"
                " callback= to receive or iterate"
            )

    def _take(self, max_messages: int, timeout: Optional[float]) -> List[SyncMessage]:
        """Up to ``max_messages`` messages as SyncMessages, waiting up to ``timeout`` for the first."""
        try:
            batch = self._handoff.take_batch(max_messages, timeout)
        except WaitTimeout:
            raise ReceiveTimeout(
                f"no message on {self.destination!r} within {timeout:g} s",
                destination=self.destination,
                timeout=timeout,
            ) from None
        if not batch:  # closed without a failure (a failure was raised by take_batch)
            raise ClientClosedError(f"subscription {self.id!r} to {self.destination!r} is closed")
        for message in batch:
            message.__class__ = SyncMessage
            message._sync = self
        return batch  # type: ignore[return-value]

    # -- acknowledging ----------------------------------------------------------------------

    def ack_message(
        self,
        message: Message,
        *,
        transaction: Optional[str] = None,
        receipt: bool = False,
        timeout: Optional[float] = None,
    ) -> None:
        """Acknowledge ``message``; in ``client`` mode this covers every earlier message too.

        Without ``receipt`` or ``transaction`` the ACK is queued with the client's
        other receipt-less frames and written by the loop in order (no wait); a
        message from an ended connection, or an ``auto`` subscription's, is
        refused here at once.
        """
        if not receipt and transaction is None:
            self._client._ack_queued(self._async, message, timeout)
            return
        self._client._call(
            functools.partial(
                self._async.ack_message, message, transaction=transaction, receipt=receipt
            ),
            _check_timeout(timeout),
            _timeout_error(ReceiptTimeout if receipt else StompTimeout, "ACK not confirmed", timeout),
        )

    def nack_message(
        self,
        message: Message,
        *,
        transaction: Optional[str] = None,
        receipt: bool = False,
        timeout: Optional[float] = None,
    ) -> None:
        """Refuse ``message`` (the broker redelivers or dead-letters it); cumulative in ``client`` mode."""
        self._client._call(
            functools.partial(
                self._async.nack_message, message, transaction=transaction, receipt=receipt
            ),
            _check_timeout(timeout),
            _timeout_error(ReceiptTimeout if receipt else StompTimeout, "NACK not confirmed", timeout),
        )

    # -- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Unsubscribe (if the connection is still up), drop the buffered messages, stop the callback thread.

        A callback running now is finished first (unless ``close`` is called by
        the callback itself). Idempotent and safe after a failure.
        """
        self._stopping = True
        budget = self._client.disconnect_timeout  # bounds the whole close, like the client's
        deadline = time.monotonic() + budget
        self._client._write_queued_before_closing(budget)  # queued ACKs go out before the UNSUBSCRIBE
        try:
            self._client._call(
                self._async.aclose,
                max(deadline - time.monotonic(), 0.001),
                lambda: StompTimeout(f"UNSUBSCRIBE of {self.id!r} not queued within {budget:g} s"),
            )
        except StompError:
            # the client is closed, the connection failed, or the broker is not reading:
            # either way the subscription is gone here (its aclose ran to its finally)
            pass
        finally:
            self._join()

    # -- the callback thread ----------------------------------------------------------------------

    def _start(self) -> None:
        worker = threading.Thread(target=self._deliver, name=f"stompfast-callback-{self.id}", daemon=True)
        self._worker = worker
        worker.start()

    def _join(self) -> None:
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join()
        self._client._forget(self)

    def _deliver(self) -> None:
        callback = self._callback
        assert callback is not None
        failure: Optional[BaseException] = None
        try:
            while not self._stopping:
                try:
                    batch = self._handoff.take_batch(CALLBACK_BATCH, None)
                except ClientClosedError:
                    return  # the client was closed (its loop stopped)
                except StompError as exc:
                    failure = exc  # the connection failed
                    return
                if not batch:
                    return
                for message in batch:
                    message.__class__ = SyncMessage
                    message._sync = self
                for message in batch:
                    if self._stopping:
                        return
                    try:
                        callback(message)  # type: ignore[arg-type]  # (re-classed above)
                    except Exception as exc:
                        self._report(exc, message)  # type: ignore[arg-type]
        except BaseException as exc:  # SystemExit, KeyboardInterrupt... from a callback: stop clearly
            failure = exc
        finally:
            if failure is not None:
                self._report(failure, None)
                if not self._stopping:  # tell the broker to stop sending to a consumer that is gone
                    try:
                        self._client._call(self._async.aclose)
                    except StompError:
                        pass

    def _report(self, error: BaseException, message: Optional[SyncMessage]) -> None:
        handler = self._on_error
        if handler is not None:
            try:
                handler(error, message)
                return
            except Exception:
                log.exception(
                    "the on_error handler of subscription %r to %r raised", self.id, self.destination
                )
        if message is not None:
            log.error(
                "the callback of subscription %r to %r raised on message %r; delivery goes on",
                self.id,
                self.destination,
                message.message_id,
                exc_info=error,
            )
        else:
            log.error(
                "subscription %r to %r stopped delivering to its callback",
                self.id,
                self.destination,
                exc_info=error,
            )

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.pending} pending"
        mode = " callback" if self._callback is not None else ""
        return f"<Subscription {self.id!r} to {self.destination!r} ack={self.ack_mode}{mode} {state}>"


# -- transactions -------------------------------------------------------------------------------


class Transaction:
    """An open transaction of a sync :class:`Client`; its ``send``, ``ack`` and ``nack`` carry its id.

    ``with client.transaction() as tx:`` sends BEGIN, then COMMIT when the
    block ends normally or ABORT when it raises.
    """

    def __init__(self, client: Client, tx: AsyncTransaction, timeout: Optional[float]) -> None:
        self._client = client
        self._async = tx
        self._timeout = timeout

    @property
    def id(self) -> Optional[str]:
        """The transaction id (known once BEGIN was sent)."""
        return self._async.id

    def __enter__(self) -> "Transaction":
        timeout = self._timeout
        self._client._call(
            self._async.__aenter__, timeout, _timeout_error(StompTimeout, "BEGIN not sent", timeout)
        )
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        timeout = self._timeout
        self._client._call(
            functools.partial(self._async.__aexit__, exc_type, exc, tb),
            timeout,
            _timeout_error(ReceiptTimeout, f"COMMIT of transaction {self.id!r} not confirmed", timeout),
        )

    def send(
        self,
        destination: str,
        body: Union[bytes, str] = b"",
        *,
        timeout: Optional[float] = None,
        **kwargs: Any,
    ) -> None:
        """Send within the transaction (``headers``, ``content_type``): the broker delivers it on COMMIT."""
        self._client._sync_fast(_check_timeout(timeout))
        self._client._call(
            functools.partial(self._async.send, destination, body, **kwargs),
            _check_timeout(timeout),
            _timeout_error(StompTimeout, "no room in the send buffer", timeout),
        )

    def ack(self, message: Message, *, timeout: Optional[float] = None) -> None:
        """Acknowledge ``message`` within the transaction (takes effect on COMMIT)."""
        self._client._call(
            functools.partial(self._async.ack, message),
            _check_timeout(timeout),
            _timeout_error(StompTimeout, "no room in the send buffer", timeout),
        )

    def nack(self, message: Message, *, timeout: Optional[float] = None) -> None:
        """Refuse ``message`` within the transaction (takes effect on COMMIT)."""
        self._client._call(
            functools.partial(self._async.nack, message),
            _check_timeout(timeout),
            _timeout_error(StompTimeout, "no room in the send buffer", timeout),
        )

    def commit(self, *, timeout: Optional[float] = None) -> None:
        """COMMIT, confirmed by a receipt unless the transaction was made with ``receipt=False``.

        Raises:
            ReceiptTimeout: not confirmed within ``timeout``.
            ServerError: the broker refused it.
        """
        self._client._call(
            self._async.commit,
            _check_timeout(timeout),
            _timeout_error(ReceiptTimeout, f"COMMIT of transaction {self.id!r} not confirmed", timeout),
        )

    def abort(self, *, timeout: Optional[float] = None) -> None:
        """ABORT: the broker drops the transaction's sends and acks."""
        self._client._call(
            self._async.abort,
            _check_timeout(timeout),
            _timeout_error(StompTimeout, "no room in the send buffer", timeout),
        )

    def __repr__(self) -> str:
        return f"<Transaction {self.id!r}>"
