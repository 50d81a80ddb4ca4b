"""A worker's producers: their state and the send loop (the producers' hot path)."""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any, Deque, Dict, Optional

import anyio

from .config import H_PRODUCER, H_SEQ, H_TS, H_WARMUP
from .histogram import MAX_LATENCY_US, new_histogram
from .plan import ProducerSpec, WorkerSpec
from .timeline import Recorder

_BURST = 100  # closed loop: messages sent between two yields to the event loop


class ProducerState:
    __slots__ = ("spec", "sent", "by_dest", "confirmed", "warmup_sent", "first", "last", "measured", "done", "lag")

    def __init__(self, spec: ProducerSpec, destinations: int) -> None:
        self.spec = spec
        self.sent = 0
        self.by_dest = [0] * destinations  # also the next sf-seq for each destination
        self.confirmed = 0
        self.warmup_sent = 0
        self.first: Optional[int] = None  # wall ns of the first measured send
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
    config = worker.config
    spec = ps.spec
    assert rec is not None
    destinations = worker.destinations
    nd = len(destinations)
    body = worker.body
    extra = {**(config.headers or {}), **(queue_headers or {})} or None
    key = spec.key
    quota = spec.quota if spec.quota is not None else sys.maxsize
    _, duration = config.limits()
    end = t0 + int(duration * 1e9) if duration is not None else sys.maxsize
    warm_until = t0 + int(config.warmup * 1e9) if config.warmup else 0
    warm_count = spec.warmup_messages
    by_dest = ps.by_dest  # also the next sf-seq per destination
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
    due = 0
    if rate:
        step = 1e9 / rate
        ps.lag = new_histogram()
        lag_record = ps.lag.record_value
        mono0 = time.monotonic_ns() + (t0 - time_ns())  # t0 on the monotonic clock
    i = first_i = warm = 0
    now = 0

    def account() -> None:  # the burst's counters, once per burst (and on the way out)
        n = i - first_i
        if not n:
            return
        ps.sent = i
        ps.warmup_sent += warm
        rec.sent += n
        measured = n - warm
        if measured:
            ps.measured += measured
            if ps.first is None:
                ps.first = burst_start
            ps.last = now

    try:
        while i < quota:
            if rate:
                intended = int((i + phase) * step)  # ns after t0
                if t0 + intended >= end:
                    break
                mono = time.monotonic_ns()
                ahead = mono0 + intended - mono
                if ahead > 0:
                    await anyio.sleep(ahead / 1e9)
                    mono = time.monotonic_ns()
                # every message due by now, at most a burst before yielding
                due = int((mono - mono0) / step - phase) + 1
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
                    ts = t0 + int((i + phase) * step)  # the intended time is the stamp
                    if ts >= end:
                        break
                    lag = (now - ts) // 1000
                    if not lag_record(lag):
                        lag_record(MAX_LATENCY_US if lag > 0 else 0)
                else:
                    ts = now
                seq = by_dest[d]
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
                            await receipt  # raises it
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
                    await tx_obj.__aexit__(None, None, None)  # COMMIT (with a receipt when asked)
                    if receipts:
                        ps.confirmed += in_tx
                        rec.confirmed += in_tx
                    in_tx = 0
            account()
            first_i = i
            warm = 0
            if now >= rec.next_boundary:
                rec.roll(now)
            if not rate or i < due:  # (caught up: the next turn sleeps anyway)
                await checkpoint()
        if tx is not None:
            tx_obj, tx = tx, None
            await tx_obj.__aexit__(None, None, None)
            if receipts:
                ps.confirmed += in_tx
                rec.confirmed += in_tx
            in_tx = 0
        while outstanding:
            await outstanding.popleft()
            ps.confirmed += 1
            rec.confirmed += 1
    except BaseException:
        account()  # what was handed to the client before the failure was sent
        if tx is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await tx.__aexit__(*sys.exc_info())
                except Exception:
                    pass
        raise
