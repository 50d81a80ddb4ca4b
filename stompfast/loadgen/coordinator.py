"""The coordinator: starts the workers (in this event loop or as processes), drives them through a run, merges.

:func:`run_load` (async) and :func:`run` (its own event loop) are the entry points.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import anyio

from .clientstats import merge_records
from .config import LoadConfig, LoadResult, Progress, is_fanout
from .histogram import histogram_class
from .links import LocalLink, ProcessLink, WorkerView, current_backend, process_main
from .merge import merge_results
from .plan import plan_workers
from .timeline import Timeline
from .worker import TICK, worker_main


async def run_load(config: LoadConfig, progress: Optional[Callable[[Progress], Any]] = None) -> LoadResult:
    """Run the load described by ``config`` and return its :class:`LoadResult`.

    With ``config.url`` None the in-process broker (:class:`stompfast.testing.Broker`)
    is started on a free loopback port in this event loop. Works on asyncio,
    asyncio+uvloop and trio; worker processes (``processes > 1``) run the caller's backend.

    Raises:
        ConfigurationError: an impossible configuration (before any I/O).
        ImportError: hdrhistogram is not installed (the message says how to install it).
        ConnectError, AuthenticationError, ServerError, ...: a connection could not be
            set up (errors *during* the run are counted in the result instead).
    """
    config.validate()
    histogram_class()
    destinations = list(config.destinations) or [f"/queue/stompfast-bench-{uuid.uuid4().hex[:12]}"]
    if config.url is None:
        from ..testing import Broker

        async with Broker("127.0.0.1", 0, record=False) as broker:
            return await _coordinate(config, broker.url, destinations, True, progress)
    return await _coordinate(config, config.url, destinations, False, progress)


async def _coordinate(
    config: LoadConfig, url: str, destinations: List[str], in_process: bool,
    progress: Optional[Callable[[Progress], Any]],
) -> LoadResult:
    run_id = uuid.uuid4().hex[:10]
    specs = plan_workers(config, url, destinations, run_id)
    backend, backend_options, backend_label = current_backend()
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    views: List[WorkerView] = []
    processes: List[Any] = []
    error: Optional[Exception] = None
    result: Dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        if len(specs) == 1 and config.processes == 1:
            link = LocalLink()

            async def local() -> None:
                try:
                    await worker_main(specs[0], link)
                except Exception as exc:
                    link.put(("fatal", exc))
                finally:
                    link.finished = True

            views.append(WorkerView(specs[0], link))
            tg.start_soon(local)
        else:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            for spec in specs:
                parent, child = ctx.Pipe()
                process = ctx.Process(
                    target=process_main, args=(spec, child, backend, backend_options),
                    name=f"stompfast-loadgen-{spec.worker}", daemon=True,
                )
                process.start()
                child.close()
                processes.append(process)
                views.append(WorkerView(spec, ProcessLink(process, parent)))
        try:
            result = await _drive(config, views, destinations, progress)
        except Exception as exc:  # raised as it is below, not wrapped in an exception group
            error = exc
            tg.cancel_scope.cancel()
        except BaseException:
            for view in views:
                view.link.send(("abort",))
            raise
        finally:
            if error is not None:
                for view in views:
                    view.link.send(("abort",))
            with anyio.CancelScope(shield=True):
                for process in processes:
                    await anyio.to_thread.run_sync(process.join, 10)
                    if process.is_alive():
                        process.terminate()
                        await anyio.to_thread.run_sync(process.join, 5)
    if error is not None:
        raise error
    return merge_results(config, views, destinations, result, url, in_process, backend_label, started_at)


def _receive(view: WorkerView, timeline: Timeline) -> None:
    for message in view.link.receive():
        kind = message[0]
        if kind == "ready":
            view.ready = message[1]
        elif kind == "progress":
            view.progress = message[1]
            if "client_stats" in message[1]:
                view.client_stats = message[1]["client_stats"]
            timeline.add(message[1]["intervals"])
        elif kind == "final":
            view.final = message[1]
            view.progress = message[1]
            view.client_stats = message[1].get("client_stats", view.client_stats)
            timeline.add(message[1]["intervals"])
        elif kind == "fatal":
            raise message[1]


async def _drive(
    config: LoadConfig, views: List[WorkerView], destinations: List[str],
    progress: Optional[Callable[[Progress], Any]],
) -> Dict[str, Any]:
    timeline = Timeline()
    state: Dict[str, Any] = {"timeline": timeline}
    # 1. every worker connected and subscribed
    deadline = time.monotonic() + 2 * config.connect_timeout + 60
    if progress is not None:
        progress(Progress("connecting", 0.0, target_rate=config.rate))
    while not all(v.ready is not None for v in views):
        for view in views:
            _receive(view, timeline)
            if view.ready is None and not view.link.alive():
                _receive(view, timeline)
                raise RuntimeError(f"load generator worker {view.spec.worker} ended before it was ready")
        if time.monotonic() > deadline:
            raise TimeoutError("the load generator's workers did not get ready in time")
        await anyio.sleep(0.005)
    # 2. go: a start time a little ahead, the same for every worker
    lead = 0.005 if len(views) == 1 and isinstance(views[0].link, LocalLink) else 0.05
    t0 = time.time_ns() + int(lead * 1e9)
    state["t0"] = t0
    for view in views:
        view.link.send(("go", t0))
    copies = [config.consumers if is_fanout(d) else 1 for d in destinations]
    if config.consumers == 0:
        copies = [0] * len(destinations)
    history: Deque[Tuple[float, int, int]] = deque()
    producers_done_at: Optional[float] = None
    last_distinct = -1
    last_change = time.monotonic()
    last_report = 0.0
    stop_sent = False
    stop_deadline = math.inf
    while True:
        await anyio.sleep(TICK / 2)
        for view in views:
            _receive(view, timeline)
        if stop_sent:
            if all(v.final is not None for v in views):
                break
            for view in views:
                if view.final is None and not view.link.alive():
                    _receive(view, timeline)
                    if view.final is None:
                        raise RuntimeError(f"load generator worker {view.spec.worker} ended without a result")
            if time.monotonic() > stop_deadline:
                raise TimeoutError("the load generator's workers did not stop in time")
            continue
        mono = time.monotonic()
        snaps = [v.progress for v in views]
        sent = sum(s.get("sent", 0) for s in snaps)
        received = sum(s.get("received", 0) for s in snaps)
        distinct = sum(s.get("distinct", 0) for s in snaps)
        done = all(s.get("producers_done", False) for s in snaps if s) and all(snaps)
        expected = None
        if done:
            by_dest = [0] * len(destinations)
            for s in snaps:
                for d, n in enumerate(s["sent_by_dest"]):
                    by_dest[d] += n
            expected = sum(n * c for n, c in zip(by_dest, copies))
            if producers_done_at is None:
                producers_done_at = mono
                last_change = mono
            if distinct != last_distinct:
                last_distinct = distinct
                last_change = mono
            alive = sum(s.get("consumers_alive", 0) for s in snaps)
            if distinct >= expected or alive == 0 or mono - last_change > config.drain_timeout:
                for view in views:
                    view.link.send(("stop",))
                stop_sent = True
                stop_deadline = mono + 60
                state["stopped_wall"] = time.time_ns()
                state["drained"] = distinct >= expected
        for view in views:
            if view.ready is not None and not view.link.alive() and view.final is None:
                _receive(view, timeline)
                if view.final is None:
                    raise RuntimeError(f"load generator worker {view.spec.worker} ended unexpectedly")
        history.append((mono, sent, received))
        while len(history) > 2 and mono - history[0][0] > 1.0:
            history.popleft()
        if progress is not None and (mono - last_report >= 0.25 or stop_sent):
            last_report = mono
            t_old, s_old, r_old = history[0]
            span = mono - t_old
            latest = [v.client_stats for v in views if v.client_stats is not None]
            progress(Progress(
                "draining" if done else "running",
                max(0.0, (time.time_ns() - t0) / 1e9),
                sent=sent,
                confirmed=sum(s.get("confirmed", 0) for s in snaps),
                received=received,
                expected=expected,
                errors=sum(s.get("errors", 0) for s in snaps),
                send_rate=(sent - s_old) / span if span > 0 else 0.0,
                receive_rate=(received - r_old) / span if span > 0 else 0.0,
                target_rate=config.rate,
                client_stats=merge_records(latest) if latest else None,
            ))
    return state


def run(
    config: LoadConfig,
    progress: Optional[Callable[[Progress], Any]] = None,
    *,
    backend: str = "asyncio",
    backend_options: Optional[Dict[str, Any]] = None,
) -> LoadResult:
    """Synchronous :func:`run_load`: runs its own event loop (``backend`` as for ``anyio.run``)."""
    return anyio.run(run_load, config, progress, backend=backend, backend_options=backend_options)
