"""What the test broker and the fault proxy share to run in a thread of their own (``in_thread``)."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, Iterator, Optional

import anyio.from_thread


def run_in_thread(obj: Any, backend: str, backend_options: Optional[Dict[str, Any]]) -> Iterator[Any]:
    """Enter the async context manager ``obj`` on a new event loop in a thread; yield it while it runs.

    While it runs, ``obj._portal`` is that loop's portal (see :func:`call`).
    """
    with anyio.from_thread.start_blocking_portal(backend, backend_options) as portal:
        with portal.wrap_async_context_manager(obj):
            obj._portal = portal
            try:
                yield obj
            finally:
                obj._portal = None


def call(obj: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in ``obj``'s loop: through its portal from another thread, directly from its own."""
    portal = obj._portal
    if portal is not None and threading.get_ident() != obj._loop_thread:
        return portal.call(fn, *args)
    return fn(*args)
