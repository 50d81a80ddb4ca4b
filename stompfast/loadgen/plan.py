"""Planning: a run's producers and consumers spread over its workers (:func:`plan_workers`)."""

from __future__ import annotations

import dataclasses
import random
from typing import List, Optional

from .config import LoadConfig, is_fanout
from .shape import RateSchedule


@dataclasses.dataclass
class ProducerSpec:
    index: int
    # The sf-producer header value: "<run id>.<index>"
    key: str
    # Messages to send at most (None: until the duration ends)
    quota: Optional[int]
    # This producer's messages/s (open loop; its mean under a rate shape) or None
    rate: Optional[float]
    # Open loop: intended time of message i is t0 + (i + phase) / rate, or schedule.time_of(i + phase)
    phase: float
    first_destination: int
    warmup_messages: int
    # Under a rate shape: this producer's share of it
    schedule: Optional[RateSchedule] = None
    # Seconds after t0 this producer starts (``start_spread``): its schedule starts then
    start_delay: float = 0.0


@dataclasses.dataclass
class WorkerSpec:
    worker: int
    config: LoadConfig
    url: str
    destinations: List[str]
    fanout: List[bool]
    producers: List[ProducerSpec]
    consumers: List[int]
    all_producer_keys: List[str]
    body: bytes


def split_evenly(total: int, parts: int) -> List[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def plan_workers(config: LoadConfig, url: str, destinations: List[str], run_id: str) -> List[WorkerSpec]:
    count, _ = config.limits()
    n, m = config.producers, config.consumers
    workers = max(1, min(config.processes, n + m))
    quotas: List[Optional[int]] = list(split_evenly(count, n)) if count is not None else [None] * n
    warm = split_evenly(config.warmup_messages, n)
    body = bytes(config.body) if config.body is not None else b"x" * config.size
    target = config.target_rate
    # Each producer's start delay: drawn from a generator seeded with the run id (a run is repeatable from it)
    spread = random.Random(run_id)
    delays = [spread.uniform(0.0, config.start_spread) if config.start_spread else 0.0 for _ in range(n)]
    producers = [
        ProducerSpec(
            index=p,
            key=f"{run_id}.{p}",
            quota=quotas[p],
            rate=target / n if target else None,
            phase=p / n,
            first_destination=p % len(destinations),
            warmup_messages=warm[p],
            schedule=RateSchedule(config.rate_shape, 1 / n) if config.rate_shape else None,
            start_delay=delays[p],
        )
        for p in range(n)
    ]
    keys = [ps.key for ps in producers]
    specs = [
        WorkerSpec(w, config, url, destinations, [is_fanout(d) for d in destinations], [], [], keys, body)
        for w in range(workers)
    ]
    for ps in producers:
        specs[ps.index % workers].producers.append(ps)
    # Consumers fill the workers from the other end: producers and consumers apart
    for c in range(m):
        specs[(workers - 1 - c) % workers].consumers.append(c)
    return [s for s in specs if s.producers or s.consumers]


def group_name(d: int, fanout: bool, consumer: int) -> str:
    return f"t{d}.{consumer}" if fanout else f"q{d}"
