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

from dataclasses import fields
from typing import Any, Dict, Iterable, Mapping

from .._stats import ClientStats, RttSummary, merge_summaries

#: Gauges summed over clients (their values when the snapshot was taken).
GAUGES = ("bytes_queued", "receipts_pending")
#: Counters summed over clients: every other integer field of ``ClientStats``.
COUNTERS = tuple(f.name for f in fields(ClientStats) if f.name not in GAUGES + ("buffered", "receipt_rtt"))


def stats_record(stats: ClientStats) -> Dict[str, Any]:
    """One client's snapshot as a record to merge (JSON-ready): ``as_dict()`` with ``clients`` 1 and the buckets."""
    out: Dict[str, Any] = {name: getattr(stats, name) for name in COUNTERS + GAUGES}
    out["buffered"] = sum(stats.buffered.values())
    out["receipt_rtt"] = stats.receipt_rtt.as_dict()
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
    out["receipt_rtt"] = merge_summaries(RttSummary.from_dict(r.get("receipt_rtt") or {}) for r in records).as_dict()
    return out
