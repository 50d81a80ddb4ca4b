"""The timeline: per-interval counts and latency histograms, recorded by a worker, added up by the coordinator.

:class:`Recorder` is a worker's side (the current interval, closed ones waiting to be
reported), :class:`Timeline` the coordinator's (every worker's intervals added by index).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from .histogram import COUNTS_LEN, fold, histogram_class, new_histogram


class Recorder:
    """A worker's timeline: counts and a latency histogram for the current interval.

    Intervals are numbered from t0 (wall-clock ns); the tasks that see the clock
    pass a boundary (``now >= next_boundary``) close the interval (:meth:`roll`),
    and the worker's reporter hands the closed ones to the coordinator.
    """

    def __init__(self, t0: int, interval: int) -> None:
        self.t0 = t0
        self.interval = interval
        self.index = 0
        self.next_boundary = t0 + interval
        # Latencies of this interval, by latency_index
        self.counts = [0] * COUNTS_LEN
        self.recorded = 0
        self.sent = self.received = self.confirmed = self.errors = self.warmup = 0
        self.closed: List[Tuple[Any, ...]] = []

    def roll(self, now: int) -> None:
        index = (now - self.t0) // self.interval
        if index > self.index:
            self.close()
            self.index = index
            self.next_boundary = self.t0 + (index + 1) * self.interval

    def close(self) -> None:
        if self.sent or self.received or self.confirmed or self.errors or self.recorded:
            encoded = fold(self.counts).encode() if self.recorded else None
            self.closed.append((self.index, self.sent, self.received, self.confirmed, self.errors, self.warmup,
                                encoded))
            if self.recorded:
                self.counts = [0] * COUNTS_LEN
        self.sent = self.received = self.confirmed = self.errors = self.warmup = self.recorded = 0

    def take(self) -> List[Tuple[Any, ...]]:
        closed, self.closed = self.closed, []
        return closed


class Timeline:
    def __init__(self) -> None:
        self.rows: Dict[int, List[Any]] = {}

    def add(self, intervals: Sequence[Tuple[Any, ...]]) -> None:
        hist_class = histogram_class()
        for index, sent, received, confirmed, errors, warmup, encoded in intervals:
            row = self.rows.get(index)
            if row is None:
                row = self.rows[index] = [0, 0, 0, 0, 0, None]
            row[0] += sent
            row[1] += received
            row[2] += confirmed
            row[3] += errors
            row[4] += warmup
            if encoded is not None:
                hist = hist_class.decode(encoded)
                if row[5] is None:
                    row[5] = new_histogram()
                row[5].add(hist)


def min_present(values: Any) -> Optional[int]:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def max_present(values: Any) -> Optional[int]:
    present = [v for v in values if v is not None]
    return max(present) if present else None
