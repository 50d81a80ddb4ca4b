"""What a client did, as numbers: ``client.stats()`` (both clients) returns a :class:`ClientStats`.

Counting costs (almost) nothing on the per-message paths, because most counts
are taken per socket read or write, not per frame, and the others are derived
when a snapshot is taken:

* ``frames_in`` / ``bytes_in``: per read (the events of one read, its length);
* ``frames_out`` / ``bytes_out``: per socket write (the frames of one batch);
* ``messages_received``: every subscription's inlet numbers its messages
  already (``Inlet.seq``); a snapshot sums them, plus those of subscriptions
  that are gone and the messages for unknown subscriptions;
* ``messages_sent``: every frame goes through the outbox; a snapshot takes the
  frames the outbox was given (written, dropped with a lost link, or still
  queued) minus the ones that are not SENDs, which are counted where they are
  made (ACK/NACK, SUBSCRIBE, transactions, heart-beats... none on the SEND path);
* receipts, ERROR frames, losses, reconnects: where they happen (not per message);
* the receipt round-trip histogram: one clock reading per RECEIPT.

The metrics exporters (``stompfast.otel``, the Prometheus example) read these
snapshots; nothing is pushed anywhere from the client's own paths.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Mapping, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from ._inbox import Inbox
    from ._outbox import Outbox
    from ._subscription import Inlet

__all__ = ["ClientStats", "Counters", "RttHistogram", "RttSummary", "merge_summaries"]

#: Bucket upper bounds of the receipt round-trip histogram, in seconds: 50 µs to 60 s, ~1.5x apart.
RTT_BOUNDS: Tuple[float, ...] = tuple(
    round(50e-6 * 1.5 ** i, 9) for i in range(int(math.log(60 / 50e-6, 1.5)) + 2)
)


class RttHistogram:
    """Receipt round trips: counts per bucket of :data:`RTT_BOUNDS` (one list, no allocation per record)."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        # The last: above the largest bound
        self.counts: List[int] = [0] * (len(RTT_BOUNDS) + 1)
        self.total = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def record(self, seconds: float) -> None:
        """One round trip (one C-level bisection: this runs once per RECEIPT)."""
        # The first bucket whose bound is >= seconds
        self.counts[bisect_left(RTT_BOUNDS, seconds)] += 1
        self.total += seconds

    def summary(self) -> "RttSummary":
        cumulative = []
        running = 0
        for bound, n in zip(RTT_BOUNDS, self.counts):
            running += n
            cumulative.append((bound, running))
        cumulative.append((math.inf, running + self.counts[-1]))
        return RttSummary(count=cumulative[-1][1], sum=self.total, buckets=tuple(cumulative))


@dataclass(frozen=True)
class RttSummary:
    """Receipt round trips (sent to RECEIPT), in seconds: the histogram's cumulative buckets."""

    count: int = 0
    #: the sum of every round trip, in seconds
    sum: float = 0.0
    #: ``(upper bound in seconds, cumulative count)`` per bucket; the last bound is ``inf``
    buckets: Tuple[Tuple[float, int], ...] = ()

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else 0.0

    def quantile(self, q: float) -> float:
        """The upper bound of the bucket holding the ``q`` quantile (0 < q <= 1); 0.0 with no data.

        An upper estimate within one bucket (~1.5x); ``inf`` only if it lies above 60 s.
        """
        if not 0 < q <= 1:
            raise ValueError(f"q must be in (0, 1], not {q!r}")
        if not self.count:
            return 0.0
        rank = q * self.count
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                return bound
        return math.inf

    def as_dict(self) -> Dict[str, Any]:
        """Plain values (JSON-ready): count, sum, mean, p50/p90/p99 (None without data or above the last
        bound: JSON has no infinity) and the cumulative counts per finite bound (the last one is ``count``)."""
        out: Dict[str, Any] = {"count": self.count, "sum": self.sum, "mean": self.mean}
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            value = self.quantile(q) if self.count else math.inf
            out[name] = value if math.isfinite(value) else None
        out["buckets"] = [[bound, n] for bound, n in self.buckets if math.isfinite(bound)]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RttSummary":
        """The summary :meth:`as_dict` wrote (the overflow bucket restored from ``count``)."""
        buckets = tuple((float(bound), int(n)) for bound, n in data.get("buckets") or ())
        count = int(data.get("count") or 0)
        if buckets:
            buckets += ((math.inf, count),)
        return cls(count=count, sum=float(data.get("sum") or 0.0), buckets=buckets)


