"""Merging the workers' final reports into a :class:`~stompfast.loadgen.LoadResult`.

Counts are summed, per-group bitmaps of sequence numbers OR-ed (so distinct, duplicate
and missing messages are exact across processes), histograms added.
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any, Dict, List, Optional, Tuple

from ..cli.common import mask
from .clientstats import merge_records
from .config import LoadConfig, LoadResult, is_fanout
from .histogram import histogram_class, new_histogram, percentiles
from .links import WorkerView
from .plan import group_name
from .timeline import Timeline, max_present, min_present


def _popcount(value: int) -> int:
    try:
        return value.bit_count()
    except AttributeError:  # Python 3.9
        return bin(value).count("1")


def merge_results(
    config: LoadConfig, views: List[WorkerView], destinations: List[str], state: Dict[str, Any],
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
            groups.extend((group_name(d, True, c), d) for c in range(consumers))
        else:
            groups.append((group_name(d, False, 0), d))
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
    timeline: Timeline = state["timeline"]
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
    send_first = min_present(t["send_first"] for t in times)
    send_last = max_present(t["send_last"] for t in times)
    recv_first = min_present(t["receive_first"] for t in times)
    recv_last = max_present(t["receive_last"] for t in times)
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
    if state.get("interrupted"):
        problems.append(f"interrupted after {(state['stopped_wall'] - state['t0']) / 1e9:.1f} s: a partial result")
    if missing and state.get("interrupted"):
        # stopped at once, without a drain: these were in flight or queued in the broker
        problems.append(f"{missing} of {expected} expected messages had not arrived when the run was stopped")
    elif missing:
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
        client_stats=merge_records(f["client_stats"] for f in finals if f.get("client_stats")),
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
