"""What a run is asked to do and what it reports: :class:`LoadConfig`, :class:`Progress`, :class:`LoadResult`.

Also the headers every generated message carries and :func:`is_fanout`, the one rule
of which destinations give every consumer a copy.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Optional, Tuple

from ..cli.common import mask
from ..errors import ConfigurationError
from .bodies import SizeRange, check_sizes, describe_sizes, mean_size
from .failover import check_failover
from .shape import Stage, check_shape, describe_shape, shape_mean_rate, shape_seconds
from .slo import Judgement, parse_objectives

#: The headers every generated message carries.
H_PRODUCER, H_SEQ, H_TS, H_WARMUP = "sf-producer", "sf-seq", "sf-ts", "sf-w"

#: Defaults when neither a count nor a duration is given: whichever comes first.
DEFAULT_COUNT = 100_000
DEFAULT_DURATION = 10.0

_FANOUT_PREFIXES = ("/topic/", "/exchange/")
ACK_MODES = ("auto", "client", "client-individual")
#: ``LoadConfig.trace_exporter`` (None: the environment's, ``OTEL_TRACES_EXPORTER``).
TRACE_EXPORTERS = ("console", "otlp", "none")


def is_fanout(destination: str) -> bool:
    """True when every subscriber gets its own copy (``/topic/...``, RabbitMQ ``/exchange/...``)."""
    return destination.startswith(_FANOUT_PREFIXES)


#: RabbitMQ: the SEND and SUBSCRIBE headers that declare a run's own queue (no ``-d``).
#: ``auto-delete``: RabbitMQ deletes the queue, with whatever it still holds, when its
#: last consumer leaves; until then it buffers like any queue. Durable, as RabbitMQ's
#: STOMP default: RabbitMQ 4 deprecates transient non-exclusive queues (a later version
#: may refuse them; 3.10 is what is tested), and an exclusive one would serve its own connection only. Every
#: SEND and SUBSCRIBE of the queue must carry the same properties (a declaration that
#: differs is refused with PRECONDITION_FAILED).
RABBITMQ_RUN_QUEUE_HEADERS = {"durable": "true", "auto-delete": "true"}
#: ... in a failover run, whose consumers lose their connection on purpose: an auto-delete
#: queue would go with them, messages and all. RabbitMQ deletes this one a minute after
#: its last consumer left (``x-expires``, measured on RabbitMQ 4.3).
RABBITMQ_FAILOVER_QUEUE_HEADERS = {"durable": "true", "x-expires": "60000"}


def is_rabbitmq(server: Optional[str]) -> bool:
    """True for the ``server`` header of RabbitMQ's CONNECTED (``RabbitMQ/3.10.8``)."""
    return bool(server) and str(server).startswith("RabbitMQ/")


def run_queue_headers(config: "LoadConfig", server: Optional[str]) -> Optional[Dict[str, str]]:
    """The headers that make the run's own queue go away with the run, or None (``-d`` given, or not RabbitMQ)."""
    if config.destinations or not is_rabbitmq(server):
        # A destination the user named is theirs: declared as the broker defaults it
        return None
    return dict(RABBITMQ_FAILOVER_QUEUE_HEADERS if config.link_cuts else RABBITMQ_RUN_QUEUE_HEADERS)


class LoadInterrupted(Exception):
    """The run was stopped (``run_load(stop=...)``) before the load started: nothing was measured."""


#: What a closed-loop latency measures (``LoadResult.latency_note``, the JSON's ``latency_note``).
CLOSED_LOOP_LATENCY = (
    "closed loop: end-to-end time including the wait in the broker behind the producers' backlog"
    " (queueing), not the broker's own delivery time; measure with --rate for latency at a given load"
)
#: ... and an open-loop one.
OPEN_LOOP_LATENCY = (
    "open loop: end-to-end time from each message's intended send time at the target rate"
    " (a producer that falls behind schedule shows as latency)"
)


