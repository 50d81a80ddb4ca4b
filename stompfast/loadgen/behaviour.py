"""What a run's consumers do besides counting: a processing time per message, a NACK share, pauses.

``--processing-time 5ms`` (or ``1ms..10ms``, uniform) holds each message that long
before it is acked, one message after another per consumer, as an application's
handler would; ``--nack-share 0.1`` NACKs that share of the deliveries (the broker
requeues them, and the redelivery is counted like any message, so nothing is lost or
counted twice); ``--consumer-pause AT:LENGTH`` (and ``--consumer-delay``, a pause at
the start) stops every consumer for a while, so that a backlog builds, and
:func:`backlog_rows` reports how fast it drained. A consumer with none of these runs
the counting loop alone (:class:`ConsumerBehaviour` is then not made at all).
"""

from __future__ import annotations

import random
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import anyio

from ..errors import ConfigurationError
from .shape import parse_duration

#: (at, length) in seconds from the producers' start: a window in which no consumer takes a message
Pause = Tuple[float, float]


class ConsumerBehaviour:
    """One consumer's processing time, NACK decisions and pauses (its own random generator: repeatable)."""

    __slots__ = ("_rng", "_low", "_high", "nack_share", "_pauses")

    def __init__(self, processing_time: Tuple[float, float], nack_share: float, pauses: Sequence[Pause],
                 t0: int, consumer: int) -> None:
        self._rng = random.Random(consumer)
        self._low, self._high = processing_time
        self.nack_share = nack_share
        # Wall-clock ns windows, earliest first
        self._pauses = [(t0 + int(at * 1e9), t0 + int((at + length) * 1e9)) for at, length in sorted(pauses)]

    @property
    def per_message(self) -> bool:
        """Whether messages are taken one at a time (a processing time or a NACK share), not by the batch."""
        return bool(self._high or self.nack_share)

    async def pause_if_due(self) -> None:
        """Sleep to the end of the pause the clock is in, if any (pauses already over are dropped)."""
        now = time.time_ns()
        while self._pauses and now >= self._pauses[0][0]:
            _, end = self._pauses.pop(0)
            # (again while short of the end: a timer may wake up to a millisecond early)
            while now < end:
                await anyio.sleep((end - now) / 1e9)
                now = time.time_ns()

    def nacks(self) -> bool:
        """Whether to NACK the delivery at hand."""
        return self._rng.random() < self.nack_share

    def processing_seconds(self) -> float:
        """How long the message at hand takes to process."""
        if self._low == self._high:
            return self._low
        return self._rng.uniform(self._low, self._high)


def parse_processing_time(text: str) -> Tuple[float, float]:
    """``--processing-time``: ``TIME`` (``5ms``) or ``LOW..HIGH`` (``1ms..3ms``), in seconds."""
    low, dots, high = text.partition("..")
    first = parse_duration(low)
    return (first, parse_duration(high) if dots else first)


def parse_pause(text: str) -> Pause:
    """``--consumer-pause``: ``AT:LENGTH`` (``10s:5s``), in seconds."""
    at, sep, length = text.partition(":")
    if not sep:
        raise ConfigurationError(f"a consumer pause is AT:LENGTH, e.g. 10s:5s, not {text!r}")
    seconds = parse_duration(length)
    if seconds <= 0:
        raise ConfigurationError(f"a consumer pause must last more than 0 s, not {text!r}")
    return (parse_duration(at), seconds)


def last_resume(pauses: Sequence[Pause]) -> float:
    """Seconds from the start at which the last pause ends (0 without pauses)."""
    return max((at + length for at, length in pauses), default=0.0)


def backlog_rows(pauses: Sequence[Pause], timeline: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per pause: the backlog it built and how fast the consumers drained it, from ``timeline``.

    The backlog at the end of an interval is what was sent so far minus what was
    received so far. ``before`` is the backlog at the pause's start, ``peak`` the largest
    after it; the backlog counts as drained at the end of the first interval after the
    pause whose backlog is back at ``before`` (plus 1% of the rise, for the messages in
    flight at any moment). ``drain_rate`` is what was received from the pause's end to
    then, per second; both are None when the run ended, or the next pause began, first.
    The resolution is the timeline's interval.
    """
    ends: List[Tuple[float, int]] = []
    sent = received = 0
    for row in timeline:
        sent += row["sent"]
        received += row["received"]
        ends.append((row["t"] + row["seconds"], sent - received))
    cumulative_received = []
    total = 0
    for row in timeline:
        total += row["received"]
        cumulative_received.append(total)
    rows = []
    ordered = sorted(pauses)
    for n, (at, length) in enumerate(ordered):
        resume = at + length
        # Up to the next pause's start: what comes after it is that pause's
        until = ordered[n + 1][0] if n + 1 < len(ordered) else float("inf")
        before = next((backlog for end, backlog in reversed(ends) if end <= at + 1e-9), 0)
        after = [(i, end, backlog) for i, (end, backlog) in enumerate(ends) if at + 1e-9 < end <= until + 1e-9]
        peak = max((backlog for _, _, backlog in after), default=before)
        limit = before + max(1, (peak - before) // 100)
        drained: Optional[Tuple[int, float]] = next(
            ((i, end) for i, end, backlog in after if end >= resume - 1e-9 and backlog <= limit), None
        )
        drain_seconds = drain_rate = None
        if drained is not None:
            i, end = drained
            start_index = next((j for j, (e, _) in enumerate(ends) if e > resume + 1e-9), i)
            got = cumulative_received[i] - (cumulative_received[start_index - 1] if start_index else 0)
            drain_seconds = round(max(end - resume, 0.0), 6)
            drain_rate = round(got / drain_seconds, 1) if drain_seconds else None
        rows.append({
            "at": at, "seconds": length, "backlog_before": before, "peak_backlog": peak,
            "drain_seconds": drain_seconds, "drain_rate": drain_rate,
        })
    return rows
