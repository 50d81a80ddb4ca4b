"""Links between the coordinator and its workers: in the same event loop, or a worker process's pipe.

A worker puts messages on its link and polls it for orders; the coordinator receives
the messages and sends the orders.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Optional, Tuple

import anyio

from .plan import WorkerSpec
from .worker import worker_main

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess


class LocalLink:
    """A worker in the coordinator's own event loop: two deques."""

    def __init__(self) -> None:
        # Worker -> coordinator
        self.up: Deque[Tuple[Any, ...]] = deque()
        # Coordinator -> worker
        self.down: Deque[Tuple[Any, ...]] = deque()
        self.finished = False

    # worker side
    def put(self, message: Tuple[Any, ...]) -> None:
        self.up.append(message)

    def poll(self) -> List[Tuple[Any, ...]]:
        out = list(self.down)
        self.down.clear()
        return out

    # coordinator side
    def receive(self) -> List[Tuple[Any, ...]]:
        out = list(self.up)
        self.up.clear()
        return out

    def send(self, message: Tuple[Any, ...]) -> None:
        self.down.append(message)

    def alive(self) -> bool:
        return not self.finished


class PipeLink:
    """The worker side of a worker process's pipe."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def put(self, message: Tuple[Any, ...]) -> None:
        self.conn.send(message)

    def poll(self) -> List[Tuple[Any, ...]]:
        out = []
        while self.conn.poll(0):
            out.append(self.conn.recv())
        return out


class ProcessLink:
    """The coordinator side of a worker process."""

    def __init__(self, process: BaseProcess, conn: Any) -> None:
        self.process = process
        self.conn = conn

    def receive(self) -> List[Tuple[Any, ...]]:
        out = []
        try:
            while self.conn.poll(0):
                out.append(self.conn.recv())
        except (EOFError, OSError):
            pass
        return out

    def send(self, message: Tuple[Any, ...]) -> None:
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError):
            pass

    def alive(self) -> bool:
        return self.process.is_alive()


def process_main(spec: WorkerSpec, conn: Any, backend: str, backend_options: Dict[str, Any]) -> None:
    """A worker process: run one worker on its own event loop."""
    import signal

    # The coordinator decides when a run stops: Ctrl-C reaches the whole process group,
    # and a worker that died of it would lose its counts; it stops on the coordinator's
    # "stop" and reports them instead. (SIGTERM stays: the coordinator's terminate().)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Not settable here: the default stays
    except (OSError, ValueError):
        pass
    link = PipeLink(conn)
    try:
        anyio.run(worker_main, spec, link, backend=backend, backend_options=backend_options)
    except KeyboardInterrupt:
        pass
    # Reported to the coordinator, which says what happened
    except BaseException as exc:
        try:
            conn.send(("fatal", exc))
        except Exception:
            conn.send(("fatal", RuntimeError(f"{type(exc).__name__}: {exc}")))
    finally:
        conn.close()


def current_backend() -> Tuple[str, Dict[str, Any], str]:
    """The running anyio backend, its options for a worker process, and a label."""
    import sniffio

    name = sniffio.current_async_library()
    if name == "asyncio":
        import asyncio

        loop = asyncio.get_running_loop()
        if type(loop).__module__.startswith("uvloop"):
            return "asyncio", {"use_uvloop": True}, "asyncio+uvloop"
        return "asyncio", {}, "asyncio"
    return name, {}, name


class WorkerView:
    def __init__(self, spec: WorkerSpec, link: Any) -> None:
        self.spec = spec
        self.link = link
        self.ready: Optional[Dict[str, Any]] = None
        self.progress: Dict[str, Any] = {}
        self.final: Optional[Dict[str, Any]] = None
        # The latest of its progress reports
        self.client_stats: Optional[Dict[str, Any]] = None
