"""What a client reports to the people who run it: :class:`Health` (``client.health()``), :class:`DrainReport`.

``health()`` answers a readiness probe honestly: connected is not enough (a client
can be connected while nothing arrives, or while every handler is stuck), so it
also looks at the broker's heart-beats and at the running ``consume`` handlers.
``drain()`` returns a :class:`DrainReport`: what a graceful shutdown could not
finish, counted instead of dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DrainReport", "Health"]


@dataclass(frozen=True)
class Health:
    """A snapshot of whether a client is really working (``client.health()``)."""

    #: the client's state as ``repr`` says it ("connected", "reconnecting", "failed: ...", ...)
    state: str
    #: the connection is up (not connecting, reconnecting, failed or closed)
    connected: bool
    #: seconds between the broker's heart-beats, as agreed (0.0: none agreed)
    heartbeat_interval: float
    #: seconds since anything last arrived from the broker (0.0 when no heart-beats were agreed)
    silence: float
    #: the reader is stopped because a subscription's buffer is full (its consumer is not taking)
    reader_paused: bool
    #: ``consume`` handlers running now
    handlers_running: int
    #: ``consume`` handlers running for longer than the limit ``health()`` was given
    handlers_wedged: int

    @property
    def heartbeats_ok(self) -> bool:
        """The broker's heart-beats arrive: no more than twice their interval of silence (or none agreed).

        Twice: ActiveMQ spaces its beats up to twice the agreed interval. A paused
        reader reads nothing, so its silence proves nothing about the broker.
        """
        return not self.heartbeat_interval or self.reader_paused or self.silence <= 2 * self.heartbeat_interval

    @property
    def ready(self) -> bool:
        """Connected, heart-beats arriving, and no handler wedged: what a readiness probe should check."""
        return self.connected and self.heartbeats_ok and not self.handlers_wedged


@dataclass(frozen=True)
class DrainReport:
    """What ``client.drain(timeout)`` could not finish (all zero: a clean drain)."""

    #: ``consume`` handlers still running when the timeout passed (their messages stay unsettled)
    handlers_unfinished: int = 0
    #: messages buffered by the consumers and never handed to a handler (the broker redelivers them)
    messages_unhandled: int = 0
    #: receipts the broker had not confirmed when the timeout passed
    receipts_unconfirmed: int = 0

    @property
    def clean(self) -> bool:
        """Every handler finished and every receipt came."""
        return not (self.handlers_unfinished or self.receipts_unconfirmed)
