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
from .behaviour import backlog_rows
from .clientstats import merge_records
from .config import LoadConfig, LoadResult, is_fanout
from .failover import outage_rows
from .histogram import histogram_class, new_histogram, percentiles
from .links import WorkerView
from .plan import group_name
from .shape import stage_rows
from .slo import judge, parse_objectives
from .timeline import Timeline, max_present, min_present


def _popcount(value: int) -> int:
    try:
        return value.bit_count()
    # Python 3.9
    except AttributeError:
        return bin(value).count("1")


def merge_results(
    config: LoadConfig, views: List[WorkerView], destinations: List[str], state: Dict[str, Any],
    url: str, in_process: bool, backend_label: str, started_at: str,
) -> LoadResult:
    """The run's :class:`LoadResult`: the workers' final reports in ``views`` merged, and the verdict.

    ``state`` is what the coordinator recorded while it drove the run: the timeline,
    ``t0``, and when and how the run stopped (``stopped_wall``, ``interrupted``, ``drained``).
    """
    finals = [v.final for v in views if v.final is not None]
    counts = _merge_counts(finals, destinations, config.consumers)
    error_texts = [text for f in finals for text in f["error_texts"]]
    warnings = [f["close_warning"] for f in finals if f.get("close_warning")]
    if counts["unexpected"]:
        warnings.append(f"{counts['unexpected']} messages not sent by this run arrived"
                        " (leftovers in a reused destination?)")
    problems = _problems(config, state, counts, error_texts)
    command = state.get("cut_command")
    if command is not None:
        # a cut command that failed (the broker did not restart) is an error of the run
        error_texts.extend(command.errors())
        problems.extend(command.errors())
    timeline: Timeline = state["timeline"]
    total = _latency(timeline)
    t0 = state["t0"]
    end = state.get("stopped_wall", time.time_ns())
    result = LoadResult(
        config=config,
        ok=not problems,
        problems=problems,
        warnings=warnings,
        counts=counts,
        rates=_rates(config, finals),
        latency_us=percentiles(total),
        send_lag_us=percentiles(_send_lag(finals)),
        timeline=_timeline_rows(config, timeline, t0, end),
        interval_histograms=_interval_histograms(timeline),
        errors=error_texts,
        broker=_broker(views, url, in_process, destinations),
        versions=_versions(backend_label),
        machine=_machine(),
        started_at=started_at,
        elapsed=(end - t0) / 1e9,
        histogram=total,
        client_stats=merge_records(f["client_stats"] for f in finals if f.get("client_stats")),
    )
    # The objectives are judged on the merged result: every worker's messages, one histogram.
    result.slo = judge(parse_objectives(config.slo), result)
    if config.rate_shape:
        result.stages = stage_rows(config.rate_shape, result.timeline, result.interval_histograms)
    if config.consumer_pauses:
        result.backlog = backlog_rows(config.consumer_pauses, result.timeline)
    if config.link_cuts:
        result.outages = _outages(views, finals, state)
        if command is not None:
            # each cut's row says how its command ran (in cut order: one run per cut)
            for row, run in zip(result.outages[1:], command.runs()):
                row["command"] = run
    return result


def _merge_counts(finals: List[Dict[str, Any]], destinations: List[str], consumers: int) -> Dict[str, int]:
    """The run's message counts (``LoadResult.counts``) from the workers' final reports.

    Each is a sum over the workers, except ``distinct`` and ``missing``, which come from
    the bitmaps OR-ed over them, and ``duplicates``, what arrived beyond ``distinct``.
    """
    fanout = [is_fanout(d) for d in destinations]
    sent_by = _sent_by_producer(finals)
    by_dest = [sum(counts[d] for counts in sent_by.values()) for d in range(len(destinations))]
    groups = _due_groups(fanout, consumers)
    distinct, missing = _distinct_and_missing(finals, groups, sent_by)
    received_in_groups = sum(f["received_by_group"].get(group, 0) for group, _ in groups for f in finals)
    expected = sum(n * (consumers if fanout[d] else 1) for d, n in enumerate(by_dest)) if consumers else 0
    return {
        "sent": sum(by_dest),
        "confirmed": sum(f["confirmed"] for f in finals),
        "expected": expected,
        "received": sum(f["received"] for f in finals),
        "nacked": sum(f.get("nacked", 0) for f in finals),
        "distinct": distinct,
        "duplicates": received_in_groups - distinct,
        "missing": missing,
        "unexpected": sum(f["unexpected"] for f in finals),
        "errors": sum(f["errors"] for f in finals),
        "warmup_sent": sum(f["warmup_sent"] for f in finals),
        "warmup_received": sum(f["warmup_received"] for f in finals),
    }


def _sent_by_producer(finals: List[Dict[str, Any]]) -> Dict[str, List[int]]:
    """Producer key -> messages it sent to each destination; each producer runs in exactly one worker."""
    sent_by: Dict[str, List[int]] = {}
    for f in finals:
        sent_by.update(f["sent_by"])
    return sent_by


def _due_groups(fanout: List[bool], consumers: int) -> List[Tuple[str, int]]:
    """Every group a message is due in, with its destination's index.

    A queue's consumers share one group; on a fan-out destination each consumer is a
    group of its own. With no consumers nothing is due anywhere.
    """
    groups: List[Tuple[str, int]] = []
    if consumers == 0:
        return groups
    for d in range(len(fanout)):
        if fanout[d]:
            groups.extend((group_name(d, True, c), d) for c in range(consumers))
        else:
            groups.append((group_name(d, False, 0), d))
    return groups


