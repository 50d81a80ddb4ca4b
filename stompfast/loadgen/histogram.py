"""Latency histograms: HdrHistogram (hdrhistogram on PyPI) in microseconds, and a cheaper way to record into one.

A worker records each latency as a list increment at :func:`latency_index` (HdrHistogram's
own bucket layout) and :func:`fold` turns an interval's counts into a real histogram;
histograms travel encoded between processes (and Spark executors) and are added on
arrival. :func:`percentiles` is the summary every report shows.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

HDR_HINT = "stompfast bench needs hdrhistogram: pip install 'stompfast[loadgen]' (or pip install hdrhistogram)"

#: Latency histograms: 1 us to 1 hour, 3 significant figures (0.1% resolution).
MAX_LATENCY_US = 3_600_000_000
SIGNIFICANT_FIGURES = 3
_PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9), ("p99.99", 99.99))


def histogram_class() -> Any:
    """hdrhistogram's ``HdrHistogram`` class; ImportError with an install hint when it is missing."""
    try:
        from hdrh.histogram import HdrHistogram
    # An optional extra: say how to install it
    except ImportError as exc:
        raise ImportError(HDR_HINT) from exc
    return HdrHistogram


def new_histogram() -> Any:
    """An empty latency histogram: 1 us to :data:`MAX_LATENCY_US`, :data:`SIGNIFICANT_FIGURES` figures."""
    return histogram_class()(1, MAX_LATENCY_US, SIGNIFICANT_FIGURES)


# HdrHistogram's bucket layout (the same in every port), for recording without a method
# call: a value v lands in counts index
#   b = bit_length(v | SUB_MASK) - (HALF_MAGNITUDE + 1)     (bucket; unit magnitude 0 as lowest is 1)
#   ((b + 1) << HALF_MAGNITUDE) + (v >> b) - HALF_COUNT
# hdrhistogram's record_value costs about 1 us (ctypes counts); a list increment a tenth
# of that. Interval counts are folded into a real histogram once per interval.
_SUB_COUNT_MAGNITUDE = math.ceil(math.log2(2 * 10**SIGNIFICANT_FIGURES))
HALF_MAGNITUDE = max(_SUB_COUNT_MAGNITUDE, 1) - 1
HALF_COUNT = 1 << HALF_MAGNITUDE
SUB_MASK = (1 << (HALF_MAGNITUDE + 1)) - 1


def latency_index(value: int) -> int:
    """The HdrHistogram counts index of ``value`` (microseconds, 0 to MAX_LATENCY_US)."""
    b = (value | SUB_MASK).bit_length() - (HALF_MAGNITUDE + 1)
    return ((b + 1) << HALF_MAGNITUDE) + (value >> b) - HALF_COUNT


COUNTS_LEN = latency_index(MAX_LATENCY_US) + 1
SHIFT = HALF_MAGNITUDE + 1


def fold(counts: List[int]) -> Any:
    """A histogram holding ``counts`` (indexed by :func:`latency_index`)."""
    hist = new_histogram()
    value_at = hist.get_value_from_index
    record = hist.record_value
    for index, n in enumerate(counts):
        if n:
            record(value_at(index), n)
    return hist


def percentiles(hist: Any) -> Optional[Dict[str, float]]:
    """count, min, mean, stddev, p50 ... p99.99 and max of ``hist`` (None when it is None or empty)."""
    if hist is None or not hist.get_total_count():
        return None
    out: Dict[str, float] = {
        "count": hist.get_total_count(),
        "min": hist.get_min_value(),
        "mean": round(hist.get_mean_value(), 3),
        "stddev": round(hist.get_stddev(), 3),
    }
    for name, p in _PERCENTILES:
        out[name] = hist.get_value_at_percentile(p)
    out["max"] = hist.get_max_value()
    return out

