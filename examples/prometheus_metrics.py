"""Expose a client's stats() to Prometheus with a custom collector (prometheus-client), then scrape it once.

    pip install prometheus-client
    python examples/prometheus_metrics.py

The collector reads ``client.stats()`` when Prometheus scrapes (nothing is counted
twice, nothing is pushed from the client's paths): counters, gauges, the messages
buffered per subscription, and the receipt round trips as a real Prometheus
histogram. In a service, register it and serve ``/metrics``::

    from prometheus_client import REGISTRY, start_http_server
    REGISTRY.register(StompCollector(client))
    start_http_server(9100)

Without prometheus-client installed, the example says so and exits 0 (skipped).
"""

from __future__ import annotations

import math
import sys
from typing import Any, Iterator

from _where import broker_url

from stompfast import Client

try:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
except ImportError:  # pragma: no cover - depends on the environment
    CollectorRegistry = None

# stats field -> (metric name without the _total suffix, help)
COUNTERS = {
    "messages_sent": ("stompfast_messages_sent", "SEND frames given to the connection"),
    "messages_received": ("stompfast_messages_received", "MESSAGE frames received"),
    "frames_in": ("stompfast_frames_received", "Frames received (heart-beats excluded)"),
    "frames_out": ("stompfast_frames_sent", "Frames written (heart-beats excluded)"),
    "bytes_in": ("stompfast_received_bytes", "Bytes received"),
    "bytes_out": ("stompfast_sent_bytes", "Bytes written"),
    "acks": ("stompfast_acks", "ACK frames sent"),
    "nacks": ("stompfast_nacks", "NACK frames sent"),
    "receipts_confirmed": ("stompfast_receipts_confirmed", "Receipts that came"),
    "receipts_failed": ("stompfast_receipts_failed", "Receipts that failed"),
    "errors": ("stompfast_errors", "ERROR frames received"),
    "connection_losses": ("stompfast_connection_losses", "Connections ended by a failure"),
    "reconnects": ("stompfast_reconnects", "Sessions re-established after a loss"),
}
GAUGES = {
    "bytes_queued": ("stompfast_send_queued_bytes", "Bytes queued to be written"),
    "receipts_pending": ("stompfast_receipts_pending", "Receipts awaited now"),
}


class StompCollector:
    """A prometheus-client collector over one client's ``stats()`` (read at scrape time)."""

    def __init__(self, client: Any, name: str = "default") -> None:
        self.client = client
        self.name = name

    def collect(self) -> Iterator[Any]:
        stats = self.client.stats()
        labels = ["client"]
        for field, (metric, text) in COUNTERS.items():
            family = CounterMetricFamily(metric, text, labels=labels)
            family.add_metric([self.name], getattr(stats, field))
            yield family
        for field, (metric, text) in GAUGES.items():
            family = GaugeMetricFamily(metric, text, labels=labels)
            family.add_metric([self.name], getattr(stats, field))
            yield family
        buffered = GaugeMetricFamily("stompfast_buffered_messages", "Messages received and not yet taken",
                                     labels=["client", "subscription"])
        for subscription, n in stats.buffered.items():
            buffered.add_metric([self.name, str(subscription)], n)
        yield buffered
        rtt = stats.receipt_rtt
        histogram = HistogramMetricFamily("stompfast_receipt_rtt_seconds", "Receipt round trips", labels=labels)
        histogram.add_metric(
            [self.name],
            [("+Inf" if math.isinf(bound) else repr(bound), count) for bound, count in rtt.buckets],
            sum_value=rtt.sum,
        )
        yield histogram


def main() -> int:
    if CollectorRegistry is None:
        print("skipped: prometheus-client is not installed (pip install prometheus-client)")
        return 0
    with broker_url() as url, Client(url) as client:
        registry = CollectorRegistry()
        registry.register(StompCollector(client, "example"))
        with client.subscribe("/queue/prometheus-example") as sub:
            for i in range(25):
                client.send("/queue/prometheus-example", b"%d" % i, receipt=i % 5 == 0)
            for _ in range(25):
                sub.receive(timeout=10)
        text = generate_latest(registry).decode()
    shown = [line for line in text.splitlines()
             if line.startswith(("stompfast_messages_", "stompfast_receipt_rtt_seconds_count"))]
    print("\n".join(shown))
    print(f"scraped {len(text.splitlines())} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
