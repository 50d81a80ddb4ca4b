"""Reconnect policy and connection events (no I/O: the client drives them).

Theory of operation
-------------------
An *attempt* is one pass over the broker list, trying each broker once in order
(or shuffled, with ``randomize``). A broker counts as up only once it answered
CONNECTED (and, after a reconnect, confirmed every re-established
subscription), never merely because the TCP connection opened. Between failed
attempts the client sleeps ``delay(n)``: ``initial_delay * multiplier**n``,
capped at ``max_delay``, then spread by up to ``jitter`` of itself in either
direction, so that many clients cut off together do not return together.

The first connect makes ``connect_attempts`` attempts (default 1: a
misconfigured URL fails at once rather than retrying forever where nobody
sees it). After a session was established, a lost connection is retried
``max_attempts`` times (default ``None``: until it works or the client is
closed; every try is reported to ``on_event``).

A re-established session lost less than ``stable_after`` seconds after it came
up counts as one more failed attempt for the backoff (not toward ``max_attempts``), so the
delay does not start over: a flapping broker
(CONNECTED, then ERROR or a reset right after SUBSCRIBE, every time) sees the
delay grow to ``max_delay`` instead of a reconnect every ``initial_delay``. Only a
session that lasted ``stable_after`` resets the count.
"""

from __future__ import annotations

import random
from typing import Any, Dict, Optional

from ._config import check_positive
from .errors import ConfigurationError

__all__ = ["ConnectionEvent", "ReconnectPolicy", "backoff_delay"]


def backoff_delay(
    failed: int,
    initial: float,
    multiplier: float,
    max_delay: float,
    jitter: float,
    rng: Any = random,
    *,
    upward_only: bool = False,
) -> float:
    """Seconds to wait after the ``failed``-th consecutive failed attempt (1-based).

    ``initial * multiplier**(failed - 1)``, capped at ``max_delay``, then spread by up
    to ``jitter`` of itself: in either direction (:class:`ReconnectPolicy`'s, so that
    clients cut off together return apart), or with ``upward_only`` only longer, by 0
    to ``jitter`` of it (stomp.py's ``reconnect_sleep_jitter``, as the stomp.py layer
    needs it). The cap comes before the spread in both, as in stomp.py.
    """
    base: float = min(initial * multiplier ** max(failed - 1, 0), max_delay)
    if jitter:
        spread = rng.random() if upward_only else 2 * rng.random() - 1
        base *= 1 + jitter * spread
    return max(base, 0.0)


class ReconnectPolicy:
    """How an :class:`~stompfast.AsyncClient` retries the broker list.

    Args:
        enabled: re-establish a lost session (default True). When False a lost
            connection fails the client for good, as a plain connection would.
        max_attempts: attempts after a session was lost (None: no limit).
        connect_attempts: attempts for the first connect (None: no limit; the
            default 1 tries every broker of the list once).
        initial_delay, max_delay: seconds before the second attempt, and the cap.
        multiplier: growth of the delay per failed attempt (1: constant).
        jitter: fraction of the delay added or removed at random (0 to 1).
        randomize: shuffle the broker list before each attempt (ActiveMQ's
            ``randomize``); default False: the first URL is the primary.
        stable_after: seconds a session must last for its loss to start the
            backoff over (default 5); a shorter-lived session counts as a failed
            attempt for the delay (not toward ``max_attempts``).
    """

    __slots__ = (
        "connect_attempts",
        "enabled",
        "initial_delay",
        "jitter",
        "max_attempts",
        "max_delay",
        "multiplier",
        "randomize",
        "stable_after",
    )

    def __init__(
        self,
        *,
        enabled: bool = True,
        max_attempts: Optional[int] = None,
        connect_attempts: Optional[int] = 1,
        initial_delay: float = 0.1,
        max_delay: float = 30.0,
        multiplier: float = 2.0,
        jitter: float = 0.2,
        randomize: bool = False,
        stable_after: float = 5.0,
    ) -> None:
        for name, value in (("max_attempts", max_attempts), ("connect_attempts", connect_attempts)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ConfigurationError(f"{name} must be a positive int or None (no limit), not {value!r}")
        self.enabled = bool(enabled)
        self.max_attempts = max_attempts
        self.connect_attempts = connect_attempts
        self.initial_delay = check_positive("initial_delay", initial_delay)
        self.max_delay = check_positive("max_delay", max_delay)
        if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) or multiplier < 1:
            raise ConfigurationError(f"multiplier must be a number >= 1, not {multiplier!r}")
        self.multiplier = float(multiplier)
        if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or not 0 <= jitter <= 1:
            raise ConfigurationError(f"jitter must be a number from 0 to 1, not {jitter!r}")
        self.jitter = float(jitter)
        self.randomize = bool(randomize)
        self.stable_after = check_positive("stable_after", stable_after)

    @classmethod
    def from_failover_options(cls, options: Dict[str, Any], base: "ReconnectPolicy") -> "ReconnectPolicy":
        """``base`` with ActiveMQ ``failover:(...)?`` options applied over it."""
        kwargs = {name: getattr(base, name) for name in cls.__slots__}
        if "randomize" in options:
            kwargs["randomize"] = options["randomize"]
        if "initialReconnectDelay" in options:
            kwargs["initial_delay"] = max(options["initialReconnectDelay"], 0.001)
        if "maxReconnectDelay" in options:
            kwargs["max_delay"] = max(options["maxReconnectDelay"], 0.001)
        if "backOffMultiplier" in options:
            kwargs["multiplier"] = options["backOffMultiplier"]
        if options.get("useExponentialBackOff") is False:
            kwargs["multiplier"] = 1.0
        if "maxReconnectAttempts" in options:
            kwargs["max_attempts"] = options["maxReconnectAttempts"] or None
        if "startupMaxReconnectAttempts" in options:
            kwargs["connect_attempts"] = options["startupMaxReconnectAttempts"] or None
        return cls(**kwargs)

    def delay(self, failed: int, rng: Any = random) -> float:
        """Seconds to wait after the ``failed``-th consecutive failed attempt (1-based)."""
        return backoff_delay(failed, self.initial_delay, self.multiplier, self.max_delay, self.jitter, rng)

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"ReconnectPolicy({fields})"


