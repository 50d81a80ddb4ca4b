"""The coordinator: starts the workers (in this event loop or as processes), drives them through a run, merges.

:func:`run_load` (async) and :func:`run` (its own event loop) are the entry points.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

import anyio

from .behaviour import last_resume
from .clientstats import merge_records
from .config import LoadConfig, LoadInterrupted, LoadResult, Progress, is_fanout, is_rabbitmq, run_queue_headers
from .failover import CutCommand
from .histogram import percentiles
from .links import LocalLink, ProcessLink, WorkerView, current_backend, process_main
from .merge import merge_results
from .plan import plan_workers
from .shape import RateSchedule
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
        ConnectError, AuthenticationError, ServerError, ...: a connection could not be
            set up (errors *during* the run are counted in the result instead).
        LoadInterrupted: ``stop`` was set before every connection was ready (nothing measured).
    """
    config.validate()
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
    if config.link_cuts and config.cut_command is None:
        # A failover run: every client goes through a fault proxy, which resets their links at the cuts
        from urllib.parse import urlsplit

        from ..testing import FaultProxy

        target = urlsplit(url)
        async with FaultProxy((target.hostname or "127.0.0.1", target.port or 61613)) as proxy:
            return await _coordinate_through(config, url, proxy.rewrite(url), destinations, in_process, progress,
                                             stop, proxy)
    return await _coordinate_through(config, url, url, destinations, in_process, progress, stop, None)


async def _coordinate_through(
    config: LoadConfig, url: str, worker_url: str, destinations: List[str], in_process: bool,
    progress: Optional[Callable[[Progress], Any]], stop: Optional[anyio.Event], proxy: Any,
) -> LoadResult:
    """:func:`_coordinate` with the URL the workers connect to (a failover run's proxy) and the proxy."""
    run_id = uuid.uuid4().hex[:10]
    specs = plan_workers(config, worker_url, destinations, run_id)
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
            result = await _drive(config, views, destinations, progress, stop, proxy)
        # Raised as it is below, not wrapped in an exception group
        except Exception as exc:
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
        # Nothing connected: nothing was declared
        return None
    if not is_rabbitmq(server):
        return (
            f"{queue} is left on the broker ({server}): it keeps a queue until it is deleted (or, for ActiveMQ,"
            " restarted or configured to drop inactive ones); a complete run leaves it empty, an interrupted"
            " one with the messages not received"
        )
    if config.link_cuts:
        return (f"{queue} was declared to expire (x-expires): RabbitMQ deletes it, with whatever it holds, a"
                " minute after its last consumer left")
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
    progress: Optional[Callable[[Progress], Any]], stop: Optional[anyio.Event] = None, proxy: Any = None,
) -> Dict[str, Any]:
    """Drive the workers through a run: ready, go, run and drain (or be stopped), stop, final reports.

    Returns what :func:`merge_results` needs besides the final reports: the timeline,
    ``t0``, when the workers were told to stop (``stopped_wall``) and why (``interrupted``
    by ``stop``, or ``drained`` True when every message arrived, False when the drain gave up).
    """
    timeline = Timeline()
    command = CutCommand(config.cut_command) if config.cut_command is not None else None
    state: Dict[str, Any] = {"timeline": timeline, "proxy": proxy, "cuts": [], "cut_command": command}
    await _until_ready(config, views, timeline, progress, stop)
    state["t0"] = _go(views)
    try:
        await _run_until_done(config, views, destinations, timeline, state, progress, stop)
        await _until_final(views, timeline)
    finally:
        if command is not None:
            # A broker restart stopped half way would leave the broker down: it ends first
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(command.wait)
    return state


async def _until_ready(
    config: LoadConfig, views: List[WorkerView], timeline: Timeline,
    progress: Optional[Callable[[Progress], Any]], stop: Optional[anyio.Event],
) -> None:
    """Wait until every worker connected and subscribed; raise if one ended, took too long or ``stop`` was set."""
    deadline = time.monotonic() + 2 * config.connect_timeout + 60
    if progress is not None:
        progress(Progress("connecting", 0.0, target_rate=_target_at(config, 0.0)))
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


def _go(views: List[WorkerView]) -> int:
    """Tell every worker to start at t0 and return t0 (wall-clock ns).

    t0 is a little ahead, so that the "go" reaches every worker before it: they all start
    at the same time. A worker in this event loop gets it at once; a process needs longer.
    """
    lead = 0.005 if len(views) == 1 and isinstance(views[0].link, LocalLink) else 0.05
    t0 = time.time_ns() + int(lead * 1e9)
    for view in views:
        view.link.send(("go", t0))
    return t0


