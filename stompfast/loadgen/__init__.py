"""Load generation: producers and consumers against a STOMP broker, counted exactly, with end-to-end latency.

::

    from stompfast.loadgen import LoadConfig, run, run_load

    result = run(LoadConfig(producers=2, consumers=2, count=50_000, receipts=True))
    print(result.counts["received"], result.latency_us["p99"], result.ok)

    result = await run_load(LoadConfig(url="stomp://127.0.0.1:61613/", rate=5000, duration=10))

The ``stompfast bench`` command (:func:`add_bench_command`, registered in
:data:`stompfast.cli.COMMANDS`) is a thin shell around :func:`run_load`; docs/loadgen.md
documents every option, the JSON result and how latency is measured.

Theory of operation
-------------------
A run is planned as ``W`` *workers* (``W = processes``), each holding some producer and
some consumer connections as tasks of one event loop. With ``processes=1`` the only
worker is a task of the caller's event loop; otherwise each worker is a process of its
own (``multiprocessing``, spawn) talking to the coordinator over a pipe. The
*coordinator* (the caller's loop, which also runs the in-process broker when no URL is
given) drives every run through the same phases and messages::

    worker: connect consumers, SUBSCRIBE (confirmed), connect producers  -> "ready"
    coord:  every worker ready -> "go" with a start time t0 a little in the future
    worker: producers send from t0; every 50 ms                            -> "progress"
            (counters; the timeline intervals that ended, histograms encoded)
    coord:  producers done everywhere, then every expected message seen (or nothing
            new for ``drain_timeout`` s)                                   -> "stop"
    worker: consumers stop, buffered messages are still counted, DISCONNECT -> "final"
            (per-group bitmaps of sequence numbers seen, error texts)
    coord:  merges: histograms added, counts summed, bitmaps OR-ed -> LoadResult

Every message carries three headers: ``sf-producer`` (run id and producer number),
``sf-seq`` (a sequence number per producer and destination, from 0) and ``sf-ts`` (the
send time in wall-clock nanoseconds; in fixed-rate mode the *intended* send time);
``sf-w:1`` marks warm-up messages. A consumer keeps, per *group* and producer, a bitmap
of the sequence numbers it saw. A group is a queue destination (every consumer shares
it: each message is due once), or one consumer's subscription to a topic (each consumer
gets every message). So ``distinct`` = set bits, ``duplicates`` = received - distinct,
``missing`` = sent - distinct, exactly, even across processes (bitmaps are OR-ed and the
overlap counted). Messages without our run id are ``unexpected`` (leftovers of another
run in a reused queue).

Latency is ``consumer wall clock at receipt - sf-ts`` (same machine, one clock),
recorded in microseconds in an HDR histogram per timeline interval (hdrhistogram on
PyPI, 3 significant figures); the run's histogram is the sum of the intervals'. In
fixed-rate (open-loop) mode each producer sends message ``i`` at ``t0 + (i + phase) /
rate`` and stamps that intended time, so a producer that falls behind (a stalled
broker, a slow event loop) catches up in a burst and the delay shows in the latency:
no coordinated omission. In closed-loop mode (no rate) producers send as fast as the
client takes messages and stamp the actual send time.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import math
import os
import platform
import sys
import time
import uuid
from collections import deque
from contextlib import AsyncExitStack
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import anyio

from ..cli.common import (
    CONNECTION_HELP,
    Connection,
    ENV_URL,
    EXIT_FAILURE,
    EXIT_OK,
    Failure,
    Status,
    UsageError,
    add_common_options,
    add_connection_options,
    isatty,
    mask,
    one_line,
    parse_header,
    plural,
    positive_float,
    positive_int,
)
from ..errors import ConfigurationError
from .histogram import (
    COUNTS_LEN,
    HALF_COUNT,
    HALF_MAGNITUDE,
    HDR_HINT as HDR_HINT,
    MAX_LATENCY_US,
    SHIFT,
    SIGNIFICANT_FIGURES as SIGNIFICANT_FIGURES,
    SUB_MASK,
    fold,
    histogram_class,
    latency_index as latency_index,
    new_histogram,
    percentiles,
)

__all__ = [
    "LoadConfig",
    "LoadResult",
    "Progress",
    "add_bench_command",
    "is_fanout",
    "run",
    "run_bench",
    "run_load",
    "write_plot",
]

PLOT_HINT = "--plot needs matplotlib: pip install 'stompfast[plot]' (or pip install matplotlib)"

#: The headers every generated message carries.
H_PRODUCER, H_SEQ, H_TS, H_WARMUP = "sf-producer", "sf-seq", "sf-ts", "sf-w"

#: Defaults when neither a count nor a duration is given: whichever comes first.
DEFAULT_COUNT = 100_000
DEFAULT_DURATION = 10.0

_TICK = 0.05  # seconds between a worker's progress reports / the coordinator's checks
_BURST = 100  # closed loop: messages sent between two yields to the event loop
_FANOUT_PREFIXES = ("/topic/", "/exchange/")
_ACK_MODES = ("auto", "client", "client-individual")




def is_fanout(destination: str) -> bool:
    """True when every subscriber gets its own copy (``/topic/...``, RabbitMQ ``/exchange/...``)."""
    return destination.startswith(_FANOUT_PREFIXES)


# -- configuration ---------------------------------------------------------------------------


@dataclasses.dataclass
class LoadConfig:
    """What to run. Every field has a default: ``LoadConfig()`` is the ``stompfast bench`` default.

    Connection: ``url`` (``None``: start the in-process test broker on a free loopback
    port), ``login``, ``passcode``, ``virtual_host``, ``versions``, ``heart_beat``,
    ``connect_timeout`` as for :class:`~stompfast.AsyncClient` (keywords win over the URL).

    Shape: ``producers`` and ``consumers`` connections, spread over ``processes``
    worker processes (1: all in the caller's event loop). ``destinations`` are used
    round-robin by each producer; every consumer subscribes to each of them
    (``/topic/`` and ``/exchange/`` ones deliver a copy to every consumer). Default:
    one fresh queue ``/queue/stompfast-bench-<random>``.

    Messages: ``size`` bytes (``body`` overrides), extra ``headers``; stop after
    ``count`` messages in total or ``duration`` seconds, whichever comes first
    (neither: 100,000 or 10 s). ``rate``: total messages per second, open loop;
    ``None``: closed loop, as fast as possible.

    Delivery: ``receipts`` (each SEND asks for a RECEIPT, at most ``receipt_window``
    outstanding per producer), ``ack`` mode of the consumers, ``transaction_size``
    (0: none; else producers send in transactions of that many messages, committed
    with a receipt when ``receipts``), ``buffer_size`` (consumer buffer and, in the
    client ack modes, broker prefetch).

    Measurement: ``warmup`` seconds and/or ``warmup_messages`` (total) are sent and
    counted but kept out of latency and rates; ``interval`` is the timeline's
    resolution; ``drain_timeout``: after the producers stop, give up waiting for
    missing messages once nothing new arrived for that long.
    """

    url: Optional[str] = None
    login: Optional[str] = None
    passcode: Optional[str] = None
    virtual_host: Optional[str] = None
    versions: Optional[Tuple[str, ...]] = None
    heart_beat: Tuple[int, int] = (10000, 10000)
    connect_timeout: float = 10.0
    producers: int = 1
    consumers: int = 1
    processes: int = 1
    destinations: Tuple[str, ...] = ()
    size: int = 100
    body: Optional[bytes] = None
    headers: Optional[Dict[str, str]] = None
    count: Optional[int] = None
    duration: Optional[float] = None
    rate: Optional[float] = None
    receipts: bool = False
    receipt_window: int = 1000
    ack: str = "auto"
    transaction_size: int = 0
    buffer_size: int = 1000
    warmup: float = 0.0
    warmup_messages: int = 0
    interval: float = 1.0
    drain_timeout: float = 5.0

    def validate(self) -> None:
        """Raise :class:`~stompfast.ConfigurationError` (a ValueError) for a value that cannot work."""

        def positive_int(name: str, value: Any, minimum: int = 1) -> None:
            if type(value) is not int or value < minimum:
                raise ConfigurationError(f"{name} must be an int >= {minimum}, not {value!r}")

        def positive_number(name: str, value: Any, allow_zero: bool = False) -> None:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if not ok or value < 0 or (value == 0 and not allow_zero):
                raise ConfigurationError(f"{name} must be a {'non-negative' if allow_zero else 'positive'} number,"
                                         f" not {value!r}")

        positive_int("producers", self.producers)
        positive_int("consumers", self.consumers, 0)
        positive_int("processes", self.processes)
        positive_int("size", self.size, 0)
        positive_int("receipt_window", self.receipt_window)
        positive_int("transaction_size", self.transaction_size, 0)
        positive_int("buffer_size", self.buffer_size)
        positive_int("warmup_messages", self.warmup_messages, 0)
        if self.count is not None:
            positive_int("count", self.count)
        for name in ("duration", "rate", "interval", "drain_timeout", "connect_timeout"):
            value = getattr(self, name)
            if value is not None:
                positive_number(name, value)
        positive_number("warmup", self.warmup, allow_zero=True)
        if self.ack not in _ACK_MODES:
            raise ConfigurationError(f"ack must be one of {', '.join(_ACK_MODES)}, not {self.ack!r}")
        if self.body is not None and not isinstance(self.body, (bytes, bytearray)):
            raise ConfigurationError("body must be bytes")
        for destination in self.destinations:
            if not isinstance(destination, str) or not destination:
                raise ConfigurationError(f"a destination must be a non-empty str, not {destination!r}")
        if self.count is not None and self.count < self.producers:
            raise ConfigurationError(
                f"count ({self.count}) must be at least the number of producers ({self.producers})"
            )

    def limits(self) -> Tuple[Optional[int], Optional[float]]:
        """The ``(count, duration)`` in force: both default (100,000 or 10 s) when neither is set."""
        if self.count is None and self.duration is None:
            return DEFAULT_COUNT, DEFAULT_DURATION
        return self.count, self.duration

    def public_dict(self) -> Dict[str, Any]:
        """The configuration for a report: no passcode, the URL's passcode masked, the body's size only."""
        data = dataclasses.asdict(self)
        data.pop("passcode")
        data["passcode_set"] = self.passcode is not None
        data["url"] = mask(self.url) if self.url else None
        body = data.pop("body")
        data["body_bytes"] = len(body) if body is not None else None
        data["destinations"] = list(self.destinations)
        data["versions"] = list(self.versions) if self.versions else None
        data["heart_beat"] = list(self.heart_beat)
        count, duration = self.limits()
        data["count_in_force"], data["duration_in_force"] = count, duration
        return data


@dataclasses.dataclass
class Progress:
    """A live snapshot, handed to the ``progress`` callback of :func:`run_load` a few times a second."""

    phase: str  # "connecting", "running", "draining"
    elapsed: float  # seconds since the producers started (0 before)
    sent: int = 0
    confirmed: int = 0
    received: int = 0
    expected: Optional[int] = None  # known once the producers are done
    errors: int = 0
    send_rate: float = 0.0  # messages/s over about the last second
    receive_rate: float = 0.0
    target_rate: Optional[float] = None


@dataclasses.dataclass
class LoadResult:
    """The outcome of a run; :meth:`to_dict` is the JSON document ``stompfast bench --json`` writes.

    ``ok`` is True when nothing was lost, duplicated or refused and no error happened;
    ``problems`` says what went wrong otherwise, ``warnings`` what is worth knowing.
    ``counts``: sent, confirmed, expected, received, distinct, duplicates, missing,
    unexpected, errors, warmup_sent, warmup_received. ``rates``: messages/s and MB/s.
    ``latency_us`` and ``send_lag_us``: count, min, mean, stddev, p50, p90, p99, p99.9,
    p99.99, max (``send_lag_us`` in fixed-rate mode only: actual minus intended send
    time). ``histogram``: the merged HdrHistogram of end-to-end latency (microseconds).
    """

    config: LoadConfig
    ok: bool
    problems: List[str]
    warnings: List[str]
    counts: Dict[str, int]
    rates: Dict[str, Optional[float]]
    latency_us: Optional[Dict[str, float]]
    send_lag_us: Optional[Dict[str, float]]
    timeline: List[Dict[str, Any]]
    errors: List[str]
    broker: Dict[str, Any]
    versions: Dict[str, Any]
    machine: Dict[str, Any]
    started_at: str
    elapsed: float
    histogram: Any = dataclasses.field(default=None, repr=False)

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict (``schema: "stompfast.loadgen/1"``)."""
        return {
            "schema": "stompfast.loadgen/1",
            "ok": self.ok,
            "problems": list(self.problems),
            "warnings": list(self.warnings),
            "started_at": self.started_at,
            "elapsed_s": round(self.elapsed, 6),
            "config": self.config.public_dict(),
            "broker": dict(self.broker),
            "counts": dict(self.counts),
            "rates": dict(self.rates),
            "latency_us": self.latency_us,
            "send_lag_us": self.send_lag_us,
            "timeline": list(self.timeline),
            "errors": list(self.errors),
            "versions": dict(self.versions),
            "machine": dict(self.machine),
        }


# -- planning --------------------------------------------------------------------------------


@dataclasses.dataclass
class _ProducerSpec:
    index: int
    key: str  # the sf-producer header value: "<run id>.<index>"
    quota: Optional[int]  # messages to send at most (None: until the duration ends)
    rate: Optional[float]  # this producer's messages/s (open loop) or None
    phase: float  # open loop: intended time of message i is t0 + (i + phase) / rate
    first_destination: int
    warmup_messages: int


@dataclasses.dataclass
class _WorkerSpec:
    worker: int
    config: LoadConfig
    url: str
    destinations: List[str]
    fanout: List[bool]
    producers: List[_ProducerSpec]
    consumers: List[int]
    all_producer_keys: List[str]
    body: bytes


def _split(total: int, parts: int) -> List[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _plan(config: LoadConfig, url: str, destinations: List[str], run_id: str) -> List[_WorkerSpec]:
    count, _ = config.limits()
    n, m = config.producers, config.consumers
    workers = max(1, min(config.processes, n + m))
    quotas: List[Optional[int]] = list(_split(count, n)) if count is not None else [None] * n
    warm = _split(config.warmup_messages, n)
    body = bytes(config.body) if config.body is not None else b"x" * config.size
    producers = [
        _ProducerSpec(
            index=p,
            key=f"{run_id}.{p}",
            quota=quotas[p],
            rate=config.rate / n if config.rate else None,
            phase=p / n,
            first_destination=p % len(destinations),
            warmup_messages=warm[p],
        )
        for p in range(n)
    ]
    keys = [ps.key for ps in producers]
    specs = [
        _WorkerSpec(w, config, url, destinations, [is_fanout(d) for d in destinations], [], [], keys, body)
        for w in range(workers)
    ]
    for ps in producers:
        specs[ps.index % workers].producers.append(ps)
    for c in range(m):  # consumers fill the workers from the other end: producers and consumers apart
        specs[(workers - 1 - c) % workers].consumers.append(c)
    return [s for s in specs if s.producers or s.consumers]


def _group(d: int, fanout: bool, consumer: int) -> str:
    return f"t{d}.{consumer}" if fanout else f"q{d}"


# -- the worker ------------------------------------------------------------------------------


class _Recorder:
    """A worker's timeline: counts and a latency histogram for the current interval.

    Intervals are numbered from t0 (wall-clock ns); the tasks that see the clock
    pass a boundary (``now >= next_boundary``) close the interval (:meth:`roll`),
    and the worker's reporter hands the closed ones to the coordinator.
    """

    def __init__(self, t0: int, interval: int) -> None:
        self.t0 = t0
        self.interval = interval
        self.index = 0
        self.next_boundary = t0 + interval
        self.counts = [0] * COUNTS_LEN  # latencies of this interval, by latency_index
        self.recorded = 0
        self.sent = self.received = self.confirmed = self.errors = self.warmup = 0
        self.closed: List[tuple] = []

    def roll(self, now: int) -> None:
        index = (now - self.t0) // self.interval
        if index > self.index:
            self.close()
            self.index = index
            self.next_boundary = self.t0 + (index + 1) * self.interval

    def close(self) -> None:
        if self.sent or self.received or self.confirmed or self.errors or self.recorded:
            encoded = fold(self.counts).encode() if self.recorded else None
            self.closed.append((self.index, self.sent, self.received, self.confirmed, self.errors, self.warmup,
                                encoded))
            if self.recorded:
                self.counts = [0] * COUNTS_LEN
        self.sent = self.received = self.confirmed = self.errors = self.warmup = self.recorded = 0

    def take(self) -> List[tuple]:
        closed, self.closed = self.closed, []
        return closed


class _ProducerState:
    __slots__ = ("spec", "sent", "by_dest", "confirmed", "warmup_sent", "first", "last", "measured", "done", "lag")

    def __init__(self, spec: _ProducerSpec, destinations: int) -> None:
        self.spec = spec
        self.sent = 0
        self.by_dest = [0] * destinations  # also the next sf-seq for each destination
        self.confirmed = 0
        self.warmup_sent = 0
        self.first: Optional[int] = None  # wall ns of the first measured send
        self.last: Optional[int] = None
        self.measured = 0
        self.done = False
        self.lag: Any = None


class _SubState:
    __slots__ = ("group", "seen", "received", "distinct", "unexpected", "warmup", "measured", "first", "last")

    def __init__(self, group: str, seen: Dict[str, bytearray]) -> None:
        self.group = group
        self.seen = seen  # producer key -> bitmap of sf-seq values (shared by a queue's consumers)
        self.received = self.distinct = self.unexpected = self.warmup = self.measured = 0
        self.first: Optional[int] = None
        self.last: Optional[int] = None


class _Worker:
    """One worker: its producers and consumers as tasks of one event loop, driven through ``link``."""

    def __init__(self, spec: _WorkerSpec, link: Any) -> None:
        self.spec = spec
        self.link = link
        self.config = spec.config
        self.errors: List[str] = []
        self.error_count = 0
        self.producers = [_ProducerState(ps, len(spec.destinations)) for ps in spec.producers]
        self.groups: Dict[str, Dict[str, bytearray]] = {}
        self.subs: List[Tuple[Any, _SubState]] = []
        self.recorder: Optional[_Recorder] = None
        self.consumers_alive = 0
        self.stopping = False
        self.info: Dict[str, Any] = {}

    def _error(self, text: str) -> None:
        self.error_count += 1
        if self.recorder is not None:
            self.recorder.errors += 1
        if len(self.errors) < 20:
            self.errors.append(text)

    def _client(self) -> Any:
        from .._client import AsyncClient

        c = self.config
        kwargs: Dict[str, Any] = {}
        if c.versions:
            kwargs["versions"] = c.versions
        return AsyncClient(
            self.spec.url, login=c.login, passcode=c.passcode, virtual_host=c.virtual_host,
            heart_beat=c.heart_beat, connect_timeout=c.connect_timeout, reconnect=False, **kwargs,
        )

    async def run(self) -> None:
        spec = self.spec
        async with AsyncExitStack() as stack:
            try:
                for c in spec.consumers:
                    client = await stack.enter_async_context(self._client())
                    self.info.setdefault("server", client.server)
                    self.info.setdefault("version", client.version)
                    for d, destination in enumerate(spec.destinations):
                        group = _group(d, spec.fanout[d], c)
                        seen = self.groups.get(group)
                        if seen is None:
                            seen = self.groups[group] = {key: bytearray() for key in spec.all_producer_keys}
                        sub = await stack.enter_async_context(
                            client.subscribe(destination, ack=self.config.ack, buffer_size=self.config.buffer_size)
                        )
                        self.subs.append((sub, _SubState(group, seen)))
                clients = []
                for _ in self.producers:
                    client = await stack.enter_async_context(self._client())
                    self.info.setdefault("server", client.server)
                    self.info.setdefault("version", client.version)
                    clients.append(client)
            except Exception as exc:
                self.link.put(("fatal", exc))
                return
            self.link.put(("ready", dict(self.info)))
            t0 = await self._wait_for_go()
            if t0 is None:
                return
            self.recorder = _Recorder(t0, int(self.config.interval * 1e9))
            delay = (t0 - time.time_ns()) / 1e9
            if delay > 0:
                await anyio.sleep(delay)
            async with anyio.create_task_group() as tg:
                consumers = anyio.CancelScope()
                producers = anyio.CancelScope()
                tg.start_soon(self._consumers, consumers)
                tg.start_soon(self._producers, producers, clients, t0)
                tg.start_soon(self._reporter, consumers, producers)
            for sub, st in self.subs:  # what arrived before the stop still counts
                try:
                    while sub.pending:
                        batch = await sub.receive_batch(self.config.buffer_size)
                        self._take(st, batch, time.time_ns())
                        await self._ack(batch)
                except Exception:
                    pass
            self.recorder.close()
            final = self._final()
            try:
                # each client bounds its own DISCONNECT wait (shielded); no scope may wrap
                # this: the clients' task groups were entered before it
                await stack.aclose()
            except Exception as exc:  # DISCONNECT trouble is worth a line, not a failure of the run
                final["close_warning"] = f"closing connections: {exc!r}"
            self.link.put(("final", final))

    async def _wait_for_go(self) -> Optional[int]:
        while True:
            for message in self.link.poll():
                if message[0] == "go":
                    return message[1]
                if message[0] in ("stop", "abort"):
                    return None
            await anyio.sleep(0.002)

    async def _reporter(self, consumers: anyio.CancelScope, producers: anyio.CancelScope) -> None:
        rec = self.recorder
        assert rec is not None
        while True:
            await anyio.sleep(_TICK)
            now = time.time_ns()
            if now >= rec.next_boundary:
                rec.roll(now)
            stop = False
            for message in self.link.poll():
                if message[0] in ("stop", "abort"):
                    stop = True
            if stop:
                producers.cancel()
                consumers.cancel()
                return
            self.link.put(("progress", self._snapshot()))

    def _snapshot(self) -> Dict[str, Any]:
        rec = self.recorder
        by_dest = [0] * len(self.spec.destinations)
        for ps in self.producers:
            for d, n in enumerate(ps.by_dest):
                by_dest[d] += n
        return {
            "sent": sum(ps.sent for ps in self.producers),
            "sent_by_dest": by_dest,
            "confirmed": sum(ps.confirmed for ps in self.producers),
            "received": sum(st.received for _, st in self.subs),
            "distinct": sum(st.distinct for _, st in self.subs),
            "errors": self.error_count,
            "producers_done": all(ps.done for ps in self.producers),
            "consumers_alive": self.consumers_alive,
            "intervals": rec.take() if rec is not None else [],
        }

    def _final(self) -> Dict[str, Any]:
        snap = self._snapshot()
        per_group: Dict[str, int] = {}
        for _, st in self.subs:
            per_group[st.group] = per_group.get(st.group, 0) + st.received - st.unexpected
        lag = None
        for ps in self.producers:
            if ps.lag is not None and ps.lag.get_total_count():
                if lag is None:
                    lag = new_histogram()
                lag.add(ps.lag)
        times = {
            "send_first": _min(ps.first for ps in self.producers),
            "send_last": _max(ps.last for ps in self.producers),
            "receive_first": _min(st.first for _, st in self.subs),
            "receive_last": _max(st.last for _, st in self.subs),
        }
        snap.update(
            sent_by={ps.spec.key: list(ps.by_dest) for ps in self.producers},
            measured_sent=sum(ps.measured for ps in self.producers),
            warmup_sent=sum(ps.warmup_sent for ps in self.producers),
            measured_received=sum(st.measured for _, st in self.subs),
            warmup_received=sum(st.warmup for _, st in self.subs),
            unexpected=sum(st.unexpected for _, st in self.subs),
            received_by_group=per_group,
            seen={group: {key: bytes(bm) for key, bm in seen.items() if bm} for group, seen in self.groups.items()},
            lag=lag.encode() if lag is not None else None,
            error_texts=list(self.errors),
            times=times,
        )
        return snap

    # -- consumers ------------------------------------------------------------------------

    async def _consumers(self, scope: anyio.CancelScope) -> None:
        with scope:
            async with anyio.create_task_group() as tg:
                for sub, st in self.subs:
                    self.consumers_alive += 1
                    tg.start_soon(self._consume, sub, st)

    async def _consume(self, sub: Any, st: _SubState) -> None:
        receive_batch = sub.receive_batch
        take, ack = self._take, self._ack
        time_ns = time.time_ns
        n = self.config.buffer_size
        acking = self.config.ack != "auto"
        try:
            while True:
                batch = await receive_batch(n)
                take(st, batch, time_ns())
                if acking:
                    await ack(batch)
        except Exception as exc:
            self._error(f"consumer of {sub.destination}: {type(exc).__name__}: {exc}")
        finally:
            self.consumers_alive -= 1

    def _take(self, st: _SubState, batch: List[Any], now: int) -> None:
        """Count one batch of messages received at ``now`` (wall ns): the consumers' hot path."""
        rec = self.recorder
        assert rec is not None
        if now >= rec.next_boundary:
            rec.roll(now)
        counts = rec.counts
        seen = st.seen
        distinct = unexpected = warm = 0
        for message in batch:
            # Frame is a tuple (command, headers dict, body, repeats): frames.py documents it
            h = message.frame[1]
            bitmap = seen.get(h.get(H_PRODUCER))
            if bitmap is None:
                unexpected += 1
                continue
            try:
                seq = int(h[H_SEQ])
                ts = int(h[H_TS])
            except (KeyError, ValueError):
                unexpected += 1
                continue
            i = seq >> 3
            bit = 1 << (seq & 7)
            if i >= len(bitmap):
                if seq < 0:
                    unexpected += 1
                    continue
                bitmap.extend(bytes(i + 1 - len(bitmap) + 4096))
            if not bitmap[i] & bit:
                bitmap[i] |= bit
                distinct += 1
            if H_WARMUP in h:
                warm += 1
                continue
            latency = (now - ts) // 1000
            if latency < 0:  # a clock step: count it as no delay at all
                latency = 0
            # latency_index, inlined
            b = (latency | SUB_MASK).bit_length() - SHIFT
            try:
                counts[((b + 1) << HALF_MAGNITUDE) + (latency >> b) - HALF_COUNT] += 1
            except IndexError:  # beyond an hour: clamp into range
                counts[COUNTS_LEN - 1] += 1
        n = len(batch)
        st.received += n
        st.distinct += distinct
        st.unexpected += unexpected
        st.warmup += warm
        measured = n - unexpected - warm
        if measured:
            st.measured += measured
            if st.first is None:
                st.first = now
            st.last = now
        rec.received += n
        rec.warmup += warm
        rec.recorded += measured

    async def _ack(self, batch: List[Any]) -> None:
        if self.config.ack == "client":
            await batch[-1].ack()  # cumulative
        elif self.config.ack == "client-individual":
            for message in batch:
                await message.ack()

    # -- producers ------------------------------------------------------------------------

    async def _producers(self, scope: anyio.CancelScope, clients: List[Any], t0: int) -> None:
        with scope:
            async with anyio.create_task_group() as tg:
                for ps, client in zip(self.producers, clients):
                    tg.start_soon(self._produce, ps, client, t0)

    async def _produce(self, ps: _ProducerState, client: Any, t0: int) -> None:
        try:
            await self._send_all(ps, client, t0)
            with anyio.fail_after(max(30.0, self.config.drain_timeout)):
                await client.aclose()  # DISCONNECT, confirmed: the broker has every frame before it
            if not ps.spec.rate and ps.measured:
                # closed loop: "sent" means taken by the broker, not queued in our buffer
                ps.last = time.time_ns()
        except Exception as exc:
            self._error(f"producer {ps.spec.index}: {type(exc).__name__}: {exc}")
        finally:
            ps.done = True

    async def _send_all(self, ps: _ProducerState, client: Any, t0: int) -> None:
        """Send this producer's messages: the producers' hot path.

        Per message: a clock read, a header dict, ``client.send``. Everything else
        (counters, timeline, yields to the event loop) is done once per burst of up
        to ``_BURST`` messages; in open-loop mode a burst is what is due by now.
        """
        config = self.config
        spec = ps.spec
        rec = self.recorder
        assert rec is not None
        destinations = self.spec.destinations
        nd = len(destinations)
        body = self.spec.body
        extra = dict(config.headers) if config.headers else None
        key = spec.key
        quota = spec.quota if spec.quota is not None else sys.maxsize
        _, duration = config.limits()
        end = t0 + int(duration * 1e9) if duration is not None else sys.maxsize
        warm_until = t0 + int(config.warmup * 1e9) if config.warmup else 0
        warm_count = spec.warmup_messages
        by_dest = ps.by_dest  # also the next sf-seq per destination
        d = spec.first_destination
        send = client.send
        time_ns = time.time_ns
        checkpoint = anyio.lowlevel.checkpoint
        receipts = config.receipts
        window = config.receipt_window
        outstanding: Deque[Any] = deque()
        tx_size = config.transaction_size
        mode = 2 if tx_size else 1 if receipts else 0
        tx: Any = None
        in_tx = 0
        rate = spec.rate
        phase = spec.phase
        due = 0
        if rate:
            step = 1e9 / rate
            ps.lag = new_histogram()
            lag_record = ps.lag.record_value
            mono0 = time.monotonic_ns() + (t0 - time_ns())  # t0 on the monotonic clock
        i = first_i = warm = 0
        now = 0

        def account() -> None:  # the burst's counters, once per burst (and on the way out)
            n = i - first_i
            if not n:
                return
            ps.sent = i
            ps.warmup_sent += warm
            rec.sent += n
            measured = n - warm
            if measured:
                ps.measured += measured
                if ps.first is None:
                    ps.first = burst_start
                ps.last = now

        try:
            while i < quota:
                if rate:
                    intended = int((i + phase) * step)  # ns after t0
                    if t0 + intended >= end:
                        break
                    mono = time.monotonic_ns()
                    ahead = mono0 + intended - mono
                    if ahead > 0:
                        await anyio.sleep(ahead / 1e9)
                        mono = time.monotonic_ns()
                    # every message due by now, at most a burst before yielding
                    due = int((mono - mono0) / step - phase) + 1
                    stop = min(quota, i + _BURST, max(due, i + 1))
                else:
                    if time_ns() >= end:
                        break
                    stop = min(quota, i + _BURST)
                first_i = i
                warm = 0
                burst_start = time_ns()
                while i < stop:
                    now = time_ns()
                    if rate:
                        ts = t0 + int((i + phase) * step)  # the intended time is the stamp
                        if ts >= end:
                            break
                        lag = (now - ts) // 1000
                        if not lag_record(lag):
                            lag_record(MAX_LATENCY_US if lag > 0 else 0)
                    else:
                        ts = now
                    seq = by_dest[d]
                    h = {H_PRODUCER: key, H_SEQ: str(seq), H_TS: str(ts)}
                    if i < warm_count or ts < warm_until:
                        h[H_WARMUP] = "1"
                        warm += 1
                    if extra:
                        h.update(extra)
                    if mode == 0:
                        await send(destinations[d], body, headers=h)
                    elif mode == 1:
                        outstanding.append(await send(destinations[d], body, headers=h, receipt=True, wait=False))
                        while outstanding and outstanding[0].done():
                            receipt = outstanding.popleft()
                            if receipt.error is not None:
                                await receipt  # raises it
                            ps.confirmed += 1
                            rec.confirmed += 1
                        if len(outstanding) >= window:
                            await outstanding.popleft()
                            ps.confirmed += 1
                            rec.confirmed += 1
                    else:
                        if tx is None:
                            tx = client.transaction(receipt=receipts)
                            await tx.__aenter__()
                        await tx.send(destinations[d], body, headers=h)
                        in_tx += 1
                    by_dest[d] = seq + 1
                    d += 1
                    if d == nd:
                        d = 0
                    i += 1
                    if in_tx >= tx_size and tx is not None:
                        tx_obj, tx = tx, None
                        await tx_obj.__aexit__(None, None, None)  # COMMIT (with a receipt when asked)
                        if receipts:
                            ps.confirmed += in_tx
                            rec.confirmed += in_tx
                        in_tx = 0
                account()
                first_i = i
                warm = 0
                if now >= rec.next_boundary:
                    rec.roll(now)
                if not rate or i < due:  # (caught up: the next turn sleeps anyway)
                    await checkpoint()
            if tx is not None:
                tx_obj, tx = tx, None
                await tx_obj.__aexit__(None, None, None)
                if receipts:
                    ps.confirmed += in_tx
                    rec.confirmed += in_tx
                in_tx = 0
            while outstanding:
                await outstanding.popleft()
                ps.confirmed += 1
                rec.confirmed += 1
        except BaseException:
            account()  # what was handed to the client before the failure was sent
            if tx is not None:
                with anyio.CancelScope(shield=True):
                    try:
                        await tx.__aexit__(*sys.exc_info())
                    except Exception:
                        pass
            raise


def _min(values: Any) -> Optional[int]:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def _max(values: Any) -> Optional[int]:
    present = [v for v in values if v is not None]
    return max(present) if present else None


async def _worker_main(spec: _WorkerSpec, link: Any) -> None:
    await _Worker(spec, link).run()


# -- links between the coordinator and its workers -------------------------------------------


class _LocalLink:
    """A worker in the coordinator's own event loop: two deques."""

    def __init__(self) -> None:
        self.up: Deque[tuple] = deque()  # worker -> coordinator
        self.down: Deque[tuple] = deque()  # coordinator -> worker
        self.finished = False

    # worker side
    def put(self, message: tuple) -> None:
        self.up.append(message)

    def poll(self) -> List[tuple]:
        out = list(self.down)
        self.down.clear()
        return out

    # coordinator side
    def receive(self) -> List[tuple]:
        out = list(self.up)
        self.up.clear()
        return out

    def send(self, message: tuple) -> None:
        self.down.append(message)

    def alive(self) -> bool:
        return not self.finished


class _PipeLink:
    """The worker side of a worker process's pipe."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def put(self, message: tuple) -> None:
        self.conn.send(message)

    def poll(self) -> List[tuple]:
        out = []
        while self.conn.poll(0):
            out.append(self.conn.recv())
        return out


class _ProcessLink:
    """The coordinator side of a worker process."""

    def __init__(self, process: Any, conn: Any) -> None:
        self.process = process
        self.conn = conn

    def receive(self) -> List[tuple]:
        out = []
        try:
            while self.conn.poll(0):
                out.append(self.conn.recv())
        except (EOFError, OSError):
            pass
        return out

    def send(self, message: tuple) -> None:
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError):
            pass

    def alive(self) -> bool:
        return self.process.is_alive()


def _process_main(spec: _WorkerSpec, conn: Any, backend: str, backend_options: Dict[str, Any]) -> None:
    """A worker process: run one worker on its own event loop."""
    link = _PipeLink(conn)
    try:
        anyio.run(_worker_main, spec, link, backend=backend, backend_options=backend_options)
    except KeyboardInterrupt:
        pass
    except BaseException as exc:  # reported to the coordinator, which says what happened
        try:
            conn.send(("fatal", exc))
        except Exception:
            conn.send(("fatal", RuntimeError(f"{type(exc).__name__}: {exc}")))
    finally:
        conn.close()


def _backend() -> Tuple[str, Dict[str, Any], str]:
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


# -- the coordinator -------------------------------------------------------------------------


class _WorkerView:
    def __init__(self, spec: _WorkerSpec, link: Any) -> None:
        self.spec = spec
        self.link = link
        self.ready: Optional[Dict[str, Any]] = None
        self.progress: Dict[str, Any] = {}
        self.final: Optional[Dict[str, Any]] = None


class _Timeline:
    def __init__(self) -> None:
        self.rows: Dict[int, List[Any]] = {}

    def add(self, intervals: Sequence[tuple]) -> None:
        hist_class = histogram_class()
        for index, sent, received, confirmed, errors, warmup, encoded in intervals:
            row = self.rows.get(index)
            if row is None:
                row = self.rows[index] = [0, 0, 0, 0, 0, None]
            row[0] += sent
            row[1] += received
            row[2] += confirmed
            row[3] += errors
            row[4] += warmup
            if encoded is not None:
                hist = hist_class.decode(encoded)
                if row[5] is None:
                    row[5] = new_histogram()
                row[5].add(hist)


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
    specs = _plan(config, url, destinations, run_id)
    backend, backend_options, backend_label = _backend()
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    views: List[_WorkerView] = []
    processes: List[Any] = []
    error: Optional[Exception] = None
    result: Dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        if len(specs) == 1 and config.processes == 1:
            link = _LocalLink()

            async def local() -> None:
                try:
                    await _worker_main(specs[0], link)
                except Exception as exc:
                    link.put(("fatal", exc))
                finally:
                    link.finished = True

            views.append(_WorkerView(specs[0], link))
            tg.start_soon(local)
        else:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            for spec in specs:
                parent, child = ctx.Pipe()
                process = ctx.Process(
                    target=_process_main, args=(spec, child, backend, backend_options),
                    name=f"stompfast-loadgen-{spec.worker}", daemon=True,
                )
                process.start()
                child.close()
                processes.append(process)
                views.append(_WorkerView(spec, _ProcessLink(process, parent)))
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
    return _merge(config, views, destinations, result, url, in_process, backend_label, started_at)


def _receive(view: _WorkerView, timeline: _Timeline) -> None:
    for message in view.link.receive():
        kind = message[0]
        if kind == "ready":
            view.ready = message[1]
        elif kind == "progress":
            view.progress = message[1]
            timeline.add(message[1]["intervals"])
        elif kind == "final":
            view.final = message[1]
            view.progress = message[1]
            timeline.add(message[1]["intervals"])
        elif kind == "fatal":
            raise message[1]


async def _drive(
    config: LoadConfig, views: List[_WorkerView], destinations: List[str],
    progress: Optional[Callable[[Progress], Any]],
) -> Dict[str, Any]:
    timeline = _Timeline()
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
    lead = 0.005 if len(views) == 1 and isinstance(views[0].link, _LocalLink) else 0.05
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
        await anyio.sleep(_TICK / 2)
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
            ))
    return state


# -- merging ---------------------------------------------------------------------------------


def _popcount(value: int) -> int:
    try:
        return value.bit_count()
    except AttributeError:  # Python 3.9
        return bin(value).count("1")


def _merge(
    config: LoadConfig, views: List[_WorkerView], destinations: List[str], state: Dict[str, Any],
    url: str, in_process: bool, backend_label: str, started_at: str,
) -> LoadResult:
    finals = [v.final for v in views if v.final is not None]
    consumers = config.consumers
    fanout = [is_fanout(d) for d in destinations]
    # sent per producer and destination
    sent_by: Dict[str, List[int]] = {}
    for f in finals:
        sent_by.update(f["sent_by"])
    by_dest = [sum(counts[d] for counts in sent_by.values()) for d in range(len(destinations))]
    sent = sum(by_dest)
    # every group a message is due in, with its bitmaps OR-ed over the workers
    groups: List[Tuple[str, int]] = []
    for d in range(len(destinations)):
        if consumers == 0:
            continue
        if fanout[d]:
            groups.extend((_group(d, True, c), d) for c in range(consumers))
        else:
            groups.append((_group(d, False, 0), d))
    distinct = missing = 0
    received_in_groups = 0
    for group, d in groups:
        merged: Dict[str, int] = {}
        for f in finals:
            for key, bitmap in f["seen"].get(group, {}).items():
                merged[key] = merged.get(key, 0) | int.from_bytes(bitmap, "little")
            received_in_groups += f["received_by_group"].get(group, 0)
        for key, sent_counts in sent_by.items():
            due = sent_counts[d]
            bits = merged.get(key, 0) & ((1 << due) - 1)
            got = _popcount(bits)
            distinct += got
            missing += due - got
    expected = sum(n * (consumers if fanout[d] else 1) for d, n in enumerate(by_dest)) if consumers else 0
    received = sum(f["received"] for f in finals)
    unexpected = sum(f["unexpected"] for f in finals)
    duplicates = received_in_groups - distinct
    confirmed = sum(f["confirmed"] for f in finals)
    error_count = sum(f["errors"] for f in finals)
    error_texts: List[str] = []
    for f in finals:
        error_texts.extend(f["error_texts"])
    warnings: List[str] = []
    for f in finals:
        if f.get("close_warning"):
            warnings.append(f["close_warning"])
    # latency: the sum of the intervals' histograms; rates over the measured part
    timeline: _Timeline = state["timeline"]
    total = new_histogram()
    for row in timeline.rows.values():
        if row[5] is not None:
            total.add(row[5])
    lag = None
    for f in finals:
        if f["lag"] is not None:
            if lag is None:
                lag = new_histogram()
            lag.add(histogram_class().decode(f["lag"]))
    times = [f["times"] for f in finals]
    send_first = _min(t["send_first"] for t in times)
    send_last = _max(t["send_last"] for t in times)
    recv_first = _min(t["receive_first"] for t in times)
    recv_last = _max(t["receive_last"] for t in times)
    measured_sent = sum(f["measured_sent"] for f in finals)
    measured_received = sum(f["measured_received"] for f in finals)
    size = len(config.body) if config.body is not None else config.size

    def rate(n: int, first: Optional[int], last: Optional[int]) -> Optional[float]:
        if not n or first is None or last is None or last <= first:
            return None
        return round(n / ((last - first) / 1e9), 1)

    send_rate = rate(measured_sent, send_first, send_last)
    receive_rate = rate(measured_received, recv_first, recv_last)
    rates: Dict[str, Optional[float]] = {
        "target_msgs_per_s": config.rate,
        "send_msgs_per_s": send_rate,
        "receive_msgs_per_s": receive_rate,
        "send_mb_per_s": round(send_rate * size / 1e6, 3) if send_rate else None,
        "receive_mb_per_s": round(receive_rate * size / 1e6, 3) if receive_rate else None,
        "send_seconds": round((send_last - send_first) / 1e9, 6) if send_first and send_last else None,
        "receive_seconds": round((recv_last - recv_first) / 1e9, 6) if recv_first and recv_last else None,
    }
    t0 = state["t0"]
    end = state.get("stopped_wall", time.time_ns())
    interval_ns = int(config.interval * 1e9)
    rows = []
    last_index = max(timeline.rows) if timeline.rows else -1
    for index in range(last_index + 1):
        s, r, c, e, w, hist = timeline.rows.get(index, [0, 0, 0, 0, 0, None])
        start = t0 + index * interval_ns
        seconds = max(1e-9, min(interval_ns, end - start) / 1e9) if index == last_index else config.interval
        pct = percentiles(hist)
        rows.append({
            "t": round(index * config.interval, 6),
            "seconds": round(seconds, 6),
            "sent": s,
            "received": r,
            "confirmed": c,
            "errors": e,
            "warmup_received": w,
            "send_rate": round(s / seconds, 1),
            "receive_rate": round(r / seconds, 1),
            "latency_us": {k: pct[k] for k in ("p50", "p90", "p99", "max")} if pct else None,
        })
    counts = {
        "sent": sent,
        "confirmed": confirmed,
        "expected": expected,
        "received": received,
        "distinct": distinct,
        "duplicates": duplicates,
        "missing": missing,
        "unexpected": unexpected,
        "errors": error_count,
        "warmup_sent": sum(f["warmup_sent"] for f in finals),
        "warmup_received": sum(f["warmup_received"] for f in finals),
    }
    problems: List[str] = []
    if missing:
        how = "nothing arrived for" if state.get("drained") is False else "after"
        problems.append(f"{missing} of {expected} expected messages never arrived ({how} the"
                        f" {config.drain_timeout:g} s drain timeout)")
    if duplicates:
        problems.append(f"{duplicates} messages arrived more than once")
    if error_count:
        problems.append(f"{error_count} error{'s' if error_count != 1 else ''}: " + "; ".join(error_texts[:3]))
    if config.receipts and confirmed < sent and not error_count:
        problems.append(f"only {confirmed} of {sent} messages were confirmed by a receipt")
    if unexpected:
        warnings.append(f"{unexpected} messages not sent by this run arrived (leftovers in a reused destination?)")
    if sent == 0:
        problems.append("no message was sent")
    ready = next((v.ready for v in views if v.ready), {}) or {}
    broker = {
        "url": mask(url),
        "in_process": in_process,
        "server": ready.get("server"),
        "stomp_version": ready.get("version"),
        "destinations": list(destinations),
    }
    return LoadResult(
        config=config,
        ok=not problems,
        problems=problems,
        warnings=warnings,
        counts=counts,
        rates=rates,
        latency_us=percentiles(total),
        send_lag_us=percentiles(lag),
        timeline=rows,
        errors=error_texts,
        broker=broker,
        versions=_versions(backend_label),
        machine=_machine(),
        started_at=started_at,
        elapsed=(end - t0) / 1e9,
        histogram=total,
    )


def _versions(backend: str) -> Dict[str, Any]:
    from importlib import metadata

    from .. import __version__
    from .._scanner import IMPLEMENTATION

    out: Dict[str, Any] = {
        "stompfast": __version__,
        "scanner": IMPLEMENTATION,
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "backend": backend,
    }
    for dist in ("anyio", "uvloop", "trio", "hdrhistogram"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _machine() -> Dict[str, Any]:
    out: Dict[str, Any] = {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "cpu_model": None,
        "memory_bytes": None,
        "load_average": None,
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    out["cpu_model"] = line.partition(":")[2].strip()
                    break
    except OSError:
        pass
    try:
        out["memory_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        pass
    try:
        out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        pass
    return out


def run(
    config: LoadConfig,
    progress: Optional[Callable[[Progress], Any]] = None,
    *,
    backend: str = "asyncio",
    backend_options: Optional[Dict[str, Any]] = None,
) -> LoadResult:
    """Synchronous :func:`run_load`: runs its own event loop (``backend`` as for ``anyio.run``)."""
    return anyio.run(run_load, config, progress, backend=backend, backend_options=backend_options)


# -- plotting --------------------------------------------------------------------------------


def write_plot(result: LoadResult, path: str) -> None:
    """Write throughput and latency over time as a PNG (or any format matplotlib knows by the suffix).

    Raises:
        ImportError: matplotlib is not installed (the message says how to install it).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(PLOT_HINT) from exc
    rows = result.timeline

    def steps(pairs: List[Tuple[Dict[str, Any], float]]) -> Tuple[List[float], List[float]]:
        # one step per interval, drawn over the interval's whole width (the last may be short)
        xs = [row["t"] for row, _ in pairs]
        ys = [y for _, y in pairs]
        if pairs:
            xs.append(pairs[-1][0]["t"] + pairs[-1][0]["seconds"])
            ys.append(ys[-1])
        return xs, ys

    fig = Figure(figsize=(10, 7), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot(*steps([(row, row["send_rate"]) for row in rows]), label="sent/s", drawstyle="steps-post",
             linewidth=3, alpha=0.6)
    top.plot(*steps([(row, row["receive_rate"]) for row in rows]), label="received/s", drawstyle="steps-post")
    if result.config.rate:
        top.axhline(result.config.rate, linestyle=":", color="grey", label="target rate")
    top.set_ylabel("messages per second")
    top.set_ylim(bottom=0)
    top.grid(True, alpha=0.3)
    top.legend(loc="lower right")
    for key, style in (("p50", "-"), ("p99", "--"), ("max", ":")):
        points = [(row, row["latency_us"][key] / 1000) for row in rows if row["latency_us"]]
        if points:
            bottom.plot(*steps(points), style, label=key, drawstyle="steps-post")
    bottom.set_yscale("log")
    bottom.set_ylabel("end-to-end latency (ms)")
    bottom.set_xlabel("seconds since the producers started")
    bottom.grid(True, which="both", alpha=0.3)
    if any(row["latency_us"] for row in rows):
        bottom.legend(loc="upper right")
    if result.config.warmup:
        for ax in (top, bottom):
            ax.axvspan(0, result.config.warmup, color="grey", alpha=0.15, label="warm-up")
    c = result.counts
    fig.suptitle(
        f"stompfast bench: {result.config.producers} producer(s), {result.config.consumers} consumer(s),"
        f" {c['sent']:,} sent, {c['received']:,} received"
        + ("" if result.ok else "  [" + "; ".join(result.problems)[:80] + "]")
    )
    fig.savefig(path, dpi=100)


# -- the `stompfast bench` command -------------------------------------------------------------

BENCH_EPILOG = f"""\
Without --url (and without ${ENV_URL}) the in-process test broker is started on a free
loopback port and the load runs against it, so a plain 'stompfast bench' works anywhere.

Consumers subscribe before the producers start. Every message carries sf-producer,
sf-seq and sf-ts headers; consumers count every message exactly (duplicates, gaps)
and record end-to-end latency (now - sf-ts) in an HDR histogram. With --rate the
producers send on a fixed schedule and stamp the *intended* send time, so a producer
that falls behind shows it as latency (no coordinated omission); without --rate they
send as fast as they can (closed loop). The run ends when every message arrived, or
--drain-timeout seconds after the producers stopped with nothing new arriving.

Output: a table on stdout (--json: one JSON document instead, nothing else on stdout),
live progress and the verdict on stderr (-q: errors only). Exit 0 when every message
arrived exactly once and nothing failed; 1 when messages were lost or duplicated or
errors happened (the verdict says which); 2 for usage errors.

examples:
  stompfast bench                                      # 100,000 messages or 10 s, in-process broker
  stompfast bench --count 2000 --json > result.json
  stompfast bench --url stomp://guest:guest@127.0.0.1:61613/ -p 2 -c 2 --duration 10
  stompfast bench --rate 5000 --duration 30 --warmup 5s --plot run.png
  stompfast bench --receipts --receipt-window 100 --ack client-individual --size 1024
  stompfast bench -d /topic/prices -c 3 --transaction-size 10 --processes 2

{CONNECTION_HELP}"""


def _warmup(text: str) -> Tuple[float, int]:
    """``--warmup``: ``5`` or ``5s`` seconds, ``1000msgs`` messages."""
    raw = text.strip().lower()
    try:
        for suffix in ("messages", "msgs", "msg"):
            if raw.endswith(suffix):
                n = int(raw[: -len(suffix)])
                if n < 0:
                    raise ValueError
                return 0.0, n
        seconds = float(raw[:-1] if raw.endswith("s") else raw)
        if not (seconds >= 0 and math.isfinite(seconds)):
            raise ValueError
        return seconds, 0
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seconds (5, 2.5s) or a number of messages (1000msgs), got {text!r}"
        ) from None


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _positive_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number of messages per second, got {text!r}")
    return value


def _default_loop() -> str:
    return "uvloop" if importlib.util.find_spec("uvloop") is not None and sys.platform != "win32" else "asyncio"


def add_bench_command(subparsers: Any) -> None:
    """Add ``stompfast bench`` (listed in :data:`stompfast.cli.COMMANDS`)."""
    p = subparsers.add_parser(
        "bench",
        help="generate load; measure throughput, latency and delivery",
        description="Run producers and consumers against a broker (default: an in-process one) and report"
        " throughput, end-to-end latency percentiles and exact delivery counts.",
        epilog=BENCH_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shape = p.add_argument_group("load")
    shape.add_argument("-p", "--producers", metavar="N", type=positive_int, default=1,
                       help="producer connections (default 1)")
    shape.add_argument("-c", "--consumers", metavar="M", type=_non_negative_int, default=1,
                       help="consumer connections, each subscribed to every destination (default 1; 0: publish only)")
    shape.add_argument("--processes", metavar="P", type=positive_int, default=1,
                       help="spread producers and consumers over P worker processes (default 1: one event loop)")
    shape.add_argument("-d", "--destination", metavar="DEST", dest="destinations", action="append", default=[],
                       help="destination, repeatable, used round-robin (default /queue/stompfast-bench-<random>);"
                       " /topic/ and /exchange/ ones give each consumer a copy")
    msgs = p.add_argument_group("messages")
    msgs.add_argument("-s", "--size", metavar="BYTES", type=_non_negative_int, default=None,
                      help="body size in bytes (default 100)")
    msgs.add_argument("--body-file", metavar="PATH", help="send the bytes of PATH as every body")
    msgs.add_argument("-H", "--header", metavar="NAME:VALUE", dest="headers", action="append",
                      type=parse_header, default=[], help="add a header to every message, e.g. persistent:true")
    stop = p.add_argument_group("how much, how fast")
    stop.add_argument("-n", "--count", metavar="N", type=positive_int,
                      help="messages in total (default: 100,000 or 10 s, whichever comes first)")
    stop.add_argument("--duration", metavar="SECONDS", type=positive_float,
                      help="stop sending after SECONDS (with --count: whichever comes first)")
    stop.add_argument("--rate", metavar="R", type=_positive_rate,
                      help="open loop: R messages per second in total on a fixed schedule"
                      " (default: as fast as possible)")
    stop.add_argument("--warmup", metavar="SECONDS|Nmsgs", type=_warmup, default=(0.0, 0),
                      help="leave the first SECONDS (5, 2.5s) or N messages (1000msgs) out of latency and rates")
    stop.add_argument("--drain-timeout", metavar="SECONDS", type=positive_float, default=5.0,
                      help="after the producers stop, give up on missing messages when nothing arrived for"
                      " SECONDS (default 5)")
    delivery = p.add_argument_group("delivery")
    delivery.add_argument("--receipts", action=argparse.BooleanOptionalAction, default=False,
                          help="ask for a RECEIPT for every SEND (or every COMMIT with transactions; default off)")
    delivery.add_argument("--receipt-window", metavar="W", type=positive_int, default=1000,
                          help="with --receipts: at most W unconfirmed messages per producer (default 1000)")
    delivery.add_argument("--ack", choices=_ACK_MODES, default="auto", help="consumers' ack mode (default auto)")
    delivery.add_argument("--transaction-size", metavar="K", type=_non_negative_int, default=0,
                          help="producers send in transactions of K messages (default 0: none)")
    delivery.add_argument("--buffer-size", metavar="N", type=positive_int, default=1000,
                          help="consumer buffer, and broker prefetch in the client ack modes (default 1000)")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="write the complete result as JSON on stdout")
    out.add_argument("--plot", metavar="FILE.png", help="write throughput and latency over time (needs matplotlib)")
    out.add_argument("--interval", metavar="SECONDS", type=positive_float, default=1.0,
                     help="timeline resolution (default 1)")
    out.add_argument("--loop", choices=("asyncio", "uvloop", "trio"), default=None,
                     help=f"event loop (default {_default_loop()}: uvloop when installed)")
    add_common_options(p)
    add_connection_options(p)
    p.set_defaults(run=run_bench)


def _loop_backend(name: Optional[str]) -> Tuple[str, Dict[str, Any]]:
    name = name or _default_loop()
    if name == "uvloop":
        if importlib.util.find_spec("uvloop") is None:
            raise UsageError("--loop uvloop: uvloop is not installed (pip install 'stompfast[uvloop]')")
        return "asyncio", {"use_uvloop": True}
    if name == "trio" and importlib.util.find_spec("trio") is None:
        raise UsageError("--loop trio: trio is not installed (pip install 'stompfast[trio]')")
    return name, {}


def _describe(config: LoadConfig, destinations: Sequence[str]) -> str:
    count, duration = config.limits()
    limit = " or ".join(x for x in (
        f"{count:,} messages" if count is not None else "",
        f"{duration:g} s" if duration is not None else "",
    ) if x)
    size = len(config.body) if config.body is not None else config.size
    pace = f"{config.rate:,.0f} msgs/s (open loop)" if config.rate else "as fast as possible (closed loop)"
    extras = []
    if config.receipts:
        extras.append(f"receipts (window {config.receipt_window})")
    if config.transaction_size:
        extras.append(f"transactions of {config.transaction_size}")
    if config.ack != "auto":
        extras.append(f"ack {config.ack}")
    if config.processes > 1:
        extras.append(f"{config.processes} processes")
    where = ", ".join(destinations) if destinations else "a fresh queue"
    return (
        f"{plural(config.producers, 'producer')}, {plural(config.consumers, 'consumer')},"
        f" {size}-byte messages to {where}; {limit}, {pace}" + (f"; {', '.join(extras)}" if extras else "")
    )


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        text = f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
    else:
        text = f"{value:,}"
    return text + unit


def _table_rows(result: LoadResult) -> List[Tuple[str, str]]:
    c, r = result.counts, result.rates
    lat = result.latency_us
    rows = [
        ("broker", f"{result.broker['url']}" + (" (in-process)" if result.broker["in_process"] else "")
         + (f", {result.broker['server']}" if result.broker.get("server") else "")
         + (f", STOMP {result.broker['stomp_version']}" if result.broker.get("stomp_version") else "")),
        ("sent", f"{_fmt(c['sent'])}  ({_fmt(r['send_msgs_per_s'], ' msgs/s')}, {_fmt(r['send_mb_per_s'], ' MB/s')})"
         + (f"  target {_fmt(float(r['target_msgs_per_s'] or 0), ' msgs/s')}" if r.get("target_msgs_per_s") else "")),
        ("confirmed", _fmt(c["confirmed"]) if result.config.receipts else "- (no receipts asked)"),
        ("received", f"{_fmt(c['received'])} of {_fmt(c['expected'])} expected"
         f"  ({_fmt(r['receive_msgs_per_s'], ' msgs/s')})"),
        ("duplicates / missing", f"{_fmt(c['duplicates'])} / {_fmt(c['missing'])}"),
        ("errors", _fmt(c["errors"])),
    ]
    if c["unexpected"]:
        rows.append(("unexpected", _fmt(c["unexpected"])))
    if c["warmup_sent"]:
        rows.append(("warm-up (excluded)", f"{_fmt(c['warmup_sent'])} sent, {_fmt(c['warmup_received'])} received"))
    if lat:
        rows.append(("latency", "  ".join(f"{k} {_ms(lat[k])}" for k in ("p50", "p90", "p99", "p99.9", "max"))))
    if result.send_lag_us:
        lag = result.send_lag_us
        rows.append(("send lag (behind schedule)", "  ".join(f"{k} {_ms(lag[k])}" for k in ("p50", "p99", "max"))))
    return rows


def _ms(us: float) -> str:
    if us < 1000:
        return f"{us:,.0f} us"
    return f"{us / 1000:,.2f} ms" if us < 100_000 else f"{us / 1000:,.0f} ms"


def _print_table(result: LoadResult, title: str) -> None:
    rows = _table_rows(result)
    console = None
    if isatty(sys.stdout):
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            pass
        else:
            console = Console(highlight=False)
    if console is not None:
        table = Table(title=title, show_header=False, title_justify="left")
        table.add_column(style="bold")
        table.add_column()
        for name, value in rows:
            table.add_row(name, value)
        console.print(table)
        return
    width = max(len(name) for name, _ in rows)
    print(title)
    for name, value in rows:
        print(f"  {name.ljust(width)}  {value}")
    sys.stdout.flush()


def _progress_line(p: Progress) -> str:
    if p.phase == "connecting":
        return "connecting and subscribing..."
    expected = f" of {p.expected:,}" if p.expected is not None else ""
    text = (
        f"{p.elapsed:6.1f} s  sent {p.sent:,} ({p.send_rate:,.0f}/s)  received {p.received:,}{expected}"
        f" ({p.receive_rate:,.0f}/s)  errors {p.errors}"
    )
    return text + ("  draining" if p.phase == "draining" else "")


def run_bench(args: argparse.Namespace, ctx: Dict[str, Any]) -> int:
    """``stompfast bench``: run the load, print the result, exit 0 (clean) or 1 (lost messages, errors)."""
    import json

    try:
        histogram_class()
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise UsageError(PLOT_HINT)
    if args.size is not None and args.body_file is not None:
        raise UsageError("give --size or --body-file, not both")
    env_url = os.environ.get(ENV_URL) or None
    in_process = not args.url and not env_url
    conn = Connection(args)
    ctx["secrets"] = conn.secrets
    if not in_process:
        ctx["url"] = conn.url
    body = None
    if args.body_file is not None:
        try:
            with open(args.body_file, "rb") as f:
                body = f.read()
        except OSError as exc:
            raise Failure(f"cannot read {args.body_file}: {exc.strerror or exc}") from exc
    warmup, warmup_messages = args.warmup
    config = LoadConfig(
        url=None if in_process else (args.url or env_url),
        login=conn.login,
        passcode=conn.passcode,
        virtual_host=conn.vhost,
        versions=conn.versions,
        heart_beat=conn.heart_beat,
        connect_timeout=conn.connect_timeout,
        producers=args.producers,
        consumers=args.consumers,
        processes=args.processes,
        destinations=tuple(args.destinations),
        size=args.size if args.size is not None else 100,
        body=body,
        headers=dict(args.headers) or None,
        count=args.count,
        duration=args.duration,
        rate=args.rate,
        receipts=args.receipts,
        receipt_window=args.receipt_window,
        ack=args.ack,
        transaction_size=args.transaction_size,
        buffer_size=args.buffer_size,
        warmup=warmup,
        warmup_messages=warmup_messages,
        interval=args.interval,
        drain_timeout=args.drain_timeout,
    )
    try:
        config.validate()
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    backend, backend_options = _loop_backend(args.loop)
    status = Status(args.quiet)
    target = "the in-process broker" if in_process else conn.url
    status.info(f"stompfast bench: {_describe(config, config.destinations)}; against {target}", "dim")

    latest: List[Progress] = [Progress("connecting", 0.0)]
    plain = not args.quiet and status.console is None
    printed = [0.0]  # the first line after a second

    def on_progress(p: Progress) -> None:
        latest[0] = p
        if plain and p.phase != "connecting" and p.elapsed - printed[0] >= 1.0:
            printed[0] = p.elapsed
            print(_progress_line(p), file=sys.stderr, flush=True)

    with status.live(lambda: _progress_line(latest[0]), to_stdout=False):
        result = run(config, on_progress, backend=backend, backend_options=backend_options)
    if args.json:
        print(json.dumps(_masked(result.to_dict(), conn.secrets), indent=2, allow_nan=False), flush=True)
    else:
        _print_table(result, "stompfast bench: " + _describe(config, result.broker["destinations"]))
    if args.plot:
        try:
            write_plot(result, args.plot)
        except OSError as exc:
            raise Failure(f"cannot write {args.plot}: {exc.strerror or exc}") from exc
        status.info(f"plot written to {args.plot}", "dim")
    for warning in result.warnings:
        status.info(f"warning: {mask(warning, conn.secrets)}", "yellow")
    c = result.counts
    if result.ok:
        status.info(
            f"OK: {c['sent']:,} sent, {c['received']:,} received"
            + (", every message exactly once" if config.consumers else "")
            + (", all confirmed" if config.receipts else "") + ", no errors",
            "green",
        )
        return EXIT_OK
    text = "; ".join(mask(p, conn.secrets) for p in result.problems)
    print(f"stompfast bench: FAILED: {one_line(text, 1000)}", file=sys.stderr, flush=True)
    return EXIT_FAILURE


def _masked(data: Any, secrets: Sequence[str]) -> Any:
    """``data`` with every string passed through :func:`stompfast.cli.common.mask` (error texts may quote URLs)."""
    if isinstance(data, str):
        return mask(data, secrets)
    if isinstance(data, dict):
        return {k: _masked(v, secrets) for k, v in data.items()}
    if isinstance(data, list):
        return [_masked(v, secrets) for v in data]
    return data
