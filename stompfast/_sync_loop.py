"""The sync client's event loop: the loop thread (:class:`Portal`), calling into it
(:class:`SyncLoop`), and holding a client's connection open on it (:func:`host_connection`,
:class:`ClientLifetime`).

Every blocking call of the sync client crosses into an anyio event loop running
in a daemon thread; this module is that crossing and nothing else. What
crosses, and how rarely, is described in :mod:`stompfast._sync`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import threading
from typing import Any, Awaitable, Callable, Coroutine, Dict, Mapping, Optional, Set, Type, TypeVar

import anyio
import sniffio
from anyio.from_thread import BlockingPortal

from ._client import AsyncClient
from ._subscription import LOOP_CHECK_INTERVAL
from .errors import ClientClosedError, ConfigurationError, ConnectTimeout, StompTimeout

log = logging.getLogger("stompfast")
_T = TypeVar("_T")

#: The anyio backends a Portal can run (uvloop is ``backend_options={"use_uvloop": True}``).
BACKENDS = ("asyncio", "trio")


def check_timeout(timeout: Optional[float]) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise ConfigurationError(f"timeout must be None or a number of seconds >= 0, not {timeout!r}")
    return float(timeout)


def running_asyncio_loop() -> Any:
    """The running asyncio loop, or None under another backend (trio)."""
    if sniffio.current_async_library() != "asyncio":
        return None
    return asyncio.get_running_loop()


def call_soon_threadsafe() -> Callable[[Callable[[], Any]], Any]:
    """(In the loop.) A function that runs ``fn()`` in this loop soon, callable from any thread.

    The cheapest way in: one wake-up of the loop, no task, no future (anyio's
    portal makes a task and a future per call). Raises RuntimeError once the
    loop is gone.
    """
    if sniffio.current_async_library() == "asyncio":
        return asyncio.get_running_loop().call_soon_threadsafe
    import trio

    return trio.lowlevel.current_trio_token().run_sync_soon


async def bounded(
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
    # A timeout comes with its error
    assert on_timeout is not None
    # Reached only when our deadline cancelled fn
    raise on_timeout()


def timeout_error(
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
        # Connected clients, closed cleanly by close()
        self._lives: Set["ClientLifetime"] = set()

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
        # The loop could not start, or died
        except BaseException as exc:
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
        # Stopped already
        except RuntimeError:
            pass
        thread.join()

    def register_client(self, life: "ClientLifetime") -> None:
        """(For :class:`Client`.) A client connected through this Portal: :meth:`close` closes it."""
        with self._lock:
            self._lives.add(life)

    def unregister_client(self, life: "ClientLifetime") -> None:
        """(For :class:`Client`.) A client closed: forget it."""
        with self._lock:
            self._lives.discard(life)

    def __repr__(self) -> str:
        state = "running" if self._portal is not None else ("closed" if self._closed else "new")
        return f"<Portal {self.backend} {state}>"


# -- calling into the loop --------------------------------------------------------------


class SyncLoop:
    """The event loop a sync client runs on, as its threads call into it.

    :meth:`spawn` starts a task through the anyio portal, :meth:`call` runs a
    coroutine function there and waits for its result (bounded, in the loop, by
    a timeout), :attr:`call_soon` runs a plain function there with one cheap
    wake-up. The loop's thread, its asyncio loop (None on trio) and
    ``call_soon`` are known once :meth:`bind` was called from a first call
    into the loop.
    """

    def __init__(self, portal: BlockingPortal) -> None:
        self.portal = portal
        self.thread_id: Optional[int] = None
        self.thread: Optional[threading.Thread] = None
        # The asyncio loop the portal runs (None on trio)
        self.aio_loop: Any = None
        # Runs fn() in the loop, from any thread
        self.call_soon: Callable[[Callable[[], Any]], Any]

    def bind(self, thread: threading.Thread, aio_loop: Any, call_soon: Callable[[Callable[[], Any]], Any]) -> None:
        """Record what a first call found in the loop (its thread, asyncio loop, ``call_soon``)."""
        self.thread = thread
        self.thread_id = thread.ident
        self.aio_loop = aio_loop
        self.call_soon = call_soon

    def spawn(self, fn: Callable[..., Any], *args: Any) -> "concurrent.futures.Future[Any]":
        try:
            return self.portal.start_task_soon(fn, *args)
        # The portal is stopped, or we are on its own thread
        except RuntimeError as exc:
            if self.thread_id == threading.get_ident():
                raise RuntimeError(
                    "a sync Client cannot be called from its own event loop thread; use AsyncClient there"
                ) from exc
            raise ClientClosedError("the client is closed (its event loop has stopped)") from exc

    @staticmethod
    def wait(
        future: "concurrent.futures.Future[_T]", task: Optional["concurrent.futures.Future[Any]"] = None
    ) -> _T:
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise ClientClosedError("the client's event loop stopped while waiting") from None
        except BaseException:
            # Interrupted here (KeyboardInterrupt): cancel the wait in the loop too
            if not future.done():
                (task or future).cancel()
            raise

    def call(
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
        loop = self.aio_loop
        if loop is None:
            return self.wait(self.spawn(bounded, fn, timeout, on_timeout))
        if self.thread_id == threading.get_ident():
            raise RuntimeError("a sync Client cannot be called from its own event loop thread; use AsyncClient there")
        if not loop.is_running():
            raise ClientClosedError("the client is closed (its event loop has stopped)")
        coro = bounded(fn, timeout, on_timeout)
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        # The loop closed just now
        except RuntimeError:
            coro.close()
            raise ClientClosedError("the client is closed (its event loop has stopped)") from None
        return self.wait_on_loop(future, loop)

    @staticmethod
    def wait_on_loop(future: "concurrent.futures.Future[Any]", loop: Any) -> Any:
        """:meth:`wait` for a task handed to ``loop`` directly: a loop that ends before running it ends the wait."""
        while True:
            try:
                return future.result(LOOP_CHECK_INTERVAL)
            except concurrent.futures.CancelledError:
                raise ClientClosedError("the client's event loop stopped while waiting") from None
            except BaseException as exc:
                if future.done():
                    # The call's own outcome (its timeouts included)
                    raise
                # Only this wait's check interval. Before Python 3.11 the interval's timeout is
                # concurrent.futures.TimeoutError, a class of its own, not the builtin.
                if isinstance(exc, (TimeoutError, concurrent.futures.TimeoutError)):
                    # The loop stopped before it ever ran the task
                    if loop.is_closed():
                        future.cancel()
                        raise ClientClosedError("the client's event loop stopped while waiting") from None
                    continue
                # Interrupted here (KeyboardInterrupt): cancel the call in the loop too
                future.cancel()
                raise


# -- a client's connection, held open in the loop ------------------------------------------


def _connect_timeout(client: AsyncClient, timeout: Optional[float]) -> ConnectTimeout:
    ep = client.endpoint
    return ConnectTimeout(f"no CONNECTED from {ep.host}:{ep.port} within {timeout:g} s", timeout=timeout)


async def host_connection(
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
                # The deadline passed just as CONNECTED came
                if scope.cancel_called:
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


class ClientLifetime:
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
        # The Portal the client started for itself
        self.owner = owner
        # The Portal it was given
        self.shared = shared
        self.host: Optional["concurrent.futures.Future[None]"] = None

    def close(self) -> None:
        """End the host task (DISCONNECT, bounded by disconnect_timeout) and wait for it; idempotent."""
        if self.shared is not None:
            self.shared.unregister_client(self)
        host = self.host
        if host is None or host.done():
            return
        try:
            self.portal.call(self.closing.set)
            host.result()
        except (RuntimeError, concurrent.futures.CancelledError):
            # The loop is gone (an anyio portal stopped first): nothing left to close
            pass

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
