"""What ``consume`` does with a message whose handler raised: retry it, then dead-letter it.

Brokers disagree about a NACK: RabbitMQ requeues the message (at once, for ever),
ActiveMQ Classic drops a non-persistent one, Artemis discards any. So the
default outcome of a handler failure is the client's own, the same on every
broker (docs/guarantees.md): the handler is called again on the same, still
unacknowledged message after a delay that grows (:class:`RetryPolicy`), up to
``attempts`` calls; then a persistent copy is published to a dead-letter
destination, with a receipt, and only then is the original acknowledged. A
crash between the two leaves the original unacknowledged: the broker redelivers
it, and the dead letter may be there twice, but never nowhere.

This module holds the decisions and the frames' contents, no I/O: the async
consumer (tasks) and the blocking one (threads) both act on them.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Callable, Dict, Mapping, Optional

from ._config import check_positive
from .errors import ConfigurationError

__all__ = [
    "DEAD_LETTER_HEADERS",
    "FailureLog",
    "RetryPolicy",
    "dead_letter_destination",
    "dead_letter_headers",
]

log = logging.getLogger("stompfast")

#: Headers a dead letter carries besides the original's (all prefixed ``sf-``).
DEAD_LETTER_HEADERS = ("sf-original-destination", "sf-original-message-id", "sf-attempts", "sf-error")

# The original's headers a dead letter does not copy: the ones that name its delivery
# (the broker sets its own on the copy), and its expiry (a dead letter must not vanish).
_NOT_COPIED = frozenset({
    "message-id", "subscription", "ack", "destination", "content-length", "redelivered", "receipt", "transaction",
    "expires", "expiration", "persistent", "timestamp",
    # RabbitMQ's, set again when the copy is routed
    "x-delivery-count", "x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason",
    "x-last-death-exchange", "x-last-death-queue", "x-last-death-reason",
})

#: The longest ``sf-error`` value (the exception's type and text, on one line).
MAX_ERROR_TEXT = 500


class RetryPolicy:
    """``consume``'s ``on_error``: call the handler again after a growing delay, then dead-letter.

    The default ``on_error`` of :meth:`AsyncClient.consume` and
    :meth:`Client.consume` is ``RetryPolicy()``. A message whose handler raised
    stays unacknowledged while it waits (it holds its worker: a failing
    downstream slows the consumer instead of spinning it) and is handed to the
    handler again, up to ``attempts`` calls in all. After the last one it is
    published, persistent, to ``dead_letter`` and then acknowledged.

    Args:
        attempts: handler calls per message, the first included (1: no retry).
        initial_delay: seconds before the second call.
        max_delay: the cap of the delay.
        multiplier: growth of the delay per failed call (1: constant).
        jitter: fraction of the delay added or removed at random (0 to 1).
        dead_letter: where exhausted messages go; None (the default) names one
            after the destination: ``/queue/jobs`` -> ``/queue/jobs.dlq``
            (:func:`dead_letter_destination`).
    """

    __slots__ = ("attempts", "dead_letter", "initial_delay", "jitter", "max_delay", "multiplier")

    def __init__(
        self,
        *,
        attempts: int = 5,
        initial_delay: float = 0.5,
        max_delay: float = 30.0,
        multiplier: float = 2.0,
        jitter: float = 0.1,
        dead_letter: Optional[str] = None,
    ) -> None:
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigurationError(f"attempts must be a positive int, not {attempts!r}")
        self.attempts = attempts
        self.initial_delay = float(check_positive("initial_delay", initial_delay))
        self.max_delay = float(check_positive("max_delay", max_delay))
        if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) or multiplier < 1:
            raise ConfigurationError(f"multiplier must be a number >= 1, not {multiplier!r}")
        self.multiplier = float(multiplier)
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0 <= jitter <= 1:
            raise ConfigurationError(f"jitter must be a number from 0 to 1, not {jitter!r}")
        self.jitter = float(jitter)
        if dead_letter is not None and (not isinstance(dead_letter, str) or not dead_letter):
            raise ConfigurationError(f"dead_letter must be a destination or None, not {dead_letter!r}")
        self.dead_letter = dead_letter

    def delay_after(self, failed_attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after the ``failed_attempt``-th call failed (1 for the first)."""
        delay = min(self.max_delay, self.initial_delay * self.multiplier ** (failed_attempt - 1))
        if self.jitter:
            delay *= 1 + self.jitter * (2 * rand() - 1)
        return delay

    def worst_case(self) -> float:
        """The longest a message can wait in all before it is dead-lettered (every delay at its most)."""
        return sum(
            min(self.max_delay, self.initial_delay * self.multiplier ** (n - 1)) * (1 + self.jitter)
            for n in range(1, self.attempts)
        )

    def dead_letter_for(self, destination: str) -> str:
        return self.dead_letter if self.dead_letter is not None else dead_letter_destination(destination)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RetryPolicy):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, name) for name in self.__slots__))

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"RetryPolicy({fields})"


