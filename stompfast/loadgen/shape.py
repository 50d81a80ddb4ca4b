"""Load shapes: a run's target rate as steps and ramps (``--rate 1000:30s,1000..5000:60s``).

A shape is a sequence of :class:`Stage` objects, each holding a rate for some seconds
(a step) or moving it linearly from one rate to another (a ramp). :func:`parse_rate`
reads the ``--rate`` text, :class:`RateSchedule` turns a shape into the intended send
time of each message of one producer, and :func:`stage_rows` reports each stage's
target beside what the run achieved.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import ConfigurationError
from .histogram import new_histogram, percentiles

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
#: ns after t0 of a message past the end of a shape: later than any run's end (and no overflow added to t0)
NEVER = 1 << 62


@dataclasses.dataclass(frozen=True)
class Stage:
    """``seconds`` of load whose rate (messages/s, every producer together) goes from ``start`` to ``end``."""

    start: float
    end: float
    seconds: float

    @property
    def messages(self) -> float:
        """The messages this stage schedules (its mean rate times its length)."""
        return (self.start + self.end) / 2 * self.seconds

    def describe(self) -> str:
        rate = f"{self.start:g}" if self.start == self.end else f"{self.start:g}..{self.end:g}"
        return f"{rate}:{self.seconds:g}s"


def parse_duration(text: str) -> float:
    """Seconds from ``"30s"``, ``"500ms"``, ``"2m"``, ``"1h"`` or a plain number of seconds."""
    match = _DURATION.match(text)
    if not match:
        raise ConfigurationError(f"not a duration: {text!r} (examples: 30s, 500ms, 2m, 1h)")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def _parse_rate_value(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigurationError(f"not a rate: {text!r} (messages per second)") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"a rate must be a non-negative number of messages per second, not {text!r}")
    return value


def parse_rate(text: str) -> Tuple[Optional[float], Tuple[Stage, ...]]:
    """``--rate``: ``"5000"`` is a constant rate; ``"1000:30s,5000:30s"`` two steps;
    ``"0..5000:60s"`` a ramp; stages may mix. Returns ``(rate, ())`` or ``(None, stages)``."""
    text = text.strip()
    if ":" not in text and ".." not in text:
        rate = _parse_rate_value(text)
        if rate == 0:
            raise ConfigurationError("--rate must be above 0 (leave it out to send as fast as possible)")
        return rate, ()
    stages = []
    for part in text.split(","):
        rates, sep, duration = part.partition(":")
        if not sep:
            raise ConfigurationError(f"a rate stage needs its length, as in 1000:30s or 0..5000:60s, not {part!r}")
        low, dots, high = rates.partition("..")
        start = _parse_rate_value(low)
        end = _parse_rate_value(high) if dots else start
        stages.append(Stage(start, end, parse_duration(duration)))
    shape = tuple(stages)
    check_shape(shape)
    return None, shape


def check_shape(shape: Sequence[Any]) -> None:
    """Raise ConfigurationError unless ``shape`` is a sequence of :class:`Stage` that schedules something."""
    for stage in shape:
        if not isinstance(stage, Stage):
            raise ConfigurationError(f"rate_shape holds Stage objects, not {stage!r}")
        for value in (stage.start, stage.end, stage.seconds):
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ConfigurationError(f"a stage's rates and length must be non-negative numbers: {stage!r}")
        if stage.seconds == 0:
            raise ConfigurationError(f"a stage must last more than 0 s: {stage.describe()}")
    if shape and not any(stage.messages > 0 for stage in shape):
        raise ConfigurationError("the rate shape schedules no message (every stage has rate 0)")


def describe_shape(shape: Sequence[Stage]) -> str:
    return ",".join(stage.describe() for stage in shape)


def shape_seconds(shape: Sequence[Stage]) -> float:
    return sum(stage.seconds for stage in shape)


def shape_mean_rate(shape: Sequence[Stage]) -> float:
    """Messages per second over the whole shape: what ``rate>=0.98*target`` compares against."""
    return sum(stage.messages for stage in shape) / shape_seconds(shape)


class RateSchedule:
    """One producer's share of a shape: when (ns after t0) its k-th message is due, and how many are due by then.

    ``share`` is the part of the shape's rate this producer sends (1/producers). The
    messages of a stage are spread as its rate says: evenly on a step, at a linearly
    growing or shrinking pace on a ramp.
    """

    __slots__ = ("_stages", "_starts_ns", "_counts")

    def __init__(self, shape: Sequence[Stage], share: float) -> None:
        self._stages = [(s.start * share, s.end * share, s.seconds) for s in shape]
        # Per stage: the ns it starts at and the messages due before it
        self._starts_ns: List[int] = []
        self._counts: List[float] = []
        t = 0.0
        count = 0.0
        for stage, (start, end, seconds) in zip(shape, self._stages):
            self._starts_ns.append(int(t * 1e9))
            self._counts.append(count)
            t += stage.seconds
            count += (start + end) / 2 * seconds
        self._starts_ns.append(int(t * 1e9))
        self._counts.append(count)

    @property
    def total(self) -> float:
        """The messages this producer's share of the shape schedules."""
        return self._counts[-1]

    @property
    def end_ns(self) -> int:
        return self._starts_ns[-1]

    def time_of(self, k: float) -> int:
        """When the ``k``-th message (0-based, may be fractional) is due, in ns after t0.

        Past the shape's last message: :data:`NEVER`, later than any run's end.
        """
        counts = self._counts
        if k >= counts[-1]:
            return NEVER
        index = bisect.bisect_right(counts, k) - 1
        start, end, seconds = self._stages[index]
        left = k - counts[index]
        if left <= 0:
            offset = 0.0
        elif start == end:
            offset = left / start
        else:
            # n(t) = start*t + (end - start)*t^2/(2*seconds), solved for t (stable at start == 0)
            offset = 2 * left / (start + math.sqrt(start * start + 2 * (end - start) * left / seconds))
        return self._starts_ns[index] + int(offset * 1e9)

    def due_by(self, ns: int) -> float:
        """How many messages are due ``ns`` after t0 (fractional)."""
        starts = self._starts_ns
        if ns >= starts[-1]:
            return self._counts[-1]
        if ns <= 0:
            return 0.0
        index = bisect.bisect_right(starts, ns) - 1
        start, end, seconds = self._stages[index]
        t = (ns - starts[index]) / 1e9
        return self._counts[index] + start * t + (end - start) * t * t / (2 * seconds)

    def rate_at(self, seconds: float) -> float:
        """This share's target rate ``seconds`` after t0 (0 past the end)."""
        ns = int(seconds * 1e9)
        starts = self._starts_ns
        if ns < 0 or ns >= starts[-1]:
            return 0.0
        index = bisect.bisect_right(starts, ns) - 1
        start, end, length = self._stages[index]
        return start + (end - start) * ((ns - starts[index]) / 1e9) / length


