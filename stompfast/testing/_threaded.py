"""What the test broker and the fault proxy share to run in a thread of their own (``in_thread``)."""

from __future__ import annotations

import threading
from typing import Any, AsyncContextManager, Callable, Dict, Iterator, Optional, TypeVar, cast

import anyio.from_thread

T = TypeVar("T")


class RunsInThread:
    """Base of :class:`~stompfast.testing.Broker` and :class:`~stompfast.testing.FaultProxy`.

    A subclass is an async context manager that sets ``self._loop_thread`` (the
    :func:`threading.get_ident` of its loop) in ``__aenter__``. Its ``in_thread``
    classmethod runs a new instance with :meth:`_run_in_thread`; its public methods
    go through :meth:`_call`, so that they work from other threads too.
    """

    _loop_thread: Optional[int] = None
    #: the blocking portal of the loop it runs in, while started with ``in_thread``
    _portal: Optional[anyio.from_thread.BlockingPortal] = None

    def _run_in_thread(self, backend: str, backend_options: Optional[Dict[str, Any]]) -> Iterator[Any]:
        """Enter this async context manager on a new event loop in a thread; yield it while it runs.

        (A generator for the subclasses' ``in_thread``, which call it on a new instance:
        ``yield from cls._run_in_thread(cls(...), backend, backend_options)``.)
        """
        with anyio.from_thread.start_blocking_portal(backend, backend_options) as portal:
            with portal.wrap_async_context_manager(cast(AsyncContextManager[Any], self)):
                self._portal = portal
                try:
                    yield self
                finally:
                    self._portal = None

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in this object's loop: through its portal from another thread, directly from its own."""
        portal = self._portal
        if portal is not None and threading.get_ident() != self._loop_thread:
            return portal.call(fn, *args)
        return fn(*args)