class ConnectionEvent:
    """What happened to the connection, as passed to ``AsyncClient(on_event=...)``.

    ``kind`` is one of:

    * ``"connecting"``: an attempt to reach ``url`` begins (``attempt`` counts them);
    * ``"connected"``: ``url`` answered CONNECTED; the session is usable
      (``reconnected`` tells whether it replaced a lost one);
    * ``"connect_failed"``: that broker could not be used (``error`` says why);
    * ``"disconnected"``: an established session was lost (``error``) after
      ``uptime`` seconds. Pending receipts failed with it; ``dropped_frames``
      queued frames were never written and are gone; ``dropped_messages``
      buffered messages of client-ack subscriptions were discarded (the broker
      redelivers them); ``aborted_transactions`` transactions were aborted;
    * ``"reconnecting"``: the next attempt starts in ``delay`` seconds;
      ``attempt`` counts the failed attempts in a row, a session shorter than
      the policy's ``stable_after`` included (so a flapping broker shows it);
    * ``"gave_up"``: no attempt is left: the client has failed with ``error``.

    ``url`` never contains a passcode.
    """

    __slots__ = (
        "aborted_transactions",
        "attempt",
        "delay",
        "dropped_frames",
        "dropped_messages",
        "error",
        "kind",
        "reconnected",
        "uptime",
        "url",
    )

    def __init__(
        self,
        kind: str,
        url: Optional[str] = None,
        *,
        attempt: int = 0,
        error: Optional[BaseException] = None,
        delay: Optional[float] = None,
        reconnected: bool = False,
        dropped_frames: int = 0,
        dropped_messages: int = 0,
        aborted_transactions: int = 0,
        uptime: Optional[float] = None,
    ) -> None:
        self.kind = kind
        self.url = url
        self.attempt = attempt
        self.error = error
        self.delay = delay
        self.reconnected = reconnected
        self.dropped_frames = dropped_frames
        self.dropped_messages = dropped_messages
        self.aborted_transactions = aborted_transactions
        self.uptime = uptime

    def __repr__(self) -> str:
        parts = [repr(self.kind)]
        if self.url:
            parts.append(f"url={self.url!r}")
        if self.attempt:
            parts.append(f"attempt={self.attempt}")
        if self.delay is not None:
            parts.append(f"delay={self.delay:.3f}")
        if self.uptime is not None:
            parts.append(f"uptime={self.uptime:.3f}")
        if self.error is not None:
            parts.append(f"error={self.error!r}")
        return f"ConnectionEvent({', '.join(parts)})"