def merge_summaries(summaries: Iterable[RttSummary]) -> RttSummary:
    """One summary of several clients' round trips: counts and sums added, bucket by bucket.

    The buckets are cumulative counts per bound, the same bounds for every client
    (:data:`RTT_BOUNDS`), so the merged quantiles are exactly those of all the round
    trips together (each still an upper estimate within one bucket). Summaries
    without buckets (no data) are skipped; bounds that differ raise ``ValueError``.
    """
    count, total = 0, 0.0
    bounds: Tuple[float, ...] = ()
    cumulative: List[int] = []
    for summary in summaries:
        count += summary.count
        total += summary.sum
        if not summary.buckets:
            continue
        these = tuple(bound for bound, _ in summary.buckets)
        if not bounds:
            bounds, cumulative = these, [0] * len(these)
        elif these != bounds:
            raise ValueError("cannot merge round-trip summaries with different bucket bounds")
        for i, (_, n) in enumerate(summary.buckets):
            cumulative[i] += n
    return RttSummary(count=count, sum=total, buckets=tuple(zip(bounds, cumulative)))


@dataclass(frozen=True)
class ClientStats:
    """A snapshot of one client's counters and gauges (``client.stats()``); counters start at 0 per client.

    Counters cover the client's whole life, across reconnects.
    """

    #: frames received (CONNECTED, MESSAGE, RECEIPT, ERROR; heart-beats are not frames)
    frames_in: int = 0
    #: bytes received, heart-beats included
    bytes_in: int = 0
    #: frames written to the socket (CONNECT included, heart-beats not)
    frames_out: int = 0
    #: bytes written, heart-beats included
    bytes_out: int = 0
    #: SEND frames given to the connection (written, still queued, or dropped by a lost link)
    messages_sent: int = 0
    #: MESSAGE frames received
    messages_received: int = 0
    #: ACK frames sent (a ``client``-mode ack covering earlier messages counts once)
    acks: int = 0
    #: NACK frames sent
    nacks: int = 0
    #: receipts that came
    receipts_confirmed: int = 0
    #: receipts that failed (the connection ended first, an ERROR, a stall)
    receipts_failed: int = 0
    #: ERROR frames received
    errors: int = 0
    #: connections that ended by a failure (lost, ERROR, heart-beat timeout, framing fault)
    connection_losses: int = 0
    #: sessions re-established after a loss
    reconnects: int = 0
    #: frames queued and never written: a connection ended (lost, failed, closed) first
    frames_dropped: int = 0
    #: bytes queued to be written now
    bytes_queued: int = 0
    #: receipts awaited now
    receipts_pending: int = 0
    #: messages received and not yet taken, per subscription id (now)
    buffered: Mapping[str, int] = field(default_factory=dict)
    #: receipt round trips
    receipt_rtt: RttSummary = field(default_factory=RttSummary)
    #: replies to ``request()`` that came after their request had timed out (dropped)
    late_replies: int = 0

    def as_dict(self) -> Dict[str, object]:
        """Plain values (for JSON): the histogram as :meth:`RttSummary.as_dict` writes it (seconds)."""
        out: Dict[str, object] = {name: getattr(self, name) for name in self.__dataclass_fields__
                                  if name not in ("buffered", "receipt_rtt")}
        out["buffered"] = dict(self.buffered)
        out["receipt_rtt"] = self.receipt_rtt.as_dict()
        return out


