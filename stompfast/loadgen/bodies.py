"""Message bodies: one fixed size, a size distribution (``--size 100..10000``, ``--size 100:80,10000:20``)
or several files (``--body-file`` repeated), and the cycle of bodies each producer sends.

A distribution is a tuple of ``(low, high, weight)`` ranges: a range is picked with
probability ``weight / sum(weights)``, then a size uniformly in ``[low, high]``. A
producer does not draw per message (that would cost more than the send): it sends a
cycle of bodies drawn once, from a random generator seeded with its index, so that a
run is repeatable and every producer's mix is the distribution's.
"""

from __future__ import annotations

import random
import re
from typing import List, Optional, Sequence, Tuple

from ..errors import ConfigurationError

#: Distinct bodies in a producer's cycle (fewer when they would hold more than CYCLE_BYTES).
CYCLE_LENGTH = 1024
CYCLE_BYTES = 64 * 1024 * 1024
#: The largest body a distribution may ask for.
MAX_SIZE = 256 * 1024 * 1024

SizeRange = Tuple[int, int, float]

_SIZE = re.compile(r"^\s*([0-9]+)\s*(?:\.\.\s*([0-9]+))?\s*(?::\s*([0-9]*\.?[0-9]+)\s*%?)?\s*$")


def parse_sizes(text: str) -> Tuple[SizeRange, ...]:
    """``--size``: ``"100"`` (fixed), ``"100..10000"`` (uniform), ``"100:80,10000:20"`` (weighted; ranges may mix)."""
    ranges = []
    for part in text.split(","):
        match = _SIZE.match(part)
        if not match:
            raise ConfigurationError(
                f"not a size: {part.strip()!r} (BYTES, LOW..HIGH, or comma-separated BYTES:WEIGHT,"
                " e.g. 100:80,10000:20)"
            )
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        weight = float(match.group(3)) if match.group(3) is not None else 1.0
        ranges.append((low, high, weight))
    sizes = tuple(ranges)
    check_sizes(sizes)
    return sizes


def check_sizes(sizes: Sequence[SizeRange]) -> None:
    """Raise ConfigurationError unless ``sizes`` is a usable distribution."""
    for entry in sizes:
        if not (isinstance(entry, tuple) and len(entry) == 3):
            raise ConfigurationError(f"a size range is (low, high, weight), not {entry!r}")
        low, high, weight = entry
        if type(low) is not int or type(high) is not int or not 0 <= low <= high <= MAX_SIZE:
            raise ConfigurationError(f"a size range needs whole 0 <= low <= high <= {MAX_SIZE:,}, not {entry!r}")
        if not isinstance(weight, (int, float)) or not weight >= 0:
            raise ConfigurationError(f"a size range's weight must be a number >= 0, not {entry!r}")
    if sizes and not any(weight > 0 for _, _, weight in sizes):
        raise ConfigurationError("every size range has weight 0")


def describe_sizes(sizes: Sequence[SizeRange]) -> str:
    parts = []
    for low, high, weight in sizes:
        text = f"{low}" if low == high else f"{low}..{high}"
        parts.append(text if len(sizes) == 1 else f"{text}:{weight:g}")
    return ",".join(parts)


def mean_size(sizes: Sequence[SizeRange]) -> float:
    """The distribution's mean body size in bytes."""
    total = sum(weight for _, _, weight in sizes)
    return sum((low + high) / 2 * weight for low, high, weight in sizes) / total


def body_cycle(
    sizes: Sequence[SizeRange], bodies: Sequence[bytes], producer: int
) -> Optional[List[bytes]]:
    """The bodies producer ``producer`` sends in turn, or None when every message carries the same body.

    ``bodies`` (several files) are sent in turn, starting at a different one per
    producer; ``sizes`` are drawn as the module docstring says.
    """
    if bodies:
        if len(bodies) == 1:
            return None
        start = producer % len(bodies)
        return [bytes(b) for b in (*bodies[start:], *bodies[:start])]
    if not sizes or (len(sizes) == 1 and sizes[0][0] == sizes[0][1]):
        return None
    rng = random.Random(producer)
    weights = [weight for _, _, weight in sizes]
    length = max(16, min(CYCLE_LENGTH, int(CYCLE_BYTES / max(1.0, mean_size(sizes)))))
    picks = rng.choices(range(len(sizes)), weights=weights, k=length)
    cycle_sizes = [rng.randint(sizes[i][0], sizes[i][1]) for i in picks]
    filler = b"x" * max(cycle_sizes)
    return [filler[:n] for n in cycle_sizes]
