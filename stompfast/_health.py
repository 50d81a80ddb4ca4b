"""What a client reports to the people who run it: :class:`Health` (``client.health()``), :class:`DrainReport`.

``health()`` answers a readiness probe honestly: connected is not enough (a client
can be connected while nothing arrives, or while every handler is stuck), so it
also looks at the broker's heart-beats and at the running ``consume`` handlers.
``drain()`` returns a :class:`DrainReport`: what a graceful shutdown could not
finish, counted instead of dropped. The client's ``health()`` and ``drain()`` are
:func:`health_of` and :func:`drain` over what it hands them; neither sees the client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, List

import anyio

from ._receipt import PendingReceipt, await_receipts

if TYPE_CHECKING:  # pragma: no cover
    from ._consumer import ConsumerSet
    from ._link import Link

__all__ = ["DrainReport", "Health", "drain", "health_of"]


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


def health_of(state: str, connected: bool, link: "Link", now: float, consumers: "ConsumerSet", limit: float) -> Health:
    """``client.health(handler_limit=limit)``: the client's ``state`` (as ``repr`` says it), its current ``link``.

    ``now``: the loop's clock; ``consumers``: the client's ``consume()`` consumers.
    """
    interval = link.protocol.heart_beat[1] / 1000.0 if connected else 0.0
    running, wedged = consumers.handlers(limit)
    return Health(
        state=state,
        connected=connected,
        heartbeat_interval=interval,
        silence=link.silence(now) if interval else 0.0,
        reader_paused=link.reader_paused(),
        handlers_running=running,
        handlers_wedged=wedged,
    )


async def drain(
    timeout: float, consumers: "ConsumerSet", outstanding: Callable[[], List[PendingReceipt]],
    close: Callable[[], Awaitable[None]],
) -> DrainReport:
    """``client.drain(timeout)``: finish the consumers, await the receipts, ``close``; what did not finish.

    ``outstanding``: the receipts the client awaits now (asked once the consumers
    finished; none when it is not connected); ``close``: the client's ``aclose``.
    """
    deadline = anyio.current_time() + timeout
    unfinished, unhandled = await consumers.finish(deadline)
    receipts = outstanding()
    unconfirmed = await await_receipts(receipts, deadline) if receipts else 0
    await close()
    return DrainReport(
        handlers_unfinished=unfinished, messages_unhandled=unhandled, receipts_unconfirmed=unconfirmed
    )
