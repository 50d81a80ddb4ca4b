"""Latency histograms: HdrHistogram (our own, :mod:`._hdr`) in microseconds, and a cheaper way to record into one.

A worker records each latency as a list increment at :func:`latency_index` (HdrHistogram's
own bucket layout) and :func:`fold` turns an interval's counts into a real histogram;
histograms travel encoded (HdrHistogram's V2 format) between processes (and Spark
executors) and are added on arrival. :func:`percentiles` is the summary every report shows.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Type

from ._hdr import HdrHistogram

#: Latency histograms: 1 us to 1 hour, 3 significant figures (0.1% resolution).
MAX_LATENCY_US = 3_600_000_000
SIGNIFICANT_FIGURES = 3
_PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9), ("p99.99", 99.99))


def histogram_class() -> Type[HdrHistogram]:
    """The histogram class: its ``decode`` reads what ``encode`` wrote, here or in an older worker."""
    return HdrHistogram


def new_histogram() -> HdrHistogram:
    """An empty latency histogram: 1 us to :data:`MAX_LATENCY_US`, :data:`SIGNIFICANT_FIGURES` figures."""
    return HdrHistogram(1, MAX_LATENCY_US, SIGNIFICANT_FIGURES)


# HdrHistogram's bucket layout (the same in every port), for recording without a method
# call: a value v lands in counts index
#   b = bit_length(v | SUB_MASK) - (HALF_MAGNITUDE + 1)     (bucket; unit magnitude 0 as lowest is 1)
#   ((b + 1) << HALF_MAGNITUDE) + (v >> b) - HALF_COUNT
# record_value costs a method call and its checks; a list increment a fraction of that.
# Interval counts are folded into a real histogram once per interval.
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


def fold(counts: List[int]) -> HdrHistogram:
    """A histogram holding ``counts`` (indexed by :func:`latency_index`): a copy, the layouts being the same."""
    hist = new_histogram()
    hist.add_counts(counts)
    return hist


def percentiles(hist: Optional[HdrHistogram]) -> Optional[Dict[str, float]]:
    """count, min, mean, stddev, p50 ... p99.99 and max of ``hist`` (None when it is None or empty)."""
    if hist is None or not hist.get_total_count():
        return None
    out: Dict[str, float] = {
        "count": hist.get_total_count(),
        "min": hist.get_min_value(),
        "mean": round(hist.get_mean_value(), 3),
        "stddev": round(hist.get_stddev(), 3),
    }
    at = hist.get_percentile_to_value_dict([p for _, p in _PERCENTILES])
    for name, p in _PERCENTILES:
        out[name] = at[p]
    out["max"] = hist.get_max_value()
    return out