def dead_letter_destination(destination: str) -> str:
    """The default dead-letter destination of ``destination``: a queue named after its last part.

    ``/queue/jobs`` -> ``/queue/jobs.dlq``; ``/topic/events`` -> ``/queue/events.dlq``
    (a topic's dead letters must stay until read); ``/exchange/x/key`` ->
    ``/queue/key.dlq``. Always a ``/queue/`` destination: on RabbitMQ a durable
    queue, on ActiveMQ and Artemis an anycast queue, each made on first use.
    """
    name = destination.rstrip("/").rsplit("/", 1)[-1] or "stompfast"
    return f"/queue/{name}.dlq"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def dead_letter_headers(
    headers: Mapping[str, str], destination: str, attempts: int, error: BaseException
) -> Dict[str, str]:
    """The headers of the dead letter of a message with ``headers``: its own, then where, how often and why."""
    copied = {name: value for name, value in headers.items() if name not in _NOT_COPIED}
    reason = _one_line(f"{type(error).__name__}: {error}")
    if len(reason) > MAX_ERROR_TEXT:
        reason = reason[: MAX_ERROR_TEXT - 3] + "..."
    copied.update({
        "persistent": "true",
        "sf-original-destination": destination,
        "sf-original-message-id": headers.get("message-id", ""),
        "sf-attempts": str(attempts),
        "sf-error": reason,
    })
    return copied


class FailureLog:
    """Logs handler failures with their tracebacks, at most ``burst`` records per ``window`` seconds.

    A storm of failures (a downstream that is down, a poison batch) cannot flood
    the log: past the limit, records are counted, and the next record logged says
    how many were left out. Safe from any thread (the blocking consumer's).
    """

    __slots__ = ("burst", "window", "clock", "_lock", "_window_start", "_in_window", "_left_out")

    def __init__(self, burst: int = 10, window: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.window = window
        self.clock = clock
        self._lock = threading.Lock()
        self._window_start = -float("inf")
        self._in_window = 0
        self._left_out = 0

    def failure(self, level: int, text: str, *args: Any, error: BaseException) -> None:
        """Log ``text % args`` with ``error``'s traceback at ``level``, unless the limit was reached."""
        if not log.isEnabledFor(level):
            return
        with self._lock:
            now = self.clock()
            if now - self._window_start >= self.window:
                self._window_start = now
                self._in_window = 0
            if self._in_window >= self.burst:
                self._left_out += 1
                return
            self._in_window += 1
            left_out, self._left_out = self._left_out, 0
        if left_out:
            text += " (%d earlier handler failures were not logged: at most %d records per %g s)"
            args = (*args, left_out, self.burst, self.window)
        log.log(level, text, *args, exc_info=(type(error), error, error.__traceback__))

    @property
    def left_out(self) -> int:
        """Failures not logged since the last record."""
        return self._left_out