def stage_rows(
    shape: Sequence[Stage], timeline: Sequence[Dict[str, Any]], histograms: Sequence[Any]
) -> List[Dict[str, Any]]:
    """Each stage beside what the run did in it: the intervals of ``timeline`` that start within it.

    ``target_rate`` is the stage's mean rate; ``send_rate`` and ``receive_rate`` the
    messages sent and received in those intervals per second; ``latency_us`` the
    percentiles of their merged latency histograms (``histograms``, in timeline order).
    """
    rows = []
    begin = 0.0
    for stage in shape:
        finish = begin + stage.seconds
        picked = [i for i, row in enumerate(timeline) if begin - 1e-9 <= row["t"] < finish - 1e-9]
        seconds = sum(timeline[i]["seconds"] for i in picked)
        merged = None
        for i in picked:
            if i < len(histograms) and histograms[i] is not None:
                if merged is None:
                    merged = new_histogram()
                merged.add(histograms[i])
        pct = percentiles(merged) if merged is not None else None
        rows.append({
            "stage": stage.describe(),
            "t": round(begin, 6),
            "seconds": stage.seconds,
            "target_rate": round(stage.messages / stage.seconds, 1),
            "send_rate": round(sum(timeline[i]["sent"] for i in picked) / seconds, 1) if seconds else None,
            "receive_rate": round(sum(timeline[i]["received"] for i in picked) / seconds, 1) if seconds else None,
            "latency_us": {k: pct[k] for k in ("p50", "p90", "p99", "max")} if pct else None,
        })
        begin = finish
    return rows