@dataclasses.dataclass
class LoadConfig:
    """What to run. Every field has a default: ``LoadConfig()`` is the ``stompfast bench`` default.

    Connection: ``url`` (``None``: start the in-process test broker on a free loopback
    port), ``login``, ``passcode``, ``virtual_host``, ``versions``, ``heart_beat``,
    ``connect_timeout`` as for :class:`~stompfast.AsyncClient` (keywords win over the URL).

    Shape: ``producers`` and ``consumers`` connections, spread over ``processes``
    worker processes (1: all in the caller's event loop); each producer starts a random
    delay in ``[0, start_spread)`` seconds after the others' start (0: all at once). ``destinations`` are used
    round-robin by each producer; every consumer subscribes to each of them
    (``/topic/`` and ``/exchange/`` ones deliver a copy to every consumer). Default:
    one fresh queue ``/queue/stompfast-bench-<random>``.

    Messages: ``size`` bytes (``body`` overrides; ``sizes``, a distribution of ``(low,
    high, weight)`` ranges, or ``bodies``, several bodies sent in turn, replace both:
    :mod:`stompfast.loadgen.bodies`), extra ``headers``; stop after
    ``count`` messages in total or ``duration`` seconds, whichever comes first
    (neither: 100,000 or 10 s). ``rate``: total messages per second, open loop;
    ``None``: closed loop, as fast as possible. ``rate_shape`` instead of ``rate``: steps
    and ramps of the open-loop rate (:mod:`stompfast.loadgen.shape`, ``--rate
    1000:30s,1000..5000:60s``); the run then lasts the shape's length unless ``duration``
    or ``count`` end it first, and ``LoadResult.stages`` reports each stage.

    Delivery: ``receipts`` (each SEND asks for a RECEIPT, at most ``receipt_window``
    outstanding per producer), ``ack`` mode of the consumers, ``transaction_size``
    (0: none; else producers send in transactions of that many messages, committed
    with a receipt when ``receipts``), ``buffer_size`` (consumer buffer and, in the
    client ack modes, broker prefetch: each consumer's prefetch).

    Consumers (:mod:`stompfast.loadgen.behaviour`): ``processing_time`` ``(low, high)``
    seconds each message is held before its ack (uniform; equal: fixed), ``nack_share``
    of the deliveries NACKed (``ack="client-individual"``, on a broker that requeues a
    NACKed message), ``consumer_pauses`` ``(at, length)`` windows in seconds from the
    start in which no consumer takes a message (``LoadResult.backlog`` reports each).

    Failover: ``link_cuts``, seconds from the start at which every connection is reset
    (through a fault proxy; the clients reconnect), each outage counted per message in
    ``LoadResult.outages`` (:mod:`stompfast.loadgen.failover`); with ``cut_command``
    there is no proxy and that shell command runs at each cut instead (a broker restart).

    Measurement: ``warmup`` seconds and/or ``warmup_messages`` (total) are sent and
    counted but kept out of latency and rates; ``interval`` is the timeline's
    resolution; ``drain_timeout``: after the producers stop, give up waiting for
    missing messages once nothing new arrived for that long.

    Tracing: ``trace`` instruments every client the workers make with
    :func:`stompfast.otel.instrument` (``stompfast[otel]`` and ``opentelemetry-sdk``): a
    PRODUCER span per SEND, its ``traceparent`` in the frame, a CONSUMER span per message.
    Spans go to the process's global tracer provider if the application set one, else to
    one made from the environment with the exporter ``trace_exporter`` (``"console"``,
    ``"otlp"``, ``"none"``; None: ``OTEL_TRACES_EXPORTER``; docs/observability.md). Off by
    default; it costs what the SDK charges per span (tens of microseconds per message).

    Objectives: ``slo`` holds service-level objectives such as ``"p99<5ms"``,
    ``"missing==0"`` or ``"rate>=0.98*target"`` (:mod:`stompfast.loadgen.slo`), judged
    on the result (``LoadResult.slo``); one the run cannot measure is refused here.
    """

    url: Optional[str] = None
    login: Optional[str] = None
    passcode: Optional[str] = None
    virtual_host: Optional[str] = None
    versions: Optional[Tuple[str, ...]] = None
    heart_beat: Tuple[int, int] = (10000, 10000)
    connect_timeout: float = 10.0
    producers: int = 1
    start_spread: float = 0.0
    consumers: int = 1
    processes: int = 1
    destinations: Tuple[str, ...] = ()
    size: int = 100
    body: Optional[bytes] = None
    sizes: Tuple[SizeRange, ...] = ()
    bodies: Tuple[bytes, ...] = ()
    headers: Optional[Dict[str, str]] = None
    count: Optional[int] = None
    duration: Optional[float] = None
    rate: Optional[float] = None
    rate_shape: Tuple[Stage, ...] = ()
    receipts: bool = False
    receipt_window: int = 1000
    ack: str = "auto"
    transaction_size: int = 0
    buffer_size: int = 1000
    processing_time: Tuple[float, float] = (0.0, 0.0)
    nack_share: float = 0.0
    consumer_pauses: Tuple[Tuple[float, float], ...] = ()
    warmup: float = 0.0
    warmup_messages: int = 0
    interval: float = 1.0
    drain_timeout: float = 5.0
    trace: bool = False
    trace_exporter: Optional[str] = None
    slo: Tuple[str, ...] = ()
    link_cuts: Tuple[float, ...] = ()
    cut_command: Optional[str] = None

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
        positive_number("start_spread", self.start_spread, allow_zero=True)
        if self.ack not in ACK_MODES:
            raise ConfigurationError(f"ack must be one of {', '.join(ACK_MODES)}, not {self.ack!r}")
        self._validate_consumers()
        if self.body is not None and not isinstance(self.body, (bytes, bytearray)):
            raise ConfigurationError("body must be bytes")
        if not isinstance(self.sizes, tuple) or not isinstance(self.bodies, tuple):
            raise ConfigurationError("sizes and bodies must be tuples")
        check_sizes(self.sizes)
        if not all(isinstance(b, (bytes, bytearray)) for b in self.bodies):
            raise ConfigurationError("bodies must be bytes")
        if sum(1 for given in (self.body is not None, bool(self.sizes), bool(self.bodies)) if given) > 1:
            raise ConfigurationError("give one of body, bodies and sizes")
        for destination in self.destinations:
            if not isinstance(destination, str) or not destination:
                raise ConfigurationError(f"a destination must be a non-empty str, not {destination!r}")
        if self.trace_exporter is not None and self.trace_exporter not in TRACE_EXPORTERS:
            raise ConfigurationError(
                f"trace_exporter must be one of {', '.join(TRACE_EXPORTERS)} or None, not {self.trace_exporter!r}"
            )
        if isinstance(self.slo, str) or not all(isinstance(text, str) for text in self.slo):
            raise ConfigurationError(f"slo must be a sequence of str objectives, not {self.slo!r}")
        if not isinstance(self.rate_shape, tuple):
            raise ConfigurationError(f"rate_shape must be a tuple of Stage, not {self.rate_shape!r}")
        check_shape(self.rate_shape)
        if self.rate_shape and self.rate is not None:
            raise ConfigurationError("give rate or rate_shape, not both")
        parse_objectives(self.slo, self)
        check_failover(self)
        if self.count is not None and self.count < self.producers:
            raise ConfigurationError(
                f"count ({self.count}) must be at least the number of producers ({self.producers})"
            )

    def _validate_consumers(self) -> None:
        """The consumers' behaviour: processing time, NACK share, pauses."""
        low_high = self.processing_time
        if not (isinstance(low_high, tuple) and len(low_high) == 2
                and all(isinstance(v, (int, float)) and math.isfinite(v) for v in low_high)
                and 0 <= low_high[0] <= low_high[1]):
            raise ConfigurationError(
                f"processing_time must be (low, high) seconds, 0 <= low <= high, not {low_high!r}"
            )
        share = self.nack_share
        if not isinstance(share, (int, float)) or not 0 <= share < 1:
            raise ConfigurationError(f"nack_share must be a number from 0 up to (not including) 1, not {share!r}")
        if share and self.ack != "client-individual":
            raise ConfigurationError("nack_share needs ack='client-individual' (a NACK settles one message)")
        if not isinstance(self.consumer_pauses, tuple) or not all(
            isinstance(p, tuple) and len(p) == 2 and all(isinstance(v, (int, float)) and math.isfinite(v) for v in p)
            and p[0] >= 0 and p[1] > 0 for p in self.consumer_pauses
        ):
            raise ConfigurationError(
                f"consumer_pauses holds (at, length) seconds, length > 0: {self.consumer_pauses!r}"
            )
        if (share or low_high[1] or self.consumer_pauses) and not self.consumers:
            raise ConfigurationError("processing_time, nack_share and consumer_pauses need consumers")

    @property
    def consumer_behaviour(self) -> bool:
        """Whether the consumers do more than count: a processing time, a NACK share or pauses."""
        return bool(self.processing_time[1] or self.nack_share or self.consumer_pauses)

    @property
    def mean_body_bytes(self) -> float:
        """The mean body size in bytes: what the MB/s rates are computed with."""
        if self.bodies:
            return sum(len(b) for b in self.bodies) / len(self.bodies)
        if self.sizes:
            return mean_size(self.sizes)
        return float(len(self.body) if self.body is not None else self.size)

    @property
    def open_loop(self) -> bool:
        """Whether messages are sent at a target rate (``rate`` or ``rate_shape``), not as fast as possible."""
        return bool(self.rate or self.rate_shape)

    @property
    def target_rate(self) -> Optional[float]:
        """Messages per second asked for: ``rate``, a shape's mean rate, or None (closed loop)."""
        if self.rate_shape:
            return shape_mean_rate(self.rate_shape)
        return self.rate

    def limits(self) -> Tuple[Optional[int], Optional[float]]:
        """The ``(count, duration)`` in force: both default (100,000 or 10 s) when neither is set.

        With a ``rate_shape`` the duration defaults to the shape's length instead.
        """
        if self.rate_shape and self.duration is None:
            return self.count, shape_seconds(self.rate_shape)
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
        data["bodies_bytes"] = [len(b) for b in data.pop("bodies")] or None
        data["sizes"] = describe_sizes(self.sizes) or None
        data["destinations"] = list(self.destinations)
        data["versions"] = list(self.versions) if self.versions else None
        data["heart_beat"] = list(self.heart_beat)
        data["slo"] = list(self.slo)
        data["rate_shape"] = describe_shape(self.rate_shape) or None
        count, duration = self.limits()
        data["count_in_force"], data["duration_in_force"] = count, duration
        return data


