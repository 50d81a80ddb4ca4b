"""``stompfast bench --prometheus [HOST:]PORT``: the run's live numbers for Prometheus to scrape.

A small HTTP server in a thread of its own serves ``/metrics`` in Prometheus's
text exposition format (version 0.0.4) from the latest :class:`~.config.Progress`
the coordinator reported (about four a second, merged over every worker process),
then from the final result once the run is over. ``docs/grafana-bench.json`` is a
Grafana dashboard over these names. Nothing here touches the run: the server only
reads the snapshot it was last handed.
"""

from __future__ import annotations

import http.server
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ..errors import ConfigurationError

if TYPE_CHECKING:  # pragma: no cover
    from .config import LoadResult, Progress

__all__ = ["METRICS", "MetricsEndpoint", "parse_listen"]

#: every metric served: name, type, help
METRICS: Tuple[Tuple[str, str, str], ...] = (
    ("stompfast_bench_messages_sent_total", "counter", "Messages sent by every producer of the run."),
    ("stompfast_bench_messages_received_total", "counter", "Messages received by every consumer of the run."),
    ("stompfast_bench_messages_confirmed_total", "counter", "Messages the broker confirmed with a receipt."),
    ("stompfast_bench_errors_total", "counter", "Errors the producers and consumers met."),
    ("stompfast_bench_in_flight_messages", "gauge",
     "Messages sent minus messages received, at least 0: a queue run's backlog (a topic's copies are not told apart)."),
    ("stompfast_bench_send_rate", "gauge", "Messages sent per second over about the last second."),
    ("stompfast_bench_receive_rate", "gauge", "Messages received per second over about the last second."),
    ("stompfast_bench_target_rate", "gauge", "The --rate asked for (0 in a closed-loop run)."),
    ("stompfast_bench_latency_seconds", "gauge",
     "End-to-end latency of the latest reported interval, by quantile (1 is the maximum)."),
    ("stompfast_bench_elapsed_seconds", "gauge", "Seconds since the producers started."),
    ("stompfast_bench_running", "gauge", "1 while the run sends or drains, 0 once it is over."),
    ("stompfast_bench_connection_losses_total", "counter", "Connections of the run's clients that were lost."),
    ("stompfast_bench_reconnects_total", "counter", "Lost connections the clients re-established."),
)
_QUANTILES = (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"), ("1", "max"))


def parse_listen(text: str) -> Tuple[str, int]:
    """``[HOST:]PORT`` (default host 127.0.0.1; port 0: any free one); ConfigurationError for a bad one."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or int(port) > 65535:
        raise ConfigurationError(f"--prometheus {text!r}: expected [HOST:]PORT, e.g. 9464 or 0.0.0.0:9464")
    return host, int(port)


class MetricsEndpoint:
    """The ``/metrics`` server: :meth:`update` hands it the latest snapshot, any thread may scrape."""

    def __init__(self, host: str, port: int) -> None:
        self._lock = threading.Lock()
        self._body = self._render(None, None)
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics is served here")
                    return
                body = endpoint.body()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                # A scrape every few seconds must not write on the run's stderr
                pass

        try:
            self._server = http.server.ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise ConfigurationError(f"--prometheus {host}:{port}: cannot listen: {exc.strerror or exc}") from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="stompfast-prometheus", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/metrics"

    def body(self) -> bytes:
        with self._lock:
            return self._body

    def update(self, progress: "Progress") -> None:
        """The run's latest live snapshot."""
        body = self._render(progress, None)
        with self._lock:
            self._body = body

    def finish(self, result: "LoadResult") -> None:
        """The run is over: serve its final counts (a scrape after the end sees them)."""
        body = self._render(None, result)
        with self._lock:
            self._body = body

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    @staticmethod
    def _render(progress: Optional["Progress"], result: Optional["LoadResult"]) -> bytes:
        values: Dict[str, float] = {}
        latency: Optional[Dict[str, float]] = None
        stats: Dict[str, Any] = {}
        if result is not None:
            c = result.counts
            values = {
                "sent": c["sent"], "received": c["received"], "confirmed": c["confirmed"], "errors": c["errors"],
                "send_rate": result.rates.get("send_msgs_per_s") or 0.0,
                "receive_rate": result.rates.get("receive_msgs_per_s") or 0.0,
                "target": result.config.target_rate or 0.0, "elapsed": result.elapsed, "running": 0,
            }
            latency = result.latency_us
            stats = result.client_stats or {}
        elif progress is not None:
            values = {
                "sent": progress.sent, "received": progress.received, "confirmed": progress.confirmed,
                "errors": progress.errors, "send_rate": progress.send_rate, "receive_rate": progress.receive_rate,
                "target": progress.target_rate or 0.0, "elapsed": progress.elapsed,
                "running": 0 if progress.phase == "connecting" else 1,
            }
            latency = progress.latency_us
            stats = progress.client_stats or {}
        lines: List[str] = []
        for name, kind, text in METRICS:
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")
            if name == "stompfast_bench_latency_seconds":
                for quantile, key in _QUANTILES:
                    if latency and latency.get(key) is not None:
                        lines.append(f'{name}{{quantile="{quantile}"}} {latency[key] / 1e6:.6f}')
                continue
            value = _value(name, values, stats)
            if value is not None:
                lines.append(f"{name} {value}")
        return ("\n".join(lines) + "\n").encode("utf-8")


# The metrics read straight from a snapshot's values, by the key ``_render`` gives them
_FROM_VALUES = {
    "stompfast_bench_messages_sent_total": "sent", "stompfast_bench_messages_received_total": "received",
    "stompfast_bench_messages_confirmed_total": "confirmed", "stompfast_bench_errors_total": "errors",
    "stompfast_bench_send_rate": "send_rate", "stompfast_bench_receive_rate": "receive_rate",
    "stompfast_bench_target_rate": "target", "stompfast_bench_elapsed_seconds": "elapsed",
    "stompfast_bench_running": "running",
}


def _value(name: str, values: Dict[str, float], stats: Dict[str, Any]) -> Optional[float]:
    if not values:
        return None
    if name in _FROM_VALUES:
        return values[_FROM_VALUES[name]]
    if name == "stompfast_bench_in_flight_messages":
        return max(0, values["sent"] - values["received"])
    if name == "stompfast_bench_connection_losses_total":
        return float(stats.get("connection_losses", 0))
    if name == "stompfast_bench_reconnects_total":
        return float(stats.get("reconnects", 0))
    return None