async def _run_until_done(
    config: LoadConfig, views: List[WorkerView], destinations: List[str], timeline: Timeline,
    state: Dict[str, Any], progress: Optional[Callable[[Progress], Any]], stop: Optional[anyio.Event],
) -> None:
    """Follow the run until the drain is over or ``stop`` is set, reporting progress; then tell the workers to stop.

    Notes in ``state`` why it stopped: ``interrupted``, or ``drained``.
    """
    copies = _copies(config, destinations)
    # A failover run: the links are reset at these wall-clock ns (the cuts made are noted in state["cuts"])
    cuts = [state["t0"] + int(at * 1e9) for at in sorted(config.link_cuts)]
    # The consumers' last pause ends this long after t0 (wall ns), on the monotonic clock
    resume = time.monotonic() + (state["t0"] - time.time_ns()) / 1e9 + last_resume(config.consumer_pauses)
    drain = _Drain(config.drain_timeout, resume)
    live = _LiveProgress(config, views, progress, state["t0"], timeline)
    while True:
        await anyio.sleep(TICK / 2)
        for view in views:
            _receive(view, timeline)
        if stop is not None and stop.is_set():
            # stopped from outside (Ctrl-C): no drain; what arrived so far is counted
            _stop_workers(views, state)
            state["interrupted"] = True
            return
        command = state["cut_command"]
        while cuts and time.time_ns() >= cuts[0]:
            cuts.pop(0)
            # when it was made: the outages are counted from there
            at = (time.time_ns() - state["t0"]) / 1e9
            if command is not None:
                command.start(at)
            else:
                state["proxy"].reset_all()
            state["cuts"].append(at)
        mono = time.monotonic()
        if command is not None:
            command.poll()
            if command.running:
                # the broker is still restarting: no arrival is no sign of the end yet
                drain.quiet_until = max(drain.quiet_until, mono)
        snaps = [v.progress for v in views]
        done = all(s.get("producers_done", False) for s in snaps if s) and all(snaps)
        expected = _expected(snaps, copies) if done else None
        over = False
        if expected is not None:
            distinct = sum(s.get("distinct", 0) for s in snaps)
            if drain.over(mono, distinct, expected, sum(s.get("consumers_alive", 0) for s in snaps)):
                _stop_workers(views, state)
                state["drained"] = distinct >= expected
                over = True
        _check_running(views, timeline)
        live.update(mono, snaps, expected, last=over)
        if over:
            return


async def _until_final(views: List[WorkerView], timeline: Timeline) -> None:
    """Wait for every worker's final report, once they were told to stop.

    Raises if a worker ended without one, or if they took longer than 60 s.
    """
    deadline = time.monotonic() + 60
    while not all(v.final is not None for v in views):
        for view in views:
            if view.final is None and not view.link.alive():
                _receive(view, timeline)
                if view.final is None:
                    raise RuntimeError(f"load generator worker {view.spec.worker} ended without a result")
        if time.monotonic() > deadline:
            raise TimeoutError("the load generator's workers did not stop in time")
        await anyio.sleep(TICK / 2)
        for view in views:
            _receive(view, timeline)


def _stop_workers(views: List[WorkerView], state: Dict[str, Any]) -> None:
    """Tell every worker to stop, and note when in ``state["stopped_wall"]`` (wall-clock ns)."""
    for view in views:
        view.link.send(("stop",))
    state["stopped_wall"] = time.time_ns()


def _check_running(views: List[WorkerView], timeline: Timeline) -> None:
    """Raise if a worker that got ready has ended without a final report."""
    for view in views:
        if view.ready is not None and not view.link.alive() and view.final is None:
            _receive(view, timeline)
            if view.final is None:
                raise RuntimeError(f"load generator worker {view.spec.worker} ended unexpectedly")


def _copies(config: LoadConfig, destinations: List[str]) -> List[int]:
    """How many times a message sent to each destination is due: once per consumer on a fan-out one, else once."""
    if config.consumers == 0:
        return [0] * len(destinations)
    return [config.consumers if is_fanout(d) else 1 for d in destinations]


def _expected(snaps: List[Dict[str, Any]], copies: List[int]) -> int:
    """The messages due at the consumers: what the producers sent to each destination, times its ``copies``."""
    by_dest = [0] * len(copies)
    for s in snaps:
        for d, n in enumerate(s["sent_by_dest"]):
            by_dest[d] += n
    return sum(n * c for n, c in zip(by_dest, copies))


