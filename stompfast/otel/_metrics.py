"""Metrics: ``client.stats()`` read by OpenTelemetry observable instruments when the metrics are collected.

Nothing is recorded on the client's paths: each instrument's callback takes a
snapshot (``client.stats()``) of every client registered with its meter and reports
the counters and gauges in it. The instruments of one meter are made once
(:class:`StatsExporter`) and serve every client registered with it; clients with
the same attributes (the same ``stomp.client.name``, or none) are added together.

OpenTelemetry has no observable histogram, so the receipt round-trip histogram is
exported as its summary: ``stomp.client.receipt.duration.count`` and ``.sum``
(counters) and ``stomp.client.receipt.duration.quantile`` (a gauge per quantile,
the upper bound of the bucket holding it). The Prometheus example
(examples/prometheus_metrics.py) exports the full histogram.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation, get_meter_provider

from .. import __version__

#: Quantiles of the receipt round trip reported by ``stomp.client.receipt.duration.quantile``.
RTT_QUANTILES = (0.5, 0.9, 0.99)

# Attributes as a hashable, sorted key
Attrs = Tuple[Tuple[str, Any], ...]

# (instrument name, kind, unit, description, [(ClientStats field, attributes)])
# kind: "counter" (monotonic, cumulative) or "updown" (a level that adds up across clients)
METRICS: Tuple[Tuple[str, str, str, str, Tuple[Tuple[str, Mapping[str, str]], ...]], ...] = (
    ("messaging.client.sent.messages", "counter", "{message}",
     "Messages the client gave the connection to send (SEND frames)",
     (("messages_sent", {"messaging.operation.name": "send"}),)),
    ("messaging.client.consumed.messages", "counter", "{message}",
     "Messages the client received (MESSAGE frames)",
     (("messages_received", {"messaging.operation.name": "receive"}),)),
    ("stomp.client.frames", "counter", "{frame}", "STOMP frames received and sent (heart-beats excluded)",
     (("frames_in", {"network.io.direction": "receive"}), ("frames_out", {"network.io.direction": "transmit"}))),
    ("stomp.client.io", "counter", "By", "Bytes received and sent (heart-beats included)",
     (("bytes_in", {"network.io.direction": "receive"}), ("bytes_out", {"network.io.direction": "transmit"}))),
    ("stomp.client.settled.messages", "counter", "{message}", "ACK and NACK frames sent",
     (("acks", {"messaging.operation.name": "ack"}), ("nacks", {"messaging.operation.name": "nack"}))),
    ("stomp.client.receipts", "counter", "{receipt}", "Receipts that came, and receipts that failed",
     (("receipts_confirmed", {"stomp.receipt.outcome": "confirmed"}),
      ("receipts_failed", {"stomp.receipt.outcome": "failed"}))),
    ("stomp.client.errors", "counter", "{error}", "ERROR frames received", (("errors", {}),)),
    ("stomp.client.connection.losses", "counter", "{loss}",
     "Connections that ended by a failure (lost, ERROR, heart-beat timeout, framing fault)",
     (("connection_losses", {}),)),
    ("stomp.client.reconnects", "counter", "{reconnect}", "Sessions re-established after a loss",
     (("reconnects", {}),)),
    ("stomp.client.frames.dropped", "counter", "{frame}", "Frames queued by a lost link and never written",
     (("frames_dropped", {}),)),
    ("stomp.client.send.queued", "updown", "By", "Bytes queued to be written now", (("bytes_queued", {}),)),
    ("stomp.client.receipts.pending", "updown", "{receipt}", "Receipts awaited now", (("receipts_pending", {}),)),
)


class StatsSource:
    """One client (weakly held) and the attributes its numbers carry."""

    def __init__(self, client: Any, attributes: Mapping[str, Any], stats: Optional[Callable[[Any], Any]]) -> None:
        self.client = weakref.ref(client)
        self.attributes = dict(attributes)
        self.stats = stats

    def snapshot(self) -> Any:
        client = self.client()
        if client is None:
            return None
        try:
            return self.stats(client) if self.stats is not None else client.stats()
        # A client that cannot say (closing...) is left out of this collection
        except Exception:
            return None


class StatsExporter:
    """The observable instruments of one meter, reading every registered client's ``stats()``."""

    def __init__(self, meter: Meter) -> None:
        self.sources: List[StatsSource] = []
        self.lock = threading.Lock()
        for name, kind, unit, description, fields in METRICS:
            create = meter.create_observable_counter if kind == "counter" else meter.create_observable_up_down_counter
            create(name, callbacks=[self.reader(fields)], unit=unit, description=description)
        meter.create_observable_up_down_counter(
            "stomp.client.buffered.messages", callbacks=[self.read_buffered], unit="{message}",
            description="Messages received and not yet taken, per subscription")
        meter.create_observable_counter(
            "stomp.client.receipt.duration.count", callbacks=[self.read_rtt("count")], unit="{receipt}",
            description="Receipt round trips measured (SEND or other frame to its RECEIPT)")
        meter.create_observable_counter(
            "stomp.client.receipt.duration.sum", callbacks=[self.read_rtt("sum")], unit="s",
            description="The sum of the receipt round trips")
        meter.create_observable_gauge(
            "stomp.client.receipt.duration.quantile", callbacks=[self.read_quantiles], unit="s",
            description="Receipt round-trip quantiles: the upper bound of the histogram bucket holding each")

    def add(self, source: StatsSource) -> None:
        with self.lock:
            self.sources.append(source)

    def remove(self, source: StatsSource) -> None:
        with self.lock:
            self.sources = [s for s in self.sources if s is not source and s.client() is not None]

    def snapshots(self) -> List[Tuple[Dict[str, Any], Any]]:
        with self.lock:
            sources = list(self.sources)
        taken = []
        for source in sources:
            stats = source.snapshot()
            if stats is not None:
                taken.append((source.attributes, stats))
        return taken

    @staticmethod
    def observations(values: Dict[Attrs, float]) -> List[Observation]:
        return [Observation(value, dict(key)) for key, value in values.items()]

    def reader(
        self, fields: Tuple[Tuple[str, Mapping[str, str]], ...]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def read(options: CallbackOptions) -> Iterable[Observation]:
            values: Dict[Attrs, float] = {}
            for attributes, stats in self.snapshots():
                for field, extra in fields:
                    value = getattr(stats, field, None)
                    if value is None:
                        continue
                    key = _key(attributes, extra)
                    values[key] = values.get(key, 0) + value
            return self.observations(values)
        return read

    def read_buffered(self, options: CallbackOptions) -> Iterable[Observation]:
        values: Dict[Attrs, float] = {}
        for attributes, stats in self.snapshots():
            for sub_id, n in (getattr(stats, "buffered", None) or {}).items():
                key = _key(attributes, {"messaging.destination.subscription.name": str(sub_id)})
                values[key] = values.get(key, 0) + n
        return self.observations(values)

    def read_rtt(self, part: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def read(options: CallbackOptions) -> Iterable[Observation]:
            values: Dict[Attrs, float] = {}
            for attributes, stats in self.snapshots():
                rtt = getattr(stats, "receipt_rtt", None)
                if rtt is not None:
                    key = _key(attributes, {})
                    values[key] = values.get(key, 0) + getattr(rtt, part)
            return self.observations(values)
        return read

    def read_quantiles(self, options: CallbackOptions) -> Iterable[Observation]:
        merged: Dict[Attrs, List[Tuple[float, int]]] = {}
        for attributes, stats in self.snapshots():
            rtt = getattr(stats, "receipt_rtt", None)
            if rtt is None or not rtt.count:
                continue
            key = _key(attributes, {})
            merged[key] = _merge(merged.get(key), rtt.buckets)
        out = []
        for key, buckets in merged.items():
            for q in RTT_QUANTILES:
                value = quantile(buckets, q)
                if math.isfinite(value):
                    out.append(Observation(value, {**dict(key), "quantile": q}))
        return out


def _key(attributes: Mapping[str, Any], extra: Mapping[str, Any]) -> Attrs:
    return tuple(sorted({**attributes, **extra}.items()))


def _merge(into: Optional[List[Tuple[float, int]]], buckets: Iterable[Tuple[float, int]]) -> List[Tuple[float, int]]:
    """Cumulative buckets of clients added together (they share the bounds)."""
    if into is None:
        return list(buckets)
    return [(bound, n + m) for (bound, n), (_, m) in zip(into, buckets)]


def quantile(buckets: List[Tuple[float, int]], q: float) -> float:
    """The upper bound of the bucket holding the ``q`` quantile of cumulative ``buckets``."""
    total = buckets[-1][1] if buckets else 0
    if not total:
        return 0.0
    rank = q * total
    for bound, cumulative in buckets:
        if cumulative >= rank:
            return bound
    return math.inf


# One exporter per meter provider: the instruments exist once, whatever the number of clients.
_exporters: "weakref.WeakKeyDictionary[Any, StatsExporter]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def exporter_for(meter_provider: Optional[MeterProvider]) -> StatsExporter:
    provider = meter_provider if meter_provider is not None else get_meter_provider()
    with _lock:
        exporter = _exporters.get(provider)
        if exporter is None:
            exporter = _exporters[provider] = StatsExporter(provider.get_meter("stompfast", __version__))
        return exporter


class StatsRegistration:
    """A client registered with an exporter; :meth:`close` stops reporting it."""

    def __init__(self, exporter: StatsExporter, source: StatsSource) -> None:
        self.exporter = exporter
        self.source = source

    def close(self) -> None:
        self.exporter.remove(self.source)


def observe_stats(
    client: Any,
    *,
    meter_provider: Optional[MeterProvider] = None,
    attributes: Optional[Mapping[str, Any]] = None,
    stats: Optional[Callable[[Any], Any]] = None,
) -> StatsRegistration:
    """Export ``client.stats()`` through the OpenTelemetry metrics of ``meter_provider`` (default: the global one).

    ``attributes`` are added to every data point (``messaging.system`` is always
    ``stomp``); ``stats(client)`` replaces ``client.stats()`` as the source of the
    snapshots. The client is held weakly: once it is gone, it is no longer reported.
    :func:`instrument` calls this unless ``metrics=False``.
    """
    source = StatsSource(client, {"messaging.system": "stomp", **(attributes or {})}, stats)
    exporter = exporter_for(meter_provider)
    exporter.add(source)
    return StatsRegistration(exporter, source)
