"""The clients' own metrics (``client.stats()``) of a run, summed over its connections and workers.

A worker turns each of its clients' :class:`~stompfast.ClientStats` into a record
(:func:`stats_record`: ``as_dict()`` plus the receipt round-trip buckets) and sends
the sum of them (:func:`merge_records`) with its progress (about once a second) and
with its final report; the coordinator sums the workers' records the same way, and
so does the Spark data source its tasks'. A merged record is a record: merging is
associative, and the quantiles of a merged record are those of every round trip
together (the buckets are added, the same bounds for every client).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, Mapping

from .._stats import ClientStats, RttSummary, merge_summaries

#: Counters summed over clients (``ClientStats`` fields).
COUNTERS = (
    "frames_in", "bytes_in", "frames_out", "bytes_out", "messages_sent", "messages_received", "acks", "nacks",
    "receipts_confirmed", "receipts_failed", "errors", "connection_losses", "reconnects", "frames_dropped",
)
#: Gauges summed over clients (their values when the snapshot was taken).
GAUGES = ("bytes_queued", "receipts_pending")


def _finite(value: float) -> Any:
    return value if math.isfinite(value) else None


def _rtt_dict(rtt: RttSummary) -> Dict[str, Any]:
    """The round trips as plain values: count, sum, mean, p50/p90/p99 (null without data), the finite buckets."""
    out: Dict[str, Any] = {"count": rtt.count, "sum": rtt.sum, "mean": rtt.mean}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        out[name] = _finite(rtt.quantile(q)) if rtt.count else None
    # cumulative counts per finite bound (JSON has no inf): the last bucket is ``count``
    out["buckets"] = [[bound, n] for bound, n in rtt.buckets if math.isfinite(bound)]
    return out


def _rtt_summary(data: Mapping[str, Any]) -> RttSummary:
    buckets = tuple((float(bound), int(n)) for bound, n in data.get("buckets") or ())
    count = int(data.get("count") or 0)
    if buckets:
        buckets += ((math.inf, count),)
    return RttSummary(count=count, sum=float(data.get("sum") or 0.0), buckets=buckets)


def stats_record(stats: ClientStats) -> Dict[str, Any]:
    """One client's snapshot as a record to merge (JSON-ready): ``as_dict()`` with ``clients`` 1 and the buckets."""
    out: Dict[str, Any] = {name: getattr(stats, name) for name in COUNTERS + GAUGES}
    out["buffered"] = sum(stats.buffered.values())
    out["receipt_rtt"] = _rtt_dict(stats.receipt_rtt)
    out["clients"] = 1
    return out


def merge_records(records: Iterable[Mapping[str, Any]]) -> Dict[str, Any]:
    """The sum of records (from :func:`stats_record` or this function): counters and gauges added.

    ``clients`` is how many connections were counted; ``buffered`` the messages held
    in every subscription's buffer; ``receipt_rtt`` the merged histogram, its
    quantiles recomputed from the added buckets.
    """
    records = list(records)
    out: Dict[str, Any] = {"clients": sum(int(r.get("clients", 1)) for r in records)}
    for name in COUNTERS + GAUGES:
        out[name] = sum(int(r.get(name) or 0) for r in records)
    buffered = 0
    for r in records:
        value = r.get("buffered") or 0
        buffered += sum(value.values()) if isinstance(value, Mapping) else int(value)
    out["buffered"] = buffered
    out["receipt_rtt"] = _rtt_dict(merge_summaries(_rtt_summary(r.get("receipt_rtt") or {}) for r in records))
    return out
