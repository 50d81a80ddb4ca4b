"""A worker's producers: their state and the send loop (the producers' hot path)."""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Optional, Tuple

import anyio

from .bodies import body_cycle
from .config import H_PRODUCER, H_SEQ, H_TS, H_WARMUP, LoadConfig
from .histogram import MAX_LATENCY_US, new_histogram
from .plan import ProducerSpec, WorkerSpec
from .timeline import Recorder

# Closed loop: messages sent between two yields to the event loop
_BURST = 100


class ProducerState:
    __slots__ = ("spec", "sent", "by_dest", "confirmed", "warmup_sent", "first", "last", "measured", "done", "lag")

    def __init__(self, spec: ProducerSpec, destinations: int) -> None:
        self.spec = spec
        self.sent = 0
        # Also the next sf-seq for each destination
        self.by_dest = [0] * destinations
        self.confirmed = 0
        self.warmup_sent = 0
        # Wall ns the measured span starts: the first measured send (open loop: its intended time if earlier)
        self.first: Optional[int] = None
        self.last: Optional[int] = None
        self.measured = 0
        self.done = False
        self.lag: Any = None


async def send_all(
    ps: ProducerState, client: Any, t0: int, worker: WorkerSpec, rec: Optional[Recorder],
    queue_headers: Optional[Dict[str, str]] = None,
) -> None:
    """Send this producer's messages: the producers' hot path.

    Per message: a clock read, a header dict, ``client.send``. Everything else
    (counters, timeline, yields to the event loop) is done once per burst of up
    to ``_BURST`` messages; in open-loop mode a burst is what is due by now.
    ``worker`` is the spec of the worker it runs in, ``rec`` that worker's recorder;
    ``queue_headers`` declare the run's own queue as its consumers do (RabbitMQ: auto-delete).
    """
    # Everything the loop reads is a local variable of this function: a local is the
    # cheapest read there is, and the loop reads them once or more per message.
    config = worker.config
    spec = ps.spec
    assert rec is not None
    destinations = worker.destinations
    nd = len(destinations)
    body = worker.body
    # A size distribution or several bodies: the bodies this producer sends in turn
    cycle = body_cycle(config.sizes, config.bodies, spec.index)
    cycle_length = len(cycle) if cycle is not None else 0
    extra = {**(config.headers or {}), **(queue_headers or {})} or None
    key = spec.key
    quota = spec.quota if spec.quota is not None else sys.maxsize
    end, warm_until = _deadlines(config, t0)
    if spec.start_delay:
        # A spread start: this producer's schedule (or its first send) begins its delay after t0
        t0 += int(spec.start_delay * 1e9)
        await anyio.sleep(max(0.0, (t0 - time.time_ns()) / 1e9))
    warm_count = spec.warmup_messages
    # the messages sent to each destination so far, which is also the next sf-seq of each
    by_dest = ps.by_dest
    d = spec.first_destination
    send = client.send
    time_ns = time.time_ns
    checkpoint = anyio.lowlevel.checkpoint
    receipts = config.receipts
    window = config.receipt_window
    outstanding: Deque[Any] = deque()
    tx_size = config.transaction_size
    mode = 2 if tx_size else 1 if receipts else 0
    tx: Any = None
    in_tx = 0
    rate = spec.rate
    phase = spec.phase
    # Under a rate shape: when message k is due (ns after t0), and how many are due by then
    schedule = spec.schedule
    time_of = schedule.time_of if schedule is not None else None
    due = 0
    if rate:
        step, lag_record, mono0 = _start_schedule(ps, rate, t0)
    i = first_i = warm = 0
    # read on the way out too, even after a failure before the first burst
    now = burst_start = 0
    try:
        while i < quota:
            if rate:
                # when message i is due, in ns after t0
                intended = int((i + phase) * step) if time_of is None else time_of(i + phase)
                if t0 + intended >= end:
                    break
                mono = time.monotonic_ns()
                ahead = mono0 + intended - mono
                # until message i is due, in whole milliseconds: uvloop's timers have that
                # resolution and wake a shorter sleep at once (a spin, at high rates) or a longer
                # one up to a millisecond early, and a message sent before its intended time
                # would read as less latency than it had
                while ahead > 0:
                    await anyio.sleep(-(-ahead // 1_000_000) / 1e3)
                    mono = time.monotonic_ns()
                    ahead = mono0 + intended - mono
                # every message due by now, at most a burst before yielding
                due = int(((mono - mono0) / step if schedule is None else schedule.due_by(mono - mono0)) - phase) + 1
                stop = min(quota, i + _BURST, max(due, i + 1))
            else:
                if time_ns() >= end:
                    break
                stop = min(quota, i + _BURST)
            first_i = i
            warm = 0
            burst_start = time_ns()
            while i < stop:
                now = time_ns()
                if rate:
                    # the intended time is the stamp, so a producer that falls behind shows it as latency
                    ts = t0 + (int((i + phase) * step) if time_of is None else time_of(i + phase))
                    if ts >= end:
                        break
                    lag = (now - ts) // 1000
                    if not lag_record(lag):
                        lag_record(MAX_LATENCY_US if lag > 0 else 0)
                else:
                    ts = now
                seq = by_dest[d]
                if cycle is not None:
                    body = cycle[i % cycle_length]
                h = {H_PRODUCER: key, H_SEQ: str(seq), H_TS: str(ts)}
                if i < warm_count or ts < warm_until:
                    h[H_WARMUP] = "1"
                    warm += 1
                if extra:
                    h.update(extra)
                if mode == 0:
                    await send(destinations[d], body, headers=h)
                elif mode == 1:
                    outstanding.append(await send(destinations[d], body, headers=h, receipt=True, wait=False))
                    while outstanding and outstanding[0].done():
                        receipt = outstanding.popleft()
                        if receipt.error is not None:
                            # awaiting a failed receipt raises its error
                            await receipt
                        ps.confirmed += 1
                        rec.confirmed += 1
                    if len(outstanding) >= window:
                        await outstanding.popleft()
                        ps.confirmed += 1
                        rec.confirmed += 1
                else:
                    if tx is None:
                        tx = client.transaction(receipt=receipts)
                        await tx.__aenter__()
                    await tx.send(destinations[d], body, headers=h)
                    in_tx += 1
                by_dest[d] = seq + 1
                d += 1
                if d == nd:
                    d = 0
                i += 1
                if in_tx >= tx_size and tx is not None:
                    tx_obj, tx = tx, None
                    # COMMIT, with a receipt when asked
                    await tx_obj.__aexit__(None, None, None)
                    if receipts:
                        ps.confirmed += in_tx
                        rec.confirmed += in_tx
                    in_tx = 0
            if rate and ps.first is None and i - first_i > warm:
                # open loop: the measured span starts when the first measured message was due, so a
                # producer that started late and caught up shows it as send lag, not as a higher rate
                k = first_i + warm + phase
                burst_start = min(burst_start, t0 + (int(k * step) if time_of is None else time_of(k)))
            _account(ps, rec, i, i - first_i, warm, burst_start, now)
            first_i = i
            warm = 0
            if now >= rec.next_boundary:
                rec.roll(now)
            # yield to the event loop, unless an open-loop producer caught up: its next turn sleeps anyway
            if not rate or i < due:
                await checkpoint()
        # cleared before the COMMIT: a failed COMMIT must not be aborted again below
        tx_obj, tx = tx, None
        await _commit_last_transaction(ps, rec, tx_obj, in_tx, receipts)
        await _await_receipts(ps, rec, outstanding)
    except BaseException as exc:
        # what was handed to the client before the failure was sent
        _account(ps, rec, i, i - first_i, warm, burst_start, now)
        if tx is not None:
            await _abort_transaction(tx, exc)
        raise


def _deadlines(config: LoadConfig, t0: int) -> Tuple[int, int]:
    """When the run's producers stop sending, and until when their messages are warm-up (wall-clock ns, 0: none)."""
    _, duration = config.limits()
    end = t0 + int(duration * 1e9) if duration is not None else sys.maxsize
    warm_until = t0 + int(config.warmup * 1e9) if config.warmup else 0
    return end, warm_until


def _start_schedule(ps: ProducerState, rate: float, t0: int) -> Tuple[float, Callable[[int], bool], int]:
    """Open loop: ns between two messages, the recorder of ``ps``'s new lag histogram, and t0 on the monotonic clock."""
    ps.lag = new_histogram()
    lag_record: Callable[[int], bool] = ps.lag.record_value
    return 1e9 / rate, lag_record, time.monotonic_ns() + (t0 - time.time_ns())


def _account(ps: ProducerState, rec: Recorder, sent: int, burst: int, warm: int, burst_start: int, now: int) -> None:
    """Count a burst once its ``burst`` messages were handed to the client: ``sent`` is the producer's total so far.

    ``warm`` of them were warm-up. The others are measured: the first measured burst's
    ``burst_start`` is the start of the producer's measured span (closed loop: its first
    measured send; open loop: that message's intended time if earlier), the last one's
    ``now`` its last send (wall-clock ns).
    """
    if not burst:
        return
    ps.sent = sent
    ps.warmup_sent += warm
    rec.sent += burst
    measured = burst - warm
    if measured:
        ps.measured += measured
        if ps.first is None:
            ps.first = burst_start
        ps.last = now


async def _commit_last_transaction(ps: ProducerState, rec: Recorder, tx: Any, in_tx: int, receipts: bool) -> None:
    """COMMIT the transaction still open after the last message (None: there is none), with a receipt when asked."""
    if tx is None:
        return
    await tx.__aexit__(None, None, None)
    if receipts:
        ps.confirmed += in_tx
        rec.confirmed += in_tx


async def _await_receipts(ps: ProducerState, rec: Recorder, outstanding: Deque[Any]) -> None:
    """Wait for every receipt still outstanding after the last message, counting each as confirmed."""
    while outstanding:
        await outstanding.popleft()
        ps.confirmed += 1
        rec.confirmed += 1


async def _abort_transaction(tx: Any, exc: BaseException) -> None:
    """ABORT the transaction open when sending failed with ``exc``, shielded from cancellation.

    A failure of the ABORT itself is dropped: ``exc``, the first failure, is what the caller raises.
    """
    with anyio.CancelScope(shield=True):
        try:
            await tx.__aexit__(type(exc), exc, exc.__traceback__)
        except Exception:
            pass