@dataclasses.dataclass
class Progress:
    """A live snapshot, handed to the ``progress`` callback of :func:`run_load` a few times a second."""

    # "connecting", "running", "draining"
    phase: str
    # Seconds since the producers started (0 before)
    elapsed: float
    sent: int = 0
    confirmed: int = 0
    received: int = 0
    # Known once the producers are done
    expected: Optional[int] = None
    errors: int = 0
    # Messages/s over about the last second
    send_rate: float = 0.0
    receive_rate: float = 0.0
    target_rate: Optional[float] = None
    #: the clients' own metrics summed over every connection (``client.stats()``, as in
    #: ``LoadResult.client_stats``), refreshed about once a second; None until the first
    client_stats: Optional[Dict[str, Any]] = None
    #: end-to-end latency of the last interval the workers reported (``p50``, ``p90``, ``p99``,
    #: ``max``, in microseconds, merged over them), or None before the first
    latency_us: Optional[Dict[str, float]] = None


@dataclasses.dataclass
class LoadResult:
    """The outcome of a run; :meth:`to_dict` is the JSON document ``stompfast bench --json`` writes.

    ``ok`` is True when nothing was lost, duplicated or refused and no error happened;
    ``problems`` says what went wrong otherwise, ``warnings`` what is worth knowing.
    ``counts``: sent, confirmed, expected, received, distinct, duplicates, missing,
    unexpected, errors, warmup_sent, warmup_received. ``rates``: messages/s and MB/s.
    ``latency_us`` and ``send_lag_us``: count, min, mean, stddev, p50, p90, p99, p99.9,
    p99.99, max (``send_lag_us`` in fixed-rate mode only: actual minus intended send
    time); in a closed-loop run (no rate) latency includes the wait behind the producers'
    backlog in the broker (``latency_note`` says so). ``interrupted``: None, or why the run
    was stopped early (the numbers are then partial). ``broker["cleanup"]``: what became of
    the run's own queue on a real broker (None with ``destinations`` given or in process).
    ``histogram``: the merged HdrHistogram of end-to-end latency (microseconds).
    ``client_stats``: the clients' own metrics (``client.stats()``) summed over every
    connection of every worker, taken after they disconnected (:mod:`.clientstats`).
    ``slo``: each objective of ``config.slo`` judged on this result (``slo_met`` sums them
    up); an objective does not change ``ok``, which says whether the run was clean.
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
    client_stats: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    #: None for a run that ended on its own; else why it was stopped early (``run_load(stop=...)``:
    #: ``"stopped"``; ``stompfast bench``: ``"interrupted (Ctrl-C)"`` or ``"terminated (SIGTERM)"``).
    #: The counts, rates and latency are then those measured until the stop.
    interrupted: Optional[str] = None
    #: each timeline interval's latency histogram (None where nothing was measured), in
    #: ``timeline`` order: what ``--hdr-log`` writes (not in the JSON)
    interval_histograms: List[Any] = dataclasses.field(default_factory=list, repr=False)
    #: each of ``config.slo`` judged on this result, in order (empty without objectives)
    slo: List[Judgement] = dataclasses.field(default_factory=list)
    #: with a ``config.rate_shape``: each stage's target beside the rates and latency
    #: measured in it (:func:`stompfast.loadgen.shape.stage_rows`); empty otherwise
    stages: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    #: with ``config.link_cuts``: the time before the first cut, then each outage, counted per
    #: message (:func:`stompfast.loadgen.failover.outage_rows`); empty otherwise
    outages: List[Dict[str, Any]] = dataclasses.field(default_factory=list)
    #: with ``config.consumer_pauses``: each pause's backlog and how fast it drained
    #: (:func:`stompfast.loadgen.behaviour.backlog_rows`); empty otherwise
    backlog: List[Dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def slo_met(self) -> Optional[bool]:
        """True when every objective was met, False when one was missed, None without objectives."""
        if not self.slo:
            return None
        return all(j.ok for j in self.slo)

    @property
    def loop(self) -> str:
        """``"open"`` (a fixed ``rate``) or ``"closed"`` (as fast as possible)."""
        return "open" if self.config.open_loop else "closed"

    @property
    def latency_note(self) -> str:
        """What ``latency_us`` measures in this run's mode (closed loop: it includes the backlog)."""
        return OPEN_LOOP_LATENCY if self.config.open_loop else CLOSED_LOOP_LATENCY

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
            "interrupted": self.interrupted,
            "loop": self.loop,
            "latency_note": self.latency_note,
            "latency_us": self.latency_us,
            "send_lag_us": self.send_lag_us,
            "timeline": list(self.timeline),
            "errors": list(self.errors),
            "versions": dict(self.versions),
            "machine": dict(self.machine),
            "client_stats": dict(self.client_stats),
            "slo": [j.to_dict() for j in self.slo],
            "slo_met": self.slo_met,
            "stages": [dict(row) for row in self.stages],
            "backlog": [dict(row) for row in self.backlog],
            "outages": [dict(row) for row in self.outages],
        }