class _Drain:
    """The drain, once the producers are done: it is over when nothing more can be waited for."""

    def __init__(self, timeout: float, quiet_until: float = 0.0) -> None:
        self.timeout = timeout
        # (monotonic s) consumers paused until then: no arrival is no sign of the end before it
        self.quiet_until = quiet_until
        self.last_distinct = -1
        self.last_change = 0.0

    def over(self, mono: float, distinct: int, expected: int, consumers_alive: int) -> bool:
        """Whether the drain is over at ``mono`` (monotonic s).

        It is when every expected message arrived, when no consumer is left, or when no
        new one arrived for ``timeout`` s: the first call starts that timeout, and every
        new distinct message starts it again.
        """
        if distinct != self.last_distinct or mono < self.quiet_until:
            self.last_distinct = distinct
            self.last_change = mono
        return distinct >= expected or consumers_alive == 0 or mono - self.last_change > self.timeout


class _LiveProgress:
    """The :class:`Progress` handed to the ``progress`` callback: rates over about the last second, every 0.25 s."""

    def __init__(
        self, config: LoadConfig, views: List[WorkerView], progress: Optional[Callable[[Progress], Any]],
        t0: int, timeline: Timeline,
    ) -> None:
        self.config = config
        self.views = views
        self.progress = progress
        self.t0 = t0
        # Read only: the latency of the latest interval the workers reported
        self.timeline = timeline
        # The latest interval's latency, and the newest interval index it was computed at
        self.latency: Optional[Dict[str, float]] = None
        self.latency_index = -1
        self.history: Deque[Tuple[float, int, int]] = deque()
        self.last_report = 0.0

    def update(self, mono: float, snaps: List[Dict[str, Any]], expected: Optional[int], last: bool) -> None:
        """Note the workers' counts at ``mono`` (monotonic s); report when one is due or this is the ``last``.

        ``expected`` is None until the producers are done, then the run is draining.
        """
        sent = sum(s.get("sent", 0) for s in snaps)
        received = sum(s.get("received", 0) for s in snaps)
        self.history.append((mono, sent, received))
        while len(self.history) > 2 and mono - self.history[0][0] > 1.0:
            self.history.popleft()
        if self.progress is None or not (mono - self.last_report >= 0.25 or last):
            return
        self.last_report = mono
        t_old, s_old, r_old = self.history[0]
        span = mono - t_old
        latest = [v.client_stats for v in self.views if v.client_stats is not None]
        elapsed = max(0.0, (time.time_ns() - self.t0) / 1e9)
        self.progress(Progress(
            "draining" if expected is not None else "running",
            elapsed,
            sent=sent,
            confirmed=sum(s.get("confirmed", 0) for s in snaps),
            received=received,
            expected=expected,
            errors=sum(s.get("errors", 0) for s in snaps),
            send_rate=(sent - s_old) / span if span > 0 else 0.0,
            receive_rate=(received - r_old) / span if span > 0 else 0.0,
            target_rate=_target_at(self.config, elapsed),
            client_stats=merge_records(latest) if latest else None,
            latency_us=self._latest_latency(),
        ))

    def _latest_latency(self) -> Optional[Dict[str, float]]:
        """p50, p90, p99 and max of the latest interval with latency the workers reported, or None.

        Recomputed only when a later interval arrived (four reports a second would otherwise
        walk a histogram each): the load generator's own cost must not grow with it.
        """
        rows = self.timeline.rows
        newest = max(rows) if rows else -1
        if newest == self.latency_index:
            return self.latency
        for index in sorted(rows, reverse=True):
            pct = percentiles(rows[index][5])
            if pct:
                self.latency_index, self.latency = newest, {k: pct[k] for k in ("p50", "p90", "p99", "max")}
                break
        return self.latency


def run(
    config: LoadConfig,
    progress: Optional[Callable[[Progress], Any]] = None,
    *,
    backend: str = "asyncio",
    backend_options: Optional[Dict[str, Any]] = None,
) -> LoadResult:
    """Synchronous :func:`run_load`: runs its own event loop (``backend`` as for ``anyio.run``)."""
    return anyio.run(run_load, config, progress, backend=backend, backend_options=backend_options)


def _target_at(config: LoadConfig, elapsed: float) -> Optional[float]:
    """The rate asked for ``elapsed`` seconds into the run: ``rate``, the shape's rate then, or None (closed loop)."""
    if config.rate_shape:
        return RateSchedule(config.rate_shape, 1.0).rate_at(elapsed)
    return config.rate
