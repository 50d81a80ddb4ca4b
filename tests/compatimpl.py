"""Which stomp.py API the compat tests drive: stompfast's (default) or the real stomp.py.

``STOMPFAST_COMPAT_IMPL=stomppy`` runs the same tests on stomp.py 8 itself (installed in
the environment, e.g. ``pip install stomp.py==8.1.2``), so that the tests check stomp.py's
behaviour and not merely ours; tests of stompfast additions are skipped then.
"""

from __future__ import annotations

import os
import threading
import time
from types import ModuleType
from typing import Any, Callable, List, Tuple

import pytest

IMPL = os.environ.get("STOMPFAST_COMPAT_IMPL", "stompfast")
if IMPL not in ("stompfast", "stomppy"):
    raise RuntimeError(f"STOMPFAST_COMPAT_IMPL must be 'stompfast' or 'stomppy', not {IMPL!r}")


def load() -> ModuleType:
    """The module under test, as ``stomp``."""
    if IMPL == "stomppy":
        import stomp

        if getattr(stomp, "__file__", "").find("stompfast") >= 0:
            raise RuntimeError("STOMPFAST_COMPAT_IMPL=stomppy but `import stomp` gives stompfast's module")
        return stomp
    from stompfast.compat import stomp

    return stomp


#: skip a test of what only stompfast has (an opt-in deviation or addition)
stompfast_only = pytest.mark.skipif(IMPL != "stompfast", reason="a stompfast addition, not stomp.py behaviour")


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``predicate`` until true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


class Recorder:
    """A listener recording ``(callback, detail, thread name)`` for every callback stomp.py makes."""

    def __init__(self, tag: str = "") -> None:
        self.tag = tag
        self.events: List[Tuple[str, Any, str]] = []
        self.lock = threading.Lock()

    def _add(self, name: str, detail: Any) -> None:
        with self.lock:
            self.events.append((name, detail, threading.current_thread().name))

    def names(self) -> List[str]:
        with self.lock:
            return [e[0] for e in self.events]

    def of(self, name: str) -> List[Any]:
        with self.lock:
            return [e[1] for e in self.events if e[0] == name]

    def on_connecting(self, host_and_port: Any) -> None:
        self._add("connecting", tuple(host_and_port))

    def on_connected(self, frame: Any) -> None:
        self._add("connected", frame)

    def on_disconnected(self) -> None:
        self._add("disconnected", None)

    def on_heartbeat_timeout(self) -> None:
        self._add("heartbeat_timeout", None)

    def on_before_message(self, frame: Any) -> None:
        self._add("before_message", frame)

    def on_message(self, frame: Any) -> None:
        self._add("message", frame)

    def on_receipt(self, frame: Any) -> None:
        self._add("receipt", frame.headers.get("receipt-id"))

    def on_error(self, frame: Any) -> None:
        self._add("error", frame)

    def on_send(self, frame: Any) -> None:
        self._add("send", frame.cmd)

    def on_heartbeat(self) -> None:
        self._add("heartbeat", None)

    def on_receiver_loop_completed(self, frame: Any) -> None:
        self._add("receiver_loop_completed", frame)