class Counters:
    """The counters of one AsyncClient, across its connections: what :meth:`snapshot` turns into a ClientStats.

    The client and its session operations count what they do here (ACK/NACK,
    control frames, CONNECTs, losses, reconnects...). The outbox and the inbox of
    the current connection count what they do on themselves (writes, drops,
    heart-beats; reads, receipts, ERRORs); that joins these totals when the
    connection is replaced (:meth:`add_link`). The event loop increments them; a
    blocking client's thread writing a SEND or an ACK itself (``send_from_thread``,
    ``ack_from_thread``) has counters of its own (``thread_sends``, ``thread_acks``,
    ``thread_bytes``), under the client's registry lock, which :meth:`snapshot`'s
    caller holds too.
    """

    __slots__ = (
        "frames_in", "bytes_in", "bytes_out", "entries_written", "entries_dropped", "frames_dropped",
        "thread_sends", "thread_acks", "thread_bytes", "connects", "heartbeats", "acks", "nacks", "control",
        "extra_frames",
        "received_gone", "receipts_ok", "receipts_failed", "errors", "losses", "reconnects", "rtt",
    )

    def __init__(self) -> None:
        self.frames_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        # outbox entries written (a frame each; heart-beat EOLs too)
        self.entries_written = 0
        # outbox entries dropped with a lost link (heart-beats too)
        self.entries_dropped = 0
        # the same, frames only
        self.frames_dropped = 0
        self.thread_sends = 0
        self.thread_acks = 0
        self.thread_bytes = 0
        self.connects = 0
        self.heartbeats = 0
        self.acks = 0
        self.nacks = 0
        # SUBSCRIBE, UNSUBSCRIBE, BEGIN, COMMIT, ABORT, DISCONNECT, flush probes: not SENDs
        self.control = 0
        # entries holding a second frame (the flush probe's ABORT)
        self.extra_frames = 0
        # messages of subscriptions that are gone, and for unknown subscriptions
        self.received_gone = 0
        self.receipts_ok = 0
        self.receipts_failed = 0
        self.errors = 0
        self.losses = 0
        self.reconnects = 0
        self.rtt = RttHistogram()

    def add_link(self, outbox: "Outbox", inbox: "Inbox") -> None:
        """A connection's outbox and inbox are replaced: what they counted joins the totals.

        (Under the client's registry lock, which :meth:`snapshot`'s caller takes too:
        a snapshot sees every count once.)
        """
        self.entries_written += outbox.entries_written
        self.bytes_out += outbox.bytes_out
        self.entries_dropped += outbox.entries_dropped
        self.frames_dropped += outbox.frames_dropped
        self.heartbeats += outbox.heartbeats
        self.frames_in += inbox.frames_in
        self.bytes_in += inbox.bytes_in
        self.received_gone += inbox.received_gone
        self.receipts_ok += inbox.receipts_ok
        self.receipts_failed += inbox.receipts_failed
        self.errors += inbox.errors

    def snapshot(
        self, outbox: "Outbox", inbox: "Inbox", receipts_pending: int, subs: Iterable["Inlet"], lock: Any,
        late_replies: int = 0,
    ) -> ClientStats:
        """These totals plus what the current connection's ``outbox`` and ``inbox`` counted, as a ClientStats.

        ``lock`` is the client's registry lock: the link installs a new outbox and
        adds the old one's counts under it.
        """
        with lock:
            out = list(outbox.out)
            out_bytes = outbox.out_bytes
            written = self.entries_written + outbox.entries_written
            bytes_out = self.bytes_out + outbox.bytes_out + self.thread_bytes
            entries_dropped = self.entries_dropped + outbox.entries_dropped
            frames_dropped = self.frames_dropped + outbox.frames_dropped
            heartbeats = self.heartbeats + outbox.heartbeats
            thread_sends = self.thread_sends
            thread_acks = self.thread_acks
            frames_in = self.frames_in + inbox.frames_in
            bytes_in = self.bytes_in + inbox.bytes_in
            received_gone = self.received_gone + inbox.received_gone
            receipts_ok = self.receipts_ok + inbox.receipts_ok
            receipts_failed = self.receipts_failed + inbox.receipts_failed
            errors = self.errors + inbox.errors
        heartbeats_queued = out.count(b"\n")
        entries = written + entries_dropped + len(out) + thread_sends + thread_acks
        heartbeats_written = heartbeats - heartbeats_queued - (entries_dropped - frames_dropped)
        inlets = list(subs)
        return ClientStats(
            frames_in=frames_in,
            bytes_in=bytes_in,
            frames_out=written + thread_sends + thread_acks - heartbeats_written + self.connects + self.extra_frames,
            bytes_out=bytes_out,
            messages_sent=entries - self.acks - thread_acks - self.nacks - self.control - heartbeats,
            messages_received=received_gone + sum(sub.seq for sub in inlets),
            acks=self.acks + thread_acks,
            nacks=self.nacks,
            receipts_confirmed=receipts_ok,
            receipts_failed=receipts_failed,
            errors=errors,
            connection_losses=self.losses,
            reconnects=self.reconnects,
            frames_dropped=frames_dropped,
            bytes_queued=out_bytes,
            receipts_pending=receipts_pending,
            buffered={sub.id: len(sub.messages) for sub in inlets if sub.id is not None},
            receipt_rtt=self.rtt.summary(),
            late_replies=late_replies,
        )
