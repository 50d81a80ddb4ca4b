"""A run's timeline written for other tools: CSV per interval, and an HdrHistogram interval log.

``stompfast bench --csv FILE`` writes one row per timeline interval (the JSON's
``timeline``, flattened); ``--hdr-log FILE`` writes the latency histogram of each
interval in the HdrHistogram log format (version 1.3), the one HistogramLogAnalyzer
and ``hdrh.log.HistogramLogReader`` read: a ``#[StartTime: ...]`` and ``#[BaseTime: ...]``
header, the legend, then ``start,length,max,histogram`` per interval with times in
seconds from the run's start, the maximum in milliseconds and the histogram (in
microseconds) in the V2 compressed base64 encoding. Both are written after the run,
from the result merged over every worker.
"""

from __future__ import annotations

import csv
import datetime
from typing import IO, TYPE_CHECKING, Any, List

if TYPE_CHECKING:  # pragma: no cover
    from .config import LoadResult

__all__ = ["CSV_COLUMNS", "write_csv", "write_hdr_log"]

#: the columns of ``--csv``, in order (latency in microseconds, empty when none was measured)
CSV_COLUMNS = (
    "t", "seconds", "sent", "received", "confirmed", "errors", "warmup_received", "send_rate", "receive_rate",
    "latency_p50_us", "latency_p90_us", "latency_p99_us", "latency_max_us",
)
# The histograms hold microseconds; the log's Interval_Max column is in milliseconds
_MAX_VALUE_UNIT_RATIO = 1000.0


def write_csv(result: "LoadResult", out: IO[str]) -> None:
    """One header row and one row per interval of ``result.timeline``."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for row in result.timeline:
        latency = row.get("latency_us") or {}
        writer.writerow([
            row["t"], row["seconds"], row["sent"], row["received"], row["confirmed"], row["errors"],
            row["warmup_received"], row["send_rate"], row["receive_rate"],
            *(latency.get(k, "") for k in ("p50", "p90", "p99", "max")),
        ])


def write_hdr_log(result: "LoadResult", out: IO[str]) -> None:
    """The interval latency histograms of ``result`` as an HdrHistogram log (intervals without latency are left out)."""
    started = _start_seconds(result)
    stamp = datetime.datetime.fromtimestamp(started, datetime.timezone.utc).strftime("%a %b %d %H:%M:%S UTC %Y")
    lines: List[str] = [
        "#[Histogram log format version 1.3]\n",
        f"#[StartTime: {started:.3f} (seconds since epoch), {stamp}]\n",
        f"#[BaseTime: {started:.3f} (seconds since epoch)]\n",
        "#[stompfast bench: end-to-end latency in microseconds; Interval_Max in milliseconds]\n",
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n',
    ]
    for row, histogram in zip(result.timeline, result.interval_histograms):
        if histogram is None or not histogram.get_total_count():
            continue
        maximum = histogram.get_max_value() / _MAX_VALUE_UNIT_RATIO
        lines.append(f"{row['t']:.3f},{row['seconds']:.3f},{maximum:.3f},{histogram.encode().decode('ascii')}\n")
    out.writelines(lines)


def _start_seconds(result: "LoadResult") -> float:
    """When the run started, in seconds since the epoch (``started_at`` is ISO 8601, UTC)."""
    when: Any = datetime.datetime.fromisoformat(result.started_at.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return float(when.timestamp())