def _distinct_and_missing(
    finals: List[Dict[str, Any]], groups: List[Tuple[str, int]], sent_by: Dict[str, List[int]],
) -> Tuple[int, int]:
    """Messages that arrived at least once, and those that never did, over every due group.

    A group's consumers may run in different workers, so each producer's bitmaps of
    sequence numbers are OR-ed over the workers first; bits at or above what the
    producer sent to that destination are not counted.
    """
    distinct = missing = 0
    for group, d in groups:
        merged: Dict[str, int] = {}
        for f in finals:
            for key, bitmap in f["seen"].get(group, {}).items():
                merged[key] = merged.get(key, 0) | int.from_bytes(bitmap, "little")
        for key, sent_counts in sent_by.items():
            due = sent_counts[d]
            got = _popcount(merged.get(key, 0) & ((1 << due) - 1))
            distinct += got
            missing += due - got
    return distinct, missing


def _problems(config: LoadConfig, state: Dict[str, Any], counts: Dict[str, int], error_texts: List[str]) -> List[str]:
    """What went wrong in the run, one sentence each: the verdict is ``ok`` when there is none."""
    sent, confirmed, expected = counts["sent"], counts["confirmed"], counts["expected"]
    missing, duplicates, error_count = counts["missing"], counts["duplicates"], counts["errors"]
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
    if sent == 0:
        problems.append("no message was sent")
    return problems


def _latency(timeline: Timeline) -> Any:
    """The run's end-to-end latency histogram: the sum of the intervals' histograms."""
    total = new_histogram()
    for row in timeline.rows.values():
        if row[5] is not None:
            total.add(row[5])
    return total


def _send_lag(finals: List[Dict[str, Any]]) -> Any:
    """The producers' lag behind their schedule, summed over the workers; None when none recorded any.

    Only a producer sending at a fixed rate has a schedule to fall behind.
    """
    lag = None
    for f in finals:
        if f["lag"] is not None:
            if lag is None:
                lag = new_histogram()
            lag.add(histogram_class().decode(f["lag"]))
    return lag


def _rates(config: LoadConfig, finals: List[Dict[str, Any]]) -> Dict[str, Optional[float]]:
    """``LoadResult.rates``: the target, and the send and receive rates over the measured part of the run only."""
    times = [f["times"] for f in finals]
    send_first = min_present(t["send_first"] for t in times)
    send_last = max_present(t["send_last"] for t in times)
    recv_first = min_present(t["receive_first"] for t in times)
    recv_last = max_present(t["receive_last"] for t in times)
    send_rate = _per_second(sum(f["measured_sent"] for f in finals), send_first, send_last)
    receive_rate = _per_second(sum(f["measured_received"] for f in finals), recv_first, recv_last)
    size = config.mean_body_bytes
    return {
        "target_msgs_per_s": config.target_rate,
        "send_msgs_per_s": send_rate,
        "receive_msgs_per_s": receive_rate,
        "send_mb_per_s": round(send_rate * size / 1e6, 3) if send_rate else None,
        "receive_mb_per_s": round(receive_rate * size / 1e6, 3) if receive_rate else None,
        "send_seconds": round((send_last - send_first) / 1e9, 6) if send_first and send_last else None,
        "receive_seconds": round((recv_last - recv_first) / 1e9, 6) if recv_first and recv_last else None,
    }


def _per_second(n: int, first: Optional[int], last: Optional[int]) -> Optional[float]:
    """``n`` messages between the wall-clock ns ``first`` and ``last``, per second; None without a span."""
    if not n or first is None or last is None or last <= first:
        return None
    return round(n / ((last - first) / 1e9), 1)


def _timeline_rows(config: LoadConfig, timeline: Timeline, t0: int, end: int) -> List[Dict[str, Any]]:
    """One row per interval from ``t0``, empty ones included; the last one ends at ``end`` (wall-clock ns)."""
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
    return rows


def _interval_histograms(timeline: Timeline) -> List[Any]:
    """Each interval's merged latency histogram (None for one without), in the order of ``_timeline_rows``."""
    last_index = max(timeline.rows) if timeline.rows else -1
    return [timeline.rows[index][5] if index in timeline.rows else None for index in range(last_index + 1)]


def _broker(views: List[WorkerView], url: str, in_process: bool, destinations: List[str]) -> Dict[str, Any]:
    """``LoadResult.broker``: where the run went (the URL masked) and what the broker said it was."""
    ready = next((v.ready for v in views if v.ready), {}) or {}
    return {
        "url": mask(url),
        "in_process": in_process,
        "server": ready.get("server"),
        "stomp_version": ready.get("version"),
        "destinations": list(destinations),
    }


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
    for dist in ("anyio", "uvloop", "trio"):
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


def _outages(views: List[WorkerView], finals: List[Dict[str, Any]], state: Dict[str, Any]) -> List[Dict[str, Any]]:
    """A failover run's outages, from every consumer's delivery log (:func:`.failover.outage_rows`)."""
    producers = sorted((ps for view in views for ps in view.spec.producers), key=lambda ps: ps.index)
    sent_by = _sent_by_producer(finals)
    return outage_rows(
        # a producer that started late is behind by its delay: its phase says so
        state["cuts"], [(ps.rate or 0.0, ps.phase + ps.start_delay * (ps.rate or 0.0)) for ps in producers],
        [sum(sent_by.get(ps.key, [0])) for ps in producers],
        [log for f in finals for log in f.get("deliveries", [])], state["t0"],
    )
