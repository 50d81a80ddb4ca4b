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
from .config import LoadConfig, LoadInterrupted, LoadResult, Progress, is_fanout, is_rabbitmq, run_queue_headers
from .histogram import histogram_class
from .links import LocalLink, ProcessLink, WorkerView, current_backend, process_main
from .merge import merge_results
from .plan import plan_workers
from .timeline import Timeline
from .worker import TICK, worker_main


async def run_load(
    config: LoadConfig, progress: Optional[Callable[[Progress], Any]] = None, *, stop: Optional[anyio.Event] = None,
) -> LoadResult:
    """Run the load described by ``config`` and return its :class:`LoadResult`.

    With ``config.url`` None the in-process broker (:class:`stompfast.testing.Broker`)
    is started on a free loopback port in this event loop. Works on asyncio,
    asyncio+uvloop and trio; worker processes (``processes > 1``) run the caller's backend.

    ``stop``: an :class:`anyio.Event`; setting it ends the run early, as Ctrl-C does
    ``stompfast bench``: the producers and consumers stop at once, what arrived is
    counted, every connection is closed, and the result (``interrupted="stopped"``) holds
    what was measured until then.

    On RabbitMQ the run's own queue (no ``destinations`` given) is declared auto-delete
    (:data:`~stompfast.loadgen.config.RABBITMQ_RUN_QUEUE_HEADERS`), so it goes away with
    its last consumer, backlog and all; at the end a last subscription makes sure of it
    (with no consumers, or a producer that outlived them). ``broker["cleanup"]`` says
    what became of it.

    Raises:
        ConfigurationError: an impossible configuration (before any I/O).
        ImportError: hdrhistogram is not installed (the message says how to install it).
        ConnectError, AuthenticationError, ServerError, ...: a connection could not be
            set up (errors *during* the run are counted in the result instead).
        LoadInterrupted: ``stop`` was set before every connection was ready (nothing measured).
    """
    config.validate()
    histogram_class()
    destinations = list(config.destinations) or [f"/queue/stompfast-bench-{uuid.uuid4().hex[:12]}"]
    if config.url is None:
        from ..testing import Broker

        async with Broker("127.0.0.1", 0, record=False) as broker:
            return await _coordinate(config, broker.url, destinations, True, progress, stop)
    return await _coordinate(config, config.url, destinations, False, progress, stop)


async def _coordinate(
    config: LoadConfig, url: str, destinations: List[str], in_process: bool,
    progress: Optional[Callable[[Progress], Any]], stop: Optional[anyio.Event] = None,
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
            result = await _drive(config, views, destinations, progress, stop)
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
    server = next((v.ready.get("server") for v in views if v.ready), None)
    cleanup = None
    if not in_process and not config.destinations:
        cleanup = await _clean_up(config, url, destinations, server)
    if error is not None:
        raise error
    merged = merge_results(config, views, destinations, result, url, in_process, backend_label, started_at)
    merged.broker["cleanup"] = cleanup
    if result.get("interrupted"):
        merged.interrupted = "stopped"
    return merged


async def _clean_up(config: LoadConfig, url: str, destinations: List[str], server: Optional[str]) -> Optional[str]:
    """Make sure the run's own queue on a real broker does not outlive the run; say what became of it.

    On RabbitMQ it was declared auto-delete, so it went away when the run's last consumer
    left. A queue that never had a consumer (``consumers=0``), or that a producer in another
    process declared again after the consumers left (an interrupted run), would stay: one
    more subscription, left at once, deletes it whatever it holds. Other brokers keep it.
    """
    (queue,) = destinations
    if server is None:
        return None  # nothing connected: nothing was declared
    if not is_rabbitmq(server):
        return (
            f"{queue} is left on the broker ({server}): it keeps a queue until it is deleted (or, for ActiveMQ,"
            " restarted or configured to drop inactive ones); a complete run leaves it empty, an interrupted"
            " one with the messages not received"
        )
    from .._client import AsyncClient

    kwargs: Dict[str, Any] = {"versions": config.versions} if config.versions else {}
    client = AsyncClient(
        url, login=config.login, passcode=config.passcode, virtual_host=config.virtual_host,
        heart_beat=(0, 0), connect_timeout=config.connect_timeout, reconnect=False, **kwargs,
    )
    try:
        with anyio.fail_after(max(10.0, config.connect_timeout + 5)):
            async with client:
                # client ack with one message of prefetch: the broker need not push its backlog here
                async with client.subscribe(queue, ack="client", buffer_size=1,
                                            headers=run_queue_headers(config, server)):
                    pass
    except Exception as exc:
        return (f"{queue} may be left on the broker (deleting it failed: {type(exc).__name__}: {exc});"
                f" rabbitmqctl delete_queue {queue.rpartition('/')[2]}")
    return f"{queue} was auto-delete and is gone with whatever it held"


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
    progress: Optional[Callable[[Progress], Any]], stop: Optional[anyio.Event] = None,
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
        if stop is not None and stop.is_set():
            raise LoadInterrupted("stopped while connecting and subscribing: nothing was measured")
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
        if not stop_sent and stop is not None and stop.is_set():
            # stopped from outside (Ctrl-C): no drain; what arrived so far is counted
            for view in views:
                view.link.send(("stop",))
            stop_sent = True
            stop_deadline = time.monotonic() + 60
            state["stopped_wall"] = time.time_ns()
            state["interrupted"] = True
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
